"""The handoff memory's port (issue 18), run against every registered store (``any_store``).

Part of the store conformance suite: every method of :mod:`runner.store.memory` on every adapter,
retention at its edges (the real limits, 500 per session and 10,000 in all, and the exemptions),
search alike on FTS5 and tsvector, and writes that roll back with the store's transaction.
"""

from __future__ import annotations

import secrets
import sqlite3
from contextlib import closing
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from runner.sql.store_sqlite import SCHEMA_VERSION, SQLiteStore, _run_migration
from runner.store import Store
from runner.store.memory import (
    CheckpointRecord,
    MemoryTransaction,
    ProjectRecord,
    SessionRecord,
    memory_store,
    search_words,
)
from tests.support.stores import sqlite_file_before

STAMP = "2026-01-01T00:00:00.000000Z"


def project(m: MemoryTransaction, name: str = "p") -> None:
    m.add_project(ProjectRecord(name, None, None, None, STAMP))


def session(m: MemoryTransaction, name: str = "p", status: str = "active") -> SessionRecord:
    record = SessionRecord("ses_" + secrets.token_hex(8), name, "goal", "agent", status, STAMP, STAMP)
    m.add_session(record)
    return record


_SEQ: dict[str, int] = {}  # the last seq given per session id (ids are random: never reused)


def add(m: MemoryTransaction, s: SessionRecord, summary: str = "did a thing", **body: Any) -> CheckpointRecord:
    _SEQ[s.id] = _SEQ.get(s.id, 0) + 1
    record = CheckpointRecord(
        "cp_" + secrets.token_hex(8),
        s.id,
        s.project,
        _SEQ[s.id],
        "agent",
        summary,
        "active",
        bool(body.pop("pinned", False)),
        STAMP,
        "0" * 64,
        {"next_steps": ["more"], **body},
    )
    return m.add_checkpoint(record)


def test_every_store_has_a_memory_adapter(any_store: Store) -> None:
    info = memory_store(any_store).info()
    assert info["adapter"] in ("sqlite", "postgresql") and info["fts"] in ("fts5", "like", "tsvector")


def test_projects_sessions_and_checkpoints_round_trip(any_store: Store) -> None:
    memory = memory_store(any_store)
    with memory.transaction() as m:
        m.add_project(ProjectRecord("p", "/src/p", "sub", "/src/p/.git", STAMP))
        s = session(m)
        first = add(m, s, "first", work_done=["wrote it"], files=["a.py"])
        second = add(m, s, "second")
    with memory.snapshot() as r:
        assert r.project("p") == ProjectRecord("p", "/src/p", "sub", "/src/p/.git", STAMP)
        assert [p.name for p in r.projects()] == ["p"]
        got = r.session(s.id)
        assert got is not None and got.last_seq == 2 and got.newest_n == second.n
        assert r.checkpoint(first.id) == first and first.n < second.n
        assert [c.id for c in r.checkpoints(session_id=s.id)] == [second.id, first.id]
        assert [c.id for c in r.checkpoints(project="p", limit=1)] == [second.id]
        assert [c.id for c in r.checkpoints(project="p", before_n=second.n)] == [first.id]
        assert r.checkpoints(project="other") == [] and r.checkpoint("cp_0000000000000000") is None
        assert r.count() == 2 and r.count(project="p", pinned=True) == 0
        assert [x.id for x in r.sessions("p", ["active"])] == [s.id] and r.sessions("p", ["completed"]) == []


def test_sessions_list_newest_first(any_store: Store) -> None:
    memory = memory_store(any_store)
    with memory.transaction() as m:
        project(m)
        made = [session(m) for _ in range(3)]
        m.set_session_status(made[1].id, "completed", STAMP, STAMP)
    with memory.snapshot() as r:
        assert [s.id for s in r.sessions("p")] == [s.id for s in reversed(made)]
        assert [s.id for s in r.sessions("p", ["active", "paused", "blocked"], limit=1)] == [made[2].id]
        closed = r.session(made[1].id)
        assert closed is not None and (closed.status, closed.closed_at) == ("completed", STAMP)


def test_a_checkpoint_seq_must_be_the_next(any_store: Store) -> None:
    memory = memory_store(any_store)
    with memory.transaction() as m:
        project(m)
        s = session(m)
    with pytest.raises(ValueError, match="not the next"), memory.transaction() as m:
        m.add_checkpoint(
            CheckpointRecord("cp_" + secrets.token_hex(8), s.id, "p", 5, "a", "s", "active", False, STAMP, "0" * 64)
        )
    with memory.snapshot() as r:
        assert r.count() == 0, "nothing half-written"


def test_memory_writes_roll_back_with_the_store_transaction(any_store: Store) -> None:
    memory = memory_store(any_store)
    with pytest.raises(RuntimeError), memory.transaction() as m:
        project(m)
        add(m, session(m))
        raise RuntimeError("abort")
    with memory.snapshot() as r:
        assert r.projects() == [] and r.count() == 0 and r.search("thing") == []


def test_pinning(any_store: Store) -> None:
    memory = memory_store(any_store)
    with memory.transaction() as m:
        project(m)
        c = add(m, session(m))
        assert m.set_pinned(c.id) is True
        assert m.set_pinned(c.id) is False
        assert m.set_pinned("cp_0000000000000000") is False
    with memory.snapshot() as r:
        got = r.checkpoint(c.id)
        assert got is not None and got.pinned
        assert [x.id for x in r.checkpoints(pinned=True)] == [c.id] and r.count(pinned=True) == 1


def test_search_matches_every_word_newest_first_alike_on_every_store(any_store: Store) -> None:
    memory = memory_store(any_store)
    with memory.transaction() as m:
        project(m)
        project(m, "q")
        s, t = session(m), session(m, "q")
        a = add(m, s, "Fixed the parser", files=["runner/cli.py"])
        b = add(m, s, "parser tests", next_steps=["run the CLI suite"])
        c = add(m, t, "unrelated", blockers=["parser server down"])
    with memory.snapshot() as r:
        assert [x.id for x in r.search("parser")] == [c.id, b.id, a.id]
        assert [x.id for x in r.search("PARSER cli")] == [b.id, a.id], "words of files and steps count, any case"
        assert [x.id for x in r.search("parser", project="q")] == [c.id]
        assert [x.id for x in r.search("parser", limit=1)] == [c.id]
        assert r.search("nothing-here-xyz") == [] and r.search("  ...  ") == []
        assert [x.id for x in r.search('parser" OR "x')] == [], "quotes and operators are words, not syntax"
        assert [x.id for x in r.search("runner/cli.py")] == [a.id]


def test_search_words() -> None:
    assert search_words("Runner/cli.py: fix_it, 2 times!") == ["runner", "cli", "py", "fix", "it", "2", "times"]
    assert search_words("--- ...") == []


def test_a_pruned_checkpoint_leaves_the_search_index(any_store: Store) -> None:
    memory = memory_store(any_store)
    with memory.transaction() as m:
        project(m)
        s = session(m)
        old = add(m, s, "zebra crossing")
        add(m, s, "elephant")
        assert m.prune(s.id, 0, 100).session == 1
    with memory.snapshot() as r:
        assert r.checkpoint(old.id) is None and r.search("zebra") == []
        assert [x.summary for x in r.search("elephant")] == ["elephant"]


def test_retention_per_session_at_the_edge_of_500(any_store: Store) -> None:
    memory = memory_store(any_store)
    with memory.transaction() as m:
        project(m)
        s = session(m)
        pinned = add(m, s, "pinned early", pinned=True)
        made = [add(m, s, f"n{i}") for i in range(501)]
        # 501 unpinned, the newest exempt (its session is open): 500 countable, none over.
        assert m.prune(s.id, 500, 10_000).deleted == 0
        newest = add(m, s, "one more")
        # Now 501 countable: exactly the oldest unpinned one goes; the pinned one never does.
        counts = m.prune(s.id, 500, 10_000)
        assert (counts.session, counts.total) == (1, 0)
    with memory.snapshot() as r:
        assert r.checkpoint(made[0].id) is None and r.checkpoint(made[1].id) is not None
        assert r.checkpoint(pinned.id) is not None and r.checkpoint(newest.id) is not None
        assert r.count(pinned=False) == 501


@pytest.mark.slow
def test_retention_in_total_at_the_edge_of_10000(any_store: Store) -> None:
    memory = memory_store(any_store)
    with memory.transaction() as m:
        project(m)
        sessions = [session(m) for _ in range(21)]
        for s in sessions[:20]:
            for i in range(500):
                add(m, s, f"c{i}")
        # 20 open sessions x 500, each newest exempt: 9,980 countable.
        closed = sessions[0]
        m.set_session_status(closed.id, "completed", STAMP, STAMP)
        # Its newest counts now: 9,981. Twenty in the last session, its newest exempt: 10,000, at the limit;
        # one more is one over, and the store's oldest countable checkpoint goes.
        for i in range(20):
            add(m, sessions[20], f"late{i}")
        assert m.prune(sessions[20].id, 500, 10_000).deleted == 0
        oldest = m.checkpoints(session_id=closed.id, limit=500)[-1]
        add(m, sessions[20], "over")
        counts = m.prune(sessions[20].id, 500, 10_000)
        assert (counts.session, counts.total) == (0, 1)
    with memory.snapshot() as r:
        assert r.checkpoint(oldest.id) is None, "the oldest countable checkpoint of the store went"
        for s in sessions[1:]:
            newest = r.session(s.id)
            assert newest is not None and newest.newest_n is not None
            assert r.checkpoints(session_id=s.id, limit=1)[0].n == newest.newest_n, "open sessions keep their newest"


def test_retention_exempts_pinned_and_newest_of_open_sessions_only(any_store: Store) -> None:
    memory = memory_store(any_store)
    with memory.transaction() as m:
        project(m)
        open_s, done_s = session(m), session(m)
        keep_open = add(m, open_s, "open newest")
        pin = add(m, done_s, "pinned", pinned=True)
        done_newest = add(m, done_s, "done newest")
        m.set_session_status(done_s.id, "completed", STAMP, STAMP)
        counts = m.prune(None, 0, 0)
        assert counts == replace(counts, session=0, total=1)
    with memory.snapshot() as r:
        assert r.checkpoint(keep_open.id) is not None and r.checkpoint(pin.id) is not None
        assert r.checkpoint(done_newest.id) is None, "a completed session's newest counts and goes"


def test_sqlite_without_fts5_searches_by_a_scan_with_the_same_answers(tmp_path: Path) -> None:
    """How a build of SQLite without FTS5 degrades: the migration skips ``memory_fts`` (see
    ``runner.sql.store_sqlite._run_migration``) and search scans the same words with LIKE."""
    path = tmp_path / "s.db"
    with SQLiteStore(path) as store:
        memory = memory_store(store)
        with memory.transaction() as m:
            project(m)
            s = session(m)
            a = add(m, s, "Fixed the parser", files=["runner/cli.py"])
            b = add(m, s, "parser tests")
            add(m, s, "parsers plural")
        with memory.snapshot() as r:
            with_fts = {q: [x.id for x in r.search(q)] for q in ("parser", "cli parser", "py", "nothing")}
    with closing(sqlite3.connect(path)) as raw:
        raw.execute("DROP TABLE memory_fts")
        raw.commit()
    with SQLiteStore(path) as store:
        memory = memory_store(store)
        assert memory.info()["fts"] == "like"
        with memory.snapshot() as r:
            assert {q: [x.id for x in r.search(q)] for q in with_fts} == with_fts
            assert with_fts["parser"] == [b.id, a.id]
        with memory.transaction() as m:
            m.prune(s.id, 0, 100)  # deleting without the index works too
        with memory.snapshot() as r:
            assert r.count() == 1


def test_a_migration_statement_needing_a_missing_module_is_skipped_only_for_memory_fts() -> None:
    conn = sqlite3.connect(":memory:")
    _run_migration(conn, "CREATE VIRTUAL TABLE memory_fts USING fts5nope (search_text)")
    with pytest.raises(sqlite3.OperationalError, match="no such module"):
        _run_migration(conn, "CREATE VIRTUAL TABLE other USING fts5nope (x)")
    conn.close()


def test_a_store_of_the_schema_before_memory_migrates_forward(tmp_path: Path) -> None:
    """A store written before issue 18 opens, gains the memory tables (and the FTS5 index), keeps its rows."""
    path = tmp_path / "old.db"
    sqlite_file_before(path, "CREATE TABLE memory_projects")
    with SQLiteStore(path) as store:
        assert store.info()["schema_version"] == SCHEMA_VERSION and store.get("a/1") is not None
        memory = memory_store(store)
        assert memory.info()["fts"] == "fts5"
        with memory.transaction() as m:
            project(m)
            add(m, session(m), "migrated")
        with memory.snapshot() as r:
            assert [c.summary for c in r.search("migrated")] == ["migrated"]
