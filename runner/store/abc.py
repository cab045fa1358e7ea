"""The store port: durable instances, compare-and-set, named counters and an append-only event log.

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

from runner.context import Event, Instance

Clock = Callable[[], datetime]
"""A store's clock: tests inject one, adapters default to the system's UTC time."""


class Reader(ABC):
    """Reads from one consistent snapshot of the store."""

    @abstractmethod
    def get(self, instance_id: str) -> Instance | None:
        """The instance with this id, or None if it was never written."""

    @abstractmethod
    def find(
        self,
        machine: str,
        states: Iterable[str] | None = None,
        *,
        after: str | None = None,
        limit: int | None = None,
    ) -> list[Instance]:
        """Instances of ``machine`` (in the given states, if any), ordered by id.

        Paging is keyset by id: ``after`` keeps only ids strictly greater than it (by code point, as
        Python compares ``str``; an id that is not stored is a valid cursor), ``limit`` (>= 1) keeps
        the first that many. Paging through with ``after`` = the last id of the previous page visits
        every instance present for the whole walk exactly once, in id order, whatever is written
        between pages; an adapter answers a page in time that grows with ``limit``, not with the
        number of instances before ``after``.
        """

    @abstractmethod
    def counts(self, machine: str | None = None) -> dict[tuple[str, str], int]:
        """How many instances there are by ``(machine, state)`` (of one ``machine``, if given).

        Only pairs with at least one instance appear. Nothing is decoded: an adapter answers from
        its machine and state columns (an aggregate), so the cost does not grow with the data.
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

    def find(
        self,
        machine: str,
        states: Iterable[str] | None = None,
        *,
        after: str | None = None,
        limit: int | None = None,
    ) -> list[Instance]:
        """Convenience: instances of one machine from a fresh snapshot (:meth:`Reader.find`)."""
        with self.read() as reader:
            return reader.find(machine, states, after=after, limit=limit)

    def counts(self, machine: str | None = None) -> dict[tuple[str, str], int]:
        """Convenience: instance counts by machine and state from a fresh snapshot (:meth:`Reader.counts`)."""
        with self.read() as reader:
            return reader.counts(machine)

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
