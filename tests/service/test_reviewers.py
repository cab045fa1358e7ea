"""Reviewer leases end to end (component ``service.reviewers``): the real process host, the scripted
agent, real processes."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable

import pytest

from runner.agents.kinds import Kinds
from runner.errors import InputError, RefusedError
from runner.service import (
    ControllerInput,
    RelayInput,
    ReviewerCloseInput,
    ReviewerListInput,
    ReviewerStartInput,
)
from tests.service.agents_world import FlakyStartHost, KindlessHost, World, refused


def test_full_review_flow(world: World) -> None:
    lease = world.start()
    assert (lease.state, lease.data["pane_id"], lease.data["started_seq"]) == ("active", "p1", 0)
    assert lease.data["cwd"] == str(world.worktree.resolve())
    receipt = world.relay("please review the worktree")
    assert receipt.state == "pending"
    assert (receipt.data["before_seq"], receipt.data["after_seq"]) == (0, 1)
    assert receipt.data["prompt_sha256"] == hashlib.sha256(b"please review the worktree").hexdigest()
    (result,) = world.collect(receipt.token)
    assert result.receipt.state == "completed" and result.receipt.data["settled_seq"] == 2
    assert "main.py: 1 lines" in result.output and "verdict: 1 files reviewed" in result.output
    assert result.receipt.data["output_sha256"] == hashlib.sha256(result.output.encode()).hexdigest()
    closed = world.service.reviewers.close(ReviewerCloseInput("ctl", world.credential, "rev", 2))
    assert closed.lease.state == "closed" and closed.output == result.output
    assert closed.lease.data["capture_sha256"] == hashlib.sha256(closed.output.encode()).hexdigest()
    triggers = [(e.instance_id.split("/")[0], e.trigger, e.to_state) for e in world.store.events()]
    assert triggers == [
        ("controller", "acquire", "active"),
        ("reviewer", "start", "provisioning"),
        ("reviewer", "start:success", "active"),
        ("receipt", "relay", "reserved"),
        ("receipt", "relay:success", "pending"),
        ("receipt", "collect", "completed"),
        ("reviewer", "close", "closing"),
        ("reviewer", "close:success", "closed"),
    ]
    text = json.dumps([e.to_dict() for e in world.store.events()])
    assert "please review" not in text and "verdict" not in text, "no prompt or output in the event log"
    assert world.service.reviewers(ReviewerListInput("ctl")) == []


def test_close_with_a_stale_cursor_is_refused(world: World) -> None:
    world.start()
    world.collect(world.relay("echo one").token)
    refused(
        "cursor_mismatch", lambda: world.service.reviewers.close(ReviewerCloseInput("ctl", world.credential, "rev", 0))
    )
    assert [x.state for x in world.service.reviewers(ReviewerListInput("ctl"))] == ["active"]
    assert world.service.reviewers.close(ReviewerCloseInput("ctl", world.credential, "rev", 2)).lease.state == "closed"


def test_close_is_refused_while_a_receipt_is_open_or_the_agent_works(world: World) -> None:
    world.start()
    receipt = world.relay("wait-file go")  # working at the close below: held until released
    refused(
        "agent_not_settled",
        lambda: world.service.reviewers.close(ReviewerCloseInput("ctl", world.credential, "rev", 1)),
    )
    (world.worktree / "go").write_text("")
    world.collect(receipt.token)
    blocked = world.relay("block")
    world.collect(blocked.token)
    assert world.observe().status == "blocked"
    refused(
        "agent_not_settled",
        lambda: world.service.reviewers.close(ReviewerCloseInput("ctl", world.credential, "rev", 4)),
    )


def test_failed_start_closes_its_pane_or_is_orphaned_until_reconciled(make_world: Callable[..., World]) -> None:
    world = make_world(lambda store, agents: FlakyStartHost(store, agents, Kinds.load([])))
    error = refused("agent_start_failed", world.start)
    assert error.details["lease"]["state"] == "failed_closed"
    assert world.host.list() == [], "the pane it got was closed"
    world.host.close_fails = True  # type: ignore[attr-defined]
    error = refused("agent_start_failed", lambda: world.start("rev2"))
    assert error.details["lease"]["state"] == "orphaned"
    pane = error.details["lease"]["pane_id"]
    # Reconcile closes the orphaned start's pane itself (fenced); while closing keeps failing, it stays orphaned.
    again = world.service.inventory.reviewer_reconcile(ControllerInput("ctl", world.credential, apply=True))
    assert [(a["action"], a["to"]) for a in again.actions] == [("reconciled", "orphaned")]
    assert [o.pane_id for o in world.host.list()] == [pane]
    world.host.close_fails = False  # type: ignore[attr-defined]
    done = world.service.inventory.reviewer_reconcile(ControllerInput("ctl", world.credential, apply=True))
    assert [(a["action"], a["to"], a["closed_pane"]) for a in done.actions] == [("reconciled", "failed_closed", pane)]
    assert world.host.list() == [], "the orphaned pane is closed"
    assert {x.state for x in world.service.reviewers(ReviewerListInput("ctl", include_ended=True))} == {"failed_closed"}


def test_a_host_refusing_the_kind_fails_the_start_cleanly(make_world: Callable[..., World]) -> None:
    world = make_world(lambda store, agents: KindlessHost(store, agents, Kinds.load([])))
    # A refusal (issue 24: it was agent_start_failed, exit 1): nothing started, nothing left behind.
    error = refused("agent_kind_unknown", world.start)
    assert isinstance(error, RefusedError) and error.details["started"] is False
    assert error.details["lease"]["state"] == "failed_closed" and world.host.list() == []
    assert "no agent kind" in error.details["lease"]["failure"]


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({"kind": "nosuchkind"}, "agent_kind_unknown"),
        ({"cwd": "relative/dir"}, "cwd_invalid"),
        ({"cwd": "/no/such/directory"}, "cwd_invalid"),
    ],
)
def test_start_refusals_write_nothing(world: World, change: dict[str, str], code: str) -> None:
    fields = {"name": "rev", "kind": "script", "cwd": str(world.worktree), **change}
    refused(code, lambda: world.service.reviewers.start(ReviewerStartInput("ctl", world.credential, **fields)))
    assert world.store.find("reviewer") == [] and world.host.list() == []


def test_name_taken_and_bad_inputs(world: World) -> None:
    world.start()
    refused("agent_name_taken", world.start)
    with pytest.raises(InputError) as bad:
        ReviewerStartInput("ctl", world.credential, "Bad Name", "script", "/tmp")
    assert bad.value.details["field"] == "name"
    with pytest.raises(InputError) as model:
        world.service.reviewers.start(
            ReviewerStartInput("ctl", world.credential, "m", "script", str(world.worktree), model="opus")
        )
    assert model.value.details["field"] == "model"
    with pytest.raises(InputError):
        RelayInput("ctl", world.credential, "rev", "   ")
