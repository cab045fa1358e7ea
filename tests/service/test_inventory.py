"""Inventory (component ``service.inventory``): status, what needs attention, reconcile and cleanup of reviewers."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from runner.agents.kinds import Kinds
from runner.agents.process import ProcessHost
from runner.service import (
    ControllerInput,
    DeliveryError,
    ReviewerCloseInput,
    ReviewerListInput,
)
from tests.service.agents_world import FlakyStartHost, LostReplyHost, World, refused


def test_needs_attention_lists_reserved_receipts(make_world: Callable[..., World]) -> None:
    world = make_world(lambda store, agents: LostReplyHost(store, agents, Kinds.load([])))
    world.start()
    with pytest.raises(DeliveryError):
        world.relay("echo x")
    attention = world.service.inventory.status()["needs_attention"]
    assert [(a["machine"], a["state"]) for a in attention] == [("receipt", "reserved")]


def test_close_failure_then_reconcile(make_world: Callable[..., World]) -> None:
    world = make_world(lambda store, agents: FlakyStartHost(store, agents, Kinds.load([])))
    world.host.start = lambda *a, **k: ProcessHost.start(world.host, *a, **k)  # type: ignore[method-assign, assignment]
    world.start()
    world.host.close_fails = True  # type: ignore[attr-defined]
    error = refused(
        "agent_close_failed",
        lambda: world.service.reviewers.close(ReviewerCloseInput("ctl", world.credential, "rev", 0)),
    )
    assert error.details["lease"]["state"] == "close_failed"
    ProcessHost.close(world.host, "p1")
    done = world.service.inventory.reviewer_reconcile(ControllerInput("ctl", world.credential, apply=True))
    assert [(a["action"], a["to"]) for a in done.actions] == [("reconciled", "closed")]


def test_cleanup_is_a_dry_run_by_default_and_closes_only_settled_matching_agents(world: World) -> None:
    world.start("idle1")
    world.start("busy")
    world.start("waiting")
    world.relay("sleep 2", target="busy")
    blocked = world.relay("block", target="waiting")
    world.collect(blocked.token)
    dry = world.service.inventory.reviewer_cleanup(ControllerInput("ctl", world.credential))
    assert {a["name"]: a["action"] for a in dry.actions} == {"idle1": "would_close", "busy": "skip", "waiting": "skip"}
    assert len(world.service.reviewers(ReviewerListInput("ctl"))) == 3
    applied = world.service.inventory.reviewer_cleanup(ControllerInput("ctl", world.credential, apply=True))
    assert {a["name"]: a["action"] for a in applied.actions}["idle1"] == "closed"
    assert sorted(x.data["name"] for x in world.service.reviewers(ReviewerListInput("ctl"))) == ["busy", "waiting"]
