"""The mesh port (issue 17) on every registered store: presence judged by the store's (injected) clock,
renewal by every call, role defaults, join-time filtering, messages repeated until acked, limits,
broadcast fan-out, size limits, retention, events without bodies, and two coordinators on one store.

Run over :data:`runner.store.STORES` like the rest of the store conformance suite
(``tests/support/stores.py``): SQLite, the example plugin's store and PostgreSQL.
"""

from __future__ import annotations

import hashlib
import threading
import uuid
from datetime import timedelta
from pathlib import Path

import pytest

from runner.context import format_time
from runner.errors import CorralError, InputError, NotFoundError, RefusedError
from runner.store import Store
from runner.store.mesh import BODY_MAX, MeshStore
from tests.conftest import FakeClock
from tests.support.stores import StoreKind


def H(agent_id: str) -> str:
    """The token hash each agent of these tests holds (the service would hash a random token)."""
    return hashlib.sha256(f"token-{agent_id}".encode()).hexdigest()


def mid() -> str:
    return "msg-" + uuid.uuid4().hex


def join(mesh: MeshStore, agent_id: str, **kw: object) -> None:
    fields: dict[str, object] = {
        "role": None, "repo": None, "caps": None, "status": None, "ttl_seconds": None, "pane": None,
    }  # fmt: skip
    fields.update(kw)
    fields.setdefault("token_sha256", H(agent_id))
    mesh.checkin(agent_id, actor="test", issue_sha256=H(agent_id), **fields)  # type: ignore[arg-type]


def send(mesh: MeshStore, sender: str, kind: str, value: str, body: str = "merges are frozen", **kw: object) -> object:
    kw.setdefault("token_sha256", H(sender))
    return mesh.send(
        sender, kind, value, subject="note", body=body, thread=None, urgent=False, message_id=mid(), actor="test", **kw
    )  # type: ignore[arg-type]


def ids(mesh: MeshStore, agent_id: str, limit: int = 100) -> list[str]:
    return [m.message_id for m in mesh.inbox(agent_id, limit, token_sha256=H(agent_id)).messages]


def test_presence_expires_exactly_at_ttl_by_the_store_clock(any_store: Store, clock: FakeClock) -> None:
    mesh = any_store.mesh()
    join(mesh, "a", role="builder", ttl_seconds=60)
    clock.advance(59.999)
    assert [p.agent_id for p in mesh.agents()] == ["a"]
    clock.advance(0.001)  # exactly ttl after the last call
    assert mesh.agents() == []
    (stale,) = mesh.agents(include_expired=True)
    assert stale.live(clock.now) is False
    assert stale.to_dict(clock.now)["stale_since"] == format_time(clock.now)


def test_every_call_renews_presence(any_store: Store, clock: FakeClock) -> None:
    mesh = any_store.mesh()
    join(mesh, "a", ttl_seconds=60)
    join(mesh, "b", ttl_seconds=60)
    for call in (
        lambda: send(mesh, "a", "agent", "b"),
        lambda: mesh.inbox("a", 10, token_sha256=H("a")),
        lambda: mesh.ack("a", [mid()], token_sha256=H("a")),
        lambda: join(mesh, "a"),
    ):
        clock.advance(50)
        call()
        presence = mesh.presence("a")
        assert presence is not None
        assert presence.expires_at == format_time(clock.now + timedelta(seconds=60))
    clock.advance(50)
    assert [p.agent_id for p in mesh.agents()] == ["a"]  # b said nothing for 250 s


def test_an_expired_agent_that_calls_comes_back(any_store: Store, clock: FakeClock) -> None:
    mesh = any_store.mesh()
    join(mesh, "a", ttl_seconds=60)
    clock.advance(61)
    assert mesh.agents() == []
    mesh.inbox("a", 5, token_sha256=H("a"))
    assert [p.agent_id for p in mesh.agents()] == ["a"]
    assert [e.trigger for e in any_store.events(instance_id="mesh/a")] == ["checkin", "return"]


@pytest.mark.parametrize(
    ("role", "ttl"), [("ping", 900), ("verification", 900), ("builder", 3600), ("reviewer", 3600), (None, 3600)]
)
def test_ttl_defaults_from_the_role(any_store: Store, role: str | None, ttl: int) -> None:
    mesh = any_store.mesh()
    join(mesh, "a", role=role)
    presence = mesh.presence("a")
    assert presence is not None and presence.ttl_seconds == ttl


def test_checkin_keeps_what_it_omits_and_ages_the_status(any_store: Store, clock: FakeClock) -> None:
    mesh = any_store.mesh()
    join(mesh, "a", role="builder", repo="corral", caps=["py", "git"], status="building")
    clock.advance(30)
    done = mesh.checkin(
        "a",
        role=None,
        repo=None,
        caps=None,
        status="building",
        ttl_seconds=None,
        pane=None,
        actor="t",
        token_sha256=H("a"),
        issue_sha256=H("a"),
    )
    assert done.was == "live"
    p = done.presence
    assert (p.role, p.repo, p.caps, p.status) == ("builder", "corral", ("py", "git"), "building")
    assert p.to_dict(clock.now)["status_age_seconds"] == 30.0  # the same status: its age goes on
    clock.advance(5)
    join(mesh, "a", status="reviewing")
    p2 = mesh.presence("a")
    assert p2 is not None and p2.to_dict(clock.now)["status_age_seconds"] == 0.0


def test_checkin_input_is_refused_by_field(any_store: Store) -> None:
    mesh = any_store.mesh()
    for field, kw in (
        ("agent_id", {"agent_id": "bad id"}),
        ("agent_id", {"agent_id": "x" * 65}),
        ("ttl_seconds", {"ttl_seconds": 59}),
        ("ttl_seconds", {"ttl_seconds": 86401}),
        ("status", {"status": "two\nlines"}),
        ("role", {"role": "no spaces"}),
    ):
        agent_id = str(kw.pop("agent_id", "a"))
        with pytest.raises(InputError) as caught:
            join(mesh, agent_id, **kw)
        assert caught.value.details["field"] == field
    assert mesh.agents(include_expired=True) == []  # nothing half-written


def test_messages_reach_only_agents_that_had_joined(any_store: Store) -> None:
    mesh = any_store.mesh()
    join(mesh, "a", role="builder")
    join(mesh, "b", role="reviewer")
    before = send(mesh, "a", "role", "reviewer")
    join(mesh, "late", role="reviewer")
    after = send(mesh, "a", "role", "reviewer")
    assert ids(mesh, "b") == [before.message_id, after.message_id]  # type: ignore[attr-defined]
    assert ids(mesh, "late") == [after.message_id]  # type: ignore[attr-defined]


def test_unacked_messages_repeat_until_acked(any_store: Store) -> None:
    mesh = any_store.mesh()
    join(mesh, "a")
    join(mesh, "b")
    sent = [send(mesh, "a", "agent", "b", body=f"note {n}").message_id for n in range(3)]  # type: ignore[attr-defined]
    assert ids(mesh, "b") == sent
    assert ids(mesh, "b") == sent  # reading changes nothing
    done = mesh.ack("b", [sent[1]], token_sha256=H("b"))
    assert (done.acked, done.already, done.unknown) == ((sent[1],), (), ())
    assert ids(mesh, "b") == [sent[0], sent[2]]
    again = mesh.ack("b", [sent[1], sent[0], mid()], token_sha256=H("b"))
    assert again.acked == (sent[0],) and again.already == (sent[1],) and len(again.unknown) == 1
    assert ids(mesh, "b") == [sent[2]]
    assert mesh.ack("a", [sent[2]], token_sha256=H("a")).unknown == (sent[2],)  # not a's to ack
    assert ids(mesh, "b") == [sent[2]]
    assert mesh.unacked("b") == (1, mesh.inbox("b", 1, token_sha256=H("b")).messages[0].seq)


def test_inbox_limit_bounds(any_store: Store) -> None:
    mesh = any_store.mesh()
    join(mesh, "a")
    join(mesh, "b")
    sent = [send(mesh, "a", "agent", "b").message_id for _ in range(3)]  # type: ignore[attr-defined]
    page = mesh.inbox("b", 2, token_sha256=H("b"))
    assert [m.message_id for m in page.messages] == sent[:2] and page.more and page.unacked == 3
    assert mesh.inbox("b", 3, token_sha256=H("b")).more is False
    for bad in (0, 101, True, "5"):
        with pytest.raises(InputError) as caught:
            mesh.inbox("b", bad, token_sha256=H("b"))  # type: ignore[arg-type]
        assert caught.value.details["field"] == "limit"
    assert len(mesh.inbox("b", 100, token_sha256=H("b")).messages) == 3


def test_broadcast_fans_out_to_live_agents_of_the_role_or_repo(any_store: Store, clock: FakeClock) -> None:
    mesh = any_store.mesh()
    join(mesh, "gone", role="reviewer", repo="corral", ttl_seconds=60)
    clock.advance(61)
    join(mesh, "boss", role="reviewer", repo="corral")
    for name in ("r1", "r2", "r3"):
        join(mesh, name, role="reviewer", repo="corral")
    join(mesh, "w1", role="builder", repo="other")
    by_role = send(mesh, "boss", "role", "reviewer")
    assert by_role.recipients == ("r1", "r2", "r3")  # type: ignore[attr-defined]  # not the sender, not the expired one
    by_repo = send(mesh, "w1", "repo", "corral")
    assert by_repo.recipients == ("boss", "r1", "r2", "r3")  # type: ignore[attr-defined]
    for name in ("r1", "r2", "r3"):
        assert ids(mesh, name) == [by_role.message_id, by_repo.message_id]  # type: ignore[attr-defined]
    assert ids(mesh, "gone") == [] and ids(mesh, "w1") == []


def test_send_refuses_unknown_agents_senders_and_oversized_bodies(any_store: Store) -> None:
    mesh = any_store.mesh()
    join(mesh, "a")
    join(mesh, "b")
    with pytest.raises(NotFoundError) as unknown:
        send(mesh, "a", "agent", "never")
    assert unknown.value.code == "mesh_unknown_agent"
    with pytest.raises(RefusedError) as stranger:
        send(mesh, "never", "agent", "a")
    assert stranger.value.code == "mesh_not_checked_in"
    with pytest.raises(RefusedError) as reader:
        mesh.inbox("never", 5, token_sha256=H("never"))
    assert reader.value.code == "mesh_not_checked_in"
    ok = send(mesh, "a", "agent", "b", body="é" * (BODY_MAX // 2))  # exactly the limit in UTF-8 bytes
    with pytest.raises(InputError) as big:
        send(mesh, "a", "agent", "b", body="é" * (BODY_MAX // 2) + "x")
    assert big.value.code == "mesh_body_too_large" and big.value.details["field"] == "body"
    assert ids(mesh, "b") == [ok.message_id]  # type: ignore[attr-defined]  # nothing half-written
    assert mesh.inbox("b", 1, token_sha256=H("b")).messages[0].body == "é" * (BODY_MAX // 2)


def test_events_record_checkins_and_sends_without_bodies(any_store: Store) -> None:
    mesh = any_store.mesh()
    join(mesh, "a", role="builder", status="on it")
    join(mesh, "b")
    send(mesh, "a", "agent", "b", body="SECRET-BODY-TEXT")
    events = any_store.events()
    assert [(e.instance_id, e.trigger) for e in events] == [
        ("mesh/a", "checkin"),
        ("mesh/b", "checkin"),
        ("mesh/a", "send"),
    ]
    assert events[0].payload["role"] == "builder" and events[0].from_state == "absent"
    assert events[2].payload["recipients"] == 1
    assert all("SECRET-BODY-TEXT" not in repr(e.payload) and "subject" not in e.payload for e in events)


def test_retention_never_drops_a_young_unacked_message(any_store: Store, clock: FakeClock) -> None:
    mesh = any_store.mesh()
    join(mesh, "a")
    join(mesh, "b")
    join(mesh, "c")
    send(mesh, "a", "agent", "b")  # old: past retention, unacked
    clock.advance(100)
    acked = send(mesh, "a", "role", "none-such")  # no recipient at all: nothing to wait for
    young = send(mesh, "a", "agent", "b")
    both = send(mesh, "a", "repo", "x")  # nobody's repo: no recipient
    del both
    done = send(mesh, "a", "agent", "c")
    mesh.ack("c", [done.message_id], token_sha256=H("c"))  # type: ignore[attr-defined]
    went = mesh.prune(clock.now - timedelta(seconds=50))
    assert went == 4  # the old one, and the three nobody waits for
    assert ids(mesh, "b") == [young.message_id]  # type: ignore[attr-defined]
    assert acked.recipients == ()  # type: ignore[attr-defined]
    assert mesh.prune(clock.now - timedelta(seconds=50)) == 0


def test_a_send_prunes_on_its_way(any_store: Store, clock: FakeClock) -> None:
    mesh = any_store.mesh()
    join(mesh, "a")
    join(mesh, "b")
    send(mesh, "a", "agent", "b")
    clock.advance(3600)
    fresh = send(mesh, "a", "agent", "b", retain_before=clock.now - timedelta(seconds=60))
    assert fresh.pruned == 1  # type: ignore[attr-defined]
    assert ids(mesh, "b") == [fresh.message_id]  # type: ignore[attr-defined]


def test_two_coordinators_on_one_store(store_kind: StoreKind, any_store: Store, clock: FakeClock) -> None:
    """Two processes (two store objects on one URL) check in, send and read concurrently: every message is
    delivered exactly once to each recipient, in one commit order both see."""
    second = store_kind.open(any_store.url, clock=clock)
    try:
        one, two = any_store.mesh(), second.mesh()
        join(one, "a", role="team")
        join(two, "b", role="team")
        join(one, "c", role="team")
        errors: list[CorralError] = []

        def sender(mesh: MeshStore, agent: str) -> None:
            try:
                for _ in range(15):
                    send(mesh, agent, "role", "team")
            except CorralError as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=sender, args=(m, a)) for m, a in ((one, "a"), (two, "b"))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        c_one = one.inbox("c", 100, token_sha256=H("c")).messages
        c_two = two.inbox("c", 100, token_sha256=H("c")).messages
        assert [m.message_id for m in c_one] == [m.message_id for m in c_two]
        assert len(c_one) == 30 and len({m.message_id for m in c_one}) == 30
        assert [m.seq for m in c_one] == sorted(m.seq for m in c_one)
        assert (
            len(two.inbox("a", 100, token_sha256=H("a")).messages) == 15
            and len(one.inbox("b", 100, token_sha256=H("b")).messages) == 15
        )
        two.ack("c", [m.message_id for m in c_one[:10]], token_sha256=H("c"))
        assert len(one.inbox("c", 100, token_sha256=H("c")).messages) == 20
    finally:
        second.close()


def test_an_sqlite_store_from_before_the_mesh_migrates_forward(tmp_path: Path, clock: FakeClock) -> None:
    """A file of the schema before the mesh tables opens, gains them, keeps its rows and runs the mesh."""
    from runner.sql.store_sqlite import SCHEMA_VERSION, TABLES_BY_VERSION, SQLiteStore
    from tests.support.stores import sqlite_file_before

    path = tmp_path / "old.db"
    previous = sqlite_file_before(path, "CREATE TABLE mesh_agents")
    assert "mesh_agents" not in TABLES_BY_VERSION[previous] and "mesh_agents" in TABLES_BY_VERSION[previous + 1]
    with SQLiteStore(path, clock=clock) as store:
        assert store.info()["schema_version"] == SCHEMA_VERSION
        assert store.get("a/1") is not None
        join(store.mesh(), "a")
        join(store.mesh(), "b")
        sent = send(store.mesh(), "a", "agent", "b")
        assert ids(store.mesh(), "b") == [sent.message_id]  # type: ignore[attr-defined]


@pytest.mark.slow  # PostgreSQL only: the fast run starts no PostgreSQL server (tests/conftest.py)
def test_a_postgresql_store_from_before_the_mesh_migrates_forward(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A schema made by the versions before the mesh opens at the latest, with the mesh tables."""
    import psycopg

    from runner.sql.store_postgres_schema import MIGRATIONS, SCHEMA_VERSION, statements
    from runner.store import open_store
    from tests.support.stores import PostgresKind, kind_for

    pg = kind_for("postgresql", request)
    assert isinstance(pg, PostgresKind)
    previous = next(n for n, script in enumerate(MIGRATIONS) if "CREATE TABLE mesh_agents" in script)
    url = pg.url(tmp_path)
    schema = url.rsplit("schema=", 1)[1]
    assert pg.server is not None
    with psycopg.connect(pg.server.scratch, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        conn.execute(f"SET search_path = {schema}")
        for script in MIGRATIONS[:previous]:
            for statement in statements(script):
                conn.execute(statement.encode())
        conn.execute("INSERT INTO schema_version (version) VALUES (%s)", (previous,))
    with open_store(url) as store:
        assert store.info()["schema_version"] == SCHEMA_VERSION
        join(store.mesh(), "a")
        join(store.mesh(), "b")
        sent = send(store.mesh(), "a", "agent", "b")
        assert ids(store.mesh(), "b") == [sent.message_id]  # type: ignore[attr-defined]


def test_agents_from_before_identity_are_claimed_by_their_next_checkin(tmp_path: Path, clock: FakeClock) -> None:
    """Rows of the schema before agent tokens (issue 24) have none: their other calls are refused
    ``mesh_agent_unclaimed`` until the id's next check-in claims it (and from then on needs the token)."""
    import sqlite3

    from runner.sql.store_sqlite import SQLiteStore
    from tests.support.stores import sqlite_file_before

    path = tmp_path / "old.db"
    sqlite_file_before(path, "ALTER TABLE mesh_agents ADD COLUMN token_sha256")
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        for agent in ("old", "older"):
            conn.execute(
                "INSERT INTO mesh_agents VALUES (?, NULL, NULL, '[]', '', ?, NULL, 3600, ?, ?, ?, 1, NULL)",
                (agent, format_time(clock.now), format_time(clock.now), format_time(clock.now),
                 format_time(clock.now + timedelta(hours=1))),
            )  # fmt: skip
    finally:
        conn.close()
    with SQLiteStore(path, clock=clock) as store:
        mesh = store.mesh()
        with pytest.raises(RefusedError) as unclaimed:
            send(mesh, "older", "agent", "old")
        assert unclaimed.value.code == "mesh_agent_unclaimed"
        with pytest.raises(RefusedError):
            mesh.inbox("old", 5, token_sha256=H("old"))
        fields = {"role": None, "repo": None, "caps": None, "status": None, "ttl_seconds": None, "pane": None}
        claim = mesh.checkin("old", actor="t", token_sha256=None, issue_sha256=H("old"), **fields)  # type: ignore[arg-type]
        assert claim.issued is True and claim.was == "live"
        assert store.events(instance_id="mesh/old")[-1].payload["claimed"] is True
        with pytest.raises(RefusedError) as taken:
            mesh.checkin("old", actor="t", token_sha256=None, issue_sha256=H("x"), **fields)  # type: ignore[arg-type]
        assert taken.value.code == "mesh_agent_token_missing"
        again = mesh.checkin("old", actor="t", token_sha256=H("old"), issue_sha256=H("x"), **fields)  # type: ignore[arg-type]
        assert again.issued is False
        assert mesh.inbox("old", 5, token_sha256=H("old")).messages == ()


def test_a_wrong_token_writes_nothing(any_store: Store, clock: FakeClock) -> None:
    mesh = any_store.mesh()
    join(mesh, "a")
    join(mesh, "b")
    sent = send(mesh, "a", "agent", "b")
    events = len(any_store.events())
    before = (mesh.presence("a"), mesh.presence("b"), mesh.unacked("b"))
    clock.advance(10)
    for call in (
        lambda: join(mesh, "b", status="spoofed", token_sha256=H("a")),
        lambda: send(mesh, "a", "agent", "b", token_sha256=H("b")),
        lambda: mesh.inbox("b", 5, token_sha256=None),
        lambda: mesh.ack("b", [sent.message_id], token_sha256=H("a")),  # type: ignore[attr-defined]
        lambda: mesh.authenticate("b", H("a")),
    ):
        with pytest.raises(RefusedError) as caught:
            call()
        assert caught.value.code in ("mesh_agent_token_missing", "mesh_agent_token_invalid")
    assert (mesh.presence("a"), mesh.presence("b"), mesh.unacked("b")) == before
    assert len(any_store.events()) == events
