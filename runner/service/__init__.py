"""Operations every surface shares: one typed ``*Input`` per operation, validated on construction.

The CLI (and later HTTP and MCP) parse their arguments into these inputs, call :class:`Service`,
and render what comes back; no surface holds a business rule. An input that fails validation raises
:class:`~runner.errors.InputError` naming the field, before anything is read or written.

:class:`Service` is a façade over components that share one :class:`~runner.service.core.Core`
(store, engine, library, agent hosts and kinds, actor) by composition, never by inheritance:
``controller`` (the lease), ``reviewers``, ``receipts`` (relay, collect, ask, abandon, reads),
``writers`` (writer lanes), ``waits`` (wait-any, agent get/read/wait), ``inventory`` (status, locks,
agents, reconcile, cleanup), ``events``, ``adopted`` (adopted panes, cleanup only),
``definitions`` (validate, machines) and ``decisions`` (what waits on a person; a plan's decide).
Inputs are in :mod:`~runner.service.inputs`, result views in :mod:`~runner.service.views`, input
checks in :mod:`~runner.service.checks`. Every operation is also a method of the façade itself
(``service.receipts.relay(...)`` is ``service.receipts.relay(...)``).

Sync and async: an operation that does not wait is synchronous (a CLI command that does not wait never
starts an event loop); the waits (``collect``, ``collect_first``, ``ask``, ``ask_many``,
``wait_any``, ``agent_wait``) are async. Inside an async operation every call that may block (a
store read or transaction, whose SQLite busy retry sleeps; ``engine.fire``/``fire_many``; a
synchronous host call such as ``host.get``, ``host.read`` or a prompt, which may run a subprocess)
goes through ``anyio.to_thread.run_sync`` (:func:`~runner.service.core.in_thread`), so an event loop
serving other requests (the MCP and HTTP servers) is never blocked; only a host's own async ``wait``
is awaited on the loop.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runner.lazy import lazy_attributes

if TYPE_CHECKING:
    from runner.service.adopted import Adopted
    from runner.service.checks import TTL_DEFAULT, TTL_MAX, TTL_MIN, default_holder, is_host, known_hosts
    from runner.service.controller import Controller
    from runner.service.core import AgentOperationError, Core
    from runner.service.decisions import DecideInput, DecisionNotPlanError, Decisions
    from runner.service.definitions import Definitions, MachineSummary, machines, validate
    from runner.service.events import Events
    from runner.service.facade import Service
    from runner.service.inputs.adopted import AdoptedCloseInput, AdoptedListInput, AdoptedReleaseInput, AdoptInput
    from runner.service.inputs.base import FencedInput
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
    from runner.service.inputs.leases import ObservedPaneInput
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
    from runner.service.inventory import Inventory
    from runner.service.receipts import DeliveryError, Receipts
    from runner.service.reviewers import Reviewers
    from runner.service.views.controller import Grant, LeaseView
    from runner.service.views.inventory import Housekeeping
    from runner.service.views.leases import AgentLeaseView, CloseResult
    from runner.service.views.pages import Page
    from runner.service.views.receipts import AskManyResult, CollectResult, ReceiptView
    from runner.service.views.waits import WaitAnyResult, Winner
    from runner.service.views.writers import ValidationFailedError, VerifyResult
    from runner.service.waits import Waits
    from runner.service.writers import Writers

# Where each public name lives: ``from runner.service import RenewInput`` imports only the inputs
# module, not every component (PEP 562); the CLI's cold start pays for what a command uses.
_WHERE: dict[str, str] = {
    "Service": "runner.service.facade",
    "TTL_DEFAULT": "runner.service.checks",
    "TTL_MAX": "runner.service.checks",
    "TTL_MIN": "runner.service.checks",
    "AbandonInput": "runner.service.inputs.receipts",
    "AcquireInput": "runner.service.inputs.controller",
    "AdoptInput": "runner.service.inputs.adopted",
    "Adopted": "runner.service.adopted",
    "AdoptedCloseInput": "runner.service.inputs.adopted",
    "AdoptedListInput": "runner.service.inputs.adopted",
    "AdoptedReleaseInput": "runner.service.inputs.adopted",
    "AgentInput": "runner.service.inputs.waits",
    "AgentProgressInput": "runner.service.inputs.waits",
    "AgentLeaseView": "runner.service.views.leases",
    "AgentOperationError": "runner.service.core",
    "AgentWaitInput": "runner.service.inputs.waits",
    "AskManyInput": "runner.service.inputs.receipts",
    "AskManyResult": "runner.service.views.receipts",
    "CloseResult": "runner.service.views.leases",
    "CollectInput": "runner.service.inputs.receipts",
    "CollectResult": "runner.service.views.receipts",
    "Controller": "runner.service.controller",
    "ControllerInput": "runner.service.inputs.inventory",
    "Core": "runner.service.core",
    "DecideInput": "runner.service.decisions",
    "DecisionNotPlanError": "runner.service.decisions",
    "Decisions": "runner.service.decisions",
    "Definitions": "runner.service.definitions",
    "DeliveryError": "runner.service.receipts",
    "Events": "runner.service.events",
    "EventsInput": "runner.service.inputs.events",
    "FencedInput": "runner.service.inputs.base",
    "Grant": "runner.service.views.controller",
    "Housekeeping": "runner.service.views.inventory",
    "Inventory": "runner.service.inventory",
    "LeaseView": "runner.service.views.controller",
    "Page": "runner.service.views.pages",
    "ListLeasesInput": "runner.service.inputs.controller",
    "MachineSummary": "runner.service.definitions",
    "ObservedPaneInput": "runner.service.inputs.leases",
    "PaneCloseInput": "runner.service.inputs.inventory",
    "ReceiptView": "runner.service.views.receipts",
    "Receipts": "runner.service.receipts",
    "ReceiptsInput": "runner.service.inputs.receipts",
    "RelayInput": "runner.service.inputs.receipts",
    "ReleaseInput": "runner.service.inputs.controller",
    "RenewInput": "runner.service.inputs.controller",
    "ResumeInput": "runner.service.inputs.controller",
    "ReviewerCloseInput": "runner.service.inputs.reviewers",
    "ReviewerListInput": "runner.service.inputs.reviewers",
    "ReviewerStartInput": "runner.service.inputs.reviewers",
    "Reviewers": "runner.service.reviewers",
    "ScopesCheckInput": "runner.service.inputs.writers",
    "TakeoverInput": "runner.service.inputs.controller",
    "ValidateInput": "runner.service.inputs.events",
    "ValidationFailedError": "runner.service.views.writers",
    "VerifyResult": "runner.service.views.writers",
    "WaitAnyInput": "runner.service.inputs.waits",
    "WaitAnyResult": "runner.service.views.waits",
    "Waits": "runner.service.waits",
    "Winner": "runner.service.views.waits",
    "WriterAuditInput": "runner.service.inputs.writers",
    "WriterReleaseInput": "runner.service.inputs.writers",
    "WriterStartInput": "runner.service.inputs.writers",
    "WriterVerifyInput": "runner.service.inputs.writers",
    "Writers": "runner.service.writers",
    "default_holder": "runner.service.checks",
    "is_host": "runner.service.checks",
    "known_hosts": "runner.service.checks",
    "machines": "runner.service.definitions",
    "validate": "runner.service.definitions",
}


__all__ = [
    "TTL_DEFAULT",
    "TTL_MAX",
    "TTL_MIN",
    "AbandonInput",
    "AcquireInput",
    "AdoptInput",
    "Adopted",
    "AdoptedCloseInput",
    "AdoptedListInput",
    "AdoptedReleaseInput",
    "AgentInput",
    "AgentLeaseView",
    "AgentOperationError",
    "AgentProgressInput",
    "AgentWaitInput",
    "AskManyInput",
    "AskManyResult",
    "CloseResult",
    "CollectInput",
    "CollectResult",
    "Controller",
    "ControllerInput",
    "Core",
    "DecideInput",
    "DecisionNotPlanError",
    "Decisions",
    "Definitions",
    "DeliveryError",
    "Events",
    "EventsInput",
    "FencedInput",
    "Grant",
    "Housekeeping",
    "Inventory",
    "LeaseView",
    "ListLeasesInput",
    "MachineSummary",
    "ObservedPaneInput",
    "Page",
    "PaneCloseInput",
    "ReceiptView",
    "Receipts",
    "ReceiptsInput",
    "RelayInput",
    "ReleaseInput",
    "RenewInput",
    "ResumeInput",
    "ReviewerCloseInput",
    "ReviewerListInput",
    "ReviewerStartInput",
    "Reviewers",
    "ScopesCheckInput",
    "Service",
    "TakeoverInput",
    "ValidateInput",
    "ValidationFailedError",
    "VerifyResult",
    "WaitAnyInput",
    "WaitAnyResult",
    "Waits",
    "Winner",
    "WriterAuditInput",
    "WriterReleaseInput",
    "WriterStartInput",
    "WriterVerifyInput",
    "Writers",
    "default_holder",
    "is_host",
    "known_hosts",
    "machines",
    "validate",
]

__getattr__, __dir__ = lazy_attributes(__name__, _WHERE, globals(), __all__)
