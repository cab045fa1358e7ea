"""The embedded default store: one SQLite file, WAL, every write a ``BEGIN IMMEDIATE`` transaction.

Durability: ``synchronous=FULL`` in WAL mode, so an acknowledged commit survives a crash of the
process and of the machine. Writers serialize on SQLite's write lock, and wait for it in arrival
order: a FIFO queue of kernel byte-range locks in a lock file beside the database
(``runner.store.writelock``) stands in front of ``BEGIN IMMEDIATE``, so waiters sleep in the kernel
and the next in line is woken at each release (SQLite's own waits poll, and a writer that commits
and begins again keeps winning while the sleepers starve). Behind the queue stays SQLite's own
handling, for programs that write the file without our lock file: a short busy timeout plus bounded
retries with full jitter (a random sleep below an exponentially growing cap). Queue and retries
share one busy budget (``busy_deadline``); ``store_busy`` reports it and the time waited.

The schema is versioned in ``PRAGMA user_version`` and migrated forward on open; a database whose
version is newer than this code knows is refused rather than misread. The file is created whole
and recognised before anything is written to it (``runner.store.sqlite_file``): an empty, damaged
or foreign file is refused, never re-initialised; so is a row whose JSON cannot be decoded.
"""

from __future__ import annotations

import json
import os
import random
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from runner.context import Event, Instance, format_time
from runner.errors import ConflictError, CorralError, StoreBusyError, StoreCorruptError, StoreVersionError
from runner.log import get_logger
from runner.store.abc import Clock, Reader, Store, Transaction
from runner.store.sqlite_file import APPLICATION_ID, check_header, corruption_refused, create_exclusive, recognise
from runner.store.writelock import Place, QueueTimeout, WriteQueue

logger = get_logger(__name__)  # imports logging only to log (cold start)

# Each entry migrates the schema from version i to i + 1; never edit one that has shipped. One
# version number covers the whole file: the ``agent_slots`` table belongs to the process host's
# slot port (``runner.agents.sqlite_slots``), which keeps its rows in this database so a slot's
# compare-and-set and the engine's effect gate commit in one transaction; its migrations go here too.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE instances (
        id          TEXT PRIMARY KEY,
        machine     TEXT NOT NULL,
        state       TEXT NOT NULL,
        version     INTEGER NOT NULL CHECK (version > 0),
        data        TEXT NOT NULL,
        created_at  TEXT NOT NULL,
        updated_at  TEXT NOT NULL
    );
    CREATE INDEX instances_by_machine_state ON instances (machine, state);
    CREATE TABLE events (
        seq          INTEGER PRIMARY KEY AUTOINCREMENT,
        instance_id  TEXT NOT NULL,
        machine      TEXT NOT NULL,
        trigger      TEXT NOT NULL,
        from_state   TEXT NOT NULL,
        to_state     TEXT NOT NULL,
        version      INTEGER NOT NULL,
        actor        TEXT NOT NULL,
        payload      TEXT NOT NULL,
        at           TEXT NOT NULL
    );
    CREATE INDEX events_by_instance ON events (instance_id, seq);
    CREATE TRIGGER events_no_update BEFORE UPDATE ON events
        BEGIN SELECT RAISE(ABORT, 'the event log is append-only'); END;
    CREATE TRIGGER events_no_delete BEFORE DELETE ON events
        BEGIN SELECT RAISE(ABORT, 'the event log is append-only'); END;
    """,
    """
    CREATE TABLE agent_slots (
        pane_id      TEXT PRIMARY KEY,
        number       INTEGER NOT NULL UNIQUE,
        name         TEXT NOT NULL,
        kind         TEXT NOT NULL,
        cwd          TEXT NOT NULL,
        status       TEXT NOT NULL,
        seq          INTEGER NOT NULL CHECK (seq >= 0),
        run          INTEGER,
        pid          INTEGER,
        exit_status  INTEGER,
        closed       INTEGER NOT NULL DEFAULT 0,
        options      TEXT NOT NULL DEFAULT '{}',
        dir          TEXT NOT NULL,
        created_at   TEXT NOT NULL,
        updated_at   TEXT NOT NULL
    );
    CREATE TABLE counters (
        name   TEXT PRIMARY KEY,
        value  INTEGER NOT NULL
    );
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)
# The tables each schema version has: an existing file missing one of its version's is damaged.
TABLES_BY_VERSION: dict[int, frozenset[str]] = {
    1: frozenset({"instances", "events"}),
    2: frozenset({"instances", "events", "agent_slots", "counters"}),
}

BUSY_TIMEOUT_MS = 20  # SQLite's own short wait before we take over with jittered retries
RETRY_BASE = 0.002
RETRY_CAP = 0.1

# One encoder for every row and event: json.dumps with options builds a new one per call.
encode_json = json.JSONEncoder(sort_keys=True, separators=(",", ":")).encode


def _wall_clock() -> datetime:
    return datetime.now(UTC)


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    text = str(exc).lower()
    return "locked" in text or "busy" in text


class _Reader(Reader):
    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self._conn = conn
        self._path = path

    def get(self, instance_id: str) -> Instance | None:
        row = self._conn.execute(
            "SELECT id, machine, state, version, data, created_at, updated_at FROM instances WHERE id = ?",
            (instance_id,),
        ).fetchone()
        return _instance(row, self._path) if row else None

    def find(self, machine: str, states: Iterable[str] | None = None) -> list[Instance]:
        sql = "SELECT id, machine, state, version, data, created_at, updated_at FROM instances WHERE machine = ?"
        args: list[Any] = [machine]
        if states is not None:
            wanted = list(states)
            sql += f" AND state IN ({', '.join('?' * len(wanted))})" if wanted else " AND 0"
            args += wanted
        return [_instance(row, self._path) for row in self._conn.execute(sql + " ORDER BY id", args)]


class _Transaction(_Reader, Transaction):
    def __init__(self, conn: sqlite3.Connection, path: Path, now: datetime) -> None:
        super().__init__(conn, path)
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
                raise ConflictError(
                    f"instance {instance.id!r} was created by someone else meanwhile",
                    instance=instance.id,
                    expected_version=0,
                ) from None
            return Instance(instance.id, instance.machine, state, 1, data, stamp, stamp)
        cursor = self._conn.execute(
            "UPDATE instances SET state = ?, version = version + 1, data = ?, updated_at = ?"
            " WHERE id = ? AND version = ?",
            (state, encoded, stamp, instance.id, instance.version),
        )
        if cursor.rowcount != 1:
            current = self.get(instance.id)
            raise ConflictError(
                f"instance {instance.id!r} changed underneath (expected version {instance.version}, "
                f"found {current.version if current else 'none'})",
                instance=instance.id,
                expected_version=instance.version,
                actual_version=current.version if current else None,
            )
        return Instance(instance.id, instance.machine, state, instance.version + 1, data, instance.created_at, stamp)

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
        return Event(
            seq,
            instance.id,
            instance.machine,
            trigger,
            from_state,
            instance.state,
            instance.version,
            actor,
            payload,
            at,
        )


def connection_of(view: Reader) -> tuple[sqlite3.Connection, Path]:
    """The connection (and file) under a snapshot or transaction of an :class:`SQLiteStore`.

    For a port whose own tables live in the same database (the process host's agent slots,
    ``runner.agents.sqlite_slots``): its statements run in that very snapshot or transaction, so they
    commit or roll back with the store's rows. Valid only while ``view`` is open.

    Raises:
        CorralError: ``view`` does not come from an SQLite store (a bug in whoever paired them).
    """
    if not isinstance(view, _Reader):
        raise CorralError(f"{type(view).__name__} is not a snapshot or transaction of an SQLite store")
    return view._conn, view._path


def decode_object(text: Any, path: Path, table: str, row_id: Any, column: str) -> dict[str, Any]:
    """One JSON object column of one row; a row that does not decode is ``store_corrupt``, by table and id.

    Public for the ports whose tables live in this database (``runner.agents.sqlite_slots``).
    """
    try:
        value = json.loads(text)
    except (TypeError, ValueError) as exc:  # ValueError covers JSONDecodeError and bad UTF-8
        why = f"{type(exc).__name__}: {exc}"
    else:
        if isinstance(value, dict):
            return value
        why = f"a JSON {type(value).__name__}, not an object"
    raise StoreCorruptError(
        f"the store {path} is damaged: {table} row {row_id!r} has an undecodable {column} column ({why}); "
        "restore the database from a backup",
        path=str(path),
        table=table,
        row=row_id,
        column=column,
    )


def _instance(row: tuple[Any, ...], path: Path) -> Instance:
    return Instance(
        row[0], row[1], row[2], row[3], decode_object(row[4], path, "instances", row[0], "data"), row[5], row[6]
    )


def _event(row: tuple[Any, ...], path: Path) -> Event:
    payload = decode_object(row[8], path, "events", row[0], "payload")
    return Event(row[0], row[1], row[2], row[3], row[4], row[5], row[6], row[7], payload, row[9])


class SQLiteStore(Store):
    """A store in one SQLite file.

    Args:
        path: the database file; its directory must exist.
        clock: the store's clock (tests inject one); defaults to the system's UTC time.
        busy_deadline: how long a writer waits for the write lock before ``store_busy``.
    """

    def __init__(self, path: str | Path, *, clock: Clock | None = None, busy_deadline: float = 15.0) -> None:
        self.path = Path(path).absolute()  # supervisors open it from the agent's cwd
        self.url = f"sqlite://{self.path}"
        self._clock = clock or _wall_clock
        self._deadline = busy_deadline
        self._lock = threading.RLock()  # one connection; transactions on it must not interleave
        self._writing = threading.local()  # depth of this thread's write transactions (a nested one skips the queue)
        self._queue: WriteQueue | None = None  # opened at the first write: readers never make a lock file
        self._queue_opened = False
        self._queue_guard = threading.Lock()
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
            raise CorralError(
                f"cannot open the SQLite store at {self.path}: {exc}", code="store_unavailable", path=str(self.path)
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
        """The whole current schema in a new (temporary) file: see ``sqlite_file.create_exclusive``."""
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("BEGIN IMMEDIATE")
        for script in MIGRATIONS:
            for statement in _statements(script):
                conn.execute(statement)
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
                    self._conn.execute(statement)
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
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise self._busy(time.monotonic() - started, tries) from None
                # Full jitter: a random sleep below an exponentially growing cap.
                time.sleep(min(remaining, random.uniform(0, min(RETRY_CAP, RETRY_BASE * 2**tries))))

    def _busy(self, waited: float, attempts: int) -> StoreBusyError:
        return StoreBusyError(
            f"the store {self.path} stayed locked: waited {waited:.1f} s of its {self._deadline:g} s busy budget "
            f"({attempts} attempts); nothing was written",
            path=str(self.path),
            attempts=attempts,
            budget_seconds=self._deadline,
            waited_seconds=round(waited, 3),
        )

    def _depth(self) -> int:
        return int(getattr(self._writing, "depth", 0))

    def _enter_queue(self, started: float) -> Place | None:
        """Our turn in the FIFO write queue (None: no queue, or this thread is already writing)."""
        if self._depth() > 0:
            return None  # a nested write reaches BEGIN IMMEDIATE, and SQLite refuses it as before
        if not self._queue_opened:
            with self._queue_guard:
                if not self._queue_opened:
                    self._queue = WriteQueue.open(self.path)  # None: SQLite's own busy handling alone
                    self._queue_opened = True
        if self._queue is None:
            return None
        try:
            return self._queue.acquire(started + self._deadline)
        except QueueTimeout as exc:
            raise self._busy(exc.waited, exc.attempts) from None
        except OSError as exc:
            raise CorralError(
                f"the write queue {self._queue.path} of the store failed: {exc}",
                code="store_unavailable",
                path=str(self.path),
            ) from None

    @contextmanager
    def _immediate(self) -> Iterator[None]:
        # Invariant: the queue is entered before the connection's lock is taken, so threads of this
        # process wait their turn in the kernel like other processes do, and readers are not held
        # up meanwhile; it is left after COMMIT or ROLLBACK, never inside the transaction.
        started = time.monotonic()
        place = self._enter_queue(started)
        self._writing.depth = self._depth() + 1
        try:
            with self._lock, corruption_refused(self.path):
                begin = lambda: self._conn.execute("BEGIN IMMEDIATE")  # noqa: E731 - reason: one statement, retried
                tries = place.attempts if place is not None else 0
                self._retry(begin, started=started, deadline=started + self._deadline, tries=tries)
                try:
                    yield
                except BaseException:
                    self._conn.execute("ROLLBACK")
                    raise
                try:
                    self._retry(lambda: self._conn.execute("COMMIT"))
                except BaseException:
                    if self._conn.in_transaction:
                        self._conn.execute("ROLLBACK")
                    raise
        finally:
            self._writing.depth -= 1
            if place is not None:
                self._queue.release(place)  # type: ignore[union-attr]  # reason: a place implies a queue

    @contextmanager
    def write(self) -> Iterator[Transaction]:
        with self._immediate():
            yield _Transaction(self._conn, self.path, self._clock())

    @contextmanager
    def read(self) -> Iterator[Reader]:
        with self._lock, corruption_refused(self.path):
            self._conn.execute("BEGIN")  # deferred: a snapshot from the first read on, no write lock
            try:
                yield _Reader(self._conn, self.path)
            finally:
                self._conn.execute("COMMIT")

    def now(self) -> datetime:
        return self._clock()

    def events(self, since: int = 0, limit: int | None = None, instance_id: str | None = None) -> list[Event]:
        sql = (
            "SELECT seq, instance_id, machine, trigger, from_state, to_state, version, actor, payload, at"
            " FROM events WHERE seq > ?"
        )
        args: list[Any] = [since]
        if instance_id is not None:
            sql += " AND instance_id = ?"
            args.append(instance_id)
        sql += " ORDER BY seq"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(limit)
        with self._lock, corruption_refused(self.path):
            return [_event(row, self.path) for row in self._conn.execute(sql, args)]

    def wait_events(self, since: int, timeout: float) -> list[Event]:
        # Blocks its thread up to ``timeout`` (like ``_retry``): async callers run it in a worker thread.
        # SQLite has no notifications across processes; PRAGMA data_version changes whenever another
        # connection commits, so polling it is a cheap check that reads no table.
        deadline = time.monotonic() + timeout
        seen = None
        while True:
            with self._lock:
                version = self._conn.execute("PRAGMA data_version").fetchone()[0]
            if version != seen:
                seen = version
                found = self.events(since)
                if found:
                    return found
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return []
            time.sleep(min(0.05, remaining))

    def data_version(self) -> tuple[int, int]:
        """A probe of "did anything commit?" that reads no table and opens no transaction (issue 13:
        the process host's waits take it every tick): ``PRAGMA data_version``, which moves when another
        connection (any process) has committed since this one last asked, with this connection's own
        ``total_changes`` (its own commits do not move the pragma). Equal values: no commit between."""
        with self._lock, corruption_refused(self.path):
            return int(self._conn.execute("PRAGMA data_version").fetchone()[0]), self._conn.total_changes

    def info(self) -> dict[str, Any]:
        with self._lock, corruption_refused(self.path):
            version = self._conn.execute("PRAGMA user_version").fetchone()[0]
            mode = self._conn.execute("PRAGMA journal_mode").fetchone()[0]
        return {"adapter": "sqlite", "path": str(self.path), "schema_version": version, "journal_mode": mode}

    def integrity(self) -> str:
        """SQLite's own ``integrity_check`` verdict (``ok`` when the file is sound)."""
        with self._lock:
            return str(self._conn.execute("PRAGMA integrity_check").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._conn.close()
            if self._queue is not None:
                self._queue.close()


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
