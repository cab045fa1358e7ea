"""Handoff memory in a PostgreSQL store: the tables ``memory_*`` of the store's own schema.

Every statement runs on the store's connection inside the store's own snapshot or writing
transaction (``runner.store.postgres.connection_of``). A writing transaction holds the store's one
advisory write lock from its first statement to its commit (``runner.store.postgres``), so the
check-and-create of a session by project is serialized exactly as ``BEGIN IMMEDIATE`` serializes
it on SQLite: no finer lock is taken, none is needed. Search matches a stored ``tsvector`` of the
checkpoint's words (``'simple'`` configuration) through a GIN index.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from runner.store.abc import Reader, Store, Transaction
from runner.store.memory import (
    CheckpointRecord,
    MemoryReader,
    MemoryStore,
    MemoryTransaction,
    ProjectRecord,
    PruneCounts,
    SessionRecord,
    search_words,
    text_of,
)
from runner.store.postgres import PostgresStore, connection_of, decode_object, encode_json

if TYPE_CHECKING:
    import psycopg

_SESSION = (
    "SELECT id, project, goal, agent, status, created_at, updated_at, closed_at, last_seq, newest_n"
    " FROM memory_sessions"
)
_CHECKPOINT = (
    "SELECT c.id, c.session_id, c.project, c.seq, c.agent, c.summary, c.status, c.pinned, c.created_at,"
    " c.content_sha256, c.body, c.n, c.origin FROM memory_checkpoints AS c"
)
_DENSE = 1000  # matches from which a search walks the checkpoints newest first instead of sorting them
_EXEMPT = "SELECT newest_n FROM memory_sessions WHERE status <> 'completed' AND newest_n IS NOT NULL"


class _Reader(MemoryReader):
    def __init__(self, conn: psycopg.Connection[Any], store: PostgresStore) -> None:
        self._conn = conn
        self._store = store

    def _checkpoint(self, row: tuple[Any, ...]) -> CheckpointRecord:
        body = decode_object(row[10], self._store, "memory_checkpoints", row[0], "body")
        return CheckpointRecord(
            row[0], row[1], row[2], row[3], row[4], row[5], row[6], bool(row[7]), row[8], row[9], body,
            int(row[11]), row[12],
        )  # fmt: skip

    def project(self, name: str) -> ProjectRecord | None:
        row = self._conn.execute(
            "SELECT name, repository, subdir, common_dir, created_at FROM memory_projects WHERE name = %s", (name,)
        ).fetchone()
        return ProjectRecord(*row) if row else None

    def projects(self) -> list[ProjectRecord]:
        rows = self._conn.execute(
            "SELECT name, repository, subdir, common_dir, created_at FROM memory_projects ORDER BY name"
        )
        return [ProjectRecord(*row) for row in rows]

    def session(self, session_id: str) -> SessionRecord | None:
        row = self._conn.execute(_SESSION + " WHERE id = %s", (session_id,)).fetchone()
        return SessionRecord(*row) if row else None

    def sessions(
        self, project: str | None = None, statuses: Sequence[str] | None = None, limit: int | None = None
    ) -> list[SessionRecord]:
        sql, args = _SESSION + " WHERE true", list[Any]()
        if project is not None:
            sql += " AND project = %s"
            args.append(project)
        if statuses is not None:
            sql += " AND status = ANY(%s)"
            args.append(list(statuses))
        sql += " ORDER BY n DESC"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        return [SessionRecord(*row) for row in self._conn.execute(sql, args)]

    def checkpoint(self, checkpoint_id: str) -> CheckpointRecord | None:
        row = self._conn.execute(_CHECKPOINT + " WHERE c.id = %s", (checkpoint_id,)).fetchone()
        return self._checkpoint(row) if row else None

    def checkpoint_by_origin(self, origin: str) -> CheckpointRecord | None:
        row = self._conn.execute(_CHECKPOINT + " WHERE c.origin = %s", (origin,)).fetchone()
        return self._checkpoint(row) if row else None

    def checkpoints(
        self,
        *,
        session_id: str | None = None,
        project: str | None = None,
        pinned: bool | None = None,
        limit: int | None = None,
        before_n: int | None = None,
    ) -> list[CheckpointRecord]:
        sql, args = _CHECKPOINT + " WHERE true", list[Any]()
        for column, value in (("c.session_id", session_id), ("c.project", project), ("c.pinned", pinned)):
            if value is not None:
                sql += f" AND {column} = %s"
                args.append(value)
        if before_n is not None:
            sql += " AND c.n < %s"
            args.append(before_n)
        sql += " ORDER BY c.n DESC"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        return [self._checkpoint(row) for row in self._conn.execute(sql, args)]

    def search(self, query: str, *, project: str | None = None, limit: int = 20) -> list[CheckpointRecord]:
        words = search_words(query)
        if not words:
            return []
        # The words as one AND query of lexemes; plainto_tsquery reads them as text, never as syntax.
        where = " WHERE c.search @@ plainto_tsquery('simple', %s)"
        args: list[Any] = [" ".join(words)]
        if project is not None:
            where += " AND c.project = %s"
            args.append(project)
        # Why two plans: the newest matches of a common word are found fastest walking n downwards (they
        # are dense), those of a rare one through the GIN index and a sort of the few it finds; the
        # planner cannot tell a rare word from a common one (its estimate of an unknown lexeme is a
        # constant), so a bounded probe through the index decides.
        probe = self._conn.execute(
            f"SELECT count(*) FROM (SELECT 1 FROM memory_checkpoints AS c{where} LIMIT {_DENSE}) AS m", args
        ).fetchone()
        order = "c.n" if probe is not None and int(probe[0]) >= _DENSE else "c.n + 0"  # + 0: not the index's order
        sql = _CHECKPOINT + where + f" ORDER BY {order} DESC LIMIT {int(limit)}"
        return [self._checkpoint(row) for row in self._conn.execute(sql, args)]

    def count(self, *, project: str | None = None, pinned: bool | None = None) -> int:
        sql, args = "SELECT count(*) FROM memory_checkpoints WHERE true", list[Any]()
        if project is not None:
            sql += " AND project = %s"
            args.append(project)
        if pinned is not None:
            sql += " AND pinned = %s"
            args.append(pinned)
        row = self._conn.execute(sql, args).fetchone()
        return int(row[0]) if row else 0


class _Transaction(_Reader, MemoryTransaction):
    def __init__(self, conn: psycopg.Connection[Any], store: PostgresStore, tx: Transaction) -> None:
        super().__init__(conn, store)
        self.store_tx = tx

    def add_project(self, project: ProjectRecord) -> None:
        self._conn.execute(
            "INSERT INTO memory_projects (name, repository, subdir, common_dir, created_at)"
            " VALUES (%s, %s, %s, %s, %s)",
            (project.name, project.repository, project.subdir, project.common_dir, project.created_at),
        )

    def add_session(self, session: SessionRecord) -> None:
        self._conn.execute(
            "INSERT INTO memory_sessions (id, project, goal, agent, status, created_at, updated_at, closed_at,"
            " last_seq, newest_n) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, 0, NULL)",
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
            "UPDATE memory_sessions SET status = %s, updated_at = %s, closed_at = %s WHERE id = %s",
            (status, at, closed_at, session_id),
        )

    def add_checkpoint(self, checkpoint: CheckpointRecord) -> CheckpointRecord:
        # Invariant: seq is the session's last_seq + 1, read and written under the store's write lock.
        row = self._conn.execute(
            "UPDATE memory_sessions SET last_seq = last_seq + 1, updated_at = %s WHERE id = %s RETURNING last_seq",
            (checkpoint.created_at, checkpoint.session_id),
        ).fetchone()
        if row is None or int(row[0]) != checkpoint.seq:
            raise ValueError(f"checkpoint seq {checkpoint.seq} is not the next of session {checkpoint.session_id}")
        found = self._conn.execute(
            "INSERT INTO memory_checkpoints (id, session_id, project, seq, agent, summary, status, pinned, body,"
            " search_text, content_sha256, created_at, origin)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
            " RETURNING n",
            (
                checkpoint.id,
                checkpoint.session_id,
                checkpoint.project,
                checkpoint.seq,
                checkpoint.agent,
                checkpoint.summary,
                checkpoint.status,
                checkpoint.pinned,
                encode_json(dict(checkpoint.body)),
                " ".join(search_words(text_of(checkpoint))),
                checkpoint.content_sha256,
                checkpoint.created_at,
                checkpoint.origin,
            ),
        ).fetchone()
        assert found is not None
        n = int(found[0])
        self._conn.execute("UPDATE memory_sessions SET newest_n = %s WHERE id = %s", (n, checkpoint.session_id))
        return replace(checkpoint, n=n)

    def set_pinned(self, checkpoint_id: str) -> bool:
        cursor = self._conn.execute(
            "UPDATE memory_checkpoints SET pinned = true WHERE id = %s AND NOT pinned", (checkpoint_id,)
        )
        return cursor.rowcount == 1

    def prune(self, session_id: str | None, per_session: int, total: int) -> PruneCounts:
        by_session = 0
        if session_id is not None:
            by_session = self._conn.execute(
                "DELETE FROM memory_checkpoints WHERE n IN (SELECT n FROM memory_checkpoints"
                f" WHERE session_id = %s AND NOT pinned AND n NOT IN ({_EXEMPT}) ORDER BY n DESC OFFSET %s)",
                (session_id, per_session),
            ).rowcount
        row = self._conn.execute(
            f"SELECT count(*) FROM memory_checkpoints WHERE NOT pinned AND n NOT IN ({_EXEMPT})"
        ).fetchone()
        countable = int(row[0]) if row else 0
        by_total = 0
        if countable > total:
            by_total = self._conn.execute(
                "DELETE FROM memory_checkpoints WHERE n IN (SELECT n FROM memory_checkpoints"
                f" WHERE NOT pinned AND n NOT IN ({_EXEMPT}) ORDER BY n LIMIT %s)",
                (countable - total,),
            ).rowcount
        return PruneCounts(by_session, by_total)


class PostgresMemory(MemoryStore):
    """The memory port over one :class:`~runner.store.postgres.PostgresStore`."""

    def __init__(self, store: Store) -> None:
        self._store = store

    @property
    def store(self) -> Store:
        return self._store

    def write(self, tx: Transaction) -> MemoryTransaction:
        conn, store = connection_of(tx)
        return _Transaction(conn, store, tx)

    def read(self, reader: Reader) -> MemoryReader:
        conn, store = connection_of(reader)
        return _Reader(conn, store)

    def info(self) -> dict[str, Any]:
        return {"adapter": "postgresql", "fts": "tsvector"}


__all__ = ["PostgresMemory"]
