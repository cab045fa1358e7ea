"""``wait-any`` over many targets (issue 13): set-up in one snapshot and one observation per host, the
wait itself one slot query per tick, and the same answers and refusals as before.

A real store, the real process host and the scripted agent (``tests.service.agents_world``); the
statements the store's connection runs are counted with ``sqlite3``'s trace callback.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

import anyio
import pytest

from runner.agents.sqlite_slots import SQLiteSlots
from runner.service import ReviewerListInput, WaitAnyInput
from runner.service.checks import WAIT_TARGETS_MAX
from runner.service.views import WaitAnyResult
from runner.store.sqlite import SQLiteStore, connection_of
from tests.service.agents_world import World, refused

MANY = 64


@contextmanager
def statements(store: SQLiteStore) -> Iterator[list[str]]:
    seen: list[str] = []
    with store.read() as reader:
        conn, _ = connection_of(reader)
    conn.set_trace_callback(seen.append)
    try:
        yield seen
    finally:
        conn.set_trace_callback(None)


@pytest.fixture
def many(world: World) -> World:
    for n in range(MANY):
        world.start(f"r{n}")
    return world


def _panes(world: World) -> dict[str, str]:
    return {lease.data["name"]: lease.data["pane_id"] for lease in world.service.reviewers(ReviewerListInput("ctl"))}


def _settle_elsewhere(world: World, pane_id: str) -> None:
    """The agent's slot moved to done by another connection (as its supervisor would)."""
    with SQLiteStore(world.store.path) as other:
        slots = SQLiteSlots(other)
        with slots.read() as reader:
            slot = reader.slot(pane_id)
        assert slot is not None
        with slots.write() as tx:
            tx.put_slot(replace(slot, status="done", seq=slot.seq + 1, exit_status=0), slot.seq)


def test_wait_any_takes_64_targets() -> None:
    assert WAIT_TARGETS_MAX == MANY


def test_of_64_targets_the_one_that_settles_wins_with_its_output(many: World) -> None:
    world = many
    world.relay("echo only r37", target="r37")
    targets = tuple((f"r{n}", 1 if n == 37 else 0) for n in range(MANY))
    result = anyio.run(world.service.wait_any, WaitAnyInput("ctl", world.credential, targets, 20))
    assert [(w.target, w.observation.status, w.observation.seq) for w in result.winners] == [("r37", "done", 2)]
    assert result.winners[0].output.strip() == "only r37"


def test_setting_up_64_targets_reads_the_store_once_and_observes_once(many: World) -> None:
    """The fence and every lease from one snapshot, every cursor-less target's cursor in one query; none
    is settled-and-new, so --fresh waits, and the one that settles after the call wins."""
    world = many
    panes = _panes(world)
    targets = tuple((f"r{n}", None) for n in range(MANY))
    with statements(world.store) as seen:
        entries, ready = world.service.waits._targets(WaitAnyInput("ctl", world.credential, targets, 20, fresh=True))
    assert ready == [] and [(e[0], e[2], e[3]) for e in entries] == [(f"r{n}", panes[f"r{n}"], 0) for n in range(MANY)]
    assert len([s for s in seen if s.startswith("BEGIN")]) == 2, seen
    (slot_read,) = [s for s in seen if "agent_slots" in s]
    assert "options" not in slot_read, "the set-up reads where each target is (cursors), no observation"

    def settle_later() -> None:
        time.sleep(0.2)
        _settle_elsewhere(world, panes["r5"])

    async def wait_then_settle() -> WaitAnyResult:
        async with anyio.create_task_group() as group:
            group.start_soon(anyio.to_thread.run_sync, settle_later)
            return await world.service.wait_any(WaitAnyInput("ctl", world.credential, targets, 20, fresh=True))

    result = anyio.run(wait_then_settle)
    assert [(w.target, w.observation.seq) for w in result.winners] == [("r5", 1)]


def test_settled_targets_without_a_cursor_win_at_once_in_target_order(many: World) -> None:
    world = many
    panes = _panes(world)
    for name in ("r50", "r7"):
        _settle_elsewhere(world, panes[name])
    targets = tuple((f"r{n}", None) for n in (63, 50, 1, 7))
    result = anyio.run(world.service.wait_any, WaitAnyInput("ctl", world.credential, targets, 20))
    assert [(w.target, w.observation.status, w.observation.seq) for w in result.winners] == [
        ("r63", "idle", 0),
        ("r50", "done", 1),
        ("r1", "idle", 0),
        ("r7", "done", 1),
    ], "idle is settled too: every bare target settled at the call wins"


def test_the_first_failing_target_is_refused_as_before(many: World) -> None:
    world = many
    panes = _panes(world)
    world.host.close(panes["r2"])
    gone = refused(
        "agent_gone",
        lambda: anyio.run(
            world.service.wait_any, WaitAnyInput("ctl", world.credential, (("r1", 0), ("r2", None), ("nope", None)), 1)
        ),
    )
    assert gone.details["target"] == "r2"
    unknown = refused(
        "target_unknown",
        lambda: anyio.run(
            world.service.wait_any, WaitAnyInput("ctl", world.credential, (("nope", None), ("r2", None)), 1)
        ),
    )
    assert unknown.details["target"] == "nope"
    timed_out = refused(
        "wait_timeout",
        lambda: anyio.run(world.service.wait_any, WaitAnyInput("ctl", world.credential, (("r1", 0), ("r3", 0)), 0.3)),
    )
    assert timed_out.details["targets"] == ["r1", "r3"]
