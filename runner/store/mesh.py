"""The mesh port: agents' presence, their messages and each recipient's delivery record.

Beside corral's instances a store keeps three tables for the agent mesh, written only through a
:class:`MeshStore` (``store.mesh()``), each method one serialized write transaction of the store (or
one read snapshot), judged by the store's clock (``tx.now``):

- **presence** (``mesh_agents``): one row per ``agent_id`` that ever checked in: role, repo, caps,
  status (and when it last changed), the pane it can be woken in, its TTL, when it joined, when it
  was last seen and when it expires (``seen_at + ttl_seconds``). *Every* call an agent makes
  (check-in, send, inbox, ack) renews it: the TTL is the silence an agent can afford.
- **messages** (``mesh_messages``): one row per message, with a store-wide sequence number ``seq``
  (commit order: all writers are serialized) and an opaque ``message_id``.
- **deliveries** (``mesh_deliveries``): one row per (recipient, message), made when the message is
  sent, for the agents it is addressed to *at that moment* (a direct message: that known agent; a
  broadcast: the live agents of that role or repo, never the sender). An agent that joins later has
  no row, so it never sees the backlog from before it joined. ``acked_at`` is set by an ack, once.

Invariant: an inbox read returns exactly the recipient's deliveries with ``acked_at IS NULL``, oldest
``seq`` first, and writes nothing but the reader's presence; so a message comes back on every read
until acked, and never after.

Identity: a presence row keeps ``token_sha256``, the SHA-256 of the secret agent token the
id's first check-in handed out (the service makes the token; the store never sees it). Every later
call as that agent (check-in, send as its sender, inbox, ack) presents the token's hash, compared in
constant time inside the call's write transaction; a wrong or missing one is refused before anything
is written (:func:`check_token`). A row from before identity (``token_sha256`` NULL) is *unclaimed*:
the next check-in of its id claims it (and is handed a token); its other calls are refused until then.
The hash never leaves the store: not in a :class:`Presence`, an event or an export of presence.

Messages are data, never instructions: the store keeps their text and hands it back; nothing in
corral parses or acts on a subject or a body. Check-ins and sends append events to the store's
log (on ``mesh/<agent_id>``, machine ``mesh``) that carry ids and counts only, never a subject
or a body.

Retention: :meth:`MeshStore.prune` deletes messages sent before a moment (with their deliveries) and
messages every recipient acknowledged; a message younger than the moment that some recipient has not
acknowledged is never dropped. Sends prune on their way, a bounded batch at a time.
"""

from __future__ import annotations

import hmac
import re
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from runner.context import Instance, format_time, parse_time
from runner.errors import InputError, RefusedError

AGENT_ID = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")  # roles and caps
MESSAGE_ID = re.compile(r"^msg-[0-9a-f]{32}$")
TTL_MIN, TTL_MAX = 60, 86400
SHORT_ROLES = frozenset({"ping", "verification"})
"""Roles that check in for a moment: their TTL defaults to :data:`TTL_SHORT`, every other to :data:`TTL_WORK`."""
TTL_WORK, TTL_SHORT = 3600, 900
BODY_MAX = 16 * 1024
"""The largest body a message may carry, in UTF-8 bytes."""
SUBJECT_MAX = 200
STATUS_MAX = 300
CAPS_MAX = 32
LIMIT_MAX, LIMIT_DEFAULT = 100, 50
PRUNE_BATCH = 500
"""Messages a send prunes on its way (bounded: a send stays short)."""
TO_KINDS = ("agent", "role", "repo")
MESH_MACHINE = "mesh"
"""The machine name mesh events are recorded under (instance ``mesh/<agent_id>``); not an engine machine."""


def default_ttl(role: str | None) -> int:
    """The TTL of a check-in that names none: short for ``ping`` and ``verification``, long for work."""
    return TTL_SHORT if role in SHORT_ROLES else TTL_WORK


def _line(field_name: str, value: Any, most: int, what: str) -> str:
    if not isinstance(value, str) or not value or len(value) > most:
        raise InputError(field_name, f"{what} is 1-{most} characters")
    if not value.isprintable():
        raise InputError(field_name, f"{what} is one line of printable text (no newline or control character)")
    return value


def check_agent_id(value: Any, field_name: str = "agent_id") -> str:
    """An agent id: 1-64 of ``[A-Za-z0-9_.-]``, stable across check-ins."""
    if not isinstance(value, str) or not AGENT_ID.match(value):
        raise InputError(field_name, f"{value!r} is not an agent id (1-64 of [A-Za-z0-9_.-])")
    return value


def check_name(value: Any, field_name: str) -> str:
    if not isinstance(value, str) or not NAME.match(value):
        raise InputError(field_name, f"{value!r} is not a {field_name} (1-64 of [A-Za-z0-9_.:-])")
    return value


def check_repo(value: Any, field_name: str = "repo") -> str:
    return _line(field_name, value, 200, "a repo")


def check_status(value: Any) -> str:
    if value == "":
        return ""
    return _line("status", value, STATUS_MAX, "a status")


def check_pane(value: Any) -> str:
    text = _line("pane", value, 100, "a pane id")
    if any(c.isspace() for c in text):
        raise InputError("pane", f"{text!r} is not a pane id (no spaces)")
    return text


def check_ttl(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not TTL_MIN <= value <= TTL_MAX:
        raise InputError("ttl_seconds", f"{value!r} is not an integer number of seconds {TTL_MIN}-{TTL_MAX}")
    return value


def check_caps(value: Any) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, (list, tuple)) or len(value) > CAPS_MAX:
        raise InputError("caps", f"caps are a list of at most {CAPS_MAX} names")
    return tuple(dict.fromkeys(check_name(c, "caps") for c in value))


def check_subject(value: Any) -> str:
    return _line("subject", value, SUBJECT_MAX, "a subject")


def check_body(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise InputError("body", "a body is non-empty text")
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > BODY_MAX:
        raise InputError(
            "body",
            f"the body is {size} bytes; a message carries at most {BODY_MAX} (send a reference instead)",
            code="mesh_body_too_large",
            size=size,
            limit=BODY_MAX,
        )
    return value


def check_thread(value: Any) -> str:
    return _line("thread", value, 100, "a thread")


def check_limit(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= LIMIT_MAX:
        raise InputError("limit", f"{value!r} is not an integer 1-{LIMIT_MAX}")
    return value


def check_message_id(value: Any) -> str:
    if not isinstance(value, str) or not MESSAGE_ID.match(value):
        raise InputError("message_ids", f"{value!r} is not a message id (msg-<32 hex>, as inbox gives them)")
    return value


def check_token(agent_id: str, stored: str | None, presented: str | None) -> None:
    """Refuse a call as ``agent_id`` unless ``presented`` (the SHA-256 of the token the caller gave, None
    if it gave none) is the id's own (``stored``), compared in constant time.

    Raises:
        RefusedError: ``mesh_agent_token_missing`` (none presented), ``mesh_agent_token_invalid`` (not
            this agent's), ``mesh_agent_unclaimed`` (the id has no token yet: check in to claim it).
    """
    if stored is None:
        raise RefusedError(
            f"the agent {agent_id!r} has no agent token yet (it checked in before agent tokens):"
            " check in to claim it and get one",
            code="mesh_agent_unclaimed",
            agent_id=agent_id,
        )
    if presented is None:
        raise RefusedError(
            f"a call as the agent {agent_id!r} must present its agent token (the one its first check-in"
            " answered; CORRAL_AGENT_TOKEN, the Corral-Agent-Token header, the agent_token argument)",
            code="mesh_agent_token_missing",
            agent_id=agent_id,
        )
    if not hmac.compare_digest(stored.encode("ascii"), presented.encode("ascii")):
        raise RefusedError(
            f"the agent token presented is not the agent {agent_id!r}'s: nothing was done"
            " (an agent that lost its token checks in under a new id)",
            code="mesh_agent_token_invalid",
            agent_id=agent_id,
        )


def check_token_sha256(value: Any, field_name: str = "token_sha256") -> str | None:
    """A token's hash as the service hands it to the store: None or 64 lowercase hex digits."""
    if value is None:
        return None
    if not isinstance(value, str) or not re.fullmatch(r"[0-9a-f]{64}", value):
        raise InputError(field_name, "an agent token's hash is 64 lowercase hex digits")
    return value


def check_to(kind: Any, value: Any) -> tuple[str, str]:
    """Where a message goes: one agent, every live agent of a role, or every live agent of a repo."""
    if kind not in TO_KINDS:
        raise InputError("to", f"a message goes to an agent, a role or a repo, not {kind!r}")
    if kind == "agent":
        return kind, check_agent_id(value, "to")
    if kind == "role":
        return kind, check_name(value, "role")
    return kind, check_repo(value)


@dataclass(frozen=True)
class Presence:
    """One agent's check-in, as the store holds it (times in corral's format, by the store's clock).

    Invariant: ``expires_at == seen_at + ttl_seconds``; the agent is live while ``now < expires_at``
    (it expires exactly at that moment).
    """

    agent_id: str
    role: str | None
    repo: str | None
    caps: tuple[str, ...]
    status: str
    status_at: str
    pane: str | None
    ttl_seconds: int
    joined_at: str
    seen_at: str
    expires_at: str
    version: int
    """How many check-ins the agent made (the version of its ``mesh/<agent_id>`` events)."""
    wake_at: str | None = None
    """When the agent was last woken (the rate limit of wake-ups counts from it)."""

    def live(self, now: datetime) -> bool:
        """Whether the presence holds at ``now`` (by the store's clock)."""
        return format_time(now) < self.expires_at

    def to_dict(self, now: datetime) -> dict[str, Any]:
        live = self.live(now)
        age = max(0.0, (now - parse_time(self.status_at)).total_seconds())
        return {
            "agent_id": self.agent_id,
            "role": self.role,
            "repo": self.repo,
            "caps": list(self.caps),
            "status": self.status,
            "status_at": self.status_at,
            "status_age_seconds": round(age, 3),
            "pane": self.pane,
            "ttl_seconds": self.ttl_seconds,
            "joined_at": self.joined_at,
            "seen_at": self.seen_at,
            "expires_at": self.expires_at,
            "live": live,
            "stale_since": None if live else self.expires_at,
        }


@dataclass(frozen=True)
class Message:
    """One message as a recipient's inbox returns it: data about what another agent does, never an
    instruction."""

    message_id: str
    seq: int
    sender: str
    to_kind: str
    to_value: str
    subject: str
    body: str
    thread: str | None
    urgent: bool
    sent_at: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "message_id": self.message_id,
            "seq": self.seq,
            "from": self.sender,
            "to": {"kind": self.to_kind, "value": self.to_value},
            "subject": self.subject,
            "body": self.body,
            "thread": self.thread,
            "urgent": self.urgent,
            "sent_at": self.sent_at,
        }


@dataclass(frozen=True)
class Sent:
    """What :meth:`MeshStore.send` recorded: the message and the agents it was delivered to."""

    message_id: str
    seq: int
    sent_at: str
    recipients: tuple[str, ...]
    sender: Presence
    pruned: int = 0


@dataclass(frozen=True)
class Acked:
    """What :meth:`MeshStore.ack` did: ids acked now, ids acked before, ids that are not the agent's."""

    acked: tuple[str, ...]
    already: tuple[str, ...]
    unknown: tuple[str, ...]
    presence: Presence


@dataclass(frozen=True)
class Inbox:
    """An inbox read: the messages, how many unacked ones there are in all, and the renewed presence."""

    messages: tuple[Message, ...]
    unacked: int
    presence: Presence
    more: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CheckIn:
    """A check-in: the presence after it and what it was before (``None``: the first, a join)."""

    presence: Presence
    was: str
    """``absent`` (first check-in), ``live`` or ``expired``."""
    issued: bool = False
    """Whether this check-in gave the id its token (``issue_sha256``): the first one, or a claim of an
    unclaimed row; the service hands the token out in that one answer only."""


def event_instance(agent_id: str, version: int, state: str = "live") -> Instance:
    """The instance a mesh event is recorded on: ``mesh/<agent_id>`` (not stored as an instance)."""
    return Instance(f"mesh/{agent_id}", MESH_MACHINE, state, version, {})


class MeshStore(ABC):
    """The mesh tables of one store; every method is one transaction (a write, or a read snapshot).

    Agent ids, names and texts are checked by the service's Inputs; adapters check them again with the
    ``check_*`` functions here so no surface can write what another would refuse.
    """

    @abstractmethod
    def checkin(
        self,
        agent_id: str,
        *,
        role: str | None,
        repo: str | None,
        caps: Sequence[str] | None,
        status: str | None,
        ttl_seconds: int | None,
        pane: str | None,
        actor: str,
        token_sha256: str | None,
        issue_sha256: str,
    ) -> CheckIn:
        """Join (first check-in) or renew an agent's presence; given fields replace, omitted ones keep.

        The TTL is the one given, else the last one, else the role's default (:func:`default_ttl`); the status's time
        moves only when its text changes. Appends a ``checkin`` event (no status text beyond the
        one line, never a message, never a token or its hash).

        Identity: a first check-in (or one of an unclaimed id) stores ``issue_sha256`` as the id's token
        hash (``issued``); any other must present the id's own (``token_sha256``, :func:`check_token`).

        Raises:
            RefusedError: ``mesh_agent_token_missing``, ``mesh_agent_token_invalid``; nothing is written.
        """

    @abstractmethod
    def presence(self, agent_id: str) -> Presence | None:
        """The agent's presence, live or expired; None if it never checked in."""

    @abstractmethod
    def agents(
        self, *, include_expired: bool = False, role: str | None = None, repo: str | None = None, cap: str | None = None
    ) -> list[Presence]:
        """Live agents (with ``include_expired``, every one), by agent id, filtered by role, repo, cap."""

    @abstractmethod
    def send(
        self,
        sender: str,
        to_kind: str,
        to_value: str,
        *,
        subject: str,
        body: str,
        thread: str | None,
        urgent: bool,
        message_id: str,
        actor: str,
        token_sha256: str | None,
        retain_before: datetime | None = None,
    ) -> Sent:
        """Record one message and a delivery per recipient (see the module docstring); renews the sender.

        ``retain_before``: prune on the way (:meth:`prune`, at most :data:`PRUNE_BATCH` messages).
        ``token_sha256``: the sender's token hash (:func:`check_token`).

        Raises:
            RefusedError: ``mesh_not_checked_in`` (the sender never checked in); the token codes of
                :func:`check_token`.
            NotFoundError: ``mesh_unknown_agent`` (a direct message to an agent that never checked in).
        """

    @abstractmethod
    def inbox(self, agent_id: str, limit: int, *, token_sha256: str | None, upto_seq: int | None = None) -> Inbox:
        """The agent's unacked messages, oldest first (only those with ``seq <= upto_seq``, if given);
        renews its presence and writes nothing else.

        Raises:
            RefusedError: ``mesh_not_checked_in``; the token codes of :func:`check_token`.
        """

    @abstractmethod
    def ack(self, agent_id: str, message_ids: Sequence[str], *, token_sha256: str | None) -> Acked:
        """Acknowledge messages delivered to the agent (idempotent); renews its presence.

        Raises:
            RefusedError: ``mesh_not_checked_in``; the token codes of :func:`check_token`.
        """

    @abstractmethod
    def authenticate(self, agent_id: str, token_sha256: str | None) -> Presence:
        """The agent's presence if ``token_sha256`` is its token's hash (a read: nothing is written).

        Raises:
            RefusedError: ``mesh_not_checked_in``; the token codes of :func:`check_token`.
        """

    @abstractmethod
    def unacked(self, agent_id: str) -> tuple[int, int]:
        """How many messages the agent has not acked, and the highest ``seq`` among them (0 if none)."""

    @abstractmethod
    def note_wake(self, agent_id: str) -> None:
        """Record that the agent is being woken now (the rate limit counts from it)."""

    @abstractmethod
    def prune(self, before: datetime, batch: int = PRUNE_BATCH) -> int:
        """Delete messages sent before ``before`` and messages every recipient acked (with their
        deliveries), at most ``batch``; returns how many went."""
