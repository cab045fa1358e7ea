"""The process host's slots in a PostgreSQL store: the table ``agent_slots`` of the store's own schema.

Every statement runs on the store's connection inside the store's own snapshot or writing
transaction (``runner.sql.store_postgres.connection_of``), so a slot's compare-and-set, the effect gate
run in the same transaction, and the pane counter commit together or not at all, as with SQLite. A
changed slot notifies the store's channel (payload ``s <pane id>``) on commit. The table's schema is
migrated with the rest of the store (``runner.sql.store_postgres.MIGRATIONS``). The reads and writes are
the shared SQL of :mod:`runner.sql.slots_sql`; what is PostgreSQL's own is here: the rows of many
pane ids in one ``= ANY`` statement, an insert that finds its slot there by ``ON CONFLICT DO
NOTHING``, and the notification.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from runner.errors import CorralError
from runner.sql.slots_sql import Dialect, SQLSlots
from runner.sql.store_postgres import PostgresStore, connection_of, decode_object, encode_json, notify
from runner.store.abc import Reader, Store, Transaction

if TYPE_CHECKING:
    import psycopg


class _Postgres(Dialect):
    placeholder = "%s"
    not_closed = "NOT closed"

    def __init__(self, conn: psycopg.Connection[Any], store: PostgresStore) -> None:
        super().__init__(conn)
        self._store = store

    @staticmethod
    def flag(value: bool) -> bool:
        return value

    @staticmethod
    def encode(value: Any) -> str:
        return encode_json(value)

    def options(self, text: Any, pane_id: str) -> dict[str, Any]:
        return decode_object(text, self._store, "agent_slots", pane_id, "options")

    def rows_of(self, columns: str, pane_ids: list[str]) -> Any:
        return self.run(f"SELECT {columns} FROM agent_slots WHERE pane_id = ANY(?)", (pane_ids,))

    def insert(self, sql: str, args: Sequence[Any]) -> bool:
        return self.run(sql + " ON CONFLICT DO NOTHING RETURNING 1", args).fetchone() is not None

    def changed(self, tx: Transaction, pane_id: str) -> None:
        notify(tx, f"s {pane_id}")


class PostgresSlots(SQLSlots):
    """Slots in a :class:`~runner.sql.store_postgres.PostgresStore`'s schema, on its connection."""

    def __init__(self, store: Store) -> None:
        if not isinstance(store, PostgresStore):
            raise CorralError(f"PostgresSlots needs a PostgreSQL store, not {type(store).__name__}")
        self.store: PostgresStore = store

    def dialect(self, view: Reader) -> Dialect:
        return _Postgres(*connection_of(view))
