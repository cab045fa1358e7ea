"""Conformance factories: how the store suites make a fresh store of each registered kind.

The store conformance suite (``tests/store/test_conformance.py``) and the process host's slot
conformance suite (``tests/agents/test_slots.py``) run once per scheme in
:data:`runner.store.STORES`; each scheme needs a :class:`StoreKind` here, and a registered scheme
without one fails the suite. Adding an adapter is adding its kind to :data:`KINDS`.

PostgreSQL (:class:`PostgresKind`): the server is ``CORRAL_TEST_POSTGRES`` (a libpq URL of a server
the tests may create a database in), else a throwaway cluster the session starts
(``tests.support.pgserver``: initdb into a temporary directory, a unix socket only, ``fsync=off``),
stopped at the end. The session makes one scratch database and every store a fresh schema in it
(``?schema=t_<hex>``: a few milliseconds, where a database per store costs a few hundred). When
neither server is possible the PostgreSQL tests skip with one line saying why, except under CI
(``CI`` set), where that fails them.

A kind knows what the port cannot say portably: where a fresh store goes, how to open a second
connection with a short busy deadline, how to make a database look newer than this code, and how
to damage one row the way a bad disk or a foreign writer would.
"""

from __future__ import annotations

import os
import secrets
import shutil
import sqlite3
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import pytest

from runner.store import STORES, Clock, Store, open_store, scheme_of, sqlite_path


class StoreKind(ABC):
    """Fresh stores of one registered scheme, and the raw access its conformance tests need."""

    scheme: str

    def ready(self, request: pytest.FixtureRequest) -> None:  # noqa: B027 - reason: a hook most kinds leave empty
        """Make sure the kind's server (if any) is there for this test: skip or fail if it cannot be."""

    @abstractmethod
    def url(self, directory: Path) -> str:
        """A URL for a new, empty store whose files (if any) go in ``directory``."""

    def open(self, url: str, clock: Clock | None = None, busy_deadline: float | None = None) -> Store:
        """Open (another connection to) the store at ``url``; through ``open_store`` unless a deadline is set."""
        if busy_deadline is None:
            return open_store(url, clock=clock)
        return self.open_with_deadline(url, clock, busy_deadline)

    @abstractmethod
    def open_with_deadline(self, url: str, clock: Clock | None, busy_deadline: float) -> Store:
        """The store at ``url`` whose writers give up with ``store_busy`` after ``busy_deadline`` s."""

    @abstractmethod
    def make_newer(self, url: str) -> None:
        """Mark the (closed) store as written by a newer corral: its schema version beyond this code's."""

    @abstractmethod
    def corrupt(self, url: str, table: str, row: object, column: str) -> None:
        """Overwrite one JSON column of one row with text that is not a JSON object."""


class SQLiteKind(StoreKind):
    scheme = "sqlite"
    _keys: ClassVar[dict[str, str]] = {
        "instances": "id",
        "events": "seq",
        "agent_slots": "pane_id",
        "instance_parts": "instance_id",  # the tests damage an instance's only part
    }

    def url(self, directory: Path) -> str:
        return f"sqlite://{directory / 'conformance.db'}"

    def open_with_deadline(self, url: str, clock: Clock | None, busy_deadline: float) -> Store:
        from runner.sql.store_sqlite import SQLiteStore

        path = sqlite_path(url)
        assert path is not None
        return SQLiteStore(path, clock=clock, busy_deadline=busy_deadline)

    def _raw(self, url: str) -> sqlite3.Connection:
        path = sqlite_path(url)
        assert path is not None and path.exists()
        return sqlite3.connect(path, isolation_level=None)

    def make_newer(self, url: str) -> None:
        from runner.sql.store_sqlite import SCHEMA_VERSION

        conn = self._raw(url)
        try:
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
        finally:
            conn.close()

    def corrupt(self, url: str, table: str, row: object, column: str) -> None:
        conn = self._raw(url)
        try:
            conn.execute("DROP TRIGGER IF EXISTS events_no_update")  # the log is append-only even to raw SQL
            cursor = conn.execute(f"UPDATE {table} SET {column} = 'not json' WHERE {self._keys[table]} = ?", (row,))
            assert cursor.rowcount == 1, f"no {table} row {row!r} to damage"
        finally:
            conn.close()


class ExampleKind(SQLiteKind):
    """The example plugin's store (tests/plugins/example, installed in the test venv): an SQLite file
    named by an ``example://`` URL, so its raw access is SQLite's."""

    scheme = "example"

    def url(self, directory: Path) -> str:
        return f"example://{directory / 'conformance.db'}"

    def _raw(self, url: str) -> sqlite3.Connection:
        return super()._raw("sqlite://" + url.split("://", 1)[1])

    def open_with_deadline(self, url: str, clock: Clock | None, busy_deadline: float) -> Store:
        return super().open_with_deadline("sqlite://" + url.split("://", 1)[1], clock, busy_deadline)


def _as_url(dsn: str) -> str:
    """A libpq URL for a libpq URL or ``key=value`` connection string."""
    if dsn.startswith(("postgresql://", "postgres://")):
        return dsn
    from psycopg.conninfo import conninfo_to_dict

    params = {key: str(value) for key, value in conninfo_to_dict(dsn).items()}
    database = params.pop("dbname", "")
    return f"postgresql:///{database}?{urlencode(params)}"


def with_database(url: str, database: str, **query: str) -> str:
    """``url`` naming another database, with ``query`` parameters added."""
    parts = urlsplit(url)
    pairs = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "dbname" and k not in query]
    return urlunsplit(parts._replace(path="/" + database, query=urlencode(pairs + list(query.items()))))


class PostgresServer:
    """The test session's PostgreSQL server and its scratch database."""

    def __init__(self, url: str, directory: Path | None) -> None:
        import psycopg

        self.url = url
        self.directory = directory  # a throwaway cluster this session started (None: CORRAL_TEST_POSTGRES)
        self.database = f"corral_test_{os.getpid()}_{secrets.token_hex(3)}"
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{self.database}"')
        self.scratch = with_database(url, self.database)

    def close(self) -> None:
        import psycopg

        try:
            with psycopg.connect(self.url, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{self.database}" WITH (FORCE)')
        finally:
            if self.directory is not None:
                from tests.support import pgserver

                pgserver.stop(self.directory / "c")
                shutil.rmtree(self.directory, ignore_errors=True)


def _start_server() -> PostgresServer:
    """``CORRAL_TEST_POSTGRES``, or a throwaway cluster; ``pytest.skip`` (``fail`` under CI) if neither."""
    configured = os.environ.get("CORRAL_TEST_POSTGRES")
    why: str
    try:
        import psycopg  # noqa: F401 - the adapter's driver
    except ImportError:
        why = "psycopg is not installed (pip install corral[postgres])"
    else:
        if configured:
            return PostgresServer(_as_url(configured), None)
        from tests.support import pgserver

        reason = pgserver.unavailable()
        if reason is None:
            directory = Path(tempfile.mkdtemp(prefix="corral-pg-"))  # short: a unix socket path is <= 107 bytes
            try:
                return PostgresServer(pgserver.start(directory / "c"), directory)
            except BaseException:
                pgserver.stop(directory / "c")
                shutil.rmtree(directory, ignore_errors=True)
                raise
        why = f"no CORRAL_TEST_POSTGRES and {reason}"
    if os.environ.get("CI"):
        pytest.fail(f"PostgreSQL tests cannot run under CI: {why}")
    pytest.skip(f"PostgreSQL: {why}")


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """The session's PostgreSQL server (started once, stopped at the end) and scratch database."""
    server = _start_server()
    try:
        yield server
    finally:
        server.close()


class PostgresKind(StoreKind):
    """A fresh schema of the session's scratch database per store."""

    scheme = "postgresql"
    server: PostgresServer | None = None
    _keys: ClassVar[dict[str, str]] = SQLiteKind._keys

    def ready(self, request: pytest.FixtureRequest) -> None:
        PostgresKind.server = request.getfixturevalue("postgres_server")

    def _server(self) -> PostgresServer:
        assert self.server is not None, "the test asked for store_kind (or called ready) first"
        return self.server

    def url(self, directory: Path) -> str:
        return with_database(self._server().url, self._server().database, schema=f"t_{secrets.token_hex(6)}")

    def open_with_deadline(self, url: str, clock: Clock | None, busy_deadline: float) -> Store:
        from runner.sql.store_postgres import PostgresStore

        return PostgresStore(url, clock=clock, busy_deadline=busy_deadline)

    def raw(self, url: str) -> Any:
        """A superuser connection to the store's database, ``search_path`` on the store's schema."""
        import psycopg

        from runner.sql.store_postgres import Target

        target = Target(url)
        conn = psycopg.connect(target.conninfo, autocommit=True)
        conn.execute("SELECT set_config('search_path', %s, false)", (target.schema,))
        return conn

    def make_newer(self, url: str) -> None:
        from runner.sql.store_postgres import SCHEMA_VERSION

        with self.raw(url) as conn:
            conn.execute("UPDATE schema_version SET version = %s", (SCHEMA_VERSION + 1,))

    def corrupt(self, url: str, table: str, row: object, column: str) -> None:
        with self.raw(url) as conn:
            conn.execute("ALTER TABLE events DISABLE TRIGGER events_append_only")  # the log refuses raw SQL too
            cursor = conn.execute(f"UPDATE {table} SET {column} = 'not json' WHERE {self._keys[table]} = %s", (row,))
            assert cursor.rowcount == 1, f"no {table} row {row!r} to damage"


KINDS: dict[str, StoreKind] = {kind.scheme: kind for kind in (SQLiteKind(), ExampleKind(), PostgresKind())}


def kind_for(scheme: str, request: pytest.FixtureRequest | None = None) -> StoreKind:
    """The conformance factory of a registered scheme; a registered scheme without one fails the test.

    With ``request``, the kind's server is made ready for that test (or the test skips).
    """
    kind = KINDS.get(scheme)
    if kind is None:
        pytest.fail(f"the store {scheme!r} is registered but has no conformance factory in tests/support/stores.py")
    if request is not None:
        kind.ready(request)
    return kind


@pytest.fixture(params=STORES.names())
def store_kind(request: pytest.FixtureRequest) -> StoreKind:
    """Each registered store's conformance factory in turn."""
    return kind_for(request.param, request)


@pytest.fixture
def any_store(store_kind: StoreKind, tmp_path: Path, clock: Clock) -> Iterator[Store]:
    """A fresh store of each registered kind, on the suite's controllable clock."""
    with store_kind.open(store_kind.url(tmp_path), clock=clock) as store:
        yield store


def open_alias(url: str, clock: Clock | None = None) -> Store:
    """A plugin-style opener (``alias://<path>`` is an SQLite file): the registry's entry point example."""
    return open_store("sqlite://" + url.split("://", 1)[1], clock=clock)


# --- the store the other suites run on --------------------------------------------------------------

TEST_STORE = os.environ.get("CORRAL_TEST_STORE", "sqlite")
"""The store kind under the suites that are not about one store (``CORRAL_TEST_STORE``; default
``sqlite``): ``make test`` runs the service suite a second time with ``postgresql``, so a test there
is the same test on both stores, not a thinner twin. A test that reads the SQLite file itself (its
bytes, its statements) asks :func:`sqlite_only`."""

_URLS: dict[str, str] = {}  # a directory's store URL: reopening the same directory reopens the same store
_OPENED: list[Store] = []  # the test's server stores, closed at its end (a world a test forgot to close)


def suite_store_url(directory: Path) -> str:
    """The URL of the test's store "in" ``directory``: ``directory/corral.db``, or (under
    ``CORRAL_TEST_STORE=postgresql``) a fresh schema of the session's server, the same one each time
    the same directory is named (a second process or connection opens the same store)."""
    if TEST_STORE == "sqlite":
        return f"sqlite://{directory / 'corral.db'}"
    key = str(directory.resolve())
    if key not in _URLS:
        _URLS[key] = kind_for(TEST_STORE).url(directory)
    return _URLS[key]


def open_test_store(directory: Path, clock: Clock | None = None) -> Store:
    """Open the test's store in ``directory`` (see :func:`suite_store_url`)."""
    if TEST_STORE == "sqlite":
        from runner.sql.store_sqlite import SQLiteStore

        return SQLiteStore(directory / "corral.db", clock=clock)
    opened = kind_for(TEST_STORE).open(suite_store_url(directory), clock=clock)
    _OPENED.append(opened)
    return opened


def sqlite_only(why: str) -> None:
    """Skip a test that is about the SQLite file itself when the suite runs on another store."""
    if TEST_STORE != "sqlite":
        pytest.skip(f"about the SQLite file ({why}); the suite runs on {TEST_STORE}")


@pytest.fixture(autouse=True)
def _test_store_ready(request: pytest.FixtureRequest) -> Iterator[None]:
    """Under ``CORRAL_TEST_STORE``, the kind's server is there for every test (or the test skips), and
    the stores the test opened are closed at its end (a second close does nothing)."""
    if TEST_STORE != "sqlite":
        kind_for(TEST_STORE, request)
    yield
    while _OPENED:
        _OPENED.pop().close()


def raw_rows(url: str, sql: str) -> list[tuple[Any, ...]]:
    """Rows of ``sql`` read from the store's database itself (not through corral), on either kind."""
    path = sqlite_path(url)
    if path is not None:
        conn = sqlite3.connect(path)
        try:
            return [tuple(row) for row in conn.execute(sql)]
        finally:
            conn.close()
    with PostgresKind().raw(url) as conn:
        return [tuple(row) for row in conn.execute(sql)]


def store_fingerprint(url: str) -> str:
    """A digest of everything the store holds: the file's bytes for SQLite, every row of every table
    of the schema for PostgreSQL (equal fingerprints: nothing was written)."""
    import hashlib

    path = sqlite_path(url)
    if path is not None:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    digest = hashlib.sha256()
    for chunk in _schema_rows(url):
        digest.update(chunk)
    return digest.hexdigest()


def _schema_rows(url: str) -> Iterator[bytes]:
    """Every table name and row of a PostgreSQL store's schema, in a fixed order."""
    with PostgresKind().raw(url) as conn:
        tables = [row[0] for row in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")]
        for table in sorted(tables):
            yield table.encode()
            for row in conn.execute(f'SELECT * FROM "{table}" ORDER BY 1'):
                yield repr(tuple(row)).encode()


def store_holds(url: str, needle: str) -> bool:
    """Whether ``needle`` appears anywhere in the store: its files (SQLite, with the WAL) or its rows."""
    path = sqlite_path(url)
    if path is not None:
        return any(needle.encode() in p.read_bytes() for p in path.parent.glob(path.name + "*"))
    return any(needle.encode() in chunk for chunk in _schema_rows(url))


@pytest.fixture(params=["sqlite", "postgresql"])
def race_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh store for a race of real processes, on SQLite and on PostgreSQL (the same checks on
    both): the file ``tmp_path/corral.db``, or a fresh schema of the session's server."""
    if request.param == "sqlite":
        return f"sqlite://{tmp_path / 'corral.db'}"
    return kind_for("postgresql", request).url(tmp_path)


def fresh_url(template: str, directory: Path) -> str:
    """Another fresh store of the kind ``template`` names: ``directory/corral.db`` or a new schema."""
    if sqlite_path(template) is not None:
        return f"sqlite://{directory / 'corral.db'}"
    return kind_for(scheme_of(template)).url(directory)


def check_integrity(store: Store) -> None:
    """SQLite's own integrity check where the store has one (PostgreSQL keeps its pages itself)."""
    integrity = getattr(store, "integrity", None)
    if integrity is not None:
        assert integrity() == "ok"


def sqlite_file_before(path: Path, creates: str) -> int:
    """An SQLite store file at ``path`` at the schema version just before the migration whose script
    holds ``creates`` (e.g. ``"CREATE TABLE idempotency"``), holding one instance ``a/1``: what a store
    written by an older corral looks like. Returns that version."""
    from runner.sql.store_sqlite import MIGRATIONS, _statements
    from runner.sql.store_sqlite_file import APPLICATION_ID

    previous = next(n for n, script in enumerate(MIGRATIONS) if creates in script)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("BEGIN")
        for script in MIGRATIONS[:previous]:
            for statement in _statements(script):
                conn.execute(statement)
        conn.execute("INSERT INTO instances VALUES ('a/1', 'a', 's', 1, '{}', 't', 't')")
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        conn.execute(f"PRAGMA user_version = {previous}")
        conn.execute("COMMIT")
    finally:
        conn.close()
    return previous
