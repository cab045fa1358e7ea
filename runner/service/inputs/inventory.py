"""The inventory's inputs: an operation over everything a controller holds, a close of a pane no lease holds."""

from __future__ import annotations

from dataclasses import dataclass

from runner.service.checks import (
    check_lease_ids,
    check_message,
)
from runner.service.inputs.base import FencedInput
from runner.service.inputs.leases import ObservedPaneInput


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
