"""The handoff memory's port: projects, sessions and checkpoints, kept beside the store's rows.

Memory is not a state machine, so the store port (:mod:`runner.store.abc`) does not know it; but a
checkpoint, the session it may start, the retention that follows it and the event that records
them must commit together, so a :class:`MemoryStore` is bound to one :class:`~runner.store.abc.Store`
and every :class:`MemoryTransaction` runs inside one of that store's writing transactions (the
same pattern as the process host's slots, :mod:`runner.agents.slots`). A store's writing
transaction is serialized against every other writer (``BEGIN IMMEDIATE`` on SQLite, one advisory
lock on PostgreSQL), so "is there an open session for this project? if not, start one" inside it
cannot race: of two callers, the second sees the first's session.

What the port keeps and how it searches is the adapter's; what the records *mean* (the status
rules, which session a checkpoint goes to) is the service's (:mod:`runner.service.memory`). The
one policy an adapter carries out itself is retention (:meth:`MemoryTransaction.prune`), because it
must be set-based SQL to stay cheap at 100,000 checkpoints; its rule is stated there and held to by
the conformance suite (``tests/store/test_memory.py``).

Full-text search: SQLite FTS5 (a ``memory_fts`` table keyed by the checkpoint's row number),
PostgreSQL ``tsvector`` with a GIN index. Both index :func:`search_words` of a checkpoint's text
and match every word of a query (AND), newest first, so the two stores answer a query alike. An
SQLite build without FTS5 gets no ``memory_fts`` table and searches by a scan of the same words
(``LIKE``): the same answers, slower (``info()["fts"]`` says which).

An adapter is one module plus one entry in :data:`MEMORY_STORES`, keyed by the scheme of the store
it lives in; a store of another scheme whose object is an SQLite store (a plugin's alias) gets the
SQLite adapter.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from runner.errors import InputError
from runner.registry import Registry
from runner.store import scheme_of
from runner.store.abc import Reader, Store, Transaction

__all__ = [
    "MEMORY_STORES",
    "CheckpointRecord",
    "MemoryReader",
    "MemoryStore",
    "MemoryTransaction",
    "ProjectRecord",
    "PruneCounts",
    "SessionRecord",
    "memory_store",
    "search_words",
    "text_of",
]

SESSION_STATUSES = ("active", "paused", "completed", "blocked")
OPEN_STATUSES = ("active", "paused", "blocked")
"""A session in one of these is open: a checkpoint by project goes to it instead of starting one."""

_WORD = re.compile(r"[^\W_]+")


def search_words(text: str) -> list[str]:
    """The words full-text search indexes and matches: runs of letters and digits, lowercased.

    Both stores index the words joined by spaces (so ``runner/cli.py`` is ``runner cli py`` on each,
    where PostgreSQL's own parser would keep it one "file" token and SQLite's would split it).
    """
    return _WORD.findall(text.lower())


def text_of(checkpoint: CheckpointRecord) -> str:
    """Every text of a checkpoint that search sees: the summary and each field of the body."""
    parts: list[str] = [checkpoint.summary]
    for value in checkpoint.body.values():
        if isinstance(value, str):
            parts.append(value)
        elif isinstance(value, list):
            parts.extend(str(item) for item in value)
    return "\n".join(parts)


@dataclass(frozen=True)
class ProjectRecord:
    """A project: a name, and optionally the repository (absolute) and a sub-directory of it.

    ``common_dir`` is the repository's git common directory (shared by all its linked worktrees),
    read when the project was made: what ties a writer lane's release to the project.
    """

    name: str
    repository: str | None
    subdir: str | None
    common_dir: str | None
    created_at: str


@dataclass(frozen=True)
class SessionRecord:
    """One working session of a project.

    Invariant: ``last_seq`` is the highest checkpoint sequence number ever given in the session
    (pruning never lowers it); ``newest_n`` is the row number of its newest checkpoint (None
    before the first), the one retention exempts while the session is not ``completed``.
    """

    id: str
    project: str
    goal: str
    agent: str
    status: str
    created_at: str
    updated_at: str
    closed_at: str | None = None
    last_seq: int = 0
    newest_n: int | None = None


@dataclass(frozen=True)
class CheckpointRecord:
    """One checkpoint. ``n`` is its row number (0 before it is written: the adapter assigns it;
    it orders checkpoints across sessions by when they were written). ``body`` holds the lists
    and texts beside the summary (``work_done``, ``current_state``, ``next_steps``, ``blockers``,
    ``files``, ``commands``, ``verify``) as the service shaped them; ``content_sha256`` is the
    digest of its canonical content, computed by the service when it was written."""

    id: str
    session_id: str
    project: str
    seq: int
    agent: str
    summary: str
    status: str
    pinned: bool
    created_at: str
    content_sha256: str
    body: Mapping[str, Any] = field(default_factory=dict)
    n: int = 0
    origin: str | None = None


@dataclass(frozen=True)
class PruneCounts:
    """What :meth:`MemoryTransaction.prune` deleted: by the per-session window, by the total one."""

    session: int = 0
    total: int = 0

    @property
    def deleted(self) -> int:
        return self.session + self.total


class MemoryReader(ABC):
    """Reads memory from one consistent snapshot (or from inside a writing transaction)."""

    @abstractmethod
    def project(self, name: str) -> ProjectRecord | None:
        """The project called ``name``, or None."""

    @abstractmethod
    def projects(self) -> list[ProjectRecord]:
        """Every project, by name."""

    @abstractmethod
    def session(self, session_id: str) -> SessionRecord | None:
        """The session with this id, or None."""

    @abstractmethod
    def sessions(
        self, project: str | None = None, statuses: Sequence[str] | None = None, limit: int | None = None
    ) -> list[SessionRecord]:
        """Sessions (of ``project``, in ``statuses``, if given), newest first (by when they started)."""

    @abstractmethod
    def checkpoint(self, checkpoint_id: str) -> CheckpointRecord | None:
        """The checkpoint with this id, or None (never written, or pruned)."""

    @abstractmethod
    def checkpoint_by_origin(self, origin: str) -> CheckpointRecord | None:
        """The checkpoint written with this ``origin`` (a caller's idempotency key, e.g. a plan
        step's), or None (never written, or pruned)."""

    @abstractmethod
    def checkpoints(
        self,
        *,
        session_id: str | None = None,
        project: str | None = None,
        pinned: bool | None = None,
        limit: int | None = None,
        before_n: int | None = None,
    ) -> list[CheckpointRecord]:
        """Checkpoints (of a session, of a project, pinned or not, if given), newest first; only
        those with ``n < before_n`` when given (a keyset page)."""

    @abstractmethod
    def search(self, query: str, *, project: str | None = None, limit: int = 20) -> list[CheckpointRecord]:
        """Checkpoints whose text holds every word of ``query`` (:func:`search_words`), newest first.

        A query without a word finds nothing.
        """

    @abstractmethod
    def count(self, *, project: str | None = None, pinned: bool | None = None) -> int:
        """How many checkpoints there are (of a project, pinned or not, if given)."""


class MemoryTransaction(MemoryReader):
    """Memory writes inside one of the store's writing transactions (:attr:`store_tx`)."""

    store_tx: Transaction

    @abstractmethod
    def add_project(self, project: ProjectRecord) -> None:
        """Insert a project (its name must be new: the service reads first, in this transaction)."""

    @abstractmethod
    def add_session(self, session: SessionRecord) -> None:
        """Insert a session (``last_seq`` 0, no checkpoint yet)."""

    @abstractmethod
    def set_session_status(self, session_id: str, status: str, at: str, closed_at: str | None) -> None:
        """Change a session's status (and ``updated_at``; ``closed_at`` when it closes)."""

    @abstractmethod
    def add_checkpoint(self, checkpoint: CheckpointRecord) -> CheckpointRecord:
        """Insert a checkpoint (``seq`` = its session's ``last_seq`` + 1, checked) and index its text.

        The session's ``last_seq``, ``newest_n`` and ``updated_at`` follow. Returns the record with
        its row number ``n``.
        """

    @abstractmethod
    def set_pinned(self, checkpoint_id: str) -> bool:
        """Pin a checkpoint; False if it was pinned already."""

    @abstractmethod
    def prune(self, session_id: str | None, per_session: int, total: int) -> PruneCounts:
        """Retention: a sliding window over *countable* checkpoints, oldest deleted first.

        Countable means unpinned and not the newest checkpoint of a session that is not
        ``completed``: pinned checkpoints and those newest ones neither count nor go. Of
        ``session_id`` (if given) at most ``per_session`` countable checkpoints stay (its oldest
        go); then, of the whole store, at most ``total`` (the oldest by row number go). A deleted
        checkpoint leaves the search index too.
        """


class MemoryStore(ABC):
    """The memory port of one store: transactions and snapshots ride on the store's own."""

    @abstractmethod
    def write(self, tx: Transaction) -> MemoryTransaction:
        """Memory writes inside ``tx``, a writing transaction of this port's store (valid while it is open)."""

    @abstractmethod
    def read(self, reader: Reader) -> MemoryReader:
        """Memory reads inside ``reader``, a snapshot (or transaction) of this port's store."""

    @abstractmethod
    def info(self) -> dict[str, Any]:
        """What the adapter is: ``adapter`` and ``fts`` (``fts5``, ``like`` or ``tsvector``)."""

    def transaction(self) -> AbstractContextManager[MemoryTransaction]:
        """Convenience: a writing transaction of the store with memory writes bound to it."""
        return _Bound(self)

    def snapshot(self) -> AbstractContextManager[MemoryReader]:
        """Convenience: a snapshot of the store with memory reads bound to it."""
        return _BoundReader(self)

    @property
    @abstractmethod
    def store(self) -> Store:
        """The store this port lives in."""


class _Bound:
    def __init__(self, memory: MemoryStore) -> None:
        self._memory = memory
        self._cm: AbstractContextManager[Transaction] | None = None

    def __enter__(self) -> MemoryTransaction:
        self._cm = self._memory.store.write()
        tx = self._cm.__enter__()
        return self._memory.write(tx)

    def __exit__(self, *exc: Any) -> Any:
        assert self._cm is not None
        return self._cm.__exit__(*exc)


class _BoundReader:
    def __init__(self, memory: MemoryStore) -> None:
        self._memory = memory
        self._cm: AbstractContextManager[Reader] | None = None

    def __enter__(self) -> MemoryReader:
        self._cm = self._memory.store.read()
        return self._memory.read(self._cm.__enter__())

    def __exit__(self, *exc: Any) -> Any:
        assert self._cm is not None
        return self._cm.__exit__(*exc)


MemoryStoreFactory = Callable[[Store], MemoryStore]

MEMORY_STORES: Registry[MemoryStoreFactory] = Registry("memory store", "corral.memory_stores")
"""Memory adapters by the scheme of the store they live in."""


# The built-in adapters, named (not imported) by this port: each is imported when first used.
MEMORY_STORES.lazy(
    "sqlite",
    "runner.sql.memory_sqlite:SQLiteMemory",
    "Memory in the tables ``memory_*`` of the SQLite store's own file and connection.",
)
MEMORY_STORES.lazy(
    "postgresql",
    "runner.sql.memory_postgres:PostgresMemory",
    "Memory in the tables ``memory_*`` of the PostgreSQL store's own schema and connection.",
)


def memory_store(store: Store) -> MemoryStore:
    """The memory port for ``store``, by its URL's scheme (an SQLite store under another scheme,
    such as a plugin's alias, gets the SQLite adapter).

    Raises:
        InputError: ``memory_unsupported`` when no memory adapter exists for that kind of store.
    """
    scheme = scheme_of(store.url)
    entry = MEMORY_STORES.get(scheme)
    if entry is None and store.backend:
        entry = MEMORY_STORES.get(store.backend)
    if entry is None:
        raise InputError(
            "store",
            f"a {scheme} store keeps no handoff memory (no memory adapter is installed)",
            code="memory_unsupported",
            url=scheme + "://…",
        )
    return entry.fn(store)


def iter_chunks(values: Sequence[int], size: int = 500) -> Iterator[Sequence[int]]:
    """``values`` in slices of at most ``size`` (statement parameter lists stay bounded)."""
    for start in range(0, len(values), size):
        yield values[start : start + size]
