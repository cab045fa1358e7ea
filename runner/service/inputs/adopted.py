"""The adopted panes' inputs: adopt, close, release, list."""

from __future__ import annotations

from typing import ClassVar

from runner.service.checks import (
    CAPTURE_LINES_DEFAULT,
    check_cursor,
    check_key,
    check_lines,
    check_pane,
)
from runner.service.inputs.base import FencedInput
from runner.service.inputs.fields import described, input_class
from runner.service.inputs.leases import PANE_OR_NAME, LeaseListInput, ObservedPaneInput


@input_class
class AdoptInput(ObservedPaneInput):
    """Adopt the agent in ``pane_id`` if it is exactly the one seen: name, kind, cwd, settled at the cursor."""

    PANE_WHAT: ClassVar[str] = PANE_OR_NAME

    lease_id: str | None = None
    """An idempotency key: the lease instance is ``adopted/<lease_id>``."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_key("lease_id", self.lease_id)


@input_class
class AdoptedCloseInput(FencedInput):
    """Close the adopted agent ``target`` (its name or pane id) if it sits settled at the expected cursor."""

    target: str = described("target", "The adopted pane (its pane id or lease id).")
    expected_state_change_seq: int = described(
        "expect_seq", "The cursor you saw the agent settle at (the last collect, corral_agents)."
    )
    lines: int = described(
        "lines", "How many lines of the agent's visible output to capture.", default=CAPTURE_LINES_DEFAULT
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        check_pane("target", self.target, PANE_OR_NAME)
        check_cursor("expect_seq", self.expected_state_change_seq)
        check_lines(self.lines)


@input_class
class AdoptedReleaseInput(FencedInput):
    """End the adoption of ``target`` (its name or pane id); the pane is left running."""

    target: str = described("target", "The adopted pane (its pane id or lease id).")

    def __post_init__(self) -> None:
        super().__post_init__()
        check_pane("target", self.target, PANE_OR_NAME)


@input_class
class AdoptedListInput(LeaseListInput):
    """Adopted leases (of one controller, if given); ``include_ended`` adds closed and released ones."""
