"""The process host's slots in an SQLite store: the table ``agent_slots`` of the store's own file.

Every statement runs on the store's connection inside the store's own snapshot or ``BEGIN
IMMEDIATE`` transaction (``runner.sql.store_sqlite.connection_of``), so a slot's compare-and-set, the
effect gate run in the same transaction, and the pane counter commit together or not at all. The
table's schema is migrated with the rest of the file (``runner.sql.store_sqlite_schema.MIGRATIONS``). The reads
and writes are the shared SQL of :mod:`runner.sql.slots_sql`; what is SQLite's own is here: the
rows of many pane ids in chunks of ``IN`` lists, an insert that finds its slot there by an
``IntegrityError``, and the change token (``PRAGMA data_version``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Hashable, Iterator, Sequence
from pathlib import Path
from typing import Any

from runner.errors import CorralError
from runner.sql.slots_sql import Dialect, SQLSlots
from runner.sql.store_sqlite import SQLiteStore, connection_of, decode_object, encode_json
from runner.store.abc import Reader, Store, Transaction

_CHUNK = 500  # pane ids per statement of ``slots_of``


class _SQLite(Dialect):
    not_closed = "closed = 0"

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        super().__init__(conn)
        self._path = path

    @staticmethod
    def flag(value: bool) -> int:
        return int(value)

    @staticmethod
    def encode(value: Any) -> str:
        return encode_json(value)

    def options(self, text: Any, pane_id: str) -> dict[str, Any]:
        return decode_object(text, self._path, "agent_slots", pane_id, "options")

    def rows_of(self, columns: str, pane_ids: list[str]) -> Iterator[tuple[Any, ...]]:
        """One statement for all of them (a primary-key lookup each), in chunks below SQLite's
        variable limit (999 in old builds)."""
        for start in range(0, len(pane_ids), _CHUNK):
            chunk = pane_ids[start : start + _CHUNK]
            marks = ", ".join("?" * len(chunk))
            yield from self.run(f"SELECT {columns} FROM agent_slots WHERE pane_id IN ({marks})", chunk)

    def insert(self, sql: str, args: Sequence[Any]) -> bool:
        try:
            self.run(sql, args)
        except sqlite3.IntegrityError:
            return False
        return True

    def changed(self, tx: Transaction, pane_id: str) -> None:
        pass  # no channel: a waiter sees the commit by the change token (``PRAGMA data_version``)


class SQLiteSlots(SQLSlots):
    """Slots in an :class:`~runner.sql.store_sqlite.SQLiteStore`'s file, on its connection."""

    def __init__(self, store: Store) -> None:
        if not isinstance(store, SQLiteStore):
            raise CorralError(f"SQLiteSlots needs an SQLite store, not {type(store).__name__}")
        self.store: SQLiteStore = store

    def dialect(self, view: Reader) -> Dialect:
        return _SQLite(*connection_of(view))

    def change_token(self) -> Hashable:
        return self.store.data_version()
