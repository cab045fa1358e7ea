"""The runtime: assembles corral from configuration. Every surface and every test gets corral here.

:meth:`Runtime.open` takes a :class:`Config` (flags, environment, defaults) and opens, each on first
use, the pieces the service is made of:

- the **store**, through the store registry (``corral.stores``: ``sqlite:`` built in);
- the **library** of machine definitions (the packaged ones, cached under the state home);
- the **agent kinds** (built-ins, ``$CORRAL_HOME/agents.yaml``, ``./.corral/agents.yaml``);
- the **agent hosts**, through the host registry (``corral.agent_hosts``: ``process``, ``herdr``);
- the **credential files** (:class:`CredentialFiles`), the 0600 files that keep a controller's fence
  between commands;
- the **service** (:class:`runner.service.Service`) over all of them.

A command that only reads definitions (``validate``, ``draw``) never opens the store; one that never
names Herdr never imports its adapter. The CLI builds one runtime per command; a long-running server
(MCP, HTTP) builds one per process and closes it on exit.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from runner.home import Home

if TYPE_CHECKING:
    from runner.agents.abc import AgentHost
    from runner.agents.kinds import Kinds
    from runner.credentials import StoreRef
    from runner.definitions.library import Library
    from runner.fence import Credential, Proposal
    from runner.lineage import Binding
    from runner.plans.keeper import FileKeeper
    from runner.presentation.pack import Written
    from runner.service import Service
    from runner.service.plans import Plans
    from runner.store.abc import Store

G = TypeVar("G")


@dataclass(frozen=True)
class Config:
    """Where corral's state lives and who is acting.

    ``store_url``: an explicit URL (``--store``), else ``$CORRAL_STORE``, else the SQLite file in the
    state home. ``home``: ``--home``, else ``$CORRAL_HOME``, else ``$XDG_STATE_HOME/corral``.
    ``actor``: recorded on every event (default: ``<surface>:<user>@<host>:<pid>``).
    ``events_keep``: the event-log retention policy ``corral events prune`` applies when given no
    criterion (``$CORRAL_EVENTS_KEEP``: a count of newest events to keep, or a duration such as
    ``30d``); nothing prunes on its own. Checked when applied, so a bad value breaks only the prune.
    """

    home: Home
    store_url: str
    actor: str | None = None
    surface: str = "cli"
    events_keep: str | None = None
    mesh_retention: str | None = None
    """How long mesh messages are kept (``$CORRAL_MESH_RETENTION``: a duration such as ``7d``)."""

    @property
    def acting_as(self) -> str:
        """The actor recorded on events: ``actor``, else ``<surface>:<user>@<host>:<pid>``."""
        if self.actor is not None:
            return self.actor
        from runner.service.checks import default_holder

        return f"{self.surface}:{default_holder()}:{os.getpid()}"

    @classmethod
    def load(
        cls,
        *,
        store: str | None = None,
        home: str | os.PathLike[str] | None = None,
        actor: str | None = None,
        surface: str = "cli",
        environ: Mapping[str, str] | None = None,
    ) -> Config:
        """The configuration from explicit values, then the environment, then the defaults."""
        env = os.environ if environ is None else environ
        located = Home.locate(home, env)
        url = store or env.get("CORRAL_STORE") or located.default_store_url
        return cls(
            located,
            url,
            actor,
            surface,
            events_keep=env.get("CORRAL_EVENTS_KEEP") or None,
            mesh_retention=env.get("CORRAL_MESH_RETENTION") or None,
        )


class Runtime:
    """corral assembled over one configuration; every piece is opened on first use."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self._store: Store | None = None
        self._library: Library | None = None
        self._kinds: Kinds | None = None
        self._service: Service | None = None
        self._hosts: dict[str, AgentHost] = {}
        self._credentials: CredentialFiles | None = None
        self.contain_plan_paths: Callable[[dict[str, Any], tuple[str, ...]], None] | None = None
        """Set by a surface that confines paths (``corral serve``): the plans component calls it with each
        step's path arguments; it raises to refuse. None: paths are not confined."""

    @classmethod
    def open(cls, config: Config | None = None) -> Runtime:
        """A runtime over ``config`` (default: :meth:`Config.load` from the environment)."""
        return cls(config or Config.load())

    # --- what it is made of -------------------------------------------------------------------------

    @property
    def home(self) -> Home:
        return self.config.home

    @property
    def store_url(self) -> str:
        return self.config.store_url

    @property
    def library(self) -> Library:
        """The machine definitions (built-in machines; the compiled tables cached under the home)."""
        if self._library is None:
            from runner.definitions.library import Library

            self._library = Library.default(cache_dir=self.home.cache / "specs")
        return self._library

    @property
    def kinds(self) -> Kinds:
        """Agent kinds: built-ins, then $CORRAL_HOME/agents.yaml, then ./.corral/agents.yaml."""
        if self._kinds is None:
            from runner.agents.kinds import Kinds, config_files

            self._kinds = Kinds.load(config_files(self.home.root), cache_dir=self.home.cache / "config")
        return self._kinds

    @property
    def store(self) -> Store:
        """The store, opened through the store registry (the state home is created first)."""
        if self._store is None:
            from runner.store import open_store

            self.home.ensure()
            self._store = open_store(self.store_url)
        return self._store

    @property
    def service(self) -> Service:
        """corral's operations over the store, the library, the hosts and the kinds."""
        if self._service is None:
            from runner.service import Service

            self._service = Service(
                self.store,
                self.library,
                actor=self.config.acting_as,
                hosts=self.host,
                kinds=lambda: self.kinds,
                plans=self._plans,
                mesh_retention_seconds=self._mesh_retention(),
            )
        return self._service

    def _mesh_retention(self) -> float | None:
        """``CORRAL_MESH_RETENTION`` in seconds (None: the mesh's default); a bad value is ``input_invalid``."""
        if self.config.mesh_retention is None:
            return None
        from runner.service.events import parse_duration

        return parse_duration(self.config.mesh_retention, "mesh_retention").total_seconds()

    def _plans(self, service: Service) -> Plans:
        """The plans component: the packaged and local recipes, the credential files as the keeper,
        the registered step operations, snapshots for sandboxed validation under the home (created
        when a step needs them: reading plans creates nothing)."""
        from runner.definitions.recipes import RecipeLibrary
        from runner.plans.ops import OPERATIONS
        from runner.service.plans import Plans

        scratch = self.home.root / "snapshots"
        return Plans(
            service,
            RecipeLibrary(checked=self.library.checked),  # parses and schema verdicts kept by content
            self.credentials.keeper(),
            OPERATIONS,
            scratch=scratch,
            paths=self._contain_plan_paths,
        )

    def _contain_plan_paths(self, args: dict[str, Any], names: tuple[str, ...]) -> None:
        """:attr:`contain_plan_paths`, read when a step is checked (a surface may set it after the plans
        component was made)."""
        if self.contain_plan_paths is not None:
            self.contain_plan_paths(args, names)

    def write_review_pack(self, out_dir: Path) -> Written:
        """Write the review pack (every machine and recipe, drawn and tabulated) into ``out_dir``:
        presentation over this runtime's library and the packaged and local recipes."""
        from runner.definitions.recipes import RecipeLibrary
        from runner.presentation.pack import write

        return write(out_dir, self.library, RecipeLibrary(checked=self.library.checked))

    def host(self, name: str) -> AgentHost:
        """The agent host called ``name``, opened once per runtime through the host registry.

        Raises:
            InputError: ``host``: no registered host has that name.
        """
        if name not in self._hosts:
            from runner.agents.hosts import HostContext, open_host

            self._hosts[name] = open_host(name, HostContext(self.store, self.home.ensure, self.kinds))
        return self._hosts[name]

    @property
    def credentials(self) -> CredentialFiles:
        """The controllers' credential files under the state home."""
        if self._credentials is None:
            self._credentials = CredentialFiles(self)
        return self._credentials

    # --- lifetime -----------------------------------------------------------------------------------

    def close(self) -> None:
        """Close the store (hosts hold nothing that outlives a call)."""
        if self._store is not None:
            self._store.close()
            self._store = None
            self._service = None
            self._hosts.clear()

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


class CredentialFiles:
    """A controller's credential between commands: a 0600 file in the state home's 0700 directory.

    Every path that acts with a credential loads it here: an unsafe or malformed file is refused, a
    caller outside a ``--bind-process`` binding is refused (``caller_not_controller``), and a grant left
    pending by a crash is settled against the lease as the store has it (:mod:`runner.credentials`).
    """

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
        self._ref: StoreRef | None = None

    def path(self, controller_id: str, explicit: Path | None = None) -> Path:
        """``explicit`` (``--credential``), else ``<home>/credentials/<controller>.json``."""
        from runner import credentials

        if explicit is not None:
            return explicit
        return credentials.path_for(self._runtime.home.ensure("credentials"), controller_id)

    def store_ref(self) -> StoreRef:
        """What a credential file records of the store: its id and its URL without a password (the
        store is opened to read its id; a store without one is known by its URL alone)."""
        if self._ref is None:  # a store's id never changes: read once per runtime
            from runner.credentials import StoreRef, canonical_url

            store_id = self._runtime.store.info().get("store_id")
            self._ref = StoreRef(canonical_url(self._runtime.store_url), str(store_id) if store_id else None)
        return self._ref

    def _lease(self, controller_id: str) -> Any:
        from runner.fence import instance_id

        return self._runtime.store.get(instance_id(controller_id))

    def load(self, controller_id: str, explicit: Path | None = None) -> Credential:
        """The credential to act with.

        Raises:
            CredentialError: ``credential_missing``, ``credential_insecure``, ``credential_corrupt``,
                ``credential_store_mismatch``.
            RefusedError: ``caller_not_controller``.
        """
        from runner import credentials

        return credentials.load(
            self.path(controller_id, explicit),
            controller_id,
            self.store_ref(),
            lease=lambda: self._lease(controller_id),
        )

    def grant(
        self,
        controller_id: str,
        path: Path,
        fire: Callable[[Proposal], G],
        *,
        binding: Binding | None = None,
        keep_binding: bool = False,
    ) -> G:
        """Run a grant (acquire, resume, takeover) with its credential saved first, crash-safely."""
        from runner import credentials

        lease = self._lease(controller_id)
        return credentials.grant(  # type: ignore[type-var]
            path, controller_id, self.store_ref(), lease, fire, binding=binding, keep_binding=keep_binding
        )

    def discard(self, path: Path, controller_id: str, credential: Credential) -> bool:
        """Remove the file only if it still holds ``credential``'s grant (after a release)."""
        from runner import credentials

        return credentials.discard(path, controller_id, self.store_ref(), credential)

    def keeper(self) -> FileKeeper:
        """The keeper plans use between steps: the same files as ``corral controller`` (the directory
        is created, private, when a credential is first saved)."""
        from runner.plans.keeper import FileKeeper

        return FileKeeper(self._runtime.home.credentials, self.store_ref())
