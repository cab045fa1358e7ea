"""The process host's waits over many panes: one slot query per tick for all the targets, and none
while the store is unchanged (issue 13: ``wait-any`` over 64 idle targets used 72% of a core).

Real SQLite files; the changes come from a second connection to the file (as a supervisor's, in
another process, would) or from the waiter's own connection. The statements the waiter's
connection runs are counted with ``sqlite3``'s trace callback; what each tick read is recorded by a
slot port that wraps the real adapter.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Hashable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import anyio
import pytest

from runner.agents import process
from runner.agents.abc import AgentHost, StartOptions, WaitTimeoutError
from runner.agents.kinds import Kinds
from runner.agents.process import ProcessHost
from runner.agents.slots import AgentSlot, SlotProgress, SlotReader
from runner.sql.slots_sqlite import SQLiteSlots
from runner.sql.store_sqlite import SQLiteStore, connection_of

TARGETS = 64


class Ticks(SQLiteSlots):
    """The SQLite slot port, recording per tick (a change token taken) the token and the panes read."""

    def __init__(self, store: SQLiteStore) -> None:
        super().__init__(store)
        self.ticks: list[tuple[Hashable | None, list[str] | None]] = []

    def change_token(self) -> Hashable:
        token = super().change_token()
        self.ticks.append((token, None))
        return token

    @contextmanager
    def read(self) -> Iterator[SlotReader]:
        with super().read() as reader:
            yield _Recording(reader, self.ticks)


class _Recording(SlotReader):
    def __init__(self, inner: SlotReader, ticks: list[tuple[Hashable | None, list[str] | None]]) -> None:
        self.inner = inner
        self.ticks = ticks

    def slot(self, pane_id: str) -> AgentSlot | None:
        return self.inner.slot(pane_id)

    def slots(self, include_closed: bool = False) -> list[AgentSlot]:
        return self.inner.slots(include_closed)

    def slots_of(self, pane_ids: Sequence[str]) -> dict[str, AgentSlot]:
        return self.inner.slots_of(pane_ids)

    def progress_of(self, pane_ids: Sequence[str]) -> dict[str, SlotProgress]:
        if self.ticks:
            self.ticks[-1] = (self.ticks[-1][0], list(pane_ids))
        return self.inner.progress_of(pane_ids)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    with SQLiteStore(tmp_path / "s.db") as opened:
        yield opened


@pytest.fixture
def host(store: SQLiteStore, tmp_path: Path) -> ProcessHost:
    return ProcessHost(store, tmp_path / "agents", Kinds.load([]), slots=Ticks(store))


def _panes(host: ProcessHost, cwd: Path, count: int = TARGETS) -> list[str]:
    return [host.start(f"a{n}", "script", str(cwd), StartOptions()).pane_id for n in range(count)]


def _move(store_path: Path, pane_id: str, status: str) -> AgentSlot:
    """A change from another connection to the file (a supervisor's): the slot one step on, to ``status``."""
    with SQLiteStore(store_path) as other:
        slots = SQLiteSlots(other)
        with slots.read() as reader:
            slot = reader.slot(pane_id)
        assert slot is not None
        with slots.write() as tx:
            return tx.put_slot(replace(slot, status=status, seq=slot.seq + 1), slot.seq)


@contextmanager
def statements(store: SQLiteStore) -> Iterator[list[str]]:
    """Every statement the store's connection runs meanwhile."""
    seen: list[str] = []
    with store.read() as reader:
        conn, _ = connection_of(reader)
    conn.set_trace_callback(seen.append)
    try:
        yield seen
    finally:
        conn.set_trace_callback(None)


def _later(delay: float, action: object) -> threading.Thread:
    def run() -> None:
        time.sleep(delay)
        action()  # type: ignore[operator]

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_of_64_targets_the_one_that_settles_wins_with_its_observation(
    host: ProcessHost, store: SQLiteStore, tmp_path: Path
) -> None:
    panes = _panes(host, tmp_path)
    chosen = panes[41]
    mover = _later(0.2, lambda: _move(store.path, chosen, "done"))
    found = anyio.run(host.wait_many, {pane: 0 for pane in panes}, 20.0)
    mover.join()
    assert list(found) == [chosen]
    observed = found[chosen]
    assert observed is not None
    assert (observed.pane_id, observed.name, observed.status, observed.seq) == (chosen, "a41", "done", 1)
    assert observed == host.get(chosen)


def test_a_wait_over_many_targets_reads_their_slots_in_one_query_and_only_after_a_change(
    host: ProcessHost, store: SQLiteStore, tmp_path: Path
) -> None:
    panes = _panes(host, tmp_path)
    slots = host.slots
    assert isinstance(slots, Ticks)
    slots.ticks.clear()

    def changes() -> None:
        _move(store.path, panes[3], "working")  # a change, but not a settle: the wait goes on
        time.sleep(0.15)
        _move(store.path, panes[60], "done")

    mover = _later(0.3, changes)
    with statements(store) as seen:
        found = anyio.run(host.wait_many, {pane: 0 for pane in panes}, 20.0)
    mover.join()
    assert list(found) == [panes[60]]

    reads = [(token, read) for token, read in slots.ticks if read is not None]
    assert all(read == panes for _, read in reads), "every read is of all the targets at once"
    assert len(slots.ticks) > 20, "the wait ticked while nothing changed"
    assert len(reads) == 3, "the first tick, then one read per change: none while the store stood still"
    previous: Hashable | None = object()
    for token, read in slots.ticks:
        assert token is not None
        assert (read is not None) == (token != previous), "a slot read exactly when the token moved"
        previous = token

    slot_queries = [s for s in seen if "agent_slots" in s]
    assert all(" IN (" in s for s in slot_queries), slot_queries
    progress = [s for s in slot_queries if s.startswith("SELECT pane_id, status, seq, closed FROM")]
    assert len(progress) == 3, "one query for all 64 targets on each tick that found the store changed"
    assert len(slot_queries) == 4 and f"IN ('{panes[60]}')" in slot_queries[-1], "and the winner's whole slot"
    assert sum("data_version" in s for s in seen) == len(slots.ticks), "one change check per tick"
    assert len([s for s in seen if s.startswith("BEGIN")]) == 3, "a snapshot only on a tick that found a change"


def test_a_write_on_the_waiters_own_connection_wakes_it(host: ProcessHost, tmp_path: Path) -> None:
    """PRAGMA data_version does not move on the connection's own commits: the token must still."""
    pane = _panes(host, tmp_path, 1)[0]

    def settle() -> None:
        with host.slots.write() as tx:
            slot = tx.slot(pane)
            assert slot is not None
            tx.put_slot(replace(slot, status="done", seq=1), 0)

    mover = _later(0.2, settle)
    observed = anyio.run(host.wait, pane, 0, 20.0)
    mover.join()
    assert (observed.status, observed.seq) == ("done", 1)


def test_a_target_settled_at_its_cursor_never_wins_and_a_gone_one_does(
    host: ProcessHost, store: SQLiteStore, tmp_path: Path
) -> None:
    panes = _panes(host, tmp_path, 3)
    done = _move(store.path, panes[0], "done")  # settled, but at the cursor given below
    with pytest.raises(WaitTimeoutError) as caught:
        anyio.run(host.wait_many, {panes[0]: done.seq, panes[1]: 0}, 0.3)
    assert caught.value.code == "wait_timeout"
    assert anyio.run(host.wait_many, {panes[0]: done.seq - 1, panes[1]: 0}, 5.0).keys() == {panes[0]}
    closer = _later(0.2, lambda: host.close(panes[2]))
    found = anyio.run(host.wait_many, {panes[0]: done.seq, panes[2]: 0, "p999": 0}, 20.0)
    closer.join()
    assert found == {"p999": None}, "a pane that never existed is gone at once"
    found = anyio.run(host.wait_many, {panes[0]: done.seq, panes[2]: 0}, 20.0)
    assert found == {panes[2]: None}


def test_the_wait_slows_its_ticks_only_after_a_quiet_spell(
    host: ProcessHost, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Idle for long, a wait ticks every POLL_QUIET; any change of the store brings back POLL."""
    monkeypatch.setattr(process, "QUIET_AFTER", 0.1)
    monkeypatch.setattr(process, "POLL", 0.001)
    monkeypatch.setattr(process, "POLL_QUIET", 0.05)
    pane = _panes(host, tmp_path, 1)[0]
    slots = host.slots
    assert isinstance(slots, Ticks)
    slots.ticks.clear()
    with pytest.raises(WaitTimeoutError):
        anyio.run(host.wait, pane, 0, 0.6)
    # 0.1 s at 1 ms, then 0.5 s at 50 ms: far fewer ticks than 600 at a steady 1 ms.
    assert 10 < len(slots.ticks) < 300


def test_the_default_wait_many_races_one_wait_per_target(host: ProcessHost, store: SQLiteStore, tmp_path: Path) -> None:
    """A plugin host that has no wait_many of its own still waits on many panes (the abc's default)."""
    panes = _panes(host, tmp_path, 4)
    mover = _later(0.2, lambda: _move(store.path, panes[2], "blocked"))
    found = anyio.run(AgentHost.wait_many, host, {pane: 0 for pane in panes}, 20.0)
    mover.join()
    assert list(found) == [panes[2]]
    assert found[panes[2]] is not None and found[panes[2]].status == "blocked"  # type: ignore[union-attr]
    with pytest.raises(WaitTimeoutError):
        anyio.run(AgentHost.wait_many, host, {pane: 0 for pane in panes[:2]}, 0.2)
    assert AgentHost.get_many(host, [*panes, "p999"]) == host.get_many([*panes, "p999"])
    assert set(host.get_many([*panes, "p999"])) == set(panes)


def test_cursors_reads_where_each_agent_is_in_one_narrow_query(
    host: ProcessHost, store: SQLiteStore, tmp_path: Path
) -> None:
    """``cursors``: the process host's answers equal the abc's default (``get_many`` reduced), for idle,
    done, blocked, working (its supervisor alive), working with a dead supervisor (observed unknown:
    not settled either), closed and never-existing panes; one statement, which decodes no options."""
    panes = _panes(host, tmp_path, 6)
    _move(store.path, panes[1], "done")
    _move(store.path, panes[2], "blocked")
    working = _move(store.path, panes[3], "working")
    with SQLiteSlots(store).write() as tx:
        tx.put_slot(replace(working, pid=os.getpid()), working.seq)  # a live "supervisor"
    gone = _move(store.path, panes[4], "working")
    child = subprocess.Popen(["true"])
    child.wait()  # reaped: its pid is no process of ours any more
    with SQLiteSlots(store).write() as tx:
        tx.put_slot(replace(gone, pid=child.pid), gone.seq)
    host.close(panes[5])
    asked = [*panes, "p999"]
    with statements(store) as seen:
        found = host.cursors(asked)
    assert found == AgentHost.cursors(host, asked)
    assert found == {
        panes[0]: (0, True),
        panes[1]: (1, True),
        panes[2]: (1, True),
        panes[3]: (1, False),
        panes[4]: (1, False),
    }, "closed and never-existing panes are absent"
    assert host.get(panes[4]).status == "unknown" and host.get(panes[3]).status == "working"
    assert {pane: (o.seq, o.settled) for pane, o in host.get_many(asked).items()} == found
    reads = [s for s in seen if "agent_slots" in s]
    assert len(reads) == 1 and "options" not in reads[0], seen


def test_the_blocking_wait_many_answers_as_the_async_one_and_stops_when_told(
    host: ProcessHost, store: SQLiteStore, tmp_path: Path
) -> None:
    """``wait_many_blocking`` (for a caller already on a worker thread): the settled target with its
    observation; wait_timeout at the deadline; an empty answer soon after ``stop`` is set."""
    panes = _panes(host, tmp_path, 3)
    moved = _move(store.path, panes[1], "done")
    found = host.wait_many_blocking({pane: 0 for pane in panes}, 20.0, threading.Event())
    assert found == {panes[1]: host.get(panes[1])} and moved.seq == 1
    assert found == anyio.run(host.wait_many, {pane: 0 for pane in panes}, 20.0)
    with pytest.raises(WaitTimeoutError):
        host.wait_many_blocking({panes[0]: 0, panes[1]: 1}, 0.2, threading.Event())
    stop = threading.Event()
    stopper = _later(0.2, stop.set)
    assert host.wait_many_blocking({panes[0]: 0, panes[1]: 1}, 600.0, stop) == {}
    stopper.join()
    assert AgentHost.wait_many_blocking(host, {panes[0]: 0}, 0.1, stop) is None, "the abc's default: none"
