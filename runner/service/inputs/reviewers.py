"""The reviewers' inputs: start, close, list."""

from __future__ import annotations

from runner.errors import InputError
from runner.service.checks import (
    CAPTURE_LINES_DEFAULT,
    check_agent,
    check_blocked_reason,
    check_budget,
    check_cursor,
    check_instance_id,
    check_key,
    check_lines,
    check_name,
)
from runner.service.inputs.base import FencedInput
from runner.service.inputs.fields import described, input_class
from runner.service.inputs.leases import LeaseListInput


@input_class
class ReviewerStartInput(FencedInput):
    """Start an agent of ``kind`` named ``name`` in ``cwd`` (absolute), leased to the controller."""

    name: str = described("name", "The agent's name: [a-z][a-z0-9_-]{0,31}, unique among live leases.")
    kind: str = described("kind", "The agent kind (claude, codex, script, or one from agents.yaml).")
    cwd: str = described("cwd", "The agent's working directory (an absolute path).", absolute=True)
    host: str = described("host", "The agent host: process (corral's own) or herdr.", default="process")
    model: str | None = described("model", "The model the agent kind runs (if the kind takes one).", default=None)
    effort: str | None = described("effort", "The reasoning effort (if the kind takes one).", default=None)
    lease_id: str | None = None
    """An idempotency key: the lease instance is ``reviewer/<lease_id>`` (plans derive it from the step)."""
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

    def __post_init__(self) -> None:
        super().__post_init__()
        check_name("name", self.name)
        check_key("lease_id", self.lease_id)
        check_agent(self.kind, self.host, self.model, self.effort)
        check_budget(self.budget_usd, self.budget_tokens, self.max_turns)
        if not isinstance(self.cwd, str) or not self.cwd:
            raise InputError("cwd", "the working directory is required")


@input_class
class ReviewerCloseInput(FencedInput):
    """Close the reviewer ``name`` if it sits settled at ``expected_state_change_seq``."""

    name: str = described("name", "The reviewer's name.")
    expected_state_change_seq: int = described(
        "expect_seq", "The cursor you saw the agent settle at (the last collect, corral_agents)."
    )
    lines: int = described(
        "lines", "How many lines of the agent's visible output to capture.", default=CAPTURE_LINES_DEFAULT
    )
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


@input_class
class ReviewerListInput(LeaseListInput):
    """Reviewer leases (of one controller, if given); ``include_ended`` adds closed and failed ones."""
