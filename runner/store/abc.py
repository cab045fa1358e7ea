"""The store port: durable instances, compare-and-set, named counters, an append-only event log,
and a claim index (:class:`~runner.context.Claim`: what live instances hold, such as a writer lane's
scopes, branch and worktree, looked up by overlap in index probes).

That is all a store holds. Every adapter (``sqlite``, later ``postgresql``) implements :class:`Store`
and registers an opener in :data:`runner.store.STORES`; one conformance suite in ``tests/store/`` runs
against every registered adapter. Components that keep their own rows beside corral's (the process
host's agent slots, ``runner.agents.slots``) have ports of their own, whose adapters run inside this
port's transactions. A writing :class:`Transaction` is serialized against every other
writer of the same store (``BEGIN IMMEDIATE`` on SQLite, an advisory lock on PostgreSQL), so rules
that span rows (one open receipt per target, scopes that must not overlap) can be checked inside it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any

from runner.context import Claim, Event, Instance

Clock = Callable[[], datetime]
"""A store's clock: tests inject one, adapters default to the system's UTC time."""


class Reader(ABC):
    """Reads from one consistent snapshot of the store."""

    @abstractmethod
    def get(self, instance_id: str) -> Instance | None:
        """The instance with this id, or None if it was never written."""

    @abstractmethod
    def find(self, machine: str, states: Iterable[str] | None = None) -> list[Instance]:
        """Instances of ``machine`` (in the given states, if any), ordered by id."""

    @abstractmethod
    def overlapping_claims(
        self,
        space: str | None,
        scopes: Iterable[str],
        kinds: Iterable[str] | None = None,
        states: Iterable[str] | None = None,
    ) -> list[Claim]:
        """Every claim in ``space`` whose scope overlaps one of ``scopes``, ordered by
        (instance id, space, kind, scope).

        A claim overlaps a scope when it is equal to it, one of its ancestor directories, or lies
        under it (:func:`runner.scopes.overlaps`). Only claims of the given ``kinds`` count, and only
        of instances now in one of ``states`` (if given): a claim left by an instance that moved on
        is never returned. ``space=None`` means every space.

        The cost is index probes, not a scan: for each given scope one equality probe per ancestor
        (and itself) and one range probe for what lies under it (``s + "/" < scope < s + "0"`` in
        binary collation), so O(len(scopes) x depth) plus the claims found.
        """


class Transaction(Reader):
    """One serialized writing transaction; everything in it commits together or not at all.

    ``now`` is the store's clock, read once when the transaction began: every guard and update in
    the transaction judges time by it.
    """

    now: datetime

    @abstractmethod
    def put(self, instance: Instance, state: str, data: Mapping[str, Any]) -> Instance:
        """Compare-and-set: write ``state`` and ``data`` if the row is still at ``instance.version``.

        Inserts when ``instance.version`` is 0. Returns the instance at its new version.

        Raises:
            ConflictError: ``version_conflict`` if the row moved (or exists, for an insert).
        """

    @abstractmethod
    def set_claims(self, instance_id: str, claims: Iterable[tuple[str, str, str]]) -> None:
        """Replace every claim ``instance_id`` holds with these ``(space, kind, scope)`` triples.

        Empty clears them; duplicates count once. The claims commit (or roll back) with the rest of
        the transaction, so an instance's claims and its row are always of one version. The engine
        calls this with what an :class:`~runner.context.Update` declared, and with nothing when an
        instance reaches a terminal state.
        """

    @abstractmethod
    def next_number(self, counter: str) -> int:
        """The next value (1, 2, …) of a named counter; never handed out twice."""

    @abstractmethod
    def append(
        self, instance: Instance, trigger: str, from_state: str, actor: str, payload: Mapping[str, Any]
    ) -> Event:
        """Append one event for ``instance`` (as just written) with the next global sequence number."""


class Store(ABC):
    """A durable home for instances and their event log."""

    url: str

    @abstractmethod
    def write(self) -> AbstractContextManager[Transaction]:
        """A serialized writing transaction; commits on a clean exit, rolls back on an exception.

        Raises:
            StoreBusyError: when the store stays locked past the adapter's retry deadline.
        """

    @abstractmethod
    def read(self) -> AbstractContextManager[Reader]:
        """A read-only snapshot; never blocks writers and is never blocked by them."""

    @abstractmethod
    def now(self) -> datetime:
        """The store's clock, by which expiry is judged."""

    @abstractmethod
    def events(self, since: int = 0, limit: int | None = None, instance_id: str | None = None) -> list[Event]:
        """Events with ``seq > since`` in sequence order."""

    @abstractmethod
    def wait_events(self, since: int, timeout: float) -> list[Event]:
        """Events after ``since``, waiting up to ``timeout`` seconds for the first to appear."""

    @abstractmethod
    def info(self) -> dict[str, Any]:
        """What the store is (adapter, location, schema version), for ``corral status``."""

    @abstractmethod
    def close(self) -> None:
        """Release the connection; the store object is unusable afterwards."""

    def get(self, instance_id: str) -> Instance | None:
        """Convenience: one instance from a fresh snapshot."""
        with self.read() as reader:
            return reader.get(instance_id)

    def find(self, machine: str, states: Iterable[str] | None = None) -> list[Instance]:
        """Convenience: instances of one machine from a fresh snapshot."""
        with self.read() as reader:
            return reader.find(machine, states)

    def follow(self, since: int, poll: float = 1.0) -> Iterator[Event]:
        """Every event after ``since``, as it is appended, forever."""
        while True:
            for event in self.wait_events(since, poll):
                since = event.seq
                yield event

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
