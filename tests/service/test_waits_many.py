"""``wait-any`` over many targets (issue 13): set-up in one snapshot and one observation per host, the
wait itself one slot query per tick, and the same answers and refusals as before.

A real store, the real process host and the scripted agent (``tests.service.agents_world``); the
statements the store's connection runs are counted with ``sqlite3``'s trace callback (on PostgreSQL: the
connection's ``execute`` wrapped, the one entry point the adapter sends statements through).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import anyio
import pytest

from runner.agents.slots import slot_store
from runner.service import ReviewerListInput, WaitAnyInput
from runner.service.checks import WAIT_TARGETS_MAX
from runner.service.views import WaitAnyResult
from runner.store import Store
from tests.service.agents_world import World, refused
from tests.support.stores import open_test_store

MANY = 64


@contextmanager
def statements(store: Store) -> Iterator[list[str]]:
    seen: list[str] = []
    if store.url.startswith("sqlite:"):
        from runner.sql.store_sqlite import connection_of

        with store.read() as reader:
            conn, _ = connection_of(reader)
        conn.set_trace_callback(seen.append)
        try:
            yield seen
        finally:
            conn.set_trace_callback(None)
        return
    from runner.sql.store_postgres import connection_of as pg_connection_of

    with store.read() as reader:
        pg, _ = pg_connection_of(reader)
    execute = pg.execute

    def traced(query: Any, *args: Any, **kwargs: Any) -> Any:
        text = query.decode() if isinstance(query, bytes) else query if isinstance(query, str) else query.as_string(pg)
        seen.append(text)
        return execute(query, *args, **kwargs)

    pg.execute = traced  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        del pg.execute


@pytest.fixture
def many(world: World) -> World:
    for n in range(MANY):
        world.start(f"r{n}")
    return world


def _panes(world: World) -> dict[str, str]:
    return {lease.data["name"]: lease.data["pane_id"] for lease in world.service.reviewers(ReviewerListInput("ctl"))}


def _settle_elsewhere(world: World, pane_id: str) -> None:
    """The agent's slot moved to done by another connection (as its supervisor would)."""
    with open_test_store(world.root) as other:
        slots = slot_store(other)
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
    result = anyio.run(world.service.waits.wait_any, WaitAnyInput("ctl", world.credential, targets, 20))
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
            return await world.service.waits.wait_any(WaitAnyInput("ctl", world.credential, targets, 20, fresh=True))

    result = anyio.run(wait_then_settle)
    assert [(w.target, w.observation.seq) for w in result.winners] == [("r5", 1)]


def test_settled_targets_without_a_cursor_win_at_once_in_target_order(many: World) -> None:
    world = many
    panes = _panes(world)
    for name in ("r50", "r7"):
        _settle_elsewhere(world, panes[name])
    targets = tuple((f"r{n}", None) for n in (63, 50, 1, 7))
    result = anyio.run(world.service.waits.wait_any, WaitAnyInput("ctl", world.credential, targets, 20))
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
            world.service.waits.wait_any,
            WaitAnyInput("ctl", world.credential, (("r1", 0), ("r2", None), ("nope", None)), 1),
        ),
    )
    assert gone.details["target"] == "r2"
    unknown = refused(
        "target_unknown",
        lambda: anyio.run(
            world.service.waits.wait_any, WaitAnyInput("ctl", world.credential, (("nope", None), ("r2", None)), 1)
        ),
    )
    assert unknown.details["target"] == "nope"
    timed_out = refused(
        "wait_timeout",
        lambda: anyio.run(
            world.service.waits.wait_any, WaitAnyInput("ctl", world.credential, (("r1", 0), ("r3", 0)), 0.3)
        ),
    )
    assert timed_out.details["targets"] == ["r1", "r3"]


def _record(world: World, name: str, calls: list[tuple[str, int]]) -> None:
    """Note the thread of every call of the host's method ``name`` (then call the real one)."""
    real = getattr(world.host, name)

    def noted(*args: Any, **kwargs: Any) -> Any:
        calls.append((name, threading.get_ident()))
        return real(*args, **kwargs)

    setattr(world.host, name, noted)


def test_on_one_process_host_the_set_up_the_wait_and_the_output_share_one_worker_thread(world: World) -> None:
    """One hop: wait-any's set-up, the host's blocking wait and the winner's output run on one worker
    thread (not the loop's, and no second thread for the wait); the async wait_many is not used."""
    world.start("a")
    world.start("b")
    world.relay("echo from b", target="b")
    calls: list[tuple[str, int]] = []
    for name in ("cursors", "wait_many_blocking", "wait_many", "read", "get"):
        _record(world, name, calls)
    loop = threading.get_ident()
    targets = (("a", None), ("b", 1))
    result = anyio.run(world.service.waits.wait_any, WaitAnyInput("ctl", world.credential, targets, 20, fresh=True))
    assert [(w.target, w.observation.status) for w in result.winners] == [("b", "done")]
    assert "from b" in result.winners[0].output
    assert [name for name, _ in calls] == ["cursors", "wait_many_blocking", "read", "get"]
    (thread,) = {ident for _, ident in calls}
    assert thread != loop


def test_a_host_without_a_blocking_wait_is_waited_on_from_the_loop(world: World) -> None:
    """A host whose wait_many_blocking is the abc's default (None) gets the async wait_many, with the
    same answers: the winner, and wait_timeout naming every target."""
    world.start("a")
    world.start("b")
    world.relay("echo from b", target="b")
    world.host.wait_many_blocking = lambda *args: None  # type: ignore[method-assign,assignment]
    calls: list[tuple[str, int]] = []
    _record(world, "wait_many", calls)
    result = anyio.run(world.service.waits.wait_any, WaitAnyInput("ctl", world.credential, (("a", 0), ("b", 1)), 20))
    assert [w.target for w in result.winners] == ["b"] and [name for name, _ in calls] == ["wait_many"]
    timed_out = refused(
        "wait_timeout",
        lambda: anyio.run(
            world.service.waits.wait_any, WaitAnyInput("ctl", world.credential, (("a", 0), ("b", 2)), 0.3)
        ),
    )
    assert timed_out.details["targets"] == ["a", "b"]


def test_cancelling_wait_any_ends_its_thread_s_wait(many: World) -> None:
    """The caller cancels (an MCP client went away): the worker thread's blocking wait sees ``stop``
    and returns at its next tick, so no thread keeps polling the store."""
    world = many
    ended = threading.Event()
    real = world.host.wait_many_blocking

    def noted(*args: Any) -> Any:
        try:
            return real(*args)
        finally:
            ended.set()

    world.host.wait_many_blocking = noted  # type: ignore[method-assign]
    targets = tuple((f"r{n}", 0) for n in range(MANY))

    async def cancelled() -> None:
        with anyio.move_on_after(0.3) as scope:
            await world.service.waits.wait_any(WaitAnyInput("ctl", world.credential, targets, 600))
        assert scope.cancelled_caught

    anyio.run(cancelled)
    assert ended.wait(30), "the blocking wait returned once the wait-any was cancelled"
