"""What every group of operations shares: the store, the definitions, the engine, the caller."""

from __future__ import annotations

from collections.abc import Callable
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
