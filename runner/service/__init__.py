"""Operations every surface shares: one typed ``*Input`` per operation, validated on construction.

The CLI (and later HTTP and MCP) parse their arguments into these inputs, call :class:`Service`,
and render what comes back; no surface holds a business rule. An input that fails validation raises
:class:`~runner.errors.InputError` naming the field, before anything is read or written.

Operations are grouped by lifecycle: :mod:`~runner.service.controller` (the lease),
:mod:`~runner.service.agents` (reviewers, receipts, waits), :mod:`~runner.service.writers`
(writer lanes), :mod:`~runner.service.adopted` (adopted panes, cleanup only),
:mod:`~runner.service.definitions` (validate, machines).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from runner.context import Event
from runner.errors import InputError
from runner.service.adopted import (
    AdoptedCloseInput,
    AdoptedListInput,
    AdoptedOps,
    AdoptedReleaseInput,
    AdoptInput,
)
from runner.service.agents import (
    AbandonInput,
    AgentInput,
    AgentLeaseView,
    AgentWaitInput,
    AskManyInput,
    AskManyResult,
    CloseResult,
    CollectInput,
    CollectResult,
    ControllerInput,
    DeliveryError,
    Housekeeping,
    PaneCloseInput,
    ReceiptsInput,
    ReceiptView,
    RelayInput,
    ReviewerCloseInput,
    ReviewerListInput,
    ReviewerStartInput,
    WaitAnyInput,
    WaitAnyResult,
    Winner,
)
from runner.service.checks import TTL_DEFAULT, TTL_MAX, TTL_MIN, default_holder
from runner.service.controller import (
    AcquireInput,
    ControllerOps,
    Grant,
    LeaseView,
    ListLeasesInput,
    ReleaseInput,
    RenewInput,
    ResumeInput,
    TakeoverInput,
)
from runner.service.definitions import MachineSummary, ValidateInput, machines, validate
from runner.service.writers import (
    ScopesCheckInput,
    VerifyResult,
    WriterOps,
    WriterReleaseInput,
    WriterStartInput,
    WriterVerifyInput,
)


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


class Service(ControllerOps, WriterOps, AdoptedOps):
    """corral's operations over one store."""

    def events(self, inp: EventsInput) -> list[Event]:
        """The event log after ``inp.since``."""
        return self.store.events(inp.since, inp.limit, inp.instance_id)

    def follow_events(self, since: int) -> Iterator[Event]:
        """Events after ``since`` as they are recorded, for ever (the caller stops reading)."""
        return self.store.follow(since)


__all__ = [
    "TTL_DEFAULT",
    "TTL_MAX",
    "TTL_MIN",
    "AbandonInput",
    "AcquireInput",
    "AdoptInput",
    "AdoptedCloseInput",
    "AdoptedListInput",
    "AdoptedReleaseInput",
    "AgentInput",
    "AgentLeaseView",
    "AgentWaitInput",
    "AskManyInput",
    "AskManyResult",
    "CloseResult",
    "CollectInput",
    "CollectResult",
    "ControllerInput",
    "DeliveryError",
    "EventsInput",
    "Grant",
    "Housekeeping",
    "LeaseView",
    "ListLeasesInput",
    "MachineSummary",
    "PaneCloseInput",
    "ReceiptView",
    "ReceiptsInput",
    "RelayInput",
    "ReleaseInput",
    "RenewInput",
    "ResumeInput",
    "ReviewerCloseInput",
    "ReviewerListInput",
    "ReviewerStartInput",
    "ScopesCheckInput",
    "Service",
    "TakeoverInput",
    "ValidateInput",
    "VerifyResult",
    "WaitAnyInput",
    "WaitAnyResult",
    "Winner",
    "WriterReleaseInput",
    "WriterStartInput",
    "WriterVerifyInput",
    "default_holder",
    "machines",
    "validate",
]
