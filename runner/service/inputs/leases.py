"""The shared bases of agent lease inputs: a listing of one machine's leases, a fenced act on an observed pane."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from runner.service.checks import (
    check_expected_agent,
    check_pane,
)
from runner.service.inputs.base import FencedInput, ListingInput


@dataclass(frozen=True)
class LeaseListInput(ListingInput):
    """Leases of one machine (of one controller, if given); ``include_ended`` adds the ended ones.

    ``after`` (a lease instance id: the previous page's ``next_after``) and ``limit`` page through
    them in instance id order.
    """


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


PANE_OR_NAME = "a pane id or agent name"
