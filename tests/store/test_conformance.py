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
from contextlib import closing
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from runner.context import Claim, Instance, format_time
from runner.errors import (
    ConflictError,
    EventsPrunedError,
    InputError,
    StoreBusyError,
    StoreCorruptError,
    StoreVersionError,
)
from runner.sql.store_sqlite import MIGRATIONS, SCHEMA_VERSION, SQLiteStore, _statements
from runner.sql.store_sqlite_file import APPLICATION_ID
from runner.store import STORES, Store
from tests.conftest import FakeClock
from tests.support.stores import KINDS, StoreKind, sqlite_file_before


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


# --- the claim index --------------------------------------------------------------------------------


def _claims(found: list[Claim]) -> list[tuple[str, str, str, str]]:
    return [(c.instance_id, c.space, c.kind, c.scope) for c in found]


def test_claims_overlap_by_equality_ancestry_and_descent_within_their_space(any_store: Store) -> None:
    with any_store.write() as tx:
        tx.put(new("lane/1", "lane"), "live", {})
        tx.put(new("lane/2", "lane"), "live", {})
        tx.set_claims("lane/1", [("r", "owned", "src"), ("r", "locked", "docs/a.md"), ("q", "owned", "tests")])
        tx.set_claims("lane/2", [("r", "owned", "src/core/x.py"), ("r", "owned", "srcx"), ("r", "owned", "src0")])
    with any_store.read() as reader:
        assert _claims(reader.overlapping_claims("r", ["src/core"])) == [
            ("lane/1", "r", "owned", "src"),  # an ancestor
            ("lane/2", "r", "owned", "src/core/x.py"),  # under it
        ], "srcx and src0 share a prefix, not a directory"
        assert _claims(reader.overlapping_claims("r", ["docs/a.md", "tests"])) == [
            ("lane/1", "r", "locked", "docs/a.md")
        ]
        assert _claims(reader.overlapping_claims("r", ["docs"], kinds=["owned"])) == [], "kinds filter"
        assert _claims(reader.overlapping_claims("q", ["tests/unit"])) == [("lane/1", "q", "owned", "tests")]
        assert reader.overlapping_claims("r", []) == []
        assert reader.overlapping_claims("elsewhere", ["src"]) == []
        everywhere = reader.overlapping_claims(None, ["tests", "srcx"])
        assert _claims(everywhere) == [("lane/1", "q", "owned", "tests"), ("lane/2", "r", "owned", "srcx")]
        assert everywhere[0] == Claim(space="q", kind="owned", scope="tests", instance_id="lane/1")


def test_set_claims_replaces_clears_and_ignores_duplicates(any_store: Store) -> None:
    with any_store.write() as tx:
        tx.put(new("lane/1", "lane"), "live", {})
        tx.set_claims("lane/1", [("r", "owned", "a"), ("r", "owned", "a"), ("r", "locked", "b")])
        assert _claims(tx.overlapping_claims("r", ["a", "b"])) == [
            ("lane/1", "r", "locked", "b"),
            ("lane/1", "r", "owned", "a"),
        ], "a transaction reads its own claims"
    with any_store.write() as tx:
        tx.set_claims("lane/1", iter([("r", "owned", "c")]))
    with any_store.read() as reader:
        assert _claims(reader.overlapping_claims("r", ["a", "b", "c"])) == [("lane/1", "r", "owned", "c")]
    with any_store.write() as tx:
        tx.set_claims("lane/1", [])
    with any_store.read() as reader:
        assert reader.overlapping_claims("r", ["a", "b", "c"]) == []


def test_only_claims_of_instances_in_the_given_states_count(any_store: Store) -> None:
    with any_store.write() as tx:
        live = tx.put(new("lane/1", "lane"), "live", {})
        tx.put(new("lane/2", "lane"), "gone", {})
        tx.set_claims("lane/1", [("r", "owned", "a")])
        tx.set_claims("lane/2", [("r", "owned", "a/b")])
        tx.set_claims("lane/3", [("r", "owned", "a/c")])  # no instance row at all
    with any_store.read() as reader:
        assert [c.instance_id for c in reader.overlapping_claims("r", ["a"])] == ["lane/1", "lane/2", "lane/3"]
        assert [c.instance_id for c in reader.overlapping_claims("r", ["a"], states=["live"])] == ["lane/1"]
        assert reader.overlapping_claims("r", ["a"], states=[]) == []
    with any_store.write() as tx:
        tx.put(live, "gone", {})
    with any_store.read() as reader:
        assert reader.overlapping_claims("r", ["a"], states=iter(["live"])) == [], "a lane that moved on blocks nobody"


def test_claims_roll_back_with_their_transaction_and_other_connections_see_commits(
    any_store: Store, store_kind: StoreKind
) -> None:
    with pytest.raises(RuntimeError), any_store.write() as tx:
        tx.put(new("lane/1", "lane"), "live", {})
        tx.set_claims("lane/1", [("r", "owned", "a")])
        raise RuntimeError("boom")
    with other(store_kind, any_store) as second:
        with second.read() as reader:
            assert reader.overlapping_claims("r", ["a"]) == []
        with any_store.write() as tx:
            tx.put(new("lane/1", "lane"), "live", {})
            tx.set_claims("lane/1", [("r", "owned", "a")])
        with second.read() as reader:
            assert _claims(reader.overlapping_claims("r", ["a/b"], states=["live"])) == [("lane/1", "r", "owned", "a")]


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
    # attempts: SQLite retries in slices; PostgreSQL waits once, in the lock's arrival-order queue.
    assert caught.value.code == "store_busy" and caught.value.details["attempts"] >= 1
    assert caught.value.details["budget_seconds"] == 0.3 and caught.value.details["waited_seconds"] >= 0.25
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


# --- streaming reads ----------------------------------------------------------------------------------


def append_events(store: Store, count: int, names: tuple[str, ...] = ("a/1",), per_tx: int = 1) -> list[int]:
    """``count`` events spread over the instances ``names``, ``per_tx`` to a transaction; their seqs."""
    seqs: list[int] = []
    index = 0
    while index < count:
        with store.write() as tx:
            for _ in range(min(per_tx, count - index)):
                name = names[index % len(names)]
                current = tx.get(name) or new(name, machine=name.split("/")[0])
                written = tx.put(current, f"s{index}", {"i": index})
                seqs.append(tx.append(written, f"t{index}", current.state, "tester", {"i": index}).seq)
                index += 1
    return seqs


def test_iter_events_returns_what_the_list_did_for_random_logs(any_store: Store) -> None:
    rng = random.Random(13)
    names = ("x/1", "y/1", "z/1", "y/2")
    seqs: list[int] = []
    for _ in range(40):
        chosen = tuple(rng.sample(names, rng.randint(1, 4)))
        seqs += append_events(any_store, rng.randint(1, 6), chosen, rng.randint(1, 3))
    whole = any_store.events()
    assert [e.seq for e in whole] == seqs and len(seqs) > 60
    for _ in range(60):
        since = rng.choice([0, *seqs])
        instance = rng.choice([None, *names, "never/1"])
        batch = rng.randint(1, 9)
        until = rng.choice([None, rng.choice(seqs)])
        expected = [e for e in any_store.events(since, instance_id=instance) if until is None or e.seq <= until]
        streamed = list(any_store.iter_events(since, instance, until=until, batch=batch))
        assert streamed == expected, (since, instance, batch, until)
    assert list(any_store.iter_events()) == whole
    assert list(any_store.iter_events(seqs[-1])) == []


def test_iter_events_reads_page_by_page_and_sees_later_appends(any_store: Store) -> None:
    seqs = append_events(any_store, 5)
    stream = any_store.iter_events(batch=2)
    assert next(stream).seq == seqs[0]
    later = append_events(any_store, 3)  # appended while the iteration runs: the next pages have them
    assert [e.seq for e in stream] == seqs[1:] + later
    with pytest.raises(ValueError, match="positive"):
        next(any_store.iter_events(batch=0))


def test_wait_events_and_follow_bound_their_pages(any_store: Store) -> None:
    seqs = append_events(any_store, 7, per_tx=7)
    assert [e.seq for e in any_store.wait_events(0, 1, limit=3)] == seqs[:3]
    assert [e.seq for e in itertools.islice(any_store.follow(seqs[1], poll=0.05, batch=2), 5)] == seqs[2:]


# --- retention --------------------------------------------------------------------------------------


def test_prune_keep_before_and_older_than_delete_a_prefix_and_never_an_instance(
    any_store: Store, clock: FakeClock
) -> None:
    seqs = []
    for index in range(10):
        seqs += append_events(any_store, 1, (f"i/{index % 3}",))
        clock.advance(60)
    instances = {name: any_store.get(name) for name in ("i/0", "i/1", "i/2")}
    assert any_store.retention_floor() == 0

    dry = any_store.prune_events(keep=7, dry_run=True)
    assert (dry.floor_before, dry.floor, dry.events, dry.dry_run, dry.batches) == (0, seqs[2], 3, True, 0)
    assert [e.seq for e in any_store.events()] == seqs, "a dry run deletes nothing"
    assert any_store.retention_floor() == 0

    kept = any_store.prune_events(keep=7)
    assert (kept.floor_before, kept.floor, kept.events, kept.dry_run) == (0, seqs[2], 3, False)
    assert any_store.retention_floor() == seqs[2]
    assert [e.seq for e in any_store.events(seqs[2])] == seqs[3:]

    before = any_store.prune_events(before=seqs[5], batch=1)
    assert (before.floor, before.events, before.batches) == (seqs[4], 2, 2)
    assert [e.seq for e in any_store.events(seqs[4])] == seqs[5:]

    # Event i was recorded at start + 60 i s; the clock now stands at start + 600 s.
    older = any_store.prune_events(recorded_before=clock.now - timedelta(seconds=600 - 7 * 60))
    assert (older.floor, older.events) == (seqs[6], 2)
    assert [e.seq for e in any_store.events(seqs[6])] == seqs[7:]

    assert any_store.prune_events(before=seqs[1]).events == 0, "the floor never goes down"
    assert any_store.prune_events(keep=100).floor == seqs[6]
    assert any_store.retention_floor() == seqs[6]
    assert {name: any_store.get(name) for name in instances} == instances, "instances are never pruned"

    everything = any_store.prune_events(keep=0)
    assert (everything.floor, everything.events) == (seqs[-1], 3)
    assert any_store.events(seqs[-1]) == []
    (after,) = append_events(any_store, 1)
    assert after > seqs[-1] and [e.seq for e in any_store.events(any_store.retention_floor())] == [after]
    assert any_store.prune_events(before=10**9).floor == after, "the floor never passes the newest event"


def test_older_than_stops_at_the_first_newer_event(any_store: Store, clock: FakeClock) -> None:
    first = append_events(any_store, 2)  # recorded at T
    clock.advance(-3600)  # the clock stepped back: later events recorded "earlier", at T - 1 h
    second = append_events(any_store, 2)
    cutoff = clock.now + timedelta(seconds=1800)  # T - 30 min: the second pair is older, the first not
    assert any_store.prune_events(recorded_before=cutoff, dry_run=True).events == 0, "a prefix, or nothing"
    clock.advance(3600 + 60)
    everything = any_store.prune_events(recorded_before=clock.now)
    assert (everything.floor, everything.events) == (second[-1], 4)
    assert first[0] < second[0]


def test_prune_needs_exactly_one_criterion(any_store: Store, clock: FakeClock) -> None:
    append_events(any_store, 2)
    for kwargs in ({}, {"keep": 1, "before": 2}, {"keep": -1}, {"before": -5}, {"keep": 1, "batch": 0}):
        with pytest.raises(InputError):
            any_store.prune_events(**kwargs)  # type: ignore[arg-type]
    assert len(any_store.events()) == 2 and any_store.retention_floor() == 0


def test_a_reader_below_the_floor_is_told_never_given_a_hole(any_store: Store) -> None:
    seqs = append_events(any_store, 6, ("a/1", "b/1"))
    any_store.prune_events(keep=3)
    floor = seqs[2]
    reads = {
        "events": any_store.events,
        "events of one instance": lambda since: any_store.events(since, instance_id="b/1"),
        "events with a limit": lambda since: any_store.events(since, limit=1),
        "iter_events": lambda since: list(any_store.iter_events(since)),
        "wait_events": lambda since: any_store.wait_events(since, 0.1),
        "follow": lambda since: next(any_store.follow(since, poll=0.05)),
    }
    for name, read in reads.items():
        for since in (0, seqs[0], floor - 1):
            with pytest.raises(EventsPrunedError) as caught:
                read(since)
            assert caught.value.code == "events_pruned", name
            assert caught.value.details == {"since": since, "floor": floor}, name
            assert caught.value.status.exit == 5
    assert [e.seq for e in any_store.events(floor)] == seqs[3:]
    assert [e.seq for e in any_store.iter_events(seqs[3])] == seqs[4:]


def test_a_prune_that_overtakes_a_stream_stops_it_with_events_pruned(any_store: Store) -> None:
    seqs = append_events(any_store, 10)
    stream = any_store.iter_events(batch=3)
    assert [next(stream).seq for _ in range(3)] == seqs[:3]
    any_store.prune_events(keep=2)
    with pytest.raises(EventsPrunedError) as caught:
        list(stream)
    assert caught.value.details == {"since": seqs[2], "floor": seqs[7]}


def test_follow_across_a_prune(any_store: Store, store_kind: StoreKind) -> None:
    seqs = append_events(any_store, 4)
    follower = any_store.follow(seqs[-1], poll=0.05)  # caught up
    behind = any_store.follow(seqs[0], poll=0.05, batch=1)  # one page of one event in hand
    assert next(behind).seq == seqs[1]
    with other(store_kind, any_store) as second:
        assert second.prune_events(keep=0).floor == seqs[-1]
        later = append_events(second, 2)
    assert [next(follower).seq for _ in range(2)] == later, "a follower at or above the floor misses nothing"
    with pytest.raises(EventsPrunedError):
        next(behind)


def test_concurrent_prune_and_tails_never_yield_a_hole(any_store: Store, store_kind: StoreKind) -> None:
    """A tail either sees every event after its cursor, in order, or is told they were pruned."""
    appended: list[int] = append_events(any_store, 20)
    done = threading.Event()
    errors: list[BaseException] = []

    def write() -> None:
        try:
            with other(store_kind, any_store, busy_deadline=30) as mine:
                for _ in range(150):
                    appended.extend(append_events(mine, 1))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            done.set()

    def prune() -> None:
        try:
            with other(store_kind, any_store, busy_deadline=30) as mine:
                while not done.is_set():
                    mine.prune_events(keep=15, batch=4)
                    time.sleep(0.003)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    outcomes: list[str] = []

    def tail(start_index: int, batch: int) -> None:
        try:
            with other(store_kind, any_store, busy_deadline=30) as mine:
                cursor = appended[start_index]
                seen: list[int] = []
                try:
                    for event in mine.iter_events(cursor, batch=batch):
                        seen.append(event.seq)
                        time.sleep(0.002)  # a slow reader, so that prunes overtake some
                except EventsPrunedError as exc:
                    assert exc.floor > (seen[-1] if seen else cursor)
                    outcomes.append("pruned")
                else:
                    outcomes.append("complete")
                views.append((cursor, seen))
        except BaseException as exc:
            errors.append(exc)

    views: list[tuple[int, list[int]]] = []

    threads = [threading.Thread(target=write), threading.Thread(target=prune)]
    threads += [threading.Thread(target=tail, args=(index, batch)) for index, batch in ((0, 2), (5, 5), (19, 3))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    assert len(outcomes) == 3
    # Judged once the writer is done: the writer records a seq only after its commit, so a tail may see an
    # event before ``appended`` holds it.
    for cursor, seen in views:
        expected = [seq for seq in sorted(appended) if cursor < seq <= (seen[-1] if seen else cursor)]
        assert seen == expected, "a hole in what the tail saw"
    # Whatever the interleaving, the store ends consistent: everything above the floor is there.
    floor = any_store.retention_floor()
    assert [e.seq for e in any_store.iter_events(floor)] == [seq for seq in sorted(appended) if seq > floor]


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


# --- keyed parts of an instance --------------------------------------------------------------------


def test_parts_are_written_beside_the_instance_and_read_one_key_or_by_prefix(any_store: Store) -> None:
    with any_store.write() as tx:
        plan = tx.put(new("plan/1", "plan"), "running", {"header": True})
        tx.put_part(plan.id, "steps/b", {"state": "running"})
        tx.put_part(plan.id, "steps/a", {"state": "running", "n": [1, 2.5, None, "x"]})
        tx.put_part(plan.id, "private/a", {"text": "secret"})
        tx.put_part("plan/2", "steps/a", {"state": "other"})  # parts are per instance
        assert tx.part(plan.id, "steps/b") == {"state": "running"}, "a transaction reads its own parts"
    with any_store.write() as tx:
        tx.put(plan, "running", {"header": True})
        tx.put_part(plan.id, "steps/b", {"state": "succeeded"})  # a rewrite keeps the key's place
        tx.put_part(plan.id, "steps/c", {"state": "running"})
    with any_store.read() as reader:
        assert reader.part("plan/1", "steps/a") == {"state": "running", "n": [1, 2.5, None, "x"]}
        assert reader.part("plan/1", "steps/zzz") is None and reader.part("plan/9", "steps/a") is None
        assert list(reader.parts("plan/1").items()) == [
            ("steps/b", {"state": "succeeded"}),
            ("steps/a", {"state": "running", "n": [1, 2.5, None, "x"]}),
            ("private/a", {"text": "secret"}),
            ("steps/c", {"state": "running"}),
        ], "in the order each key was first written"
        assert list(reader.parts("plan/1", "steps/")) == ["steps/b", "steps/a", "steps/c"]
        assert reader.parts("plan/1", "private/") == {"private/a": {"text": "secret"}}
        assert reader.parts("plan/2") == {"steps/a": {"state": "other"}}
        assert reader.parts("plan/9") == {} and reader.parts("plan/1", "nothing/") == {}
        # counted without reading them: the same keys parts() finds
        assert [reader.part_count("plan/1"), reader.part_count("plan/1", "steps/")] == [4, 3]
        counts = [reader.part_count("plan/2"), reader.part_count("plan/9"), reader.part_count("plan/1", "x/")]
        assert counts == [1, 0, 0]
        header = reader.get("plan/1")
        assert header is not None and header.data == {"header": True}, "parts are not in the instance's data"


def test_parts_commit_and_roll_back_with_the_compare_and_set(any_store: Store) -> None:
    with any_store.write() as tx:
        plan = tx.put(new("plan/1", "plan"), "running", {})
        tx.put_part(plan.id, "steps/a", {"state": "running"})
    with pytest.raises(ConflictError), any_store.write() as tx:
        tx.put_part(plan.id, "steps/a", {"state": "succeeded"})
        tx.put_part(plan.id, "steps/b", {"state": "running"})
        tx.put(Instance(plan.id, "plan", "running", 7, {}), "running", {})  # a stale version: the whole write fails
    with pytest.raises(RuntimeError), any_store.write() as tx:
        tx.put_part(plan.id, "steps/a", {"state": "failed"})
        raise RuntimeError("boom")
    with any_store.read() as reader:
        assert reader.parts(plan.id) == {"steps/a": {"state": "running"}}, "nothing of either write landed"


def test_parts_are_seen_by_another_connection_and_a_snapshot_keeps_its_own(
    any_store: Store, store_kind: StoreKind
) -> None:
    second = other(store_kind, any_store)
    try:
        with any_store.write() as tx:
            tx.put_part(tx.put(new("plan/1", "plan"), "running", {}).id, "steps/a", {"v": 1})
        with second.read() as reader:
            assert reader.part("plan/1", "steps/a") == {"v": 1}
            with any_store.write() as tx:
                tx.put_part("plan/1", "steps/a", {"v": 2})
                tx.put_part("plan/1", "steps/b", {"v": 1})
            assert reader.parts("plan/1") == {"steps/a": {"v": 1}}, "a snapshot does not move"
        with second.read() as reader:
            assert reader.parts("plan/1") == {"steps/a": {"v": 2}, "steps/b": {"v": 1}}
    finally:
        second.close()


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
    [("instances", "data"), ("events", "payload"), ("instance_parts", "value")],
)
def test_a_row_that_does_not_decode_is_refused(
    any_store: Store, store_kind: StoreKind, table: str, column: str
) -> None:
    with any_store.write() as tx:
        event = tx.append(tx.put(new(), "a", {}), "go", "start", "tester", {})
        tx.put_part("thing/1", "steps/a", {"state": "running"})
    store_kind.corrupt(any_store.url, table, event.seq if table == "events" else "thing/1", column)

    def part() -> object:
        with any_store.read() as reader:
            return reader.part("thing/1", "steps/a")

    def parts() -> object:
        with any_store.read() as reader:
            return reader.parts("thing/1")

    reads = {
        "instances": [lambda: any_store.get("thing/1"), lambda: any_store.find("thing")],
        "events": [any_store.events, lambda: any_store.wait_events(0, 0.1)],
        "instance_parts": [part, parts],
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
    assert info["retention_floor"] == 0


def test_info_names_the_store_and_its_retention_floor(any_store: Store, store_kind: StoreKind, tmp_path: Path) -> None:
    store_id = any_store.info()["store_id"]
    assert isinstance(store_id, str) and len(store_id) >= 16
    seqs = append_events(any_store, 3)
    any_store.prune_events(keep=1)
    with other(store_kind, any_store) as again:
        assert again.info()["store_id"] == store_id, "the identity is the store's, not the connection's"
        assert again.info()["retention_floor"] == seqs[1] == again.retention_floor()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with store_kind.open(store_kind.url(elsewhere)) as second:
        assert second.info()["store_id"] != store_id


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


def test_only_events_at_or_below_the_floor_can_be_deleted_even_by_raw_sql(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "s.db") as store:
        seqs = append_events(store, 4)
        store.prune_events(keep=2)
    conn = sqlite3.connect(tmp_path / "s.db", isolation_level=None)
    try:
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            conn.execute("DELETE FROM events WHERE seq = ?", (seqs[2],))
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            conn.execute("UPDATE events SET actor = 'forged' WHERE seq = ?", (seqs[3],))
        for statement in (
            "UPDATE store_meta SET value = 0 WHERE key = 'retention_floor'",
            "UPDATE store_meta SET value = 'x' WHERE key = 'retention_floor'",
            "UPDATE store_meta SET value = 'forged' WHERE key = 'store_id'",
            "DELETE FROM store_meta WHERE key = 'retention_floor'",
            "INSERT INTO store_meta (key, value) VALUES ('other', 1)",
        ):
            with pytest.raises(sqlite3.IntegrityError):
                conn.execute(statement)
        assert conn.execute("SELECT seq FROM events ORDER BY seq").fetchall() == [(seqs[2],), (seqs[3],)]
        # Raising the floor by hand is a prune, and readers are told of it like any other.
        conn.execute("UPDATE store_meta SET value = ? WHERE key = 'retention_floor'", (seqs[2],))
        conn.execute("DELETE FROM events WHERE seq <= ?", (seqs[2],))
    finally:
        conn.close()
    with SQLiteStore(tmp_path / "s.db") as store, pytest.raises(EventsPrunedError):
        store.events(seqs[1])


def test_a_version_2_store_migrates_forward_and_works(tmp_path: Path) -> None:
    """A store written before retention existed (schema version 2) opens, gains its floor and id, prunes."""
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("BEGIN")
    for script in MIGRATIONS[:2]:  # the schema as version 2 left it
        for statement in _statements(script):
            conn.execute(statement)
    conn.execute("INSERT INTO instances VALUES ('a/1', 'a', 's2', 3, '{}', 't', 't')")
    for index in range(3):
        conn.execute(
            "INSERT INTO events (instance_id, machine, trigger, from_state, to_state, version, actor, payload, at)"
            " VALUES ('a/1', 'a', ?, 's', 's', ?, 'old', '{}', '2026-01-01T00:00:00.000000Z')",
            (f"t{index}", index + 1),
        )
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    conn.execute("PRAGMA user_version = 2")
    conn.execute("COMMIT")
    conn.close()
    with SQLiteStore(path) as store:
        info = store.info()
        assert info["schema_version"] == SCHEMA_VERSION
        assert info["retention_floor"] == 0 and len(info["store_id"]) == 32
        assert [e.trigger for e in store.iter_events()] == ["t0", "t1", "t2"]
        assert store.prune_events(keep=1).events == 2
        assert [e.trigger for e in store.events(store.retention_floor())] == ["t2"]
        stored = store.get("a/1")
        assert stored is not None and (stored.state, stored.version) == ("s2", 3)
        (appended,) = append_events(store, 1, ("a/2",))
        assert appended == 4
    conn = sqlite3.connect(path)
    try:
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            conn.execute("DELETE FROM events")
    finally:
        conn.close()
    with SQLiteStore(path) as again:
        assert again.info()["store_id"] == info["store_id"], "migrated once, its id kept"


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
    from runner.sql import store_sqlite as sqlite_store
    from runner.sql.store_sqlite_file import APPLICATION_ID

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


def test_data_read_back_is_what_was_written_and_each_reader_gets_its_own_copy(any_store: Store) -> None:
    # A store may keep what it wrote to answer the next read (the SQLite store does, for flat data):
    # every reader still gets the data as written, and changing one copy changes no other.
    flat = {"name": "ada", "count": 3, "ratio": 0.5, "done": False, "none": None, "text": "é\u2028\ud800"}
    nested = {"steps": {"a": {"state": "done"}}, "tags": ["x", "y"]}
    with any_store.write() as tx:
        written = tx.put(new("thing/flat"), "start", flat)
        tx.put(new("thing/nested"), "start", nested)
    written.data["name"] = "changed by the writer"  # type: ignore[index]  # reason: the writer's own copy
    for _ in range(2):
        with any_store.read() as reader:
            got_flat, got_nested = reader.get("thing/flat"), reader.get("thing/nested")
        assert got_flat is not None and got_nested is not None
        assert dict(got_flat.data) == flat and dict(got_nested.data) == nested
        got_flat.data["name"] = "changed by a reader"  # type: ignore[index]  # reason: this reader's own copy
        got_nested.data["steps"]["a"]["state"] = "changed"  # type: ignore[index]  # reason: likewise
    with any_store.write() as tx:
        current = tx.get("thing/flat")
        assert current is not None and dict(current.data) == flat
        tx.put(current, "start", {**flat, "count": 4})
    assert any_store.get("thing/flat").data["count"] == 4  # type: ignore[union-attr]  # reason: written above


def test_a_row_damaged_after_it_was_written_is_refused_not_answered_from_memory(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    try:
        with store.write() as tx:
            tx.put(new(), "start", {"name": "ada"})
        assert store.get("thing/1") is not None  # read back as written
        other = sqlite3.connect(str(tmp_path / "s.db"), isolation_level=None)
        other.execute("UPDATE instances SET data = '{\"name\": ' WHERE id = 'thing/1'")
        other.close()
        with pytest.raises(StoreCorruptError) as caught:
            store.get("thing/1")
        assert caught.value.details["table"] == "instances" and caught.value.details["row"] == "thing/1"
        with pytest.raises(StoreCorruptError), store.write() as tx:
            tx.get("thing/1")
        with store.write() as tx:  # the failed write left nothing held: the next one goes through
            assert tx.get("thing/2") is None
    finally:
        store.close()


# --- issue 15: idempotency records -------------------------------------------------------------------

SHA_A = "a" * 64
SHA_B = "b" * 64


def test_a_free_key_is_reserved_once_then_replayed_after_completion(any_store: Store, clock: FakeClock) -> None:
    assert any_store.reserve_idempotency("k1", SHA_A, 60) is None, "a free key: the caller proceeds"
    pending = any_store.reserve_idempotency("k1", SHA_A, 60)
    assert pending is not None and pending.state == "pending" and pending.matches(SHA_A)
    assert (pending.status, pending.response) == (None, None)
    assert pending.created_at == format_time(clock.now)
    assert pending.expires_at == format_time(clock.now + timedelta(seconds=60))
    clock.advance(10)
    assert any_store.complete_idempotency("k1", 201, '{"ok": true}') is True
    done = any_store.reserve_idempotency("k1", SHA_A, 60)
    assert done is not None and (done.state, done.status, done.response) == ("done", 201, '{"ok": true}')
    # The answer is kept for the TTL from when it was recorded, not from the reservation.
    assert done.expires_at == format_time(clock.now + timedelta(seconds=60))
    assert any_store.complete_idempotency("k1", 500, "{}") is False, "a done record is never overwritten"
    again = any_store.reserve_idempotency("k1", SHA_A, 60)
    assert again is not None and (again.status, again.response) == (201, '{"ok": true}')


def test_the_same_key_with_another_request_is_returned_for_a_mismatch(any_store: Store, clock: FakeClock) -> None:
    assert any_store.reserve_idempotency("k", SHA_A, 60) is None
    for _ in range(2):  # pending, then done: another digest always gets the record back, never a reservation
        other_request = any_store.reserve_idempotency("k", SHA_B, 60)
        assert other_request is not None and not other_request.matches(SHA_B)
        assert other_request.request_sha256 == SHA_A
        any_store.complete_idempotency("k", 200, "{}")
    # Even a stale pending record is not retaken by another request: the mismatch comes first.
    assert any_store.reserve_idempotency("k2", SHA_A, 3600) is None
    clock.advance(400)
    mismatch = any_store.reserve_idempotency("k2", SHA_B, 3600)
    assert mismatch is not None and mismatch.state == "pending" and mismatch.request_sha256 == SHA_A


def test_a_stale_pending_record_is_retaken_a_fresh_one_is_in_flight(any_store: Store, clock: FakeClock) -> None:
    assert any_store.reserve_idempotency("k", SHA_A, 3600, stale_seconds=300) is None
    clock.advance(299)
    in_flight = any_store.reserve_idempotency("k", SHA_A, 3600, stale_seconds=300)
    assert in_flight is not None and in_flight.state == "pending"
    clock.advance(2)
    assert any_store.reserve_idempotency("k", SHA_A, 3600, stale_seconds=300) is None, "its request died"
    retaken = any_store.reserve_idempotency("k", SHA_A, 3600, stale_seconds=300)
    assert retaken is not None and retaken.created_at == format_time(clock.now), "retaken now, as if new"


def test_an_expired_record_is_free_again_and_pruned(any_store: Store, clock: FakeClock) -> None:
    assert any_store.reserve_idempotency("old", SHA_A, 10) is None
    assert any_store.complete_idempotency("old", 200, "{}")
    assert any_store.reserve_idempotency("young", SHA_A, 1000) is None
    clock.advance(11)
    assert any_store.reserve_idempotency("old", SHA_B, 10) is None, "expired: free for any request"
    assert any_store.prune_idempotency() == 0, "the expired row was replaced, nothing else expired"
    clock.advance(11)
    assert any_store.prune_idempotency() == 1  # "old" (reserved again 11 s ago for 10 s); "young" stays
    found = any_store.reserve_idempotency("young", SHA_A, 1000)
    assert found is not None and found.state == "pending"
    assert any_store.prune_idempotency(before=clock.now + timedelta(seconds=2000)) == 1
    assert any_store.reserve_idempotency("young", SHA_A, 1000) is None


def test_a_reservation_prunes_expired_records_a_bounded_batch_at_a_time(any_store: Store, clock: FakeClock) -> None:
    from runner.store.abc import IDEMPOTENCY_PRUNE_BATCH

    for n in range(IDEMPOTENCY_PRUNE_BATCH + 5):
        assert any_store.reserve_idempotency(f"k{n}", SHA_A, 1) is None
    clock.advance(2)
    assert any_store.reserve_idempotency("fresh", SHA_A, 60) is None  # deletes one batch on its way
    assert any_store.prune_idempotency() == 5, "the rest of the expired ones were left for later"


def test_release_drops_a_pending_record_only(any_store: Store) -> None:
    assert any_store.reserve_idempotency("k", SHA_A, 60) is None
    assert any_store.release_idempotency("k") is True
    assert any_store.release_idempotency("k") is False
    assert any_store.reserve_idempotency("k", SHA_B, 60) is None, "released: a retry runs afresh"
    assert any_store.complete_idempotency("k", 200, '"x"')
    assert any_store.release_idempotency("k") is False, "a done record is kept"
    done = any_store.reserve_idempotency("k", SHA_B, 60)
    assert done is not None and done.state == "done"
    assert any_store.complete_idempotency("never", 200, "{}") is False


@pytest.mark.parametrize(
    "args",
    [
        ("", SHA_A, 60),
        ("x" * 256, SHA_A, 60),
        ("a\nb", SHA_A, 60),
        ("k", "A" * 64, 60),
        ("k", "a" * 63, 60),
        ("k", SHA_A, 0),
        ("k", SHA_A, -1),
        ("k", SHA_A, True),
    ],
)
def test_bad_idempotency_arguments_are_refused(any_store: Store, args: tuple[Any, ...]) -> None:
    with pytest.raises(InputError) as caught:
        any_store.reserve_idempotency(*args)
    assert caught.value.code == "input_invalid"
    assert any_store.prune_idempotency() == 0


def test_records_are_shared_by_every_connection(any_store: Store, store_kind: StoreKind, clock: FakeClock) -> None:
    with store_kind.open(any_store.url, clock=clock) as second:
        assert any_store.reserve_idempotency("k", SHA_A, 60) is None
        seen = second.reserve_idempotency("k", SHA_A, 60)
        assert seen is not None and seen.state == "pending"
        assert second.complete_idempotency("k", 202, "[]")
        replay = any_store.reserve_idempotency("k", SHA_A, 60)
        assert replay is not None and (replay.status, replay.response) == (202, "[]")


def test_racing_threads_on_separate_connections_leave_exactly_one_reserver(
    any_store: Store, store_kind: StoreKind
) -> None:
    stores = [other(store_kind, any_store) for _ in range(6)]
    start = threading.Barrier(len(stores))
    results: list[object] = []
    lock = threading.Lock()

    def race(store: Store) -> None:
        start.wait()
        for round_ in range(5):
            found = store.reserve_idempotency(f"race-{round_}", SHA_A, 60)
            with lock:
                results.append((round_, found))

    try:
        threads = [threading.Thread(target=race, args=(s,)) for s in stores]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        for store in stores:
            store.close()
    for round_ in range(5):
        outcomes = [found for r, found in results if r == round_]
        assert len(outcomes) == len(stores)
        assert outcomes.count(None) == 1, f"round {round_}: exactly one reserver wins"


_RESERVER = r"""
import sys, time
from pathlib import Path
from runner.store import open_store

url, key, go = sys.argv[1:4]
store = open_store(url)
while not Path(go).exists():
    time.sleep(0.005)
found = store.reserve_idempotency(key, "c" * 64, 60)
print("won" if found is None else "lost:" + found.state, flush=True)
store.close()
"""


@pytest.mark.slow  # real processes
def test_racing_processes_leave_exactly_one_reserver(any_store: Store, tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    go = tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    children = [
        subprocess.Popen(
            [sys.executable, "-c", _RESERVER, any_store.url, "shared", str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(4)
    ]
    time.sleep(0.3)  # not a timed assertion: gives the children time to open before the start signal
    go.touch()
    answers = []
    for child in children:
        out, err = child.communicate(timeout=60)
        assert child.returncode == 0, err
        answers.append(out.strip())
    assert sorted(answers) == ["lost:pending"] * 3 + ["won"]
    found = any_store.reserve_idempotency("shared", "c" * 64, 60)
    assert found is not None and found.state == "pending"


def test_a_store_of_the_previous_schema_migrates_forward_to_idempotency(tmp_path: Path, clock: FakeClock) -> None:
    """A store written before idempotency keys (the schema version before this code's) opens, gains the
    table, keeps its rows and reserves keys."""
    path = tmp_path / "old.db"
    sqlite_file_before(path, "CREATE TABLE idempotency")
    with closing(sqlite3.connect(path)) as conn:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert "idempotency" not in tables
    with SQLiteStore(path, clock=clock) as store:
        assert store.info()["schema_version"] == SCHEMA_VERSION
        assert store.get("a/1") is not None
        assert store.reserve_idempotency("k", SHA_A, 60) is None
        assert store.complete_idempotency("k", 200, "{}")
    with SQLiteStore(path, clock=clock) as again:
        found = again.reserve_idempotency("k", SHA_A, 60)
        assert found is not None and found.state == "done"
