"""The memory port (:mod:`runner.store.memory`) in SQL, shared by the SQLite and PostgreSQL adapters.

Projects, sessions, checkpoints, pins, counts, retention and the session's newest bookkeeping are
one implementation (:class:`SQLMemoryReader`, :class:`SQLMemoryTransaction`) over a small
:class:`Dialect`: what each store spells its own way (placeholders, boolean literals and arguments,
the predicate its partial indexes are built on, a list match, "every row after the first N") and the
few statements only it has (search; inserting a checkpoint, which must hand back its row number;
deleting checkpoints, which on SQLite also tells FTS5). Statements are written with ``?``
placeholders; a dialect whose placeholder differs turns them into its own (``%s``), as the mesh's
shared SQL does (:mod:`runner.sql.mesh_sql`).

A dialect is bound to one connection under one of the store's own snapshots or writing
transactions, so every statement here commits or rolls back with the store's rows.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any, ClassVar

from runner.sql.dialect import SQLDialect
from runner.store.abc import Transaction
from runner.store.memory import (
    CheckpointRecord,
    MemoryReader,
    MemoryTransaction,
    ProjectRecord,
    PruneCounts,
    SessionRecord,
    search_words,
    text_of,
)

SESSION = (
    "SELECT id, project, goal, agent, status, created_at, updated_at, closed_at, last_seq, newest_n"
    " FROM memory_sessions"
)
CHECKPOINT = (
    "SELECT c.id, c.session_id, c.project, c.seq, c.agent, c.summary, c.status, c.pinned, c.created_at,"
    " c.content_sha256, c.body, c.n, c.origin FROM memory_checkpoints AS c"
)
"""The columns :meth:`SQLMemoryReader.record` reads, in its order (a dialect's search selects them too)."""

INSERT_CHECKPOINT = (
    "INSERT INTO memory_checkpoints (id, session_id, project, seq, agent, summary, status, pinned, body,"
    " search_text, content_sha256, created_at, origin) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
"""Its arguments are :meth:`Dialect.insert_checkpoint`'s ``values``; the dialect says how ``n`` comes back."""

# Countable by retention: unpinned and not the newest checkpoint of a session that is still open.
_EXEMPT = "SELECT newest_n FROM memory_sessions WHERE status <> 'completed' AND newest_n IS NOT NULL"
_PROJECT = "SELECT name, repository, subdir, common_dir, created_at FROM memory_projects"


class Dialect(SQLDialect, ABC):
    """One store's way of saying the memory's SQL, bound to one connection (:attr:`conn`)."""

    true: ClassVar[str]
    """The literal true (``WHERE <true>``, ``SET pinned = <true>``)."""
    unpinned: ClassVar[str]
    """The predicate "not pinned", spelled as the partial indexes ``memory_checkpoints_unpinned*`` are."""
    session_order: ClassVar[str]
    """The column that orders sessions by when they started."""
    offset_all: ClassVar[str]
    """After an ``ORDER BY``: skip the first ``?`` rows and keep every other."""

    @staticmethod
    @abstractmethod
    def flag(value: bool) -> Any:
        """A boolean as a statement's argument."""

    @abstractmethod
    def one_of(self, column: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
        """A condition "``column`` is one of ``values``" (none: false) and its arguments."""

    @staticmethod
    @abstractmethod
    def encode(value: Any) -> str:
        """A JSON column's text, as the store encodes every JSON it keeps."""

    @abstractmethod
    def body(self, text: Any, checkpoint_id: str) -> dict[str, Any]:
        """A checkpoint's decoded ``body`` column (``store_corrupt``, by its id, if it does not decode)."""

    @abstractmethod
    def search(self, words: Sequence[str], project: str | None, limit: int) -> Iterable[Sequence[Any]]:
        """Rows of :data:`CHECKPOINT` whose text holds every word (at least one), newest first."""

    @abstractmethod
    def insert_checkpoint(self, values: Sequence[Any], text: str) -> int:
        """Run :data:`INSERT_CHECKPOINT` with ``values``, index ``text`` (its ``search_text``); its ``n``."""

    @abstractmethod
    def delete(self, chosen: str, args: Sequence[Any]) -> int:
        """Delete the checkpoints whose ``n`` the query ``chosen`` selects (and their index entries);
        how many went."""


class SQLMemoryReader(MemoryReader):
    """Memory reads through ``sql``'s connection."""

    def __init__(self, sql: Dialect) -> None:
        self._sql = sql

    def record(self, row: Sequence[Any]) -> CheckpointRecord:
        """One row of :data:`CHECKPOINT` as a record."""
        body = self._sql.body(row[10], row[0])
        return CheckpointRecord(
            row[0], row[1], row[2], row[3], row[4], row[5], row[6], bool(row[7]), row[8], row[9], body,
            int(row[11]), row[12],
        )  # fmt: skip

    def project(self, name: str) -> ProjectRecord | None:
        row = self._sql.run(_PROJECT + " WHERE name = ?", (name,)).fetchone()
        return ProjectRecord(*row) if row else None

    def projects(self) -> list[ProjectRecord]:
        return [ProjectRecord(*row) for row in self._sql.run(_PROJECT + " ORDER BY name")]

    def session(self, session_id: str) -> SessionRecord | None:
        row = self._sql.run(SESSION + " WHERE id = ?", (session_id,)).fetchone()
        return SessionRecord(*row) if row else None

    def sessions(
        self, project: str | None = None, statuses: Sequence[str] | None = None, limit: int | None = None
    ) -> list[SessionRecord]:
        d = self._sql
        sql, args = SESSION + f" WHERE {d.true}", list[Any]()
        if project is not None:
            sql += " AND project = ?"
            args.append(project)
        if statuses is not None:
            among, values = d.one_of("status", list(statuses))
            sql += " AND " + among
            args += values
        sql += f" ORDER BY {d.session_order} DESC"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        return [SessionRecord(*row) for row in d.run(sql, args)]

    def checkpoint(self, checkpoint_id: str) -> CheckpointRecord | None:
        row = self._sql.run(CHECKPOINT + " WHERE c.id = ?", (checkpoint_id,)).fetchone()
        return self.record(row) if row else None

    def checkpoint_by_origin(self, origin: str) -> CheckpointRecord | None:
        row = self._sql.run(CHECKPOINT + " WHERE c.origin = ?", (origin,)).fetchone()
        return self.record(row) if row else None

    def checkpoints(
        self,
        *,
        session_id: str | None = None,
        project: str | None = None,
        pinned: bool | None = None,
        limit: int | None = None,
        before_n: int | None = None,
    ) -> list[CheckpointRecord]:
        d = self._sql
        sql, args = CHECKPOINT + f" WHERE {d.true}", list[Any]()
        for column, value in (("c.session_id", session_id), ("c.project", project)):
            if value is not None:
                sql += f" AND {column} = ?"
                args.append(value)
        if pinned is not None:
            sql += " AND c.pinned = ?"
            args.append(d.flag(pinned))
        if before_n is not None:
            sql += " AND c.n < ?"
            args.append(before_n)
        sql += " ORDER BY c.n DESC"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        return [self.record(row) for row in d.run(sql, args)]

    def search(self, query: str, *, project: str | None = None, limit: int = 20) -> list[CheckpointRecord]:
        words = search_words(query)
        if not words:
            return []
        return [self.record(row) for row in self._sql.search(words, project, limit)]

    def count(self, *, project: str | None = None, pinned: bool | None = None) -> int:
        d = self._sql
        sql, args = f"SELECT count(*) FROM memory_checkpoints WHERE {d.true}", list[Any]()
        if project is not None:
            sql += " AND project = ?"
            args.append(project)
        if pinned is not None:
            sql += " AND pinned = ?"
            args.append(d.flag(pinned))
        row = d.run(sql, args).fetchone()
        return int(row[0]) if row else 0


class SQLMemoryTransaction(SQLMemoryReader, MemoryTransaction):
    """Memory writes through ``sql``'s connection, inside the store's writing transaction ``tx``."""

    def __init__(self, sql: Dialect, tx: Transaction) -> None:
        super().__init__(sql)
        self.store_tx = tx

    def add_project(self, project: ProjectRecord) -> None:
        self._sql.run(
            "INSERT INTO memory_projects (name, repository, subdir, common_dir, created_at) VALUES (?, ?, ?, ?, ?)",
            (project.name, project.repository, project.subdir, project.common_dir, project.created_at),
        )

    def add_session(self, session: SessionRecord) -> None:
        self._sql.run(
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
        self._sql.run(
            "UPDATE memory_sessions SET status = ?, updated_at = ?, closed_at = ? WHERE id = ?",
            (status, at, closed_at, session_id),
        )

    def add_checkpoint(self, checkpoint: CheckpointRecord) -> CheckpointRecord:
        d = self._sql
        # Invariant: seq is the session's last_seq + 1, read and written in this serialized transaction
        # (BEGIN IMMEDIATE on SQLite, the store's advisory write lock on PostgreSQL).
        row = d.run(
            "UPDATE memory_sessions SET last_seq = last_seq + 1, updated_at = ? WHERE id = ? RETURNING last_seq",
            (checkpoint.created_at, checkpoint.session_id),
        ).fetchone()
        if row is None or int(row[0]) != checkpoint.seq:
            raise ValueError(f"checkpoint seq {checkpoint.seq} is not the next of session {checkpoint.session_id}")
        text = " ".join(search_words(text_of(checkpoint)))
        n = d.insert_checkpoint(
            (
                checkpoint.id,
                checkpoint.session_id,
                checkpoint.project,
                checkpoint.seq,
                checkpoint.agent,
                checkpoint.summary,
                checkpoint.status,
                d.flag(checkpoint.pinned),
                d.encode(dict(checkpoint.body)),
                text,
                checkpoint.content_sha256,
                checkpoint.created_at,
                checkpoint.origin,
            ),
            text,
        )
        d.run("UPDATE memory_sessions SET newest_n = ? WHERE id = ?", (n, checkpoint.session_id))
        return replace(checkpoint, n=n)

    def set_pinned(self, checkpoint_id: str) -> bool:
        d = self._sql
        cursor = d.run(
            f"UPDATE memory_checkpoints SET pinned = {d.true} WHERE id = ? AND {d.unpinned}", (checkpoint_id,)
        )
        return bool(cursor.rowcount == 1)

    def prune(self, session_id: str | None, per_session: int, total: int) -> PruneCounts:
        d = self._sql
        countable = f"{d.unpinned} AND n NOT IN ({_EXEMPT})"
        by_session = 0
        if session_id is not None:
            by_session = d.delete(
                f"SELECT n FROM memory_checkpoints WHERE session_id = ? AND {countable} ORDER BY n DESC {d.offset_all}",
                (session_id, per_session),
            )
        row = d.run(f"SELECT count(*) FROM memory_checkpoints WHERE {countable}").fetchone()
        count = int(row[0]) if row else 0
        by_total = 0
        if count > total:
            by_total = d.delete(
                f"SELECT n FROM memory_checkpoints WHERE {countable} ORDER BY n LIMIT ?", (count - total,)
            )
        return PruneCounts(by_session, by_total)


__all__ = ["CHECKPOINT", "INSERT_CHECKPOINT", "SESSION", "Dialect", "SQLMemoryReader", "SQLMemoryTransaction"]
