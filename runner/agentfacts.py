"""What corral and an agent host say about an agent: statuses, observations, start options, errors.

The vocabulary of the agent host port (:mod:`runner.agents.abc`, which re-exports every name here),
apart from the port itself so that the guards, updates and effects on agents, which definitions
lint against, speak it without importing a host: this module does no I/O and imports nothing of
``runner.agents``. :class:`AgentActions` is what an effect asks of the host it is handed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, runtime_checkable

from runner.context import Gate
from runner.errors import CorralError, NotFoundError, RefusedError

STATUSES = ("idle", "working", "done", "blocked", "unknown")
# Invariant: an agent in one of these statuses is not working on anything; a wait ends on them.
SETTLED = frozenset({"idle", "done", "blocked"})
# Only these accept a new prompt: 'blocked' shows a question or approval, which corral never answers.
PROMPTABLE = frozenset({"idle", "done"})
# Invariant: the facts that must not change while corral holds a lease on the agent.
IDENTITY = ("pane_id", "name", "kind", "cwd")
NAME_PATTERN = r"^[a-z][a-z0-9_-]{0,31}$"


@dataclass(frozen=True)
class Observation:
    """What a host saw of one agent at one moment."""

    pane_id: str
    name: str
    kind: str
    cwd: str
    status: str
    seq: int
    exit_status: int | None = None
    nonce: str | None = None
    """The start nonce the host recorded with the pane (None where the host keeps none)."""
    revision: int | None = None
    """This agent's own change counter: it grows by one on every change of *this* agent (``seq`` may be
    shared by every agent of a host, as Herdr's ``state_change_seq`` is). None where the host has none."""
    session_id: str | None = None
    """The agent CLI's conversation, once its first prompt started one (None: none yet, or a host or
    driver that keeps none)."""
    spend: Mapping[str, Any] | None = None
    """What the agent's runs spent so far (``tokens``, ``cost_usd``, ``turns``, ``runs``), where the
    driver reads it."""
    terminal_id: str | None = None
    """The pane's terminal (Herdr's ``terminal_id``: allocated per terminal, never reused, new for every
    pane after a server restart); a change means another terminal, and cursors of the old one mean
    nothing. None where the host has no such lifetime."""

    @property
    def identity(self) -> tuple[str, str, str, str]:
        """The :data:`IDENTITY` facts, in that order."""
        return (self.pane_id, self.name, self.kind, self.cwd)

    @property
    def settled(self) -> bool:
        return self.status in SETTLED

    def to_dict(self) -> dict[str, Any]:
        """The plain form guards read from ``ctx.observations`` (``exists`` tells a live pane)."""
        return {
            "exists": True,
            "pane_id": self.pane_id,
            "name": self.name,
            "kind": self.kind,
            "cwd": self.cwd,
            "status": self.status,
            "seq": self.seq,
            "exit_status": self.exit_status,
            "revision": self.revision,
            "terminal_id": self.terminal_id,
            "session_id": self.session_id,
            "spend": dict(self.spend) if self.spend is not None else None,
        }


class Cursor(NamedTuple):
    """Where one agent is, and nothing else (:meth:`AgentHost.cursors`): its ``seq`` and whether its
    status is settled, exactly as :attr:`Observation.seq` and :attr:`Observation.settled` say."""

    seq: int
    settled: bool


GONE: Mapping[str, Any] = {"exists": False}
"""The observation of a pane that no longer exists."""


@dataclass(frozen=True)
class StartOptions:
    """Per-start options; ``model`` and ``effort`` are honoured only by kinds that declare them.

    The rest is what the lease grants and limits, read by the kind's driver on every prompt: the
    ``role`` (``reviewer`` reads, ``writer`` edits its ``owned`` scopes, never its ``locked`` ones) and
    the limits a CLI can enforce itself (``max_turns``, ``budget_usd`` per run)."""

    model: str | None = None
    effort: str | None = None
    role: str | None = None
    owned: tuple[str, ...] = ()
    locked: tuple[str, ...] = ()
    max_turns: int | None = None
    budget_usd: float | None = None
    unconfined_reason: str | None = None
    """Set: the operator's recorded reason to run this agent without the process host's Bubblewrap
    confinement (``writer start --unconfined --reason``); None: confined, or refused where it cannot be."""


class AgentError(CorralError):
    """An agent host could not do what was asked. ``code`` says what; the host's own words are in details.

    Every host error is one (the subclasses below also carry the category of their meaning), so an
    effect that must not let a host failure escape catches ``AgentError``.
    """

    default_code = "agent_error"


class AgentGoneError(NotFoundError, AgentError):
    """The pane does not exist (closed, or never did). Raised by ``get``/``read``/``wait``/``prompt``."""

    default_code = "agent_gone"


class AgentBusyError(RefusedError, AgentError):
    """The agent is not in a state that accepts this (e.g. a prompt while it works). Observe again."""

    default_code = "agent_busy"


@dataclass(frozen=True)
class Expect:
    """The agent a prompt is meant for, as the caller saw it: its identity and its cursor."""

    identity: tuple[str, str, str, str]
    seq: int


def check_promptable(observed: Observation, expect: Expect | None) -> None:
    """Refuse (not delivered) unless the agent is idle or done and, given ``expect``, exactly the agent
    at exactly the cursor the caller saw. Hosts call it on the observation they hand the prompt over on."""
    if observed.status not in PROMPTABLE:
        raise AgentBusyError(
            f"agent {observed.pane_id!r} is {observed.status}; only an idle or done agent takes a prompt",
            pane_id=observed.pane_id,
            status=observed.status,
            seq=observed.seq,
            delivered=False,
        )
    if expect is not None and (observed.identity != expect.identity or observed.seq != expect.seq):
        raise AgentBusyError(
            f"agent {observed.pane_id!r} moved before delivery ({observed.status} at seq {observed.seq}, "
            f"expected seq {expect.seq})",
            pane_id=observed.pane_id,
            status=observed.status,
            seq=observed.seq,
            delivered=False,
        )


class AgentKindError(NotFoundError, AgentError):
    """The agent kind is not configured (built-in or agents.yaml). An unknown kind is never guessed."""

    default_code = "agent_kind_unknown"


class WaitTimeoutError(CorralError):
    """A wait ended without the condition. Nothing changed; wait again or decide otherwise."""

    category = "conflict"
    default_code = "wait_timeout"


@runtime_checkable
class AgentActions(Protocol):
    """What an effect asks of the agent host in ``ctx.resources["agents"]``: start, prompt, close.

    :class:`runner.agents.abc.AgentHost` declares these methods (mypy holds it to them); effects name
    this protocol, not the port, so the registries definitions lint against import no host."""

    def start(
        self,
        name: str,
        kind: str,
        cwd: str,
        options: StartOptions,
        gate: Gate | None = None,
        nonce: str | None = None,
    ) -> Observation: ...

    def prompt(
        self,
        pane_id: str,
        text: str,
        expect: Expect | None = None,
        gate: Gate | None = None,
        schema: str | None = None,
    ) -> Observation: ...

    def close(self, pane_id: str, gate: Gate | None = None) -> None: ...
