"""Stores: where instances and events live. ``open_store`` resolves a URL's scheme in :data:`STORES`.

=====================================  ==============================================
URL                                    adapter
=====================================  ==============================================
``sqlite:///abs/path.db``              :class:`~runner.sql.store_sqlite.SQLiteStore`
``sqlite:relative/path.db``, a path    the same, relative to the working directory
``postgresql://…``, ``postgres://…``   :class:`~runner.sql.store_postgres.PostgresStore` (``?schema=NAME``)
=====================================  ==============================================

An adapter is one module plus one registry entry: a scheme mapped to an opener
``open(url, clock=None) -> Store``. The built-ins (``sqlite``, ``postgresql``, in :mod:`runner.sql`)
register here by name; another distribution adds its scheme through the entry point group
``corral.stores`` (``postgresql = "package.module:open"``), loaded the first time a URL's scheme is
not among the built-ins. An opener imports its driver when called, so naming a store costs nothing
until one is opened.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Protocol

from runner.errors import InputError
from runner.registry import Registry
from runner.store.abc import Clock, IdempotencyRecord, Reader, Store, Transaction

__all__ = [
    "STORES",
    "Clock",
    "IdempotencyRecord",
    "Reader",
    "Store",
    "StoreOpener",
    "Transaction",
    "open_store",
    "scheme_of",
    "sqlite_path",
]

_URL_SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")


class StoreOpener(Protocol):
    """Opens the store a URL of its scheme names (creating it if the adapter does that)."""

    def __call__(self, url: str, clock: Clock | None = None) -> Store: ...


STORES: Registry[StoreOpener] = Registry("store", "corral.stores")
"""Store adapters by URL scheme; plugins join through the entry point group ``corral.stores``."""


def scheme_of(url: str) -> str:
    """The scheme that picks a URL's adapter: ``sqlite`` for ``sqlite:`` URLs and bare paths,
    ``postgresql`` for ``postgres://`` too (libpq's alias: one adapter, one registry entry)."""
    if url.startswith("sqlite:"):
        return "sqlite"
    found = _URL_SCHEME.match(url)
    if not found:
        return "sqlite"
    scheme = found.group(1)
    return "postgresql" if scheme == "postgres" else scheme


def sqlite_path(url: str) -> Path | None:
    """The file an SQLite URL (or bare path) names, or None for another scheme."""
    if url.startswith("sqlite:"):
        rest = url[len("sqlite:") :]
        if rest.startswith("//"):
            rest = "/" + rest.lstrip("/")
        return Path(rest)
    if _URL_SCHEME.match(url):
        return None
    return Path(url)


# The built-in adapters, named (not imported) by this port: each is imported when a store of its
# scheme is first opened (sqlite3 and psycopg load only then).
STORES.lazy(
    "sqlite",
    "runner.sql.store_sqlite:open_sqlite",
    "One SQLite file, created (not its directory) if missing: the embedded default.",
)
STORES.lazy(
    "postgresql",
    "runner.sql.store_postgres:open_postgresql",
    "One schema of a PostgreSQL database, shared by coordinators on several machines.",
)


def open_store(url: str, *, clock: Clock | None = None) -> Store:
    """Open the store at ``url`` through the adapter its scheme names.

    Raises:
        InputError: ``store_url_invalid`` for an unknown scheme or a missing directory;
            ``store_unsupported`` for PostgreSQL while psycopg is not installed.
    """
    scheme = scheme_of(url)
    entry = STORES.get(scheme)
    if entry is None:
        expected = ", ".join(f"{name}:" for name in STORES.names())
        raise InputError("store", f"unknown store scheme {scheme!r} (expected {expected})", code="store_url_invalid")
    return entry.fn(url, clock=clock)
