"""The embedded default store: one SQLite file, WAL, every write a ``BEGIN IMMEDIATE`` transaction.

Durability: ``synchronous=FULL`` in WAL mode, so an acknowledged commit survives a crash of the
process and of the machine. Writers serialize on SQLite's write lock, and wait for it in arrival
order: a FIFO queue of kernel byte-range locks in a lock file beside the database
(``runner.sql.store_sqlite_writelock``) stands in front of ``BEGIN IMMEDIATE``, so waiters sleep in the kernel
and the next in line is woken at each release (SQLite's own waits poll, and a writer that commits
and begins again keeps winning while the sleepers starve). Behind the queue stays SQLite's own
handling, for programs that write the file without our lock file: a short busy timeout plus bounded
retries with full jitter (a random sleep below an exponentially growing cap). Queue and retries
share one busy budget (``busy_deadline``); ``store_busy`` reports it and the time waited.

Within one process, the writers of one store object share commits (``runner.sql.store_sqlite_group``):
a group of them is one ``BEGIN IMMEDIATE`` … ``COMMIT`` on the write connection, each writer its own
savepoint, one place in the queue and one fsync for all, each acknowledged after the ``COMMIT``.
Reads have a connection of their own, so a snapshot never sees a group's writes before they commit.

The schema is versioned in ``PRAGMA user_version`` and migrated forward on open; a database whose
version is newer than this code knows is refused rather than misread. The file is created whole
and recognised before anything is written to it (``runner.sql.store_sqlite_file``): an empty, damaged
or foreign file is refused, never re-initialised; so is a row whose JSON cannot be decoded.
"""

from __future__ import annotations

import json
import os
import random
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from runner.context import Claim, Event, Instance, format_time
from runner.errors import (
    CorralError,
    InputError,
    RefusedError,
    StoreBusyError,
    StoreCorruptError,
    StoreUnavailableError,
    StoreVersionError,
)
from runner.log import get_logger
from runner.observe import meter
from runner.sql import store_sql as shared
from runner.sql.store_sql import Dialect
from runner.sql.store_sqlite_file import (
    APPLICATION_ID,
    check_header,
    corrupt,
    corruption_refused,
    create_exclusive,
    is_corruption,
    recognise,
)
from runner.sql.store_sqlite_group import Group, GroupCommit
from runner.sql.store_sqlite_schema import MIGRATIONS, SCHEMA_VERSION, TABLES_BY_VERSION
from runner.sql.store_sqlite_writelock import Place, QueueTimeout, WriteQueue
from runner.store import sqlite_path
from runner.store.abc import (
    COPY_TABLES,
    IDEMPOTENCY_STALE_SECONDS,
    PRUNE_BATCH,
    Clock,
    ExportRow,
    IdempotencyRecord,
    Pruned,
    Reader,
    Store,
    Transaction,
    check_idempotency,
)

if TYPE_CHECKING:
    from runner.store.mesh import MeshStore

logger = get_logger(__name__)  # imports logging only to log (cold start)

BUSY_TIMEOUT_MS = 20  # SQLite's own short wait before we take over with jittered retries
RETRY_BASE = 0.002
RETRY_CAP = 0.1
WAIT_POLL = 0.05  # how often wait_events looks for another connection's commit (a caller may ask sooner)

# One encoder for every row and event: json.dumps with options builds a new one per call.
encode_json = json.JSONEncoder(sort_keys=True, separators=(",", ":")).encode


def _wall_clock() -> datetime:
    return datetime.now(UTC)


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    text = str(exc).lower()
    return "locked" in text or "busy" in text


_SCALARS = frozenset({str, int, float, bool, type(None)})
_TEXT = frozenset({str})  # keys another type would come back from JSON as strings
_KNOWN_ROWS = 256  # rows whose decoded data a store keeps (cleared whole when full)


class _SQL(Dialect):
    """The store port's shared SQL (:mod:`runner.sql.store_sql`) as SQLite says it."""

    part_order = "rowid"  # the parts' first-write order (an upsert keeps it)

    __slots__ = ("_path",)

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        super().__init__(conn)
        self._path = path

    def one_of(self, column: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
        return (f"{column} IN ({', '.join('?' * len(values))})" if values else "0"), list(values)

    def decode(self, text: Any, table: str, row_id: Any, column: str) -> dict[str, Any]:
        return decode_object(text, self._path, table, row_id, column)

    def floor(self) -> int:
        return int(_meta(self.conn, self._path, "retention_floor"))

    def raise_floor(self, upto: int) -> None:
        self.conn.execute("UPDATE store_meta SET value = ? WHERE key = 'retention_floor'", (upto,))


class _Reader(shared.SQLReader):
    def __init__(self, conn: sqlite3.Connection, path: Path, known: dict[str, tuple[str, dict[str, Any]]]) -> None:
        self._conn = conn
        self._path = path
        self._known = known
        self._sql = _SQL(conn, path)

    def get(self, instance_id: str) -> Instance | None:
        row = self._conn.execute(
            "SELECT id, machine, state, version, data, created_at, updated_at FROM instances WHERE id = ?",
            (instance_id,),
        ).fetchone()
        if row is None:
            return None
        text = row[4]
        known = self._known.get(instance_id)
        if known is not None and known[0] == text:
            data = dict(known[1])  # flat: a shallow copy is a whole one
        else:
            data = decode_object(text, self._path, "instances", row[0], "data")
            _remember(self._known, instance_id, text, data)
        return Instance(row[0], row[1], row[2], row[3], data, row[5], row[6])

    def overlapping_claims(
        self,
        space: str | None,
        scopes: Iterable[str],
        kinds: Iterable[str] | None = None,
        states: Iterable[str] | None = None,
    ) -> list[Claim]:
        # The probes go in as JSON arrays (one parameter each, whatever their number); CROSS JOIN keeps
        # them the outer loop, so each is one probe of the primary key (space, scope, ...).
        sql = (
            "SELECT m.instance_id, m.space, m.kind, m.scope FROM ("
            " SELECT c.instance_id, c.space, c.kind, c.scope FROM json_each(?) AS p CROSS JOIN claims AS c"
            "  WHERE c.space = ? AND c.scope = p.value"
            " UNION ALL"
            " SELECT c.instance_id, c.space, c.kind, c.scope FROM json_each(?) AS p CROSS JOIN claims AS c"
            "  WHERE c.space = ? AND c.scope > p.value || '/' AND c.scope < p.value || '0'"
            ") AS m"
        )
        tail: list[Any] = []
        if states is not None:
            live = list(states)
            sql += f" JOIN instances AS i ON i.id = m.instance_id AND i.state IN ({', '.join('?' * len(live))})"
            tail += live
        if kinds is not None:
            chosen = list(kinds)
            sql += f" WHERE m.kind IN ({', '.join('?' * len(chosen))})"
            tail += chosen

        def probe(one: str, exact: list[str], wanted: list[str]) -> Any:
            return self._conn.execute(sql, [encode_json(exact), one, encode_json(wanted), one, *tail])

        return self.probe_claims(space, scopes, probe)


class _Transaction(_Reader, Transaction):
    def __init__(
        self, conn: sqlite3.Connection, path: Path, known: dict[str, tuple[str, dict[str, Any]]], now: datetime
    ) -> None:
        self._conn = conn
        self._path = path
        self._known = known
        self._sql = _SQL(conn, path)
        self.now = now
        self.stamp = format_time(now)  # every row and event of one transaction carries the same time

    def put(self, instance: Instance, state: str, data: Mapping[str, Any]) -> Instance:
        stamp = self.stamp
        data = dict(data)  # the instance keeps its own copy of what was written
        encoded = encode_json(data)
        if instance.version == 0:
            try:
                self._conn.execute(
                    "INSERT INTO instances (id, machine, state, version, data, created_at, updated_at)"
                    " VALUES (?, ?, ?, 1, ?, ?, ?)",
                    (instance.id, instance.machine, state, encoded, stamp, stamp),
                )
            except sqlite3.IntegrityError:
                raise shared.created_elsewhere(instance) from None
            _remember(self._known, instance.id, encoded, data)
            return Instance(instance.id, instance.machine, state, 1, data, stamp, stamp)
        shared.compare_and_set(self._sql, self, instance, state, encoded, stamp)
        _remember(self._known, instance.id, encoded, data)
        return Instance(instance.id, instance.machine, state, instance.version + 1, data, instance.created_at, stamp)

    def put_part(self, instance_id: str, key: str, value: Mapping[str, Any]) -> None:
        shared.put_part(self._sql, instance_id, key, encode_json(dict(value)))

    def set_claims(self, instance_id: str, claims: Iterable[tuple[str, str, str]]) -> None:
        self._conn.execute("DELETE FROM claims WHERE instance_id = ?", (instance_id,))
        self._conn.executemany(
            "INSERT OR IGNORE INTO claims (space, kind, scope, instance_id) VALUES (?, ?, ?, ?)",
            [(space, kind, scope, instance_id) for space, kind, scope in claims],
        )

    def next_number(self, counter: str) -> int:
        row = self._conn.execute(
            "INSERT INTO counters (name, value) VALUES (?, 1) ON CONFLICT (name) DO UPDATE SET value = value + 1"
            " RETURNING value",
            (counter,),
        ).fetchone()
        return int(row[0])

    def append(
        self, instance: Instance, trigger: str, from_state: str, actor: str, payload: Mapping[str, Any]
    ) -> Event:
        at = self.stamp
        payload = dict(payload)  # the event keeps its own copy of what was written
        encoded = encode_json(payload)
        cursor = self._conn.execute(
            "INSERT INTO events (instance_id, machine, trigger, from_state, to_state, version, actor, payload, at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (instance.id, instance.machine, trigger, from_state, instance.state, instance.version, actor, encoded, at),
        )
        seq = cursor.lastrowid
        assert seq is not None
        return shared.appended(seq, instance, trigger, from_state, actor, payload, at)


def connection_of(view: Reader) -> tuple[sqlite3.Connection, Path]:
    """The connection (and file) under a snapshot or transaction of an :class:`SQLiteStore`.

    For a port whose own tables live in the same database (the process host's agent slots,
    ``runner.sql.slots_sqlite``): its statements run in that very snapshot or transaction, so they
    commit or roll back with the store's rows. Valid only while ``view`` is open.

    Raises:
        CorralError: ``view`` does not come from an SQLite store (a bug in whoever paired them).
    """
    if not isinstance(view, _Reader):
        raise CorralError(f"{type(view).__name__} is not a snapshot or transaction of an SQLite store")
    return view._conn, view._path


def decode_object(text: Any, path: Path, table: str, row_id: Any, column: str) -> dict[str, Any]:
    """One JSON object column of one row; a row that does not decode is ``store_corrupt``, by table and id.

    Public for the ports whose tables live in this database (``runner.sql.slots_sqlite``).
    """
    return shared.decode_object(text, str(path), table, row_id, column, path=str(path))


def _remember(known: dict[str, tuple[str, dict[str, Any]]], instance_id: str, text: str, data: dict[str, Any]) -> None:
    """Keep ``data`` as the decoding of ``text`` for the next ``get`` of ``instance_id``, if it is flat.

    Why: a renew reads back the row it wrote a moment ago; comparing its text with the text we
    encoded or decoded last costs a memcmp, decoding it again a JSON parse. A match is exact (the
    same text decodes to the same data, so a damaged row never matches a sound one); only data of
    JSON scalars under string keys is kept, so that the text decodes to exactly that data and a
    shallow copy hands every caller a whole copy of its own.
    """
    if _SCALARS.issuperset(map(type, data.values())) and _TEXT.issuperset(map(type, data)):
        if len(known) >= _KNOWN_ROWS:
            known.clear()
        known[instance_id] = (text, dict(data))


class _Immediate:
    """One writer's transaction of an :class:`SQLiteStore`, as a context manager: a ``SAVEPOINT`` in
    the group transaction it joins (``runner.sql.store_sqlite_group``).

    Written by hand rather than with ``contextlib`` (generator layers and retry closures were a fifth
    of an uncontended write's CPU). Uncontended, a write is a group of one: the queue's three system
    calls, ``BEGIN IMMEDIATE`` and ``COMMIT``; only a busy answer from SQLite falls into ``_retry``'s
    loop, on the budget the queue started. The first member of a group needs no savepoint (nothing
    is before it in the transaction): if it fails, the whole transaction rolls back, and the writers
    waiting to join start again in a new group, before any of them ran.

    Invariant: a writer's ``__exit__`` returns normally only after the ``COMMIT`` holding its writes
    returned; a body that raised rolled back to its savepoint, and nothing of it commits. A nested
    write (this thread is already writing) is refused, as SQLite refuses a nested ``BEGIN``. SQLite's
    "malformed" / "not a database" errors anywhere inside become ``store_corrupt``, as
    ``store_sqlite_file.corruption_refused`` does.
    """

    __slots__ = ("_clock", "_group", "_saved", "_store")

    def __init__(self, store: SQLiteStore, clock: Clock | None) -> None:
        self._store = store
        self._clock = clock  # None: no Transaction object (migrations, pruning)
        self._group: Group | None = None
        self._saved = False  # this writer's writes are in a savepoint (it is not its group's first)

    def __enter__(self) -> Any:
        store = self._store
        writing = store._writing
        if getattr(writing, "depth", 0):
            raise sqlite3.OperationalError("cannot start a transaction within a transaction (a nested write)")
        store._started.at = time.monotonic()  # the busy budget starts at the door, for a leader's wait
        try:
            group = store._groups.join()
        except sqlite3.DatabaseError as exc:
            if type(exc) is sqlite3.DatabaseError and is_corruption(exc):
                raise corrupt(store.path, str(exc)) from None
            raise
        writing.depth = 1
        # Invariant: only the turn's holder touches ``ran``; 0 means nothing is in the transaction yet.
        saved = group.ran > 0
        group.ran += 1
        if saved:
            try:
                store._conn.execute("SAVEPOINT corral_writer")
            except BaseException as exc:
                writing.depth = 0
                store._groups.leave(group, _lost(store, exc) if not store._conn.in_transaction else None)
                if type(exc) is sqlite3.DatabaseError and is_corruption(exc):
                    raise corrupt(store.path, str(exc)) from None
                raise
        self._saved = saved
        self._group = group
        clock = self._clock
        return None if clock is None else _Transaction(store._conn, store.path, store._known, clock())

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, _tb: object) -> None:
        store = self._store
        conn = store._conn
        group = self._group
        assert group is not None, "__exit__ without __enter__"
        self._group = None
        store._writing.depth = 0
        own: BaseException | None = None
        lost = None
        if not self._saved:
            if kind is not None:  # the first member: its rollback is the whole transaction's
                lost = _lost(store, error or sqlite3.OperationalError("the first writer failed"))
        else:
            try:
                if kind is None:
                    conn.execute("RELEASE corral_writer")
                else:
                    conn.execute("ROLLBACK TO corral_writer")
                    conn.execute("RELEASE corral_writer")
            except BaseException as exc:  # noqa: BLE001 - reason: re-raised below, once the group is left
                own = exc
        if lost is None and not conn.in_transaction:  # SQLite ended it all: the members before us are gone
            lost = _lost(store, own or error or sqlite3.OperationalError("the transaction was rolled back"))
        elif lost is None and own is not None and kind is None:
            # Our savepoint could not be released: take our writes out, or the group's commit is lost.
            try:
                conn.execute("ROLLBACK TO corral_writer")
                conn.execute("RELEASE corral_writer")
            except sqlite3.Error as exc:
                lost = _lost(store, exc)
        committed_here = store._groups.leave(group, lost)
        if own is not None and kind is None:
            if type(own) is sqlite3.DatabaseError and is_corruption(own):
                raise corrupt(store.path, str(own)) from None
            raise own
        if kind is not None:
            if error is not None and type(error) is sqlite3.DatabaseError and is_corruption(error):
                raise corrupt(store.path, str(error)) from None
            return  # the body's own exception goes on; nothing of it was written
        if not committed_here:
            group.wait_decided()
        if group.failure is not None:
            raise group.failure()


def _lost(store: SQLiteStore, exc: BaseException) -> Callable[[], BaseException]:
    """What each member of a group that cannot commit raises (a fresh error each: they are raised in
    several threads): ``store_corrupt``, ``store_busy`` as it was, else ``store_unavailable``."""
    if isinstance(exc, StoreBusyError):
        details = dict(exc.details)
        return lambda: StoreBusyError(str(exc), **details)
    if isinstance(exc, sqlite3.DatabaseError) and is_corruption(exc):
        return lambda: corrupt(store.path, str(exc))
    message = (
        f"the store {store.path} could not commit a group of writes ({type(exc).__name__}: {exc});"
        " nothing of this transaction was written: re-read the state and retry"
    )
    return lambda: StoreUnavailableError(message, path=str(store.path), outcome="not_written")


class SQLiteStore(Store):
    """A store in one SQLite file.

    Args:
        path: the database file; its directory must exist.
        clock: the store's clock (tests inject one); defaults to the system's UTC time.
        busy_deadline: how long a writer waits for the write lock before ``store_busy``.
    """

    backend: ClassVar[str] = "sqlite"

    def __init__(self, path: str | Path, *, clock: Clock | None = None, busy_deadline: float = 15.0) -> None:
        self.path = Path(path).absolute()  # supervisors open it from the agent's cwd
        self.url = f"sqlite://{self.path}"
        self._clock = clock or _wall_clock
        self._deadline = busy_deadline
        # Two connections: ``_conn`` writes (its groups take turns on it, ``store_sqlite_group``) and
        # ``_reads`` (opened at the first read) serves snapshots, so a read never sees a group's
        # writes before they commit, and never waits for a group.
        self._lock = threading.RLock()  # guards the read connection: its snapshots must not interleave
        self._reads: sqlite3.Connection | None = None
        self._writing = threading.local()  # 1 while this thread is in a write (a nested one is refused)
        self._started = threading.local()  # when this thread's write began: its busy budget's start
        self._groups = GroupCommit(self._group_begin, self._group_end)
        self._queue: WriteQueue | None = None  # opened at the first write: readers never make a lock file
        self._queue_opened = False
        self._queue_guard = threading.Lock()
        # Invariant: each entry is a row's data text and its decoding (flat data only), never mutated.
        self._known: dict[str, tuple[str, dict[str, Any]]] = {}
        try:
            # Invariant: a store file is made only where no name exists, whole (created 0600:
            # SQLite gives its -wal and -shm files the same mode); an existing one is never remade.
            if not os.path.lexists(self.path):
                create_exclusive(self.path, self._build)
            check_header(self.path)
            self._conn = sqlite3.connect(
                str(self.path), isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000
            )
        except (sqlite3.Error, OSError) as exc:
            raise StoreUnavailableError(
                f"cannot open the SQLite store at {self.path}: {exc}", path=str(self.path)
            ) from None
        try:
            self._setup()
        except BaseException:
            self._conn.close()
            if self._queue is not None:  # a migration opened it
                self._queue.close()
            raise

    # --- setup ----------------------------------------------------------------------------------

    def _build(self, conn: sqlite3.Connection) -> None:
        """The whole current schema in a new (temporary) file: see ``store_sqlite_file.create_exclusive``."""
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("BEGIN IMMEDIATE")
        for script in MIGRATIONS:
            for statement in _statements(script):
                _run_migration(conn, statement)
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")

    def _setup(self) -> None:
        conn = self._conn
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        # Opening can meet a lock too (another connection checkpointing on close): wait like a writer.
        # Nothing is written before the file is recognised as a corral store.
        found = recognise(conn, self.path, TABLES_BY_VERSION, self._retry)
        if self._retry(lambda: conn.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
            self._retry(lambda: conn.execute("PRAGMA journal_mode = WAL"))
        conn.execute("PRAGMA synchronous = FULL")
        if found.user_version < SCHEMA_VERSION or not found.stamped:
            self._migrate()

    def _migrate(self) -> None:
        """Forward migrations, and corral's application id stamped on an older corral's database."""
        with self._immediate():
            # Re-read inside the lock: another process may have migrated while we waited.
            current = self._conn.execute("PRAGMA user_version").fetchone()[0]
            if current > SCHEMA_VERSION:
                raise StoreVersionError(
                    f"the database {self.path} was upgraded by a newer corral meanwhile",
                    path=str(self.path),
                    schema_version=current,
                    supported=SCHEMA_VERSION,
                )
            for target in range(current + 1, SCHEMA_VERSION + 1):
                logger.info("migrating %s to schema version %d", self.path, target)
                for statement in _statements(MIGRATIONS[target - 1]):
                    _run_migration(self._conn, statement)
                self._conn.execute(f"PRAGMA user_version = {target}")
            if self._conn.execute("PRAGMA application_id").fetchone()[0] != APPLICATION_ID:
                logger.info("stamping %s with corral's application id", self.path)
                self._conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")

    # --- transactions ---------------------------------------------------------------------------

    def _retry(
        self, attempt: Callable[[], Any], *, started: float | None = None, deadline: float | None = None, tries: int = 0
    ) -> Any:
        """Run ``attempt`` until SQLite stops answering busy/locked, or ``store_busy`` at the deadline.

        ``started``, ``deadline`` (``time.monotonic()``) and ``tries`` carry on a wait begun in the
        write queue, so the budget is spent once; by default a fresh budget starts now.

        This blocks its thread (``time.sleep`` between attempts, up to ``busy_deadline`` seconds in
        all), as every method of this synchronous store may. That is allowed only because the store
        is synchronous by contract: async code must call it in a worker thread
        (``anyio.to_thread.run_sync``, as the process host's waits do), so a busy store stalls that
        thread, never an event loop.
        """
        started = time.monotonic() if started is None else started
        deadline = started + self._deadline if deadline is None else deadline
        while True:
            try:
                return attempt()
            except sqlite3.OperationalError as exc:
                if not _is_busy(exc):
                    raise
                tries += 1
                if meter.SINK is not None:
                    meter.SINK.store_busy("retried")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise self._busy(time.monotonic() - started, tries) from None
                # Full jitter: a random sleep below an exponentially growing cap.
                time.sleep(min(remaining, random.uniform(0, min(RETRY_CAP, RETRY_BASE * 2**tries))))

    def _busy(self, waited: float, attempts: int) -> StoreBusyError:
        if meter.SINK is not None:
            meter.SINK.store_busy("gave_up")
        return StoreBusyError(
            f"the store {self.path} stayed locked: waited {waited:.1f} s of its {self._deadline:g} s busy budget "
            f"({attempts} attempts); nothing was written",
            path=str(self.path),
            attempts=attempts,
            budget_seconds=self._deadline,
            waited_seconds=round(waited, 3),
        )

    def _enter_queue(self, started: float) -> Place | None:
        """Our turn in the FIFO write queue (None: no queue). Not for a nested write (see ``_Immediate``)."""
        if not self._queue_opened:
            with self._queue_guard:
                if not self._queue_opened:
                    self._queue = WriteQueue.open(self.path)  # None: SQLite's own busy handling alone
                    self._queue_opened = True
        queue = self._queue
        if queue is None:
            return None
        try:
            return queue.acquire(started + self._deadline)
        except QueueTimeout as exc:
            raise self._busy(exc.waited, exc.attempts) from None
        except OSError as exc:
            raise StoreUnavailableError(
                f"the write queue {queue.path} of the store failed: {exc}", path=str(self.path)
            ) from None

    def _group_begin(self) -> Place | None:
        """Open a group's transaction: our turn in the write queue, then ``BEGIN IMMEDIATE``."""
        started = self._started.at
        place = self._enter_queue(started)
        conn = self._conn
        try:
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                if not _is_busy(exc):
                    raise
                begin = lambda: conn.execute("BEGIN IMMEDIATE")  # noqa: E731 - reason: one statement, retried
                tries = place.attempts + 1 if place is not None else 1
                self._retry(begin, started=started, deadline=started + self._deadline, tries=tries)
        except BaseException:
            if place is not None:
                self._queue.release(place)  # type: ignore[union-attr]  # reason: a place implies a queue
            raise
        return place

    def _group_end(self, group: Group) -> None:
        """Commit a group (roll it back if it failed) and give its place in the write queue up."""
        conn = self._conn
        try:
            if group.failure is None:
                try:
                    conn.execute("COMMIT")
                except sqlite3.OperationalError as exc:
                    if not _is_busy(exc):
                        raise
                    self._retry(lambda: conn.execute("COMMIT"), tries=1)
            elif conn.in_transaction:
                conn.execute("ROLLBACK")
        except BaseException as exc:
            group.failure = _lost(self, exc)
            if conn.in_transaction:
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    logger.warning("rolling back a failed group commit of %s failed", self.path, exc_info=True)
            if not isinstance(exc, Exception):
                raise  # cancellation and interrupts go on (the members were told above)
        finally:
            place = group.place
            if place is not None:
                group.place = None
                self._queue.release(place)  # type: ignore[union-attr, arg-type]  # reason: a place implies a queue

    def _immediate(self) -> _Immediate:
        """A ``BEGIN IMMEDIATE`` transaction on the store's connection (``with``; yields None)."""
        return _Immediate(self, None)

    def write(self) -> AbstractContextManager[Transaction]:
        return _Immediate(self, self._clock)

    def _reader(self) -> sqlite3.Connection:
        """The read connection (call it holding ``_lock``), opened at the first read."""
        conn = self._reads
        if conn is None:
            try:
                conn = sqlite3.connect(
                    str(self.path), isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000
                )
            except sqlite3.Error as exc:
                raise StoreUnavailableError(
                    f"cannot open the SQLite store at {self.path}: {exc}", path=str(self.path)
                ) from None
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            self._reads = conn
        return conn

    @contextmanager
    def read(self) -> Iterator[Reader]:
        with self._lock, corruption_refused(self.path):
            conn = self._reader()
            conn.execute("BEGIN")  # deferred: a snapshot from the first read on, no write lock
            try:
                yield _Reader(conn, self.path, self._known)
            finally:
                conn.execute("COMMIT")

    def now(self) -> datetime:
        return self._clock()

    @contextmanager
    def _snapshot(self) -> Iterator[sqlite3.Connection]:
        """One read snapshot for a few statements (inside this thread's write: that transaction)."""
        if getattr(self._writing, "depth", 0):
            with corruption_refused(self.path):
                yield self._conn
            return
        with self._lock, corruption_refused(self.path):
            conn = self._reader()
            if conn.in_transaction:  # a snapshot of this thread already open (a reentrant read)
                yield conn
                return
            conn.execute("BEGIN")  # deferred: a snapshot from the first read on, no write lock
            try:
                yield conn
            finally:
                conn.execute("COMMIT")

    def _meta(self, conn: sqlite3.Connection, key: str) -> Any:
        return _meta(conn, self.path, key)

    def _sql(self) -> _SQL:
        """The shared SQL on the write connection (use it inside one of the store's writes)."""
        return _SQL(self._conn, self.path)

    def events(self, since: int = 0, limit: int | None = None, instance_id: str | None = None) -> list[Event]:
        with self._snapshot() as conn:  # the floor and the rows from one snapshot: no silent hole
            sql = _SQL(conn, self.path)
            rows = shared.event_rows(sql, since, limit, instance_id)
        return [sql.event(row) for row in rows]

    def wait_events(
        self, since: int, timeout: float, limit: int | None = None, *, poll: float | None = None
    ) -> list[Event]:
        # Blocks its thread up to ``timeout`` (like ``_retry``): async callers run it in a worker thread.
        # SQLite has no notifications across processes; PRAGMA data_version changes whenever another
        # connection commits, so polling it (every ``poll`` s, WAIT_POLL by default) reads no table.
        interval = WAIT_POLL if poll is None else poll
        deadline = time.monotonic() + timeout
        seen = None
        while True:
            version = self.data_version()
            if version != seen:
                seen = version
                found = self.events(since, limit)
                if found:
                    return found
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return []
            time.sleep(min(interval, remaining))

    def data_version(self) -> tuple[int, int]:
        """A probe of "did anything commit?" that reads no table and opens no transaction (the
        process host's waits take it every tick): ``PRAGMA data_version`` on the read connection,
        which moves when another connection (any process, and this store's write connection) has
        committed since it last asked. Equal values: no commit between. (The second number stays
        for callers that compare pairs: the read connection's own ``total_changes``, always 0.)"""
        with self._lock, corruption_refused(self.path):
            conn = self._reader()
            return int(conn.execute("PRAGMA data_version").fetchone()[0]), conn.total_changes

    def retention_floor(self) -> int:
        with self._snapshot() as conn:
            return int(self._meta(conn, "retention_floor"))

    def prune_events(
        self,
        *,
        keep: int | None = None,
        before: int | None = None,
        recorded_before: datetime | None = None,
        dry_run: bool = False,
        batch: int = PRUNE_BATCH,
    ) -> Pruned:
        shared.check_prune(keep, before, recorded_before, batch)
        # The target is chosen in one read snapshot; the batches below never go past it.
        with self._snapshot() as conn:
            floor, target, count = shared.prune_plan(_SQL(conn, self.path), keep, before, recorded_before)
        if dry_run:
            return Pruned(floor, target, count, dry_run=True)
        current, deleted, batches = shared.prune_batches(self._batch, target, batch)
        return Pruned(floor, max(target, current), deleted, batches=batches)

    @contextmanager
    def _batch(self) -> Iterator[_SQL]:
        """One ``BEGIN IMMEDIATE`` transaction of a pruning, as the shared SQL."""
        with self._immediate():
            yield self._sql()

    # --- idempotency records -------------------------------------------------------------------------

    def reserve_idempotency(
        self,
        key: str,
        request_sha256: str,
        ttl_seconds: float,
        *,
        stale_seconds: float = IDEMPOTENCY_STALE_SECONDS,
    ) -> IdempotencyRecord | None:
        check_idempotency(key, request_sha256, ttl_seconds)
        with self.write() as tx:
            return shared.reserve_idempotency(self._sql(), tx.now, key, request_sha256, ttl_seconds, stale_seconds)

    def complete_idempotency(self, key: str, status: int, response_json: str) -> bool:
        check_idempotency(key)
        shared.check_completion(status, response_json)
        with self.write() as tx:
            return shared.complete_idempotency(self._sql(), tx.now, key, status, response_json)

    def release_idempotency(self, key: str) -> bool:
        check_idempotency(key)
        with self._immediate():
            return shared.release_idempotency(self._sql(), key)

    def prune_idempotency(self, before: datetime | None = None) -> int:
        with self.write() as tx:
            return shared.prune_idempotency(self._sql(), tx.now if before is None else before)

    def mesh(self) -> MeshStore:
        """The agent mesh in this file's ``mesh_*`` tables, on this store's connection."""
        mesh = self.__dict__.get("_mesh")
        if mesh is None:
            from runner.sql.mesh_sql import SQLMesh

            mesh = self.__dict__["_mesh"] = SQLMesh(self, lambda view: connection_of(view)[0], "?", str(self.path))
        return mesh

    def info(self) -> dict[str, Any]:
        with self._snapshot() as conn:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
            store_id = str(self._meta(conn, "store_id"))
            floor = int(self._meta(conn, "retention_floor"))
        return {
            "adapter": "sqlite",
            "path": str(self.path),
            "schema_version": version,
            "journal_mode": mode,
            "store_id": store_id,
            "retention_floor": floor,
        }

    # --- moving a store --------------------------------------------------------------

    def export_rows(self) -> Iterator[ExportRow]:
        with self._snapshot() as conn:
            floor = int(self._meta(conn, "retention_floor"))
            yield "store_meta", (str(self._meta(conn, "store_id")), floor, _last_seq(conn))
            for table, columns in COPY_TABLES.items():
                if table == "store_meta":
                    continue
                sql = f"SELECT {', '.join(columns)} FROM {table} ORDER BY {_COPY_ORDER[table]}"
                flag = columns.index(_COPY_BOOLS[table]) if table in _COPY_BOOLS else -1
                for found in conn.execute(sql):
                    row = tuple(found)
                    if flag >= 0:  # an INTEGER 0/1 here, a boolean on PostgreSQL: portable as a bool
                        row = (*row[:flag], bool(row[flag]), *row[flag + 1 :])
                    yield table, row

    def import_rows(self, rows: Iterable[ExportRow], verify: Callable[[Iterator[ExportRow]], None]) -> None:
        with self.write():
            conn = self._conn
            held = {
                t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in COPY_TABLES if t != "store_meta"
            }
            last = _last_seq(conn)
            if any(held.values()) or last:
                raise RefusedError(
                    f"the store {self.path} is not empty: a store is moved only into an empty one",
                    code="store_not_empty",
                    url=self.url,
                    rows={t: n for t, n in held.items() if n},
                    last_seq=last,
                )
            meta: tuple[Any, ...] | None = None
            batch: list[tuple[Any, ...]] = []
            current = ""
            for table, row in rows:
                if table != current:
                    self._insert(current, batch)
                    batch, current = [], table
                if table == "store_meta":
                    meta = row
                else:
                    batch.append(row)
                    if len(batch) >= _COPY_BATCH:
                        self._insert(current, batch)
                        batch = []
            self._insert(current, batch)
            if meta is None:
                raise InputError("from", "the source yielded no store_meta row", code="store_copy_invalid")
            store_id, floor, last_seq = meta
            # The store id never changes once a store has a history; this one is empty and takes the
            # source's id in the transaction that gives it the source's history.
            conn.execute("DROP TRIGGER store_meta_fixed")
            conn.execute("UPDATE store_meta SET value = ? WHERE key = 'store_id'", (store_id,))
            conn.execute("UPDATE store_meta SET value = ? WHERE key = 'retention_floor'", (int(floor),))
            conn.execute(_META_TRIGGER)
            if conn.execute("UPDATE sqlite_sequence SET seq = ? WHERE name = 'events'", (int(last_seq),)).rowcount == 0:
                conn.execute("INSERT INTO sqlite_sequence (name, seq) VALUES ('events', ?)", (int(last_seq),))
            # The checkpoints came with their n: AUTOINCREMENT's record already stands at the highest
            # (an explicit rowid above it raises it), so the next checkpoint continues past them. Their
            # words are indexed by a rebuild of the external-content FTS5 table, where this build has it.
            if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'memory_fts'").fetchone() is not None:
                conn.execute("INSERT INTO memory_fts (memory_fts) VALUES ('rebuild')")
            self._known.clear()
            verify(self.export_rows())

    def _insert(self, table: str, batch: list[tuple[Any, ...]]) -> None:
        if not batch:
            return
        if table not in COPY_TABLES or table == "store_meta":
            raise InputError(
                "from", f"the source yielded rows of an unknown table {table!r}", code="store_copy_invalid"
            )
        columns = COPY_TABLES[table]
        sql = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"
        self._conn.executemany(sql, batch)

    def sizes(self) -> dict[str, int]:
        with self._snapshot() as conn:
            found = {
                t: int(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0])
                for t in COPY_TABLES
                if t != "store_meta"
            }
        found["bytes"] = sum(p.stat().st_size for p in self.path.parent.glob(self.path.name + "*") if p.is_file())
        return found

    def integrity(self) -> str:
        """SQLite's own ``integrity_check`` verdict (``ok`` when the file is sound)."""
        with self._lock:
            return str(self._reader().execute("PRAGMA integrity_check").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            if self._reads is not None:
                self._reads.close()
            self._conn.close()
            if self._queue is not None:
                self._queue.close()


def _meta(conn: sqlite3.Connection, path: Path, key: str) -> Any:
    """One value of the store's metadata (``store_corrupt`` if the table lacks its key)."""
    row = conn.execute("SELECT value FROM store_meta WHERE key = ?", (key,)).fetchone()
    if row is None:
        raise StoreCorruptError(
            f"the store {path} is damaged: its store_meta table lacks {key!r}; restore it from a backup",
            path=str(path),
            table="store_meta",
            row=key,
        )
    return row[0]


_OPTIONAL_MODULES = ("CREATE VIRTUAL TABLE memory_fts USING ",)
"""Statements a build of SQLite may lack the module for: skipped there (memory then searches
by a scan, ``runner.sql.memory_sqlite``)."""


def _run_migration(conn: sqlite3.Connection, statement: str) -> None:
    """One statement of a migration; an optional virtual table whose module this build lacks is skipped."""
    try:
        conn.execute(statement)
    except sqlite3.OperationalError as exc:
        if not (statement.startswith(_OPTIONAL_MODULES) and "no such module" in str(exc)):
            raise
        logger.info("this SQLite build lacks the module of %r: skipped (%s)", statement[:60], exc)


def _statements(script: str) -> list[str]:
    """Split a migration into statements (``executescript`` would COMMIT our transaction)."""
    statements, buffer = [], ""
    for line in script.strip().splitlines():
        buffer += line + "\n"
        if sqlite3.complete_statement(buffer):
            statements.append(buffer.strip())
            buffer = ""
    if buffer.strip():
        statements.append(buffer.strip())
    return statements


# Moving a store (SQLiteStore.export_rows / import_rows).
_COPY_ORDER = {
    **shared.COPY_ORDER,
    "instance_parts": "instance_id, rowid",  # an instance's parts in first-write order
    "memory_sessions": "rowid",  # write order, the listing's (memory_sqlite); the rowid itself is not copied
}
# The columns kept as INTEGER 0/1 here that are booleans in the portable rows.
_COPY_BOOLS = {"agent_slots": "closed", "memory_checkpoints": "pinned"}
_COPY_BATCH = 500
# The store_meta guard of migration 3, re-made after an import gave an empty store the source's id.
_META_TRIGGER = """CREATE TRIGGER store_meta_fixed BEFORE UPDATE ON store_meta
        WHEN NEW.key IS NOT OLD.key OR OLD.key = 'store_id'
            OR (OLD.key = 'retention_floor' AND (typeof(NEW.value) <> 'integer' OR NEW.value < OLD.value))
        BEGIN SELECT RAISE(ABORT, 'the store id never changes and the retention floor only rises'); END"""


def _last_seq(conn: sqlite3.Connection) -> int:
    """The highest event seq ever taken (AUTOINCREMENT's record; 0 before the first event)."""
    row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'events'").fetchone()
    return int(row[0]) if row is not None else 0


def open_sqlite(url: str, clock: Clock | None = None) -> Store:
    """One SQLite file, created (not its directory) if missing: the embedded default."""
    path = sqlite_path(url)
    assert path is not None, "only sqlite: URLs and bare paths resolve to this opener"
    if str(path) in ("", "/"):
        raise InputError("store", f"the store URL {url!r} names no file", code="store_url_invalid")
    if not path.parent.is_dir():
        raise InputError(
            "store",
            f"the directory of the store file does not exist: {path.parent}",
            code="store_url_invalid",
            path=str(path),
        )
    return SQLiteStore(path, clock=clock)
