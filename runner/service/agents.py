"""Operations on leased agents: reviewer leases, handoff receipts, cursor-bound waits.

Every operation that acts takes the controller's credential: its public parts go into the request's
params (and the event log), the token into its secrets. Before each transition the service observes
the world afresh (the agent's identity, status and cursor; its output and a second observation when
output is captured) and hands those observations to the machine's guards; it never decides a rule
itself. Waits are the only long operations, and they are async (AnyIO).
"""

from __future__ import annotations

import hashlib
import os
import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from runner import fence
from runner.agents.abc import (
    GONE,
    NAME_PATTERN,
    PROMPTABLE,
    AgentError,
    AgentGoneError,
    AgentHost,
    Observation,
    StartOptions,
    WaitTimeoutError,
)
from runner.agents.kinds import Kinds
from runner.context import Instance
from runner.engine import Request, Result
from runner.errors import (
    AgentRunFailedError,
    AuthorityMovedError,
    ConflictError,
    CorralError,
    InputError,
    NotFoundError,
    OutcomeUnrecordedError,
    RefusedError,
)
from runner.fence import Credential
from runner.guards.agents import (
    LEASE_MACHINES,
    LIVE_LEASE_STATES,
    OPEN_RECEIPT_STATES,
    PANE_LEASE_MACHINES,
    same_identity,
)
from runner.service.base import ServiceBase
from runner.service.checks import UUID, check_controller_id, check_credential

if TYPE_CHECKING:
    import anyio.abc  # anyio costs a cold CLI ~35 ms: only the commands that wait import it

    from runner.definitions.model import MachineSpec

HOSTS = ("process", "herdr")
AGENT_MACHINES = frozenset({"reviewer", "writer", "adopted", "pane"})  # machines whose instances are agent leases
TOKEN_PREFIX = "corral-receipt-v1."
TOKEN = re.compile(r"^corral-receipt-v1\.([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$")
LEASE_ID = re.compile(r"^[a-z]{1,32}/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
OPTION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
CAPTURE_LINES_DEFAULT, CAPTURE_LINES_MAX = 200, 10000
WAIT_LINES_DEFAULT = 40
TIMEOUT_DEFAULT, TIMEOUT_MAX = 600.0, 86400.0
PROMPT_MAX = 1_000_000
BATCH_MAX = 8
WAIT_TARGETS_MAX = 16


class DeliveryError(ConflictError):
    """The prompt was not confirmed delivered (``delivery_ambiguous``: the receipt stays reserved and
    blocks the target until abandoned; ``delivery_failed``: it certainly was not, the receipt failed).
    Observe the agent, then abandon the receipt on fresh evidence or ask again."""

    default_code = "delivery_ambiguous"


class AgentOperationError(CorralError):
    """Starting or closing an agent failed; ``details`` says where the lease was left. Inspect the
    host (``corral agents``), then ``reconcile`` or close again."""

    default_code = "agent_operation_failed"


def _check_name(field_name: str, value: str) -> None:
    if not isinstance(value, str) or not re.match(NAME_PATTERN, value):
        raise InputError(field_name, f"{value!r} is not an agent name ([a-z][a-z0-9_-]{{0,31}})")


def _check_cursor(field_name: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InputError(field_name, f"{value!r} is not a cursor (an integer >= 0)")


def _check_agent(kind: str, host: str, model: str | None, effort: str | None) -> None:
    """What starting any agent takes: a kind name, a known host, plain ``--model`` / ``--effort`` values."""
    if not isinstance(kind, str) or not re.match(NAME_PATTERN, kind):
        raise InputError("kind", f"{kind!r} is not an agent kind name")
    if host not in HOSTS:
        raise InputError("host", f"{host!r} is not an agent host ({', '.join(HOSTS)})")
    for option, value in (("model", model), ("effort", effort)):
        if value is not None and not OPTION.match(value):
            raise InputError(option, f"{value!r} is not a plain option value")


def _check_timeout(value: float) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 < value <= TIMEOUT_MAX:
        raise InputError("timeout", f"{value!r} is not a timeout in seconds (0 < t <= {TIMEOUT_MAX:g})")


def _check_lines(value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= CAPTURE_LINES_MAX:
        raise InputError("lines", f"{value!r} is not a line count (1..{CAPTURE_LINES_MAX})")


def _check_text(value: str, field_name: str = "text") -> None:
    if not isinstance(value, str) or not value.strip():
        raise InputError(field_name, "the prompt is empty")
    if len(value) > PROMPT_MAX:
        raise InputError(field_name, f"the prompt is longer than {PROMPT_MAX} characters")


def check_expected_agent(inp: Any) -> None:
    """The agent a caller says it saw in a pane it names: name, kind, absolute cwd, a cursor (an
    operator's close of an unleased pane, an adoption)."""
    _check_name("expect_name", inp.expected_name)
    _check_agent(inp.expected_kind, inp.host, None, None)
    if not isinstance(inp.expected_cwd, str) or not inp.expected_cwd.startswith("/"):
        raise InputError("expect_cwd", f"{inp.expected_cwd!r} is not an absolute path")
    _check_cursor("expect_seq", inp.expected_state_change_seq)


def check_blocked_reason(value: str | None) -> None:
    if value is not None and (not isinstance(value, str) or not value.strip() or len(value) > 1000):
        raise InputError("reason", "an operator's reason is 1-1000 characters of text")


def _check_token(value: str) -> None:
    if not isinstance(value, str) or not TOKEN.match(value):
        raise InputError("receipt", f"{value!r} is not a receipt token ({TOKEN_PREFIX}<uuid>)")


def _check_instance_id(name: str, value: str | None) -> None:
    """A lease instance id as plans record it: ``MACHINE/KEY``."""
    if value is None:
        return
    machine, _, key = value.partition("/") if isinstance(value, str) else ("", "", "")
    if machine not in LEASE_MACHINES:
        raise InputError(name, f"{value!r} is not a lease instance id (reviewer/… or writer/…)")
    _check_key(name, key)


def _check_key(name: str, value: str | None) -> None:
    if value is not None and not (isinstance(value, str) and UUID.match(value)):
        raise InputError(name, f"{value!r} is not a UUID")


def _needs_attention(spec: MachineSpec) -> frozenset[str]:
    """States a person should look at: intermediate ones (an effect's outcome is not recorded) and
    those, other than ``active``, that ``reconcile`` settles (orphaned, a failed close or release)."""
    return frozenset(
        name
        for name, state in spec.states.items()
        if state.intermediate or (name != "active" and spec.transitions_for("reconcile", name))
    )


def _next_for(machine: str, instance: Instance) -> str:
    """The command that settles an instance left where it needs a person."""
    controller = instance.data.get("controller_id")
    if machine == "receipt":
        return (
            f"observe the agent (corral agent get {instance.data.get('pane_id')}), then corral abandon --controller "
            f"{controller} --receipt {instance.data.get('token')} on fresh evidence that it is settled"
        )
    group = {"pane": "agent"}.get(machine, machine)
    if machine == "plan":
        return f"corral plans resume {instance.data.get('plan_id')}"
    return f"corral {group} reconcile --controller {controller} (a dry run), then again with --apply"


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


LOCK_STATES = ("absent", "active", "stale", "indeterminate")
RUNNER_WHY = {
    "absent": "no runner recorded",
    "active": "its runner process is alive on this host",
    "stale": "its runner is gone (the process exited, or the host rebooted): a new runner may take it",
    "indeterminate": "its runner is on another host or its liveness cannot be read: never taken by age",
}


def _hostname() -> str:
    import socket

    return socket.gethostname()


def _lease_lock(spec: MachineSpec, lease: Instance, judge: Callable[[Any], str]) -> tuple[str, str]:
    """A reviewer, writer or pane instance as a lock: ``active`` while it holds its agent, ``absent``
    once ended, ``stale`` where only reconcile can settle it, and for an effect in flight (an
    intermediate state) what its recorded process says, ``indeterminate`` without one."""
    state = spec.states.get(lease.state)
    if lease.state == "active":
        return "active", "holds its agent"
    if state is not None and state.terminal:
        return "absent", f"{lease.state}: ended"
    if state is not None and state.intermediate:
        if lease.state == "provisioning" and lease.data.get("starter"):
            judged = judge(lease.data.get("starter"))
            if judged == "active":
                return "active", "its start is still running"
            if judged == "stale":
                return "stale", "its start died before recording the outcome: reconcile"
        return "indeterminate", f"{lease.state}: an effect's outcome is not recorded (reconcile once no process acts)"
    return "stale", f"{lease.state}: reconcile settles it"


# --- inputs -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReviewerStartInput:
    """Start an agent of ``kind`` named ``name`` in ``cwd`` (absolute), leased to the controller."""

    controller_id: str
    credential: Credential
    name: str
    kind: str
    cwd: str
    host: str = "process"
    model: str | None = None
    effort: str | None = None
    lease_id: str | None = None
    """An idempotency key: the lease instance is ``reviewer/<lease_id>`` (plans derive it from the step)."""

    def __post_init__(self) -> None:
        check_controller_id(self.controller_id)
        check_credential(self.credential, self.controller_id)
        _check_name("name", self.name)
        _check_key("lease_id", self.lease_id)
        _check_agent(self.kind, self.host, self.model, self.effort)
        if not isinstance(self.cwd, str) or not self.cwd:
            raise InputError("cwd", "the working directory is required")


@dataclass(frozen=True)
class ReviewerCloseInput:
    """Close the reviewer ``name`` if it sits settled at ``expected_state_change_seq``."""

    controller_id: str
    credential: Credential
    name: str
    expected_state_change_seq: int
    lines: int = CAPTURE_LINES_DEFAULT
    blocked_reason: str | None = None
    """An operator's decision to close a *blocked* agent anyway, and why (recorded with the lease)."""
    lease_id: str | None = None
    """The lease instance id (``reviewer/…``) the caller means; the lease named ``name`` must be that
    one (``lease_mismatch`` otherwise). Plans always give it: they act only on leases they created."""

    def __post_init__(self) -> None:
        check_controller_id(self.controller_id)
        check_credential(self.credential, self.controller_id)
        _check_name("name", self.name)
        _check_cursor("expected_state_change_seq", self.expected_state_change_seq)
        _check_lines(self.lines)
        check_blocked_reason(self.blocked_reason)
        _check_instance_id("lease_id", self.lease_id)


@dataclass(frozen=True)
class ReviewerListInput:
    """Reviewer leases (of one controller, if given); ``include_ended`` adds closed and failed ones."""

    controller_id: str | None = None
    include_ended: bool = False

    def __post_init__(self) -> None:
        if self.controller_id is not None:
            check_controller_id(self.controller_id)


@dataclass(frozen=True)
class ControllerInput:
    """An operation over everything a controller holds (cleanup, reconcile).

    ``apply`` False (the default) is a dry run: report what would be done, do nothing. ``leases``
    (instance ids, as the report names them) limits it to those leases; empty: all of them.
    """

    controller_id: str
    credential: Credential
    apply: bool = False
    leases: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check_controller_id(self.controller_id)
        check_credential(self.credential, self.controller_id)
        for lease in self.leases:
            if not isinstance(lease, str) or not LEASE_ID.match(lease):
                raise InputError("lease", f"{lease!r} is not a lease id (MACHINE/UUID, as reports name them)")


@dataclass(frozen=True)
class PaneCloseInput:
    """Close a pane corral started that no live lease holds, bound to the agent and cursor seen there."""

    controller_id: str
    credential: Credential
    pane_id: str
    expected_name: str
    expected_kind: str
    expected_cwd: str
    expected_state_change_seq: int
    host: str = "process"
    reason: str | None = None

    def __post_init__(self) -> None:
        check_controller_id(self.controller_id)
        check_credential(self.credential, self.controller_id)
        if not isinstance(self.pane_id, str) or not re.match(r"^[A-Za-z0-9][A-Za-z0-9:._-]{0,127}$", self.pane_id):
            raise InputError("pane", f"{self.pane_id!r} is not a pane id")
        check_expected_agent(self)
        if self.reason is not None and len(self.reason) > 1000:
            raise InputError("reason", "is longer than 1000 characters")


@dataclass(frozen=True)
class RelayInput:
    """Hand ``text`` to the leased agent ``target`` with a receipt."""

    controller_id: str
    credential: Credential
    target: str
    text: str = field(repr=False)
    batch_id: str | None = None
    receipt_id: str | None = None
    """An idempotency key: the receipt is ``receipt/<receipt_id>`` (plans derive it from the step)."""

    def __post_init__(self) -> None:
        check_controller_id(self.controller_id)
        check_credential(self.credential, self.controller_id)
        _check_name("target", self.target)
        _check_text(self.text)
        _check_key("receipt_id", self.receipt_id)


@dataclass(frozen=True)
class CollectInput:
    """Collect the results of receipts, waiting up to ``timeout`` seconds for each."""

    controller_id: str
    credential: Credential
    tokens: tuple[str, ...]
    timeout: float = TIMEOUT_DEFAULT
    lines: int = CAPTURE_LINES_DEFAULT
    mode: str = "all"
    """``all``: every result; ``first``: the first receipt to settle, the others left pending."""

    def __post_init__(self) -> None:
        check_controller_id(self.controller_id)
        check_credential(self.credential, self.controller_id)
        if not 1 <= len(self.tokens) <= BATCH_MAX:
            raise InputError("receipt", f"give 1-{BATCH_MAX} receipt tokens, not {len(self.tokens)}")
        if self.mode not in ("all", "first"):
            raise InputError("mode", f"{self.mode!r} is not all or first")
        for token in self.tokens:
            _check_token(token)
        if len(set(self.tokens)) != len(self.tokens):
            raise InputError("receipt", "a receipt token is given twice")
        _check_timeout(self.timeout)
        _check_lines(self.lines)


@dataclass(frozen=True)
class AskManyInput:
    """Relay to 1-8 distinct targets, then collect all, or the first to settle (mode ``first``)."""

    controller_id: str
    credential: Credential
    requests: tuple[tuple[str, str], ...] = field(repr=False)
    mode: str = "all"
    timeout: float = TIMEOUT_DEFAULT
    lines: int = CAPTURE_LINES_DEFAULT
    batch_id: str | None = None
    """An idempotency key for the batch (plans derive it from the step); a fresh UUID otherwise."""
    receipt_ids: tuple[str, ...] | None = None
    """Idempotency keys for the receipts, one per request (``receipt/<id>``)."""

    def __post_init__(self) -> None:
        check_controller_id(self.controller_id)
        check_credential(self.credential, self.controller_id)
        _check_key("batch_id", self.batch_id)
        if self.receipt_ids is not None:
            if len(self.receipt_ids) != len(self.requests):
                raise InputError("receipt_ids", "give one receipt id per request")
            for key in self.receipt_ids:
                _check_key("receipt_ids", key)
        if not 1 <= len(self.requests) <= BATCH_MAX:
            raise InputError("request", f"give 1-{BATCH_MAX} requests, not {len(self.requests)}")
        targets = [target for target, _ in self.requests]
        if len(set(targets)) != len(targets):
            raise InputError("request", "each target may appear once in a batch")
        for target, text in self.requests:
            _check_name("request", target)
            _check_text(text, "request")
        if self.mode not in ("all", "first"):
            raise InputError("mode", f"{self.mode!r} is not all or first")
        _check_timeout(self.timeout)
        _check_lines(self.lines)


@dataclass(frozen=True)
class AbandonInput:
    """Release a reserved or pending receipt's target on fresh evidence that the agent is settled."""

    controller_id: str
    credential: Credential
    token: str
    message: str | None = None

    def __post_init__(self) -> None:
        check_controller_id(self.controller_id)
        check_credential(self.credential, self.controller_id)
        _check_token(self.token)
        if self.message is not None and len(self.message) > 1000:
            raise InputError("message", "is longer than 1000 characters")


@dataclass(frozen=True)
class ReceiptsInput:
    """Receipts (of one controller, in some states), newest last."""

    controller_id: str | None = None
    states: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.controller_id is not None:
            check_controller_id(self.controller_id)
        known = ("reserved", "pending", "completed", "failed", "abandoned")
        for state in self.states:
            if state not in known:
                raise InputError("state", f"{state!r} is not a receipt state ({', '.join(known)})")


@dataclass(frozen=True)
class WaitAnyInput:
    """Wait for the first of 1-16 leased agents to settle.

    A target with a cursor (``T:SEQ``) waits for a settle strictly after ``SEQ``. A target without
    one is judged now: already settled, it wins at once (it is done: waiting for its *next* settle
    would wait for work nobody asked for); ``fresh`` makes it wait instead for the next settle after
    the cursor observed at the call. ``lines`` bounds each winner's output.
    """

    controller_id: str
    credential: Credential
    targets: tuple[tuple[str, int | None], ...]
    timeout: float = TIMEOUT_DEFAULT
    lines: int = WAIT_LINES_DEFAULT
    fresh: bool = False

    def __post_init__(self) -> None:
        check_controller_id(self.controller_id)
        check_credential(self.credential, self.controller_id)
        if not 1 <= len(self.targets) <= WAIT_TARGETS_MAX:
            raise InputError("target", f"give 1-{WAIT_TARGETS_MAX} targets, not {len(self.targets)}")
        names = [name for name, _ in self.targets]
        if len(set(names)) != len(names):
            raise InputError("target", "each target may appear once")
        for name, after in self.targets:
            _check_name("target", name)
            if after is not None:
                _check_cursor("target", after)
        _check_timeout(self.timeout)
        _check_lines(self.lines)


PANE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9:._-]{0,127}$")
WAITABLE = ("idle", "working", "done", "blocked")


@dataclass(frozen=True)
class AgentInput:
    """One agent on a host, by pane id, read-only (``corral agent get`` / ``read``): leased or not,
    no controller needed. ``lines`` bounds a read."""

    pane_id: str
    host: str = "process"
    lines: int = CAPTURE_LINES_DEFAULT

    def __post_init__(self) -> None:
        if not isinstance(self.pane_id, str) or not PANE_ID.match(self.pane_id):
            raise InputError("target", f"{self.pane_id!r} is not a pane id")
        if self.host not in HOSTS:
            raise InputError("host", f"{self.host!r} is not an agent host ({', '.join(HOSTS)})")
        _check_lines(self.lines)


@dataclass(frozen=True)
class AgentWaitInput:
    """Wait, read-only, until the agent is in one of ``until`` at a cursor past ``after_seq``.

    ``until`` defaults to the settled statuses; ``after_seq`` None means the cursor observed when the
    wait starts (so the wait is for the next change, never satisfied by the state it began in).
    """

    pane_id: str
    until: tuple[str, ...] = ("idle", "done", "blocked")
    after_seq: int | None = None
    timeout: float = TIMEOUT_DEFAULT
    host: str = "process"

    def __post_init__(self) -> None:
        AgentInput(self.pane_id, self.host)
        if not self.until:
            raise InputError("until", "give at least one status")
        for status in self.until:
            if status not in WAITABLE:
                raise InputError("until", f"{status!r} is not a status to wait for ({', '.join(WAITABLE)})")
        if self.after_seq is not None:
            _check_cursor("after_seq", self.after_seq)
        _check_timeout(self.timeout)


# --- results ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AgentLeaseView:
    """A reviewer (or writer) lease as listings show it."""

    id: str
    machine: str
    state: str
    version: int
    data: Mapping[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "machine": self.machine, "state": self.state, "version": self.version, **self.data}


@dataclass(frozen=True)
class ReceiptView:
    """A receipt: its state and cursors; never a prompt or an output."""

    state: str
    version: int
    data: Mapping[str, Any]

    @property
    def token(self) -> str:
        return str(self.data["token"])

    def to_dict(self) -> dict[str, Any]:
        return {"state": self.state, "version": self.version, **self.data}


@dataclass(frozen=True)
class CollectResult:
    """A collected (or replayed) result: the receipt and the output captured at its settled cursor."""

    receipt: ReceiptView
    output: str = field(repr=False)
    replayed: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"receipt": self.receipt.to_dict(), "output": self.output, "replayed": self.replayed}


@dataclass(frozen=True)
class CloseResult:
    lease: AgentLeaseView
    output: str = field(repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {"lease": self.lease.to_dict(), "output": self.output}


@dataclass(frozen=True)
class AskManyResult:
    """Mode ``all``: every result. Mode ``first``: the first result and the other receipts, still pending."""

    results: list[CollectResult]
    pending_receipts: list[ReceiptView]

    def to_dict(self) -> dict[str, Any]:
        return {
            "results": [r.to_dict() for r in self.results],
            "pending_receipts": [r.to_dict() for r in self.pending_receipts],
        }


@dataclass(frozen=True)
class Winner:
    """One settled target of a wait: its observation and its visible output (bounded)."""

    target: str
    observation: Observation
    output: str = field(repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target, "observation": self.observation.to_dict(), "output": self.output}


@dataclass(frozen=True)
class WaitAnyResult:
    """The winners of a wait: one when a wait ended it, every target already settled when some were.

    ``target``/``observation``/``output`` at the top are the first winner's (the shape before winners)."""

    winners: list[Winner]

    @property
    def target(self) -> str:
        return self.winners[0].target

    @property
    def observation(self) -> Observation:
        return self.winners[0].observation

    def to_dict(self) -> dict[str, Any]:
        return {**self.winners[0].to_dict(), "winners": [w.to_dict() for w in self.winners]}


@dataclass(frozen=True)
class Housekeeping:
    """What cleanup or reconcile did (or, for a dry run, would do) to each lease it looked at."""

    applied: bool
    actions: list[dict[str, Any]]

    def to_dict(self) -> dict[str, Any]:
        return {"applied": self.applied, "actions": self.actions}


class AgentOps(ServiceBase):
    """Reviewer leases, receipts and waits."""

    # --- plumbing -------------------------------------------------------------------------------------

    def host(self, name: str) -> AgentHost:
        if self._hosts is None:
            raise CorralError("no agent host is configured for this service", code="internal")
        return self._hosts(name)

    @property
    def kinds(self) -> Kinds:
        if self._kinds is None:
            self._kinds = Kinds.load([])
        elif not isinstance(self._kinds, Kinds):
            self._kinds = self._kinds()
        return self._kinds

    def _credential_params(self, credential: Credential) -> dict[str, Any]:
        return {
            "controller_id": credential.controller_id,
            "lease_id": credential.lease_id,
            "generation": credential.generation,
        }

    def _fire_on(
        self,
        machine: str,
        instance_id: str,
        trigger: str,
        credential: Credential,
        params: Mapping[str, Any],
        observations: Mapping[str, Any],
        *,
        secrets: Mapping[str, str] | None = None,
        host: AgentHost | None = None,
    ) -> Result:
        request = self._request(instance_id, trigger, credential, params, observations, secrets=secrets, host=host)
        return self.engine.fire(self.library.builtin(machine), request)

    def _request(
        self,
        instance_id: str,
        trigger: str,
        credential: Credential,
        params: Mapping[str, Any],
        observations: Mapping[str, Any],
        *,
        secrets: Mapping[str, str] | None = None,
        host: AgentHost | None = None,
    ) -> Request:
        return Request(
            instance_id=instance_id,
            trigger=trigger,
            params={**self._credential_params(credential), **{k: v for k, v in params.items() if v is not None}},
            secrets={"token": credential.token, **(secrets or {})},
            observations=observations,
            actor=self.actor,
            resources={"agents": host} if host is not None else {},
        )

    @staticmethod
    def _observe(host: AgentHost, pane_id: str | None) -> dict[str, Any]:
        if pane_id is None:
            return dict(GONE)
        try:
            return host.get(pane_id).to_dict()
        except AgentGoneError:
            return dict(GONE)

    def _capture(
        self, host: AgentHost, pane_id: str, lines: int, first: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], str, dict[str, Any]]:
        """Observe, read the output, observe again: the guards compare the two observations."""
        before = first if first is not None else self._observe(host, pane_id)
        output = ""
        if before.get("exists"):
            try:
                output = host.read(pane_id, lines)
            except AgentGoneError:
                output = ""
        return before, output, self._observe(host, pane_id)

    def _check_fence(self, credential: Credential) -> None:
        """A read-only fence check for operations that change nothing (waits)."""
        lease = self.store.get(fence.instance_id(credential.controller_id))
        rejection = fence.check(lease, credential, self.store.now())
        if rejection is not None:
            raise RefusedError(rejection.message, code=rejection.code, **dict(rejection.details))

    def _lease_by_name(
        self,
        controller_id: str,
        name: str,
        states: tuple[str, ...] = ("active",),
        machines: tuple[str, ...] = LEASE_MACHINES,
    ) -> Instance:
        found = [
            lease
            for machine in machines
            for lease in self.store.find(machine, states)
            if lease.data.get("name") == name and lease.data.get("controller_id") == controller_id
        ]
        if not found:
            self._refuse_adopted(controller_id, name)
            raise NotFoundError(
                f"controller {controller_id!r} holds no {' or '.join(states)} lease named {name!r}",
                code="target_unknown",
                target=name,
                states=list(states),
            )
        if len(found) > 1:
            raise RefusedError(
                f"{name!r} names {len(found)} leases", code="target_ambiguous", leases=[lease.id for lease in found]
            )
        return found[0]

    def _lease_by_id(
        self, controller_id: str, name: str, lease_id: str, states: tuple[str, ...], machine: str
    ) -> Instance:
        """The lease ``lease_id`` if it is this controller's ``machine`` lease named ``name`` in one of
        ``states``: a caller that recorded which lease it created acts on that one, never on another
        lease that happens to carry the same name."""
        lease = self.store.get(lease_id)
        if lease is None or lease.machine != machine:
            raise NotFoundError(f"no {machine} lease {lease_id!r}", code="target_unknown", target=name, lease=lease_id)
        if lease.data.get("name") != name or lease.data.get("controller_id") != controller_id:
            raise RefusedError(
                f"lease {lease_id!r} is {lease.data.get('name')!r} of controller "
                f"{lease.data.get('controller_id')!r}, not {name!r} of {controller_id!r}",
                code="lease_mismatch",
                lease=lease_id,
                target=name,
            )
        if lease.state not in states:
            raise NotFoundError(
                f"lease {lease_id!r} ({name!r}) is {lease.state}, not {' or '.join(states)}",
                code="target_unknown",
                target=name,
                lease=lease_id,
                state=lease.state,
            )
        return lease

    def _refuse_adopted(self, controller_id: str, name: str) -> None:
        """A name that only an adopted lease holds is refused as such: an adoption is for cleanup only
        (``corral adopted close|release``), never a target of prompts, waits or reviewer/writer verbs."""
        for lease in self.store.find("adopted", LIVE_LEASE_STATES):
            if lease.data.get("name") == name and lease.data.get("controller_id") == controller_id:
                raise RefusedError(
                    f"{name!r} is an adopted pane ({lease.id}): adoption allows only `corral adopted close` and "
                    "`corral adopted release`, never prompts",
                    code="lease_adopted",
                    target=name,
                    lease=lease.id,
                )

    def _settled(self, result: Result, code: str, doing: str) -> AgentLeaseView:
        """The lease after a two-phase start or close; :class:`AgentOperationError` unless it succeeded."""
        view = self._lease_view(result.instance)
        if result.outcome != "success":
            raise AgentOperationError(
                f"{doing} failed; the lease is {result.instance.state}: {result.instance.data.get('failure')}",
                code=code,
                lease=view.to_dict(),
            )
        return view

    def _agent_options(self, kind: str, model: str | None, effort: str | None, host: str = "process") -> dict[str, str]:
        """The start options to record; --model/--effort are refused for a kind that does not take them
        (unknown kinds: the guard says so). On the process host the kind's executable must exist: a
        missing one would only show as a run that exits 127, which looks like a finished review."""
        if kind in self.kinds.names():
            spec = self.kinds.get(kind)
            options = StartOptions(model=model, effort=effort)
            spec.check_options(options)
            if host == "process":
                import shutil

                command = spec.command(options)[0]
                searched = os.environ.get("PATH", os.defpath)
                if shutil.which(command, path=searched) is None:
                    raise InputError(
                        "kind",
                        f"the {kind!r} agent's command {command!r} is not an executable on PATH ({searched}); "
                        "install it, or configure the kind's argv in agents.yaml",
                        code="agent_command_missing",
                        command=command,
                        path=searched.split(os.pathsep),
                    )
        return {k: v for k, v in (("model", model), ("effort", effort)) if v is not None}

    def _leases(self, machine: str, states: tuple[str, ...] | None, controller_id: str | None) -> list[AgentLeaseView]:
        """Leases of ``machine`` in ``states`` (None: every state), of one controller if given."""
        return [
            self._lease_view(i)
            for i in self.store.find(machine, states)
            if controller_id is None or i.data.get("controller_id") == controller_id
        ]

    def _close_lease(
        self,
        lease: Instance,
        trigger: str,
        credential: Credential,
        params: dict[str, Any],
        lines: int,
        observe: Callable[[], Mapping[str, Any]] | None = None,
    ) -> CloseResult:
        """Capture the agent's output (identity and cursor read before and after), then fire ``trigger``
        (a reviewer's ``close``, a writer's ``release``), whose effect closes the pane. ``observe`` adds
        facts read after the capture (a writer's git state)."""
        host = self.host(lease.data["host"])
        before, output, after = self._capture(host, lease.data["pane_id"], lines)
        result = self._fire_on(
            lease.machine,
            lease.id,
            trigger,
            credential,
            params,
            {
                "agent": before,
                "agent_after": after,
                "capture_sha256": _sha256(output),
                **(observe() if observe else {}),
            },
            host=host,
        )
        return CloseResult(self._settled(result, "agent_close_failed", "closing the pane"), output)

    @staticmethod
    def _start_params() -> dict[str, Any]:
        """What a start records in its intent, before the host creates anything: a nonce the host keeps
        with the pane, and this process (so reconcile never races a start that is still running)."""
        from runner import lockstatus

        return {"start_nonce": uuid.uuid4().hex, "starter": lockstatus.current()}

    def _find_pane(self, host: AgentHost, lease: Instance) -> tuple[dict[str, Any], str | None]:
        """The pane a lease stands for: the one it recorded, or, for a start killed before it recorded
        one, the single live pane no other lease holds with its name, kind, cwd and start nonce.
        Returns the observation (``GONE`` if none) and, when several panes match, why none was chosen."""
        pane_id = lease.data.get("pane_id")
        if pane_id is not None:
            return self._observe(host, pane_id), None
        held = {
            other.data.get("pane_id")
            for machine in PANE_LEASE_MACHINES
            for other in self.store.find(machine, LIVE_LEASE_STATES)
            if other.data.get("host") == lease.data.get("host")
        }
        nonce = lease.data.get("start_nonce")
        found = [
            o
            for o in host.find(
                str(lease.data.get("name")), str(lease.data.get("kind")), str(lease.data.get("cwd")), nonce
            )
            if o.pane_id not in held
        ]
        exact = [o for o in found if nonce is not None and o.nonce == nonce]
        if exact:
            found = exact
        if not found:
            return dict(GONE), None
        if len(found) > 1:
            panes = ", ".join(o.pane_id for o in found)
            return (
                dict(GONE),
                f"{len(found)} unleased panes ({panes}) match this start: close the right one (`corral agent close`)",
            )
        return {**found[0].to_dict(), "nonce": found[0].nonce}, None

    def _lease_view(self, instance: Instance) -> AgentLeaseView:
        spec = self.library.builtin(instance.machine)
        return AgentLeaseView(
            instance.id, instance.machine, instance.state, instance.version, spec.public_data(instance.data)
        )

    def lease(self, instance_id: str) -> AgentLeaseView | None:
        """The agent lease (reviewer, writer, adopted, pane) with this instance id, or None."""
        found = self.store.get(instance_id)
        if found is None or found.machine not in AGENT_MACHINES:
            return None
        return self._lease_view(found)

    def receipt(self, token: str) -> ReceiptView:
        """The receipt with this token.

        Raises:
            NotFoundError: ``receipt_unknown``.
        """
        return self._receipt_view(self._receipt(token))

    def receipt_by_id(self, receipt_id: str) -> ReceiptView | None:
        """The receipt whose id (the part after ``receipt/``) is ``receipt_id``, or None."""
        found = self.store.get(f"receipt/{receipt_id}")
        return None if found is None else self._receipt_view(found)

    def _receipt(self, token: str) -> Instance:
        match = TOKEN.match(token)
        found = self.store.get(f"receipt/{match.group(1)}") if match else None
        if found is None:
            raise NotFoundError(f"no receipt {token}", code="receipt_unknown", receipt=token)
        return found

    @staticmethod
    def _receipt_view(instance: Instance) -> ReceiptView:
        return ReceiptView(instance.state, instance.version, dict(instance.data))

    # --- reviewer leases ----------------------------------------------------------------------------

    def reviewer_start(self, inp: ReviewerStartInput) -> AgentLeaseView:
        """Start a reviewer. Refused: fence_stale, agent_name_taken, cwd_invalid, agent_kind_unknown."""
        host = self.host(inp.host)
        real = os.path.realpath(inp.cwd)
        observations = {
            "cwd": {"given": inp.cwd, "real": real, "is_dir": os.path.isdir(real)},
            "kinds": self.kinds.names(),
        }
        options = self._agent_options(inp.kind, inp.model, inp.effort, inp.host)
        result = self._fire_on(
            "reviewer",
            f"reviewer/{inp.lease_id or uuid.uuid4()}",
            "start",
            inp.credential,
            {
                "name": inp.name,
                "kind": inp.kind,
                "cwd": inp.cwd,
                "host": inp.host,
                "options": options,
                **self._start_params(),
            },
            observations,
            host=host,
        )
        view = self._settled(result, "agent_start_failed", "starting the agent")
        return view

    def reviewer_close(self, inp: ReviewerCloseInput) -> CloseResult:
        """Capture the output at the expected cursor and close the pane."""
        states = ("active", "close_failed")
        if inp.lease_id is not None:
            lease = self._lease_by_id(inp.controller_id, inp.name, inp.lease_id, states, "reviewer")
        else:
            lease = self._lease_by_name(inp.controller_id, inp.name, states, ("reviewer",))
        params = {"expected_state_change_seq": inp.expected_state_change_seq, "blocked_reason": inp.blocked_reason}
        return self._close_lease(lease, "close", inp.credential, params, inp.lines)

    def reviewers(self, inp: ReviewerListInput) -> list[AgentLeaseView]:
        return self._leases("reviewer", None if inp.include_ended else LIVE_LEASE_STATES, inp.controller_id)

    def reviewer_cleanup(self, inp: ControllerInput) -> Housekeeping:
        """Close this controller's reviewers that are identity-matched, idle or done, with no open receipt.

        A dry run (the default) only reports what it would close.
        """
        self._check_fence(inp.credential)
        actions: list[dict[str, Any]] = []
        open_targets = {r.data.get("target") for r in self.store.find("receipt", OPEN_RECEIPT_STATES)}
        for lease in self.store.find("reviewer", ["active"]):
            if lease.data.get("controller_id") != inp.controller_id:
                continue
            host = self.host(lease.data["host"])
            observed = self._observe(host, lease.data.get("pane_id"))
            action = {
                "name": lease.data.get("name"),
                "lease": lease.id,
                "status": observed.get("status"),
                "seq": observed.get("seq"),
            }
            if not same_identity(observed, lease.data):
                action.update(action="skip", why="identity does not match (reconcile or inspect it)")
            elif observed.get("status") not in PROMPTABLE:
                action.update(action="skip", why=f"the agent is {observed.get('status')}")
            elif lease.id in open_targets:
                action.update(action="skip", why="a receipt for it is unresolved")
            elif not inp.apply:
                action.update(action="would_close")
            else:
                try:
                    params = {"expected_state_change_seq": int(observed["seq"])}
                    self._close_lease(lease, "close", inp.credential, params, CAPTURE_LINES_DEFAULT)
                    action.update(action="closed")
                except CorralError as exc:
                    action.update(action="failed", code=exc.code, why=exc.message)
            actions.append(action)
        return Housekeeping(inp.apply, actions)

    def reconcile(self, inp: ControllerInput, machine: str = "reviewer") -> Housekeeping:
        """Settle this controller's leases (``reviewer``, ``writer`` or ``pane``) left where ``reconcile``
        applies; without ``inp.apply`` only report, per lease, what would be done and why.

        A lease whose pane is gone is settled; the pane of a start that never finished (found by its
        recorded pane, or by the start nonce and identity it recorded before the pane was created) is
        closed, fenced, and the lease ends ``failed_closed``; a recorded close or release whose pane is
        still open with the agent at the bound cursor is finished. A start whose process still runs is
        left alone; whatever the guards refuse is reported with their code, and nothing is touched.

        The dry run observes exactly as the real run does and asks the engine to evaluate the same
        request through the machine's guards (:meth:`Engine.plan`) without writing or acting, so its
        plan is the decision the apply would take on those observations (the world may move between).
        """
        from runner import lockstatus

        self._check_fence(inp.credential)
        spec = self.library.builtin(machine)
        unsettled = [state for state in spec.states if spec.transitions_for("reconcile", state)]
        actions: list[dict[str, Any]] = []
        seen: set[str] = set()
        for lease in self.store.find(machine, unsettled):
            if lease.data.get("controller_id") != inp.controller_id:
                continue
            if inp.leases and lease.id not in inp.leases:
                continue
            seen.add(lease.id)
            host = self.host(lease.data["host"])
            observed, ambiguous = self._find_pane(host, lease)
            action: dict[str, Any] = {"name": lease.data.get("name"), "lease": lease.id, "state": lease.state}
            if ambiguous is not None:
                action.update(action="skip", why=ambiguous)
            elif lease.state == "active" and observed.get("exists"):
                if same_identity(observed, lease.data):
                    if inp.leases:  # asked for by id: say why nothing is done
                        action.update(
                            action="skip", why="the lease is active and its pane is live: nothing to reconcile"
                        )
                        actions.append(action)
                    continue  # a live lease with its agent: nothing to reconcile, nothing to report
                # The pane holds another agent (after a Herdr restart: another terminal, no name). No
                # transition fits (the pane is not gone, and closing it would close an agent corral
                # did not start): report it, touch nothing; a person decides.
                action.update(
                    action="skip",
                    code="identity_changed",
                    why=f"pane {observed.get('pane_id')!r} no longer holds the leased agent (its name, kind, cwd or "
                    "terminal changed, as after a Herdr restart); inspect it in the host",
                )
            else:
                starter = lockstatus.status(lease.data.get("starter")) if lease.state == "provisioning" else None
                observations = {"agent": observed, "starter": starter}
                try:
                    if inp.apply:
                        result = self._fire_on(
                            machine, lease.id, "reconcile", inp.credential, {}, observations, host=host
                        )
                    else:
                        plan = self.engine.plan(
                            spec, self._request(lease.id, "reconcile", inp.credential, {}, observations)
                        )
                except RefusedError as exc:
                    # The machine's guards judged the evidence insufficient: report why, touch nothing.
                    action.update(action="skip", code=exc.code, why=exc.message)
                else:
                    if inp.apply:
                        action.update(action="reconciled", to=result.instance.state)
                        if observed.get("exists"):
                            action.update(closed_pane=observed.get("pane_id"))
                    else:
                        action.update(action="would_reconcile", to=plan.then, why=" ".join(plan.description.split()))
                        if plan.effects:
                            action.update(via=plan.dest, effects=plan.effects)
                        if observed.get("exists"):
                            action.update(would_close_pane=observed.get("pane_id"))
            actions.append(action)
        for missing in inp.leases:
            if missing not in seen:
                actions.append(
                    {
                        "name": None,
                        "lease": missing,
                        "action": "skip",
                        "why": f"not a {machine} lease of controller {inp.controller_id!r} that reconcile applies to",
                    }
                )
        return Housekeeping(inp.apply, actions)

    def reviewer_reconcile(self, inp: ControllerInput) -> Housekeeping:
        """:meth:`reconcile` for reviewer leases."""
        return self.reconcile(inp, "reviewer")

    # --- panes no lease holds ---------------------------------------------------------------------------

    def pane_close(self, inp: PaneCloseInput) -> AgentLeaseView:
        """Close a pane corral started and no lease holds (a start killed before it recorded the pane).

        Fenced, bound to the identity and cursor the operator saw, and recorded (machine ``pane``).
        Refused: ``pane_leased`` (go through the lease), ``pane_not_corrals``, ``identity_changed``,
        ``cursor_mismatch``, ``agent_not_settled``, ``agent_gone``.
        """
        host = self.host(inp.host)
        result = self._fire_on(
            "pane",
            f"pane/{uuid.uuid4()}",
            "close",
            inp.credential,
            {
                "host": inp.host,
                "pane_id": inp.pane_id,
                "name": inp.expected_name,
                "kind": inp.expected_kind,
                "cwd": inp.expected_cwd,
                "expected_state_change_seq": inp.expected_state_change_seq,
                "reason": inp.reason,
            },
            {"agent": self._observe(host, inp.pane_id)},
            host=host,
        )
        return self._settled(result, "agent_close_failed", "closing the pane")

    def pane_reconcile(self, inp: ControllerInput) -> Housekeeping:
        """:meth:`reconcile` for operator closes whose outcome was never recorded."""
        return self.reconcile(inp, "pane")

    # --- receipts -------------------------------------------------------------------------------------

    def relay(self, inp: RelayInput) -> ReceiptView:
        """Reserve a receipt and deliver the prompt; returns it pending.

        Raises:
            RefusedError: ``receipt_outstanding``, ``agent_not_settled``, ``fence_stale``… (nothing sent).
            DeliveryError: ``delivery_ambiguous`` (still reserved, blocking) or ``delivery_failed``.
        """
        receipt_id, request = self._relay_request(inp)
        try:
            result: Result | CorralError = self.engine.fire(self.library.builtin("receipt"), request)
        except (AuthorityMovedError, OutcomeUnrecordedError) as exc:
            result = exc
        return self._delivered(inp.target, receipt_id, result)

    def _relay_request(self, inp: RelayInput) -> tuple[str, Request]:
        lease = self._lease_by_name(inp.controller_id, inp.target)
        host = self.host(lease.data["host"])
        receipt_id = inp.receipt_id or str(uuid.uuid4())
        token = f"{TOKEN_PREFIX}{receipt_id}"
        return receipt_id, self._request(
            f"receipt/{receipt_id}",
            "relay",
            inp.credential,
            {"target": lease.id, "token": token, "prompt_sha256": _sha256(inp.text), "batch_id": inp.batch_id},
            {"agent": self._observe(host, lease.data.get("pane_id"))},
            secrets={"prompt": inp.text},
            host=host,
        )

    def _delivered(self, target: str, receipt_id: str, result: Result | CorralError) -> ReceiptView:
        """The pending receipt of a relay, or the error that says what happened to its prompt."""
        token = f"{TOKEN_PREFIX}{receipt_id}"
        if isinstance(result, AuthorityMovedError):
            # The gate refused before the hand-over: certainly not delivered (say so, with the receipt).
            result.details["delivered"] = False
            self._attach_receipt(result, receipt_id)
            raise result
        if isinstance(result, OutcomeUnrecordedError):
            result.details["delivered"] = result.details.get("effect_outcome") == "success" or None
            self._attach_receipt(result, receipt_id)
            raise result
        if isinstance(result, CorralError):
            raise result
        view = self._receipt_view(result.instance)
        if result.outcome == "success":
            return view
        if result.outcome == "failure":
            raise DeliveryError(
                f"receipt {token}: {view.data.get('message')}", code="delivery_failed", receipt=view.to_dict()
            )
        raise DeliveryError(
            f"receipt {token} stays reserved and blocks {target!r}: {view.data.get('message')}; observe the "
            "agent and abandon the receipt on fresh evidence",
            code="delivery_ambiguous",
            receipt=view.to_dict(),
        )

    def _attach_receipt(self, exc: CorralError, receipt_id: str) -> None:
        found = self.store.get(f"receipt/{receipt_id}")
        if found is not None:
            exc.details["receipt"] = self._receipt_view(found).to_dict()

    async def _collect_one(self, inp: CollectInput, token: str) -> CollectResult:
        receipt = self._receipt(token)
        if receipt.data.get("controller_id") != inp.controller_id:
            raise RefusedError(
                f"receipt {token} belongs to controller {receipt.data.get('controller_id')!r}",
                code="not_owner",
                receipt=token,
            )
        host = self.host(receipt.data["host"])
        pane_id = receipt.data["pane_id"]
        if receipt.state == "completed":
            return self._replay(receipt, host, inp.lines)
        if receipt.state != "pending":
            view = self._receipt_view(receipt)
            code = "receipt_reserved" if receipt.state == "reserved" else "receipt_ended"
            raise RefusedError(
                f"receipt {token} is {receipt.state}"
                + (f" ({receipt.data.get('reason')})" if receipt.data.get("reason") else "")
                + (
                    "; its delivery was never confirmed: abandon it on fresh evidence"
                    if receipt.state == "reserved"
                    else ""
                ),
                code=code,
                receipt=view.to_dict(),
            )
        settled: dict[str, Any] | None = self._not_the_receipts(host, receipt)
        try:
            if settled is None:
                settled = (await host.wait(pane_id, int(receipt.data["after_seq"]), inp.timeout)).to_dict()
        except AgentGoneError:
            settled = dict(GONE)
        except WaitTimeoutError as exc:
            name = receipt.data.get("name")
            raise WaitTimeoutError(
                f"{name!r} did not settle within {inp.timeout:g} s (now {exc.details.get('status')} at seq "
                f"{exc.details.get('seq')}); the receipt stays pending: collect it again later, or abandon it",
                **{**exc.details, "target": name, "receipt": self._receipt_view(receipt).to_dict()},
            ) from None
        before, output, after = self._capture(host, pane_id, inp.lines, settled)
        result = self._fire_on(
            "receipt",
            receipt.id,
            "collect",
            inp.credential,
            {},
            {"agent": before, "agent_after": after, "capture_sha256": _sha256(output)},
        )
        view = self._receipt_view(result.instance)
        if result.instance.state != "completed":
            raise RefusedError(
                f"receipt {token} failed: {view.data.get('reason')}",
                code=str(view.data.get("reason")),
                receipt=view.to_dict(),
            )
        collected = CollectResult(view, output)
        self._check_run(collected)
        return collected

    def _not_the_receipts(self, host: AgentHost, receipt: Instance) -> dict[str, Any] | None:
        """The observation of the receipt's pane if it no longer holds the receipt's agent (gone, or
        another agent: after a Herdr restart the pane has another terminal and the agent no name),
        else None. Such a receipt can only fail (``identity_changed``), so collect must not wait on it:
        its cursor belongs to the old lifetime (Herdr's counter restarts from 0), and a wait for a seq
        past it would run out the whole timeout instead."""
        observed = self._observe(host, receipt.data.get("pane_id"))
        return None if same_identity(observed, receipt.data) else observed

    @staticmethod
    def _check_run(collected: CollectResult) -> None:
        """A run that exited non-zero is a failure, not a finished review (its output says why)."""
        status = collected.receipt.data.get("exit_status")
        blocked = collected.receipt.data.get("settled_status") == "blocked"  # a question, not a failure
        if status not in (None, 0) and not blocked and collected.receipt.state == "completed":
            name = collected.receipt.data.get("name")
            raise AgentRunFailedError(
                f"the agent {name!r}'s run failed with exit status {status}"
                + (" (its command was not found)" if status == 127 else "")
                + "; its output is in details",
                receipt=collected.receipt.to_dict(),
                output=collected.output,
                exit_status=status,
            )

    def _replay(self, receipt: Instance, host: AgentHost, lines: int) -> CollectResult:
        """A completed receipt's output, only while the agent still sits at the settled cursor."""
        pane_id = receipt.data["pane_id"]
        before, output, after = self._capture(host, pane_id, lines)
        stable = (
            before == after
            and same_identity(before, receipt.data)
            and before.get("seq") == receipt.data.get("settled_seq")
        )
        if not stable or _sha256(output) != receipt.data.get("output_sha256"):
            why = (
                f"the agent {receipt.data.get('name')!r} is gone (its pane was closed)"
                if not before.get("exists")
                else f"the agent has moved on (seq {before.get('seq')}) or its output changed"
            )
            raise RefusedError(
                f"receipt {receipt.data['token']} completed at seq {receipt.data.get('settled_seq')}, but {why}: the "
                "result can no longer be replayed",
                code="cursor_superseded",
                receipt=self._receipt_view(receipt).to_dict(),
            )
        replayed = CollectResult(self._receipt_view(receipt), output, replayed=True)
        self._check_run(replayed)
        return replayed

    async def collect(self, inp: CollectInput) -> list[CollectResult]:
        """Collect each receipt (concurrently); the first error is raised after all have finished.

        The fence is checked first: a replay changes nothing, but its output is still only for the
        controller's current holder.
        """
        import anyio

        self._check_fence(inp.credential)
        results: dict[str, CollectResult] = {}
        errors: dict[str, CorralError] = {}

        async def one(token: str) -> None:
            try:
                results[token] = await self._collect_one(inp, token)
            except CorralError as exc:
                errors[token] = exc

        async with anyio.create_task_group() as group:
            for token in inp.tokens:
                group.start_soon(one, token)
        if errors:
            token, error = next((t, errors[t]) for t in inp.tokens if t in errors)
            error.details.setdefault("receipt_token", token)
            if results:
                error.details["collected"] = [results[t].to_dict() for t in inp.tokens if t in results]
            raise error
        return [results[t] for t in inp.tokens]

    async def collect_first(self, inp: CollectInput) -> AskManyResult:
        """The first of the receipts to settle, collected; the others returned still pending (they keep
        blocking their targets until collected or abandoned). A completed receipt wins at once (replay)."""
        self._check_fence(inp.credential)
        receipts = [self._receipt(token) for token in inp.tokens]
        winner = next((r.data["token"] for r in receipts if r.state == "completed"), None)
        if winner is None:
            # A receipt whose agent is already not its own ends the wait at once (collect fails it,
            # identity_changed), as a vanished agent does; its old-lifetime cursor would never be passed.
            winner = next(
                (
                    r.data["token"]
                    for r in receipts
                    if r.state == "pending" and self._not_the_receipts(self.host(str(r.data["host"])), r) is not None
                ),
                None,
            )
        if winner is None:
            for receipt in receipts:
                if receipt.state != "pending":
                    await self._collect_one(inp, str(receipt.data["token"]))  # raises what collect would
            winner = await self._first_settled(
                [
                    (
                        str(r.data["token"]),
                        self.host(str(r.data["host"])),
                        str(r.data["pane_id"]),
                        int(r.data["after_seq"]),
                    )
                    for r in receipts
                ],
                inp.timeout,
            )
        (result,) = await self.collect(
            CollectInput(inp.controller_id, inp.credential, (str(winner),), inp.timeout, inp.lines)
        )
        pending = [self._receipt_view(self._receipt(t)) for t in inp.tokens if t != winner]
        return AskManyResult([result], pending)

    async def ask(
        self, relay: RelayInput, timeout: float = TIMEOUT_DEFAULT, lines: int = CAPTURE_LINES_DEFAULT
    ) -> CollectResult:
        """Relay, then collect the one receipt."""
        receipt = self.relay(relay)
        collected = await self.collect(
            CollectInput(relay.controller_id, relay.credential, (receipt.token,), timeout, lines)
        )
        return collected[0]

    def relay_many(self, inp: AskManyInput) -> list[ReceiptView]:
        """Admit every request of a batch at once, then deliver each.

        Invariant: admission is all or nothing: every target (one active lease of this controller, no
        unresolved receipt, settled, identity) is judged and every receipt reserved in **one** store
        transaction before any prompt is delivered, so a refusal leaves nothing reserved and nothing
        delivered. A delivery that then fails is reported with every receipt of the batch.
        """
        batch_id = inp.batch_id or str(uuid.uuid4())
        keys: tuple[str | None, ...] = inp.receipt_ids or tuple(None for _ in inp.requests)
        built = [
            self._relay_request(RelayInput(inp.controller_id, inp.credential, target, text, batch_id, key))
            for (target, text), key in zip(inp.requests, keys, strict=True)
        ]
        results = self.engine.fire_many(self.library.builtin("receipt"), [request for _, request in built])
        receipts: list[ReceiptView] = []
        failure: CorralError | None = None
        for (target, _), (receipt_id, _), result in zip(inp.requests, built, results, strict=True):
            try:
                receipts.append(self._delivered(target, receipt_id, result))
            except CorralError as exc:
                failure = failure or exc
                found = self.store.get(f"receipt/{receipt_id}")
                if found is not None:
                    receipts.append(self._receipt_view(found))
        if failure is not None:
            failure.details["batch_id"] = batch_id
            failure.details["batch"] = [r.to_dict() for r in receipts]
            raise failure
        return receipts

    async def ask_many(self, inp: AskManyInput) -> AskManyResult:
        """Relay to every target (admitted all at once), then collect all, or the first to settle with the
        rest left pending."""
        receipts = self.relay_many(inp)
        if inp.mode == "all":
            tokens = tuple(r.token for r in receipts)
            return AskManyResult(
                await self.collect(CollectInput(inp.controller_id, inp.credential, tokens, inp.timeout, inp.lines)), []
            )
        tokens = tuple(r.token for r in receipts)
        return await self.collect_first(
            CollectInput(inp.controller_id, inp.credential, tokens, inp.timeout, inp.lines, "first")
        )

    def abandon(self, inp: AbandonInput) -> ReceiptView:
        """Abandon a reserved or pending receipt on a fresh observation that its agent is settled."""
        receipt = self._receipt(inp.token)
        host = self.host(receipt.data["host"])
        result = self._fire_on(
            "receipt",
            receipt.id,
            "abandon",
            inp.credential,
            {"message": inp.message},
            {"agent": self._observe(host, receipt.data.get("pane_id"))},
        )
        return self._receipt_view(result.instance)

    def receipts(self, inp: ReceiptsInput) -> list[ReceiptView]:
        found = self.store.find("receipt", inp.states or None)
        views = [
            self._receipt_view(r)
            for r in found
            if inp.controller_id is None or r.data.get("controller_id") == inp.controller_id
        ]
        return sorted(views, key=lambda v: str(v.data.get("reserved_at")))

    # --- waits and observations -----------------------------------------------------------------

    async def _first_settled(self, entries: list[tuple[str, AgentHost, str, int]], timeout: float) -> str:
        """The key of the first entry whose agent settles after its cursor; the other waits are cancelled."""
        import anyio

        winner: list[str] = []

        async def watch(key: str, host: AgentHost, pane_id: str, after: int, group: anyio.abc.TaskGroup) -> None:
            try:
                await host.wait(pane_id, after, timeout)
            except AgentGoneError:
                pass  # a vanished agent ends the wait too: collect will say identity_changed
            except WaitTimeoutError:
                return
            if not winner:
                winner.append(key)
                group.cancel_scope.cancel()

        with anyio.move_on_after(timeout):
            async with anyio.create_task_group() as group:
                for key, host, pane_id, after in entries:
                    group.start_soon(watch, key, host, pane_id, after, group)
        if not winner:
            raise WaitTimeoutError(
                f"none of {len(entries)} agents settled within {timeout:g} s", targets=[e[0] for e in entries]
            )
        return winner[0]

    async def wait_any(self, inp: WaitAnyInput) -> WaitAnyResult:
        """The first target to settle after its cursor; or, at once, every target given without a
        cursor that is already settled (unless ``inp.fresh``). Each winner comes with its output."""
        self._check_fence(inp.credential)
        entries = []
        ready: list[tuple[str, AgentHost, str]] = []
        for name, after in inp.targets:
            lease = self._lease_by_name(inp.controller_id, name)
            host = self.host(lease.data["host"])
            pane_id = str(lease.data["pane_id"])
            if after is None:
                try:
                    now = host.get(pane_id)
                except AgentGoneError:
                    raise AgentGoneError(f"the agent {name!r} is gone", pane_id=pane_id, target=name) from None
                if now.settled and not inp.fresh:
                    ready.append((name, host, pane_id))
                cursor = now.seq
            else:
                cursor = after
            entries.append((name, host, pane_id, cursor))
        if ready:
            return WaitAnyResult([self._winner(name, host, pane_id, inp.lines) for name, host, pane_id in ready])
        winner = await self._first_settled(entries, inp.timeout)
        _, host, pane_id, _ = next(e for e in entries if e[0] == winner)
        return WaitAnyResult([self._winner(winner, host, pane_id, inp.lines)])

    @staticmethod
    def _winner(name: str, host: AgentHost, pane_id: str, lines: int) -> Winner:
        """A winner's observation and output: the observation is taken after the read, so the output
        is at most as new as the cursor reported (a later change shows as a higher seq, never hidden)."""
        try:
            output = host.read(pane_id, lines)
            observation = host.get(pane_id)
        except AgentGoneError:
            raise AgentGoneError(f"the agent {name!r} is gone", pane_id=pane_id, target=name) from None
        return Winner(name, observation, output)

    # --- read-only inventory: any agent on a host, leased or not ------------------------------------

    def agent_get(self, inp: AgentInput) -> Observation:
        """Observe one agent now. Raises :class:`AgentGoneError` (``agent_gone``, exit 3)."""
        return self.host(inp.host).get(inp.pane_id)

    def agent_read(self, inp: AgentInput) -> tuple[str, Observation]:
        """The agent's visible output (at most ``inp.lines`` lines) and an observation taken after
        the read: the output is never newer than the cursor reported with it."""
        host = self.host(inp.host)
        output = host.read(inp.pane_id, inp.lines)
        return output, host.get(inp.pane_id)

    async def agent_wait(self, inp: AgentWaitInput) -> Observation:
        """Wait until the agent is in one of ``inp.until`` at a cursor strictly after ``inp.after_seq``.

        Settled statuses only: through the host's own wait (event-driven where the host is); with
        ``working`` among them, by observing every 50 ms (hosts have no wait for work to start).

        Raises:
            AgentGoneError: the pane is gone (``agent_gone``, exit 3).
            WaitTimeoutError: ``wait_timeout`` (exit 5), ``details.observation`` the last one seen.
        """
        import anyio

        from runner.agents.abc import SETTLED

        host = self.host(inp.host)
        last = host.get(inp.pane_id)
        after = last.seq if inp.after_seq is None else inp.after_seq
        wanted = frozenset(inp.until)
        deadline = anyio.current_time() + inp.timeout
        while not (last.seq > after and last.status in wanted):
            remaining = deadline - anyio.current_time()
            if remaining <= 0:
                raise WaitTimeoutError(
                    f"agent {inp.pane_id!r} was not {' or '.join(inp.until)} past seq {after} within "
                    f"{inp.timeout:g} s (last: {last.status} at seq {last.seq})",
                    pane_id=inp.pane_id,
                    after_seq=after,
                    until=list(inp.until),
                    observation=last.to_dict(),
                )
            if wanted <= SETTLED:
                try:
                    last = await host.wait(inp.pane_id, max(after, last.seq), remaining)
                except WaitTimeoutError:
                    last = host.get(inp.pane_id)  # the deadline passed: judge (or report) the latest
            else:
                await anyio.sleep(min(0.05, remaining))
                last = host.get(inp.pane_id)
        return last

    def agents(self, host_name: str = "process") -> list[dict[str, Any]]:
        """Live observations of the host's agents, with the lease holding each (if any)."""
        host = self.host(host_name)
        holders = {
            (lease.data.get("host"), lease.data.get("pane_id")): lease
            for machine in PANE_LEASE_MACHINES
            for lease in self.store.find(machine, LIVE_LEASE_STATES)
        }
        out = []
        for observation in host.list():
            lease = holders.get((host_name, observation.pane_id))
            out.append(
                {
                    **observation.to_dict(),
                    "host": host_name,
                    "lease": lease.id if lease else None,
                    "controller_id": lease.data.get("controller_id") if lease else None,
                    "lease_state": lease.state if lease else None,
                }
            )
        return out

    def status(self) -> dict[str, Any]:
        """Version, store, agent hosts, counts by machine and state, what needs reconcile, and every
        lock and lease judged ``absent``/``active``/``stale``/``indeterminate`` (:meth:`locks`)."""
        from runner._version import __version__

        counts: dict[str, dict[str, int]] = {}
        needs: list[dict[str, Any]] = []
        rebuilt = self.library.cache_rebuilds()  # damaged or tampered entries found and rebuilt
        for path in self.library.builtin_paths():
            spec = self.library.builtin(path.stem)
            attention = _needs_attention(spec)
            for instance in self.store.find(spec.name):
                by_state = counts.setdefault(spec.name, {})
                by_state[instance.state] = by_state.get(instance.state, 0) + 1
                if instance.state in attention:
                    needs.append(
                        {
                            "id": instance.id,
                            "machine": spec.name,
                            "state": instance.state,
                            "name": instance.data.get("name"),
                            "token": instance.data.get("token"),
                            "kind": "unsettled",
                            "next": _next_for(spec.name, instance),
                        }
                    )
        needs.extend(self._attention())
        hosts = self._describe_hosts()
        return {
            "version": __version__,
            "store": self.store.info(),
            "agent_host": hosts[0] if hosts else None,
            "agent_hosts": hosts,
            "counts": counts,
            "needs_attention": needs,
            "locks": self.locks(),
            "cache": {"rebuilt": sum(rebuilt.values()), "by_cache": rebuilt},
        }

    def _attention(self) -> list[dict[str, Any]]:
        """What else waits on a person, each with the command to run next: an expired controller that
        still holds live leases or receipts, a plan whose runner died or that is paused, a blocked agent."""
        from runner import lockstatus

        items: list[dict[str, Any]] = []
        now = self.store.now()
        held: dict[str, int] = {}
        for machine in (*LEASE_MACHINES, "adopted"):
            for lease in self.store.find(machine, LIVE_LEASE_STATES):
                key = str(lease.data.get("controller_id"))
                held[key] = held.get(key, 0) + 1
        for receipt in self.store.find("receipt", OPEN_RECEIPT_STATES):
            key = str(receipt.data.get("controller_id"))
            held[key] = held.get(key, 0) + 1
        for lease in self.store.find("controller", ["active"]):
            controller_id = str(lease.data.get("controller_id") or lease.id.partition("/")[2])
            if fence.is_expired(lease, now) and held.get(controller_id):
                items.append(
                    {
                        "kind": "controller_expired",
                        "id": lease.id,
                        "controller": controller_id,
                        "holds": held[controller_id],
                        "expired_at": lease.data.get("expires_at"),
                        "next": f"corral controller resume --controller {controller_id} (its holder), or "
                        f"corral controller takeover --controller {controller_id} --expect-lease <the id "
                        "`corral controller list` shows>",
                    }
                )
        for plan in self.store.find("plan", ["running", "paused"]):
            plan_id = str(plan.data.get("plan_id"))
            if plan.state == "paused":
                waiting = plan.data.get("waiting_on") or {}
                follow = (
                    f"corral plans decide {plan_id} --step {waiting.get('step')} --approve|--reject --reason TEXT"
                    if waiting.get("kind") == "agent_blocked"
                    else f"corral plans resume {plan_id}"
                )
                items.append(
                    {
                        "kind": "plan_paused",
                        "id": plan.id,
                        "plan": plan_id,
                        "why": plan.data.get("paused_reason"),
                        "waiting_on": waiting or None,
                        "next": follow,
                    }
                )
            elif lockstatus.status(plan.data.get("runner")) == "stale":
                items.append(
                    {
                        "kind": "plan_runner_gone",
                        "id": plan.id,
                        "plan": plan_id,
                        "next": f"corral plans resume {plan_id}",
                    }
                )
        for machine in LEASE_MACHINES:
            for lease in self.store.find(machine, ["active"]):
                host_name = str(lease.data.get("host"))
                try:
                    observed = self._observe(self.host(host_name), lease.data.get("pane_id"))
                except AgentError:
                    continue
                if observed.get("status") == "blocked" and same_identity(observed, lease.data):
                    name = lease.data.get("name")
                    verb = "reviewer close" if machine == "reviewer" else "writer release"
                    items.append(
                        {
                            "kind": "agent_blocked",
                            "id": lease.id,
                            "name": name,
                            "seq": observed.get("seq"),
                            "next": f"answer it in its pane yourself, or corral {verb} {name} --controller "
                            f"{lease.data.get('controller_id')} --expect-seq {observed.get('seq')} --blocked "
                            "--reason TEXT (abandon its open receipt first)",
                        }
                    )
        return items

    def _describe_hosts(self) -> list[dict[str, Any]]:
        """The process host, and every other host a lease not yet ended records: each as it describes itself (Herdr:
        version, socket, ``terminal_id``); a host that cannot be reached says so with its error code."""
        if self._hosts is None:
            return []
        recorded = set()
        for machine in (*LEASE_MACHINES, "pane"):
            spec = self.library.builtin(machine)
            for lease in self.store.find(machine):
                if not spec.states[lease.state].terminal and lease.data.get("host") in HOSTS:
                    recorded.add(str(lease.data["host"]))
        names = ["process", *sorted(recorded - {"process"})]
        described = []
        for name in names:
            try:
                described.append(self.host(name).describe())
            except AgentError as exc:
                # The host itself cannot answer (Herdr's server down): say so. Corrupt configuration
                # (agents_config_invalid) is not the host's state: it is refused, as everywhere.
                described.append({"name": name, "error": {"code": exc.code, "message": exc.message}})
        return described

    def locks(self) -> dict[str, Any]:
        """Every lock and lease, each judged one of :data:`LOCK_STATES`, without pids, lease ids or
        credentials: controller leases by expiry (the store's clock), reviewer and writer leases by
        their state (a start in flight by its recorded starter), plan runner locks by
        :func:`runner.lockstatus.status`. A runner on another host, or whose liveness cannot be read,
        is ``indeterminate``: never judged by how old it is. Ended leases are counted, not listed."""
        from runner import lockstatus

        now = self.store.now()
        controllers = []
        for lease in self.store.find("controller"):
            if lease.state != "active":
                state, why = "absent", f"{lease.state}: nobody holds it"
            elif fence.is_expired(lease, now):
                state, why = "stale", "expired: another coordinator may take it over"
            else:
                state, why = "active", "held until it expires"
            controllers.append(
                {
                    "id": lease.id,
                    "controller_id": lease.data.get("controller_id"),
                    "lock": state,
                    "why": why,
                    "generation": lease.data.get("generation"),
                    "holder": lease.data.get("holder"),
                    "expires_at": lease.data.get("expires_at"),
                }
            )
        leases: list[dict[str, Any]] = []
        ended: dict[str, int] = {}
        for machine in (*LEASE_MACHINES, "pane"):
            spec = self.library.builtin(machine)
            for lease in self.store.find(machine):
                state, why = _lease_lock(spec, lease, lockstatus.status)
                if state == "absent":
                    ended[machine] = ended.get(machine, 0) + 1
                    continue
                leases.append(
                    {
                        "id": lease.id,
                        "machine": machine,
                        "name": lease.data.get("name"),
                        "controller_id": lease.data.get("controller_id"),
                        "host": lease.data.get("host"),
                        "pane_id": lease.data.get("pane_id"),
                        "state": lease.state,
                        "lock": state,
                        "why": why,
                    }
                )
        runners = []
        for plan in self.store.find("plan"):
            holder = plan.data.get("runner") if plan.state == "running" else None
            if holder is None:
                continue
            judged = lockstatus.status(holder)
            runners.append(
                {
                    "id": plan.id,
                    "state": plan.state,
                    "lock": judged,
                    "why": RUNNER_WHY[judged],
                    "same_host": holder.get("host") == _hostname(),
                }
            )
        return {"controllers": controllers, "leases": leases, "plan_runners": runners, "ended": ended}
