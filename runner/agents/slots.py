"""The process host's own port: its agent slots, kept beside the store's rows and written in its transactions.

A slot is one agent of the process host (status, ``seq``, current run). Slots are not corral state
machines, so the store port does not know them; but a slot's compare-and-set must commit in the
same transaction as the engine's effect gate (no effect starts after the fence moved), so
a :class:`SlotStore` is bound to one :class:`~runner.store.abc.Store` and every
:class:`SlotTransaction` runs inside one of that store's transactions (:attr:`SlotTransaction.store_tx`).

An adapter is one module plus one entry in :data:`SLOT_STORES`, keyed by the scheme of the store it
lives in (the built-in ``sqlite``: ``runner.sql.slots_sqlite``); other distributions add theirs
through the entry point group ``corral.slot_stores`` (``postgresql = "package.module:slots"``, a
callable taking the store). :func:`slot_store` picks the adapter for a store.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from runner.errors import InputError
from runner.registry import Registry
from runner.store import scheme_of
from runner.store.abc import Store, Transaction

__all__ = [
    "SLOT_STORES",
    "AgentSlot",
    "SlotProgress",
    "SlotReader",
    "SlotStore",
    "SlotTransaction",
    "slot_store",
]


@dataclass(frozen=True)
class AgentSlot:
    """One agent of the process host, as its slot port records it.

    Invariant: ``seq`` grows by exactly one on every change of ``status`` and never otherwise;
    ``run`` is the cursor at which the latest prompt started (its output is ``run-<run>.log``).
    """

    pane_id: str
    name: str
    kind: str
    cwd: str
    status: str
    seq: int
    run: int | None = None
    pid: int | None = None
    exit_status: int | None = None
    closed: bool = False
    options: Mapping[str, Any] = field(default_factory=dict)
    dir: str = ""
    """The slot's directory (its run logs), recorded so any process sharing the store finds them."""
    created_at: str | None = None
    updated_at: str | None = None


class SlotProgress(NamedTuple):
    """Where one slot is, and nothing else: what a wait's tick needs to judge it."""

    status: str
    seq: int
    closed: bool


class SlotReader(ABC):
    """Reads slots from one consistent snapshot."""

    @abstractmethod
    def slot(self, pane_id: str) -> AgentSlot | None:
        """The agent in ``pane_id``, closed or not; None if there never was one."""

    @abstractmethod
    def slots(self, include_closed: bool = False) -> list[AgentSlot]:
        """The agents, ordered by pane number (closed ones only when asked)."""

    def slots_of(self, pane_ids: Sequence[str]) -> dict[str, AgentSlot]:
        """The agents in ``pane_ids`` that exist, closed or not, by pane id (a pane that never had
        one is absent), all from this one snapshot. Adapters read them in one query; this default
        reads them one by one."""
        found = {}
        for pane_id in dict.fromkeys(pane_ids):
            slot = self.slot(pane_id)
            if slot is not None:
                found[pane_id] = slot
        return found

    def progress_of(self, pane_ids: Sequence[str]) -> dict[str, SlotProgress]:
        """:meth:`slots_of` reduced to status, seq and closed: a wait's tick reads only these, so
        adapters read only these columns (no options to decode); this default reduces ``slots_of``."""
        return {p: SlotProgress(s.status, s.seq, s.closed) for p, s in self.slots_of(pane_ids).items()}


class SlotTransaction(SlotReader):
    """Slot writes inside one writing transaction of the store: they commit or roll back with it."""

    store_tx: Transaction
    """The store's transaction this one runs in: the effect gate and the pane counter use it."""

    @abstractmethod
    def put_slot(self, slot: AgentSlot, expected_seq: int | None) -> AgentSlot:
        """Compare-and-set a slot on its ``seq``; insert when ``expected_seq`` is None.

        Pane ids are ``p<number>`` with numbers from the store's counter ``pane``. A closed slot is
        never written again. Returns the slot as written (its timestamps set).

        Raises:
            ConflictError: ``version_conflict`` if the slot exists (insert), or its seq is not
                ``expected_seq`` or it is closed (``details["closed"]``) (update).
        """


class SlotStore(ABC):
    """The process host's slots, in the database of :attr:`store`."""

    store: Store

    @abstractmethod
    def write(self) -> AbstractContextManager[SlotTransaction]:
        """A writing transaction of :attr:`store` with slot writes; commits on a clean exit.

        Raises:
            StoreBusyError: as :meth:`Store.write`.
        """

    @abstractmethod
    def read(self) -> AbstractContextManager[SlotReader]:
        """A read-only snapshot of the slots."""

    def change_token(self) -> Hashable | None:
        """A value that changes whenever any slot may have changed since it was last taken.

        A wait takes it on every tick, before its snapshot, and reads its slots again only once it
        differs from the previous tick's, so an idle tick reads no slot: a token equal to an earlier
        one of the same :class:`SlotStore` promises that no slot was written in between, by any
        process. Cheap by contract (no table read, no transaction; SQLite: ``PRAGMA data_version``
        with the connection's own change count). None when the adapter cannot tell: the caller
        reads every time.
        """
        return None


SlotStoreFactory = Callable[[Store], SlotStore]

SLOT_STORES: Registry[SlotStoreFactory] = Registry("slot store", "corral.slot_stores")
"""Slot adapters by the scheme of the store they live in."""


# The built-in adapters, named (not imported) by this port: each is imported when first used.
SLOT_STORES.lazy(
    "sqlite",
    "runner.sql.slots_sqlite:SQLiteSlots",
    "Slots in the table ``agent_slots`` of the SQLite store's own file and connection.",
)
SLOT_STORES.lazy(
    "postgresql",
    "runner.sql.slots_postgres:PostgresSlots",
    "Slots in the table ``agent_slots`` of the PostgreSQL store's own schema and connection.",
)


def slot_store(store: Store) -> SlotStore:
    """The slot port for ``store``, by its URL's scheme.

    Raises:
        InputError: ``store_unsupported`` when no slot adapter exists for that kind of store.
    """
    scheme = scheme_of(store.url)
    entry = SLOT_STORES.get(scheme)
    if entry is None:
        raise InputError(
            "store",
            f"the process host cannot keep its agents in a {scheme} store (no slot adapter is installed)",
            code="store_unsupported",
            url=scheme + "://…",
        )
    return entry.fn(store)
