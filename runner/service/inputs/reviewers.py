"""The reviewers' inputs: start, close, list."""

from __future__ import annotations

from dataclasses import dataclass

from runner.errors import InputError
from runner.service.checks import (
    CAPTURE_LINES_DEFAULT,
    check_agent,
    check_blocked_reason,
    check_cursor,
    check_instance_id,
    check_key,
    check_lines,
    check_name,
)
from runner.service.inputs.base import FencedInput
from runner.service.inputs.leases import LeaseListInput


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
class ReviewerListInput(LeaseListInput):
    """Reviewer leases (of one controller, if given); ``include_ended`` adds closed and failed ones."""
