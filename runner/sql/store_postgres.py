"""The shared store: one PostgreSQL schema (default ``corral``), reached with psycopg 3.

Coordinators on several machines share it with the guarantees the SQLite store gives on one.

**Writers.** Every writing transaction runs under READ COMMITTED and begins, in its first round
trip, by taking one exclusive transaction-level advisory lock of its schema
(``pg_advisory_xact_lock(CLASS_WRITE, key(schema))``), held to commit: the writers of one store run
one after another, exactly as ``BEGIN IMMEDIATE`` makes SQLite's do, so every rule that spans rows
(one active lease per controller, lane conflicts by claim overlap, one unresolved receipt per
target, plan id idempotency, counters) is checked and written with nothing else moving, and the
port's promise (:class:`runner.store.abc.Transaction`: "serialized against every other writer of
the same store") holds as written, which the conformance suite tests (a writer waits for another
writer of a different row, and gives up with ``store_busy`` at its deadline). PostgreSQL grants a
contended advisory lock in arrival order, so this is also the FIFO queue SQLite needs a lock file
for. Statements after the lock see every commit before it (READ COMMITTED takes a snapshot per
statement), so a transaction reads the store as the previous writer left it. Compare-and-set is
still ``UPDATE … WHERE id = %s AND version = %s`` (0 rows: ``version_conflict``), which keeps it
correct without the lock too (tools that write the tables by hand, a future finer lock).

Why not finer locks (per machine, per claim space, shared for writers and exclusive for predicate
readers) so that writers of different rows run in parallel: the port promises serialization of
whole transactions, which callers rely on beyond the predicates we could name (a ``get`` of a row
that does not exist yet, then an insert; reads of several instances in any order, which under
per-key locks deadlock where SQLite simply queues). Finer locking is a change of the port's
contract and of the conformance suite, not of this adapter alone, and measured it buys little: the
commit-ordered event number below is one row every writer updates and holds to its commit, so
writers of different rows would still commit one at a time (``docs/postgres.md``, ``bench/postgres.py``).

**The event log is commit-ordered and gap-free.** A sequence would not give that (its values are
taken before commit, so transactions commit out of order and a tailing reader could see seq 8 and
later seq 7 appear). Here ``seq`` is ``store_meta.last_seq + 1``, updated in the writing transaction,
under the write lock: the lock is released only after the commit is visible, so every event with
a lower seq was committed (visible) before the next writer could take its number, and a rollback
rolls the number back with it (no holes). A reader that has seen seq N never later sees a lower
one appear.

**Waits are notified.** A writing transaction that changes an instance or an agent slot sends
``NOTIFY`` on the store's channel (``corral_<schema>``) just before ``COMMIT``, in the same round
trip; PostgreSQL delivers it on commit (never for a rollback). Payloads are small (``i <id>`` /
``s <pane>``, at most 16 per transaction, ids cut to 200 characters, far under the 8,000-byte limit).
:meth:`PostgresStore.wait_events` listens on its own connection (a background thread that counts
notifications), re-reads the log after every wake-up, and polls every :data:`FALLBACK_POLL` seconds
in case a notification was lost (nobody listened, the listening connection broke).

**Connection loss** is ``store_unavailable`` (exit 5), naming the server (host, port, database,
schema, never a password). Nothing is re-sent blindly: a ``COMMIT`` whose answer was lost may have
committed, so the error says ``outcome: "unknown"`` and the caller re-reads; the next transaction
reconnects.

**Schema.** Versioned in ``schema_version`` and migrated forward on open under an advisory lock
(:data:`MIGRATIONS`, one entry per version, never edited once shipped); a schema newer than this code
is refused with ``store_too_new``, as for SQLite; a schema with tables corral did not create is
``store_foreign``. JSON lives in ``text`` columns, encoded as the SQLite store encodes it (``jsonb``
would reorder keys and refuse strings SQLite keeps, such as a lone surrogate escape), and a row that
does not decode is ``store_corrupt``. Ids, scopes and keys are ``COLLATE "C"``: code point order,
as Python compares ``str``, for keyset pages and the claims' range probes.

The password never needs to be in the URL: libpq reads ``PGPASSFILE`` (``~/.pgpass``),
``PGSERVICE`` (``~/.pg_service.conf``) and the other ``PG*`` variables.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar, cast

from runner.context import Claim, Event, Instance, format_time
from runner.errors import (
    CorralError,
    InputError,
    RefusedError,
    StoreBusyError,
    StoreCorruptError,
    StoreForeignError,
    StoreUnavailableError,
    StoreVersionError,
)
from runner.log import get_logger
from runner.sql import store_sql as shared
from runner.sql.store_postgres_schema import MIGRATIONS, SCHEMA_VERSION, Target, channel_of, lock_key, statements
from runner.sql.store_sql import Dialect
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
    import psycopg

    from runner.store.mesh import MeshStore

logger = get_logger(__name__)


CLASS_WRITE = 0x636F7272  # "corr": the advisory lock class of every store's write lock
CLASS_MIGRATE = 0x636F7273  # the lock under which a schema is created or migrated
FALLBACK_POLL = 1.0  # seconds between re-reads of a wait when no notification came
LISTEN_TICK = 0.1  # how often the listening thread looks up from its socket (its stop latency)
_IDLE = 0  # psycopg.pq.TransactionStatus.IDLE, without importing psycopg at module load
_NOTIFY_MAX = 16  # notifications per transaction; more changes send one "*"
_NOTIFY_ID = 200  # characters of an id in a payload

encode_json = json.JSONEncoder(sort_keys=True, separators=(",", ":")).encode


def _wall_clock() -> datetime:
    return datetime.now(UTC)


def _decode(text: Any, where: str, table: str, row_id: Any, column: str) -> dict[str, Any]:
    """One JSON object column of one row; a row that does not decode is ``store_corrupt``."""
    return shared.decode_object(text, where, table, row_id, column, server=where)


class _SQL(Dialect):
    """The store port's shared SQL (:mod:`runner.sql.store_sql`) as PostgreSQL says it."""

    placeholder = "%s"
    part_order = "ord"  # a bigserial: the parts' first-write order (an upsert keeps it)

    __slots__ = ("_store",)

    def __init__(self, conn: psycopg.Connection[Any], store: PostgresStore) -> None:
        super().__init__(conn)
        self._store = store

    def one_of(self, column: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
        return f"{column} = ANY(?)", [list(values)]

    def decode(self, text: Any, table: str, row_id: Any, column: str) -> dict[str, Any]:
        return _decode(text, self._store.target.described, table, row_id, column)

    def floor(self) -> int:
        row = self.conn.execute("SELECT retention_floor FROM store_meta").fetchone()
        if row is None:
            target = self._store.target
            raise StoreCorruptError(
                f"the store {target.described} is damaged: store_meta has no row; restore it from a backup",
                table="store_meta",
                **target.details(),
            )
        return int(row[0])

    def raise_floor(self, upto: int) -> None:
        self.conn.execute("UPDATE store_meta SET retention_floor = %s", (upto,))


class _Reader(shared.SQLReader):
    def __init__(self, store: PostgresStore, conn: psycopg.Connection[Any]) -> None:
        self._store = store
        self._conn = conn
        self._sql = _SQL(conn, store)

    def get(self, instance_id: str) -> Instance | None:
        row = self._conn.execute(shared.INSTANCE + " WHERE id = %s", (instance_id,)).fetchone()
        return None if row is None else self._sql.instance(row)

    def overlapping_claims(
        self,
        space: str | None,
        scopes: Iterable[str],
        kinds: Iterable[str] | None = None,
        states: Iterable[str] | None = None,
    ) -> list[Claim]:
        # One equality probe of the primary key (space, scope, …) per scope and ancestor, one range
        # probe per scope for what lies under it; "C" collation makes '/' < ... < '0' byte order.
        sql = (
            "SELECT m.instance_id, m.space, m.kind, m.scope FROM ("
            " SELECT c.instance_id, c.space, c.kind, c.scope FROM unnest(%(exact)s::text[]) AS p(v)"
            "  JOIN claims AS c ON c.space = %(space)s AND c.scope = p.v"
            " UNION ALL"
            " SELECT c.instance_id, c.space, c.kind, c.scope FROM unnest(%(wanted)s::text[]) AS p(v)"
            "  JOIN claims AS c ON c.space = %(space)s AND c.scope > (p.v || '/') COLLATE \"C\""
            "  AND c.scope < (p.v || '0') COLLATE \"C\""
            ") AS m"
        )
        args: dict[str, Any] = {}
        if states is not None:
            sql += " JOIN instances AS i ON i.id = m.instance_id AND i.state = ANY(%(states)s)"
            args["states"] = list(states)
        if kinds is not None:
            sql += " WHERE m.kind = ANY(%(kinds)s)"
            args["kinds"] = list(kinds)

        def probe(one: str, exact: list[str], wanted: list[str]) -> Any:
            return self._conn.execute(sql, {**args, "exact": exact, "wanted": wanted, "space": one})

        return self.probe_claims(space, scopes, probe)


class _Transaction(_Reader, Transaction):
    def __init__(self, store: PostgresStore, conn: psycopg.Connection[Any], now: datetime) -> None:
        super().__init__(store, conn)
        self.now = now
        self.stamp = format_time(now)  # every row and event of one transaction carries the same time
        self.notes: list[str] = []  # NOTIFY payloads, sent with the COMMIT

    def note(self, payload: str) -> None:
        """Notify listeners of this change when (and only if) the transaction commits."""
        if payload not in self.notes:
            self.notes.append(payload)

    def put(self, instance: Instance, state: str, data: Mapping[str, Any]) -> Instance:
        stamp = self.stamp
        data = dict(data)  # the instance keeps its own copy of what was written
        encoded = encode_json(data)
        self.note(f"i {instance.id[:_NOTIFY_ID]}")
        if instance.version == 0:
            # ON CONFLICT DO NOTHING: a taken id is a conflict without aborting the transaction.
            row = self._conn.execute(
                "INSERT INTO instances (id, machine, state, version, data, created_at, updated_at)"
                " VALUES (%s, %s, %s, 1, %s, %s, %s) ON CONFLICT (id) DO NOTHING RETURNING 1",
                (instance.id, instance.machine, state, encoded, stamp, stamp),
            ).fetchone()
            if row is None:
                raise shared.created_elsewhere(instance)
            return Instance(instance.id, instance.machine, state, 1, data, stamp, stamp)
        shared.compare_and_set(self._sql, self, instance, state, encoded, stamp)
        return Instance(instance.id, instance.machine, state, instance.version + 1, data, instance.created_at, stamp)

    def put_part(self, instance_id: str, key: str, value: Mapping[str, Any]) -> None:
        shared.put_part(self._sql, instance_id, key, encode_json(dict(value)))

    def set_claims(self, instance_id: str, claims: Iterable[tuple[str, str, str]]) -> None:
        rows = sorted(set(claims))
        self._conn.execute("DELETE FROM claims WHERE instance_id = %s", (instance_id,))
        if rows:
            self._conn.execute(
                "INSERT INTO claims (space, kind, scope, instance_id)"
                " SELECT s, k, c, %s FROM unnest(%s::text[], %s::text[], %s::text[]) AS t(s, k, c)"
                " ON CONFLICT DO NOTHING",
                (instance_id, [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]),
            )

    def next_number(self, counter: str) -> int:
        row = self._conn.execute(
            "INSERT INTO counters (name, value) VALUES (%s, 1)"
            " ON CONFLICT (name) DO UPDATE SET value = counters.value + 1 RETURNING value",
            (counter,),
        ).fetchone()
        assert row is not None
        return int(row[0])

    def append(
        self, instance: Instance, trigger: str, from_state: str, actor: str, payload: Mapping[str, Any]
    ) -> Event:
        at = self.stamp
        payload = dict(payload)  # the event keeps its own copy of what was written
        # Invariant: seq is last_seq + 1, taken under the write lock and rolled back with the
        # transaction: commit order is seq order and no number is skipped (module docstring).
        row = self._conn.execute(
            "WITH s AS (UPDATE store_meta SET last_seq = last_seq + 1 RETURNING last_seq)"
            " INSERT INTO events"
            " (seq, instance_id, machine, trigger, from_state, to_state, version, actor, payload, at)"
            " SELECT s.last_seq, %s, %s, %s, %s, %s, %s, %s, %s, %s FROM s RETURNING seq",
            (
                instance.id,
                instance.machine,
                trigger,
                from_state,
                instance.state,
                instance.version,
                actor,
                encode_json(payload),
                at,
            ),
        ).fetchone()
        assert row is not None
        self.note(f"i {instance.id[:_NOTIFY_ID]}")
        return shared.appended(int(row[0]), instance, trigger, from_state, actor, payload, at)


class _Listener:
    """A connection that LISTENs on the store's channel, in a thread counting what arrives.

    Waiters read :attr:`generation` before they look at the store and wait for it to change: a
    notification between their read and their wait is never missed.
    """

    def __init__(self, store: PostgresStore) -> None:
        self._store = store
        self._changed = threading.Condition()
        self.generation = 0
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"corral-listen-{store.target.schema}", daemon=True)
        self._thread.start()
        self._ready.wait(10)

    def _run(self) -> None:
        import psycopg
        from psycopg import sql

        while not self._stop.is_set():
            conn: psycopg.Connection[Any] | None = None
            try:
                conn = psycopg.connect(self._store.target.conninfo, autocommit=True, application_name="corral-listen")
                conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self._store.channel)))
                self._bump()  # (re)listening: whatever was missed meanwhile is re-read
                self._ready.set()
                while not self._stop.is_set():
                    for _ in conn.notifies(timeout=LISTEN_TICK):
                        self._bump()
            except psycopg.Error as exc:
                self._ready.set()  # waiters fall back to polling meanwhile
                logger.info("listening on %s failed (%s); retrying", self._store.target.described, exc)
                self._stop.wait(FALLBACK_POLL)
            finally:
                if conn is not None:
                    conn.close()

    def _bump(self) -> None:
        with self._changed:
            self.generation += 1
            self._changed.notify_all()

    def wait(self, generation: int, timeout: float) -> None:
        """Until a notification arrives after ``generation`` was read, or ``timeout`` s."""
        with self._changed:
            self._changed.wait_for(lambda: self.generation != generation, timeout)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)


class PostgresStore(Store):
    """A store in one schema of a PostgreSQL database.

    Args:
        url: ``postgresql://[user@]host[:port]/database[?schema=NAME&…libpq parameters]``.
        clock: the store's clock (tests inject one); by default the server's: every coordinator,
            on whatever machine and with whatever clock, judges expiry by the same time.
        busy_deadline: how long a writer waits for the write lock before ``store_busy``.
    """

    backend: ClassVar[str] = "postgresql"

    def __init__(self, url: str, *, clock: Clock | None = None, busy_deadline: float = 15.0) -> None:
        self.target = Target(url)
        self.url = url
        self.channel = channel_of(self.target.schema)
        self._clock = clock or _wall_clock
        self._server_time = clock is None
        self._began_at: datetime | None = None  # the server's time at the last write's BEGIN
        self._deadline = busy_deadline
        self._key = lock_key(self.target.schema)
        self._lock = threading.RLock()  # one connection; transactions on it must not interleave
        self._in_tx = False
        self._listener: _Listener | None = None
        self._listener_guard = threading.Lock()
        self._conn: psycopg.Connection[Any] | None = None
        self._connection()
        try:
            self._setup()
        except BaseException:
            self.close()
            raise

    # --- connections ----------------------------------------------------------------------------

    def _unavailable(self, exc: BaseException, *, committing: bool = False) -> StoreUnavailableError:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if committing:
            return StoreUnavailableError(
                f"the connection to the store {self.target.described} was lost while committing: the "
                f"transaction may have committed; re-read before retrying ({reason})",
                outcome="unknown",
                **self.target.details(),
            )
        return StoreUnavailableError(
            f"cannot reach the store {self.target.described}: {reason}", **self.target.details()
        )

    def _connection(self) -> psycopg.Connection[Any]:
        """The store's connection, (re)made if there is none or it broke."""
        conn = self._conn
        if conn is not None and not conn.closed and not conn.broken:
            return conn
        import psycopg  # only when a PostgreSQL store is opened

        if conn is not None:
            conn.close()
            self._conn = None
        try:
            conn = psycopg.connect(self.target.conninfo, autocommit=True, application_name="corral")
        except psycopg.OperationalError as exc:
            raise self._unavailable(exc) from None
        try:
            conn.execute("SELECT set_config('search_path', %s, false)", (f'"{self.target.schema}"',))
        except psycopg.OperationalError as exc:
            conn.close()  # never left for the garbage collector: the server went away just after connecting
            raise self._unavailable(exc) from None
        except BaseException:
            conn.close()  # any other failure (an interrupt) leaves no open connection behind either
            raise
        self._conn = conn
        return conn

    def _begun(self, begin: Callable[[psycopg.Connection[Any]], object]) -> psycopg.Connection[Any]:
        """The connection with ``begin`` run on it; a connection found broken at BEGIN (the server
        restarted, an idle connection was cut) is made again once: nothing had been sent, so
        retrying is safe. A connection that breaks later, inside the transaction, is never retried."""
        import psycopg

        conn = self._connection()
        try:
            begin(conn)
        except psycopg.OperationalError:
            if not (conn.broken or conn.closed):
                raise
            logger.info("the connection to %s was lost; reconnecting", self.target.described)
            conn = self._connection()
            begin(conn)
        return conn

    @contextmanager
    def _errors(self, *, committing: bool = False) -> Iterator[None]:
        """psycopg's errors as corral's: a broken connection is ``store_unavailable``."""
        import psycopg

        try:
            yield
        except psycopg.Error as exc:
            conn = self._conn
            if conn is None or conn.broken or conn.closed or isinstance(exc, psycopg.InterfaceError):
                raise self._unavailable(exc, committing=committing) from None
            raise CorralError(
                f"the store {self.target.described} failed: {exc.sqlstate} {str(exc).strip()}",
                sqlstate=exc.sqlstate,
                **self.target.details(),
            ) from None

    # --- setup ----------------------------------------------------------------------------------

    def _version(self, conn: psycopg.Connection[Any]) -> int | None:
        """The schema's version: None if the schema has no corral tables at all."""
        tables = {
            str(row[0])
            for row in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (self.target.schema,)
            )
        }
        if not tables:
            return None
        if "schema_version" not in tables:
            raise StoreForeignError(
                f"the schema {self.target.schema} of {self.target.server} holds tables corral did not create "
                f"({', '.join(sorted(tables)[:8])}); name another schema with ?schema=NAME",
                tables=sorted(tables),
                **self.target.details(),
            )
        row = conn.execute("SELECT version FROM schema_version").fetchone()
        if row is None:
            raise StoreCorruptError(
                f"the store {self.target.described} is damaged: schema_version has no row",
                table="schema_version",
                **self.target.details(),
            )
        return int(row[0])

    def _too_new(self, version: int) -> StoreVersionError:
        return StoreVersionError(
            f"the store {self.target.described} has schema version {version}, newer than this corral "
            f"understands ({SCHEMA_VERSION}); upgrade corral",
            schema_version=version,
            supported=SCHEMA_VERSION,
            **self.target.details(),
        )

    def _setup(self) -> None:
        from psycopg import sql

        with self._lock, self._errors():
            conn = self._connection()
            version = self._version(conn)
            if version is not None and version > SCHEMA_VERSION:
                raise self._too_new(version)
            if version == SCHEMA_VERSION:
                return
            conn.execute("BEGIN")
            try:
                conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", (CLASS_MIGRATE, self._key))
                conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.target.schema)))
                current = self._version(conn) or 0  # again, under the lock: another process may have migrated
                if current > SCHEMA_VERSION:
                    raise self._too_new(current)
                for target in range(current + 1, SCHEMA_VERSION + 1):
                    logger.info("migrating %s to schema version %d", self.target.described, target)
                    for statement in statements(MIGRATIONS[target - 1]):
                        conn.execute(statement.encode())  # no parameters: '%' in the DDL stays itself
                    if target == 1:
                        conn.execute("INSERT INTO schema_version (version) VALUES (1)")
                    else:
                        conn.execute("UPDATE schema_version SET version = %s", (target,))
                conn.execute("COMMIT")
            except BaseException:
                if not conn.broken and not conn.closed:
                    conn.execute("ROLLBACK")
                raise

    # --- transactions ---------------------------------------------------------------------------

    def _begin_write(self, conn: psycopg.Connection[Any]) -> None:
        """BEGIN and the write lock, waited for with the whole remaining busy budget as lock_timeout.

        One wait, not slices of a growing timeout: PostgreSQL grants a contended advisory lock in
        arrival order, and a writer that gave up a slice would rejoin the queue at its end (with 8
        writers a transaction's wait often exceeds a short first slice, and the churn cut throughput
        to a quarter and sent p99 to 300 ms in bench/postgres.py)."""
        import psycopg

        started = time.monotonic()
        deadline = started + self._deadline
        attempts = 0
        while True:
            attempts += 1
            remaining = deadline - time.monotonic()
            wait_ms = max(1, int(remaining * 1000))
            try:
                # One round trip: a simple query of four statements (no parameters: all literals);
                # the lock's timeout is the budget's, every later statement waits as long as it must.
                # With the server's clock, a fifth statement reads its time once the lock is held (so
                # times follow commit order), in the same round trip.
                clock = "; SELECT clock_timestamp()" if self._server_time else ""
                cur = conn.execute(
                    f"BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL lock_timeout = {wait_ms};"
                    f" SELECT pg_advisory_xact_lock({CLASS_WRITE}, {self._key}); SET LOCAL lock_timeout = 0"
                    f"{clock}".encode()
                )
                if self._server_time:
                    while cur.nextset():
                        pass
                    row = cur.fetchone()
                    self._began_at = None if row is None else row[0].astimezone(UTC)
                return
            except psycopg.errors.LockNotAvailable:
                conn.execute("ROLLBACK")
            if time.monotonic() >= deadline:
                waited = time.monotonic() - started
                raise StoreBusyError(
                    f"the store {self.target.described} stayed locked: waited {waited:.1f} s of its "
                    f"{self._deadline:g} s busy budget ({attempts} attempts); nothing was written",
                    attempts=attempts,
                    budget_seconds=self._deadline,
                    waited_seconds=round(waited, 3),
                    **self.target.details(),
                )

    @contextmanager
    def write(self) -> Iterator[Transaction]:
        import psycopg
        from psycopg import sql

        with self._lock:
            if self._in_tx:
                raise CorralError(f"a write inside a transaction of the store {self.target.described} (a bug)")
            with self._errors():
                conn = self._begun(self._begin_write)
            self._in_tx = True
            try:
                tx = _Transaction(self, conn, self._began_at if self._server_time and self._began_at else self._clock())
                try:
                    with self._errors():
                        yield tx
                except BaseException:
                    if not conn.broken and not conn.closed:
                        with self._errors():
                            conn.execute("ROLLBACK")
                    raise
                commit: sql.SQL | sql.Composed = sql.SQL("COMMIT")
                if tx.notes:
                    # The notifications and the COMMIT in one round trip; delivered only if it commits.
                    notes = tx.notes if len(tx.notes) <= _NOTIFY_MAX else ["*"]
                    channel = sql.Identifier(self.channel)
                    commit = sql.SQL(" ").join(
                        [sql.SQL("NOTIFY {}, {};").format(channel, sql.Literal(note)) for note in notes] + [commit]
                    )
                with self._errors(committing=True):
                    try:
                        conn.execute(commit)
                    except psycopg.errors.Error:
                        if not conn.broken and not conn.closed and conn.info.transaction_status != _IDLE:
                            conn.execute("ROLLBACK")
                        raise
            finally:
                self._in_tx = False

    @contextmanager
    def read(self) -> Iterator[Reader]:
        with self._lock, self._errors():
            if self._in_tx:  # inside this thread's write: its own view
                yield _Reader(self, self._connection())
                return
            conn = self._begun(lambda c: c.execute(b"BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"))
            try:
                yield _Reader(self, conn)
            finally:
                if not conn.broken and not conn.closed:
                    conn.execute("COMMIT")

    def now(self) -> datetime:
        """The server's time (one round trip), or the injected clock's."""
        if not self._server_time:
            return self._clock()
        with self._lock, self._errors():
            row = self._connection().execute(b"SELECT clock_timestamp()").fetchone()
        assert row is not None
        return cast("datetime", row[0]).astimezone(UTC)

    def _sql_of(self, view: Reader) -> _SQL:
        """The shared SQL on ``view``'s connection (a snapshot or transaction of this store)."""
        return view._sql  # type: ignore[attr-defined, no-any-return]  # reason: this module's own view

    def events(self, since: int = 0, limit: int | None = None, instance_id: str | None = None) -> list[Event]:
        with self.read() as reader:  # the floor and the rows from one snapshot: no silent hole
            sql = self._sql_of(reader)
            rows = shared.event_rows(sql, since, limit, instance_id)
        return [sql.event(row) for row in rows]

    def _listening(self) -> _Listener:
        with self._listener_guard:
            if self._listener is None:
                self._listener = _Listener(self)
            return self._listener

    def wait_events(
        self, since: int, timeout: float, limit: int | None = None, *, poll: float | None = None
    ) -> list[Event]:  # (notified of commits: ``poll`` is not needed)
        # Blocks its thread up to ``timeout``: async callers run it in a worker thread.
        deadline = time.monotonic() + timeout
        listener = self._listening()
        while True:
            generation = listener.generation  # before the read: a commit after it wakes the wait
            found = self.events(since, limit)
            if found:
                return found
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return []
            listener.wait(generation, min(FALLBACK_POLL, remaining))

    def retention_floor(self) -> int:
        with self.read() as reader:
            return self._sql_of(reader).floor()

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
        with self.read() as reader:
            floor, target, count = shared.prune_plan(self._sql_of(reader), keep, before, recorded_before)
        if dry_run:
            return Pruned(floor, target, count, dry_run=True)
        current, deleted, batches = shared.prune_batches(self._batch, target, batch)
        return Pruned(floor, max(target, current), deleted, batches=batches)

    @contextmanager
    def _batch(self) -> Iterator[_SQL]:
        """One writing transaction of a pruning, as the shared SQL."""
        with self.write() as tx:
            yield self._sql_of(tx)

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
            return shared.reserve_idempotency(self._sql_of(tx), tx.now, key, request_sha256, ttl_seconds, stale_seconds)

    def complete_idempotency(self, key: str, status: int, response_json: str) -> bool:
        check_idempotency(key)
        shared.check_completion(status, response_json)
        with self.write() as tx:
            return shared.complete_idempotency(self._sql_of(tx), tx.now, key, status, response_json)

    def release_idempotency(self, key: str) -> bool:
        check_idempotency(key)
        with self.write() as tx:
            return shared.release_idempotency(self._sql_of(tx), key)

    def prune_idempotency(self, before: datetime | None = None) -> int:
        with self.write() as tx:
            return shared.prune_idempotency(self._sql_of(tx), tx.now if before is None else before)

    def mesh(self) -> MeshStore:
        """The agent mesh in this schema's ``mesh_*`` tables, on this store's connection."""
        mesh = self.__dict__.get("_mesh")
        if mesh is None:
            from runner.sql.mesh_sql import SQLMesh

            mesh = self.__dict__["_mesh"] = SQLMesh(
                self, lambda view: connection_of(view)[0], "%s", self.target.described
            )
        return mesh

    def info(self) -> dict[str, Any]:
        with self.read() as reader:
            conn = reader._conn  # type: ignore[attr-defined]  # reason: this module's own reader
            version_row = conn.execute("SELECT version FROM schema_version").fetchone()
            meta = conn.execute("SELECT store_id, retention_floor FROM store_meta").fetchone()
            server_version = conn.info.server_version
        assert version_row is not None and meta is not None
        return {
            "adapter": "postgresql",
            "url": self.target.public_url,
            "server": self.target.server,
            "schema": self.target.schema,
            "server_version": server_version,
            "schema_version": int(version_row[0]),
            "store_id": str(meta[0]),
            "retention_floor": int(meta[1]),
        }

    # --- moving a store --------------------------------------------------------------

    def export_rows(self) -> Iterator[ExportRow]:
        with self.read() as reader:
            conn, _ = connection_of(reader)
            meta = conn.execute("SELECT store_id, retention_floor, last_seq FROM store_meta").fetchone()
            if meta is None:
                raise StoreCorruptError(
                    f"the store {self.target.described} is damaged: store_meta has no row; restore it from a backup",
                    table="store_meta",
                    **self.target.details(),
                )
            yield "store_meta", (str(meta[0]), int(meta[1]), int(meta[2]))
            for table, columns in COPY_TABLES.items():
                if table == "store_meta":
                    continue
                with conn.cursor(name=f"corral_export_{table}") as cursor:
                    cursor.itersize = 1000
                    cursor.execute(f"SELECT {', '.join(columns)} FROM {table} ORDER BY {_COPY_ORDER[table]}")
                    for row in cursor:
                        yield table, tuple(row)

    def import_rows(self, rows: Iterable[ExportRow], verify: Callable[[Iterator[ExportRow]], None]) -> None:
        import itertools

        from psycopg import sql

        with self.write() as tx:
            conn, _ = connection_of(tx)
            held = {
                t: int(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0])  # type: ignore[index]
                for t in COPY_TABLES
                if t != "store_meta"
            }
            last = self._last_seq(conn)
            if any(held.values()) or last:
                raise RefusedError(
                    f"the store {self.target.described} is not empty: a store is moved only into an empty one",
                    code="store_not_empty",
                    rows={t: n for t, n in held.items() if n},
                    last_seq=last,
                    **self.target.details(),
                )
            meta: tuple[Any, ...] | None = None
            for table, group in itertools.groupby(rows, key=lambda row: row[0]):
                if table == "store_meta":
                    meta = next(group)[1]
                    continue
                if table not in COPY_TABLES:
                    raise InputError(
                        "from", f"the source yielded rows of an unknown table {table!r}", code="store_copy_invalid"
                    )
                columns = sql.SQL(", ").join(sql.Identifier(c) for c in COPY_TABLES[table])
                statement = sql.SQL("COPY {} ({}) FROM STDIN").format(sql.Identifier(table), columns)
                with conn.cursor().copy(statement) as copy:
                    for _, row in group:
                        copy.write_row(row)
            if meta is None:
                raise InputError("from", "the source yielded no store_meta row", code="store_copy_invalid")
            # The store id never changes once a store has a history; this one is empty and takes the
            # source's id in the transaction that gives it the source's history.
            conn.execute("ALTER TABLE store_meta DISABLE TRIGGER store_meta_fixed")
            conn.execute(
                "UPDATE store_meta SET store_id = %s, retention_floor = %s, last_seq = %s",
                (str(meta[0]), int(meta[1]), int(meta[2])),
            )
            conn.execute("ALTER TABLE store_meta ENABLE TRIGGER store_meta_fixed")
            # The checkpoints came with their n, which a bigserial's sequence does not notice: set it past
            # them, or the next checkpoint collides. (The sessions' n was not copied: COPY drew each from
            # the sequence, in the source's order. The tsvector is generated: it came with each row.)
            conn.execute(
                "SELECT setval(pg_get_serial_sequence('memory_checkpoints', 'n'), coalesce(max(n), 0) + 1, false)"
                " FROM memory_checkpoints"
            )
            notify(tx, "*")  # waiters re-read: everything changed
            verify(self.export_rows())

    @staticmethod
    def _last_seq(conn: psycopg.Connection[Any]) -> int:
        row = conn.execute("SELECT last_seq FROM store_meta").fetchone()
        return 0 if row is None else int(row[0])

    def sizes(self) -> dict[str, int]:
        with self.read() as reader:
            conn, _ = connection_of(reader)
            found: dict[str, int] = {}
            for table in COPY_TABLES:
                if table != "store_meta":
                    row = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
                    found[table] = int(row[0]) if row is not None else 0
            row = conn.execute(
                "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class AS c"
                " JOIN pg_namespace AS n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind = 'r'",
                (self.target.schema,),
            ).fetchone()
            found["bytes"] = int(row[0]) if row is not None else 0
        return found

    def close(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


# The key order of each table's export (PostgresStore.export_rows); ids are COLLATE "C",
# code point order, as SQLite's binary order.
_COPY_ORDER = {
    **shared.COPY_ORDER,
    "instance_parts": "instance_id, ord",  # an instance's parts in first-write order
    "memory_sessions": "n",  # write order, the listing's (memory_postgres); n itself is not copied
}


def connection_of(view: Reader) -> tuple[psycopg.Connection[Any], PostgresStore]:
    """The connection (and store) under a snapshot or transaction of a :class:`PostgresStore`.

    For the ports whose tables live in the same schema (the process host's agent slots,
    ``runner.sql.slots_postgres``): their statements run in that very snapshot or transaction.

    Raises:
        CorralError: ``view`` does not come from a PostgreSQL store (a bug in whoever paired them).
    """
    if not isinstance(view, _Reader):
        raise CorralError(f"{type(view).__name__} is not a snapshot or transaction of a PostgreSQL store")
    return view._conn, view._store


def notify(view: Transaction, payload: str) -> None:
    """Have ``view`` (a transaction of a PostgreSQL store) notify listeners of ``payload`` on commit."""
    if not isinstance(view, _Transaction):
        raise CorralError(f"{type(view).__name__} is not a transaction of a PostgreSQL store")
    view.note(payload[:_NOTIFY_ID])


def decode_object(text: Any, store: PostgresStore, table: str, row_id: Any, column: str) -> dict[str, Any]:
    """One JSON object column of a row of this store (``store_corrupt`` if it does not decode)."""
    return _decode(text, store.target.described, table, row_id, column)


def open_postgres(url: str, clock: Clock | None = None) -> Store:
    """The opener registered for ``postgresql://`` (and ``postgres://``) URLs."""
    return PostgresStore(url, clock=clock)


__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "PostgresStore", "Target", "connection_of", "notify", "open_postgres"]


def open_postgresql(url: str, clock: Clock | None = None) -> Store:
    """One schema of a PostgreSQL database, shared by coordinators on several machines."""
    try:
        import psycopg  # noqa: F401  (the driver this adapter needs: missing, it is store_unsupported)
    except ImportError as exc:
        raise InputError(
            "store",
            f"the PostgreSQL store needs psycopg 3 ({exc}); install corral[postgres]",
            code="store_unsupported",
            url="postgresql://…",
        ) from None
    return PostgresStore(url, clock=clock)
