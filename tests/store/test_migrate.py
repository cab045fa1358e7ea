"""Moving a store (issue 16): ``export_rows`` / ``import_rows`` on every store kind, from one kind to
another (SQLite to PostgreSQL and back), and ``corral store migrate`` / ``corral store info``.

A filled store holds something in every table: instances with parts written in a non-sorted order,
events with a pruned prefix (a retention floor) and a rolled-back transaction's gap-free log, claims,
counters, agent slots (the process host's slot port), idempotency records, the agent mesh (agents
checked in, messages acked and not) and handoff memory (a project, two sessions, checkpoints, one
pinned), the last two written through the service. The copy must read back identical (every row, in
order, the same digest), keep the store's id, floor and last seq (the next event continues the
sequence), leave the target working (memory search finds the copied checkpoints, the next checkpoint
and the next message take fresh numbers, the inbox shows what was unacked), refuse a non-empty target
leaving it as it was, and write nothing when its check before the commit fails.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from contextlib import closing
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from runner.agents.slots import AgentSlot, slot_store
from runner.context import Instance
from runner.definitions.library import Library
from runner.errors import CorralError, RefusedError
from runner.service import Service
from runner.service.inputs.memory import CheckpointInput, PinInput, SearchInput
from runner.service.inputs.mesh import AckInput, AgentsInput, CheckinInput, InboxInput, SendInput
from runner.service.stores import Tally, migrate_store, store_info
from runner.store import Store, open_store
from runner.store.memory import memory_store
from tests.conftest import FakeClock
from tests.support.stores import StoreKind, kind_for

REPO = Path(__file__).resolve().parents[2]


def fill(store: Store) -> None:
    """Something in every table the copy moves."""
    for n in range(12):
        with store.write() as tx:
            made = tx.put(Instance(f"thing/{n:02d}", "thing", "start", 0, {}), "a", {"n": n, "text": "é\u2028"})
            tx.append(made, "make", "start", "filler", {"n": n})
            for key in ("zeta", "alpha", f"k{n}"):  # first-write order is not key order
                tx.put_part(made.id, key, {"key": key})
            tx.set_claims(made.id, [("/repo", "owned", f"src/{n}"), ("/", "worktree", f"wt/{n}")])
            tx.next_number("things")
    with store.write() as tx:
        current = tx.get("thing/03")
        assert current is not None
        moved = tx.put(current, "b", {"n": 3, "moved": True})
        tx.append(moved, "move", "a", "filler", {})
    store.prune_events(before=4)  # a floor: events 1..3 are gone
    slots = slot_store(store)
    with slots.write() as stx:
        number = stx.store_tx.next_number("pane")
        slot = stx.put_slot(AgentSlot(f"p{number}", "rev", "script", "/w", "idle", 0, options={"o": 1}, dir="/d"), None)
    with slots.write() as stx:
        stx.put_slot(replace(slot, status="done", seq=1, exit_status=0, closed=True), 0)
    assert store.reserve_idempotency("key-1", "a" * 64, 600) is None
    assert store.complete_idempotency("key-1", 201, '{"ok":true}')
    assert store.reserve_idempotency("key-2", "b" * 64, 600) is None
    fill_mesh_and_memory(service_on(store))


def service_on(store: Store) -> Service:
    return Service(store, Library(cache_dir=None), actor="test")


TOKENS: dict[str, dict[str, str]] = {}
"""The agent tokens each filled store's check-ins answered, by the store's URL (a move carries their hashes)."""


def fill_mesh_and_memory(service: Service) -> None:
    """The agent mesh and handoff memory, through the service: what a move must carry besides the rest."""
    mesh = service.mesh
    tokens = TOKENS[service.core.store.url] = {}
    for inp in (
        CheckinInput("rev-agent", role="reviewer", repo="/repo", caps=("review",), pane="p1"),
        CheckinInput("boss", role="builder"),
        CheckinInput("peer", role="reviewer"),
    ):
        tokens[inp.agent_id] = mesh.checkin(inp)["agent_token"]
    boss = tokens["boss"]
    mesh.send(SendInput("boss", "read me", "a note, unacked", to="rev-agent", agent_token=boss))
    both = mesh.send(
        SendInput("boss", "to the reviewers", "acked by one of two", to_role="reviewer", urgent=True, agent_token=boss)
    )
    mesh.ack(AckInput("rev-agent", (both["message_id"],), tokens["rev-agent"]))  # a fully acked one would be pruned
    memory = service.memory
    one = memory.checkpoint(
        CheckpointInput("agent-1", "wrote the zephyr port", project="p", goal="the goal", next_steps=("test it",))
    )
    memory.checkpoint(CheckpointInput("agent-1", "zephyr tests pass", session_id=one["session_id"], status="completed"))
    memory.pin(PinInput(one["checkpoint"]["id"]))
    two = memory.checkpoint(
        CheckpointInput("agent-2", "the zephyr docs", project="p", goal="the docs", next_steps=("review",))
    )
    memory.checkpoint(
        CheckpointInput("agent-2", "pinned on the way", session_id=two["session_id"], next_steps=("more",), pinned=True)
    )


def assert_it_works_after_the_move(source: Store, target: Store) -> None:
    """The moved mesh and memory are live on ``target``, not just rows: search finds the copied
    checkpoints (the index rebuilt or regenerated), sessions list in the source's order, the next
    checkpoint and the next message take numbers past every copied one, the unacked message is there."""
    service = service_on(target)
    tokens = TOKENS[source.url]  # the agents keep their identities across the move
    memory = memory_store(source)
    with source.read() as reader:
        before = memory.read(reader).checkpoints()
        sessions = [s.id for s in memory.read(reader).sessions()]
    with target.read() as reader:
        assert memory_store(target).read(reader).checkpoints() == before, "n and pinned kept"
        assert [s.id for s in memory_store(target).read(reader).sessions()] == sessions, "newest first, kept"
    found = service.memory.search(SearchInput("zephyr"))["checkpoints"]
    assert len(found) == 3 and {c["summary"] for c in found} == {c.summary for c in before if "zephyr" in c.summary}
    assert [c["pinned"] for c in service.memory.search(SearchInput("wrote zephyr"))["checkpoints"]] == [True]
    newest = max(c.n for c in before if c.n is not None)
    open_session = next(c.session_id for c in before if c.agent == "agent-2")
    made = service.memory.checkpoint(
        CheckpointInput("agent-3", "after the zephyr move", session_id=open_session, next_steps=("go on",))
    )
    assert made["checkpoint"]["seq"] == 3, "the session's seq continues"
    with target.read() as reader:
        added = memory_store(target).read(reader).checkpoint(made["checkpoint"]["id"])
        session = memory_store(target).read(reader).session(open_session)
    assert added is not None and added.n == newest + 1, "the next checkpoint's n continues past the copied ones"
    assert session is not None and session.newest_n == added.n
    assert len(service.memory.search(SearchInput("zephyr"))["checkpoints"]) == 4
    inbox = service.mesh.inbox(InboxInput("rev-agent", agent_token=tokens["rev-agent"]))
    assert [m["subject"] for m in inbox["messages"]] == ["read me"] and inbox["unacked"] == 1
    assert [m["subject"] for m in service.mesh.inbox(InboxInput("peer", agent_token=tokens["peer"]))["messages"]] == [
        "to the reviewers"
    ]
    everyone = service.mesh.agents(AgentsInput(include_expired=True))["agents"]
    assert {a["agent_id"] for a in everyone} == {"boss", "peer", "rev-agent"}
    old_seq = max(row[0] for table, row in rows(source) if table == "mesh_messages")
    sent = service.mesh.send(
        SendInput("boss", "after the move", "a new note", to="rev-agent", agent_token=tokens["boss"])
    )
    assert sent["seq"] == old_seq + 1, "the next message continues the mesh's sequence"
    inbox = service.mesh.inbox(InboxInput("rev-agent", agent_token=tokens["rev-agent"]))
    assert [m["subject"] for m in inbox["messages"]] == ["read me", "after the move"]
    sizes = target.sizes()
    assert (sizes["mesh_agents"], sizes["mesh_messages"], sizes["mesh_deliveries"]) == (3, 3, 4)
    assert (sizes["memory_projects"], sizes["memory_sessions"], sizes["memory_checkpoints"]) == (1, 2, 5)


def rows(store: Store) -> list[tuple[str, tuple[Any, ...]]]:
    return list(store.export_rows())


def nothing_checked(_: Any) -> None:
    """A verify that accepts anything (the port's own tests compare the rows themselves)."""


@pytest.fixture
def filled(store_kind: StoreKind, tmp_path: Path, clock: FakeClock) -> Any:
    (tmp_path / "a").mkdir()
    with store_kind.open(store_kind.url(tmp_path / "a"), clock=clock) as store:
        fill(store)
        yield store


def test_a_copy_reads_back_the_same_rows_and_continues_the_sequence(
    filled: Store, store_kind: StoreKind, tmp_path: Path, clock: FakeClock
) -> None:
    source = rows(filled)
    tables = [table for table, _ in source]
    assert tables == sorted(tables, key=list(dict.fromkeys(tables)).index), "one table after another"
    assert set(tables) == {
        "store_meta", "instances", "instance_parts", "events", "claims", "counters", "agent_slots", "idempotency",
        "mesh_agents", "mesh_messages", "mesh_deliveries", "memory_projects", "memory_sessions", "memory_checkpoints",
    }  # fmt: skip
    assert {type(v) for _, row in source for v in row} <= {str, int, bool, type(None)}, "portable values"
    (tmp_path / "b").mkdir()
    with store_kind.open(store_kind.url(tmp_path / "b"), clock=clock) as target:
        seen: list[Any] = []
        target.import_rows(iter(source), seen.extend)
        assert seen == source, "verify is handed the target's own export, inside the transaction"
        assert rows(target) == source
        assert target.info()["store_id"] == filled.info()["store_id"], "the same store, moved"
        assert target.retention_floor() == filled.retention_floor() == 3
        assert [e.seq for e in target.events(3)] == [e.seq for e in filled.events(3)]
        with target.read() as reader:
            parts = reader.parts("thing/05")
        assert list(parts) == ["zeta", "alpha", "k5"], "parts keep their first-write order"
        with target.write() as tx:
            thing = tx.get("thing/00")
            assert thing is not None
            event = tx.append(tx.put(thing, "b", {}), "go", "a", "t", {})
        assert event.seq == filled.events(3)[-1].seq + 1, "the next event continues the sequence"
        assert target.sizes()["instances"] == 12 and target.sizes()["events"] == filled.sizes()["events"] + 1
        assert_it_works_after_the_move(filled, target)


def test_a_non_empty_target_is_refused_and_left_as_it_was(
    filled: Store, store_kind: StoreKind, tmp_path: Path, clock: FakeClock
) -> None:
    (tmp_path / "b").mkdir()
    with store_kind.open(store_kind.url(tmp_path / "b"), clock=clock) as target:
        with target.write() as tx:
            tx.next_number("one")
        before = rows(target)
        with pytest.raises(RefusedError) as caught:
            target.import_rows(iter(rows(filled)), nothing_checked)
        assert caught.value.code == "store_not_empty" and caught.value.status.exit == 4
        assert caught.value.details["rows"] == {"counters": 1}
        assert rows(target) == before


def test_a_failed_check_before_the_commit_writes_nothing(
    filled: Store, store_kind: StoreKind, tmp_path: Path, clock: FakeClock
) -> None:
    (tmp_path / "b").mkdir()
    with store_kind.open(store_kind.url(tmp_path / "b"), clock=clock) as target:
        empty = rows(target)

        def refuse(written: Any) -> None:
            assert len(list(written)) > 10
            raise CorralError("the check failed", code="store_copy_mismatch")

        with pytest.raises(CorralError, match="the check failed"):
            target.import_rows(iter(rows(filled)), refuse)
        assert rows(target) == empty and target.sizes()["events"] == 0
        target.import_rows(iter(rows(filled)), nothing_checked)  # and the same copy then goes through
        assert rows(target) == rows(filled)


@pytest.mark.parametrize(("source_kind", "target_kind"), [("sqlite", "postgresql"), ("postgresql", "sqlite")])
def test_a_store_moves_between_adapters_verified(
    request: pytest.FixtureRequest, tmp_path: Path, source_kind: str, target_kind: str
) -> None:
    source_factory, target_factory = kind_for(source_kind, request), kind_for(target_kind, request)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    source_url, target_url = source_factory.url(tmp_path / "a"), target_factory.url(tmp_path / "b")
    with open_store(source_url) as source:
        fill(source)
        expected = rows(source)
    done = migrate_store(source_url, target_url)
    read = Tally()
    for table, row in expected:
        read.add(table, row)
    assert done["verified"] is True and done["digest"] == read.digest
    assert done["counts"] == read.counts and done["counts"]["events"] == len(expected) - sum(
        1 for t, _ in expected if t != "events"
    )
    with open_store(target_url) as target:
        assert rows(target) == expected
        info = store_info(target)
        with open_store(source_url) as source:
            assert_it_works_after_the_move(source, target)
    assert info["adapter"] == target_kind and info["sizes"]["agent_slots"] == 1 and info["sizes"]["bytes"] > 0
    assert {t: info["sizes"][t] for t in info["sizes"] if t.startswith(("mesh_", "memory_"))} == {
        "mesh_agents": 3, "mesh_messages": 2, "mesh_deliveries": 3,
        "memory_projects": 1, "memory_sessions": 2, "memory_checkpoints": 4,
    }  # fmt: skip
    with pytest.raises(RefusedError) as caught:
        migrate_store(source_url, target_url)
    assert caught.value.code == "store_not_empty"


@pytest.mark.parametrize("source_kind", ["sqlite", "postgresql"])
def test_a_store_moves_into_an_sqlite_without_fts5_and_searches_by_a_scan(
    request: pytest.FixtureRequest, tmp_path: Path, source_kind: str
) -> None:
    """A build of SQLite without FTS5 has no ``memory_fts`` (its migration skipped it): the move skips
    the index's rebuild there, and search finds the copied checkpoints by a scan."""
    (tmp_path / "a").mkdir()
    source_url = kind_for(source_kind, request).url(tmp_path / "a")
    db = tmp_path / "plain.db"
    open_store(f"sqlite://{db}").close()
    with closing(sqlite3.connect(db)) as raw:
        raw.execute("DROP TABLE memory_fts")
        raw.commit()
    with open_store(source_url) as source:
        fill(source)
    assert migrate_store(source_url, f"sqlite://{db}")["verified"] is True
    with open_store(source_url) as source, open_store(f"sqlite://{db}") as target:
        assert rows(target) == rows(source)
        assert service_on(target).memory.search(SearchInput("zephyr"))["fts"] == "like"
        assert_it_works_after_the_move(source, target)


def _corral(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runner.cli", *args],
        capture_output=True,
        text=True,
        env={**env, "PYTHONPATH": str(REPO)},
        timeout=120,
        check=False,
    )


def test_corral_store_migrate_and_info(request: pytest.FixtureRequest, tmp_path: Path, cli_env: dict[str, str]) -> None:
    pg = kind_for("postgresql", request)
    db = tmp_path / "old.db"
    with open_store(f"sqlite://{db}") as source:
        fill(source)
        store_id = source.info()["store_id"]
    target = pg.url(tmp_path).replace("postgresql://postgres@", "postgresql://postgres:hunter2@", 1)
    moved = _corral(cli_env, "store", "migrate", "--from", f"sqlite://{db}", "--to", target, "--json")
    assert moved.returncode == 0, moved.stdout + moved.stderr
    done = json.loads(moved.stdout)
    assert done["verified"] is True and done["to"]["store_id"] == store_id == done["from"]["store_id"]
    assert done["counts"]["instances"] == 12 and done["counts"]["agent_slots"] == 1
    assert done["counts"]["memory_checkpoints"] == 4 and done["counts"]["mesh_deliveries"] == 3
    assert "hunter2" not in moved.stdout, "a password never shows"
    info = _corral(cli_env, "--store", target, "store", "info", "--json")
    assert info.returncode == 0, info.stderr
    shown = json.loads(info.stdout)
    assert (shown["adapter"], shown["store_id"], shown["retention_floor"]) == ("postgresql", store_id, 3)
    assert shown["schema_version"] >= 1 and shown["sizes"]["events"] == done["counts"]["events"]
    assert (shown["sizes"]["memory_sessions"], shown["sizes"]["mesh_messages"]) == (2, 2)
    assert "hunter2" not in info.stdout
    text = _corral(cli_env, "--store", f"sqlite://{db}", "store", "info")
    assert text.returncode == 0 and f"store_id: {store_id}" in text.stdout and "instances" in text.stdout
    assert "memory_checkpoints" in text.stdout and "mesh_agents" in text.stdout
    again = _corral(cli_env, "store", "migrate", "--from", f"sqlite://{db}", "--to", target, "--json")
    assert again.returncode == 4 and json.loads(again.stdout)["error"]["code"] == "store_not_empty"
    assert "hunter2" not in again.stdout + again.stderr
    missing = _corral(cli_env, "store", "migrate", "--from", f"sqlite://{tmp_path}/none.db", "--to", target, "--json")
    assert missing.returncode == 3, missing.stdout + missing.stderr
    error = json.loads(missing.stdout)["error"]
    assert (error["code"], error["details"]["field"]) == ("store_url_invalid", "from")
    assert not (tmp_path / "none.db").exists(), "a missing source is not created"


def test_a_credential_works_on_the_moved_store_and_never_holds_its_password(
    request: pytest.FixtureRequest, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """Acquire on SQLite, move the store to PostgreSQL (its id kept), renew there with the same file: the
    credential is bound to the store's id, not to the URL it was issued under."""
    pg = kind_for("postgresql", request)
    db = tmp_path / "old.db"
    old = f"sqlite://{db}"
    sha = "d" * 64
    got = _corral(cli_env, "--store", old, "controller", "acquire", "--controller", "ctl",
                  "--authority-ref", "T-1", "--authority-sha256", sha, "--json")  # fmt: skip
    assert got.returncode == 0, got.stdout + got.stderr
    target = pg.url(tmp_path).replace("postgresql://postgres@", "postgresql://postgres:hunter2@", 1)
    assert _corral(cli_env, "store", "migrate", "--from", old, "--to", target).returncode == 0
    spelled = target.replace("postgresql://", "postgres://", 1)  # libpq's other spelling: the same store
    renewed = _corral(cli_env, "--store", spelled, "controller", "renew", "--controller", "ctl", "--json")
    assert renewed.returncode == 0, renewed.stdout + renewed.stderr
    file = Path(cli_env["CORRAL_HOME"]) / "credentials" / "ctl.json"
    resumed = _corral(cli_env, "--store", target, "controller", "resume", "--controller", "ctl", "--json")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    doc = json.loads(file.read_text())
    assert "hunter2" not in file.read_text() and doc["store"].startswith("postgresql://postgres@")
    with open_store(target) as moved:
        assert doc["store_id"] == moved.info()["store_id"]
    fresh = tmp_path / "fresh.db"  # another store at all: refused, naming both
    other = _corral(cli_env, "--store", f"sqlite://{fresh}", "controller", "renew", "--controller", "ctl", "--json")
    assert other.returncode == 3 and json.loads(other.stdout)["error"]["code"] == "credential_store_mismatch"
