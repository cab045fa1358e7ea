"""The dashboard's read inputs: a search of the event log."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import datetime

from runner.errors import InputError
from runner.service.inputs.fields import described, input_class

EVENT_SEARCH_LIMIT = 10_000
"""The most events one search answers (a plan of 10,000 events is read whole, in one answer)."""


@input_class
class EventSearchInput:
    """Events after ``since`` that match every filter given, oldest first, at most ``limit``."""

    since: int = described("since", "Events after this global sequence number.", default=0)
    limit: int = described("limit", f"At most this many events (1-{EVENT_SEARCH_LIMIT}).", default=1000)
    instance: str | None = described("instance", "Only this instance's events (machine/id).", default=None)
    plan: str | None = described(
        "plan", "Only this plan's events and those of the instances its steps created.", default=None
    )
    machine: str | None = described("machine", "Only this machine's events.", default=None)
    trigger: str | None = described("trigger", "Only this trigger's events.", default=None)
    actor: str | None = described("actor", "Only events whose actor contains this text.", default=None)
    after: str | None = described("after", "Only events at or after this time (ISO 8601, UTC).", default=None)
    before: str | None = described("before", "Only events before this time (ISO 8601, UTC).", default=None)
    text: str | None = described(
        "q", "Only events whose instance, trigger, states or actor contain this text.", default=None
    )

    def __post_init__(self) -> None:
        if not isinstance(self.since, int) or self.since < 0:
            raise InputError("since", f"{self.since!r} is not a sequence number (an integer >= 0)")
        if not isinstance(self.limit, int) or not 1 <= self.limit <= EVENT_SEARCH_LIMIT:
            raise InputError("limit", f"{self.limit!r} is not an integer from 1 to {EVENT_SEARCH_LIMIT}")
        for name in ("after", "before"):
            value = getattr(self, name)
            if value is None:
                continue
            try:
                datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                raise InputError(name, f"{value!r} is not an ISO 8601 time (2026-01-31T12:00:00Z)") from None

    @classmethod
    def from_query(cls, query: Mapping[str, str]) -> EventSearchInput:
        """The search a query string asks for (``?machine=plan&limit=50``): each key an argument name
        above; the integers parsed; an unknown key refused (``input_invalid``)."""
        by_arg = {f.metadata["arg"]: f for f in dataclasses.fields(cls)}
        args: dict[str, object] = {}
        for key, value in query.items():
            found = by_arg.get(key)
            if found is None:
                raise InputError(key, f"an event search takes no argument {key!r} (it takes {', '.join(by_arg)})")
            if found.name in ("since", "limit"):
                try:
                    args[found.name] = int(value)
                except ValueError:
                    raise InputError(key, f"{value!r} is not an integer") from None
            else:
                args[found.name] = value or None
        return cls(**args)  # type: ignore[arg-type]  # each value is of its field's type, checked above
