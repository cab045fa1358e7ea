"""The process host's slots in a PostgreSQL store: the table ``agent_slots`` of the store's own schema.

Every statement runs on the store's connection inside the store's own snapshot or writing
transaction (``runner.store.postgres.connection_of``), so a slot's compare-and-set, the effect gate
run in the same transaction, and the pane counter commit together or not at all, as with SQLite. A
changed slot notifies the store's channel (payload ``s <pane id>``) on commit. The table's schema is
migrated with the rest of the store (``runner.store.postgres.MIGRATIONS``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from runner.agents.slots import AgentSlot, SlotProgress, SlotReader, SlotStore, SlotTransaction
from runner.context import format_time
from runner.errors import ConflictError, CorralError
from runner.store.abc import Reader, Store, Transaction
from runner.store.postgres import PostgresStore, connection_of, decode_object, encode_json, notify

if TYPE_CHECKING:
    import psycopg

_COLUMNS = "pane_id, name, kind, cwd, status, seq, run, pid, exit_status, closed, options, dir, created_at, updated_at"


class _Reader(SlotReader):
    def __init__(self, view: Reader) -> None:
        conn, store = connection_of(view)
        self._conn: psycopg.Connection[Any] = conn
        self._store = store

    def _slot(self, row: tuple[Any, ...]) -> AgentSlot:
        pane_id, name, kind, cwd, status, seq, run, pid, exit_status, closed, options, directory, created, updated = row
        return AgentSlot(
            pane_id,
            name,
            kind,
            cwd,
            status,
            seq,
            run,
            pid,
            exit_status,
            bool(closed),
            decode_object(options, self._store, "agent_slots", pane_id, "options"),
            directory,
            created,
            updated,
        )

    def slot(self, pane_id: str) -> AgentSlot | None:
        row = self._conn.execute(f"SELECT {_COLUMNS} FROM agent_slots WHERE pane_id = %s", (pane_id,)).fetchone()
        return self._slot(row) if row else None

    def slots(self, include_closed: bool = False) -> list[AgentSlot]:
        where = "" if include_closed else " WHERE NOT closed"
        return [
            self._slot(row) for row in self._conn.execute(f"SELECT {_COLUMNS} FROM agent_slots{where} ORDER BY number")
        ]

    def slots_of(self, pane_ids: Sequence[str]) -> dict[str, AgentSlot]:
        wanted = list(dict.fromkeys(pane_ids))
        rows = self._conn.execute(f"SELECT {_COLUMNS} FROM agent_slots WHERE pane_id = ANY(%s)", (wanted,))
        return {row[0]: self._slot(row) for row in rows}

    def progress_of(self, pane_ids: Sequence[str]) -> dict[str, SlotProgress]:
        wanted = list(dict.fromkeys(pane_ids))
        rows = self._conn.execute(
            "SELECT pane_id, status, seq, closed FROM agent_slots WHERE pane_id = ANY(%s)", (wanted,)
        )
        return {pane_id: SlotProgress(status, seq, bool(closed)) for pane_id, status, seq, closed in rows}


class _Transaction(_Reader, SlotTransaction):
    def __init__(self, tx: Transaction) -> None:
        super().__init__(tx)
        self.store_tx = tx
        self._stamp = format_time(tx.now)  # the same time as the store's rows of this transaction

    def put_slot(self, slot: AgentSlot, expected_seq: int | None) -> AgentSlot:
        options = encode_json(dict(slot.options))
        notify(self.store_tx, f"s {slot.pane_id}")
        if expected_seq is None:
            # Invariant: process-host pane ids are "p<number>", numbers from next_number("pane").
            number = int(slot.pane_id[1:])
            row = self._conn.execute(
                f"INSERT INTO agent_slots (number, {_COLUMNS}) VALUES ({', '.join(['%s'] * 15)})"
                " ON CONFLICT DO NOTHING RETURNING 1",
                (
                    number,
                    slot.pane_id,
                    slot.name,
                    slot.kind,
                    slot.cwd,
                    slot.status,
                    slot.seq,
                    slot.run,
                    slot.pid,
                    slot.exit_status,
                    slot.closed,
                    options,
                    slot.dir,
                    self._stamp,
                    self._stamp,
                ),
            ).fetchone()
            if row is None:
                raise ConflictError(f"agent slot {slot.pane_id!r} already exists", pane_id=slot.pane_id)
            return replace(slot, created_at=self._stamp, updated_at=self._stamp)
        # Invariant: the compare-and-set on seq; a closed slot is never written again.
        cursor = self._conn.execute(
            "UPDATE agent_slots SET status = %s, seq = %s, run = %s, pid = %s, exit_status = %s, closed = %s,"
            " options = %s, updated_at = %s WHERE pane_id = %s AND seq = %s AND NOT closed",
            (
                slot.status,
                slot.seq,
                slot.run,
                slot.pid,
                slot.exit_status,
                slot.closed,
                options,
                self._stamp,
                slot.pane_id,
                expected_seq,
            ),
        )
        if cursor.rowcount != 1:
            current = self.slot(slot.pane_id)
            raise ConflictError(
                f"agent {slot.pane_id!r} moved underneath (expected seq {expected_seq}, "
                f"found {current.seq if current else 'none'}{', closed' if current and current.closed else ''})",
                pane_id=slot.pane_id,
                expected_seq=expected_seq,
                actual_seq=current.seq if current else None,
                closed=current.closed if current else None,
            )
        return replace(slot, updated_at=self._stamp)


class PostgresSlots(SlotStore):
    """Slots in a :class:`~runner.store.postgres.PostgresStore`'s schema, on its connection."""

    def __init__(self, store: Store) -> None:
        if not isinstance(store, PostgresStore):
            raise CorralError(f"PostgresSlots needs a PostgreSQL store, not {type(store).__name__}")
        self.store: PostgresStore = store

    @contextmanager
    def write(self) -> Iterator[SlotTransaction]:
        with self.store.write() as tx:
            yield _Transaction(tx)

    @contextmanager
    def read(self) -> Iterator[SlotReader]:
        with self.store.read() as reader:
            yield _Reader(reader)
