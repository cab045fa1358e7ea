"""Handoff memory in an SQLite store: the tables ``memory_*`` of the store's own file.

Every statement runs on the store's connection inside the store's own snapshot or ``BEGIN
IMMEDIATE`` transaction (``runner.store.sqlite.connection_of``), so a checkpoint, the session it
starts, the retention after it and the event recording them commit together or not at all.
Search uses the FTS5 table ``memory_fts`` (external content: the checkpoints' ``search_text``,
keyed by their row number); where the migration found no FTS5 in this build of SQLite, it is a
scan with ``LIKE`` over the same words (same answers, slower).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from runner.store.abc import Reader, Store, Transaction
from runner.store.memory import (
    CheckpointRecord,
    MemoryReader,
    MemoryStore,
    MemoryTransaction,
    ProjectRecord,
    PruneCounts,
    SessionRecord,
    iter_chunks,
    search_words,
    text_of,
)
from runner.store.sqlite import connection_of, decode_object, encode_json

_SESSION = (
    "SELECT id, project, goal, agent, status, created_at, updated_at, closed_at, last_seq, newest_n"
    " FROM memory_sessions"
)
_CHECKPOINT = (
    "SELECT c.id, c.session_id, c.project, c.seq, c.agent, c.summary, c.status, c.pinned, c.created_at,"
    " c.content_sha256, c.body, c.n, c.origin FROM memory_checkpoints AS c"
)
# Countable by retention: unpinned and not the newest checkpoint of a session that is still open.
_EXEMPT = "SELECT newest_n FROM memory_sessions WHERE status <> 'completed' AND newest_n IS NOT NULL"


def _session(row: tuple[Any, ...]) -> SessionRecord:
    return SessionRecord(*row)


def _checkpoint(row: tuple[Any, ...], path: Path) -> CheckpointRecord:
    body = decode_object(row[10], path, "memory_checkpoints", row[0], "body")
    return CheckpointRecord(
        row[0], row[1], row[2], row[3], row[4], row[5], row[6], bool(row[7]), row[8], row[9], body, row[11], row[12]
    )


class _Reader(MemoryReader):
    def __init__(self, conn: sqlite3.Connection, path: Path, fts: bool) -> None:
        self._conn = conn
        self._path = path
        self._fts = fts

    def project(self, name: str) -> ProjectRecord | None:
        row = self._conn.execute(
            "SELECT name, repository, subdir, common_dir, created_at FROM memory_projects WHERE name = ?", (name,)
        ).fetchone()
        return ProjectRecord(*row) if row else None

    def projects(self) -> list[ProjectRecord]:
        rows = self._conn.execute(
            "SELECT name, repository, subdir, common_dir, created_at FROM memory_projects ORDER BY name"
        )
        return [ProjectRecord(*row) for row in rows]

    def session(self, session_id: str) -> SessionRecord | None:
        row = self._conn.execute(_SESSION + " WHERE id = ?", (session_id,)).fetchone()
        return _session(row) if row else None

    def sessions(
        self, project: str | None = None, statuses: Sequence[str] | None = None, limit: int | None = None
    ) -> list[SessionRecord]:
        sql, args = _SESSION + " WHERE 1", list[Any]()
        if project is not None:
            sql += " AND project = ?"
            args.append(project)
        if statuses is not None:
            wanted = list(statuses)
            sql += f" AND status IN ({', '.join('?' * len(wanted))})" if wanted else " AND 0"
            args += wanted
        sql += " ORDER BY rowid DESC"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        return [_session(row) for row in self._conn.execute(sql, args)]

    def checkpoint(self, checkpoint_id: str) -> CheckpointRecord | None:
        row = self._conn.execute(_CHECKPOINT + " WHERE c.id = ?", (checkpoint_id,)).fetchone()
        return _checkpoint(row, self._path) if row else None

    def checkpoint_by_origin(self, origin: str) -> CheckpointRecord | None:
        row = self._conn.execute(_CHECKPOINT + " WHERE c.origin = ?", (origin,)).fetchone()
        return _checkpoint(row, self._path) if row else None

    def checkpoints(
        self,
        *,
        session_id: str | None = None,
        project: str | None = None,
        pinned: bool | None = None,
        limit: int | None = None,
        before_n: int | None = None,
    ) -> list[CheckpointRecord]:
        sql, args = _CHECKPOINT + " WHERE 1", list[Any]()
        for column, value in (("c.session_id", session_id), ("c.project", project)):
            if value is not None:
                sql += f" AND {column} = ?"
                args.append(value)
        if pinned is not None:
            sql += " AND c.pinned = ?"
            args.append(int(pinned))
        if before_n is not None:
            sql += " AND c.n < ?"
            args.append(before_n)
        sql += " ORDER BY c.n DESC"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        return [_checkpoint(row, self._path) for row in self._conn.execute(sql, args)]

    def search(self, query: str, *, project: str | None = None, limit: int = 20) -> list[CheckpointRecord]:
        words = search_words(query)
        if not words:
            return []
        args: list[Any] = []
        if self._fts:
            # Each word quoted: FTS5 reads it as a string, never as query syntax; juxtaposed means AND.
            # FTS5 as the outer loop, walked by rowid (= n) downwards: the newest matches come first and
            # LIMIT stops the walk, so a word every checkpoint holds costs a page, not a sort of them all.
            sql = _CHECKPOINT + " JOIN memory_fts AS f ON f.rowid = c.n WHERE memory_fts MATCH ?"
            args.append(" ".join(f'"{word}"' for word in words))
        else:
            padded = " || c.search_text || "
            sql = _CHECKPOINT + " WHERE " + " AND ".join(f"(' '{padded}' ') LIKE ?" for _ in words)
            args += [f"% {word} %" for word in words]
        if project is not None:
            sql += " AND c.project = ?"
            args.append(project)
        sql += f" ORDER BY {'f.rowid' if self._fts else 'c.n'} DESC LIMIT {int(limit)}"
        return [_checkpoint(row, self._path) for row in self._conn.execute(sql, args)]

    def count(self, *, project: str | None = None, pinned: bool | None = None) -> int:
        sql, args = "SELECT count(*) FROM memory_checkpoints WHERE 1", list[Any]()
        if project is not None:
            sql += " AND project = ?"
            args.append(project)
        if pinned is not None:
            sql += " AND pinned = ?"
            args.append(int(pinned))
        return int(self._conn.execute(sql, args).fetchone()[0])


class _Transaction(_Reader, MemoryTransaction):
    def __init__(self, conn: sqlite3.Connection, path: Path, fts: bool, tx: Transaction) -> None:
        super().__init__(conn, path, fts)
        self.store_tx = tx

    def add_project(self, project: ProjectRecord) -> None:
        self._conn.execute(
            "INSERT INTO memory_projects (name, repository, subdir, common_dir, created_at) VALUES (?, ?, ?, ?, ?)",
            (project.name, project.repository, project.subdir, project.common_dir, project.created_at),
        )

    def add_session(self, session: SessionRecord) -> None:
        self._conn.execute(
            "INSERT INTO memory_sessions (id, project, goal, agent, status, created_at, updated_at, closed_at,"
            " last_seq, newest_n) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, NULL)",
            (
                session.id,
                session.project,
                session.goal,
                session.agent,
                session.status,
                session.created_at,
                session.updated_at,
                session.closed_at,
            ),
        )

    def set_session_status(self, session_id: str, status: str, at: str, closed_at: str | None) -> None:
        self._conn.execute(
            "UPDATE memory_sessions SET status = ?, updated_at = ?, closed_at = ? WHERE id = ?",
            (status, at, closed_at, session_id),
        )

    def add_checkpoint(self, checkpoint: CheckpointRecord) -> CheckpointRecord:
        # Invariant: seq is the session's last_seq + 1, read and written in this serialized transaction.
        row = self._conn.execute(
            "UPDATE memory_sessions SET last_seq = last_seq + 1, updated_at = ? WHERE id = ? RETURNING last_seq",
            (checkpoint.created_at, checkpoint.session_id),
        ).fetchone()
        if row is None or int(row[0]) != checkpoint.seq:
            raise ValueError(f"checkpoint seq {checkpoint.seq} is not the next of session {checkpoint.session_id}")
        text = " ".join(search_words(text_of(checkpoint)))
        cursor = self._conn.execute(
            "INSERT INTO memory_checkpoints (id, session_id, project, seq, agent, summary, status, pinned, body,"
            " search_text, content_sha256, created_at, origin) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                checkpoint.id,
                checkpoint.session_id,
                checkpoint.project,
                checkpoint.seq,
                checkpoint.agent,
                checkpoint.summary,
                checkpoint.status,
                int(checkpoint.pinned),
                encode_json(dict(checkpoint.body)),
                text,
                checkpoint.content_sha256,
                checkpoint.created_at,
                checkpoint.origin,
            ),
        )
        n = cursor.lastrowid
        assert n is not None
        if self._fts:
            self._conn.execute("INSERT INTO memory_fts (rowid, search_text) VALUES (?, ?)", (n, text))
        self._conn.execute("UPDATE memory_sessions SET newest_n = ? WHERE id = ?", (n, checkpoint.session_id))
        return replace(checkpoint, n=n)

    def set_pinned(self, checkpoint_id: str) -> bool:
        cursor = self._conn.execute(
            "UPDATE memory_checkpoints SET pinned = 1 WHERE id = ? AND pinned = 0", (checkpoint_id,)
        )
        return cursor.rowcount == 1

    def prune(self, session_id: str | None, per_session: int, total: int) -> PruneCounts:
        by_session = 0
        if session_id is not None:
            doomed = [
                int(r[0])
                for r in self._conn.execute(
                    "SELECT n FROM memory_checkpoints WHERE session_id = ? AND pinned = 0"
                    f" AND n NOT IN ({_EXEMPT}) ORDER BY n DESC LIMIT -1 OFFSET ?",
                    (session_id, per_session),
                )
            ]
            by_session = self._delete(doomed)
        countable = int(
            self._conn.execute(
                f"SELECT count(*) FROM memory_checkpoints WHERE pinned = 0 AND n NOT IN ({_EXEMPT})"
            ).fetchone()[0]
        )
        by_total = 0
        if countable > total:
            doomed = [
                int(r[0])
                for r in self._conn.execute(
                    f"SELECT n FROM memory_checkpoints WHERE pinned = 0 AND n NOT IN ({_EXEMPT}) ORDER BY n LIMIT ?",
                    (countable - total,),
                )
            ]
            by_total = self._delete(doomed)
        return PruneCounts(by_session, by_total)

    def _delete(self, numbers: Sequence[int]) -> int:
        deleted = 0
        for chunk in iter_chunks(numbers):
            marks = ", ".join("?" * len(chunk))
            if self._fts:
                # External content: the index forgets a row given the very text it indexed.
                self._conn.execute(
                    "INSERT INTO memory_fts (memory_fts, rowid, search_text)"
                    f" SELECT 'delete', n, search_text FROM memory_checkpoints WHERE n IN ({marks})",
                    list(chunk),
                )
            deleted += self._conn.execute(f"DELETE FROM memory_checkpoints WHERE n IN ({marks})", list(chunk)).rowcount
        return deleted


class SQLiteMemory(MemoryStore):
    """The memory port over one :class:`~runner.store.sqlite.SQLiteStore`."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._fts: bool | None = None

    @property
    def store(self) -> Store:
        return self._store

    def _has_fts(self, conn: sqlite3.Connection) -> bool:
        if self._fts is None:
            row = conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'memory_fts'").fetchone()
            self._fts = row is not None
        return self._fts

    def write(self, tx: Transaction) -> MemoryTransaction:
        conn, path = connection_of(tx)
        return _Transaction(conn, path, self._has_fts(conn), tx)

    def read(self, reader: Reader) -> MemoryReader:
        conn, path = connection_of(reader)
        return _Reader(conn, path, self._has_fts(conn))

    def info(self) -> dict[str, Any]:
        with self._store.read() as reader:
            conn, _ = connection_of(reader)
            fts = self._has_fts(conn)
        return {"adapter": "sqlite", "fts": "fts5" if fts else "like"}


__all__ = ["SQLiteMemory"]
