"""A store: an opener for a URL scheme, and the process host's slot port for that kind of store.

``example:///abs/path.db`` is an SQLite file under another name: the example shows the whole chain
a new adapter plugs into (``--store`` URL -> opener -> a store that names itself by that URL, so
credentials are bound to it -> the slot port the process host finds by the scheme), not a new
engine. Issue 16's PostgreSQL adapter registers ``postgresql`` the same two ways.
"""

from __future__ import annotations

from typing import Any

from runner.agents.slots import SlotStore
from runner.store.abc import Clock, Store

PREFIX = "example://"


def open_example_store(url: str, clock: Clock | None = None) -> Store:
    """An SQLite file named by an example:// URL (an example plugin's store)."""
    from runner.sql.store_sqlite import SQLiteStore
    from runner.store import sqlite_path

    class ExampleStore(SQLiteStore):
        def info(self) -> dict[str, Any]:
            return {**super().info(), "adapter": "example"}

    path = sqlite_path("sqlite://" + url[len(PREFIX) :])
    assert path is not None
    store = ExampleStore(path, clock=clock)
    store.url = PREFIX + str(path)
    return store


def example_slots(store: Store) -> SlotStore:
    """The process host's slots in an example store: a table of its SQLite file, on its connection."""
    from runner.sql.slots_sqlite import SQLiteSlots

    return SQLiteSlots(store)
