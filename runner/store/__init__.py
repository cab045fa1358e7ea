"""Stores: where instances and events live. ``open_store`` picks the adapter from a URL.

=====================================  ==============================================
URL                                    adapter
=====================================  ==============================================
``sqlite:///abs/path.db``              :class:`~runner.store.sqlite.SQLiteStore`
``sqlite:relative/path.db``, a path    the same, relative to the working directory
``postgresql://…``                     not yet available (planned: psycopg 3 adapter)
=====================================  ==============================================
"""

from __future__ import annotations

import re
from pathlib import Path

from runner.errors import InputError
from runner.store.abc import Reader, Store, Transaction
from runner.store.sqlite import Clock, SQLiteStore

__all__ = ["Reader", "Store", "Transaction", "open_store", "sqlite_path"]


def sqlite_path(url: str) -> Path | None:
    """The file an SQLite URL (or bare path) names, or None for another scheme."""
    if url.startswith("sqlite:"):
        rest = url[len("sqlite:") :]
        if rest.startswith("//"):
            rest = "/" + rest.lstrip("/")
        return Path(rest)
    if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", url):
        return None
    return Path(url)


def open_store(url: str, *, clock: Clock | None = None) -> Store:
    """Open the store at ``url``, creating an SQLite file (not its directory) if needed.

    Raises:
        InputError: ``store_url_invalid`` for an unknown scheme or a missing directory.
    """
    path = sqlite_path(url)
    if path is None:
        scheme = url.split("://", 1)[0]
        if scheme in ("postgresql", "postgres"):
            raise InputError(
                "store",
                "the PostgreSQL store is not available yet; use an sqlite: URL",
                code="store_unsupported",
                url=scheme + "://…",
            )
        raise InputError("store", f"unknown store scheme {scheme!r} (expected sqlite:)", code="store_url_invalid")
    if str(path) in ("", "/"):
        raise InputError("store", f"the store URL {url!r} names no file", code="store_url_invalid")
    if not path.parent.is_dir():
        raise InputError(
            "store",
            f"the directory of the store file does not exist: {path.parent}",
            code="store_url_invalid",
            path=str(path),
        )
    return SQLiteStore(path, clock=clock)
