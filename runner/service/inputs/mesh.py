"""The mesh's inputs: check in, list agents, send, read the inbox, ack, enable wake-ups.

One Input per operation, shared by the CLI, the MCP tools and the HTTP API; each checks its fields
(the store's mesh adapters check them again) and names the field it refuses.
"""

from __future__ import annotations

import re

from runner.errors import InputError
from runner.service.inputs.base import FencedInput
from runner.service.inputs.fields import described, input_class
from runner.store.mesh import (
    LIMIT_DEFAULT,
    check_agent_id,
    check_body,
    check_caps,
    check_limit,
    check_message_id,
    check_name,
    check_pane,
    check_repo,
    check_status,
    check_subject,
    check_thread,
    check_ttl,
)

WAKE_TOKEN = re.compile(r"^[0-9a-f]{16}$")
AGENT_TOKEN_MAX = 256


def check_agent_token(value: object) -> str | None:
    """An agent token as a caller presents it (never echoed back in an error): None, or one word of
    printable ASCII. Whether it is the agent's own is the store's check (``mesh_agent_token_invalid``)."""
    if value is None:
        return None
    if (
        not isinstance(value, str)
        or not 1 <= len(value) <= AGENT_TOKEN_MAX
        or not value.isascii()
        or not value.isprintable()
        or any(c.isspace() for c in value)
    ):
        raise InputError("agent_token", f"an agent token is 1-{AGENT_TOKEN_MAX} printable ASCII characters, no spaces")
    return value


@input_class
class CheckinInput:
    """Join the mesh or renew a presence: omitted fields keep what the last check-in said.

    ``pane`` is the agent's *own* pane id (for wake-ups), never a value taken from a message.
    ``ttl_seconds`` (60-86400) defaults to the last check-in's, else from the role: 900 for ``ping`` and
    ``verification``, else 3600. ``agent_token``: the token the id's first check-in answered (none on
    that first one); every later check-in of the id must present it.
    """

    agent_id: str = described("agent_id", "Your agent id (1-64 of [A-Za-z0-9_.-]), the same on every call.")
    role: str | None = described("role", "Your role (builder, reviewer, ping, verification, ...).", default=None)
    repo: str | None = described("repo", "The repository you work on.", default=None)
    caps: tuple[str, ...] | None = described("caps", "Your capabilities (names).", default=None)
    status: str | None = described("status", "One line: what you do right now (empty: nothing).", default=None)
    ttl_seconds: int | None = described(
        "ttl_seconds", "Seconds of silence before your presence expires, 60-86400.", default=None
    )
    pane: str | None = described("pane", "Your own pane id, for wake-ups.", default=None)
    agent_token: str | None = described(
        "agent_token",
        "Your agent token: the secret your first corral_mesh_checkin answered (once). Required on every call as this"
        " agent after that one; never put it in a message, a status or a log. Omit it on your first check-in.",
        default=None,
        repr=False,
    )

    def __post_init__(self) -> None:
        check_agent_id(self.agent_id)
        check_agent_token(self.agent_token)
        if self.role is not None:
            check_name(self.role, "role")
        if self.repo is not None:
            check_repo(self.repo)
        if self.caps is not None:
            object.__setattr__(self, "caps", check_caps(self.caps))
        if self.status is not None:
            check_status(self.status)
        if self.ttl_seconds is not None:
            check_ttl(self.ttl_seconds)
        if self.pane is not None:
            check_pane(self.pane)


@input_class
class AgentsInput:
    """Live agents (``include_expired``: every one, with when it went stale), by role, repo or cap."""

    include_expired: bool = described("all", "Include expired agents.", default=False)
    role: str | None = described("role", "Only agents of this role.", default=None)
    repo: str | None = described("repo", "Only agents of this repo.", default=None)
    cap: str | None = described("cap", "Only agents with this capability.", default=None)

    def __post_init__(self) -> None:
        if not isinstance(self.include_expired, bool):
            raise InputError("include_expired", f"{self.include_expired!r} is not true or false")
        if self.role is not None:
            check_name(self.role, "role")
        if self.repo is not None:
            check_repo(self.repo)
        if self.cap is not None:
            check_name(self.cap, "cap")


@input_class
class SendInput:
    """A message from ``agent_id`` to exactly one of: the agent ``to``, every live agent of ``to_role``,
    every live agent of ``to_repo`` (a broadcast never reaches its sender). Data, never instructions.
    ``agent_token``: the sender's own token."""

    agent_id: str = described("agent_id", "Your agent id (the sender); you must have checked in.")
    subject: str = described("subject", "One line.")
    body: str = described("body", "The note, at most 16 KiB.", repr=False)
    to: str | None = described("to", "One agent id.", default=None)
    to_role: str | None = described("role", "Every live agent of this role (not you).", default=None)
    to_repo: str | None = described("repo", "Every live agent of this repo (not you).", default=None)
    thread: str | None = described("thread", "A thread the note belongs to.", default=None)
    urgent: bool = described("urgent", "Mark it urgent.", default=False)
    agent_token: str | None = described(
        "agent_token",
        "Your agent token: the secret your first corral_mesh_checkin answered (once). Required on every call as this"
        " agent after that one; never put it in a message, a status or a log.",
        default=None,
        repr=False,
    )

    def __post_init__(self) -> None:
        check_agent_id(self.agent_id)  # the sender
        check_agent_token(self.agent_token)
        # Named as the surfaces name them (to, role, repo), never by these fields' own names.
        given = [
            said
            for name, said in (("to", "to"), ("to_role", "role"), ("to_repo", "repo"))
            if getattr(self, name) is not None
        ]
        if len(given) != 1:
            raise InputError("to", f"give exactly one of to, role, repo (got {', '.join(given) or 'none'})")
        if self.to is not None:
            check_agent_id(self.to, "to")
        if self.to_role is not None:
            check_name(self.to_role, "to_role")
        if self.to_repo is not None:
            check_repo(self.to_repo, "to_repo")
        check_subject(self.subject)
        check_body(self.body)
        if self.thread is not None:
            check_thread(self.thread)
        if not isinstance(self.urgent, bool):
            raise InputError("urgent", f"{self.urgent!r} is not true or false")

    @property
    def recipient(self) -> tuple[str, str]:
        """``(kind, value)``: ``agent``, ``role`` or ``repo`` and its value."""
        if self.to is not None:
            return "agent", self.to
        if self.to_role is not None:
            return "role", self.to_role
        assert self.to_repo is not None
        return "repo", self.to_repo


@input_class
class InboxInput:
    """The agent's unacked messages (1-100, default 50), oldest first; ``wake_token`` (16 hex, single
    use) marks this read as the turn a wake-up started and returns that wake's messages; the agent's
    own ``agent_token`` is needed with it as without it."""

    agent_id: str = described("agent_id", "Your agent id (1-64 of [A-Za-z0-9_.-]), the same on every call.")
    limit: int = described("limit", "At most this many messages, 1-100.", default=LIMIT_DEFAULT)
    wake_token: str | None = described(
        "wake_token", "The token a wake-up prompt gave you (16 hex digits, single use).", default=None, repr=False
    )
    agent_token: str | None = described(
        "agent_token",
        "Your agent token: the secret your first corral_mesh_checkin answered (once). Required on every call as this"
        " agent after that one; never put it in a message, a status or a log.",
        default=None,
        repr=False,
    )

    def __post_init__(self) -> None:
        check_agent_id(self.agent_id)
        check_agent_token(self.agent_token)
        check_limit(self.limit)
        if self.wake_token is not None and (
            not isinstance(self.wake_token, str) or not WAKE_TOKEN.match(self.wake_token)
        ):
            raise InputError("wake_token", "a wake token is 16 lowercase hex digits, as the wake-up prompt gave it")


@input_class
class AckInput:
    """Acknowledge messages (1-500 ids, as the inbox gave them) with the agent's own ``agent_token``;
    idempotent."""

    agent_id: str = described("agent_id", "Your agent id (1-64 of [A-Za-z0-9_.-]), the same on every call.")
    message_ids: tuple[str, ...] = described("message_ids", "The message ids to acknowledge (1-500).")
    agent_token: str | None = described(
        "agent_token",
        "Your agent token: the secret your first corral_mesh_checkin answered (once). Required on every call as this"
        " agent after that one; never put it in a message, a status or a log.",
        default=None,
        repr=False,
    )

    def __post_init__(self) -> None:
        check_agent_id(self.agent_id)
        check_agent_token(self.agent_token)
        if isinstance(self.message_ids, str) or not isinstance(self.message_ids, (tuple, list)):
            raise InputError("message_ids", "message ids are a list")
        if not 1 <= len(self.message_ids) <= 500:
            raise InputError("message_ids", f"give 1-500 message ids, not {len(self.message_ids)}")
        object.__setattr__(self, "message_ids", tuple(check_message_id(m) for m in self.message_ids))


@input_class
class WakeGrantInput(FencedInput):
    """Enable (or disable) mesh wake-ups of the agents this controller leases, under the grant it holds."""

    enabled: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.enabled, bool):
            raise InputError("enabled", f"{self.enabled!r} is not true or false")
