"""The shared bases of agent lease inputs: a listing of one machine's leases, a fenced act on an observed pane."""

from __future__ import annotations

from typing import ClassVar

from runner.service.checks import (
    check_expected_agent,
    check_pane,
)
from runner.service.inputs.base import FencedInput, ListingInput
from runner.service.inputs.fields import described, input_class


@input_class
class LeaseListInput(ListingInput):
    """Leases of one machine (of one controller, if given); ``include_ended`` adds the ended ones.

    ``after`` (a lease instance id: the previous page's ``next_after``) and ``limit`` page through
    them in instance id order.
    """


@input_class
class ObservedPaneInput(FencedInput):
    """A fenced act on a pane named by id, bound to the agent the caller saw there: name, kind, cwd and
    cursor (an adoption; an operator's close of a pane no lease holds)."""

    PANE_FIELD: ClassVar[str] = "target"  # the argument's name (the CLI's positional PANE)
    PANE_WHAT: ClassVar[str] = "a pane id"

    pane_id: str = described("target", "The pane id (corral_agents), leased or not.")
    expected_name: str = described("expect_name", "Its name, as you saw it.")
    expected_kind: str = described("expect_kind", "Its kind, as you saw it.")
    expected_cwd: str = described("expect_cwd", "Its working directory (absolute), as you saw it.")
    expected_state_change_seq: int = described("expect_seq", "Its cursor, as you saw it.")
    host: str = described("host", "The agent host: process (corral's own) or herdr.", default="process")

    def __post_init__(self) -> None:
        super().__post_init__()
        check_pane(self.PANE_FIELD, self.pane_id, self.PANE_WHAT)
        check_expected_agent(
            self.expected_name, self.expected_kind, self.expected_cwd, self.expected_state_change_seq, self.host
        )


PANE_OR_NAME = "a pane id or agent name"
