"""The store port: durable instances, compare-and-set, named counters, an append-only event log,
and keyed parts of an instance (its per-key records, written and read one key at a time),
and a claim index (:class:`~runner.context.Claim`: what live instances hold, such as a writer lane's
scopes, branch and worktree, looked up by overlap in index probes).

That is all a store holds. Every adapter (``sqlite``, later ``postgresql``) implements :class:`Store`
and registers an opener in :data:`runner.store.STORES`; one conformance suite in ``tests/store/`` runs
against every registered adapter. Components that keep their own rows beside corral's (the process
host's agent slots, ``runner.agents.slots``) have ports of their own, whose adapters run inside this
port's transactions. A writing :class:`Transaction` is serialized against every other
writer of the same store (``BEGIN IMMEDIATE`` on SQLite, an advisory lock on PostgreSQL), so rules
that span rows (one open receipt per target, scopes that must not overlap) can be checked inside it.

The event log is append-only, with one exception: retention (:meth:`Store.prune_events`) deletes a
prefix of it, oldest first, and records how far in the store's **retention floor** (the highest
pruned sequence number), raised before the rows go, in the same transaction. Every read of the log
after a cursor below the floor raises :class:`~runner.errors.EventsPrunedError` (``events_pruned``,
naming the floor) instead of returning what is left: a reader either sees every event after its
cursor or is told it cannot. Reads stream (:meth:`Store.iter_events`, keyset pages of bounded size,
each its own short snapshot), so no reader holds the whole log in memory or a writer waiting.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from runner.context import Claim, Event, Instance
from runner.errors import InputError

Clock = Callable[[], datetime]
"""A store's clock: tests inject one, adapters default to the system's UTC time."""

EVENT_PAGE = 1000
"""Events per page of a streaming read: bounds a reader's memory and the length of each snapshot."""

PRUNE_BATCH = 2000
"""Events deleted per transaction by :meth:`Store.prune_events`: each holds the write lock briefly."""


@dataclass(frozen=True)
class Pruned:
    """What :meth:`Store.prune_events` removed (or, with ``dry_run``, would remove).

    ``floor_before`` and ``floor`` are the retention floor before and after; ``events`` how many
    event rows went (would go); ``batches`` how many transactions it took (0 for a dry run).
    """

    floor_before: int
    floor: int
    events: int
    dry_run: bool = False
    batches: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "floor_before": self.floor_before,
            "floor": self.floor,
            "events": self.events,
            "dry_run": self.dry_run,
            "batches": self.batches,
        }


class Reader(ABC):
    """Reads from one consistent snapshot of the store."""

    @abstractmethod
    def get(self, instance_id: str) -> Instance | None:
        """The instance with this id, or None if it was never written."""

    @abstractmethod
    def find(
        self,
        machine: str,
        states: Iterable[str] | None = None,
        *,
        after: str | None = None,
        limit: int | None = None,
    ) -> list[Instance]:
        """Instances of ``machine`` (in the given states, if any), ordered by id.

        Paging is keyset by id: ``after`` keeps only ids strictly greater than it (by code point, as
        Python compares ``str``; an id that is not stored is a valid cursor), ``limit`` (>= 1) keeps
        the first that many. Paging through with ``after`` = the last id of the previous page visits
        every instance present for the whole walk exactly once, in id order, whatever is written
        between pages; an adapter answers a page in time that grows with ``limit``, not with the
        number of instances before ``after``.
        """

    @abstractmethod
    def counts(self, machine: str | None = None) -> dict[tuple[str, str], int]:
        """How many instances there are by ``(machine, state)`` (of one ``machine``, if given).

        Only pairs with at least one instance appear. Nothing is decoded: an adapter answers from
        its machine and state columns (an aggregate), so the cost does not grow with the data.
        """

    @abstractmethod
    def part(self, instance_id: str, key: str) -> dict[str, Any] | None:
        """One keyed part of an instance (see :meth:`Transaction.put_part`), or None if never written.

        Reads that one part only: no other part, nor the instance's data, is decoded.
        """

    @abstractmethod
    def parts(self, instance_id: str, prefix: str = "") -> dict[str, dict[str, Any]]:
        """Every part of an instance whose key starts with ``prefix``, by key.

        Ordered by when each key was *first* written (a rewrite keeps a key's place); ties inside one
        transaction keep the order of the writes. Empty for an instance with no parts (or none at all).
        """

    @abstractmethod
    def overlapping_claims(
        self,
        space: str | None,
        scopes: Iterable[str],
        kinds: Iterable[str] | None = None,
        states: Iterable[str] | None = None,
    ) -> list[Claim]:
        """Every claim in ``space`` whose scope overlaps one of ``scopes``, ordered by
        (instance id, space, kind, scope).

        A claim overlaps a scope when it is equal to it, one of its ancestor directories, or lies
        under it (:func:`runner.scopes.overlaps`). Only claims of the given ``kinds`` count, and only
        of instances now in one of ``states`` (if given): a claim left by an instance that moved on
        is never returned. ``space=None`` means every space.

        The cost is index probes, not a scan: for each given scope one equality probe per ancestor
        (and itself) and one range probe for what lies under it (``s + "/" < scope < s + "0"`` in
        binary collation), so O(len(scopes) x depth) plus the claims found.
        """


class Transaction(Reader):
    """One serialized writing transaction; everything in it commits together or not at all.

    ``now`` is the store's clock, read once when the transaction began: every guard and update in
    the transaction judges time by it.
    """

    now: datetime

    @abstractmethod
    def put(self, instance: Instance, state: str, data: Mapping[str, Any]) -> Instance:
        """Compare-and-set: write ``state`` and ``data`` if the row is still at ``instance.version``.

        Inserts when ``instance.version`` is 0. Returns the instance at its new version.

        Raises:
            ConflictError: ``version_conflict`` if the row moved (or exists, for an insert).
        """

    @abstractmethod
    def put_part(self, instance_id: str, key: str, value: Mapping[str, Any]) -> None:
        """Write one keyed part of an instance (insert, or replace the value under that key).

        Why: an instance whose data would grow with its history (a plan's step records) keeps a small
        header in its data and one part per record, so a write touches one record and a read decodes
        only what it asks for. A part commits or rolls back with the transaction, so writing it beside
        the instance's compare-and-set (:meth:`put`) records both or neither; that compare-and-set is
        what serializes writers of the instance, parts have no version of their own. ``value`` is a
        JSON object, stored as :meth:`put` stores data. Parts are never deleted (nor are instances).
        """

    @abstractmethod
    def set_claims(self, instance_id: str, claims: Iterable[tuple[str, str, str]]) -> None:
        """Replace every claim ``instance_id`` holds with these ``(space, kind, scope)`` triples.

        Empty clears them; duplicates count once. The claims commit (or roll back) with the rest of
        the transaction, so an instance's claims and its row are always of one version. The engine
        calls this with what an :class:`~runner.context.Update` declared, and with nothing when an
        instance reaches a terminal state.
        """

    @abstractmethod
    def next_number(self, counter: str) -> int:
        """The next value (1, 2, …) of a named counter; never handed out twice."""

    @abstractmethod
    def append(
        self, instance: Instance, trigger: str, from_state: str, actor: str, payload: Mapping[str, Any]
    ) -> Event:
        """Append one event for ``instance`` (as just written) with the next global sequence number."""


class Store(ABC):
    """A durable home for instances and their event log."""

    url: str

    @abstractmethod
    def write(self) -> AbstractContextManager[Transaction]:
        """A serialized writing transaction; commits on a clean exit, rolls back on an exception.

        Raises:
            StoreBusyError: when the store stays locked past the adapter's busy budget; its details
                carry ``budget_seconds`` (that budget), ``waited_seconds`` and ``attempts``.
        """

    @abstractmethod
    def read(self) -> AbstractContextManager[Reader]:
        """A read-only snapshot; never blocks writers and is never blocked by them."""

    @abstractmethod
    def now(self) -> datetime:
        """The store's clock, by which expiry is judged."""

    @abstractmethod
    def events(self, since: int = 0, limit: int | None = None, instance_id: str | None = None) -> list[Event]:
        """Events with ``seq > since`` (of one instance, if given) in sequence order, at most ``limit``.

        The retention floor and the events are read in one snapshot. For the whole log, or any read
        that may be long, use :meth:`iter_events`: this builds a list.

        Raises:
            EventsPrunedError: ``events_pruned`` when ``since`` is below the retention floor.
        """

    @abstractmethod
    def wait_events(self, since: int, timeout: float, limit: int | None = None) -> list[Event]:
        """Events after ``since`` (at most ``limit``), waiting up to ``timeout`` s for the first to appear.

        Raises:
            EventsPrunedError: ``events_pruned`` when ``since`` is (or, while waiting, falls) below
                the retention floor.
        """

    def retention_floor(self) -> int:
        """The highest sequence number pruned from the event log (0 if nothing ever was).

        Never decreases. Every event with ``seq <= floor`` is gone and every later one is kept
        (unless a later prune raises the floor past it); a reader with ``since >= floor`` misses nothing.
        An adapter that cannot prune keeps this default: 0, for ever.
        """
        return 0

    def prune_events(
        self,
        *,
        keep: int | None = None,
        before: int | None = None,
        recorded_before: datetime | None = None,
        dry_run: bool = False,
        batch: int = PRUNE_BATCH,
    ) -> Pruned:
        """Delete the oldest events: a prefix of the log, chosen by exactly one criterion.

        ``keep``: all but the newest ``keep`` events; ``before``: events with ``seq < before``;
        ``recorded_before``: the longest prefix of events recorded (``at``) before that moment (it
        stops at the first newer event, so the floor stays a prefix even if clocks stepped back).
        Instances are never touched: only event rows go. The floor never moves past the newest event,
        so events appended later are always above it.

        Deletes in transactions of at most ``batch`` events, each raising the floor before deleting
        the rows at or below it, so no transaction holds the write lock long and every reader sees
        either the events or the floor that says they are gone; between two batches the adapter
        leaves the lock free for a while (as long as the batch took, at most 50 ms) so waiting
        writers get in. ``dry_run`` writes nothing and says what would go.

        Raises:
            InputError: no criterion or more than one, or a negative one; ``prune_unsupported`` from
                an adapter that cannot prune (this default: every adapter of corral's overrides it).
        """
        raise InputError(
            "prune", f"the store {self.url} cannot prune its event log", code="prune_unsupported", url=self.url
        )

    @abstractmethod
    def info(self) -> dict[str, Any]:
        """What the store is, for ``corral status``: ``adapter``, location, ``schema_version``,
        ``store_id`` (a random id made when the store was created, or when an older store was
        migrated, and never changed: two stores never share one, so a cursor can name its store) and
        ``retention_floor``."""

    @abstractmethod
    def close(self) -> None:
        """Release the connection; the store object is unusable afterwards."""

    def get(self, instance_id: str) -> Instance | None:
        """Convenience: one instance from a fresh snapshot."""
        with self.read() as reader:
            return reader.get(instance_id)

    def find(
        self,
        machine: str,
        states: Iterable[str] | None = None,
        *,
        after: str | None = None,
        limit: int | None = None,
    ) -> list[Instance]:
        """Convenience: instances of one machine from a fresh snapshot (:meth:`Reader.find`)."""
        with self.read() as reader:
            return reader.find(machine, states, after=after, limit=limit)

    def counts(self, machine: str | None = None) -> dict[tuple[str, str], int]:
        """Convenience: instance counts by machine and state from a fresh snapshot (:meth:`Reader.counts`)."""
        with self.read() as reader:
            return reader.counts(machine)

    def iter_events(
        self, since: int = 0, instance_id: str | None = None, *, until: int | None = None, batch: int = EVENT_PAGE
    ) -> Iterator[Event]:
        """Events with ``since < seq <= until`` (of one instance, if given), oldest first, streamed.

        Keyset-paged by ``seq``: each page of at most ``batch`` events is one :meth:`events` call (its
        own short snapshot), so memory stays bounded and writers are never blocked; events appended
        while the iteration runs are included up to ``until`` (None: until a page comes back short).
        The same events as ``events(since, instance_id=instance_id)`` would return at once.

        Raises:
            EventsPrunedError: when ``since`` is below the retention floor, at the first page, or
                at a later one if a prune overtakes the reader (never a silent hole).
        """
        if batch < 1:
            raise ValueError("batch must be positive")
        while until is None or since < until:
            page = self.events(since, batch, instance_id)
            for event in page:
                if until is not None and event.seq > until:
                    return
                yield event
            if len(page) < batch:
                return
            since = page[-1].seq

    def follow(self, since: int, poll: float = 1.0, *, batch: int = EVENT_PAGE) -> Iterator[Event]:
        """Every event after ``since``, as it is appended, forever; at most ``batch`` in memory.

        Raises:
            EventsPrunedError: when the cursor is (or falls) below the retention floor.
        """
        while True:
            for event in self.wait_events(since, poll, batch):
                since = event.seq
                yield event

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
