"""A store written before plan steps became parts (issue 13) still reads, resumes and retries.

``legacy/store.sql`` is a schema-version-2 database made by that older corral's own code path
(``legacy/make_store.py``): plan ``interrupted`` was killed while step ``s1`` ran, plan ``broken``
failed at ``s1``; both keep every step record in the plan's data. Opened by this code, the file
migrates forward; the plans read as before (both layouts are read), and the first run or retry of a
plan moves its records to parts in the same transition, after which the header holds none.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import anyio
import pytest

from runner import lockstatus
from runner.definitions.recipes import RecipeLibrary
from runner.plans.keeper import MemoryKeeper
from runner.plans.ops import OPERATIONS
from runner.service import Service
from runner.service.inputs.plans import PlanListInput, PlanRetryInput, PlanRunInput, PlanShowInput
from runner.service.plans import Plans
from runner.sql.store_sqlite import SCHEMA_VERSION, SQLiteStore
from tests.support.plans import step_records
from tests.support.specs import shared_library

LEGACY = Path(__file__).with_name("legacy")


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """The old store, its plans' runner made a process of this host that is gone (the fixture's own
    host and boot are another machine's: its runner could not be judged from here)."""
    path = tmp_path / "corral.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.executescript((LEGACY / "store.sql").read_text())
    me = lockstatus.current()
    gone = {**me, "start_time": int(me["start_time"]) - 1}
    conn.execute("UPDATE instances SET data = json_set(data, '$.runner', json(?))", (json.dumps(gone),))
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 2
    conn.close()
    return path


def plans_over(store: SQLiteStore, tmp_path: Path) -> Plans:
    service = Service(store, shared_library(), actor="tester")
    return Plans(service, RecipeLibrary([LEGACY / "recipes"]), MemoryKeeper(), OPERATIONS)


def raw_plan(db: Path, plan_id: str) -> tuple[dict[str, object], list[str]]:
    """The plan row's data and its part keys, straight from the file."""
    conn = sqlite3.connect(db)
    try:
        (data,) = conn.execute("SELECT data FROM instances WHERE id = ?", (f"plan/{plan_id}",)).fetchone()
        keys = [
            k for (k,) in conn.execute("SELECT key FROM instance_parts WHERE instance_id = ?", (f"plan/{plan_id}",))
        ]
    finally:
        conn.close()
    return json.loads(data), keys


def test_the_old_file_migrates_and_its_plans_read_as_they_did(db: Path, tmp_path: Path) -> None:
    with SQLiteStore(db) as store:
        assert store.info()["schema_version"] == SCHEMA_VERSION
        plans = plans_over(store, tmp_path)
        interrupted = plans.plan("interrupted")
        steps = interrupted.data["steps"]
        assert (interrupted.state, list(steps)) == ("running", ["s0", "s1"])
        assert (steps["s0"]["state"], steps["s0"]["outputs"], steps["s1"]["state"]) == (
            "succeeded",
            {"n": 1},
            "running",
        )
        shown = plans.show(PlanShowInput("broken"))
        assert shown.plan.state == "failed" and shown.plan.data["steps"]["s1"]["error"]["code"] == "broke"
        listed = {p.data["plan_id"]: p for p in plans.list(PlanListInput())}
        assert {k: len(p.data["steps"]) for k, p in listed.items()} == {"broken": 2, "interrupted": 2}
        rows = plans.list_rows(PlanListInput())  # the JSON listing reads an old plan's records in its data
        assert [(r["plan"], r["state"], r["steps"]) for r in rows] == [
            ("broken", "failed", 2),
            ("interrupted", "running", 2),
        ]
    data, keys = raw_plan(db, "interrupted")
    assert "s1" in data["steps"] and keys == [], "reading rewrote nothing"  # type: ignore[operator]


def test_an_interrupted_old_plan_resumes_its_step_in_flight_and_moves_to_parts(db: Path, tmp_path: Path) -> None:
    with SQLiteStore(db) as store:
        plans = plans_over(store, tmp_path)
        before = store.events()[-1].seq
        heard: list[dict[str, object]] = []
        final = anyio.run(plans.run, PlanRunInput("interrupted"), heard.append)
        assert final.state == "succeeded"
        assert {k: (r["state"], r["outputs"]) for k, r in final.data["steps"].items()} == {
            "s0": ("succeeded", {"n": 1}),
            "s1": ("succeeded", {"n": 1}),
            "s2": ("succeeded", {"n": 1}),
        }, "s1 and s2 got s0's output from the old layout"
        assert [e["event"] for e in heard if e.get("step") == "s1"] == ["step_resumed", "step_succeeded"]
        assert "s0" not in [e.get("step") for e in heard], "a settled step does not run again"
        later = [e for e in store.events(before) if e.instance_id == "plan/interrupted"]
        # flow.pass is pure: s2 gets no running record, and both outcomes ride on the finish.
        assert [(s, r["state"]) for s, r in step_records(e.payload for e in later)] == [
            ("s1", "succeeded"),
            ("s2", "succeeded"),
        ]
        assert [e.trigger for e in later] == ["start", "finish"]
        start = later[0]
        assert start.trigger == "start" and set(start.payload["changed"]["steps"]) == {"s0", "s1"}
    data, keys = raw_plan(db, "interrupted")
    assert data["steps"] is None and data["private"] is None, "the header holds no step records any more"
    assert keys == ["steps/s0", "steps/s1", "steps/s2"]


def test_a_failed_old_plan_is_retried_from_its_failed_step(db: Path, tmp_path: Path) -> None:
    with SQLiteStore(db) as store:
        plans = plans_over(store, tmp_path)
        redriven = plans.retry(PlanRetryInput("broken"))
        assert redriven.state == "running"
        assert plans.plan("broken").data["steps"]["s1"]["state"] == "pending"
        final = anyio.run(plans.run, PlanRunInput("broken"))
        assert final.state == "failed"
        steps = final.data["steps"]
        assert (steps["s0"]["attempt"], steps["s0"]["state"]) == (1, "succeeded"), "the step before keeps its record"
        assert (steps["s1"]["attempt"], steps["s1"]["state"]) == (2, "failed"), "the failed step ran afresh"
        assert len(final.data["retries"]) == 1
    data, keys = raw_plan(db, "broken")
    assert data["steps"] is None and keys == ["steps/s0", "steps/s1"]
