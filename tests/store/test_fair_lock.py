"""The SQLite store's FIFO write queue (``runner.sql.store_sqlite_writelock``): order, deadline, crashes, no lost
update.

Real SQLite files, real processes (killed with SIGKILL where a crash is the point), real threads. No
assertion is about speed; where a thread must not block, it is given a generous bound to finish.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from runner.context import Instance
from runner.errors import StoreBusyError
from runner.sql.store_sqlite import SQLiteStore
from runner.sql.store_sqlite_writelock import lock_path

ROOT = Path(__file__).resolve().parents[2]

HOLDER = r"""
import sys, time
from runner.sql.store_sqlite import SQLiteStore
from runner.context import Instance

store = SQLiteStore(sys.argv[1], busy_deadline=30)
with store.write() as tx:
    tx.put(Instance("holder/1", "thing", "", 0, {}), "held", {})
    print("held", flush=True)
    time.sleep(3600)  # killed here, inside the transaction and holding the queue
"""

WRITER = r"""
import sys
from runner.sql.store_sqlite import SQLiteStore

db, threads, each = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
import threading
from runner.context import Instance

store = SQLiteStore(db, busy_deadline=60)
errors = []


def work():
    try:
        for _ in range(each):
            with store.write() as tx:
                current = tx.get("counter/1")
                assert current is not None
                tx.put(current, "counting", {"n": current.data["n"] + 1})
                tx.next_number("writes")
    except BaseException as exc:
        errors.append(repr(exc))


workers = [threading.Thread(target=work) for _ in range(threads)]
for w in workers:
    w.start()
for w in workers:
    w.join()
store.close()
print("errors:", errors, flush=True)
sys.exit(1 if errors else 0)
"""


def child_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def new(instance_id: str = "thing/1") -> Instance:
    return Instance(instance_id, "thing", "", 0, {})


def tickets_taken(db: Path) -> int:
    """The queue's ticket counter: it moves when a writer queues behind another (not when the queue is free)."""
    raw = lock_path(db).read_bytes()[:8]
    return int.from_bytes(raw, "little") if len(raw) == 8 else 0


def wait_until(condition: object, what: str, bound: float = 20.0) -> None:
    """Poll ``condition`` (a callable) until true; fail (not a speed assertion) if it never is."""
    give_up = time.monotonic() + bound
    while not condition():  # type: ignore[operator]
        if time.monotonic() > give_up:
            pytest.fail(f"never happened: {what}")
        time.sleep(0.005)


@contextmanager
def held(db: Path) -> Iterator[threading.Event]:
    """Another store object holds the write transaction (and the queue) until the event is set."""
    release, holding = threading.Event(), threading.Event()
    store = SQLiteStore(db)

    def hold() -> None:
        with store.write() as tx:
            tx.put(new("holder/1"), "held", {})
            holding.set()
            release.wait(30)

    thread = threading.Thread(target=hold)
    thread.start()
    assert holding.wait(10), "the holder got the write lock"
    try:
        yield release
    finally:
        release.set()
        thread.join()
        store.close()


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "corral.db"
    SQLiteStore(path).close()
    return path


def test_the_lock_file_is_made_by_the_first_write_with_the_store_files_mode(db: Path) -> None:
    os.chmod(db, 0o640)
    with SQLiteStore(db) as store:
        assert store.get("thing/1") is None
        assert not lock_path(db).exists(), "a read made no lock file"
        with store.write() as tx:
            tx.put(new(), "a", {})
    assert stat.S_ISREG(lock_path(db).lstat().st_mode)
    assert stat.S_IMODE(lock_path(db).stat().st_mode) == 0o640
    inode = lock_path(db).stat().st_ino
    with SQLiteStore(db) as store, store.write() as tx:  # it stays and is reused
        tx.put(tx.get("thing/1") or new(), "b", {})
    assert lock_path(db).stat().st_ino == inode


def test_the_deadline_raises_store_busy_with_the_budget(db: Path) -> None:
    with held(db), SQLiteStore(db, busy_deadline=0.3) as waiter:
        with pytest.raises(StoreBusyError) as caught, waiter.write() as tx:
            tx.put(new(), "a", {})
        error = caught.value
    assert error.code == "store_busy"
    assert error.details["budget_seconds"] == 0.3
    assert error.details["waited_seconds"] >= 0.25, "it waited (about) its whole budget"
    assert error.details["attempts"] >= 2
    assert error.details["path"] == str(db)
    assert "0.3 s busy budget" in str(error) and "waited" in str(error)
    with SQLiteStore(db) as store:
        assert store.get("thing/1") is None, "nothing was written"
        with store.write() as tx:  # the waiter that gave up left no place behind
            tx.put(new(), "a", {})


def test_a_waiter_that_gave_up_does_not_hold_up_the_next(db: Path) -> None:
    done: list[str] = []
    with held(db) as release, SQLiteStore(db, busy_deadline=0.2) as quitter, SQLiteStore(db) as patient:
        with pytest.raises(StoreBusyError), quitter.write():
            pass
        before = tickets_taken(db)

        def write() -> None:
            with patient.write() as tx:
                tx.put(new(), "a", {})
            done.append("patient")

        thread = threading.Thread(target=write)
        thread.start()
        wait_until(lambda: tickets_taken(db) > before, "the patient writer queued")
        release.set()
        thread.join(20)
    assert done == ["patient"]


def test_writers_are_served_in_arrival_order(db: Path) -> None:
    """Writers of other stores queue behind a holder and commit in arrival order; threads of one
    store join the group of the first of them (one place in the queue, one commit for all)."""
    order: list[str] = []
    shared = SQLiteStore(db)
    others = [SQLiteStore(db) for _ in range(2)]
    stores = [shared, others[0], shared, others[1], shared]  # threads of one store interleaved with others
    threads = []
    with held(db) as release:
        for i, store in enumerate(stores):
            before = tickets_taken(db)
            joined = i > 0 and store is shared

            def write(store: SQLiteStore = store, name: str = f"w{i}") -> None:
                with store.write() as tx:
                    tx.put(new(f"thing/{name}"), "a", {})
                    order.append(name)

            thread = threading.Thread(target=write)
            thread.start()
            threads.append(thread)
            if joined:
                size = stores[:i].count(shared) + 1
                wait_until(lambda size=size: group_size(shared) == size, f"writer {i} joined the group")  # type: ignore[misc]
            else:
                wait_until(lambda before=before: tickets_taken(db) > before, f"writer {i} queued")  # type: ignore[misc]
        release.set()
        for thread in threads:
            thread.join(20)
    for store in [shared, *others]:
        store.close()
    assert order == ["w0", "w2", "w4", "w1", "w3"]


def group_size(store: SQLiteStore) -> int:
    """How many writers the store's open group holds (0: none open)."""
    group = store._groups._open
    return 0 if group is None else group.size


def test_reads_never_wait_for_the_queue(db: Path) -> None:
    with SQLiteStore(db) as store, store.write() as tx:
        tx.put(new(), "a", {"n": 1})
    seen: list[object] = []
    with held(db), SQLiteStore(db) as reader:
        thread = threading.Thread(target=lambda: seen.append(reader.get("thing/1")))
        thread.start()
        thread.join(20)  # a read that took the write queue would wait for the holder, who waits for us
        assert not thread.is_alive(), "the read waited for the writer"
    assert isinstance(seen[0], Instance) and seen[0].data == {"n": 1}


def test_a_nested_write_is_refused_by_sqlite_not_deadlocked(db: Path) -> None:
    with SQLiteStore(db, busy_deadline=30) as store:
        with pytest.raises(sqlite3.OperationalError, match="within a transaction"), store.write(), store.write():
            pass
        with store.write() as tx:  # and the queue is free again
            tx.put(new(), "a", {})


@pytest.mark.slow  # real processes
def test_a_holder_killed_with_sigkill_does_not_block_the_next_writer(db: Path) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(db)], env=child_env(), stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "held"
        with SQLiteStore(db, busy_deadline=0.3) as store, pytest.raises(StoreBusyError), store.write():
            pass  # the child really holds it
        before = tickets_taken(db)
        outcome: list[str] = []

        def write() -> None:
            with SQLiteStore(db, busy_deadline=30) as store, store.write() as tx:
                tx.put(new(), "after", {})
                outcome.append("written")

        thread = threading.Thread(target=write)
        thread.start()
        wait_until(lambda: tickets_taken(db) > before, "the next writer queued behind the child")
        assert outcome == []
        child.send_signal(signal.SIGKILL)
        thread.join(30)
    finally:
        child.kill()
        child.wait()
        assert child.stdout is not None
        child.stdout.close()
    assert outcome == ["written"]
    with SQLiteStore(db) as store:
        assert store.get("holder/1") is None, "the killed holder's transaction rolled back"
        thing = store.get("thing/1")
        assert thing is not None and thing.state == "after"
        assert store.integrity() == "ok"


@pytest.mark.slow  # real processes
def test_a_waiter_killed_in_the_queue_does_not_block_those_behind_it(db: Path) -> None:
    waiter = r"""
import sys
from runner.sql.store_sqlite import SQLiteStore
store = SQLiteStore(sys.argv[1], busy_deadline=3600)
with store.write():
    pass
"""
    with held(db) as release:
        before = tickets_taken(db)
        child = subprocess.Popen([sys.executable, "-c", waiter, str(db)], env=child_env())
        try:
            wait_until(lambda: tickets_taken(db) > before, "the child queued")
            outcome: list[str] = []

            def write() -> None:
                with SQLiteStore(db, busy_deadline=30) as store, store.write() as tx:
                    tx.put(new(), "a", {})
                    outcome.append("written")

            thread = threading.Thread(target=write)
            thread.start()
            wait_until(lambda: tickets_taken(db) > before + 1, "a writer queued behind the child")
            child.send_signal(signal.SIGKILL)
            child.wait()
            release.set()
            thread.join(30)
        finally:
            child.kill()
            child.wait()
    assert outcome == ["written"]


@pytest.mark.slow  # real processes
def test_threads_and_processes_writing_at_once_lose_no_update(db: Path) -> None:
    procs, threads, each = 4, 4, 25
    with SQLiteStore(db) as store, store.write() as tx:
        tx.put(new("counter/1"), "counting", {"n": 0})
    children = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(db), str(threads), str(each)],
            env=child_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(procs)
    ]
    outputs = [child.communicate(timeout=240)[0] for child in children]
    assert [child.returncode for child in children] == [0] * procs, outputs
    total = procs * threads * each
    with SQLiteStore(db) as store:
        counter = store.get("counter/1")
        assert counter is not None
        assert counter.data["n"] == total, "an update was lost"
        assert counter.version == total + 1
        with store.write() as tx:
            assert tx.next_number("writes") == total + 1
        assert store.integrity() == "ok"
    assert tickets_taken(db) > 0, "writers queued behind each other"


def test_a_writer_without_the_lock_file_is_still_waited_for_within_the_budget(db: Path) -> None:
    """Another program holding SQLite's lock directly: the jittered retries behind the queue, one budget."""
    blocker = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        with SQLiteStore(db, busy_deadline=0.3) as store, pytest.raises(StoreBusyError) as caught, store.write():
            pass
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    details = caught.value.details
    assert details["budget_seconds"] == 0.3 and details["waited_seconds"] >= 0.25
    assert details["attempts"] > 2, "SQLite answered busy more than once"
    with SQLiteStore(db) as store, store.write() as tx:
        tx.put(new(), "a", {})


INTERRUPTED = r"""
import os, signal, sys, threading, time
from runner.context import Instance
from runner.sql.store_sqlite import SQLiteStore
from runner.sql.store_sqlite_writelock import lock_path

db = sys.argv[1]
# Ctrl-C as an interactive Python takes it, whatever this process inherited: a launcher that ignores
# SIGINT (a background job of a non-interactive shell, as CI's may be) passes SIG_IGN down to every
# child, Python then installs no KeyboardInterrupt handler, and the waiter would rightly sleep on.
signal.signal(signal.SIGINT, signal.default_int_handler)


def taken():
    raw = lock_path(__import__("pathlib").Path(db)).read_bytes()[:8]
    return int.from_bytes(raw, "little") if len(raw) == 8 else 0


release, holding = threading.Event(), threading.Event()
holder = SQLiteStore(db)


def hold():
    with holder.write() as tx:
        tx.put(Instance("holder/1", "thing", "", 0, {}), "held", {})
        holding.set()
        release.wait(30)


threading.Thread(target=hold).start()
assert holding.wait(10)
before = taken()
main = threading.get_ident()


def interrupt():
    give_up = time.monotonic() + 20
    while taken() <= before and time.monotonic() < give_up:
        time.sleep(0.005)
    time.sleep(0.05)  # into the wait proper (a KeyboardInterrupt anywhere must leave it clean)
    signal.pthread_kill(main, signal.SIGINT)  # Ctrl-C, where Python takes it: the main thread


waiter = SQLiteStore(db)
threading.Thread(target=interrupt).start()
try:
    with waiter.write():
        pass
    print("not interrupted", flush=True)
    sys.exit(1)
except KeyboardInterrupt:
    print("interrupted", flush=True)
finally:
    release.set()
"""


def test_an_interrupted_waiter_leaves_the_queue(db: Path) -> None:
    """Ctrl-C while waiting in the queue: the place is given up, nobody behind is held up.

    In a process of its own, whose main thread is the waiter: where Python takes a SIGINT (under
    pytest-xdist the test's thread and the process's signal handling are not the runner's to choose),
    which takes Python's own SIGINT handler even if the suite was started with SIGINT ignored (it used
    to inherit SIG_IGN then, and the waiter ran out its 15 s budget)."""
    done = subprocess.run(
        [sys.executable, "-c", INTERRUPTED, str(db)],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0 and done.stdout.strip() == "interrupted", done.stdout + done.stderr
    with SQLiteStore(db, busy_deadline=30) as store, store.write() as tx:
        tx.put(new(), "after", {})
    with SQLiteStore(db) as store:
        assert store.get("thing/1") is not None


def test_an_interrupt_while_the_wait_starts_leaves_the_queue(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C just as the helper thread that waits in the kernel is started: the place is given up.

    Starting a thread waits for it to run (an interruptible wait, long on a loaded machine); an
    interrupt there used to leave the descriptor holding the ticket, and every later writer waited
    behind it until its budget ran out."""
    from runner.sql import store_sqlite_writelock

    class Interrupted(threading.Thread):
        def start(self) -> None:
            super().start()
            raise KeyboardInterrupt  # as a SIGINT arriving while ``start`` waits for the thread

    with held(db) as release, SQLiteStore(db) as waiter:
        monkeypatch.setattr(store_sqlite_writelock.threading, "Thread", Interrupted)
        with pytest.raises(KeyboardInterrupt), waiter.write():
            pass
        monkeypatch.undo()
        release.set()
    with SQLiteStore(db, busy_deadline=5) as store, store.write() as tx:
        tx.put(new(), "after", {})
    with SQLiteStore(db) as store:
        assert store.get("thing/1") is not None


def test_without_a_usable_lock_file_writers_fall_back_to_sqlites_own_waits(
    db: Path, caplog: pytest.LogCaptureFixture
) -> None:
    lock_path(db).mkdir()  # something that cannot be the lock file
    with caplog.at_level("WARNING", logger="runner.sql.store_sqlite_writelock"), SQLiteStore(db) as store:
        with store.write() as tx:
            tx.put(new(), "a", {})
        waiter = SQLiteStore(db, busy_deadline=0.3)
        with held(db), pytest.raises(StoreBusyError) as caught, waiter.write():
            pass
        waiter.close()
    assert "without a FIFO queue" in caplog.text
    assert caught.value.details["budget_seconds"] == 0.3, "the budget is reported without the queue too"
    assert lock_path(db).is_dir(), "left as it was"
