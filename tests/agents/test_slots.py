"""The process host's slot port, run against the slot adapter of every registered store.

A slot port lives in a store's database and writes inside the store's transactions: these tests
hold every adapter to the compare-and-set on ``seq``, the closed-stays-closed rule, the ordering of
reads, and above all atomicity with the store's own rows (the effect gate runs in that transaction).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from runner.agents.kinds import Kinds
from runner.agents.process import ProcessHost
from runner.agents.slots import SLOT_STORES, AgentSlot, SlotStore, slot_store
from runner.context import Event, Instance, format_time
from runner.errors import AuthorityMovedError, ConflictError, CorralError, InputError, StoreCorruptError
from runner.store import STORES, Reader, Store, Transaction
from tests.conftest import FakeClock
from tests.support.stores import StoreKind, kind_for


@pytest.fixture(params=SLOT_STORES.names())
def slot_kind(request: pytest.FixtureRequest) -> StoreKind:
    """The store kind of each registered slot adapter."""
    return kind_for(request.param, request)


@pytest.fixture
def slots(slot_kind: StoreKind, tmp_path: Path, clock: FakeClock) -> Iterator[SlotStore]:
    with slot_kind.open(slot_kind.url(tmp_path), clock=clock) as store:
        yield slot_store(store)


def agent(number: int, **changes: Any) -> AgentSlot:
    slot = AgentSlot(f"p{number}", f"a{number}", "script", "/work", "idle", 0, dir=f"/agents/p{number}")
    return replace(slot, **changes)


def insert(slots: SlotStore, slot: AgentSlot) -> AgentSlot:
    with slots.write() as tx:
        return tx.put_slot(slot, expected_seq=None)


def test_every_store_has_a_slot_adapter() -> None:
    assert set(STORES.names()) <= set(SLOT_STORES.names()), "the process host could not run on some store"
    assert SLOT_STORES.group == "corral.slot_stores"


def test_insert_then_read_back_every_field(slots: SlotStore, clock: FakeClock) -> None:
    slot = agent(1, run=3, pid=99, exit_status=2, options={"model": "m", "nested": {"k": [1]}})
    written = insert(slots, slot)
    stamp = format_time(clock.now)
    assert written == replace(slot, created_at=stamp, updated_at=stamp)
    with slots.read() as reader:
        assert reader.slot("p1") == written
        assert reader.slot("p2") is None
    with slots.write() as tx:
        assert tx.slot("p1") == written


def test_a_second_insert_of_one_pane_conflicts(slots: SlotStore) -> None:
    insert(slots, agent(1))
    with pytest.raises(ConflictError) as caught:
        insert(slots, agent(1, name="other"))
    assert caught.value.code == "version_conflict" and caught.value.details["pane_id"] == "p1"
    with slots.read() as reader:
        found = reader.slot("p1")
    assert found is not None and found.name == "a1"


def test_compare_and_set_on_seq(slots: SlotStore, clock: FakeClock) -> None:
    idle = insert(slots, agent(1))
    clock.advance(3)
    with slots.write() as tx:
        working = tx.put_slot(replace(idle, status="working", seq=1, run=1), idle.seq)
    assert (working.updated_at, working.created_at) == (format_time(clock.now), idle.created_at)
    with pytest.raises(ConflictError) as caught, slots.write() as tx:
        tx.put_slot(replace(idle, status="done", seq=1), idle.seq)  # a stale copy: seq 0 is gone
    assert caught.value.code == "version_conflict"
    details = caught.value.details
    assert (details["expected_seq"], details["actual_seq"], details["closed"]) == (0, 1, False)
    with slots.read() as reader:
        assert reader.slot("p1") == working


def test_an_update_of_a_pane_never_made_conflicts(slots: SlotStore) -> None:
    with pytest.raises(ConflictError) as caught, slots.write() as tx:
        tx.put_slot(agent(7, seq=1), 0)
    assert caught.value.details["actual_seq"] is None


def test_a_closed_slot_is_never_written_again(slots: SlotStore) -> None:
    idle = insert(slots, agent(1))
    with slots.write() as tx:
        closed = tx.put_slot(replace(idle, closed=True), idle.seq)
    with pytest.raises(ConflictError) as caught, slots.write() as tx:
        tx.put_slot(replace(closed, status="working", seq=1, closed=False), closed.seq)  # the seq still matches
    assert caught.value.details["closed"] is True
    with slots.read() as reader:
        assert reader.slot("p1") == closed, "a closed slot still reads, unchanged"


def test_slots_are_listed_by_pane_number_open_ones_unless_asked(slots: SlotStore) -> None:
    for number in (10, 2, 1):
        insert(slots, agent(number))
    with slots.write() as tx:
        current = tx.slot("p2")
        assert current is not None
        tx.put_slot(replace(current, closed=True), current.seq)
    with slots.read() as reader:
        assert [s.pane_id for s in reader.slots()] == ["p1", "p10"]
        assert [s.pane_id for s in reader.slots(include_closed=True)] == ["p1", "p2", "p10"], "by number, not text"


def test_slot_and_store_rows_commit_together(slots: SlotStore) -> None:
    with slots.write() as tx:
        number = tx.store_tx.next_number("pane")
        lease = tx.store_tx.put(Instance("lease/1", "lease", "start", 0, {}), "held", {})
        tx.put_slot(agent(number), expected_seq=None)
    assert slots.store.get("lease/1") == lease
    with slots.read() as reader:
        assert [s.pane_id for s in reader.slots()] == [f"p{number}"]


def test_slot_and_store_rows_roll_back_together(slots: SlotStore) -> None:
    with pytest.raises(RuntimeError), slots.write() as tx:
        number = tx.store_tx.next_number("pane")
        tx.store_tx.put(Instance("lease/1", "lease", "start", 0, {}), "held", {})
        tx.put_slot(agent(number), expected_seq=None)
        raise RuntimeError("boom")
    assert slots.store.get("lease/1") is None
    with slots.read() as reader:
        assert reader.slots(include_closed=True) == []


def test_a_gate_refusing_in_the_slot_transaction_leaves_the_slot_alone(slots: SlotStore) -> None:
    """The shape of the process host's hand-over: gate (on the store) then CAS, one transaction."""
    with slots.store.write() as tx:
        fence = tx.put(Instance("fence/1", "fence", "start", 0, {}), "held", {"epoch": 1})
    idle = insert(slots, agent(1))
    with slots.store.write() as tx:
        tx.put(fence, "held", {"epoch": 2})  # the fence moves after the prompt was authorised

    def gate(store_tx: Transaction) -> None:
        current = store_tx.get("fence/1")
        if current is None or current.version != fence.version:
            raise AuthorityMovedError("the fence moved", code="fence_moved")

    with pytest.raises(AuthorityMovedError), slots.write() as tx:
        gate(tx.store_tx)
        tx.put_slot(replace(idle, status="working", seq=1, run=1), idle.seq)
    with slots.read() as reader:
        assert reader.slot("p1") == idle, "no run was handed over"


def test_one_process_sees_what_another_wrote(slots: SlotStore, slot_kind: StoreKind) -> None:
    """The supervisor opens the store from its URL and records the outcome there."""
    idle = insert(slots, agent(1))
    with slot_kind.open(slots.store.url) as second:
        theirs = slot_store(second)
        with theirs.write() as tx:
            done = tx.put_slot(replace(idle, status="done", seq=1, exit_status=0), idle.seq)
    with slots.read() as reader:
        assert reader.slot("p1") == done


def test_a_slot_whose_options_do_not_decode_is_refused(slots: SlotStore, slot_kind: StoreKind) -> None:
    insert(slots, agent(1, options={"model": "m"}))
    slot_kind.corrupt(slots.store.url, "agent_slots", "p1", "options")
    for read in (lambda r: r.slot("p1"), lambda r: r.slots()):
        with pytest.raises(StoreCorruptError) as caught, slots.read() as reader:
            read(reader)
        assert (caught.value.details["table"], caught.value.details["row"]) == ("agent_slots", "p1")


class _ForeignStore(Store):
    """A store of a kind no slot adapter knows."""

    url = "memory://nowhere"

    def write(self) -> AbstractContextManager[Transaction]:
        raise NotImplementedError

    def read(self) -> AbstractContextManager[Reader]:
        raise NotImplementedError

    def now(self) -> datetime:
        raise NotImplementedError

    def events(self, since: int = 0, limit: int | None = None, instance_id: str | None = None) -> list[Event]:
        return []

    def wait_events(self, since: int, timeout: float) -> list[Event]:
        return []

    def info(self) -> dict[str, Any]:
        return {"adapter": "memory"}

    def close(self) -> None:
        pass


def test_a_store_without_a_slot_adapter_is_unsupported() -> None:
    with pytest.raises(InputError) as caught:
        slot_store(_ForeignStore())
    assert caught.value.code == "store_unsupported"
    assert "memory" in caught.value.message


def test_the_process_host_refuses_slots_from_another_store(slots: SlotStore, slot_kind: StoreKind) -> None:
    with slot_kind.open(slots.store.url) as second, pytest.raises(CorralError, match="one transaction"):
        ProcessHost(second, Path("/nowhere"), Kinds.load([]), slots=slots)
    host = ProcessHost(slots.store, Path("/nowhere"), Kinds.load([]))
    assert host.slots.store is slots.store


def test_slots_of_reads_the_named_slots_closed_or_not(slots: SlotStore) -> None:
    made = [insert(slots, agent(n)) for n in range(1, 6)]
    with slots.write() as tx:
        closed = tx.put_slot(replace(made[2], closed=True), made[2].seq)
    with slots.read() as reader:
        found = reader.slots_of(["p5", "p3", "p9", "p1", "p5"])
        one_by_one = {p: reader.slot(p) for p in ("p5", "p3", "p1")}
    assert found == one_by_one
    assert found["p3"] == closed and "p9" not in found
    with slots.read() as reader:
        assert reader.slots_of([]) == {}
        progress = reader.progress_of(["p3", "p4", "p9"])
    assert progress == {"p3": ("idle", 0, True), "p4": ("idle", 0, False)}
    assert (progress["p3"].status, progress["p3"].seq, progress["p3"].closed) == ("idle", 0, True)


def test_the_change_token_moves_on_every_slot_write_of_any_connection(slots: SlotStore, slot_kind: StoreKind) -> None:
    """A wait reads its slots again only when the token moved: it must move on this connection's own
    writes and on another process's, and stay put while nothing is written."""
    idle = insert(slots, agent(1))

    def token() -> object:
        return slots.change_token()

    first = token()
    if first is None:
        pytest.skip("this adapter cannot tell (its waits read every tick)")
    assert token() == first, "nothing was written"
    with slots.write() as tx:
        working = tx.put_slot(replace(idle, status="working", seq=1, run=1), idle.seq)
    mine = token()
    assert mine != first, "this connection's own write"
    assert token() == mine
    with slot_kind.open(slots.store.url) as second, slot_store(second).write() as tx:
        tx.put_slot(replace(working, status="done", seq=2, exit_status=0), working.seq)
    theirs = token()
    assert theirs not in (first, mine), "another connection's commit"
    assert token() == theirs
