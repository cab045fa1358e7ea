"""The embedded default store: one SQLite file, WAL, every write a ``BEGIN IMMEDIATE`` transaction.

Durability: ``synchronous=FULL`` in WAL mode, so an acknowledged commit survives a crash of the
process and of the machine. Writers serialize on SQLite's write lock. Waiting for it uses a short
busy timeout plus bounded retries with full jitter (sleep a random time below an exponentially
growing cap) up to a deadline: a long busy handler alone lets an unlucky writer starve while others
keep winning, and then fail after the same wait as everyone else.

The schema is versioned in ``PRAGMA user_version`` and migrated forward on open; a database whose
version is newer than this code knows is refused rather than misread. The file is created whole
and recognised before anything is written to it (``runner.store.sqlite_file``): an empty, damaged
or foreign file is refused, never re-initialised; so is a row whose JSON cannot be decoded.
"""

from __future__ import annotations

import json
import logging
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
from runner.errors import (
    ConflictError,
    CorralError,
    InputError,
    StoreBusyError,
    StoreCorruptError,
    StoreVersionError,
)
from runner.store.abc import Clock, Reader, Store, Transaction
from runner.store.sqlite_file import APPLICATION_ID, check_header, corruption_refused, create_exclusive, recognise

logger = logging.getLogger(__name__)

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
    # issue 13: paged listings. Keyset pages of one machine (``WHERE machine = ? AND id > ? ORDER BY
    # id LIMIT ?``) read only the page from this index; (machine, state) stays for counts and states.
    """
    CREATE INDEX instances_by_machine_id ON instances (machine, id);
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)
# The tables each schema version has: an existing file missing one of its version's is damaged.
TABLES_BY_VERSION: dict[int, frozenset[str]] = {
    1: frozenset({"instances", "events"}),
    2: frozenset({"instances", "events", "agent_slots", "counters"}),
    3: frozenset({"instances", "events", "agent_slots", "counters"}),  # issue 13: paged listings (an index)
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

    def find(
        self,
        machine: str,
        states: Iterable[str] | None = None,
        *,
        after: str | None = None,
        limit: int | None = None,
    ) -> list[Instance]:
        check_page(after, limit)
        sql = "SELECT id, machine, state, version, data, created_at, updated_at FROM instances WHERE machine = ?"
        args: list[Any] = [machine]
        if states is not None:
            wanted = list(states)
            sql += f" AND state IN ({', '.join('?' * len(wanted))})" if wanted else " AND 0"
            args += wanted
        if after is not None:
            # TEXT compares with BINARY collation: UTF-8 bytes, i.e. code point order, as Python's str.
            sql += " AND id > ?"
            args.append(after)
        sql += " ORDER BY id"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(limit)
        return [_instance(row, self._path) for row in self._conn.execute(sql, args)]

    def counts(self, machine: str | None = None) -> dict[tuple[str, str], int]:
        # A covering scan of instances_by_machine_state: no row, no data column is read.
        sql = "SELECT machine, state, COUNT(*) FROM instances"
        args: list[Any] = []
        if machine is not None:
            sql += " WHERE machine = ?"
            args.append(machine)
        rows = self._conn.execute(sql + " GROUP BY machine, state", args)
        return {(str(m), str(s)): int(n) for m, s, n in rows}


class _Transaction(_Reader, Transaction):
    def __init__(self, conn: sqlite3.Connection, path: Path, now: datetime) -> None:
        super().__init__(conn, path)
        self.now = now
        self.stamp = format_time(now)  # every row and event of one transaction carries the same time

    def put(self, instance: Instance, state: str, data: Mapping[str, Any]) -> Instance:
        stamp = self.stamp
        encoded = encode_json(dict(data))
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
            return Instance(instance.id, instance.machine, state, 1, dict(data), stamp, stamp)
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
        return Instance(
            instance.id, instance.machine, state, instance.version + 1, dict(data), instance.created_at, stamp
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
        encoded = encode_json(dict(payload))
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
            dict(payload),
            at,
        )


def check_page(after: str | None, limit: int | None) -> None:
    """The paging arguments of :meth:`Reader.find`, refused alike by every adapter.

    Public so other adapters (PostgreSQL) check them the same way.

    Raises:
        InputError: ``input_invalid`` for a ``limit`` that is not an integer >= 1, or an ``after``
            that is not a string (a caller's bug: surfaces validate their inputs first).
    """
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise InputError("limit", f"{limit!r} is not an integer >= 1")
    if after is not None and not isinstance(after, str):
        raise InputError("after", f"{after!r} is not an instance id")


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

    def _retry(self, attempt: Callable[[], Any]) -> Any:
        """Run ``attempt`` until SQLite stops answering busy/locked, or ``store_busy`` at the deadline.

        This blocks its thread (``time.sleep`` between attempts, up to ``busy_deadline`` seconds in
        all), as every method of this synchronous store may. That is allowed only because the store
        is synchronous by contract: async code must call it in a worker thread
        (``anyio.to_thread.run_sync``, as the process host's waits do), so a busy store stalls that
        thread, never an event loop.
        """
        deadline = time.monotonic() + self._deadline
        tries = 0
        while True:
            try:
                return attempt()
            except sqlite3.OperationalError as exc:
                if not _is_busy(exc):
                    raise
                tries += 1
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise StoreBusyError(
                        f"the store {self.path} stayed locked for {self._deadline:.0f} s ({tries} attempts)",
                        path=str(self.path),
                        attempts=tries,
                    ) from None
                # Full jitter: a random sleep below an exponentially growing cap.
                time.sleep(min(remaining, random.uniform(0, min(RETRY_CAP, RETRY_BASE * 2**tries))))

    @contextmanager
    def _immediate(self) -> Iterator[None]:
        with self._lock, corruption_refused(self.path):
            self._retry(lambda: self._conn.execute("BEGIN IMMEDIATE"))
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
