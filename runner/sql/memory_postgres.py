"""Handoff memory in a PostgreSQL store: the tables ``memory_*`` of the store's own schema.

Every statement runs on the store's connection inside the store's own snapshot or writing
transaction (``runner.sql.store_postgres.connection_of``). A writing transaction holds the store's one
advisory write lock from its first statement to its commit (``runner.sql.store_postgres``), so the
check-and-create of a session by project is serialized exactly as ``BEGIN IMMEDIATE`` serializes
it on SQLite: no finer lock is taken, none is needed. The reads and writes are the shared SQL of
:mod:`runner.sql.memory_sql`; what is PostgreSQL's own is here: search matches a stored
``tsvector`` of the checkpoint's words (``'simple'`` configuration) through a GIN index, and an
insert hands its row number back with ``RETURNING n``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from runner.sql.memory_sql import CHECKPOINT, INSERT_CHECKPOINT, Dialect, SQLMemoryReader, SQLMemoryTransaction
from runner.sql.store_postgres import PostgresStore, connection_of, decode_object, encode_json
from runner.store.abc import Reader, Store, Transaction
from runner.store.memory import MemoryReader, MemoryStore, MemoryTransaction

if TYPE_CHECKING:
    import psycopg

_DENSE = 1000  # matches from which a search walks the checkpoints newest first instead of sorting them


class _Postgres(Dialect):
    placeholder = "%s"
    true = "true"
    unpinned = "NOT pinned"
    session_order = "n"
    offset_all = "OFFSET ?"

    def __init__(self, conn: psycopg.Connection[Any], store: PostgresStore) -> None:
        super().__init__(conn)
        self._store = store

    @staticmethod
    def encode(value: Any) -> str:
        return encode_json(value)

    @staticmethod
    def flag(value: bool) -> bool:
        return value

    def one_of(self, column: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
        return f"{column} = ANY(?)", [list(values)]

    def body(self, text: Any, checkpoint_id: str) -> dict[str, Any]:
        return decode_object(text, self._store, "memory_checkpoints", checkpoint_id, "body")

    def search(self, words: Sequence[str], project: str | None, limit: int) -> Any:
        # The words as one AND query of lexemes; plainto_tsquery reads them as text, never as syntax.
        where = " WHERE c.search @@ plainto_tsquery('simple', ?)"
        args: list[Any] = [" ".join(words)]
        if project is not None:
            where += " AND c.project = ?"
            args.append(project)
        # Why two plans: the newest matches of a common word are found fastest walking n downwards (they
        # are dense), those of a rare one through the GIN index and a sort of the few it finds; the
        # planner cannot tell a rare word from a common one (its estimate of an unknown lexeme is a
        # constant), so a bounded probe through the index decides.
        probe = self.run(
            f"SELECT count(*) FROM (SELECT 1 FROM memory_checkpoints AS c{where} LIMIT {_DENSE}) AS m", args
        ).fetchone()
        order = "c.n" if probe is not None and int(probe[0]) >= _DENSE else "c.n + 0"  # + 0: not the index's order
        return self.run(CHECKPOINT + where + f" ORDER BY {order} DESC LIMIT {int(limit)}", args)

    def insert_checkpoint(self, values: Sequence[Any], text: str) -> int:
        # The search index follows by itself: the tsvector is a stored column generated from search_text.
        found = self.run(INSERT_CHECKPOINT + " RETURNING n", values).fetchone()
        assert found is not None
        return int(found[0])

    def delete(self, chosen: str, args: Sequence[Any]) -> int:
        return int(self.run(f"DELETE FROM memory_checkpoints WHERE n IN ({chosen})", args).rowcount)


class PostgresMemory(MemoryStore):
    """The memory port over one :class:`~runner.sql.store_postgres.PostgresStore`."""

    def __init__(self, store: Store) -> None:
        self._store = store

    @property
    def store(self) -> Store:
        return self._store

    def write(self, tx: Transaction) -> MemoryTransaction:
        conn, store = connection_of(tx)
        return SQLMemoryTransaction(_Postgres(conn, store), tx)

    def read(self, reader: Reader) -> MemoryReader:
        conn, store = connection_of(reader)
        return SQLMemoryReader(_Postgres(conn, store))

    def info(self) -> dict[str, Any]:
        return {"adapter": "postgresql", "fts": "tsvector"}


__all__ = ["PostgresMemory"]
