"""The plan guards (:mod:`runner.guards.plans`): one runner at a time, judged on real process records."""

from __future__ import annotations

import pytest

from runner import lockstatus
from runner.sql.store_sqlite import SQLiteStore
from tests.support.contexts import Contexts


@pytest.fixture
def contexts(store: SQLiteStore) -> Contexts:
    return Contexts(store)


def test_a_plan_taken_by_a_live_runner_is_busy_unless_that_runner_is_gone(contexts: Contexts) -> None:
    me, other = lockstatus.current(), {**lockstatus.current(), "pid": 1, "start_time": 0}
    free = contexts.put("plan/p1", "submitted", {"plan_id": "p1"})
    assert contexts.guard("plan_runner_free", free, params={"runner": me}) is None
    held = contexts.put("plan/p1", "running", {"plan_id": "p1", "runner": other})
    assert contexts.guard("plan_runner_free", held, params={"runner": {**other}}) is None, "its own runner again"
    busy = contexts.refusal("plan_runner_free", held, params={"runner": me}, observations={"runner_status": "active"})
    assert (busy.code, busy.details) == ("plan_busy", {"runner": other, "runner_status": "active"})
    assert "pid 1 on" in busy.message
    stale = {"runner_status": "stale"}
    assert contexts.guard("plan_runner_free", held, params={"runner": me}, observations=stale) is None


def test_only_the_runner_holding_the_plan_records_its_steps(contexts: Contexts) -> None:
    me = lockstatus.current()
    plan = contexts.put("plan/p1", "running", {"plan_id": "p1", "runner": me})
    assert contexts.guard("plan_runner", plan, params={"runner": dict(me)}) is None
    usurped = contexts.refusal("plan_runner", plan, params={"runner": {**me, "start_time": -1}})
    assert (usurped.code, usurped.details) == ("plan_runner_changed", {"runner": me})
    assert contexts.refusal("plan_runner", plan, params={}).code == "plan_runner_changed"
