"""One typed, frozen ``*Input`` per operation, validated on construction.

Surfaces (the CLI, plans, later MCP and HTTP) build these and hand them to the service; an input that
fails validation raises :class:`~runner.errors.InputError` naming the field, before anything is read
or written. Operations that act for a controller take a :class:`FencedInput`: the controller id and
its credential, checked to belong together. Fields keep their order: callers build inputs
positionally as well as by keyword.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from runner import fence
from runner.errors import InputError
from runner.fence import Credential
from runner.service.checks import (
    BATCH_MAX,
    CAPTURE_LINES_DEFAULT,
    PROTECTED_MAX,
    RECEIPT_STATES,
    TIMEOUT_DEFAULT,
    TTL_DEFAULT,
    UUID,
    WAIT_LINES_DEFAULT,
    WAIT_TARGETS_MAX,
    WAITABLE,
    check_absolute,
    check_agent,
    check_blocked_reason,
    check_branch,
    check_controller_id,
    check_credential,
    check_cursor,
    check_expected_agent,
    check_holder,
    check_host,
    check_instance_id,
    check_key,
    check_lease_ids,
    check_lines,
    check_message,
    check_mode,
    check_name,
    check_object_id,
    check_pane,
    check_ref,
    check_sha256,
    check_text,
    check_timeout,
    check_token,
    check_ttl,
    scope_list,
)

# --- shared bases ------------------------------------------------------------------------------------

LIMIT_MAX = 10_000
"""The largest page a listing input accepts (``limit``)."""


def check_page(after: str | None, limit: int | None) -> None:
    """A listing's paging: ``limit`` an integer 1..LIMIT_MAX, ``after`` a non-empty key of at most 300 characters."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= LIMIT_MAX):
        raise InputError("limit", f"{limit!r} is not a page size from 1 to {LIMIT_MAX}")
    if after is not None and (not isinstance(after, str) or not after or len(after) > 300 or not after.isprintable()):
        raise InputError("after", f"{after!r} is not a cursor (the next_after of the previous page)")


@dataclass(frozen=True)
class FencedInput:
    """An operation done for a controller: its id and the credential of its lease (checked to match)."""

    controller_id: str
    credential: Credential

    def __post_init__(self) -> None:
        check_controller_id(self.controller_id)
        check_credential(self.credential, self.controller_id)


@dataclass(frozen=True)
class ObservedPaneInput(FencedInput):
    """A fenced act on a pane named by id, bound to the agent the caller saw there: name, kind, cwd and
    cursor (an adoption; an operator's close of a pane no lease holds)."""

    PANE_FIELD: ClassVar[str] = "pane"
    PANE_WHAT: ClassVar[str] = "a pane id"

    pane_id: str
    expected_name: str
    expected_kind: str
    expected_cwd: str
    expected_state_change_seq: int
    host: str = "process"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_pane(self.PANE_FIELD, self.pane_id, self.PANE_WHAT)
        check_expected_agent(
            self.expected_name, self.expected_kind, self.expected_cwd, self.expected_state_change_seq, self.host
        )


# --- controller lease ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class AcquireInput:
    """Take the lease of a controller id that nobody holds."""

    controller_id: str
    authority_ref: str
    authority_sha256: str
    ttl_seconds: int = TTL_DEFAULT
    holder: str | None = None
    proposal: fence.Proposal | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        check_controller_id(self.controller_id)
        check_ref("authority_ref", self.authority_ref)
        check_sha256("authority_sha256", self.authority_sha256)
        check_ttl(self.ttl_seconds, required=True)
        check_holder(self.holder)


@dataclass(frozen=True)
class RenewInput(FencedInput):
    """Extend the lease the credential holds; ``ttl_seconds`` defaults to the lease's own."""

    ttl_seconds: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        check_ttl(self.ttl_seconds)


@dataclass(frozen=True)
class ResumeInput(FencedInput):
    """Continue one's own lease (even expired) with a new token and the next generation."""

    ttl_seconds: int | None = None
    holder: str | None = None
    proposal: fence.Proposal | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_ttl(self.ttl_seconds)
        check_holder(self.holder)


@dataclass(frozen=True)
class TakeoverInput:
    """Claim another holder's expired lease, naming the lease id seen expire."""

    controller_id: str
    expected_lease_id: str
    ttl_seconds: int = TTL_DEFAULT
    holder: str | None = None
    authority_ref: str | None = None
    authority_sha256: str | None = None
    proposal: fence.Proposal | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        check_controller_id(self.controller_id)
        if not isinstance(self.expected_lease_id, str) or not UUID.match(self.expected_lease_id):
            raise InputError("expected_lease_id", f"{self.expected_lease_id!r} is not a lease id (a UUID)")
        check_ttl(self.ttl_seconds, required=True)
        check_holder(self.holder)
        if (self.authority_ref is None) != (self.authority_sha256 is None):
            raise InputError(
                "authority_sha256" if self.authority_ref else "authority_ref",
                "authority_ref and authority_sha256 go together",
            )
        if self.authority_ref is not None and self.authority_sha256 is not None:
            check_ref("authority_ref", self.authority_ref)
            check_sha256("authority_sha256", self.authority_sha256)


@dataclass(frozen=True)
class ReleaseInput(FencedInput):
    """Give the lease up, recording where the work stands."""

    checkpoint_ref: str
    checkpoint_sha256: str

    def __post_init__(self) -> None:
        super().__post_init__()
        check_ref("checkpoint_ref", self.checkpoint_ref)
        check_sha256("checkpoint_sha256", self.checkpoint_sha256)


@dataclass(frozen=True)
class ListLeasesInput:
    """Controller leases (or one), with expiry judged now; never a secret.

    Held (``active``) ones only unless ``include_ended`` (which adds released ones); one
    ``controller_id`` is shown in any state. ``after`` (a controller id: the previous page's
    ``next_after``) and ``limit`` page through them in controller id order.
    """

    controller_id: str | None = None
    include_ended: bool = False
    after: str | None = None
    limit: int | None = None

    def __post_init__(self) -> None:
        if self.controller_id is not None:
            check_controller_id(self.controller_id)
        check_page(self.after, self.limit)


# --- reviewers ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReviewerStartInput(FencedInput):
    """Start an agent of ``kind`` named ``name`` in ``cwd`` (absolute), leased to the controller."""

    name: str
    kind: str
    cwd: str
    host: str = "process"
    model: str | None = None
    effort: str | None = None
    lease_id: str | None = None
    """An idempotency key: the lease instance is ``reviewer/<lease_id>`` (plans derive it from the step)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_name("name", self.name)
        check_key("lease_id", self.lease_id)
        check_agent(self.kind, self.host, self.model, self.effort)
        if not isinstance(self.cwd, str) or not self.cwd:
            raise InputError("cwd", "the working directory is required")


@dataclass(frozen=True)
class ReviewerCloseInput(FencedInput):
    """Close the reviewer ``name`` if it sits settled at ``expected_state_change_seq``."""

    name: str
    expected_state_change_seq: int
    lines: int = CAPTURE_LINES_DEFAULT
    blocked_reason: str | None = None
    """An operator's decision to close a *blocked* agent anyway, and why (recorded with the lease)."""
    lease_id: str | None = None
    """The lease instance id (``reviewer/…``) the caller means; the lease named ``name`` must be that
    one (``lease_mismatch`` otherwise). Plans always give it: they act only on leases they created."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_name("name", self.name)
        check_cursor("expected_state_change_seq", self.expected_state_change_seq)
        check_lines(self.lines)
        check_blocked_reason(self.blocked_reason)
        check_instance_id("lease_id", self.lease_id)


@dataclass(frozen=True)
class LeaseListInput:
    """Leases of one machine (of one controller, if given); ``include_ended`` adds the ended ones.

    ``after`` (a lease instance id: the previous page's ``next_after``) and ``limit`` page through
    them in instance id order.
    """

    controller_id: str | None = None
    include_ended: bool = False
    after: str | None = None
    limit: int | None = None

    def __post_init__(self) -> None:
        if self.controller_id is not None:
            check_controller_id(self.controller_id)
        check_page(self.after, self.limit)


@dataclass(frozen=True)
class ReviewerListInput(LeaseListInput):
    """Reviewer leases (of one controller, if given); ``include_ended`` adds closed and failed ones."""


# --- inventory: reconcile, cleanup, panes no lease holds ---------------------------------------------


@dataclass(frozen=True)
class ControllerInput(FencedInput):
    """An operation over everything a controller holds (cleanup, reconcile).

    ``apply`` False (the default) is a dry run: report what would be done, do nothing. ``leases``
    (instance ids, as the report names them) limits it to those leases; empty: all of them.
    """

    apply: bool = False
    leases: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        super().__post_init__()
        check_lease_ids(self.leases)


@dataclass(frozen=True)
class PaneCloseInput(ObservedPaneInput):
    """Close a pane corral started that no live lease holds, bound to the agent and cursor seen there."""

    reason: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        check_message("reason", self.reason)


# --- receipts -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RelayInput(FencedInput):
    """Hand ``text`` to the leased agent ``target`` with a receipt."""

    target: str
    text: str = field(repr=False)
    batch_id: str | None = None
    receipt_id: str | None = None
    """An idempotency key: the receipt is ``receipt/<receipt_id>`` (plans derive it from the step)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_name("target", self.target)
        check_text(self.text)
        check_key("receipt_id", self.receipt_id)


@dataclass(frozen=True)
class CollectInput(FencedInput):
    """Collect the results of receipts, waiting up to ``timeout`` seconds for each."""

    tokens: tuple[str, ...]
    timeout: float = TIMEOUT_DEFAULT
    lines: int = CAPTURE_LINES_DEFAULT
    mode: str = "all"
    """``all``: every result; ``first``: the first receipt to settle, the others left pending."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 1 <= len(self.tokens) <= BATCH_MAX:
            raise InputError("receipt", f"give 1-{BATCH_MAX} receipt tokens, not {len(self.tokens)}")
        check_mode(self.mode)
        for token in self.tokens:
            check_token(token)
        if len(set(self.tokens)) != len(self.tokens):
            raise InputError("receipt", "a receipt token is given twice")
        check_timeout(self.timeout)
        check_lines(self.lines)


@dataclass(frozen=True)
class AskManyInput(FencedInput):
    """Relay to 1-8 distinct targets, then collect all, or the first to settle (mode ``first``)."""

    requests: tuple[tuple[str, str], ...] = field(repr=False)
    mode: str = "all"
    timeout: float = TIMEOUT_DEFAULT
    lines: int = CAPTURE_LINES_DEFAULT
    batch_id: str | None = None
    """An idempotency key for the batch (plans derive it from the step); a fresh UUID otherwise."""
    receipt_ids: tuple[str, ...] | None = None
    """Idempotency keys for the receipts, one per request (``receipt/<id>``)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_key("batch_id", self.batch_id)
        if self.receipt_ids is not None:
            if len(self.receipt_ids) != len(self.requests):
                raise InputError("receipt_ids", "give one receipt id per request")
            for key in self.receipt_ids:
                check_key("receipt_ids", key)
        if not 1 <= len(self.requests) <= BATCH_MAX:
            raise InputError("request", f"give 1-{BATCH_MAX} requests, not {len(self.requests)}")
        targets = [target for target, _ in self.requests]
        if len(set(targets)) != len(targets):
            raise InputError("request", "each target may appear once in a batch")
        for target, text in self.requests:
            check_name("request", target)
            check_text(text, "request")
        check_mode(self.mode)
        check_timeout(self.timeout)
        check_lines(self.lines)


@dataclass(frozen=True)
class AbandonInput(FencedInput):
    """Release a reserved or pending receipt's target on fresh evidence that the agent is settled."""

    token: str
    message: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        check_token(self.token)
        check_message("message", self.message)


@dataclass(frozen=True)
class ReceiptsInput:
    """Receipts (of one controller, in some states), newest last.

    Without ``states``, open ones (reserved, pending) only unless ``include_ended``. ``after`` (a
    receipt id: the previous page's ``next_after``) and ``limit`` page through them in receipt id
    order; each page is sorted oldest reservation first.
    """

    controller_id: str | None = None
    states: tuple[str, ...] = ()
    include_ended: bool = False
    after: str | None = None
    limit: int | None = None

    def __post_init__(self) -> None:
        if self.controller_id is not None:
            check_controller_id(self.controller_id)
        check_page(self.after, self.limit)
        for state in self.states:
            if state not in RECEIPT_STATES:
                raise InputError("state", f"{state!r} is not a receipt state ({', '.join(RECEIPT_STATES)})")


# --- waits and observations ---------------------------------------------------------------------------


@dataclass(frozen=True)
class WaitAnyInput(FencedInput):
    """Wait for the first of 1-64 leased agents to settle.

    A target with a cursor (``T:SEQ``) waits for a settle strictly after ``SEQ``. A target without
    one is judged now: already settled, it wins at once (it is done: waiting for its *next* settle
    would wait for work nobody asked for); ``fresh`` makes it wait instead for the next settle after
    the cursor observed at the call. ``lines`` bounds each winner's output.
    """

    targets: tuple[tuple[str, int | None], ...]
    timeout: float = TIMEOUT_DEFAULT
    lines: int = WAIT_LINES_DEFAULT
    fresh: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 1 <= len(self.targets) <= WAIT_TARGETS_MAX:
            raise InputError("target", f"give 1-{WAIT_TARGETS_MAX} targets, not {len(self.targets)}")
        names = [name for name, _ in self.targets]
        if len(set(names)) != len(names):
            raise InputError("target", "each target may appear once")
        for name, after in self.targets:
            check_name("target", name)
            if after is not None:
                check_cursor("target", after)
        check_timeout(self.timeout)
        check_lines(self.lines)


@dataclass(frozen=True)
class AgentInput:
    """One agent on a host, by pane id, read-only (``corral agent get`` / ``read``): leased or not,
    no controller needed. ``lines`` bounds a read."""

    pane_id: str
    host: str = "process"
    lines: int = CAPTURE_LINES_DEFAULT

    def __post_init__(self) -> None:
        check_pane("target", self.pane_id)
        check_host(self.host)
        check_lines(self.lines)


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
            check_cursor("after_seq", self.after_seq)
        check_timeout(self.timeout)


# --- writer lanes -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WriterStartInput(FencedInput):
    """Put an agent into a linked worktree, owning ``owned_scopes`` (and locking ``locked_scopes``)."""

    name: str
    kind: str
    worktree: str
    branch: str
    base_commit: str
    expected_head: str
    expected_status_sha256: str
    owned_scopes: tuple[str, ...]
    purpose: str
    ticket_ref: str
    authority_ref: str
    authority_sha256: str
    locked_scopes: tuple[str, ...] = ()
    protected_branches: tuple[str, ...] = ()
    """Added to the repository's default protected set (``protected_default``), or the whole set when
    ``protect_defaults`` is false."""
    host: str = "process"
    model: str | None = None
    effort: str | None = None
    lease_id: str | None = None
    """An idempotency key: the lane instance is ``writer/<lease_id>``."""
    protect_defaults: bool = True
    """False: ``protected_branches`` replaces the default set instead of adding to it."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_name("name", self.name)
        if not self.protect_defaults and not self.protected_branches:
            raise InputError("protected_branches", "name the protected branches that replace the default set")
        check_agent(self.kind, self.host, self.model, self.effort)
        check_key("lease_id", self.lease_id)
        if not isinstance(self.worktree, str) or not self.worktree.startswith("/"):
            raise InputError("worktree", f"{self.worktree!r} is not an absolute path")
        check_branch("branch", self.branch)
        check_object_id("base_commit", self.base_commit)
        check_object_id("expected_head", self.expected_head)
        check_sha256("expected_status_sha256", self.expected_status_sha256)
        object.__setattr__(self, "owned_scopes", scope_list("owned_scopes", self.owned_scopes, 1))
        object.__setattr__(self, "locked_scopes", scope_list("locked_scopes", self.locked_scopes, 0))
        if len(self.protected_branches) > PROTECTED_MAX:
            raise InputError("protected_branches", f"give at most {PROTECTED_MAX} protected branches")
        for branch in self.protected_branches:
            check_branch("protected_branches", branch)
        check_ref("purpose", self.purpose)
        check_ref("ticket_ref", self.ticket_ref)
        check_ref("authority_ref", self.authority_ref)
        check_sha256("authority_sha256", self.authority_sha256)


@dataclass(frozen=True)
class WriterReleaseInput(FencedInput):
    """Release lane ``name``: the agent settled at the cursor, git at the expected HEAD and status."""

    name: str
    expected_state_change_seq: int
    expected_head: str
    expected_status_sha256: str
    checkpoint_ref: str
    checkpoint_sha256: str
    lines: int = CAPTURE_LINES_DEFAULT
    blocked_reason: str | None = None
    """An operator's decision to release a lane whose agent is *blocked*, and why (recorded)."""
    lease_id: str | None = None
    """The lane instance id (``writer/…``) meant: the lane named ``name`` must be it (``lease_mismatch``)."""
    expected_content_sha256: str | None = None
    """The worktree's content digest (``corral preflight``'s ``content_sha256``) you reviewed; optional."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_name("name", self.name)
        check_cursor("expected_state_change_seq", self.expected_state_change_seq)
        check_object_id("expected_head", self.expected_head)
        check_sha256("expected_status_sha256", self.expected_status_sha256)
        if self.expected_content_sha256 is not None:
            check_sha256("expected_content_sha256", self.expected_content_sha256)
        check_ref("checkpoint_ref", self.checkpoint_ref)
        check_sha256("checkpoint_sha256", self.checkpoint_sha256)
        check_lines(self.lines)
        check_blocked_reason(self.blocked_reason)
        check_instance_id("lease_id", self.lease_id)


@dataclass(frozen=True)
class WriterVerifyInput(FencedInput):
    """Run the repository's validations on a snapshot of lane ``name``'s worktree, in the sandbox."""

    name: str
    tails: bool = False
    expected_state_change_seq: int | None = None
    """The cursor the caller saw the writer settle at; verify refuses if it moved (default: any settled)."""
    lease_id: str | None = None
    """The lane instance id (``writer/…``) meant: the lane named ``name`` must be it (``lease_mismatch``)."""
    expected_content_sha256: str | None = None
    """Run only on exactly this worktree content (``corral preflight``'s ``content_sha256``); optional."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_name("name", self.name)
        if self.expected_state_change_seq is not None:
            check_cursor("expected_state_change_seq", self.expected_state_change_seq)
        check_instance_id("lease_id", self.lease_id)
        if self.expected_content_sha256 is not None:
            check_sha256("expected_content_sha256", self.expected_content_sha256)


@dataclass(frozen=True)
class ScopesCheckInput:
    """Normalize scopes and report conflicts with live lanes (of the worktree's repository, if given)."""

    owned_scopes: tuple[str, ...]
    locked_scopes: tuple[str, ...] = ()
    worktree: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "owned_scopes", scope_list("owned_scopes", self.owned_scopes, 1))
        object.__setattr__(self, "locked_scopes", scope_list("locked_scopes", self.locked_scopes, 0))
        check_absolute("worktree", self.worktree)


# --- adopted panes ------------------------------------------------------------------------------------

PANE_OR_NAME = "a pane id or agent name"


@dataclass(frozen=True)
class AdoptInput(ObservedPaneInput):
    """Adopt the agent in ``pane_id`` if it is exactly the one seen: name, kind, cwd, settled at the cursor."""

    PANE_FIELD: ClassVar[str] = "target"
    PANE_WHAT: ClassVar[str] = PANE_OR_NAME

    lease_id: str | None = None
    """An idempotency key: the lease instance is ``adopted/<lease_id>``."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_key("lease_id", self.lease_id)


@dataclass(frozen=True)
class AdoptedCloseInput(FencedInput):
    """Close the adopted agent ``target`` (its name or pane id) if it sits settled at the expected cursor."""

    target: str
    expected_state_change_seq: int
    lines: int = CAPTURE_LINES_DEFAULT

    def __post_init__(self) -> None:
        super().__post_init__()
        check_pane("target", self.target, PANE_OR_NAME)
        check_cursor("expect_seq", self.expected_state_change_seq)
        check_lines(self.lines)


@dataclass(frozen=True)
class AdoptedReleaseInput(FencedInput):
    """End the adoption of ``target`` (its name or pane id); the pane is left running."""

    target: str

    def __post_init__(self) -> None:
        super().__post_init__()
        check_pane("target", self.target, PANE_OR_NAME)


@dataclass(frozen=True)
class AdoptedListInput(LeaseListInput):
    """Adopted leases (of one controller, if given); ``include_ended`` adds closed and released ones."""


# --- events and definitions ---------------------------------------------------------------------------


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
