"""What the PostgreSQL store promises beyond the port's conformance suite (which it passes too).

The event log is commit-ordered (racing writer processes and a tailing reader), a URL names one
schema and nothing else, a schema corral did not make is refused, connection loss is a clear
``store_unavailable`` that names the server (never the password) and the next transaction
reconnects, and a wait is woken by the writer's notification.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from runner.context import Instance
from runner.errors import StoreForeignError, StoreUnavailableError
from runner.sql.store_postgres import PostgresStore
from runner.store import open_store
from tests.support.stores import PostgresKind, PostgresServer, kind_for

# PostgreSQL only, with no SQLite twin: slow like the PostgreSQL side of a store parametrization, so that
# make test-fast starts no PostgreSQL server (tests/conftest.py); make test runs it.
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]

# One writer process: ``rounds`` transactions, each appending 1-3 events and sleeping inside the
# transaction now and then, so that writers queue behind each other and commit in every interleaving.
WRITER = """
import random, sys, time
from runner.context import Instance
from runner.store import open_store

url, name, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
rng = random.Random(name)
with open_store(url) as store:
    for index in range(rounds):
        with store.write() as tx:
            current = tx.get(name) or Instance(name, "racer", "start", 0, {})
            written = tx.put(current, "run", {"i": index})
            for _ in range(rng.randint(1, 3)):
                tx.append(written, "go", current.state, name, {"i": index})
            if rng.random() < 0.3:
                time.sleep(rng.random() * 0.004)
"""


@pytest.fixture
def pg(request: pytest.FixtureRequest) -> PostgresKind:
    kind = kind_for("postgresql", request)
    assert isinstance(kind, PostgresKind)
    return kind


@pytest.fixture
def store(pg: PostgresKind, tmp_path: Path) -> Any:
    with open_store(pg.url(tmp_path)) as opened:
        yield opened


def _new(instance_id: str) -> Instance:
    return Instance(instance_id, instance_id.split("/", maxsplit=1)[0], "start", 0, {})


@pytest.mark.slow  # racing processes
def test_the_event_log_is_commit_ordered_under_racing_writer_processes(store: PostgresStore) -> None:
    """A tailing reader never sees a seq below one it has seen appear later, and no seq is skipped."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    writers = [
        subprocess.Popen([sys.executable, "-c", WRITER, store.url, f"racer/{n}", "40"], env=env, cwd=REPO)
        for n in range(6)
    ]
    seen: list[int] = []  # every seq the tail has seen, in the order it saw them
    violations: list[str] = []
    polls = 0
    try:
        while True:
            running = any(writer.poll() is None for writer in writers)
            # The whole log each time: anything at or below what was seen must be exactly what was seen.
            log = [event.seq for event in store.events(0)]
            high = seen[-1] if seen else 0
            below = [seq for seq in log if seq <= high]
            if below != seen:
                violations.append(f"poll {polls}: {sorted(set(below) - set(seen))[:5]} appeared at or below {high}")
            seen += [seq for seq in log if seq > high]
            polls += 1
            if not running:
                break
    finally:
        for writer in writers:
            writer.wait(120)
    assert [writer.returncode for writer in writers] == [0] * 6
    assert violations == []
    assert polls > 3, "the tail read while the writers ran"
    assert seen == list(range(1, len(seen) + 1)), "strictly increasing, gap-free"
    assert len(seen) == len(store.events(0)) >= 6 * 40


def test_a_rolled_back_transaction_takes_no_sequence_number(store: PostgresStore) -> None:
    with store.write() as tx:
        first = tx.append(tx.put(_new("a/1"), "on", {}), "go", "start", "t", {})
    with pytest.raises(RuntimeError), store.write() as tx:
        tx.append(tx.put(_new("a/2"), "on", {}), "go", "start", "t", {})
        raise RuntimeError("boom")
    with store.write() as tx:
        second = tx.append(tx.put(_new("a/3"), "on", {}), "go", "start", "t", {})
    assert (first.seq, second.seq) == (1, 2)


def test_a_url_names_one_schema_and_the_default_is_corral(pg: PostgresKind, tmp_path: Path) -> None:
    url = pg.url(tmp_path)
    sibling = url.replace("schema=", "schema=x")
    with open_store(url) as one, open_store(sibling) as two:
        with one.write() as tx:
            tx.put(_new("a/1"), "on", {})
        assert two.get("a/1") is None, "another schema is another store"
        assert one.info()["store_id"] != two.info()["store_id"]
        assert (one.info()["schema"], one.info()["adapter"]) == (url.rsplit("schema=", 1)[1], "postgresql")
    server = pg.server
    assert server is not None
    default = server.scratch
    with open_store(default) as store:
        assert store.info()["schema"] == "corral"
        store_id = store.info()["store_id"]
    with open_store(default.replace("postgresql://", "postgres://", 1)) as alias:
        assert alias.info()["store_id"] == store_id, "postgres:// is the same store"


def test_a_schema_with_tables_corral_did_not_make_is_refused(pg: PostgresKind, tmp_path: Path) -> None:
    url = pg.url(tmp_path)
    schema = url.rsplit("schema=", 1)[1]
    server = pg.server
    assert server is not None
    import psycopg

    with psycopg.connect(server.scratch, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        conn.execute(f"CREATE TABLE {schema}.invoices (id int)")
    with pytest.raises(StoreForeignError) as caught:
        open_store(url)
    assert caught.value.code == "store_foreign" and caught.value.details["tables"] == ["invoices"]


def _terminate(server: PostgresServer, application: str = "corral") -> int:
    import psycopg

    with psycopg.connect(server.url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE application_name = %s AND datname = %s",
            (application, server.database),
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_a_lost_connection_is_store_unavailable_inside_a_transaction_and_reconnected_after(
    pg: PostgresKind, store: PostgresStore
) -> None:
    server = pg.server
    assert server is not None
    with store.write() as tx:
        tx.put(_new("a/1"), "on", {"n": 1})
    with pytest.raises(StoreUnavailableError) as caught, store.write() as tx:
        current = tx.get("a/1")
        assert current is not None
        assert _terminate(server) >= 1
        tx.put(current, "off", {"n": 2})
    assert caught.value.code == "store_unavailable" and caught.value.status.exit == 5
    assert caught.value.details["server"].endswith(f"/{server.database}")
    stored = store.get("a/1")  # the next transaction reconnects: nothing was sent yet, so that is safe
    assert stored is not None and (stored.state, stored.version) == ("on", 1), "the lost write did not land"
    assert _terminate(server) >= 1  # between transactions: the next one reconnects without an error
    with store.write() as tx:
        tx.put(stored, "off", {"n": 2})
    assert store.get("a/1").state == "off"  # type: ignore[union-attr]  # reason: written just above


def test_info_never_shows_a_password(pg: PostgresKind, tmp_path: Path) -> None:
    url = pg.url(tmp_path).replace("postgresql://postgres@", "postgresql://postgres:hunter2@", 1)
    with open_store(url) as store:  # trust authentication: the password is not needed, only carried
        info = store.info()
    assert "hunter2" not in str(info) and info["url"].startswith("postgresql://postgres@")


def test_a_wait_is_woken_by_another_process_commit_through_its_notification(store: PostgresStore) -> None:
    code = (
        "import sys, time\n"
        "from runner.context import Instance\n"
        "from runner.store import open_store\n"
        "time.sleep(0.3)\n"
        "with open_store(sys.argv[1]) as s, s.write() as tx:\n"
        "    tx.append(tx.put(Instance('w/1', 'w', 'start', 0, {}), 'on', {}), 'go', 'start', 'other', {})\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    listener_ready = store.wait_events(0, 0.01)  # starts the listener before the writer begins
    assert listener_ready == []
    writer = subprocess.Popen([sys.executable, "-c", code, store.url], env=env, cwd=REPO)
    try:
        found = store.wait_events(0, timeout=20)
    finally:
        writer.wait(60)
    assert writer.returncode == 0
    assert [e.actor for e in found] == ["other"]


def test_notifications_are_sent_only_by_commits(pg: PostgresKind, store: PostgresStore) -> None:
    import psycopg

    listener = psycopg.connect(store.target.conninfo, autocommit=True)
    try:
        listener.execute(f'LISTEN "{store.channel}"')
        with pytest.raises(RuntimeError), store.write() as tx:
            tx.put(_new("a/1"), "on", {})
            raise RuntimeError("rolled back")
        assert list(listener.notifies(timeout=0.2)) == []
        with store.write() as tx:
            tx.put(_new("a/2"), "on", {})
        got = list(listener.notifies(timeout=5, stop_after=1))
        assert [(n.channel, n.payload) for n in got] == [(store.channel, "i a/2")]
    finally:
        listener.close()


def test_many_threads_on_one_store_object_take_turns(store: PostgresStore) -> None:
    with store.write() as tx:
        tx.put(_new("n/1"), "on", {"n": 0})
    errors: list[BaseException] = []

    def bump() -> None:
        try:
            for _ in range(10):
                with store.write() as tx:
                    current = tx.get("n/1")
                    assert current is not None
                    tx.put(current, "on", {"n": current.data["n"] + 1})
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=bump) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert store.get("n/1").data["n"] == 40  # type: ignore[union-attr]  # reason: written above


def test_a_schema_of_an_older_version_migrates_forward_on_open(pg: PostgresKind, tmp_path: Path) -> None:
    """A store made by the first schema version (before idempotency records) opens at the latest."""
    import psycopg

    from runner.sql.store_postgres_schema import MIGRATIONS, SCHEMA_VERSION, statements

    url = pg.url(tmp_path)
    schema = url.rsplit("schema=", 1)[1]
    assert pg.server is not None
    with psycopg.connect(pg.server.scratch, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        conn.execute(f"SET search_path = {schema}")
        for statement in statements(MIGRATIONS[0]):
            conn.execute(statement.encode())
        conn.execute("INSERT INTO schema_version (version) VALUES (1)")
        conn.execute("INSERT INTO instances VALUES ('old/1', 'old', 'on', 2, '{}', 't', 't')")
    with open_store(url) as store:
        assert store.info()["schema_version"] == SCHEMA_VERSION > 1
        assert store.get("old/1").version == 2  # type: ignore[union-attr]  # reason: inserted above
        assert store.reserve_idempotency("k", "0" * 64, 60) is None, "the new table is there"


@pytest.mark.parametrize("ci", [None, "1"])
def test_without_a_server_the_postgresql_tests_skip_in_one_line_but_fail_under_ci(
    monkeypatch: pytest.MonkeyPatch, ci: str | None
) -> None:
    from tests.support import pgserver, stores

    monkeypatch.delenv("CORRAL_TEST_POSTGRES", raising=False)
    monkeypatch.setattr(pgserver, "binary", lambda name: None)
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    outcome = pytest.fail.Exception if ci else pytest.skip.Exception
    with pytest.raises(outcome) as caught:
        stores._start_server()
    message = str(caught.value)
    assert "\n" not in message and "CORRAL_TEST_POSTGRES" in message and "initdb" in message
    assert message.startswith("PostgreSQL tests cannot run under CI" if ci else "PostgreSQL: ")


def test_expiry_is_judged_by_the_servers_clock_not_the_callers(
    pg: PostgresKind, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Coordinators on other machines (or with a clock that jumped) judge expiry by one time: the
    server's, for the store's now() and for every write's stamp."""
    import psycopg

    from runner.sql import store_postgres

    monkeypatch.setattr(store_postgres, "_wall_clock", lambda: datetime.now(UTC) + timedelta(hours=1))
    with open_store(pg.url(tmp_path)) as opened:
        assert isinstance(opened, PostgresStore)
        with psycopg.connect(opened.target.conninfo, autocommit=True) as conn:
            row = conn.execute("SELECT clock_timestamp()").fetchone()
        assert row is not None
        server = row[0].astimezone(UTC)
        assert abs((opened.now() - server).total_seconds()) < 60, "the server's time, not this process's"
        with opened.write() as tx:
            stamp = tx.now
        assert abs((stamp - server).total_seconds()) < 60
        assert opened.now() >= stamp, "the server's clock, read again, has not gone back"
