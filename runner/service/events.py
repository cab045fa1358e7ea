"""The event log: read it after a sequence number, or follow it as events are recorded."""

from __future__ import annotations

from collections.abc import Iterator

from runner.context import Event, Instance
from runner.service.core import Core
from runner.service.inputs import EventsInput


class Events:
    """Reads of the event log (every transition recorded, never a secret)."""

    def __init__(self, core: Core) -> None:
        self.core = core

    def __call__(self, inp: EventsInput) -> list[Event]:
        """``service.events(inp)``: :meth:`read` (the spelling before events were a component)."""
        return self.read(inp)

    def read(self, inp: EventsInput) -> list[Event]:
        """The event log after ``inp.since`` (of one instance, at most ``inp.limit`` events, if given)."""
        return self.core.store.events(inp.since, inp.limit, inp.instance_id)

    def follow(self, since: int) -> Iterator[Event]:
        """Events after ``since`` as they are recorded, for ever (the caller stops reading)."""
        return self.core.store.follow(since)

    def history(self, instance_id: str) -> tuple[Instance | None, list[Event]]:
        """The instance now (None if it never existed) and all its events, oldest first."""
        store = self.core.store
        return store.get(instance_id), store.events(instance_id=instance_id)
