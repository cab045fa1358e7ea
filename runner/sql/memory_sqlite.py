"""Handoff memory in an SQLite store: the tables ``memory_*`` of the store's own file.

Every statement runs on the store's connection inside the store's own snapshot or ``BEGIN
IMMEDIATE`` transaction (``runner.sql.store_sqlite.connection_of``), so a checkpoint, the session it
starts, the retention after it and the event recording them commit together or not at all. The
reads and writes are the shared SQL of :mod:`runner.sql.memory_sql`; what is SQLite's own is
here: search uses the FTS5 table ``memory_fts`` (external content: the checkpoints' ``search_text``,
keyed by their row number), kept in step by every insert and delete; where the migration found no
FTS5 in this build of SQLite, it is a scan with ``LIKE`` over the same words (same answers, slower).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from runner.sql.memory_sql import CHECKPOINT, INSERT_CHECKPOINT, Dialect, SQLMemoryReader, SQLMemoryTransaction
from runner.sql.store_sqlite import connection_of, decode_object, encode_json
from runner.store.abc import Reader, Store, Transaction
from runner.store.memory import MemoryReader, MemoryStore, MemoryTransaction, iter_chunks


class _SQLite(Dialect):
    true = "1"
    unpinned = "pinned = 0"
    session_order = "rowid"
    offset_all = "LIMIT -1 OFFSET ?"

    def __init__(self, conn: sqlite3.Connection, path: Path, fts: bool) -> None:
        super().__init__(conn)
        self._path = path
        self._fts = fts

    @staticmethod
    def encode(value: Any) -> str:
        return encode_json(value)

    @staticmethod
    def flag(value: bool) -> int:
        return int(value)

    def one_of(self, column: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
        return (f"{column} IN ({', '.join('?' * len(values))})" if values else "0"), list(values)

    def body(self, text: Any, checkpoint_id: str) -> dict[str, Any]:
        return decode_object(text, self._path, "memory_checkpoints", checkpoint_id, "body")

    def search(self, words: Sequence[str], project: str | None, limit: int) -> Any:
        args: list[Any] = []
        if self._fts:
            # Each word quoted: FTS5 reads it as a string, never as query syntax; juxtaposed means AND.
            # FTS5 as the outer loop, walked by rowid (= n) downwards: the newest matches come first and
            # LIMIT stops the walk, so a word every checkpoint holds costs a page, not a sort of them all.
            sql = CHECKPOINT + " JOIN memory_fts AS f ON f.rowid = c.n WHERE memory_fts MATCH ?"
            args.append(" ".join(f'"{word}"' for word in words))
        else:
            padded = " || c.search_text || "
            sql = CHECKPOINT + " WHERE " + " AND ".join(f"(' '{padded}' ') LIKE ?" for _ in words)
            args += [f"% {word} %" for word in words]
        if project is not None:
            sql += " AND c.project = ?"
            args.append(project)
        sql += f" ORDER BY {'f.rowid' if self._fts else 'c.n'} DESC LIMIT {int(limit)}"
        return self.run(sql, args)

    def insert_checkpoint(self, values: Sequence[Any], text: str) -> int:
        n = self.run(INSERT_CHECKPOINT, values).lastrowid
        assert n is not None
        if self._fts:
            self.run("INSERT INTO memory_fts (rowid, search_text) VALUES (?, ?)", (n, text))
        return int(n)

    def delete(self, chosen: str, args: Sequence[Any]) -> int:
        doomed = [int(r[0]) for r in self.run(chosen, args)]
        deleted = 0
        for chunk in iter_chunks(doomed):
            marks = ", ".join("?" * len(chunk))
            if self._fts:
                # External content: the index forgets a row given the very text it indexed.
                self.run(
                    "INSERT INTO memory_fts (memory_fts, rowid, search_text)"
                    f" SELECT 'delete', n, search_text FROM memory_checkpoints WHERE n IN ({marks})",
                    list(chunk),
                )
            deleted += self.run(f"DELETE FROM memory_checkpoints WHERE n IN ({marks})", list(chunk)).rowcount
        return deleted


class SQLiteMemory(MemoryStore):
    """The memory port over one :class:`~runner.sql.store_sqlite.SQLiteStore`."""

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
        return SQLMemoryTransaction(_SQLite(conn, path, self._has_fts(conn)), tx)

    def read(self, reader: Reader) -> MemoryReader:
        conn, path = connection_of(reader)
        return SQLMemoryReader(_SQLite(conn, path, self._has_fts(conn)))

    def info(self) -> dict[str, Any]:
        with self._store.read() as reader:
            conn, _ = connection_of(reader)
            fts = self._has_fts(conn)
        return {"adapter": "sqlite", "fts": "fts5" if fts else "like"}


__all__ = ["SQLiteMemory"]
