"""The store contract, every method of the port, run against every registered store.

``any_store`` and ``store_kind`` iterate :data:`runner.store.STORES` (``tests/support/stores.py``):
a new adapter joins every test here by adding its conformance factory there. Two store objects on
one URL stand for two processes; threads stand for concurrent writers.
"""

from __future__ import annotations

import itertools
import random
import sqlite3
import stat
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from runner.context import Instance, format_time
from runner.errors import ConflictError, InputError, StoreBusyError, StoreCorruptError, StoreVersionError
from runner.store import STORES, Store
from runner.store.sqlite import SCHEMA_VERSION, SQLiteStore
from tests.conftest import FakeClock
from tests.support.stores import KINDS, StoreKind


def new(instance_id: str = "thing/1", machine: str = "thing", state: str = "start") -> Instance:
    return Instance(instance_id, machine, state, 0, {})


def other(store_kind: StoreKind, store: Store, busy_deadline: float | None = None) -> Store:
    """A second connection to the same store, as another process would open it."""
    return store_kind.open(store.url, busy_deadline=busy_deadline)


def test_every_registered_store_has_a_conformance_factory() -> None:
    assert set(STORES.names()) <= set(KINDS), "add the new store's kind to tests/support/stores.py"
    assert "sqlite" in STORES.names()


# --- instances: compare-and-set ---------------------------------------------------------------------


def test_insert_then_compare_and_set(any_store: Store, clock: FakeClock) -> None:
    with any_store.write() as tx:
        first = tx.put(new(), "a", {"n": 1})
        event = tx.append(first, "go", "start", "tester", {"k": "v"})
    assert (first.version, first.state, first.created_at, first.updated_at) == (
        1,
        "a",
        format_time(clock.now),
        format_time(clock.now),
    )
    assert (event.from_state, event.to_state, event.version) == ("start", "a", 1)
    clock.advance(5)
    with any_store.write() as tx:
        second = tx.put(first, "b", {"n": 2})
    assert second.version == 2
    assert (second.created_at, second.updated_at) == (first.created_at, format_time(clock.now))
    stored = any_store.get("thing/1")
    assert stored == second
    assert (stored.state, stored.version, dict(stored.data)) == ("b", 2, {"n": 2})


def test_data_round_trips_every_json_value(any_store: Store) -> None:
    data = {"s": "ünï ✓", "i": -3, "f": 1.5, "t": True, "n": None, "l": [1, {"x": []}], "o": {"k": {"d": "e"}}}
    with any_store.write() as tx:
        tx.put(new(), "a", data)
    stored = any_store.get("thing/1")
    assert stored is not None and dict(stored.data) == data


def test_an_unknown_instance_reads_as_none(any_store: Store) -> None:
    assert any_store.get("never/1") is None
    with any_store.read() as reader:
        assert reader.get("never/1") is None
    with any_store.write() as tx:
        assert tx.get("never/1") is None


def test_stale_version_is_a_conflict_and_writes_nothing(any_store: Store) -> None:
    with any_store.write() as tx:
        first = tx.put(new(), "a", {})
    with any_store.write() as tx:
        tx.put(first, "b", {})
    with pytest.raises(ConflictError) as caught, any_store.write() as tx:
        tx.append(tx.put(first, "c", {}), "late", "a", "tester", {})
    assert caught.value.code == "version_conflict"
    assert (caught.value.details["expected_version"], caught.value.details["actual_version"]) == (1, 2)
    stored = any_store.get("thing/1")
    assert stored is not None and (stored.state, stored.version) == ("b", 2)
    assert any_store.events() == []


def test_an_update_of_a_row_never_written_is_a_conflict(any_store: Store) -> None:
    ghost = Instance("ghost/1", "ghost", "a", 3, {})
    with pytest.raises(ConflictError) as caught, any_store.write() as tx:
        tx.put(ghost, "b", {})
    assert caught.value.code == "version_conflict" and caught.value.details["actual_version"] is None
    assert any_store.get("ghost/1") is None


def test_second_insert_of_one_id_conflicts(any_store: Store) -> None:
    with any_store.write() as tx:
        tx.put(new(), "a", {"first": True})
    with pytest.raises(ConflictError) as caught, any_store.write() as tx:
        tx.put(new(), "b", {})
    assert caught.value.code == "version_conflict" and caught.value.details["expected_version"] == 0
    stored = any_store.get("thing/1")
    assert stored is not None and (stored.state, dict(stored.data)) == ("a", {"first": True})


def test_a_transaction_reads_its_own_writes_and_judges_time_once(any_store: Store, clock: FakeClock) -> None:
    start = clock.now
    with any_store.write() as tx:
        began = tx.now
        written = tx.put(new(), "a", {"n": 1})
        assert tx.get("thing/1") == written
        assert [i.id for i in tx.find("thing", ["a"])] == ["thing/1"]
        clock.advance(60)  # the clock moves mid-transaction: the transaction keeps its own time
        later = tx.put(written, "b", {"n": 2})
        assert tx.now == began
    assert began == start, "the transaction's time is the store's clock when it began"
    assert later.updated_at == format_time(began)
    assert any_store.now() == clock.now


# --- find -------------------------------------------------------------------------------------------


def test_find_by_machine_and_state(any_store: Store) -> None:
    with any_store.write() as tx:
        tx.put(new("a/2", "a", "x"), "off", {})
        tx.put(new("a/1", "a", "x"), "on", {})
        tx.put(new("a/3", "a", "x"), "gone", {})
        tx.put(new("b/1", "b", "x"), "on", {})
    assert [i.id for i in any_store.find("a")] == ["a/1", "a/2", "a/3"], "ordered by id"
    assert [i.id for i in any_store.find("a", ["on"])] == ["a/1"]
    assert [i.id for i in any_store.find("a", iter(["off", "gone"]))] == ["a/2", "a/3"], "any iterable"
    assert any_store.find("a", []) == []
    assert any_store.find("nobody") == []
    with any_store.read() as reader:
        assert [i.state for i in reader.find("b")] == ["on"]


# --- snapshots and transactions ---------------------------------------------------------------------


def test_a_snapshot_stays_consistent_and_blocks_no_writer(any_store: Store, store_kind: StoreKind) -> None:
    with any_store.write() as tx:
        tx.put(new(), "a", {})
    with other(store_kind, any_store) as second, any_store.read() as reader:
        before = reader.get("thing/1")
        assert before is not None
        with second.write() as tx:  # another process writes while the snapshot is open
            current = tx.get("thing/1")
            assert current is not None
            tx.put(current, "b", {})
        assert reader.get("thing/1") == before, "a snapshot does not see later commits"
    stored = any_store.get("thing/1")
    assert stored is not None and stored.state == "b"


def test_exception_rolls_the_whole_transaction_back(any_store: Store) -> None:
    with any_store.write() as tx:
        kept = tx.put(new("kept/1"), "a", {})
        assert tx.next_number("n") == 1
    with pytest.raises(RuntimeError), any_store.write() as tx:
        tx.put(kept, "moved", {})
        created = tx.put(new(), "a", {})
        tx.append(created, "go", "start", "tester", {})
        tx.next_number("n")
        raise RuntimeError("boom")
    assert any_store.get("thing/1") is None
    stored = any_store.get("kept/1")
    assert stored is not None and (stored.state, stored.version) == ("a", 1)
    assert any_store.events() == []
    with any_store.write() as tx:
        assert tx.next_number("n") > 1


def test_concurrent_writers_serialize_and_lose_no_update(any_store: Store, store_kind: StoreKind) -> None:
    """Read-modify-write from two connections, with no retry: serialized transactions never conflict."""
    with any_store.write() as tx:
        tx.put(new("count/1", "count"), "on", {"n": 0})
    failures: list[BaseException] = []

    def bump(store: Store) -> None:
        try:
            for _ in range(25):
                with store.write() as tx:
                    current = tx.get("count/1")
                    assert current is not None
                    tx.put(current, "on", {"n": current.data["n"] + 1})
        except BaseException as exc:  # reported below, on the test's thread
            failures.append(exc)

    with other(store_kind, any_store) as a, other(store_kind, any_store) as b:
        threads = [threading.Thread(target=bump, args=(s,)) for s in (a, b)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert failures == []
    stored = any_store.get("count/1")
    assert stored is not None and (stored.data["n"], stored.version) == (50, 51)


# --- busy and retry ---------------------------------------------------------------------------------


def _hold_write_lock(store: Store, seconds: float) -> threading.Thread:
    """Another connection takes the write lock (and writes ``holder/1``) and keeps it ``seconds``."""
    held = threading.Event()

    def hold() -> None:
        with store.write() as tx:
            tx.put(new("holder/1"), "held", {})
            held.set()
            time.sleep(seconds)

    thread = threading.Thread(target=hold)
    thread.start()
    assert held.wait(5), "the holder got the write lock"
    return thread


def test_a_writer_waits_for_the_lock_and_then_writes(any_store: Store, store_kind: StoreKind) -> None:
    with other(store_kind, any_store) as holder, other(store_kind, any_store, busy_deadline=5) as waiter:
        thread = _hold_write_lock(holder, 0.3)
        started = time.monotonic()
        with waiter.write() as tx:
            assert tx.get("holder/1") is not None, "it began after the holder committed"
            tx.put(new(), "a", {})
        waited = time.monotonic() - started
        thread.join()
    assert 0.15 < waited < 4
    assert any_store.get("thing/1") is not None


@pytest.mark.slow  # seconds of waiting on processes or deadlines: left out of make test-fast
def test_a_writer_gives_up_at_the_deadline_with_store_busy(any_store: Store, store_kind: StoreKind) -> None:
    with other(store_kind, any_store) as holder, other(store_kind, any_store, busy_deadline=0.3) as waiter:
        thread = _hold_write_lock(holder, 1.5)
        started = time.monotonic()
        with pytest.raises(StoreBusyError) as caught, waiter.write() as tx:
            tx.put(new(), "a", {})
        waited = time.monotonic() - started
        thread.join()
    assert caught.value.code == "store_busy" and caught.value.details["attempts"] > 1
    assert 0.25 < waited < 1.4
    assert any_store.get("thing/1") is None, "nothing was written"
    assert any_store.get("holder/1") is not None


# --- events -----------------------------------------------------------------------------------------


def test_events_carry_what_was_appended(any_store: Store, clock: FakeClock) -> None:
    with any_store.write() as tx:
        written = tx.put(new(), "a", {})
        event = tx.append(written, "go", "start", "tester", {"why": ["x", 1]})
    (stored,) = any_store.events()
    assert stored == event
    assert (stored.instance_id, stored.machine, stored.trigger, stored.actor) == ("thing/1", "thing", "go", "tester")
    assert (stored.from_state, stored.to_state, stored.version) == ("start", "a", 1)
    assert (dict(stored.payload), stored.at) == ({"why": ["x", 1]}, format_time(clock.now))


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
    assert [e.seq for e in any_store.events(since=seqs[1], limit=2)] == seqs[2:4]
    assert [e.instance_id for e in any_store.events(instance_id="y/1")] == ["y/1"] * 3
    assert [e.version for e in any_store.events(instance_id="y/1")] == [1, 2, 3]
    assert [e.seq for e in any_store.events(since=seqs[1], limit=1, instance_id="y/1")] == [seqs[3]]
    assert any_store.events(since=seqs[-1]) == []
    assert any_store.events(instance_id="z/1") == []
    assert any_store.events(limit=0) == []


def test_many_events_in_one_transaction_keep_their_order(any_store: Store) -> None:
    with any_store.write() as tx:
        written = tx.put(new(), "a", {})
        appended = [tx.append(written, f"t{i}", "start", "tester", {}).seq for i in range(5)]
    assert [e.trigger for e in any_store.events()] == [f"t{i}" for i in range(5)]
    assert appended == sorted(appended) and len(set(appended)) == 5


def test_wait_events_wakes_on_a_commit_from_another_connection(any_store: Store, store_kind: StoreKind) -> None:
    def writer() -> None:
        time.sleep(0.2)
        with other(store_kind, any_store) as second, second.write() as tx:
            tx.append(tx.put(new(), "a", {}), "go", "start", "other", {})

    thread = threading.Thread(target=writer)
    started = time.monotonic()
    thread.start()
    found = any_store.wait_events(0, timeout=5)
    waited = time.monotonic() - started
    thread.join()
    assert [e.actor for e in found] == ["other"]
    assert 0.15 < waited < 2


def test_wait_events_returns_at_once_when_events_exist_and_empty_at_the_timeout(any_store: Store) -> None:
    with any_store.write() as tx:
        tx.append(tx.put(new(), "a", {}), "go", "start", "tester", {})
    started = time.monotonic()
    (found,) = any_store.wait_events(0, timeout=5)
    assert time.monotonic() - started < 1
    started = time.monotonic()
    assert any_store.wait_events(found.seq, timeout=0.2) == []
    assert 0.15 < time.monotonic() - started < 2


def test_follow_yields_every_later_event_as_it_is_appended(any_store: Store, store_kind: StoreKind) -> None:
    with any_store.write() as tx:
        first = tx.append(tx.put(new("before/1"), "a", {}), "old", "start", "tester", {})

    def writer() -> None:
        with other(store_kind, any_store) as second:
            for index in range(3):
                time.sleep(0.05)
                with second.write() as tx:
                    tx.append(tx.put(new(f"later/{index}"), "a", {}), f"new{index}", "start", "other", {})

    thread = threading.Thread(target=writer)
    thread.start()
    followed = list(itertools.islice(any_store.follow(first.seq, poll=0.05), 3))
    thread.join()
    assert [e.trigger for e in followed] == ["new0", "new1", "new2"], "after the cursor only, in order"
    assert [e.seq for e in followed] == sorted(e.seq for e in followed)


# --- counters ---------------------------------------------------------------------------------------


def test_counters_start_at_one_and_are_independent(any_store: Store) -> None:
    with any_store.write() as tx:
        assert [tx.next_number("a"), tx.next_number("a"), tx.next_number("b")] == [1, 2, 1]
    with any_store.write() as tx:
        assert (tx.next_number("a"), tx.next_number("b")) == (3, 2)


def test_counters_never_hand_a_number_out_twice_across_connections(any_store: Store, store_kind: StoreKind) -> None:
    taken: list[int] = []
    lock = threading.Lock()

    def take(store: Store) -> None:
        for _ in range(20):
            with store.write() as tx:
                number = tx.next_number("pane")
            with lock:
                taken.append(number)

    with other(store_kind, any_store) as a, other(store_kind, any_store) as b:
        threads = [threading.Thread(target=take, args=(s,)) for s in (a, b)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert sorted(taken) == list(range(1, 41))


# --- the database: version, damage, info ------------------------------------------------------------


def test_a_database_from_a_newer_corral_is_refused(any_store: Store, store_kind: StoreKind, tmp_path: Path) -> None:
    url = any_store.url
    with any_store.write() as tx:
        tx.put(new(), "a", {})
    any_store.close()
    store_kind.make_newer(url)
    with pytest.raises(StoreVersionError) as caught:
        store_kind.open(url)
    assert caught.value.code == "store_too_new"


@pytest.mark.parametrize(
    ("table", "column"),
    [("instances", "data"), ("events", "payload")],
)
def test_a_row_that_does_not_decode_is_refused(
    any_store: Store, store_kind: StoreKind, table: str, column: str
) -> None:
    with any_store.write() as tx:
        event = tx.append(tx.put(new(), "a", {}), "go", "start", "tester", {})
    store_kind.corrupt(any_store.url, table, "thing/1" if table == "instances" else event.seq, column)
    reads = {
        "instances": [lambda: any_store.get("thing/1"), lambda: any_store.find("thing")],
        "events": [any_store.events, lambda: any_store.wait_events(0, 0.1)],
    }[table]
    for read in reads:
        with pytest.raises(StoreCorruptError) as caught:
            read()
        assert caught.value.code == "store_corrupt"
        assert (caught.value.details["table"], caught.value.details["column"]) == (table, column)


def test_info_names_the_adapter_and_its_schema(any_store: Store, store_kind: StoreKind) -> None:
    info = any_store.info()
    assert info["adapter"] == store_kind.scheme
    assert isinstance(info["schema_version"], int) and info["schema_version"] >= 1


def test_a_store_reopens_from_its_own_url(any_store: Store, store_kind: StoreKind) -> None:
    with any_store.write() as tx:
        tx.put(new(), "a", {"n": 1})
    with other(store_kind, any_store) as again:
        assert again.url == any_store.url
        assert again.get("thing/1") == any_store.get("thing/1")


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


def test_sqlite_busy_against_a_raw_lock_holder(tmp_path: Path) -> None:
    """A lock held outside corral (another tool) is waited for the same way."""
    path = tmp_path / "s.db"
    SQLiteStore(path).close()
    blocker = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        with SQLiteStore(path, busy_deadline=0.3) as store, pytest.raises(StoreBusyError), store.write():
            pass
    finally:
        blocker.execute("ROLLBACK")
    released = threading.Event()

    def release() -> None:
        released.set()  # before the lock goes: a writer that got in saw it set
        blocker.execute("ROLLBACK")

    blocker.execute("BEGIN IMMEDIATE")
    threading.Timer(0.3, release).start()
    with SQLiteStore(path, busy_deadline=5) as store, store.write() as tx:
        assert released.is_set(), "the write began while another connection held the lock"
        tx.put(new(), "a", {"n": 1})
    blocker.close()
    with SQLiteStore(path) as store:
        stored = store.get("thing/1")
        assert stored is not None
        assert (stored.state, stored.version, dict(stored.data)) == ("a", 1, {"n": 1})


# --- issue 13: counts by machine and state, keyset paging in find -----------------------------------

# Ids with separators, digits of different widths, a non-ASCII letter: the order must be code point
# order (Python's), not numeric or locale order.
_ID_PARTS = ("a", "b", "B", "0", "9", "10", "-", "_", ".", "é", "z9", "ä1")


def _random_world(store: Store, seed: int) -> list[Instance]:
    """Instances of three machines in random states with random data, some rewritten; returns them as stored."""
    rng = random.Random(seed)
    machines, states = ("alpha", "beta", "gamma"), ("on", "off", "gone", "done")
    ids: set[str] = set()
    while len(ids) < rng.randint(1, 60):
        ids.add(f"{rng.choice(machines)}/" + "".join(rng.choice(_ID_PARTS) for _ in range(rng.randint(1, 4))))
    with store.write() as tx:
        for instance_id in sorted(ids, key=lambda _: rng.random()):
            machine = instance_id.partition("/")[0]
            written = tx.put(new(instance_id, machine), rng.choice(states), {"n": rng.randint(0, 9), "pad": "x" * 40})
            if rng.random() < 0.3:
                tx.put(written, rng.choice(states), {"n": -1})
    found: list[Instance] = []
    for machine in machines:
        found += store.find(machine)
    return found


@pytest.mark.parametrize("seed", range(8))
def test_counts_equal_a_decode_and_count(any_store: Store, seed: int) -> None:
    world = _random_world(any_store, seed)
    expected: dict[tuple[str, str], int] = {}
    for instance in world:
        expected[(instance.machine, instance.state)] = expected.get((instance.machine, instance.state), 0) + 1
    assert any_store.counts() == expected
    for machine in ("alpha", "beta", "gamma", "nobody"):
        assert any_store.counts(machine) == {k: n for k, n in expected.items() if k[0] == machine}
    with any_store.read() as reader:
        assert reader.counts() == expected, "a snapshot counts too"
    assert all(n >= 1 for n in any_store.counts().values()), "only pairs with instances appear"


@pytest.mark.parametrize("seed", range(8))
def test_paging_with_after_visits_every_instance_once_in_id_order(any_store: Store, seed: int) -> None:
    world = _random_world(any_store, seed)
    rng = random.Random(1000 + seed)
    for machine in ("alpha", "beta", "gamma"):
        for states in (None, ["on"], ["off", "gone"], []):
            everything = any_store.find(machine, states)
            assert [i.id for i in everything] == sorted(i.id for i in everything), "id order is code point order"
            assert everything == sorted(
                (i for i in world if i.machine == machine and (states is None or i.state in states)),
                key=lambda i: i.id,
            )
            limit = rng.randint(1, 7)
            seen: list[Instance] = []
            after: str | None = None
            while True:
                page = any_store.find(machine, states, after=after, limit=limit)
                assert len(page) <= limit
                if not page:
                    break
                assert after is None or page[0].id > after
                seen += page
                after = page[-1].id
            assert seen == everything, f"pages of {limit} from {machine} in {states} visit each exactly once"


def test_paging_edges_and_a_cursor_that_is_not_stored(any_store: Store) -> None:
    with any_store.write() as tx:
        for instance_id in ("m/a", "m/b", "m/c", "n/a"):
            tx.put(new(instance_id, instance_id[0]), "on", {})
    assert [i.id for i in any_store.find("m", limit=1)] == ["m/a"]
    assert [i.id for i in any_store.find("m", after="m/a")] == ["m/b", "m/c"]
    assert [i.id for i in any_store.find("m", after="m/aa", limit=5)] == ["m/b", "m/c"], "an absent id is a cursor"
    assert any_store.find("m", after="m/c") == []
    assert [i.id for i in any_store.find("m", after="", limit=10)] == ["m/a", "m/b", "m/c"]
    assert any_store.find("m", ["off"], after="m/a", limit=3) == []
    with any_store.read() as reader:
        assert [i.id for i in reader.find("m", ["on"], after="m/a", limit=1)] == ["m/b"]


@pytest.mark.parametrize("bad", [{"limit": 0}, {"limit": -3}, {"limit": True}, {"limit": 2.0}, {"after": 7}])
def test_a_bad_page_is_refused_before_reading(any_store: Store, bad: dict[str, Any]) -> None:
    with pytest.raises(InputError) as caught:
        any_store.find("m", **bad)
    assert caught.value.code == "input_invalid"
    assert caught.value.details["field"] == next(iter(bad))


def test_a_version_2_sqlite_file_migrates_forward_and_pages(tmp_path: Path) -> None:
    """A store written before paged listings (schema 2) opens, migrates and answers counts and pages."""
    from runner.store import sqlite as sqlite_store
    from runner.store.sqlite_file import APPLICATION_ID

    path = tmp_path / "old.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("BEGIN IMMEDIATE")
    for script in sqlite_store.MIGRATIONS[:2]:
        for statement in sqlite_store._statements(script):
            conn.execute(statement)
    for n in range(5):
        conn.execute(
            "INSERT INTO instances VALUES (?, 'old', ?, 1, ?, ?, ?)",
            (f"old/{n}", "on" if n % 2 else "off", '{"n": 1}', "2024-01-01T00:00:00Z", "2024-01-01T00:00:00Z"),
        )
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    conn.execute("PRAGMA user_version = 2")
    conn.execute("COMMIT")
    conn.close()
    with SQLiteStore(path) as store:
        assert store.info()["schema_version"] == SCHEMA_VERSION
        assert store.counts() == {("old", "off"): 3, ("old", "on"): 2}
        assert [i.id for i in store.find("old", after="old/1", limit=2)] == ["old/2", "old/3"]
        with store.write() as tx:
            tx.put(new("old/9", "old"), "on", {})
        assert store.counts("old") == {("old", "off"): 3, ("old", "on"): 3}
    with sqlite3.connect(path) as raw:
        indexes = {row[0] for row in raw.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert "instances_by_machine_id" in indexes
