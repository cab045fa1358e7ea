"""One typed, frozen ``*Input`` per operation, validated on construction.

Surfaces (the CLI, plans, later MCP and HTTP) build these and hand them to the service; an input that
fails validation raises :class:`~runner.errors.InputError` naming the field, before anything is read
or written. Operations that act for a controller take a :class:`FencedInput`: the controller id and
its credential, checked to belong together. Fields keep their order: callers build inputs
positionally as well as by keyword.

The inputs live in one module per component (:mod:`~runner.service.inputs.controller`,
``reviewers``, ``receipts``, ``waits``, ``writers``, ``inventory``, ``adopted``, ``events``; the
shared bases in ``base`` and ``leases``), and this package resolves each name on first use (PEP 562):
``controller renew`` creates the controller's input classes, not all 32.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runner.lazy import lazy_attributes

if TYPE_CHECKING:
    from runner.service.inputs.adopted import AdoptedCloseInput, AdoptedListInput, AdoptedReleaseInput, AdoptInput
    from runner.service.inputs.base import LIMIT_MAX, FencedInput, check_page
    from runner.service.inputs.controller import (
        AcquireInput,
        ListLeasesInput,
        ReleaseInput,
        RenewInput,
        ResumeInput,
        TakeoverInput,
    )
    from runner.service.inputs.events import EventsInput, ValidateInput
    from runner.service.inputs.inventory import ControllerInput, PaneCloseInput
    from runner.service.inputs.leases import PANE_OR_NAME, LeaseListInput, ObservedPaneInput
    from runner.service.inputs.receipts import AbandonInput, AskManyInput, CollectInput, ReceiptsInput, RelayInput
    from runner.service.inputs.reviewers import ReviewerCloseInput, ReviewerListInput, ReviewerStartInput
    from runner.service.inputs.waits import AgentInput, AgentProgressInput, AgentWaitInput, WaitAnyInput
    from runner.service.inputs.writers import (
        ScopesCheckInput,
        WriterAuditInput,
        WriterReleaseInput,
        WriterStartInput,
        WriterVerifyInput,
    )

# Where each public name lives: importing one component's inputs does not create the others'.
_WHERE: dict[str, str] = {
    "AbandonInput": "runner.service.inputs.receipts",
    "AcquireInput": "runner.service.inputs.controller",
    "AdoptInput": "runner.service.inputs.adopted",
    "AdoptedCloseInput": "runner.service.inputs.adopted",
    "AdoptedListInput": "runner.service.inputs.adopted",
    "AdoptedReleaseInput": "runner.service.inputs.adopted",
    "AgentInput": "runner.service.inputs.waits",
    "AgentProgressInput": "runner.service.inputs.waits",
    "AgentWaitInput": "runner.service.inputs.waits",
    "AskManyInput": "runner.service.inputs.receipts",
    "CollectInput": "runner.service.inputs.receipts",
    "ControllerInput": "runner.service.inputs.inventory",
    "EventsInput": "runner.service.inputs.events",
    "FencedInput": "runner.service.inputs.base",
    "LIMIT_MAX": "runner.service.inputs.base",
    "LeaseListInput": "runner.service.inputs.leases",
    "ListLeasesInput": "runner.service.inputs.controller",
    "ObservedPaneInput": "runner.service.inputs.leases",
    "PANE_OR_NAME": "runner.service.inputs.leases",
    "PaneCloseInput": "runner.service.inputs.inventory",
    "ReceiptsInput": "runner.service.inputs.receipts",
    "RelayInput": "runner.service.inputs.receipts",
    "ReleaseInput": "runner.service.inputs.controller",
    "RenewInput": "runner.service.inputs.controller",
    "ResumeInput": "runner.service.inputs.controller",
    "ReviewerCloseInput": "runner.service.inputs.reviewers",
    "ReviewerListInput": "runner.service.inputs.reviewers",
    "ReviewerStartInput": "runner.service.inputs.reviewers",
    "ScopesCheckInput": "runner.service.inputs.writers",
    "TakeoverInput": "runner.service.inputs.controller",
    "ValidateInput": "runner.service.inputs.events",
    "WaitAnyInput": "runner.service.inputs.waits",
    "WriterAuditInput": "runner.service.inputs.writers",
    "WriterReleaseInput": "runner.service.inputs.writers",
    "WriterStartInput": "runner.service.inputs.writers",
    "WriterVerifyInput": "runner.service.inputs.writers",
    "check_page": "runner.service.inputs.base",
}


__all__ = [
    "LIMIT_MAX",
    "PANE_OR_NAME",
    "AbandonInput",
    "AcquireInput",
    "AdoptInput",
    "AdoptedCloseInput",
    "AdoptedListInput",
    "AdoptedReleaseInput",
    "AgentInput",
    "AgentProgressInput",
    "AgentWaitInput",
    "AskManyInput",
    "CollectInput",
    "ControllerInput",
    "EventsInput",
    "FencedInput",
    "LeaseListInput",
    "ListLeasesInput",
    "ObservedPaneInput",
    "PaneCloseInput",
    "ReceiptsInput",
    "RelayInput",
    "ReleaseInput",
    "RenewInput",
    "ResumeInput",
    "ReviewerCloseInput",
    "ReviewerListInput",
    "ReviewerStartInput",
    "ScopesCheckInput",
    "TakeoverInput",
    "ValidateInput",
    "WaitAnyInput",
    "WriterAuditInput",
    "WriterReleaseInput",
    "WriterStartInput",
    "WriterVerifyInput",
    "check_page",
]

__getattr__, __dir__ = lazy_attributes(__name__, _WHERE, globals(), __all__)
