"""The event log: read it after a sequence number, stream or follow it, and prune its oldest events.

Reads stream (``Store.iter_events``: pages of bounded size), so reading a log of a million events
costs the memory of one page. Retention deletes a prefix of the log and raises the store's
retention floor; a read after a cursor below the floor fails with ``events_pruned`` (naming the
floor) unless the caller asked to start at the floor on purpose (``from_floor``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from itertools import islice

from runner.context import Event, Instance
from runner.errors import EventsPrunedError, InputError
from runner.service.core import Core
from runner.service.inputs.events import EventsInput
from runner.store.abc import Pruned

TAIL_TICK = 0.005
"""How often :meth:`Events.tail` probes a store that cannot notify (a pragma, no table read)."""
_DURATION = re.compile(r"(\d+)([smhdw])")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration(text: str, field: str = "older_than") -> timedelta:
    """``90s``, ``15m``, ``12h``, ``30d``, ``2w`` or a sum of them (``1d12h``); at least one second.

    Raises:
        InputError: ``field`` is not such a duration.
    """
    cleaned = text.strip().lower()
    parts = _DURATION.findall(cleaned)
    if not parts or "".join(n + u for n, u in parts) != cleaned:
        raise InputError(field, f"{text!r} is not a duration (e.g. 90s, 15m, 12h, 30d, 2w, 1d12h)")
    seconds = sum(int(number) * _UNITS[unit] for number, unit in parts)
    if seconds < 1 or seconds > 100 * 365 * 86400:
        raise InputError(field, f"{text!r} is not a duration between 1 s and 100 years")
    return timedelta(seconds=seconds)


@dataclass(frozen=True)
class PruneEventsInput:
    """Which oldest events to delete: exactly one of ``keep`` (the newest N stay), ``before`` (events
    with ``seq < before`` go) and ``older_than`` (a duration: events recorded longer ago go)."""

    keep: int | None = None
    before: int | None = None
    older_than: str | None = None
    dry_run: bool = False

    def __post_init__(self) -> None:
        given = [name for name in ("keep", "before", "older_than") if getattr(self, name) is not None]
        if len(given) != 1:
            raise InputError(
                "prune",
                f"give exactly one of keep, before, older_than (got {', '.join(given) or 'none'})",
                given=given,
            )
        for name in ("keep", "before"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise InputError(name, f"{value!r} is not an integer >= 0")
        if self.older_than is not None:
            parse_duration(self.older_than)

    @classmethod
    def from_policy(cls, policy: str, *, dry_run: bool = False, field: str = "CORRAL_EVENTS_KEEP") -> PruneEventsInput:
        """The configured retention policy: a count of newest events to keep (``1000000``) or a
        duration (``30d``) beyond which events go.

        Raises:
            InputError: ``policy`` is neither (``field`` names where it came from).
        """
        text = policy.strip()
        if text.isdigit():
            return cls(keep=int(text), dry_run=dry_run)
        parse_duration(text, field)
        return cls(older_than=text, dry_run=dry_run)

    @property
    def criterion(self) -> dict[str, int | str]:
        """The one criterion given, as ``{name: value}``."""
        return {name: value for name in ("keep", "before", "older_than") if (value := getattr(self, name)) is not None}


class Events:
    """Reads of the event log (every transition recorded, never a secret), and its retention."""

    def __init__(self, core: Core) -> None:
        self.core = core

    def __call__(self, inp: EventsInput) -> list[Event]:
        """``service.events(inp)``: :meth:`read` (the spelling before events were a component)."""
        return self.read(inp)

    def read(self, inp: EventsInput) -> list[Event]:
        """The event log after ``inp.since`` (of one instance, at most ``inp.limit`` events, if given),
        as a list: for the whole log use :meth:`stream`.

        Raises:
            EventsPrunedError: ``inp.since`` is below the retention floor.
        """
        if inp.limit is None:
            return list(self.stream(inp))
        return self.core.store.events(inp.since, inp.limit, inp.instance_id)

    def stream(self, inp: EventsInput, *, from_floor: bool = False) -> Iterator[Event]:
        """The same events as :meth:`read`, one page in memory at a time.

        ``from_floor``: a ``since`` below the retention floor starts at the floor instead of failing
        (the caller accepts that the older events are gone). A prune that overtakes the stream once it
        has begun still raises: a stream never has a hole in its middle.

        Raises:
            EventsPrunedError: ``inp.since`` is (or while streaming falls) below the retention floor.
        """
        found = self._from(inp.since, inp.instance_id, from_floor)
        return found if inp.limit is None else islice(found, inp.limit)

    def _from(self, since: int, instance_id: str | None, from_floor: bool) -> Iterator[Event]:
        store = self.core.store
        if from_floor:
            since = max(since, store.retention_floor())
        while True:
            stream = store.iter_events(since, instance_id)
            try:
                first = next(stream, None)
            except EventsPrunedError as exc:
                if not from_floor:
                    raise
                since = max(since, exc.floor)  # pruned again between the two reads: start at the new floor
                continue
            if first is not None:
                yield first
                yield from stream
            return

    def follow(self, since: int, *, from_floor: bool = False) -> Iterator[Event]:
        """Events after ``since`` as they are recorded, for ever (the caller stops reading); the backlog
        first, page by page.

        Raises:
            EventsPrunedError: ``since`` is below the retention floor (unless ``from_floor``), or a
                prune overtakes the follower.
        """
        store = self.core.store
        if from_floor:
            since = max(since, store.retention_floor())
        return store.follow(since)

    def history(self, instance_id: str) -> tuple[Instance | None, list[Event]]:
        """The instance now (None if it never existed) and its events, oldest first: all of them, or
        after a prune those above the retention floor (the instance itself is never pruned)."""
        store = self.core.store
        return store.get(instance_id), list(self._from(0, instance_id, True))

    def floor(self) -> int:
        """The store's retention floor: the highest pruned sequence number (0 if none ever was)."""
        return self.core.store.retention_floor()

    def wait(self, since: int, timeout: float, limit: int | None = None) -> list[Event]:
        """Events after ``since`` (at most ``limit``), waiting up to ``timeout`` s for the first one: the
        live tail of a stream, re-read from the store (so several servers on one store serve the same).

        Raises:
            EventsPrunedError: ``since`` is (or while waiting falls) below the retention floor.
        """
        return self.core.store.wait_events(since, timeout, limit)

    def tail(self, since: int, timeout: float, limit: int | None = None, tick: float = TAIL_TICK) -> list[Event]:
        """:meth:`wait` for a live tail that must see a commit within ``tick`` s: the events after
        ``since`` (at most ``limit``), waiting up to ``timeout`` s for the first one.

        A store notified of commits (PostgreSQL) waits as :meth:`wait` does; one that must poll
        (SQLite) looks every ``tick`` instead of its default 50 ms, through a probe that reads no table
        (``data_version``), and reads the log only when the probe moved.

        Raises:
            EventsPrunedError: ``since`` is (or while waiting falls) below the retention floor.
        """
        return self.core.store.wait_events(since, timeout, limit, poll=tick)

    def store_id(self) -> str:
        """The store's identity (an epoch a stream's cursor carries: a cursor of another store, or of a
        restored copy made before, is told apart from ours)."""
        return str(self.core.store.info().get("store_id") or "")

    def snapshot(self, instance_id: str) -> dict[str, object] | None:
        """One instance as it is now (its public data only) with ``last_event_seq``: the sequence number
        of the event that brought it to this version, so tailing its events after it misses nothing and
        repeats nothing; ``terminal`` says whether its state ends it. None if it never existed."""
        store = self.core.store
        instance = store.get(instance_id)
        if instance is None:
            return None
        last = 0
        for event in self._from(0, instance_id, True):
            if event.version > instance.version:
                break
            last = event.seq
        spec = self.core.library.builtin(instance.machine)
        state = spec.states.get(instance.state)
        return {
            "id": instance.id,
            "machine": instance.machine,
            "state": instance.state,
            "version": instance.version,
            "terminal": bool(state is not None and state.terminal),
            "data": spec.public_data(instance.data),
            "last_event_seq": max(last, store.retention_floor()) if last == 0 else last,
        }

    def terminal(self, machine: str, state: str) -> bool:
        """Whether ``state`` ends an instance of ``machine``."""
        found = self.core.library.builtin(machine).states.get(state)
        return bool(found is not None and found.terminal)

    def prune(self, inp: PruneEventsInput) -> Pruned:
        """Delete the oldest events by one criterion (``dry_run``: only say what would go).

        In bounded batches, each its own transaction; the instances are never touched. An
        ``older_than`` duration is judged by the store's clock.
        """
        store = self.core.store
        recorded_before = None
        if inp.older_than is not None:
            recorded_before = store.now() - parse_duration(inp.older_than)
        return store.prune_events(
            keep=inp.keep, before=inp.before, recorded_before=recorded_before, dry_run=inp.dry_run
        )
