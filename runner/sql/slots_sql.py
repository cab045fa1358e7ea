"""The slot port (:mod:`runner.agents.slots`) in SQL, shared by the SQLite and PostgreSQL adapters.

Reading a slot, the reads of many (``slots_of``, ``progress_of``) and the compare-and-set of
``put_slot`` are one implementation (:class:`SQLSlotReader`, :class:`SQLSlotTransaction`,
:class:`SQLSlots`) over a small :class:`Dialect`: what each store spells its own way (placeholders,
the predicate "not closed", a boolean argument, the rows of a list of pane ids: SQLite in chunks of
``IN`` lists, PostgreSQL in one ``= ANY``), how an insert finds its slot already there, and what a
changed slot tells (PostgreSQL notifies the store's channel). Statements are written with ``?``
placeholders; a dialect whose placeholder differs turns them into its own (``%s``), as the store's
shared SQL does (:mod:`runner.sql.memory_sql`).

A dialect is bound to one connection under one of the store's own snapshots or writing
transactions (``BEGIN IMMEDIATE`` on SQLite, the one holding the advisory write lock on
PostgreSQL), so a slot's compare-and-set, the effect gate run in the same transaction, and the pane
counter commit together or not at all.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, ClassVar

from runner.agents.slots import AgentSlot, SlotProgress, SlotReader, SlotStore, SlotTransaction
from runner.context import format_time
from runner.errors import ConflictError
from runner.sql.dialect import SQLDialect
from runner.store.abc import Reader, Transaction

COLUMNS = "pane_id, name, kind, cwd, status, seq, run, pid, exit_status, closed, options, dir, created_at, updated_at"
"""The columns :meth:`SQLSlotReader.record` reads, in its order."""
PROGRESS = "pane_id, status, seq, closed"
"""The columns of :meth:`SQLSlotReader.progress_of`."""


class Dialect(SQLDialect, ABC):
    """One store's way of saying the slots' SQL, bound to one connection (:attr:`conn`)."""

    not_closed: ClassVar[str]
    """The predicate "not closed"."""

    @staticmethod
    @abstractmethod
    def flag(value: bool) -> Any:
        """A boolean as a statement's argument."""

    @staticmethod
    @abstractmethod
    def encode(value: Any) -> str:
        """A JSON column's text, as the store encodes every JSON it keeps."""

    @abstractmethod
    def options(self, text: Any, pane_id: str) -> dict[str, Any]:
        """A slot's decoded ``options`` column (``store_corrupt``, by its pane id, if it does not decode)."""

    @abstractmethod
    def rows_of(self, columns: str, pane_ids: list[str]) -> Iterable[Sequence[Any]]:
        """The rows (``columns`` of ``agent_slots``) of ``pane_ids`` (distinct), read in this snapshot."""

    @abstractmethod
    def insert(self, sql: str, args: Sequence[Any]) -> bool:
        """Run the ``INSERT`` ``sql`` of one slot; False where the store turned it away as a slot already
        there (PostgreSQL: a conflict on the pane id or number; SQLite: any integrity error)."""

    @abstractmethod
    def changed(self, tx: Transaction, pane_id: str) -> None:
        """Tell whoever listens that the slot ``pane_id`` changes in ``tx`` (on its commit)."""


class SQLSlotReader(SlotReader):
    """Slot reads through ``sql``'s connection."""

    def __init__(self, sql: Dialect) -> None:
        self._sql = sql

    def record(self, row: Sequence[Any]) -> AgentSlot:
        """One row of :data:`COLUMNS` as a slot."""
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
            self._sql.options(options, pane_id),
            directory,
            created,
            updated,
        )

    def slot(self, pane_id: str) -> AgentSlot | None:
        row = self._sql.run(f"SELECT {COLUMNS} FROM agent_slots WHERE pane_id = ?", (pane_id,)).fetchone()
        return self.record(row) if row else None

    def slots(self, include_closed: bool = False) -> list[AgentSlot]:
        where = "" if include_closed else f" WHERE {self._sql.not_closed}"
        return [self.record(row) for row in self._sql.run(f"SELECT {COLUMNS} FROM agent_slots{where} ORDER BY number")]

    def slots_of(self, pane_ids: Sequence[str]) -> dict[str, AgentSlot]:
        return {row[0]: self.record(row) for row in self._sql.rows_of(COLUMNS, list(dict.fromkeys(pane_ids)))}

    def progress_of(self, pane_ids: Sequence[str]) -> dict[str, SlotProgress]:
        return {
            pane_id: SlotProgress(status, seq, bool(closed))
            for pane_id, status, seq, closed in self._sql.rows_of(PROGRESS, list(dict.fromkeys(pane_ids)))
        }


class SQLSlotTransaction(SQLSlotReader, SlotTransaction):
    """Slot writes through ``sql``'s connection, inside the store's writing transaction ``tx``."""

    def __init__(self, sql: Dialect, tx: Transaction) -> None:
        super().__init__(sql)
        self.store_tx = tx
        self._stamp = format_time(tx.now)  # the same time as the store's rows of this transaction

    def put_slot(self, slot: AgentSlot, expected_seq: int | None) -> AgentSlot:
        d = self._sql
        options = d.encode(dict(slot.options))
        d.changed(self.store_tx, slot.pane_id)
        if expected_seq is None:
            # Invariant: process-host pane ids are "p<number>", numbers from next_number("pane").
            number = int(slot.pane_id[1:])
            inserted = d.insert(
                f"INSERT INTO agent_slots (number, {COLUMNS}) VALUES ({', '.join('?' * 15)})",
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
                    d.flag(slot.closed),
                    options,
                    slot.dir,
                    self._stamp,
                    self._stamp,
                ),
            )
            if not inserted:
                raise ConflictError(f"agent slot {slot.pane_id!r} already exists", pane_id=slot.pane_id)
            return replace(slot, created_at=self._stamp, updated_at=self._stamp)
        # Invariant: the compare-and-set on seq; a closed slot is never written again.
        cursor = d.run(
            "UPDATE agent_slots SET status = ?, seq = ?, run = ?, pid = ?, exit_status = ?, closed = ?, options = ?,"
            f" updated_at = ? WHERE pane_id = ? AND seq = ? AND {d.not_closed}",
            (
                slot.status,
                slot.seq,
                slot.run,
                slot.pid,
                slot.exit_status,
                d.flag(slot.closed),
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


class SQLSlots(SlotStore):
    """Slots in the table ``agent_slots`` of :attr:`store`, on its connection; :meth:`dialect` says how."""

    @abstractmethod
    def dialect(self, view: Reader) -> Dialect:
        """The dialect on the connection under ``view``, a snapshot or transaction of :attr:`store`."""

    @contextmanager
    def write(self) -> Iterator[SlotTransaction]:
        with self.store.write() as tx:
            yield SQLSlotTransaction(self.dialect(tx), tx)

    @contextmanager
    def read(self) -> Iterator[SlotReader]:
        with self.store.read() as reader:
            yield SQLSlotReader(self.dialect(reader))


__all__ = ["COLUMNS", "PROGRESS", "Dialect", "SQLSlotReader", "SQLSlotTransaction", "SQLSlots"]
