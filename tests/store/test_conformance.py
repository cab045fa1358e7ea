"""The store contract, run against every adapter (today: SQLite; PostgreSQL joins the parameter list)."""

from __future__ import annotations

import sqlite3
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.context import Instance
from runner.errors import ConflictError, InputError, StoreBusyError
from runner.store import Store, open_store, sqlite_path
from runner.store.sqlite import SCHEMA_VERSION, SQLiteStore


@pytest.fixture(params=["sqlite"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    with open_store(f"sqlite://{tmp_path / 'store.db'}") as store:
        yield store


def new(instance_id: str = "thing/1", machine: str = "thing", state: str = "start") -> Instance:
    return Instance(instance_id, machine, state, 0, {})


def test_insert_then_compare_and_set(any_store: Store) -> None:
    with any_store.write() as tx:
        first = tx.put(new(), "a", {"n": 1})
        event = tx.append(first, "go", "start", "tester", {"k": "v"})
    assert (first.version, first.state) == (1, "a")
    assert (event.from_state, event.to_state, event.version) == ("start", "a", 1)
    with any_store.write() as tx:
        second = tx.put(first, "b", {"n": 2})
    assert second.version == 2
    stored = any_store.get("thing/1")
    assert stored is not None
    assert (stored.state, stored.version, dict(stored.data)) == ("b", 2, {"n": 2})


def test_stale_version_is_a_conflict_and_writes_nothing(any_store: Store) -> None:
    with any_store.write() as tx:
        first = tx.put(new(), "a", {})
    with any_store.write() as tx:
        tx.put(first, "b", {})
    with pytest.raises(ConflictError) as caught, any_store.write() as tx:
        tx.append(tx.put(first, "c", {}), "late", "a", "tester", {})
    assert caught.value.code == "version_conflict"
    assert caught.value.details["actual_version"] == 2
    stored = any_store.get("thing/1")
    assert stored is not None and stored.state == "b"
    assert [e.trigger for e in any_store.events()] == []


def test_second_insert_of_one_id_conflicts(any_store: Store) -> None:
    with any_store.write() as tx:
        tx.put(new(), "a", {})
    with pytest.raises(ConflictError), any_store.write() as tx:
        tx.put(new(), "a", {})


def test_exception_rolls_the_whole_transaction_back(any_store: Store) -> None:
    with pytest.raises(RuntimeError), any_store.write() as tx:
        created = tx.put(new(), "a", {})
        tx.append(created, "go", "start", "tester", {})
        raise RuntimeError("boom")
    assert any_store.get("thing/1") is None
    assert any_store.events() == []


def test_events_are_ordered_filtered_and_sequence_numbers_grow(any_store: Store) -> None:
    seqs = []
    for index in range(3):
        for name in ("x/1", "y/1"):
            with any_store.write() as tx:
                current = tx.get(name) or new(name)
                written = tx.put(current, f"s{index}", {"i": index})
                seqs.append(tx.append(written, "go", current.state, "tester", {"i": index}).seq)
    assert seqs == sorted(seqs) and len(set(seqs)) == 6
    assert [e.seq for e in any_store.events()] == seqs
    assert [e.seq for e in any_store.events(since=seqs[2])] == seqs[3:]
    assert [e.seq for e in any_store.events(limit=2)] == seqs[:2]
    assert [e.instance_id for e in any_store.events(instance_id="y/1")] == ["y/1"] * 3
    assert [e.version for e in any_store.events(instance_id="y/1")] == [1, 2, 3]


def test_find_by_machine_and_state(any_store: Store) -> None:
    with any_store.write() as tx:
        tx.put(new("a/1", "a", "x"), "on", {})
        tx.put(new("a/2", "a", "x"), "off", {})
        tx.put(new("b/1", "b", "x"), "on", {})
    assert [i.id for i in any_store.find("a")] == ["a/1", "a/2"]
    assert [i.id for i in any_store.find("a", ["on"])] == ["a/1"]
    assert any_store.find("a", []) == []


def test_wait_events_wakes_on_a_commit_from_another_connection(any_store: Store, tmp_path: Path) -> None:
    def writer() -> None:
        time.sleep(0.2)
        with open_store(any_store.url) as other, other.write() as tx:
            tx.append(tx.put(new(), "a", {}), "go", "start", "other", {})

    thread = threading.Thread(target=writer)
    started = time.monotonic()
    thread.start()
    found = any_store.wait_events(0, timeout=5)
    waited = time.monotonic() - started
    thread.join()
    assert [e.actor for e in found] == ["other"]
    assert 0.15 < waited < 2
    assert any_store.wait_events(found[-1].seq, timeout=0.1) == []


# --- SQLite specifics -------------------------------------------------------------------------------


def test_sqlite_file_settings(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "s.db") as store:
        info = store.info()
        assert info["journal_mode"] == "wal"
        assert info["schema_version"] == SCHEMA_VERSION
        assert store.integrity() == "ok"
    assert stat.S_IMODE((tmp_path / "s.db").stat().st_mode) == 0o600


def test_event_log_is_append_only_even_for_raw_sql(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "s.db") as store, store.write() as tx:
        tx.append(tx.put(new(), "a", {}), "go", "start", "tester", {})
    conn = sqlite3.connect(tmp_path / "s.db")
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        conn.execute("UPDATE events SET actor = 'forged'")
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        conn.execute("DELETE FROM events")
    conn.close()


def test_busy_store_gives_up_at_the_deadline_with_store_busy(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    SQLiteStore(path).close()
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        with SQLiteStore(path, busy_deadline=0.3) as store:
            started = time.monotonic()
            with pytest.raises(StoreBusyError) as caught, store.write():
                pass
            assert 0.25 < time.monotonic() - started < 2
            assert caught.value.code == "store_busy" and caught.value.details["attempts"] > 1
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()


def test_writer_gets_the_lock_once_it_is_released(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    SQLiteStore(path).close()
    blocker = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    blocker.execute("BEGIN IMMEDIATE")
    released = threading.Event()

    def release() -> None:
        released.set()  # before the lock goes: a writer that got in saw it set
        blocker.execute("ROLLBACK")

    threading.Timer(0.3, release).start()
    with SQLiteStore(path, busy_deadline=5) as store, store.write() as tx:
        assert released.is_set(), "the write began while another connection held the lock"
        tx.put(new(), "a", {"n": 1})
    blocker.close()
    with SQLiteStore(path) as store:
        stored = store.get("thing/1")
        assert stored is not None
        assert (stored.state, stored.version, dict(stored.data)) == ("a", 1, {"n": 1})


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("sqlite:///abs/file.db", Path("/abs/file.db")),
        ("sqlite:////abs/file.db", Path("/abs/file.db")),
        ("sqlite:relative.db", Path("relative.db")),
        ("plain/path.db", Path("plain/path.db")),
        ("postgresql://u@h/db", None),
    ],
)
def test_store_urls(url: str, expected: Path | None) -> None:
    assert sqlite_path(url) == expected


@pytest.mark.parametrize(
    ("url", "code"),
    [
        ("postgresql://user:secret@host/db", "store_unsupported"),
        ("mysql://host/db", "store_url_invalid"),
        ("sqlite:///no/such/directory/x.db", "store_url_invalid"),
    ],
)
def test_bad_store_urls(url: str, code: str) -> None:
    with pytest.raises(InputError) as caught:
        open_store(url)
    assert caught.value.code == code
    assert "secret" not in caught.value.message and "secret" not in str(caught.value.details)
