"""One page of a listing: its rows and the cursor of the next page."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

T = TypeVar("T")


class Page(list[T]):
    """One page of a listing: its rows (a ``list``, as listings returned before they paged) and the cursor.

    ``next_after`` is what to pass as the listing input's ``after`` for the next page (the last row's
    key: a lease's instance id, a controller id, a plan id, a receipt id), or None when no row
    follows. Pages are keyset by instance id, so walking them visits every instance once.
    """

    def __init__(self, rows: Iterable[T] = (), next_after: str | None = None) -> None:
        super().__init__(rows)
        self.next_after = next_after
