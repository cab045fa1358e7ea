"""Reconcile after crashes: a start killed after its pane exists, a close killed half-way, and the
operator's fenced close of a pane no lease holds (machine ``pane``). Issue 9: no worktree is blocked
for ever by a pane that nothing can close.

Uses the coverage world (the real process host with faults at its boundary, a real store): a
``RunnerDied`` is the coordinator dying at that point, as after ``kill -9``; its recorded starter is a
process that no longer exists.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runner.service import PaneCloseInput
from tests.test_transition_coverage import RunnerDied, World, refused, release_lane, start_lane


@pytest.fixture
def world(tmp_path: Path) -> Any:
    w = World(tmp_path)
    yield w
    w.shutdown()


@pytest.fixture
def worktree(world: World, hermetic_git: None) -> Path:
    from tests.support.gitrepo import feature_worktree

    return feature_worktree(world.root)


def live_panes(world: World) -> list[str]:
    return [o.pane_id for o in world.host.list()]


def actions(world: World, machine: str = "reviewer") -> list[tuple[Any, ...]]:
    return [(a["state"], a["action"], a.get("to")) for a in world.reconcile(machine)]


def test_a_start_killed_after_its_pane_exists_is_found_by_its_nonce_and_closed(world: World) -> None:
    """reviewer reconcile provisioning -> discarding, reconcile:success discarding -> failed_closed."""
    world.host.die_after_create = True
    with pytest.raises(RunnerDied):
        world.start()
    world.host.die_after_create = False
    lease = world.only("reviewer")
    assert lease.state == "provisioning" and lease.data.get("pane_id") is None
    (pane,) = live_panes(world)
    assert world.host.get(pane).nonce == lease.data["start_nonce"], "the nonce was recorded before the pane"
    assert actions(world) == [("provisioning", "reconciled", "failed_closed")]
    assert live_panes(world) == [], "reconcile closed the pane the dead start left"
    assert world.edges("reviewer")[-2:] == [
        ("reconcile", "provisioning", "discarding"),
        ("reconcile:success", "discarding", "failed_closed"),
    ]
    assert world.start().state == "active", "the name and directory are free again"


def test_reconcile_never_races_a_start_that_is_still_running(world: World) -> None:
    world.keep_starting()
    world.host.die_after_create = True
    with pytest.raises(RunnerDied):
        world.start()  # "died" in-process: the recorded starter (this process) still runs
    world.host.die_after_create = False
    (action,) = world.reconcile()
    assert (action["action"], action["code"]) == ("skip", "start_in_progress")
    assert len(live_panes(world)) == 1 and world.only("reviewer").state == "provisioning"


def test_a_discarding_close_killed_before_or_after_the_close_is_finished_by_reconcile(world: World) -> None:
    """reviewer reconcile discarding -> discarding (pane still there) and discarding -> failed_closed (gone)."""
    world.host.die_after_create = True
    with pytest.raises(RunnerDied):
        world.start()
    world.host.die_after_create = False
    world.host.close_fault = "die"
    with pytest.raises(RunnerDied):
        world.reconcile()
    world.host.close_fault = None
    assert world.only("reviewer").state == "discarding" and len(live_panes(world)) == 1
    assert actions(world) == [("discarding", "reconciled", "failed_closed")]
    assert world.edges("reviewer")[-2:] == [
        ("reconcile", "discarding", "discarding"),
        ("reconcile:success", "discarding", "failed_closed"),
    ]
    assert live_panes(world) == []

    world.host.die_after_create = True
    with pytest.raises(RunnerDied):
        world.start("rev2")
    world.host.die_after_create = False
    world.host.close_fault = "die_after"
    with pytest.raises(RunnerDied):
        world.reconcile()
    world.host.close_fault = None
    assert live_panes(world) == [], "the pane was closed; only the outcome is missing"
    assert actions(world) == [("discarding", "reconciled", "failed_closed")]
    assert world.edges("reviewer")[-1] == ("reconcile", "discarding", "failed_closed")


def test_a_discarding_close_that_fails_or_is_unsure_stays_for_reconcile(world: World) -> None:
    """reviewer reconcile:failure discarding -> orphaned, reconcile:ambiguous discarding -> discarding."""
    world.host.die_after_create = True
    with pytest.raises(RunnerDied):
        world.start()
    world.host.die_after_create = False
    world.host.close_fault = "unexpected"
    assert actions(world) == [("provisioning", "reconciled", "discarding")]
    assert world.edges("reviewer")[-1] == ("reconcile:ambiguous", "discarding", "discarding")
    world.host.close_fault = "error"
    assert actions(world) == [("discarding", "reconciled", "orphaned")]
    assert world.edges("reviewer")[-1] == ("reconcile:failure", "discarding", "orphaned")
    world.host.close_fault = None
    assert actions(world) == [("orphaned", "reconciled", "failed_closed")]
    assert live_panes(world) == []


def only_live(world: World, machine: str = "reviewer") -> Any:
    live = [i for i in world.store.find(machine) if i.state not in ("closed", "failed_closed", "released")]
    assert len(live) <= 1
    return live[0] if live else None


def test_a_close_recorded_but_unfinished_is_finished_at_its_cursor(world: World) -> None:
    """reviewer reconcile closing -> closing and its success, failure and ambiguous outcomes."""
    for fault, expected in (("unexpected", "closing"), ("error", "close_failed"), (None, "closed")):
        world.start("rev")
        world.host.close_fault = "die"
        with pytest.raises(RunnerDied):
            world.close("rev")
        assert only_live(world).state == "closing"
        world.host.close_fault = fault
        assert [(a["action"], a["to"]) for a in world.reconcile()] == [("reconciled", expected)]
        assert world.edges("reviewer")[-1][1:] == ("closing", expected)
        world.host.close_fault = None
        if expected == "closing":
            assert [a["to"] for a in world.reconcile()] == ["closed"]
        elif expected == "close_failed":
            assert world.close("rev").lease.state == "closed", "close_failed: the owner closes again"
        assert only_live(world) is None


def test_a_close_is_not_finished_if_the_agent_moved_since_the_capture(world: World) -> None:
    import anyio

    from runner.agents.process import ProcessHost

    lease = world.start()
    world.host.close_fault = "die"
    with pytest.raises(RunnerDied):
        world.close()
    world.host.close_fault = None
    pane = lease.data["pane_id"]
    ProcessHost.prompt(world.host, pane, "echo moved")  # typed into it around corral
    anyio.run(world.host.wait, pane, 1, 30)
    (action,) = world.reconcile()
    assert action["action"] == "skip" and action["code"] == "agent_present"
    assert world.only("reviewer").state == "closing", "nothing touched: a person decides"
    assert pane in live_panes(world)


def test_writer_lanes_reconcile_the_same_way(world: World, worktree: Path) -> None:
    """writer reconcile provisioning -> discarding -> failed_closed (+ failure, ambiguous, discarding),
    and releasing -> releasing with its outcomes."""
    world.host.die_after_create = True
    with pytest.raises(RunnerDied):
        start_lane(world, worktree)
    world.host.die_after_create = False
    refused("worktree_taken", lambda: start_lane(world, worktree, "beta"))
    world.host.close_fault = "unexpected"
    assert actions(world, "writer") == [("provisioning", "reconciled", "discarding")]
    world.host.close_fault = "die"
    with pytest.raises(RunnerDied):
        world.reconcile("writer")
    world.host.close_fault = "error"
    assert actions(world, "writer") == [("discarding", "reconciled", "orphaned")]
    world.host.close_fault = "die_after"
    with pytest.raises(RunnerDied):
        world.reconcile("writer")
    world.host.close_fault = None
    assert actions(world, "writer") == [("discarding", "reconciled", "failed_closed")]
    edges = world.edges("writer")
    for edge in (
        ("reconcile", "provisioning", "discarding"),
        ("reconcile:ambiguous", "discarding", "discarding"),
        ("reconcile", "discarding", "discarding"),
        ("reconcile:failure", "discarding", "orphaned"),
        ("reconcile", "orphaned", "discarding"),
        ("reconcile", "discarding", "failed_closed"),
    ):
        assert edge in edges, edge

    world.host.die_after_create = True
    with pytest.raises(RunnerDied):
        start_lane(world, worktree, "gamma")
    world.host.die_after_create = False
    assert actions(world, "writer") == [("provisioning", "reconciled", "failed_closed")]
    assert ("reconcile:success", "discarding", "failed_closed") in world.edges("writer")

    for fault, expected in (("unexpected", "releasing"), ("error", "release_failed"), (None, "released")):
        start_lane(world, worktree, "delta")
        world.host.close_fault = "die"
        with pytest.raises(RunnerDied):
            release_lane(world, worktree, "delta")
        world.host.close_fault = fault
        assert [(a["action"], a["to"]) for a in world.reconcile("writer")] == [("reconciled", expected)]
        world.host.close_fault = None
        if expected == "releasing":
            assert [a["to"] for a in world.reconcile("writer")] == ["released"]
        elif expected == "release_failed":
            assert release_lane(world, worktree, "delta").lease.state == "released"
    assert (worktree / "src" / "app.py").read_text() == "print('app')\n", "the worktree is untouched"


def pane_close(world: World, pane: str, seq: int = 0, **changes: Any) -> Any:
    fields = {
        "expected_name": "rev",
        "expected_kind": "script",
        "expected_cwd": str(world.cwd.resolve()),
        "expected_state_change_seq": seq,
        **changes,
    }
    return world.service.inventory.pane_close(PaneCloseInput("ctl", world.credential, pane, **fields))


def orphan_pane(world: World, name: str = "rev") -> str:
    """A pane corral started and no lease holds (by pane id): its start died after creating it."""
    world.host.die_after_create = True
    with pytest.raises(RunnerDied):
        world.start(name)
    world.host.die_after_create = False
    (pane,) = [o.pane_id for o in world.host.list() if o.name == name]
    return pane


def test_an_operator_closes_an_unleased_pane_fenced_and_recorded(world: World) -> None:
    """pane close absent -> closing -> closed; refusals: leased, wrong identity, wrong cursor."""
    pane = orphan_pane(world)
    refused("agent_gone", lambda: pane_close(world, "p999"))
    leased = world.start("held")
    refused("pane_leased", lambda: pane_close(world, leased.data["pane_id"], expected_name="held"))
    refused("identity_changed", lambda: pane_close(world, pane, expected_name="other"))
    refused("cursor_mismatch", lambda: pane_close(world, pane, seq=3))
    closed = pane_close(world, pane, reason="the start was killed; the pane is mine")
    assert closed.state == "closed" and closed.data["closing_seq"] == 0
    assert pane not in [o.pane_id for o in world.host.list()]
    assert world.edges("pane")[-2:] == [("close", "absent", "closing"), ("close:success", "closing", "closed")]


def test_an_operator_close_that_fails_or_is_unsure(world: World) -> None:
    """pane close:failure, close:ambiguous, then reconcile closing -> closing and closing -> closed."""
    pane = orphan_pane(world)
    world.host.close_fault = "error"
    error = refused("agent_close_failed", lambda: pane_close(world, pane))
    assert error.details["lease"]["state"] == "close_failed"
    world.host.close_fault = "unexpected"
    error = refused("agent_close_failed", lambda: pane_close(world, pane))
    assert error.details["lease"]["state"] == "closing"
    for fault, expected in (("unexpected", "closing"), ("error", "close_failed")):
        world.host.close_fault = fault
        assert [a.get("to") for a in world.reconcile("pane")] == [expected]
    world.host.close_fault = None
    assert pane in [o.pane_id for o in world.host.list()]
    closed = pane_close(world, pane)
    assert closed.state == "closed"

    pane = orphan_pane(world, "rev2")
    world.host.close_fault = "die"
    with pytest.raises(RunnerDied):
        pane_close(world, pane, expected_name="rev2")
    world.host.close_fault = None
    assert [a.get("to") for a in world.reconcile("pane")] == ["closed"]
    pane = orphan_pane(world, "rev3")
    world.host.close_fault = "die_after"
    with pytest.raises(RunnerDied):
        pane_close(world, pane, expected_name="rev3")
    world.host.close_fault = None
    assert [a.get("to") for a in world.reconcile("pane")] == ["closed"]
    edges = world.edges("pane")
    for edge in (
        ("close:failure", "closing", "close_failed"),
        ("close:ambiguous", "closing", "closing"),
        ("reconcile:ambiguous", "closing", "closing"),
        ("reconcile:failure", "closing", "close_failed"),
        ("reconcile:success", "closing", "closed"),
        ("reconcile", "closing", "closed"),
    ):
        assert edge in edges, edge


def test_a_blocked_writer_is_released_only_on_an_operators_decision(world: World, worktree: Path) -> None:
    import anyio

    from runner.service import AbandonInput, WriterReleaseInput

    lane = start_lane(world, worktree)
    receipt = world.relay("block", target="alpha")
    anyio.run(world.host.wait, lane.data["pane_id"], 1, 30)
    world.service.receipts.abandon(AbandonInput("ctl", world.credential, receipt.token, "a person decides"))
    facts = world.service.writers.preflight(str(worktree))
    args = ("ctl", world.credential, "alpha", 2, facts["head"], facts["status_sha256"], "ck/alpha", "c" * 64)
    refused("agent_not_settled", lambda: world.service.writers.release(WriterReleaseInput(*args)))
    released = world.service.writers.release(WriterReleaseInput(*args, blocked_reason="needs a human"))
    assert released.lease.state == "released" and released.lease.data["decision"]["reason"] == "needs a human"
    assert (worktree / "src" / "app.py").read_text() == "print('app')\n"


def test_reconcile_is_a_dry_run_by_default_that_plans_from_the_guards_and_changes_nothing(world: World) -> None:
    """Issue 10: without apply, reconcile reports per lease what it would do and why, and fires nothing."""
    from runner.service import ControllerInput

    world.host.die_after_create = True
    with pytest.raises(RunnerDied):
        world.start()
    world.host.die_after_create = False
    lease = world.only("reviewer")
    (pane,) = live_panes(world)
    events_before = len(world.store.events())
    dry = world.service.inventory.reconcile(ControllerInput("ctl", world.credential), "reviewer")
    assert dry.applied is False
    (plan,) = dry.actions
    assert plan["lease"] == lease.id and plan["state"] == "provisioning"
    assert plan["action"] == "would_reconcile" and plan["to"] == "failed_closed"
    assert plan["via"] == "discarding" and plan["effects"] == ["close_agent"]
    assert plan["would_close_pane"] == pane and "close it" in plan["why"]
    assert len(world.store.events()) == events_before, "a dry run writes nothing"
    assert world.only("reviewer").state == "provisioning" and live_panes(world) == [pane], "and acts on nothing"

    other = world.service.inventory.reconcile(
        ControllerInput("ctl", world.credential, apply=True, leases=("reviewer/00000000-0000-0000-0000-000000000000",)),
        "reviewer",
    )
    assert [a["action"] for a in other.actions] == ["skip"], "a lease not asked for is left alone"
    assert world.only("reviewer").state == "provisioning"

    done = world.service.inventory.reconcile(
        ControllerInput("ctl", world.credential, apply=True, leases=(lease.id,)), "reviewer"
    )
    assert [(a["action"], a["to"]) for a in done.actions] == [("reconciled", "failed_closed")]
    assert live_panes(world) == []


def test_a_dry_run_reports_the_guard_that_would_refuse(world: World) -> None:
    from runner.service import ControllerInput

    world.keep_starting()
    world.host.die_after_create = True
    with pytest.raises(RunnerDied):
        world.start()  # the recorded starter (this process) still runs
    world.host.die_after_create = False
    dry = world.service.inventory.reconcile(ControllerInput("ctl", world.credential), "reviewer")
    (plan,) = dry.actions
    assert dry.applied is False and (plan["action"], plan["code"]) == ("skip", "start_in_progress")


def test_a_lease_filter_that_is_not_a_lease_id_is_invalid(world: World) -> None:
    from runner.errors import InputError
    from runner.service import ControllerInput

    with pytest.raises(InputError):
        ControllerInput("ctl", world.credential, apply=True, leases=("rev",))


def test_an_orphaned_start_whose_pane_vanished_is_planned_then_settled_without_an_effect(world: World) -> None:
    """reviewer reconcile orphaned -> failed_closed (agent_gone): the dry run names no effect."""
    from runner.service import ControllerInput

    world.host.die_after_create = True
    with pytest.raises(RunnerDied):
        world.start()
    world.host.die_after_create = False
    world.host.close_fault = "error"
    assert actions(world) == [("provisioning", "reconciled", "orphaned")]
    world.host.close_fault = None
    (pane,) = live_panes(world)
    world.host.close(pane)  # closed outside corral
    (plan,) = world.service.inventory.reconcile(ControllerInput("ctl", world.credential), "reviewer").actions
    assert (plan["state"], plan["action"], plan["to"]) == ("orphaned", "would_reconcile", "failed_closed")
    assert "effects" not in plan and "would_close_pane" not in plan
    assert actions(world) == [("orphaned", "reconciled", "failed_closed")]
    assert world.edges("reviewer")[-1] == ("reconcile", "orphaned", "failed_closed")
