"""Many writers of one store object at once (threads of one process): the port's contract for them,
on every store, and SQLite's group commit (``runner.sql.store_sqlite_group``) in particular.

The contract (``runner.store.abc.Store.write``): each writer's transaction is its own unit (a body
that raises writes nothing, and takes nobody else's writes down), compare-and-set judges the state
committed so far (a stale version is refused even when the winner's commit is shared), and a write
returns only once its writes are committed. On SQLite they also share commits: fewer ``COMMIT``
statements than transactions. A real process killed with SIGKILL mid-run proves that no
acknowledged write is lost.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from runner.context import Instance
from runner.errors import ConflictError, StoreUnavailableError
from runner.sql.store_sqlite import SQLiteStore
from runner.store import Store

ROOT = Path(__file__).resolve().parents[2]
WRITERS = 16


def new(instance_id: str) -> Instance:
    return Instance(instance_id, "thing", "", 0, {})


def run_all(count: int, work: object) -> list[BaseException]:
    """``count`` threads run ``work(i)`` at once (released together); the exceptions they raised."""
    failures: list[BaseException] = []
    start = threading.Barrier(count)

    def run(i: int) -> None:
        start.wait()
        try:
            work(i)  # type: ignore[operator]
        except BaseException as exc:  # reported to the test's thread
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
        assert not thread.is_alive(), "a writer never returned"
    return failures


def test_a_refused_writer_takes_nothing_down_and_commits_nothing(any_store: Store) -> None:
    """Half the writers raise inside their transaction, at once with the other half: the others' writes
    all stand, the refused ones' writes (made before they raised) none."""

    class Refused(Exception):
        pass

    def work(i: int) -> None:
        for k in range(5):
            with any_store.write() as tx:
                tx.put(new(f"w{i}/{k}"), "written", {"i": i})
                tx.next_number("writes")
                if i % 2:
                    raise Refused(f"writer {i} refused")

    failures = run_all(WRITERS, work)
    assert len(failures) == WRITERS // 2 and all(isinstance(f, Refused) for f in failures)
    with any_store.read() as reader:
        found = {f"w{i}/{k}": reader.get(f"w{i}/{k}") is not None for i in range(WRITERS) for k in range(5)}
    assert found == {f"w{i}/{k}": i % 2 == 0 for i in range(WRITERS) for k in range(5)}
    with any_store.write() as tx:  # the counter counted only the writes that stood (and then this one)
        assert tx.next_number("writes") == WRITERS // 2 * 5 + 1


def test_a_constraint_error_of_one_writer_spares_the_others(any_store: Store) -> None:
    """Every writer creates the same id first (one wins, the rest get a conflict) and then its own."""
    failures: list[BaseException] = []

    def work(i: int) -> None:
        try:
            with any_store.write() as tx:
                tx.put(new(f"own/{i}"), "written", {})
                tx.put(new("shared/1"), "written", {"by": i})
        except ConflictError as exc:
            failures.append(exc)
        with any_store.write() as tx:
            tx.put(new(f"after/{i}"), "written", {})

    assert run_all(WRITERS, work) == []
    assert len(failures) == WRITERS - 1
    with any_store.read() as reader:
        winner = reader.get("shared/1")
        assert winner is not None
        owns = [i for i in range(WRITERS) if reader.get(f"own/{i}") is not None]
        assert owns == [winner.data["by"]], "only the winner's own row of that transaction stands"
        assert all(reader.get(f"after/{i}") is not None for i in range(WRITERS))


def test_compare_and_set_judges_the_writes_before_it_in_one_commit(any_store: Store) -> None:
    """Every writer reads version 1 and writes it back at once: exactly one wins, the rest conflict,
    though their transactions may share a commit with the winner's."""
    with any_store.write() as tx:
        tx.put(new("lease/1"), "held", {"fence": 1})
    seen = any_store.get("lease/1")
    assert seen is not None
    wins: list[int] = []

    def work(i: int) -> None:
        with any_store.write() as tx:
            tx.put(seen, "held", {"fence": 2, "by": i})
        wins.append(i)

    failures = run_all(WRITERS, work)
    assert len(wins) == 1 and len(failures) == WRITERS - 1
    assert all(isinstance(f, ConflictError) for f in failures)
    stored = any_store.get("lease/1")
    assert stored is not None and stored.version == 2 and stored.data == {"fence": 2, "by": wins[0]}


def test_read_modify_write_from_threads_of_one_store_loses_no_update(any_store: Store) -> None:
    with any_store.write() as tx:
        tx.put(new("count/1"), "on", {"n": 0})

    def work(_: int) -> None:
        for _ in range(20):
            with any_store.write() as tx:
                current = tx.get("count/1")
                assert current is not None
                tx.put(current, "on", {"n": current.data["n"] + 1})
                tx.append(current, "bump", "on", "test", {})

    assert run_all(WRITERS, work) == []
    stored = any_store.get("count/1")
    assert stored is not None and stored.data["n"] == WRITERS * 20
    seqs = [e.seq for e in any_store.events() if e.trigger == "bump"]
    assert len(seqs) == WRITERS * 20 and seqs == sorted(seqs), "one event each, in commit order"


def test_a_returned_write_is_visible_to_another_connection(any_store: Store, store_kind: object) -> None:
    """A write returns only once committed: another store object (another process) sees it then."""
    with store_kind.open(any_store.url) as observer:  # type: ignore[attr-defined]
        missing: list[str] = []

        def work(i: int) -> None:
            for k in range(10):
                with any_store.write() as tx:
                    tx.put(new(f"v{i}/{k}"), "written", {})
                if observer.get(f"v{i}/{k}") is None:
                    missing.append(f"v{i}/{k}")

        assert run_all(8, work) == []
    assert missing == []


# --- SQLite: the groups themselves ---------------------------------------------------------------------


def test_sqlite_writers_share_commits(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "corral.db") as store:
        commits: list[str] = []
        store._conn.set_trace_callback(lambda s: commits.append(s) if s.startswith("COMMIT") else None)
        gate = threading.Event()

        def work(i: int) -> None:
            with store.write() as tx:
                tx.put(new(f"g{i}"), "written", {})
                if i == 0:
                    gate.wait(20)  # the first holds its group open while the others join it

        thread = threading.Thread(target=work, args=(0,))
        thread.start()
        others = [threading.Thread(target=work, args=(i,)) for i in range(1, WRITERS)]
        for other in others:
            other.start()
        deadline = time.monotonic() + 20
        while sum(g.size for g in [store._groups._open] if g is not None) < WRITERS:
            assert time.monotonic() < deadline, "the writers never joined the open group"
            time.sleep(0.005)
        gate.set()
        for t in [thread, *others]:
            t.join(20)
        store._conn.set_trace_callback(None)
        assert len(commits) == 1, "one commit served every writer of the group"
        assert all(store.get(f"g{i}") is not None for i in range(WRITERS))


def test_sqlite_a_failed_group_commit_fails_every_member_and_writes_nothing(tmp_path: Path) -> None:
    """A COMMIT that fails (here a deferred foreign key, checked at COMMIT) is reported to every member
    that was done, as ``store_unavailable``, and none of their writes is left."""
    path = tmp_path / "corral.db"
    SQLiteStore(path).close()
    with sqlite3.connect(path) as conn:  # a table of the test's own, whose constraint only COMMIT checks
        conn.execute("CREATE TABLE dangling (ref TEXT REFERENCES instances (id) DEFERRABLE INITIALLY DEFERRED)")
    conn.close()
    with SQLiteStore(path) as store:
        store._conn.execute("PRAGMA foreign_keys = ON")
        gate, joined = threading.Event(), threading.Event()
        outcomes: dict[str, object] = {}

        def first() -> None:
            try:
                with store.write() as tx:
                    tx.put(new("fine/1"), "written", {})
                    joined.wait(20)
                outcomes["first"] = "returned"
            except BaseException as exc:  # reported to the test's thread
                outcomes["first"] = exc

        def second() -> None:
            try:
                with store.write() as tx:
                    tx.put(new("fine/2"), "written", {})
                    store._conn.execute("INSERT INTO dangling (ref) VALUES ('nobody')")
                outcomes["second"] = "returned"
            except BaseException as exc:  # reported to the test's thread
                outcomes["second"] = exc

        a = threading.Thread(target=first)
        a.start()
        while store._groups._open is None:
            time.sleep(0.005)
        b = threading.Thread(target=second)
        b.start()
        while store._groups._open is not None and store._groups._open.size < 2:
            time.sleep(0.005)
        joined.set()
        a.join(20)
        b.join(20)
        gate.set()
        for name in ("first", "second"):
            assert isinstance(outcomes[name], StoreUnavailableError), outcomes
            assert outcomes[name].code == "store_unavailable"  # type: ignore[union-attr]
        assert store.get("fine/1") is None and store.get("fine/2") is None
        store._conn.execute("DELETE FROM dangling")
        with store.write() as tx:  # the store goes on
            tx.put(new("fine/3"), "written", {})
        assert store.get("fine/3") is not None


WRITER = r"""
import os, sys, threading
from runner.context import Instance
from runner.sql.store_sqlite import SQLiteStore

db, acks, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
store = SQLiteStore(db, busy_deadline=60)
side = os.open(acks, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
lock = threading.Lock()

def work(i):
    k = 0
    while True:
        with store.write() as tx:
            counter = tx.get(f"counter/{i}")
            if counter is None:
                counter = tx.put(Instance(f"counter/{i}", "thing", "", 0, {}), "on", {"n": 0})
            after = tx.put(counter, "on", {"n": counter.data["n"] + 1})
            tx.put(Instance(f"w{i}/{k}", "thing", "", 0, {}), "written", {"k": k})
            tx.append(after, "bump", "on", "test", {"k": k})
        # Acknowledged only now, after write() returned: recorded durably before the next.
        with lock:
            os.write(side, f"{i} {k} {after.version}\n".encode())
            os.fsync(side)
        k += 1

for i in range(threads):
    threading.Thread(target=work, args=(i,), daemon=True).start()
print("started", flush=True)
threading.Event().wait()
"""


@pytest.mark.slow  # a real process, killed with SIGKILL
def test_sqlite_every_acknowledged_write_survives_sigkill(tmp_path: Path) -> None:
    db, acks = tmp_path / "corral.db", tmp_path / "acks"
    SQLiteStore(db).close()
    child = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(db), str(acks), "32"],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "started"
        deadline = time.monotonic() + 60
        while not acks.exists() or acks.read_bytes().count(b"\n") < 400:
            assert child.poll() is None, "the writer process died on its own"
            assert time.monotonic() < deadline, "the writers acknowledged too little"
            time.sleep(0.02)
        child.send_signal(signal.SIGKILL)  # mid-run: groups open, commits in flight
        child.wait(30)
    finally:
        child.kill()
        child.wait()
        assert child.stdout is not None
        child.stdout.close()
    acknowledged = [line.split() for line in acks.read_text().splitlines() if line.count(" ") == 2]
    assert len(acknowledged) >= 400
    with SQLiteStore(db) as store:
        assert store.integrity() == "ok"
        with store.read() as reader:
            lost = [f"w{i}/{k}" for i, k, _ in acknowledged if reader.get(f"w{i}/{k}") is None]
            behind = [
                (i, version)
                for i, _, version in acknowledged
                if (counter := reader.get(f"counter/{i}")) is None or counter.version < int(version)
            ]
        assert lost == [] and behind == [], "an acknowledged write was lost"
        bumps = {(e.instance_id, e.payload["k"]) for e in store.events() if e.trigger == "bump"}
        assert all((f"counter/{i}", int(k)) in bumps for i, k, _ in acknowledged)
        with store.write() as tx:  # and the store takes writes again
            tx.put(new("after/1"), "written", {})
