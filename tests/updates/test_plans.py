"""The plan updates (:mod:`runner.updates.plans`): what a plan records of its steps, decisions and retries."""

from __future__ import annotations

import json

import pytest

from runner.context import format_time
from runner.store.sqlite import SQLiteStore
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
    assert update.data["inputs"] == {"prompt": "hi"} and update.data["steps"] == {}
    assert update.data["parent"] is None and update.data["plan_id"] == "p1"


def test_steps_accumulate_and_private_output_goes_only_to_the_private_field(
    contexts: Contexts, clock: FakeClock
) -> None:
    plan = contexts.put("plan/p1", "running", {"steps": {"a": {"state": "succeeded", "attempt": 1}}})
    update = contexts.update(
        "record_step",
        plan,
        params={"step_id": "b", "record": {"state": "running", "attempt": 1}},
        secrets={"private": json.dumps({"text": "output"})},
    )
    assert update.data["steps"] == {
        "a": {"state": "succeeded", "attempt": 1},
        "b": {"state": "running", "attempt": 1, "at": format_time(clock.now)},
    }
    assert update.data["private"] == {"b": {"text": "output"}}
    plain = contexts.update("record_step", plan, params={"step_id": "b", "record": {"state": "running"}})
    assert "private" not in plain.data


def test_a_decision_records_who_decided_what_and_why(contexts: Contexts, clock: FakeClock) -> None:
    plan = contexts.put("plan/p1", "paused", {"steps": {"gate": {"state": "waiting", "attempt": 1}}})
    update = contexts.update("record_decision", plan, params={"step_id": "gate", "approve": 1, "reason": "looks good"})
    assert update.data["steps"]["gate"] == {
        "state": "waiting",
        "attempt": 1,
        "decision": {"approve": True, "reason": "looks good", "actor": "tester", "at": format_time(clock.now)},
    }


def test_a_retry_resets_the_failed_step_and_later_ones_at_their_next_attempt(
    contexts: Contexts, clock: FakeClock
) -> None:
    steps = {
        "a": {"state": "succeeded", "attempt": 1},
        "b": {"state": "failed", "attempt": 2},
        "c": {"state": "skipped", "attempt": 1},
    }
    plan = contexts.put("plan/p1", "failed", {"steps": steps, "failure": "b broke", "retries": []})
    update = contexts.update("record_retry", plan, params={"reset": ["b", "c", "never-ran"], "from_step": "b"})
    now = format_time(clock.now)
    assert update.data["steps"] == {
        "a": {"state": "succeeded", "attempt": 1},
        "b": {"state": "pending", "attempt": 3, "at": now},
        "c": {"state": "pending", "attempt": 2, "at": now},
    }
    assert update.data["retries"] == [{"at": now, "from_step": "b", "failure": "b broke"}]
    assert (update.data["failure"], update.data["finished_at"]) == (None, None)
