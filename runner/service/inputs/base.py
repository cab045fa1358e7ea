"""The shared bases of the inputs: a fenced operation (:class:`FencedInput`) and a listing's paging."""

from __future__ import annotations

from runner.errors import InputError
from runner.fence import Credential
from runner.service.checks import (
    check_controller_id,
    check_credential,
)
from runner.service.inputs.fields import described, input_class

LIMIT_MAX = 10_000
"""The largest page a listing input accepts (``limit``)."""


def check_page(after: str | None, limit: int | None) -> None:
    """A listing's paging: ``limit`` an integer 1..LIMIT_MAX, ``after`` a non-empty key of at most 300 characters."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= LIMIT_MAX):
        raise InputError("limit", f"{limit!r} is not a page size from 1 to {LIMIT_MAX}")
    if after is not None and (not isinstance(after, str) or not after or len(after) > 300 or not after.isprintable()):
        raise InputError("after", f"{after!r} is not a cursor (the next_after of the previous page)")


@input_class
class FencedInput:
    """An operation done for a controller: its id and the credential of its lease (checked to match)."""

    controller_id: str = described(
        "controller", "The controller id whose lease you hold (its credential stays on the server)."
    )
    credential: Credential

    def __post_init__(self) -> None:
        check_controller_id(self.controller_id)
        check_credential(self.credential, self.controller_id)


@input_class
class ListingInput:
    """A listing's filter and page: one controller's (if given), live ones unless ``include_ended``,
    at most ``limit`` after the key ``after`` (the previous page's ``next_after``)."""

    controller_id: str | None = described("controller", "Only this controller's.", default=None)
    include_ended: bool = described(
        "all", "Include ended ones too (released, closed, settled, finished).", default=False
    )
    after: str | None = described("after", "Start after this key: the previous page's next_after.", default=None)
    limit: int | None = described(
        "limit", "At most this many rows (1-10000); the reply's next_after starts the next page.", default=None
    )

    def __post_init__(self) -> None:
        if self.controller_id is not None:
            check_controller_id(self.controller_id)
        check_page(self.after, self.limit)
