"""The service: corral's components over one store, each built on first use.

Every operation is a method of the component that owns it (``service.controller.renew``,
``service.writers.start``); the operation table names it (:mod:`runner.service.operations`). The
service adds only what the components share: one :class:`~runner.service.core.Core` and laziness,
so a command imports only the components it calls (``controller renew`` loads neither the writers
nor the waits).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from functools import cached_property
from typing import TYPE_CHECKING

from runner.agents.abc import AgentHost
from runner.definitions.library import Library
from runner.engine import Engine
from runner.errors import CorralError
from runner.service.core import Core

if TYPE_CHECKING:
    from runner.agents.kinds import Kinds
    from runner.service.adopted import Adopted
    from runner.service.board import Board
    from runner.service.controller import Controller
    from runner.service.decisions import Decisions
    from runner.service.definitions import Definitions
    from runner.service.events import Events
    from runner.service.inventory import Inventory
    from runner.service.memory import Memory
    from runner.service.mesh import Mesh
    from runner.service.plans import Plans
    from runner.service.receipts import Receipts
    from runner.service.reviewers import Reviewers
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
    def board(self) -> Board:
        """The dashboard's read views: what needs a person, a plan's timeline, a search of the events."""
        from runner.service.board import Board

        return Board(self)

    @cached_property
    def mesh(self) -> Mesh:
        """The agent mesh: presence, messages until acked, guarded wake-ups."""
        from runner.service.mesh import Mesh

        return Mesh(self.core, self._mesh_retention)

    @cached_property
    def memory(self) -> Memory:
        """Handoff memory: checkpoints, sessions, pins, retention, search."""
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
