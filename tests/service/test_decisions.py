"""Decisions (issue 15): what waits on a person, each with the operation that settles it, and the
decide of a plan's decision through the very operation ``corral plans decide`` calls.

Real SQLite, the real process host and its scripted agent (a blocked agent, an ambiguous delivery),
and plans paused on an approval step (the recipes of ``tests/plans/test_approval.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest

from runner.agents.kinds import Kinds
from runner.context import Instance, format_time
from runner.definitions.recipes import RecipeLibrary
from runner.errors import InputError, NotFoundError, RefusedError
from runner.plans.keeper import MemoryKeeper
from runner.plans.ops import OPERATIONS
from runner.service import AbandonInput, DecideInput, DecisionNotPlanError, Service
from runner.service.decisions import RESERVED_STALE_SECONDS, ambiguity, parse_decision_id
from runner.service.inputs.plans import PlanResumeInput, PlanRunInput, PlanSubmitInput
from runner.service.plans import Plans
from tests.conftest import FakeClock
from tests.plans.test_approval import recipes_in
from tests.service.agents_world import LostReplyHost, World, refused
from tests.support.specs import shared_library
from tests.support.stores import open_test_store


def with_plans(world: World, recipes: RecipeLibrary) -> Service:
    """The world's store and host under a service that also has a plans component (as the runtime
    assembles it)."""
    return Service(
        world.store,
        shared_library(),
        actor="test",
        hosts=lambda name: world.host,
        kinds=world.kinds,
        plans=lambda service: Plans(service, recipes, MemoryKeeper(), OPERATIONS),
    )


def paused(service: Service, plan_id: str, recipe: str = "gate") -> Instance:
    service.plans.submit(PlanSubmitInput({"plan": plan_id, "recipe": recipe, "controller": "ctl", "inputs": {}}))
    plan = anyio.run(service.plans.run, PlanRunInput(plan_id))
    assert plan.state == "paused"
    return plan


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    made = World(tmp_path)
    yield made
    made.store.close()


def test_nothing_waits_on_a_fresh_store(world: World) -> None:
    assert world.service.decisions() == []
    world.start()
    assert world.service.decisions() == [], "an idle agent waits on nobody"


def test_an_approval_is_listed_decided_with_its_actor_and_then_gone(world: World, tmp_path: Path) -> None:
    service = with_plans(world, RecipeLibrary([recipes_in(tmp_path / "recipes")]))
    plan = paused(service, "ship-1")
    (found,) = service.decisions()
    waiting = plan.data["waiting_on"]
    assert found == {
        "id": "plan:ship-1:approve",
        "kind": "plan",
        "waits_on": "approval",
        "plan": "ship-1",
        "step": "approve",
        "why": plan.data["paused_reason"],
        "since": waiting["since"],
        "prompt": "Ship release 1.2?",
        "deadline": waiting["deadline"],
        "expired": False,
        "settle": {
            "operation": "decide",
            "decide": True,
            "approve": [True, False],
            "cli": "corral plans decide ship-1 --step approve --approve|--reject --reason TEXT",
        },
    }
    decided = service.decisions.decide(DecideInput("plan:ship-1:approve", True, "looks right", actor="carol@http"))
    assert {k: decided[k] for k in ("id", "kind", "plan", "step", "approve", "reason", "actor", "plan_state")} == {
        "id": "plan:ship-1:approve",
        "kind": "plan",
        "plan": "ship-1",
        "step": "approve",
        "approve": True,
        "reason": "looks right",
        "actor": "carol@http",
        "plan_state": "paused",
    }
    assert "corral plans resume ship-1" in decided["next"]
    assert service.decisions() == [], "decided: it waits on a runner now, not on a person"
    (event,) = [e for e in world.store.events() if e.instance_id == "plan/ship-1" and e.trigger == "decide"]
    assert event.actor == "carol@http", "the deciding actor is the event's"
    refused("plan_not_waiting", lambda: service.decisions.decide(DecideInput("plan:ship-1:approve", False, "again")))
    final = anyio.run(service.plans.resume, PlanResumeInput("ship-1"))
    assert final.state == "succeeded"
    assert final.data["steps"]["approve"]["outputs"]["decided_by"] == "carol@http"


def test_a_rejection_through_decide_fails_the_step_when_the_plan_resumes(world: World, tmp_path: Path) -> None:
    service = with_plans(world, RecipeLibrary([recipes_in(tmp_path / "recipes")]))
    paused(service, "ship-2")
    service.decisions.decide(DecideInput("plan:ship-2:approve", False, "not today"))
    final = anyio.run(service.plans.resume, PlanResumeInput("ship-2"))
    assert (final.state, final.data["failure"]["code"]) == ("failed", "decision_rejected")
    assert service.decisions() == []


def test_an_expired_approval_is_listed_to_resume_not_to_decide(tmp_path: Path) -> None:
    clock = FakeClock()
    recipes = RecipeLibrary([recipes_in(tmp_path / "recipes")])
    with open_test_store(tmp_path, clock=clock) as store:
        service = Service(
            store,
            shared_library(),
            actor="test",
            plans=lambda s: Plans(s, recipes, MemoryKeeper(), OPERATIONS),
        )
        paused(service, "late")
        clock.advance(61)
        (found,) = service.decisions()
        assert found["expired"] is True and found["deadline"] == format_time(clock.now - timedelta(seconds=1))
        assert found["settle"]["operation"] == "resume" and found["settle"]["decide"] is False
        refused(
            "approval_timeout", lambda: service.decisions.decide(DecideInput("plan:late:approve", True, "too late"))
        )


def test_a_blocked_agent_is_listed_with_how_to_close_it_and_not_decided_here(world: World) -> None:
    lease = world.start()
    (result,) = world.collect(world.relay("echo I need a person\nblock").token)
    assert result.receipt.data["settled_status"] == "blocked"
    seq = result.receipt.data["settled_seq"]
    (found,) = world.service.decisions()
    assert (found["id"], found["kind"], found["machine"], found["name"]) == (
        f"agent:{lease.id}",
        "agent",
        "reviewer",
        "rev",
    )
    assert found["seq"] == seq and found["controller"] == "ctl"
    assert found["settle"]["operation"] == "close_blocked" and found["settle"]["decide"] is False
    assert f"--expect-seq {seq} --blocked --reason" in found["settle"]["cli"]
    with pytest.raises(DecisionNotPlanError) as caught:
        world.service.decisions.decide(DecideInput(found["id"], True, "fine"))
    assert caught.value.code == "decision_not_plan" and caught.value.category == "refused"
    assert "--blocked" in caught.value.details["next"]


def test_an_ambiguous_delivery_is_listed_until_abandoned(make_world: Callable[..., World]) -> None:
    world = make_world(lambda store, agents: LostReplyHost(store, agents, Kinds.load([])))
    try:
        world.start()
        error = refused("delivery_ambiguous", lambda: world.relay("sleep 0.5\necho maybe"))
        receipt = error.details["receipt"]
        (found,) = world.service.decisions()
        receipt_id = receipt["token"].rpartition(".")[2]
        assert (found["id"], found["kind"], found["state"], found["delivery"]) == (
            f"receipt:{receipt_id}",
            "receipt",
            "reserved",
            "ambiguous",
        )
        assert found["receipt"] == receipt["token"] and "unconfirmed" in found["why"]
        assert found["settle"]["operation"] == "abandon" and receipt["token"] in found["settle"]["cli"]
        with pytest.raises(DecisionNotPlanError) as caught:
            world.service.decisions.decide(DecideInput(found["id"], False, "no"))
        assert "abandon" in caught.value.details["next"]
        anyio.run(world.host.wait, "p1", 1, 10)
        world.service.receipts.abandon(AbandonInput("ctl", world.credential, receipt["token"], "seen finished"))
        assert world.service.decisions() == []
    finally:
        world.store.close()


def _receipt(state: str, **data: Any) -> Instance:
    return Instance("receipt/r1", "receipt", state, 2, data)


def test_a_reserved_receipt_is_ambiguous_once_recorded_so_or_left_too_long() -> None:
    clock = FakeClock()
    now = clock.now
    fresh = format_time(now - timedelta(seconds=1))
    old = format_time(now - timedelta(seconds=RESERVED_STALE_SECONDS + 1))
    assert ambiguity(_receipt("reserved", reserved_at=fresh, message="delivery unconfirmed"), now) == "ambiguous"
    assert ambiguity(_receipt("reserved", reserved_at=fresh), now) is None, "a relay may be handing over"
    assert ambiguity(_receipt("reserved", reserved_at=old), now) == "unrecorded"
    assert ambiguity(_receipt("pending", reserved_at=old, message="x"), now) is None


@pytest.mark.parametrize(
    ("decision_id", "parsed"),
    [
        ("plan:p-1:approve", ("plan", "p-1", "approve")),
        ("agent:reviewer/x", ("agent", "reviewer/x", "")),
        ("receipt:abc", ("receipt", "abc", "")),
    ],
)
def test_decision_ids_parse(decision_id: str, parsed: tuple[str, str, str]) -> None:
    assert parse_decision_id(decision_id) == parsed


@pytest.mark.parametrize("decision_id", ["plan:p-1", "plan::s", "lease:x", "agent:", "nonsense"])
def test_an_unknown_decision_id_is_refused_before_anything_is_read(world: World, decision_id: str) -> None:
    with pytest.raises(NotFoundError) as caught:
        world.service.decisions.decide(DecideInput(decision_id, True, "x"))
    assert caught.value.code == "decision_unknown"


def test_bad_decide_inputs_are_refused(world: World, tmp_path: Path) -> None:
    with pytest.raises(InputError):
        DecideInput("", True, "x")
    with pytest.raises(InputError):
        DecideInput("plan:a:b", "yes", "x")  # type: ignore[arg-type]  # reason: what a surface may send
    service = with_plans(world, RecipeLibrary([recipes_in(tmp_path / "recipes")]))
    paused(service, "ship-3")
    with pytest.raises(InputError) as caught:
        service.decisions.decide(DecideInput("plan:ship-3:approve", True, " "))
    assert caught.value.details["field"] == "reason"
    with pytest.raises(RefusedError) as refusal:
        service.decisions.decide(DecideInput("plan:ship-3:before", True, "x"))
    assert refusal.value.code == "plan_not_waiting"
    with pytest.raises(NotFoundError) as unknown:
        service.decisions.decide(DecideInput("plan:nope:approve", True, "x"))
    assert unknown.value.code == "plan_unknown"
