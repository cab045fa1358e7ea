"""The service façade: every operation of corral, delegated to the component that owns it.

Components are built on first use from one :class:`~runner.service.core.Core`, so a command imports
only the components it calls (``controller renew`` loads neither the writers nor the waits).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner.agents.abc import AgentHost, Observation
from runner.context import Event, Instance
from runner.definitions.library import Library
from runner.engine import Engine
from runner.errors import CorralError
from runner.fence import Credential
from runner.service.checks import (
    CAPTURE_LINES_DEFAULT,
    TIMEOUT_DEFAULT,
)
from runner.service.core import Core

if TYPE_CHECKING:
    from collections.abc import Mapping

    from runner.agents.kinds import Kinds
    from runner.agents.progress import RunProgress
    from runner.service.adopted import Adopted
    from runner.service.controller import Controller
    from runner.service.decisions import DecideInput, Decisions
    from runner.service.definitions import Definitions
    from runner.service.events import Events
    from runner.service.inputs.adopted import AdoptedCloseInput, AdoptedListInput, AdoptedReleaseInput, AdoptInput
    from runner.service.inputs.controller import (
        AcquireInput,
        ListLeasesInput,
        ReleaseInput,
        RenewInput,
        ResumeInput,
        TakeoverInput,
    )
    from runner.service.inputs.inventory import ControllerInput, PaneCloseInput
    from runner.service.inputs.receipts import AbandonInput, AskManyInput, CollectInput, RelayInput
    from runner.service.inputs.reviewers import ReviewerCloseInput, ReviewerStartInput
    from runner.service.inputs.waits import AgentInput, AgentProgressInput, AgentWaitInput, WaitAnyInput
    from runner.service.inputs.writers import ScopesCheckInput, WriterReleaseInput, WriterStartInput, WriterVerifyInput
    from runner.service.inventory import Inventory
    from runner.service.memory import Memory
    from runner.service.mesh import Mesh
    from runner.service.plans import Plans
    from runner.service.receipts import Receipts
    from runner.service.reviewers import Reviewers
    from runner.service.views.controller import Grant, LeaseView
    from runner.service.views.inventory import Housekeeping
    from runner.service.views.leases import AgentLeaseView, CloseResult
    from runner.service.views.pages import Page
    from runner.service.views.receipts import AskManyResult, CollectResult, ReceiptView
    from runner.service.views.waits import WaitAnyResult
    from runner.service.views.writers import VerifyResult
    from runner.service.waits import Waits
    from runner.service.writers import Writers
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
        mesh_retention_seconds: float | None = None,
    ) -> None:
        self.core = Core(store, library, actor, hosts, kinds)
        self._plans_factory = plans
        self._plans: Plans | None = None
        self._mesh_retention = mesh_retention_seconds

    # --- the components, each built on first use (a command imports only the ones it calls) -------------
    # ``reviewers``, ``receipts``, ``writers`` and ``events`` were listing methods before they were
    # components: each component is callable with the listing's arguments, so both spellings hold.

    @cached_property
    def controller(self) -> Controller:
        from runner.service.controller import Controller

        return Controller(self.core)

    @cached_property
    def reviewers(self) -> Reviewers:
        from runner.service.reviewers import Reviewers

        return Reviewers(self.core)

    @cached_property
    def waits(self) -> Waits:
        from runner.service.waits import Waits

        return Waits(self.core)

    @cached_property
    def receipts(self) -> Receipts:
        from runner.service.receipts import Receipts

        return Receipts(self.core, self.waits)

    @cached_property
    def writers(self) -> Writers:
        from runner.service.writers import Writers

        return Writers(self.core)

    @cached_property
    def inventory(self) -> Inventory:
        from runner.service.inventory import Inventory

        return Inventory(self.core)

    @cached_property
    def events(self) -> Events:
        from runner.service.events import Events

        return Events(self.core)

    @cached_property
    def adopted(self) -> Adopted:
        from runner.service.adopted import Adopted

        return Adopted(self.core)

    @cached_property
    def definitions(self) -> Definitions:
        from runner.service.definitions import Definitions

        return Definitions(self.core)

    @cached_property
    def decisions(self) -> Decisions:
        """What waits on a person (``service.decisions()`` lists it) and the decide of a plan decision;
        it reaches the plans component only to decide."""
        from runner.service.decisions import Decisions

        return Decisions(self.core, lambda: self.plans)

    @cached_property
    def mesh(self) -> Mesh:
        """The agent mesh (issue 17): presence, messages until acked, guarded wake-ups."""
        from runner.service.mesh import Mesh

        return Mesh(self.core, self._mesh_retention)

    @cached_property
    def memory(self) -> Memory:
        """Handoff memory (issue 18): checkpoints, sessions, pins, retention, search."""
        from runner.service.memory import Memory

        return Memory(self.core)

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

    def leases(self, inp: ListLeasesInput) -> Page[LeaseView]:
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

    def agent_progress(self, inp: AgentProgressInput) -> RunProgress | None:
        return self.waits.progress(inp)

    def live_progress(
        self, host_name: str, seen: Mapping[str, tuple[int, int]]
    ) -> tuple[list[dict[str, Any]], dict[str, tuple[int, int]]]:
        return self.waits.live_progress(host_name, seen)

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

    def adopted_list(self, inp: AdoptedListInput) -> Page[AgentLeaseView]:
        return self.adopted.leases(inp)

    def adopted_reconcile(self, inp: ControllerInput) -> Housekeeping:
        return self.adopted.reconcile(inp)

    # --- decisions (issue 15) -----------------------------------------------------------------------------

    def decide(self, inp: DecideInput) -> dict[str, Any]:
        return self.decisions.decide(inp)

    # --- events --------------------------------------------------------------------------

    def follow_events(self, since: int, *, from_floor: bool = False) -> Iterator[Event]:
        return self.events.follow(since, from_floor=from_floor)

    def history(self, instance_id: str) -> tuple[Instance | None, list[Event]]:
        """An instance as it is now and every event it recorded (what ``corral draw --instance`` draws)."""
        return self.events.history(instance_id)
