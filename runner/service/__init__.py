"""Operations every surface shares: one typed ``*Input`` per operation, validated on construction.

The CLI (and later HTTP and MCP) parse their arguments into these inputs, call :class:`Service`,
and render what comes back; no surface holds a business rule. An input that fails validation raises
:class:`~runner.errors.InputError` naming the field, before anything is read or written.

:class:`Service` is a façade over components that share one :class:`~runner.service.core.Core`
(store, engine, library, agent hosts and kinds, actor) by composition, never by inheritance:
``controller`` (the lease), ``reviewers``, ``receipts`` (relay, collect, ask, abandon, reads),
``writers`` (writer lanes), ``waits`` (wait-any, agent get/read/wait), ``inventory`` (status, locks,
agents, reconcile, cleanup), ``events``, ``adopted`` (adopted panes, cleanup only) and
``definitions`` (validate, machines). Inputs are in :mod:`~runner.service.inputs`, result views in
:mod:`~runner.service.views`, input checks in :mod:`~runner.service.checks`. Every operation is
also a method of the façade itself (``service.relay(...)`` is ``service.receipts.relay(...)``).

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

from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner.agents.abc import AgentHost, Observation
from runner.context import Event, Instance
from runner.definitions.library import Library
from runner.engine import Engine
from runner.errors import CorralError
from runner.fence import Credential
from runner.service.adopted import Adopted
from runner.service.checks import (
    CAPTURE_LINES_DEFAULT,
    TIMEOUT_DEFAULT,
    TTL_DEFAULT,
    TTL_MAX,
    TTL_MIN,
    default_holder,
    is_host,
    known_hosts,
)
from runner.service.controller import Controller
from runner.service.core import AgentOperationError, Core
from runner.service.definitions import Definitions, MachineSummary, machines, validate
from runner.service.events import Events
from runner.service.inputs import (
    AbandonInput,
    AcquireInput,
    AdoptedCloseInput,
    AdoptedListInput,
    AdoptedReleaseInput,
    AdoptInput,
    AgentInput,
    AgentWaitInput,
    AskManyInput,
    CollectInput,
    ControllerInput,
    EventsInput,
    FencedInput,
    ListLeasesInput,
    ObservedPaneInput,
    PaneCloseInput,
    ReceiptsInput,
    RelayInput,
    ReleaseInput,
    RenewInput,
    ResumeInput,
    ReviewerCloseInput,
    ReviewerListInput,
    ReviewerStartInput,
    ScopesCheckInput,
    TakeoverInput,
    ValidateInput,
    WaitAnyInput,
    WriterReleaseInput,
    WriterStartInput,
    WriterVerifyInput,
)
from runner.service.inventory import Inventory
from runner.service.receipts import DeliveryError, Receipts
from runner.service.reviewers import Reviewers
from runner.service.views import (
    AgentLeaseView,
    AskManyResult,
    CloseResult,
    CollectResult,
    Grant,
    Housekeeping,
    LeaseView,
    ReceiptView,
    ValidationFailedError,
    VerifyResult,
    WaitAnyResult,
    Winner,
)
from runner.service.waits import Waits
from runner.service.writers import Writers

if TYPE_CHECKING:
    from runner.agents.kinds import Kinds
    from runner.service.plans import Plans
    from runner.store.abc import Store


class Service:
    """corral's operations over one store: a façade of components sharing one :class:`Core`."""

    def __init__(
        self,
        store: Store,
        library: Library,
        actor: str | None = None,
        hosts: Callable[[str], AgentHost] | None = None,
        kinds: Kinds | Callable[[], Kinds] | None = None,
        plans: Callable[[Service], Plans] | None = None,
    ) -> None:
        self.core = Core(store, library, actor, hosts, kinds)
        self._plans_factory = plans
        self._plans: Plans | None = None
        # ``reviewers``, ``receipts``, ``writers`` and ``events`` were listing methods before they were
        # components: each component is callable with the listing's arguments, so both spellings hold.
        self.controller = Controller(self.core)
        self.reviewers = Reviewers(self.core)
        self.waits = Waits(self.core)
        self.receipts = Receipts(self.core, self.waits)
        self.writers = Writers(self.core)
        self.inventory = Inventory(self.core)
        self.events = Events(self.core)
        self.adopted = Adopted(self.core)
        self.definitions = Definitions(self.core)

    @property
    def plans(self) -> Plans:
        """The plans component (submit, run, resume, retry, cancel, decide, show, list).

        It needs the recipes, a credential keeper and the step operations, which the runtime assembles
        (:class:`runner.runtime.Runtime`); a service built without them has no plans component.
        """
        if self._plans is None:
            if self._plans_factory is None:
                raise CorralError(
                    "this service was built without a plans component: open corral through runner.runtime.Runtime",
                    code="internal",
                )
            self._plans = self._plans_factory(self)
        return self._plans

    # --- what the service runs on ------------------------------------------------------------------------

    @property
    def store(self) -> Store:
        return self.core.store

    @property
    def library(self) -> Library:
        return self.core.library

    @property
    def engine(self) -> Engine:
        return self.core.engine

    @property
    def actor(self) -> str:
        return self.core.actor

    @property
    def kinds(self) -> Kinds:
        return self.core.kinds

    @property
    def store_url(self) -> str:
        """The store's URL (credentials are bound to it); never carries a password."""
        return self.core.store_url

    def host(self, name: str) -> AgentHost:
        return self.core.host(name)

    def now(self) -> datetime:
        """The store's clock: expiries and ages are judged by it, never by the caller's."""
        return self.core.now()

    # --- controller lease --------------------------------------------------------------------------------

    def acquire(self, inp: AcquireInput) -> Grant:
        return self.controller.acquire(inp)

    def renew(self, inp: RenewInput) -> LeaseView:
        return self.controller.renew(inp)

    def resume(self, inp: ResumeInput) -> Grant:
        return self.controller.resume(inp)

    def takeover(self, inp: TakeoverInput) -> Grant:
        return self.controller.takeover(inp)

    def release(self, inp: ReleaseInput) -> LeaseView:
        return self.controller.release(inp)

    def leases(self, inp: ListLeasesInput) -> list[LeaseView]:
        return self.controller.leases(inp)

    def controller_lease(self, controller_id: str) -> LeaseView | None:
        return self.controller.controller_lease(controller_id)

    def holds(self, credential: Credential, *, allow_expired: bool = False) -> bool:
        return self.controller.holds(credential, allow_expired=allow_expired)

    # --- reviewers ---------------------------------------------------------------------------------------

    def reviewer_start(self, inp: ReviewerStartInput) -> AgentLeaseView:
        return self.reviewers.start(inp)

    def reviewer_close(self, inp: ReviewerCloseInput) -> CloseResult:
        return self.reviewers.close(inp)

    # --- receipts ----------------------------------------------------------------------------------------

    def relay(self, inp: RelayInput) -> ReceiptView:
        return self.receipts.relay(inp)

    def relay_many(self, inp: AskManyInput) -> list[ReceiptView]:
        return self.receipts.relay_many(inp)

    async def collect(self, inp: CollectInput) -> list[CollectResult]:
        return await self.receipts.collect(inp)

    async def collect_first(self, inp: CollectInput) -> AskManyResult:
        return await self.receipts.collect_first(inp)

    async def ask(
        self, relay: RelayInput, timeout: float = TIMEOUT_DEFAULT, lines: int = CAPTURE_LINES_DEFAULT
    ) -> CollectResult:
        return await self.receipts.ask(relay, timeout, lines)

    async def ask_many(self, inp: AskManyInput) -> AskManyResult:
        return await self.receipts.ask_many(inp)

    def abandon(self, inp: AbandonInput) -> ReceiptView:
        return self.receipts.abandon(inp)

    def receipt(self, token: str) -> ReceiptView:
        return self.receipts.receipt(token)

    def receipt_by_id(self, receipt_id: str) -> ReceiptView | None:
        return self.receipts.receipt_by_id(receipt_id)

    # --- waits and observations --------------------------------------------------------------------------

    async def wait_any(self, inp: WaitAnyInput) -> WaitAnyResult:
        return await self.waits.wait_any(inp)

    def agent_get(self, inp: AgentInput) -> Observation:
        return self.waits.get(inp)

    def agent_read(self, inp: AgentInput) -> tuple[str, Observation]:
        return self.waits.read(inp)

    async def agent_wait(self, inp: AgentWaitInput) -> Observation:
        return await self.waits.wait(inp)

    # --- writer lanes ------------------------------------------------------------------------------------

    def preflight(self, worktree: str) -> dict[str, Any]:
        return self.writers.preflight(worktree)

    def writer_start(self, inp: WriterStartInput) -> AgentLeaseView:
        return self.writers.start(inp)

    def writer_release(self, inp: WriterReleaseInput) -> CloseResult:
        return self.writers.release(inp)

    def writer_verify(self, inp: WriterVerifyInput, scratch: Path | None = None) -> VerifyResult:
        return self.writers.verify(inp, scratch)

    def scopes_check(self, inp: ScopesCheckInput) -> dict[str, Any]:
        return self.writers.scopes_check(inp)

    # --- inventory ---------------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        return self.inventory.status()

    def locks(self) -> dict[str, Any]:
        return self.inventory.locks()

    def agents(self, host_name: str = "process") -> list[dict[str, Any]]:
        return self.inventory.agents(host_name)

    def lease(self, instance_id: str) -> AgentLeaseView | None:
        return self.inventory.lease(instance_id)

    def reconcile(self, inp: ControllerInput, machine: str = "reviewer") -> Housekeeping:
        return self.inventory.reconcile(inp, machine)

    def reviewer_reconcile(self, inp: ControllerInput) -> Housekeeping:
        return self.inventory.reviewer_reconcile(inp)

    def reviewer_cleanup(self, inp: ControllerInput) -> Housekeeping:
        return self.inventory.reviewer_cleanup(inp)

    def pane_close(self, inp: PaneCloseInput) -> AgentLeaseView:
        return self.inventory.pane_close(inp)

    def pane_reconcile(self, inp: ControllerInput) -> Housekeeping:
        return self.inventory.pane_reconcile(inp)

    # --- adopted panes -----------------------------------------------------------------------------------

    def adopt(self, inp: AdoptInput) -> AgentLeaseView:
        return self.adopted.adopt(inp)

    def adopted_close(self, inp: AdoptedCloseInput) -> CloseResult:
        return self.adopted.close(inp)

    def adopted_release(self, inp: AdoptedReleaseInput) -> AgentLeaseView:
        return self.adopted.release(inp)

    def adopted_list(self, inp: AdoptedListInput) -> list[AgentLeaseView]:
        return self.adopted.leases(inp)

    def adopted_reconcile(self, inp: ControllerInput) -> Housekeeping:
        return self.adopted.reconcile(inp)

    # --- events --------------------------------------------------------------------------

    def follow_events(self, since: int) -> Iterator[Event]:
        return self.events.follow(since)

    def history(self, instance_id: str) -> tuple[Instance | None, list[Event]]:
        """An instance as it is now and every event it recorded (what ``corral draw --instance`` draws)."""
        return self.events.history(instance_id)


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
    "AgentWaitInput",
    "AskManyInput",
    "AskManyResult",
    "CloseResult",
    "CollectInput",
    "CollectResult",
    "Controller",
    "ControllerInput",
    "Core",
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
