"""The process host's slots in an SQLite store: the table ``agent_slots`` of the store's own file.

Every statement runs on the store's connection inside the store's own snapshot or ``BEGIN
IMMEDIATE`` transaction (``runner.store.sqlite.connection_of``), so a slot's compare-and-set, the
effect gate run in the same transaction, and the pane counter commit together or not at all. The
table's schema is migrated with the rest of the file (``runner.store.sqlite.MIGRATIONS``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Hashable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from runner.agents.slots import AgentSlot, SlotProgress, SlotReader, SlotStore, SlotTransaction
from runner.context import format_time
from runner.errors import ConflictError, CorralError
from runner.store.abc import Store, Transaction
from runner.store.sqlite import SQLiteStore, connection_of, decode_object, encode_json

_CHUNK = 500  # pane ids per statement of ``slots_of``
_COLUMNS = "pane_id, name, kind, cwd, status, seq, run, pid, exit_status, closed, options, dir, created_at, updated_at"


def _slot(row: tuple[Any, ...], path: Path) -> AgentSlot:
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
        decode_object(options, path, "agent_slots", pane_id, "options"),
        directory,
        created,
        updated,
    )


class _Reader(SlotReader):
    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self._conn = conn
        self._path = path

    def slot(self, pane_id: str) -> AgentSlot | None:
        row = self._conn.execute(f"SELECT {_COLUMNS} FROM agent_slots WHERE pane_id = ?", (pane_id,)).fetchone()
        return _slot(row, self._path) if row else None

    def slots(self, include_closed: bool = False) -> list[AgentSlot]:
        where = "" if include_closed else " WHERE closed = 0"
        return [
            _slot(row, self._path)
            for row in self._conn.execute(f"SELECT {_COLUMNS} FROM agent_slots{where} ORDER BY number")
        ]

    def _rows(self, columns: str, pane_ids: Sequence[str]) -> Iterator[tuple[Any, ...]]:
        """The rows of ``pane_ids``: one statement for all of them (a primary-key lookup each), in
        chunks below SQLite's variable limit (999 in old builds)."""
        wanted = list(dict.fromkeys(pane_ids))
        for start in range(0, len(wanted), _CHUNK):
            chunk = wanted[start : start + _CHUNK]
            marks = ", ".join("?" * len(chunk))
            yield from self._conn.execute(f"SELECT {columns} FROM agent_slots WHERE pane_id IN ({marks})", chunk)

    def slots_of(self, pane_ids: Sequence[str]) -> dict[str, AgentSlot]:
        return {row[0]: _slot(row, self._path) for row in self._rows(_COLUMNS, pane_ids)}

    def progress_of(self, pane_ids: Sequence[str]) -> dict[str, SlotProgress]:
        return {
            pane_id: SlotProgress(status, seq, bool(closed))
            for pane_id, status, seq, closed in self._rows("pane_id, status, seq, closed", pane_ids)
        }


class _Transaction(_Reader, SlotTransaction):
    def __init__(self, tx: Transaction) -> None:
        super().__init__(*connection_of(tx))
        self.store_tx = tx
        self._stamp = format_time(tx.now)  # the same time as the store's rows of this transaction

    def put_slot(self, slot: AgentSlot, expected_seq: int | None) -> AgentSlot:
        options = encode_json(dict(slot.options))
        if expected_seq is None:
            # Invariant: process-host pane ids are "p<number>", numbers from next_number("pane").
            number = int(slot.pane_id[1:])
            try:
                self._conn.execute(
                    f"INSERT INTO agent_slots (number, {_COLUMNS}) VALUES ({', '.join('?' * 15)})",
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
                        int(slot.closed),
                        options,
                        slot.dir,
                        self._stamp,
                        self._stamp,
                    ),
                )
            except sqlite3.IntegrityError:
                raise ConflictError(f"agent slot {slot.pane_id!r} already exists", pane_id=slot.pane_id) from None
            return replace(slot, created_at=self._stamp, updated_at=self._stamp)
        cursor = self._conn.execute(
            "UPDATE agent_slots SET status = ?, seq = ?, run = ?, pid = ?, exit_status = ?, closed = ?, options = ?,"
            " updated_at = ? WHERE pane_id = ? AND seq = ? AND closed = 0",
            (
                slot.status,
                slot.seq,
                slot.run,
                slot.pid,
                slot.exit_status,
                int(slot.closed),
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


class SQLiteSlots(SlotStore):
    """Slots in an :class:`~runner.store.sqlite.SQLiteStore`'s file, on its connection."""

    def __init__(self, store: Store) -> None:
        if not isinstance(store, SQLiteStore):
            raise CorralError(f"SQLiteSlots needs an SQLite store, not {type(store).__name__}")
        self.store: SQLiteStore = store

    @contextmanager
    def write(self) -> Iterator[SlotTransaction]:
        with self.store.write() as tx:
            yield _Transaction(tx)

    @contextmanager
    def read(self) -> Iterator[SlotReader]:
        with self.store.read() as reader:
            yield _Reader(*connection_of(reader))

    def change_token(self) -> Hashable:
        return self.store.data_version()
