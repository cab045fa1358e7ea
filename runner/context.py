"""The records a transition carries through its steps: the instance, the request and what was seen.

These types sit at the bottom of the layers so guards, updates and effects (pure functions of a
:class:`Context`) and the store adapters can share them without importing the engine.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

# Why hand-written ``__init__``s below: a frozen dataclass's generated one sets each field through
# ``object.__setattr__``; filling ``__dict__`` in one call halves the cost of the records every
# transition builds several of (same fields, same order and defaults, still frozen).


@dataclass(frozen=True, init=False)
class Instance:
    """One durable run of a machine as the store holds it.

    Invariant: ``version`` is 0 only for an instance that has never been written (it is then in the
    machine's initial state); every committed transition adds exactly one.
    """

    id: str
    machine: str
    state: str
    version: int
    data: Mapping[str, Any]
    created_at: str | None = None
    updated_at: str | None = None

    def __init__(
        self,
        id: str,
        machine: str,
        state: str,
        version: int,
        data: Mapping[str, Any],
        created_at: str | None = None,
        updated_at: str | None = None,
    ) -> None:
        self.__dict__.update(
            id=id,
            machine=machine,
            state=state,
            version=version,
            data=data,
            created_at=created_at,
            updated_at=updated_at,
        )

    @property
    def exists(self) -> bool:
        return self.version > 0


@dataclass(frozen=True, init=False)
class Event:
    """One line of the append-only event log. ``seq`` is global, monotonic and never reused."""

    seq: int
    instance_id: str
    machine: str
    trigger: str
    from_state: str
    to_state: str
    version: int
    actor: str
    payload: Mapping[str, Any]
    at: str

    def __init__(
        self,
        seq: int,
        instance_id: str,
        machine: str,
        trigger: str,
        from_state: str,
        to_state: str,
        version: int,
        actor: str,
        payload: Mapping[str, Any],
        at: str,
    ) -> None:
        self.__dict__.update(
            seq=seq,
            instance_id=instance_id,
            machine=machine,
            trigger=trigger,
            from_state=from_state,
            to_state=to_state,
            version=version,
            actor=actor,
            payload=payload,
            at=at,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "instance": self.instance_id,
            "machine": self.machine,
            "trigger": self.trigger,
            "from": self.from_state,
            "to": self.to_state,
            "version": self.version,
            "actor": self.actor,
            "payload": dict(self.payload),
            "at": self.at,
        }


@dataclass(frozen=True)
class Claim:
    """One entry of the store's claim index: instance ``instance_id`` holds ``scope`` as a ``kind`` in ``space``.

    A scope is a ``/``-separated path relative to its space's root (:mod:`runner.scopes`); two claims of
    one space overlap when their scopes are equal or one is an ancestor directory of the other. A writer
    lane claims its ``owned`` and ``locked`` scopes and its ``branch`` in its repository's common dir, and
    its ``worktree`` in the filesystem space ``/`` (the resolved path without its leading ``/``). Claims
    are written by an :class:`Update` in the transaction of the compare-and-set they belong to, so
    guards of other instances look them up instead of decoding every instance's data.
    """

    space: str
    kind: str
    scope: str
    instance_id: str


class View(Protocol):
    """Read access to the store from inside the serialized transaction a guard runs in."""

    def get(self, instance_id: str) -> Instance | None: ...

    def find(self, machine: str, states: Iterable[str] | None = None) -> list[Instance]: ...

    def part(self, instance_id: str, key: str) -> dict[str, Any] | None: ...

    def overlapping_claims(
        self,
        space: str | None,
        scopes: Iterable[str],
        kinds: Iterable[str] | None = None,
        states: Iterable[str] | None = None,
    ) -> list[Claim]: ...


@dataclass(frozen=True)
class Rejection:
    """A guard's refusal: a stable code, a message for people, and the facts behind it."""

    code: str
    message: str
    details: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, init=False)
class Context:
    """Everything a guard, update or effect may look at while one trigger is being fired.

    ``params`` are the caller's public inputs (they may be recorded in the event log); ``secrets``
    (a presented fence token, a prompt's text) are never recorded or shown. ``observations`` are fresh reads of the
    world made just before the transaction (agent status, git state). ``now`` is the store's clock.
    """

    instance: Instance
    trigger: str
    params: Mapping[str, Any]
    secrets: Mapping[str, str] = field(repr=False)
    observations: Mapping[str, Any]
    now: datetime
    view: View
    actor: str
    data: Mapping[str, Any] = field(default_factory=dict)
    """The instance data as updated so far by the transition's earlier updates."""
    resources: Mapping[str, Any] = field(default_factory=dict)
    """Adapters effects act through (``agents``: the agent host); guards and updates ignore them."""
    gate: Gate | None = None
    """For effects: the check that the authority the effect was granted under still holds (see :class:`Gate`)."""

    def __init__(
        self,
        instance: Instance,
        trigger: str,
        params: Mapping[str, Any],
        secrets: Mapping[str, str],
        observations: Mapping[str, Any],
        now: datetime,
        view: View,
        actor: str,
        data: Mapping[str, Any] | None = None,
        resources: Mapping[str, Any] | None = None,
        gate: Gate | None = None,
    ) -> None:
        self.__dict__.update(
            instance=instance,
            trigger=trigger,
            params=params,
            secrets=secrets,
            observations=observations,
            now=now,
            view=view,
            actor=actor,
            data={} if data is None else data,
            resources={} if resources is None else resources,
            gate=gate,
        )


class Gate(Protocol):
    """The authority check an effect runs at the very moment it acts on the world.

    Invariant: no effect starts after the authority it was granted under has moved. The engine builds
    one gate per two-phase transition: it re-reads the instance (still at the intent's version, so a
    receipt abandoned meanwhile is caught) and re-runs the transition's ``recheck`` guards (the fence).
    Called with the store transaction an adapter performs the hand-over in (the process host's
    compare-and-set), the check and the hand-over commit together; called with ``None`` it opens its
    own transaction, for hosts that cannot be atomic with the store (Herdr): then it is the last thing
    done before the external call. It raises :class:`runner.errors.AuthorityMovedError`.
    """

    def __call__(self, tx: Any = None) -> None: ...

    @property
    def store(self) -> Any:
        """The store the gate checks in: a host may pass its own transaction only on the same store."""


@dataclass(frozen=True, init=False)
class Update:
    """What an update contributes: new data values, values for the caller's reply only, parts and claims.

    ``parts`` are entries of an object field kept beside the instance rather than in its data (see
    :meth:`runner.store.abc.Transaction.put_part`): the key ``"FIELD/NAME"`` is entry ``NAME`` of the
    declared object field ``FIELD``. The engine writes them in the transition's transaction and logs
    them as that field's changed entries (never for a secret field), so writing one entry costs the
    size of that entry, not of the whole field.

    ``claims``, when not None, replaces every claim the instance holds in the store's claim index
    (:class:`Claim`) with these ``(space, kind, scope)`` triples (empty: it holds none), in the same
    transaction as its compare-and-set. None leaves its claims as they are.
    """

    data: Mapping[str, Any] = field(default_factory=dict)
    reply: Mapping[str, Any] = field(default_factory=dict)
    parts: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    claims: tuple[tuple[str, str, str], ...] | None = None

    def __init__(
        self,
        data: Mapping[str, Any] | None = None,
        reply: Mapping[str, Any] | None = None,
        parts: Mapping[str, Mapping[str, Any]] | None = None,
        claims: tuple[tuple[str, str, str], ...] | None = None,
    ) -> None:
        self.__dict__.update(
            data={} if data is None else data,
            reply={} if reply is None else reply,
            parts={} if parts is None else parts,
            claims=claims,
        )


def format_time(moment: datetime) -> str:
    """The one timestamp format corral stores: UTC, microseconds, a ``Z`` suffix."""
    last = _last_formatted[0]
    # A transaction stamps its rows with the time its updates also record (``renewed_at``): one
    # moment is formatted several times in a row, so the last one is kept (a tuple: swapped atomically).
    if last[0] == moment and last[0].tzinfo is moment.tzinfo:
        return last[1]
    if moment.tzinfo is UTC:  # the store's clock: already UTC, so the "+00:00" offset is replaced by "Z"
        text = moment.isoformat(timespec="microseconds")[:-6] + "Z"
    else:
        text = moment.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"
    _last_formatted[0] = (moment, text)
    return text


# The last moment formatted and its text (one slot, replaced whole: safe across threads).
_last_formatted: list[tuple[datetime, str]] = [(datetime(1970, 1, 1, tzinfo=UTC), "1970-01-01T00:00:00.000000Z")]


def parse_time(text: str) -> datetime:
    """Inverse of :func:`format_time` (accepts any ISO 8601 form with an offset)."""
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment


@dataclass(frozen=True)
class EffectResult:
    """What an effect reports after acting outside the store.

    ``outcome`` selects the transition's next state from its ``outcomes`` map: ``success``,
    ``failure``, or ``ambiguous`` (the effect may or may not have happened: stay for reconcile).
    """

    outcome: str
    data: Mapping[str, Any] = field(default_factory=dict)
    reply: Mapping[str, Any] = field(default_factory=dict)
    message: str = ""
