"""The plan updates (:mod:`runner.updates.plans`): what a plan records of its steps, decisions and retries."""

from __future__ import annotations

import json

import pytest

from runner.context import Instance, format_time
from runner.sql.store_sqlite import SQLiteStore
from tests.conftest import FakeClock
from tests.support.contexts import Contexts


@pytest.fixture
def contexts(store: SQLiteStore) -> Contexts:
    return Contexts(store)


def test_record_plan_keeps_the_inputs_from_the_secret_only(contexts: Contexts) -> None:
    params = {
        "plan_id": "p1",
        "recipe": "review",
        "recipe_version": 1,
        "recipe_sha256": "a" * 64,
        "content_sha256": "b" * 64,
        "controller_id": "ctl",
    }
    update = contexts.update(
        "record_plan", contexts.absent("plan/p1"), params=params, secrets={"inputs": json.dumps({"prompt": "hi"})}
    )
    assert update.data["inputs"] == {"prompt": "hi"} and "steps" not in update.data, "steps are parts, not data"
    assert update.data["parent"] is None and update.data["plan_id"] == "p1"


def test_each_record_is_its_own_part_and_private_output_goes_only_to_a_private_part(
    contexts: Contexts, clock: FakeClock
) -> None:
    plan = contexts.put("plan/p1", "running", {"plan_id": "p1"})
    update = contexts.update(
        "record_step",
        plan,
        params={
            "records": [
                {"step_id": "a", "record": {"state": "succeeded", "attempt": 1}},
                {"step_id": "b", "record": {"state": "running", "attempt": 1}},
            ]
        },
        secrets={"privates": json.dumps({"a": {"text": "output"}})},
    )
    now = format_time(clock.now)
    assert update.data == {}, "the plan's data (its header) is not rewritten"
    assert dict(update.parts) == {
        "steps/a": {"state": "succeeded", "attempt": 1, "at": now},
        "steps/b": {"state": "running", "attempt": 1, "at": now},
        "private/a": {"text": "output"},
    }
    assert list(update.parts)[:2] == ["steps/a", "steps/b"], "in the order given"
    single = contexts.update(
        "record_step",
        plan,
        params={"step_id": "b", "record": {"state": "running"}},
        secrets={"private": json.dumps({"text": "x"})},
    )
    assert dict(single.parts) == {"steps/b": {"state": "running", "at": now}, "private/b": {"text": "x"}}
    assert contexts.update("record_step", plan, params={"failure": None}).parts == {}, "no records: nothing"


def test_an_old_layout_plan_moves_its_steps_to_parts_on_its_next_record(contexts: Contexts) -> None:
    old = {"plan_id": "p1", "steps": {"a": {"state": "succeeded"}}, "private": {"a": {"text": "t"}}}
    plan = contexts.put("plan/p1", "running", old)
    update = contexts.update("record_step", plan, params={"step_id": "b", "record": {"state": "running"}})
    assert update.data == {"steps": None, "private": None}
    assert set(update.parts) == {"steps/a", "private/a", "steps/b"}
    assert update.parts["steps/a"] == {"state": "succeeded"} and update.parts["private/a"] == {"text": "t"}


def _with_parts(contexts: Contexts, instance_id: str, state: str, parts: dict[str, dict[str, object]]) -> Instance:
    with contexts.store.write() as tx:
        current = tx.get(instance_id) or Instance(instance_id, "plan", "absent", 0, {})
        plan = tx.put(current, state, {"plan_id": "p1", "failure": "b broke", "retries": []})
        for key, value in parts.items():
            tx.put_part(instance_id, key, value)
    return plan


@pytest.mark.parametrize("layout", ["parts", "data"])
def test_a_decision_records_who_decided_what_and_why(contexts: Contexts, clock: FakeClock, layout: str) -> None:
    waiting = {"state": "waiting", "attempt": 1}
    if layout == "parts":
        plan = _with_parts(contexts, "plan/p1", "paused", {"steps/gate": waiting})
    else:
        plan = contexts.put("plan/p1", "paused", {"steps": {"gate": waiting}})
    update = contexts.update("record_decision", plan, params={"step_id": "gate", "approve": 1, "reason": "looks good"})
    assert update.parts["steps/gate"] == {
        "state": "waiting",
        "attempt": 1,
        "decision": {"approve": True, "reason": "looks good", "actor": "tester", "at": format_time(clock.now)},
    }


@pytest.mark.parametrize("layout", ["parts", "data"])
def test_a_retry_resets_the_failed_step_and_later_ones_at_their_next_attempt(
    contexts: Contexts, clock: FakeClock, layout: str
) -> None:
    steps = {
        "a": {"state": "succeeded", "attempt": 1},
        "b": {"state": "failed", "attempt": 2},
        "c": {"state": "skipped", "attempt": 1},
    }
    if layout == "parts":
        plan = _with_parts(contexts, "plan/p1", "failed", {f"steps/{k}": v for k, v in steps.items()})
    else:
        plan = contexts.put("plan/p1", "failed", {"steps": steps, "failure": "b broke", "retries": []})
    update = contexts.update("record_retry", plan, params={"reset": ["b", "c", "never-ran"], "from_step": "b"})
    now = format_time(clock.now)
    written = {k: v for k, v in update.parts.items() if k != "steps/a"}
    assert written == {
        "steps/b": {"state": "pending", "attempt": 3, "at": now},
        "steps/c": {"state": "pending", "attempt": 2, "at": now},
    }
    assert update.parts.get("steps/a", steps["a"]) == steps["a"], "an earlier step keeps its record"
    assert "steps/never-ran" not in update.parts
    assert update.data["retries"] == [{"at": now, "from_step": "b", "failure": "b broke"}]
    assert (update.data["failure"], update.data["finished_at"]) == (None, None)
