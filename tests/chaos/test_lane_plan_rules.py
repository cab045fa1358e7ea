"""The chaos checker's lane and plan rules on hand-made histories: a clean history passes, and each rule
names the anomaly it is for."""

from __future__ import annotations

import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from chaos import lanes, plans
from chaos.history import Op

LANES = "sqlite:lanes/repo"
PLANS = "sqlite:plans/a"
L1, L2, L3 = (f"0000000{n}-0000-4000-8000-000000000000" for n in (1, 2, 3))
M1 = "000000aa-0000-4000-8000-000000000000"


def _op(ops: list[Op], key: str, op: str, start: float, end: float | None, status: str = "ok", **fields: Any) -> Op:
    args = fields.pop("args", {})
    code = fields.pop("code", None)
    process = "sqlite/A/w" if key == LANES else "sqlite/A/p"
    made = Op(len(ops), process, 1, key, op, args, start, end, status, code, fields)  # type: ignore[arg-type]
    ops.append(made)
    return made


def _start(ops: list[Op], lane: str, name: str, owned: list[str], start: float, end: float | None, **kw: Any) -> Op:
    args = {"controller": "wA", "lane": lane, "name": name, "worktree": f"/w/{name}", "owned": owned, "locked": []}
    args["locked"] = kw.pop("locked", [])
    status = kw.pop("status", "ok")
    result = {"lane": lane, "state": "active"} if status == "ok" else {}
    return _op(ops, LANES, "start_writer", start, end, status, args=args, **result, **kw)


def _release(ops: list[Op], lane: str, name: str, start: float, end: float | None, status: str = "ok") -> Op:
    args = {"controller": "wA", "lane": lane, "name": name, "worktree": f"/w/{name}"}
    result = {"state": "released"} if status == "ok" else {}
    return _op(ops, LANES, "release_writer", start, end, status, args=args, **result)


def _settle(ops: list[Op], at: float, *final: list[Any]) -> Op:
    return _op(ops, LANES, "settle_lanes", at, at + 0.1, args={"controller": "wA"}, lanes=list(final))


def _clean_lanes() -> list[Op]:
    """Two overlapping lanes one after the other, a refused start between, an ambiguous one settled."""
    ops: list[Op] = []
    _start(ops, L1, "lane-a0", ["src"], 0, 1)
    _start(ops, L2, "lane-a1", ["src/core"], 1.5, 2, status="refused", code="scope_overlap")
    _op(ops, LANES, "lanes", 2, 2.1, lanes=[[L1, "lane-a0", "active", True]])
    _release(ops, L1, "lane-a0", 3, 4)
    _start(ops, L2, "lane-a1", ["src/core"], 5, 6)
    _start(ops, L3, "lane-a0", ["tests"], 6, None, status="unknown", code="killed")
    _op(ops, LANES, "lanes", 7, 7.1, lanes=[[L2, "lane-a1", "active", True]])
    _settle(
        ops,
        10,
        [L1, "lane-a0", "released", False],
        [L2, "lane-a1", "active", True],
        [L3, "lane-a0", "failed_closed", False],
    )
    return ops


def test_a_clean_lane_history_passes() -> None:
    assert lanes.check(_clean_lanes()) == []


def test_two_live_lanes_whose_scopes_overlap_are_caught() -> None:
    ops = _clean_lanes()
    ops[1] = Op(
        1, "sqlite/B/w", 1, LANES, "start_writer", ops[1].args, 1.5, 2, "ok", None, {"lane": L2, "state": "active"}
    )
    anomalies = lanes.check(ops)
    assert [(a.kind, a.op.args["lane"], a.before[0].args["lane"]) for a in anomalies] == [("overlapping_lanes", L2, L1)]
    assert "[['src', 'src/core']]" in anomalies[0].message


def test_an_owned_scope_inside_a_locked_one_overlaps_too() -> None:
    ops: list[Op] = []
    _start(ops, L1, "lane-a0", ["tests"], 0, 1, locked=["src/core/a.py"])
    _start(ops, L2, "lane-b0", ["src/core"], 2, 3)
    _settle(ops, 10, [L1, "lane-a0", "active", True], [L2, "lane-b0", "active", True])
    assert [a.kind for a in lanes.check(ops)] == ["overlapping_lanes"]


def test_lanes_that_may_not_have_been_live_together_are_not_judged() -> None:
    ops: list[Op] = []
    _start(ops, L1, "lane-a0", ["src"], 0, 1)
    _release(ops, L1, "lane-a0", 1.5, None, "unknown")  # it may have ended L1 at once
    _start(ops, L2, "lane-a1", ["src"], 2, 3)
    _settle(ops, 10, [L1, "lane-a0", "released", False], [L2, "lane-a1", "active", True])
    assert lanes.check(ops) == []


def test_a_released_lane_seen_live_afterwards_is_caught() -> None:
    ops = _clean_lanes()
    _op(ops, LANES, "lanes", 4.5, 4.6, lanes=[[L1, "lane-a0", "active", True]])
    anomalies = lanes.check(ops)
    assert [(a.kind, a.op.id, a.before[0].op) for a in anomalies] == [("released_lane_live", 8, "release_writer")]


def test_a_released_lane_still_holding_its_scopes_is_caught() -> None:
    ops = _clean_lanes()
    ops[4].result.update(blocker=L1, state="active")  # L2's start refused beside the released L1
    ops[4].status, ops[4].code = "refused", "scope_overlap"  # type: ignore[assignment]
    del ops[6]  # (and L2 then never live)
    ops[-1].result["lanes"][1] = [L2, "lane-a1", "failed_closed", False]
    anomalies = lanes.check(ops)
    assert [(a.kind, a.op.op, a.before[0].args["lane"]) for a in anomalies] == [
        ("released_lane_live", "start_writer", L1)
    ]
    assert "refused a start beside it" in anomalies[0].message


def test_a_lane_neither_live_with_its_agent_nor_released_after_the_settle_is_caught() -> None:
    ops = _clean_lanes()
    ops[-1].result["lanes"][1] = [L2, "lane-a1", "active", False]  # its agent's pane is gone
    ops[-1].result["lanes"][2] = [L3, "lane-a0", "provisioning", False]  # a start the settle left
    anomalies = lanes.check(ops)
    assert [(a.kind, a.op.args["lane"]) for a in anomalies] == [("lane_unsettled", L2), ("lane_unsettled", L3)]
    del ops[-1]  # never settled at all
    assert [a.kind for a in lanes.check(ops)] == ["lane_unsettled"]


def test_an_acknowledged_lane_that_vanished_is_unsettled() -> None:
    ops = _clean_lanes()
    del ops[-1].result["lanes"][1]
    assert [(a.kind, a.op.args["lane"]) for a in lanes.check(ops)] == [("lane_unsettled", L2)]


@pytest.mark.parametrize("damage", ["commit", "stash", "reset", "delete", "clean"])
def test_a_release_that_touched_its_worktree_is_caught(tmp_path: Path, damage: str) -> None:
    prints = lanes.make_repo(tmp_path, ["A"])
    worktree = tmp_path / "wt-lane-a0"
    (worktree / "src" / "core" / "a.py").write_text("a = 2\n")  # the agent's uncommitted work
    before = lanes.fingerprint(worktree)
    assert prints[str(worktree)]["exists"] and before["files"]["keep.log"]
    if damage == "commit":
        lanes.git(worktree, "commit", "-qam", "checkpoint")
    elif damage == "stash":
        lanes.git(worktree, "stash", "-q")
    elif damage == "reset":
        lanes.git(worktree, "reset", "-q", "--hard")
    elif damage == "delete":
        lanes.git(tmp_path / "repo", "worktree", "remove", "--force", str(worktree))
    else:
        subprocess.run(["git", "clean", "-fdxq"], cwd=worktree, check=True)
    after = lanes.fingerprint(worktree)
    ops: list[Op] = []
    _start(ops, L1, "lane-a0", ["src"], 0, 1)
    _release(ops, L1, "lane-a0", 2, 3)
    _settle(ops, 10, [L1, "lane-a0", "released", False])
    ops[0].args["worktree"] = ops[1].args["worktree"] = str(worktree)
    assert lanes.check(ops, {str(worktree): (before, before)}) == []
    anomalies = lanes.check(ops, {str(worktree): (before, after)})
    assert [(a.kind, a.op.op) for a in anomalies] == [("worktree_touched", "release_writer")]


# --- plans ---------------------------------------------------------------------------------------------


EVERY_ONCE = dict.fromkeys(plans.ONCE, 1)
ALL_SUCCEEDED = dict.fromkeys(plans.STEPS, "succeeded")


def _plan_history(effects: dict[str, int] | None = None, state: str = "succeeded", steps: Any = None) -> list[Op]:
    """A plan run killed mid-way, resumed, then the final resume, read and count of its effects."""
    ops: list[Op] = []
    args = {"plan": "plan-a0", "marker": M1}
    _op(ops, PLANS, "run_plan", 0, None, "unknown", args=args, code="killed")
    _op(ops, PLANS, "run_plan", 1, 3, args=args, state="succeeded", created=False)
    _op(ops, PLANS, "run_plan", 10, 10.1, args=args, state="succeeded", created=False)
    _op(ops, PLANS, "plan_state", 10.1, 10.2, args={"plan": "plan-a0"}, state=state, steps=steps or ALL_SUCCEEDED)
    counts = {"plan-a0": effects or EVERY_ONCE}
    _op(ops, PLANS, "plan_effects", 10.2, 10.3, args={"controllers": ["plan-a0"]}, effects=counts)
    return ops


def test_a_clean_plan_history_passes() -> None:
    assert plans.check(_plan_history(), Counter({M1: 1})) == ([], [])


def test_a_step_whose_effect_happened_twice_is_caught() -> None:
    anomalies, _ = plans.check(_plan_history({**EVERY_ONCE, "receipt relay:success": 2}), Counter({M1: 1}))
    assert [a.kind for a in anomalies] == ["step_twice"]
    anomalies, _ = plans.check(_plan_history(), Counter({M1: 2}))  # the prompt delivered twice
    assert [a.kind for a in anomalies] == ["step_twice"] and "delivered" in anomalies[0].message


def test_a_plan_unfinished_after_the_final_resume_is_caught() -> None:
    running = {**ALL_SUCCEEDED, "collect": "running"}
    del running["close"], running["release-controller"]
    anomalies, _ = plans.check(_plan_history(state="running", steps=running), Counter({M1: 1}))
    assert [a.kind for a in anomalies] == ["plan_unfinished"] and "collect" in anomalies[0].message
    anomalies, _ = plans.check(_plan_history({**EVERY_ONCE, "reviewer close:success": 0}), Counter({M1: 1}))
    assert [a.kind for a in anomalies] == ["plan_unfinished"] and "close" in anomalies[0].message  # a step never ran
    anomalies, _ = plans.check(_plan_history(), Counter())
    assert [a.kind for a in anomalies] == ["plan_unfinished"]  # its prompt never delivered
    ops = [o for o in _plan_history() if o.op != "plan_state"]
    assert [a.kind for a in plans.check(ops, Counter({M1: 1}))[0]] == ["plan_unfinished"]  # never read


def test_a_plan_paused_for_a_person_is_reported_not_an_anomaly() -> None:
    ops = _plan_history(state="paused", steps={"acquire": "running"})
    ops[3].result["paused"] = "step relay: the receipt is reserved (delivered, never confirmed): abandon it"
    anomalies, paused = plans.check(ops, Counter({M1: 1}))
    assert anomalies == [] and paused == [f"plan-a0: {ops[3].result['paused']}"]
    ops[3].result["paused"] = None  # paused with no reason a person could act on
    assert [a.kind for a in plans.check(ops, Counter({M1: 1}))[0]] == ["plan_unfinished"]
