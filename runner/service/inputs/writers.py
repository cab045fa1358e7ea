"""The writer lanes' inputs: start, release, verify, scopes check."""

from __future__ import annotations

from runner.errors import InputError
from runner.service.checks import (
    CAPTURE_LINES_DEFAULT,
    PROTECTED_MAX,
    check_absolute,
    check_agent,
    check_blocked_reason,
    check_branch,
    check_budget,
    check_controller_id,
    check_cursor,
    check_instance_id,
    check_key,
    check_lines,
    check_name,
    check_object_id,
    check_ref,
    check_sha256,
    scope_list,
)
from runner.service.inputs.base import FencedInput
from runner.service.inputs.fields import described, input_class


@input_class
class WriterStartInput(FencedInput):
    """Put an agent into a linked worktree, owning ``owned_scopes`` (and locking ``locked_scopes``)."""

    name: str = described("name", "The lane's name: [a-z][a-z0-9_-]{0,31}.")
    kind: str = described("kind", "The agent kind.")
    worktree: str = described("worktree", "The linked worktree (an absolute path).")
    branch: str = described("branch", "The branch the worktree is on.")
    base_commit: str = described("base_commit", "The commit the lane starts from.", lower=True)
    expected_head: str = described("expect_head", "The HEAD you saw (corral_preflight's head).", lower=True)
    expected_status_sha256: str = described(
        "expect_status", "The status digest you saw (corral_preflight's status_sha256).", lower=True
    )
    owned_scopes: tuple[str, ...] = described("own", "The path scopes the lane owns (at least one).")
    purpose: str = described("purpose", "What the lane is for.")
    ticket_ref: str = described("ticket", "The ticket it works on.")
    authority_ref: str = described("authority_ref", "What authorises this lane.")
    authority_sha256: str = described("authority_sha256", "Its SHA-256 (64 hex digits).", lower=True)
    locked_scopes: tuple[str, ...] = described("lock", "Path scopes it locks (others may not own them).", default=())
    protected_branches: tuple[str, ...] = described(
        "protect", "Protected branches added to the repository's default set.", default=()
    )
    """Added to the repository's default protected set (``protected_default``), or the whole set when
    ``protect_defaults`` is false."""
    host: str = described("host", "The agent host: process (corral's own) or herdr.", default="process")
    model: str | None = described("model", "The model the agent kind runs (if the kind takes one).", default=None)
    effort: str | None = described("effort", "The reasoning effort (if the kind takes one).", default=None)
    lease_id: str | None = None
    """An idempotency key: the lane instance is ``writer/<lease_id>``."""
    protect_defaults: bool = True
    """False: ``protected_branches`` replaces the default set instead of adding to it."""
    budget_usd: float | None = described(
        "budget_usd",
        "Refuse the next prompt (budget_exhausted) once the lease's runs cost this many dollars.",
        default=None,
    )
    """Stop prompting once the lease's runs cost this much (the CLI also stops a run at it, where it can)."""
    budget_tokens: int | None = described(
        "budget_tokens", "Refuse the next prompt once the lease's runs spent this many tokens.", default=None
    )
    """Stop prompting once the lease's runs spent this many tokens (input, output and cache)."""
    max_turns: int | None = described(
        "max_turns", "At most this many model turns per run (and in all, for the lease).", default=None
    )
    """At most this many model turns per run (passed to CLIs that enforce it; corral also stops prompting
    once the lease's runs used this many turns in all)."""

    unconfined: bool = described(
        "unconfined",
        "Run the agent without the process host's Bubblewrap confinement (give reason; recorded, shown by status).",
        default=False,
        shown_default=False,
    )
    """The operator's explicit choice to run this lane's agent unconfined (where Bubblewrap cannot start,
    the only way to start it: otherwise ``sandbox_unavailable``); needs ``unconfined_reason``."""
    unconfined_reason: str | None = described(
        "reason", "Why the agent runs unconfined (with unconfined; 1-1000 characters, recorded).", default=None
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        check_name("name", self.name)
        if self.unconfined != (self.unconfined_reason is not None):
            raise InputError("reason", "give unconfined and its reason together (--unconfined --reason R), or neither")
        if self.unconfined_reason is not None:
            check_blocked_reason(self.unconfined_reason)
        if not self.protect_defaults and not self.protected_branches:
            raise InputError("protected_branches", "name the protected branches that replace the default set")
        check_agent(self.kind, self.host, self.model, self.effort)
        check_budget(self.budget_usd, self.budget_tokens, self.max_turns)
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


@input_class
class WriterReleaseInput(FencedInput):
    """Release lane ``name``: the agent settled at the cursor, git at the expected HEAD and status."""

    name: str = described("name", "The lane's name.")
    expected_state_change_seq: int = described(
        "expect_seq", "The cursor you saw the agent settle at (the last collect, corral_agents)."
    )
    expected_head: str = described("expect_head", "The HEAD you saw (corral_preflight's head).", lower=True)
    expected_status_sha256: str = described(
        "expect_status", "The status digest you saw (corral_preflight's status_sha256).", lower=True
    )
    checkpoint_ref: str = described(
        "checkpoint_ref",
        "Where the handoff checkpoint is, or memory:<id> (corral_memory_checkpoint's ref: a checkpoint of a project"
        " whose repository is the lane's).",
    )
    checkpoint_sha256: str | None = described(
        "checkpoint_sha256",
        "SHA-256 of the checkpoint (64 hex digits); with a memory:<id> ref optional (filled from its content,"
        " or checked against it).",
        required=False,
        lower=True,
    )
    """The checkpoint's SHA-256; None only with a ``memory:<id>`` ref, whose digest the service fills."""
    lines: int = described(
        "lines", "How many lines of the agent's visible output to capture.", default=CAPTURE_LINES_DEFAULT
    )
    blocked_reason: str | None = None
    """An operator's decision to release a lane whose agent is *blocked*, and why (recorded)."""
    lease_id: str | None = None
    """The lane instance id (``writer/…``) meant: the lane named ``name`` must be it (``lease_mismatch``)."""
    expected_content_sha256: str | None = described(
        "expect_content", "The content digest you reviewed (optional).", default=None, lower=True
    )
    """The worktree's content digest (``corral preflight``'s ``content_sha256``) you reviewed; optional."""
    accept_violation: bool = described(
        "accept_violation",
        "Release although the scope audit found changes outside the owned scopes or inside locked ones"
        " (scope_violation), with reason (recorded).",
        default=False,
        shown_default=False,
    )
    """An operator's decision to release over a ``scope_violation``; needs ``violation_reason``."""
    violation_reason: str | None = None
    """Why the violations are accepted (1-1000 characters; the surfaces' ``reason``), recorded with the
    paths accepted, the actor and the time."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_name("name", self.name)
        if not isinstance(self.accept_violation, bool):
            raise InputError("accept_violation", f"{self.accept_violation!r} is not true or false")
        if self.accept_violation and not (isinstance(self.violation_reason, str) and self.violation_reason.strip()):
            raise InputError("reason", "accept_violation needs a reason (1-1000 characters): the decision is recorded")
        if self.violation_reason is not None:
            if not self.accept_violation:
                raise InputError("reason", "a violation reason goes with accept_violation")
            check_blocked_reason(self.violation_reason)
        check_cursor("expected_state_change_seq", self.expected_state_change_seq)
        check_object_id("expected_head", self.expected_head)
        check_sha256("expected_status_sha256", self.expected_status_sha256)
        if self.expected_content_sha256 is not None:
            check_sha256("expected_content_sha256", self.expected_content_sha256)
        check_ref("checkpoint_ref", self.checkpoint_ref)
        if self.checkpoint_sha256 is not None or not self.checkpoint_ref.startswith("memory:"):
            check_sha256("checkpoint_sha256", self.checkpoint_sha256)  # type: ignore[arg-type]  # reason: None is refused here
        check_lines(self.lines)
        check_blocked_reason(self.blocked_reason)
        check_instance_id("lease_id", self.lease_id)


@input_class
class WriterAuditInput:
    """Audit live lane ``name``: what its worktree changed since its base, judged against its scopes."""

    controller_id: str = described("controller", "The controller that holds the lane.")
    name: str = described("name", "The lane's name.")
    limit: int | None = described(
        "limit", "At most this many changes, violations and ignored paths listed (counts are whole).", default=1000
    )

    def __post_init__(self) -> None:
        check_controller_id(self.controller_id)
        check_name("name", self.name)
        if self.limit is not None and (
            isinstance(self.limit, bool) or not isinstance(self.limit, int) or self.limit < 1
        ):
            raise InputError("limit", f"{self.limit!r} is not a positive number")


@input_class
class WriterVerifyInput(FencedInput):
    """Run the repository's validations on a snapshot of lane ``name``'s worktree, in the sandbox."""

    name: str = described("name", "The lane's name.")
    tails: bool = described("tails", "Include the ends of each validation's output.", default=False, shown_default=True)
    expected_state_change_seq: int | None = described(
        "expect_seq", "The cursor you saw the writer settle at (default: any settled).", default=None
    )
    """The cursor the caller saw the writer settle at; verify refuses if it moved (default: any settled)."""
    lease_id: str | None = None
    """The lane instance id (``writer/…``) meant: the lane named ``name`` must be it (``lease_mismatch``)."""
    expected_content_sha256: str | None = described(
        "expect_content",
        "Run only on exactly this content (corral_preflight's content_sha256).",
        default=None,
        lower=True,
    )
    """Run only on exactly this worktree content (``corral preflight``'s ``content_sha256``); optional."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_name("name", self.name)
        if self.expected_state_change_seq is not None:
            check_cursor("expected_state_change_seq", self.expected_state_change_seq)
        check_instance_id("lease_id", self.lease_id)
        if self.expected_content_sha256 is not None:
            check_sha256("expected_content_sha256", self.expected_content_sha256)


@input_class
class ScopesCheckInput:
    """Normalize scopes and report conflicts with live lanes (of the worktree's repository, if given)."""

    owned_scopes: tuple[str, ...] = described("own", "The scopes you would own.")
    locked_scopes: tuple[str, ...] = described("lock", "The scopes you would lock.", default=())
    worktree: str | None = described(
        "worktree", "The worktree (absolute): only its repository's lanes count.", default=None, absolute=True
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "owned_scopes", scope_list("owned_scopes", self.owned_scopes, 1))
        object.__setattr__(self, "locked_scopes", scope_list("locked_scopes", self.locked_scopes, 0))
        check_absolute("worktree", self.worktree)
