"""The store suites run over every registered store: see ``tests/support/stores.py``."""

from __future__ import annotations

from tests.support.stores import any_store, race_url, store_kind

__all__ = ["any_store", "race_url", "store_kind"]
