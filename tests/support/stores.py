"""Conformance factories: how the store suites make a fresh store of each registered kind.

The store conformance suite (``tests/store/test_conformance.py``) and the process host's slot
conformance suite (``tests/agents/test_slots.py``) run once per scheme in
:data:`runner.store.STORES`; each scheme needs a :class:`StoreKind` here, and a registered scheme
without one fails the suite. Adding an adapter (PostgreSQL: a scratch database per test, skipped
when no server is configured) is adding its kind to :data:`KINDS`.

A kind knows what the port cannot say portably: where a fresh store goes, how to open a second
connection with a short busy deadline, how to make a database look newer than this code, and how
to damage one row the way a bad disk or a foreign writer would.
"""

from __future__ import annotations

import sqlite3
from abc import ABC, abstractmethod
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from runner.store import STORES, Clock, Store, open_store, sqlite_path


class StoreKind(ABC):
    """Fresh stores of one registered scheme, and the raw access its conformance tests need."""

    scheme: str

    @abstractmethod
    def url(self, directory: Path) -> str:
        """A URL for a new, empty store whose files (if any) go in ``directory``."""

    def open(self, url: str, clock: Clock | None = None, busy_deadline: float | None = None) -> Store:
        """Open (another connection to) the store at ``url``; through ``open_store`` unless a deadline is set."""
        if busy_deadline is None:
            return open_store(url, clock=clock)
        return self.open_with_deadline(url, clock, busy_deadline)

    @abstractmethod
    def open_with_deadline(self, url: str, clock: Clock | None, busy_deadline: float) -> Store:
        """The store at ``url`` whose writers give up with ``store_busy`` after ``busy_deadline`` s."""

    @abstractmethod
    def make_newer(self, url: str) -> None:
        """Mark the (closed) store as written by a newer corral: its schema version beyond this code's."""

    @abstractmethod
    def corrupt(self, url: str, table: str, row: object, column: str) -> None:
        """Overwrite one JSON column of one row with text that is not a JSON object."""


class SQLiteKind(StoreKind):
    scheme = "sqlite"
    _keys: ClassVar[dict[str, str]] = {
        "instances": "id",
        "events": "seq",
        "agent_slots": "pane_id",
        "instance_parts": "instance_id",  # the tests damage an instance's only part
    }

    def url(self, directory: Path) -> str:
        return f"sqlite://{directory / 'conformance.db'}"

    def open_with_deadline(self, url: str, clock: Clock | None, busy_deadline: float) -> Store:
        from runner.store.sqlite import SQLiteStore

        path = sqlite_path(url)
        assert path is not None
        return SQLiteStore(path, clock=clock, busy_deadline=busy_deadline)

    def _raw(self, url: str) -> sqlite3.Connection:
        path = sqlite_path(url)
        assert path is not None and path.exists()
        return sqlite3.connect(path, isolation_level=None)

    def make_newer(self, url: str) -> None:
        from runner.store.sqlite import SCHEMA_VERSION

        conn = self._raw(url)
        try:
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
        finally:
            conn.close()

    def corrupt(self, url: str, table: str, row: object, column: str) -> None:
        conn = self._raw(url)
        try:
            conn.execute("DROP TRIGGER IF EXISTS events_no_update")  # the log is append-only even to raw SQL
            cursor = conn.execute(f"UPDATE {table} SET {column} = 'not json' WHERE {self._keys[table]} = ?", (row,))
            assert cursor.rowcount == 1, f"no {table} row {row!r} to damage"
        finally:
            conn.close()


class ExampleKind(SQLiteKind):
    """The example plugin's store (tests/plugins/example, installed in the test venv): an SQLite file
    named by an ``example://`` URL, so its raw access is SQLite's."""

    scheme = "example"

    def url(self, directory: Path) -> str:
        return f"example://{directory / 'conformance.db'}"

    def _raw(self, url: str) -> sqlite3.Connection:
        return super()._raw("sqlite://" + url.split("://", 1)[1])

    def open_with_deadline(self, url: str, clock: Clock | None, busy_deadline: float) -> Store:
        return super().open_with_deadline("sqlite://" + url.split("://", 1)[1], clock, busy_deadline)


KINDS: dict[str, StoreKind] = {kind.scheme: kind for kind in (SQLiteKind(), ExampleKind())}


def kind_for(scheme: str) -> StoreKind:
    """The conformance factory of a registered scheme; a registered scheme without one fails the test."""
    kind = KINDS.get(scheme)
    if kind is None:
        pytest.fail(f"the store {scheme!r} is registered but has no conformance factory in tests/support/stores.py")
    return kind


@pytest.fixture(params=STORES.names())
def store_kind(request: pytest.FixtureRequest) -> StoreKind:
    """Each registered store's conformance factory in turn."""
    return kind_for(request.param)


@pytest.fixture
def any_store(store_kind: StoreKind, tmp_path: Path, clock: Clock) -> Iterator[Store]:
    """A fresh store of each registered kind, on the suite's controllable clock."""
    with store_kind.open(store_kind.url(tmp_path), clock=clock) as store:
        yield store


def open_alias(url: str, clock: Clock | None = None) -> Store:
    """A plugin-style opener (``alias://<path>`` is an SQLite file): the registry's entry point example."""
    return open_store("sqlite://" + url.split("://", 1)[1], clock=clock)
