"""The store port: durable instances, compare-and-set, named counters, an append-only event log,
and keyed parts of an instance (its per-key records, written and read one key at a time),
and a claim index (:class:`~runner.context.Claim`: what live instances hold, such as a writer lane's
scopes, branch and worktree, looked up by overlap in index probes).

That is all a store holds. Every adapter (``sqlite``, ``postgresql``) implements :class:`Store`
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

Idempotency records are the one thing a store holds for a surface rather than for a
machine: ``(key, request digest, the response)`` of a mutating request, kept for a while so a retry
with the same ``Idempotency-Key`` replays the first answer instead of acting twice. They live in the
store, not in a server's memory, so every server on one store shares them
(:meth:`Store.reserve_idempotency`, :meth:`~Store.complete_idempotency`,
:meth:`~Store.release_idempotency`, :meth:`~Store.prune_idempotency`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar

from runner.context import Claim, Event, Instance
from runner.errors import InputError

if TYPE_CHECKING:
    from runner.store.mesh import MeshStore

Clock = Callable[[], datetime]
"""A store's clock: tests inject one, adapters default to the system's UTC time."""

EVENT_PAGE = 1000
"""Events per page of a streaming read: bounds a reader's memory and the length of each snapshot."""

PRUNE_BATCH = 2000
"""Events deleted per transaction by :meth:`Store.prune_events`: each holds the write lock briefly."""

IDEMPOTENCY_STALE_SECONDS = 300.0
"""A pending idempotency record older than this is taken to belong to a request that died (a server
killed mid-operation) and is retaken by the next reservation of its key."""

IDEMPOTENCY_PRUNE_BATCH = 100
"""Expired idempotency records a reservation deletes on its way (bounded: a reservation stays short)."""

IDEMPOTENCY_KEY_MAX = 255
"""The longest idempotency key a store accepts (characters)."""

# Moving a store. What :meth:`Store.export_rows` yields and :meth:`Store.import_rows`
# takes: every table corral keeps, in this order (parents before the rows that name them), each
# row as a tuple of portable values (str, int, bool, None) in this column order, so that two stores
# of different adapters holding the same things yield the same rows.
COPY_TABLES: dict[str, tuple[str, ...]] = {
    "store_meta": ("store_id", "retention_floor", "last_seq"),  # one row; last_seq: the highest seq ever taken
    "instances": ("id", "machine", "state", "version", "data", "created_at", "updated_at"),
    "instance_parts": ("instance_id", "key", "value"),  # per instance in first-write order
    "events": (
        "seq", "instance_id", "machine", "trigger", "from_state", "to_state", "version", "actor", "payload", "at",
    ),
    "claims": ("space", "scope", "kind", "instance_id"),
    "counters": ("name", "value"),
    "agent_slots": (
        "pane_id", "number", "name", "kind", "cwd", "status", "seq", "run", "pid", "exit_status", "closed",
        "options", "dir", "created_at", "updated_at",
    ),
    "idempotency": ("key", "request_sha256", "state", "status", "response", "created_at", "expires_at"),
    # The agent mesh; a message's seq comes from the counter mesh_message (copied above), so
    # the next send after a move continues past every copied seq.
    "mesh_agents": (
        "agent_id", "role", "repo", "caps", "status", "status_at", "pane", "ttl_seconds", "joined_at", "seen_at",
        "expires_at", "version", "wake_at", "token_sha256",
    ),
    "mesh_messages": (
        "seq", "message_id", "sender", "to_kind", "to_value", "subject", "body", "thread", "urgent", "sent_at",
        "pending",
    ),
    "mesh_deliveries": ("agent_id", "seq", "acked_at"),  # after the messages whose seq they name
    # Handoff memory. Sessions in write order (SQLite's rowid, PostgreSQL's n: each store's own,
    # so neither is copied; the target numbers them afresh in the same order); checkpoints keep their n
    # (a session's newest_n names one), pinned is a bool on both. The search index is not copied: the
    # target rebuilds it (SQLite's FTS5 table; PostgreSQL's generated tsvector).
    "memory_projects": ("name", "repository", "subdir", "common_dir", "created_at"),
    "memory_sessions": (
        "id", "project", "goal", "agent", "status", "created_at", "updated_at", "closed_at", "last_seq", "newest_n",
    ),
    "memory_checkpoints": (
        "n", "id", "session_id", "project", "seq", "agent", "summary", "status", "pinned", "body", "search_text",
        "content_sha256", "created_at", "origin",
    ),
}  # fmt: skip

ExportRow = tuple[str, tuple[Any, ...]]
"""One row of :meth:`Store.export_rows`: its table (a key of :data:`COPY_TABLES`) and its values."""


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


@dataclass(frozen=True)
class IdempotencyRecord:
    """One stored idempotency key, as :meth:`Store.reserve_idempotency` found it.

    ``state`` is ``pending`` (a request under this key is in flight, or died: see
    :data:`IDEMPOTENCY_STALE_SECONDS`) or ``done`` (``status`` and ``response``, the JSON text of the
    answer, are what to replay). ``request_sha256`` is the digest of the request that reserved the
    key (the caller's choice of what it covers: the HTTP API hashes method, path and body).
    Timestamps are the store's clock, in corral's format (:func:`runner.context.format_time`).
    """

    key: str
    request_sha256: str
    state: str
    status: int | None
    response: str | None
    created_at: str
    expires_at: str

    def matches(self, request_sha256: str) -> bool:
        """Whether this record was made for the same request (a replay), not another under one key."""
        return self.request_sha256 == request_sha256

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "request_sha256": self.request_sha256,
            "state": self.state,
            "status": self.status,
            "created_at": self.created_at,
            "expires_at": self.expires_at,
        }


def check_idempotency(key: str, request_sha256: str | None = None, ttl_seconds: float | None = None) -> None:
    """The arguments of the idempotency methods, refused alike by every adapter.

    Raises:
        InputError: ``input_invalid`` for a key that is empty, longer than
            :data:`IDEMPOTENCY_KEY_MAX` or holds control characters; a digest that is not 64 lowercase
            hex digits; a TTL that is not a positive number.
    """
    if not isinstance(key, str) or not key or len(key) > IDEMPOTENCY_KEY_MAX or not key.isprintable():
        raise InputError("idempotency_key", f"an idempotency key is 1-{IDEMPOTENCY_KEY_MAX} printable characters")
    if request_sha256 is not None and (
        not isinstance(request_sha256, str)
        or len(request_sha256) != 64
        or request_sha256.strip("0123456789abcdef") != ""
    ):
        raise InputError("request_sha256", "a request digest is 64 lowercase hex digits (SHA-256)")
    if ttl_seconds is not None and (
        isinstance(ttl_seconds, bool) or not isinstance(ttl_seconds, (int, float)) or not ttl_seconds > 0
    ):
        raise InputError("ttl_seconds", f"{ttl_seconds!r} is not a positive number of seconds")


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

    def part_count(self, instance_id: str, prefix: str = "") -> int:
        """How many parts of an instance have a key starting with ``prefix`` (:meth:`parts`, counted
        without reading them)."""
        return len(self.parts(instance_id, prefix))

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

    backend: ClassVar[str] = ""
    """The built-in adapter this store is (``sqlite``, ``postgresql``; empty for none), whatever
    scheme its URL names: a subclass under another scheme (a plugin's alias) keeps its base's, so a
    port kept beside the store (memory) can find its adapter without importing the store's."""

    @abstractmethod
    def write(self) -> AbstractContextManager[Transaction]:
        """A serialized writing transaction; commits on a clean exit, rolls back on an exception.

        Many threads of one process may write through one store object at once; an adapter may
        then commit their transactions together (SQLite's group commit, one fsync for many: see
        ``runner.sql.store_sqlite_group``). Whatever it does, callers may rely on this:

        * Each transaction is its own unit: its body runs alone against everything committed
          before it and the writes of the transactions serialized before it (so a compare-and-set,
          a fence or a cursor is judged against the state committed so far, at the moment of the
          write); a body that raises writes nothing and takes no other transaction's writes down.
        * The ``with`` block returns only once the commit holding its writes has returned (is
          durable, where the adapter's durability setting makes commits so): a write that returned
          survives a crash of the process.
        * A commit that fails raises in every transaction it held (``store_unavailable``, or
          ``store_corrupt`` / ``store_busy``); none of their writes stand.
        * A nested write (this thread already writing) is refused; reads (:meth:`read`) never see
          a transaction's writes before they commit.

        Raises:
            StoreBusyError: when the store stays locked past the adapter's busy budget; its details
                carry ``budget_seconds`` (that budget), ``waited_seconds`` and ``attempts``.
            StoreUnavailableError: the commit holding this transaction failed; nothing was written.
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
    def wait_events(
        self, since: int, timeout: float, limit: int | None = None, *, poll: float | None = None
    ) -> list[Event]:
        """Events after ``since`` (at most ``limit``), waiting up to ``timeout`` s for the first to appear.

        ``poll``: how often a store that must poll for commits looks (None: its own default); a store
        notified of commits ignores it.

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

    # --- idempotency records -------------------------------------------------------------------------
    # Not abstract, as prune_events is not: an adapter that keeps none refuses with a clear code. Every
    # adapter of corral's implements them and the conformance suite holds each to this contract.

    def reserve_idempotency(
        self,
        key: str,
        request_sha256: str,
        ttl_seconds: float,
        *,
        stale_seconds: float = IDEMPOTENCY_STALE_SECONDS,
    ) -> IdempotencyRecord | None:
        """Reserve ``key`` for one request, or say why not; one serialized write transaction.

        Judged by the store's clock, as one atomic step (of many servers on one store, exactly one
        reserver of a free key gets None):

        - no record, or an expired one (``expires_at`` passed): a ``pending`` record is written
          (expiring ``ttl_seconds`` from now) and **None** is returned: the caller runs the operation,
          then :meth:`complete_idempotency` (or :meth:`release_idempotency` if it raised before it
          could have written anything);
        - a record made for another ``request_sha256``: that record (the caller answers
          ``idempotency_mismatch``); this comes first, whatever the record's state;
        - a ``done`` record: that record (the caller replays its status and response);
        - a ``pending`` record: that record (in flight: ``idempotency_in_progress``), unless it is
          older than ``stale_seconds`` (its request died): then it is retaken, as if free (None).

        Expired records are deleted on the way (at most :data:`IDEMPOTENCY_PRUNE_BATCH`).

        Raises:
            InputError: bad arguments (:func:`check_idempotency`); ``idempotency_unsupported`` from an
                adapter that keeps no idempotency records (this default).
        """
        raise self._no_idempotency()

    def complete_idempotency(self, key: str, status: int, response_json: str) -> bool:
        """Record the answer of the request that reserved ``key``: the record becomes ``done``.

        Its expiry is set afresh from now, with the TTL it was reserved with, so a long operation's
        answer is kept as long as a short one's. Returns False (and writes nothing) when no pending
        record of ``key`` exists any more: it expired and was pruned or retaken, or was released.
        """
        raise self._no_idempotency()

    def release_idempotency(self, key: str) -> bool:
        """Drop ``key``'s pending record (the operation raised before it could have written anything),
        so a retry runs afresh. A ``done`` record is kept. Returns whether a record was dropped."""
        raise self._no_idempotency()

    def prune_idempotency(self, before: datetime | None = None) -> int:
        """Delete every record that expired at or before ``before`` (default: the store's now), pending
        or done; returns how many went."""
        raise self._no_idempotency()

    def _no_idempotency(self) -> InputError:
        return InputError(
            "idempotency_key",
            f"the store {self.url} keeps no idempotency records",
            code="idempotency_unsupported",
            url=self.url,
        )

    # --- the agent mesh --------------------------------------------------------------------------------
    # Not abstract, as prune_events is not: an adapter without the mesh tables refuses with a clear code.

    def mesh(self) -> MeshStore:
        """The mesh port over this store's own tables (:mod:`runner.store.mesh`): presence, messages,
        deliveries, each method one transaction of this store.

        Raises:
            InputError: ``mesh_unsupported`` from an adapter that keeps no mesh tables (this default).
        """
        raise InputError("store", f"the store {self.url} keeps no agent mesh", code="mesh_unsupported", url=self.url)

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

    # Moving a store (``corral store migrate``) and its sizes (``corral store info``).

    def export_rows(self) -> Iterator[ExportRow]:
        """Everything the store holds, from one snapshot, streamed: the ``store_meta`` row first, then
        every row of each table of :data:`COPY_TABLES` in that order, each table in key order
        (``instance_parts`` per instance in first-write order). Close the iterator (or exhaust it)
        to end the snapshot."""
        raise self._no_copy()

    def import_rows(self, rows: Iterable[ExportRow], verify: Callable[[Iterator[ExportRow]], None]) -> None:
        """Load ``rows`` (what :meth:`export_rows` of a store yields) into this store, in one
        transaction: the events keep their seq, the store takes the source's ``store_id`` (it is the
        same store, moved), retention floor and last seq; the memory checkpoints keep their ``n``, the
        store's own numbering continues past them, and its search index covers them. Before the commit,
        ``verify`` is handed this store's own export of what it now holds (inside the transaction); if
        it raises, nothing is written.

        Raises:
            RefusedError: ``store_not_empty`` when this store holds anything (it is left as it was).
        """
        raise self._no_copy()

    def sizes(self) -> dict[str, int]:
        """Rows per table of :data:`COPY_TABLES` (without ``store_meta``), and ``bytes``: the space the
        store takes (the file and its WAL; the schema's relations)."""
        raise self._no_copy()

    def _no_copy(self) -> InputError:
        return InputError(
            "store", f"the store {self.url} cannot be copied or measured", code="copy_unsupported", url=self.url
        )

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
