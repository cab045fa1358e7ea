"""The event log's and the definitions' inputs: events, validate."""

from __future__ import annotations

from pathlib import Path

from runner.errors import InputError
from runner.service.inputs.fields import described, input_class


@input_class
class EventsInput:
    """The event log after ``since``, optionally of one instance, at most ``limit`` events."""

    since: int = described("since", "Events after this global sequence number.", default=0)
    limit: int | None = described("limit", "At most this many events (default 1000).", default=None, shown_default=1000)
    instance_id: str | None = described("instance", "Only this instance's events.", default=None)

    def __post_init__(self) -> None:
        if not isinstance(self.since, int) or self.since < 0:
            raise InputError("since", f"{self.since!r} is not a sequence number (an integer >= 0)")
        if self.limit is not None and (not isinstance(self.limit, int) or self.limit < 1):
            raise InputError("limit", f"{self.limit!r} is not a positive integer")


@input_class
class ValidateInput:
    """Definition files to validate; empty means the built-in and local machines."""

    paths: tuple[Path, ...] = ()
