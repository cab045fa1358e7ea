"""The inventory's inputs: an operation over everything a controller holds, a close of a pane no lease holds."""

from __future__ import annotations

from runner.service.checks import (
    check_lease_ids,
    check_message,
)
from runner.service.inputs.base import FencedInput
from runner.service.inputs.fields import described, input_class
from runner.service.inputs.leases import ObservedPaneInput


@input_class
class ControllerInput(FencedInput):
    """An operation over everything a controller holds (cleanup, reconcile).

    ``apply`` False (the default) is a dry run: report what would be done, do nothing. ``leases``
    (instance ids, as the report names them) limits it to those leases; empty: all of them.
    """

    apply: bool = described(
        "apply", "Really do it; false (the default) is a dry run that reports the plan per lease.", default=False
    )
    leases: tuple[str, ...] = described("lease", "Only these lease ids (default: all of the controller's).", default=())

    def __post_init__(self) -> None:
        super().__post_init__()
        check_lease_ids(self.leases)


@input_class
class PaneCloseInput(ObservedPaneInput):
    """Close a pane corral started that no live lease holds, bound to the agent and cursor seen there."""

    reason: str | None = described("reason", "Why, recorded.", default=None)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_message("reason", self.reason)
