"""What every group of operations shares: the store, the definitions, the engine, the caller."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

from runner.definitions.library import Library
from runner.engine import Engine
from runner.store.abc import Store

if TYPE_CHECKING:
    from runner.agents.abc import AgentHost
    from runner.agents.kinds import Kinds


class ServiceBase:
    """State shared by the operation mixins that make up :class:`runner.service.Service`.

    ``hosts`` maps an agent host name (``process``, ``herdr``) to the host, opened on first use;
    ``kinds`` are the agent kinds configured on this machine (or a function loading them on first use).
    """

    def __init__(
        self,
        store: Store,
        library: Library,
        actor: str | None = None,
        hosts: Callable[[str], AgentHost] | None = None,
        kinds: Kinds | Callable[[], Kinds] | None = None,
    ) -> None:
        from runner.service.checks import default_holder

        self.store = store
        self.library = library
        self.engine = Engine(store, library)
        self.actor = actor or default_holder()
        self._hosts = hosts
        self._kinds = kinds

    # --- public reads every surface may use (no surface touches the store itself) ----------------------

    @property
    def store_url(self) -> str:
        """The store's URL (credentials are bound to it); never carries a password."""
        return self.store.url

    def now(self) -> datetime:
        """The store's clock: expiries and ages are judged by it, never by the caller's."""
        return self.store.now()

