"""The event log's and the definitions' inputs: events, validate."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from runner.errors import InputError


@dataclass(frozen=True)
class EventsInput:
    """The event log after ``since``, optionally of one instance, at most ``limit`` events."""

    since: int = 0
    limit: int | None = None
    instance_id: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.since, int) or self.since < 0:
            raise InputError("since", f"{self.since!r} is not a sequence number (an integer >= 0)")
        if self.limit is not None and (not isinstance(self.limit, int) or self.limit < 1):
            raise InputError("limit", f"{self.limit!r} is not a positive integer")


@dataclass(frozen=True)
class ValidateInput:
    """Definition files to validate; empty means the built-in and local machines."""

    paths: tuple[Path, ...] = ()
