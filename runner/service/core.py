"""What every component of the service shares: the store, the definitions, the engine, the agent
hosts and kinds, the caller; and the plumbing they all use to act on an agent lease.

Components (:mod:`~runner.service.controller`, :mod:`~runner.service.reviewers`, ...) each take one
:class:`Core` and never inherit from one another. Every method here is synchronous: it reads the
store, fires the engine or calls a host, all of which may block (the SQLite busy retry sleeps, Herdr
runs a subprocess). An async component calls them through ``anyio.to_thread.run_sync``.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar, TypeVarTuple

from runner import fence
from runner.agents.abc import GONE, AgentGoneError, AgentHost, StartOptions
from runner.context import Instance
from runner.definitions.library import Library
from runner.engine import Engine, Request, Result
from runner.errors import CorralError, InputError, NotFoundError, RefusedError
from runner.fence import Credential
from runner.guards.agents import LEASE_MACHINES, LIVE_LEASE_STATES, PANE_LEASE_MACHINES
from runner.service.checks import TOKEN, default_holder
from runner.service.views.leases import AgentLeaseView, CloseResult
from runner.service.views.pages import Page
from runner.service.views.receipts import ReceiptView
from runner.store.abc import Store

if TYPE_CHECKING:
    from runner.agents.kinds import Kinds

AGENT_MACHINES = frozenset({"reviewer", "writer", "adopted", "pane"})  # machines whose instances are agent leases


class AgentOperationError(CorralError):
    """Starting or closing an agent failed; ``details`` says where the lease was left. Inspect the
    host (``corral agents``), then ``reconcile`` or close again.

    Its own category (``agent_operation``: exit 7, HTTP 502), so a coordinator tells an agent host's
    failure from a bug (exit 1, ``internal``)."""

    category = "agent_operation"
    default_code = "agent_operation_failed"


def sha256(text: str) -> str:
    """The SHA-256 of ``text`` (UTF-8), as receipts and closes record a prompt or a capture."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class Core:
    """The state shared by every component of :class:`runner.service.Service`.

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
        self.store = store
        self.library = library
        self.engine = Engine(store, library)
        self.actor = actor or default_holder()
        self._hosts = hosts
        self._kinds = kinds

    # --- what the service runs on ------------------------------------------------------------------------

    def host(self, name: str) -> AgentHost:
        """The agent host called ``name``; ``internal`` if this service was built without hosts."""
        if self._hosts is None:
            raise CorralError("no agent host is configured for this service", code="internal")
        return self._hosts(name)

    @property
    def has_hosts(self) -> bool:
        """Whether this service was given agent hosts at all (status describes them only then)."""
        return self._hosts is not None

    @property
    def kinds(self) -> Kinds:
        """The agent kinds, loaded on first use (imported then: a renew never needs them)."""
        from runner.agents.kinds import Kinds

        if self._kinds is None:
            self._kinds = Kinds.load([])
        elif not isinstance(self._kinds, Kinds):
            self._kinds = self._kinds()
        return self._kinds

    @property
    def store_url(self) -> str:
        """The store's URL (credentials are bound to it); never carries a password."""
        return self.store.url

    def now(self) -> datetime:
        """The store's clock: expiries and ages are judged by it, never by the caller's."""
        return self.store.now()

    # --- requests to the engine ----------------------------------------------------------------------------

    @staticmethod
    def credential_params(credential: Credential) -> dict[str, Any]:
        """The public parts of a credential, as a request's params carry them (and the event log)."""
        return {
            "controller_id": credential.controller_id,
            "lease_id": credential.lease_id,
            "generation": credential.generation,
        }

    def request(
        self,
        instance_id: str,
        trigger: str,
        credential: Credential,
        params: Mapping[str, Any],
        observations: Mapping[str, Any],
        *,
        secrets: Mapping[str, str] | None = None,
        host: AgentHost | None = None,
    ) -> Request:
        """A fenced request: the credential's public parts in params (None values dropped), its token in
        secrets, the agent host as the effects' ``agents`` resource."""
        return Request(
            instance_id=instance_id,
            trigger=trigger,
            params={**self.credential_params(credential), **{k: v for k, v in params.items() if v is not None}},
            secrets={"token": credential.token, **(secrets or {})},
            observations=observations,
            actor=self.actor,
            resources={"agents": host} if host is not None else {},
        )

    def fire_on(
        self,
        machine: str,
        instance_id: str,
        trigger: str,
        credential: Credential,
        params: Mapping[str, Any],
        observations: Mapping[str, Any],
        *,
        secrets: Mapping[str, str] | None = None,
        host: AgentHost | None = None,
    ) -> Result:
        """Fire ``trigger`` on the built-in ``machine``'s instance with a fenced :meth:`request`."""
        request = self.request(instance_id, trigger, credential, params, observations, secrets=secrets, host=host)
        return self.engine.fire(self.library.builtin(machine), request)

    def check_fence(self, credential: Credential) -> None:
        """A read-only fence check for operations that change nothing (waits, dry runs)."""
        lease = self.store.get(fence.instance_id(credential.controller_id))
        rejection = fence.check(lease, credential, self.store.now())
        if rejection is not None:
            raise RefusedError(rejection.message, code=rejection.code, **dict(rejection.details))

    # --- observing agents ------------------------------------------------------------------------------

    @staticmethod
    def observe(host: AgentHost, pane_id: str | None) -> dict[str, Any]:
        """The agent in ``pane_id`` now, as guards read it; ``GONE`` if there is none."""
        if pane_id is None:
            return dict(GONE)
        try:
            return host.get(pane_id).to_dict()
        except AgentGoneError:
            return dict(GONE)

    def capture(
        self, host: AgentHost, pane_id: str, lines: int, first: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], str, dict[str, Any]]:
        """Observe, read the output, observe again: the guards compare the two observations."""
        before = first if first is not None else self.observe(host, pane_id)
        output = ""
        if before.get("exists"):
            try:
                output = host.read(pane_id, lines)
            except AgentGoneError:
                output = ""
        return before, output, self.observe(host, pane_id)

    # --- agent leases ------------------------------------------------------------------------------------

    def lease_by_name(
        self,
        controller_id: str,
        name: str,
        states: tuple[str, ...] = ("active",),
        machines: tuple[str, ...] = LEASE_MACHINES,
    ) -> Instance:
        """This controller's one lease named ``name`` in ``states``.

        Raises:
            NotFoundError: ``target_unknown``.
            RefusedError: ``target_ambiguous``; ``lease_adopted`` for a name only an adoption holds.
        """
        found = [
            lease
            for machine in machines
            for lease in self.store.find(machine, states)
            if lease.data.get("name") == name and lease.data.get("controller_id") == controller_id
        ]
        if not found:
            self.refuse_adopted(controller_id, name)
            raise NotFoundError(
                f"controller {controller_id!r} holds no {' or '.join(states)} lease named {name!r}",
                code="target_unknown",
                target=name,
                states=list(states),
            )
        if len(found) > 1:
            raise RefusedError(
                f"{name!r} names {len(found)} leases", code="target_ambiguous", leases=[lease.id for lease in found]
            )
        return found[0]

    def lease_by_id(
        self, controller_id: str, name: str, lease_id: str, states: tuple[str, ...], machine: str
    ) -> Instance:
        """The lease ``lease_id`` if it is this controller's ``machine`` lease named ``name`` in one of
        ``states``: a caller that recorded which lease it created acts on that one, never on another
        lease that happens to carry the same name."""
        lease = self.store.get(lease_id)
        if lease is None or lease.machine != machine:
            raise NotFoundError(f"no {machine} lease {lease_id!r}", code="target_unknown", target=name, lease=lease_id)
        if lease.data.get("name") != name or lease.data.get("controller_id") != controller_id:
            raise RefusedError(
                f"lease {lease_id!r} is {lease.data.get('name')!r} of controller "
                f"{lease.data.get('controller_id')!r}, not {name!r} of {controller_id!r}",
                code="lease_mismatch",
                lease=lease_id,
                target=name,
            )
        if lease.state not in states:
            raise NotFoundError(
                f"lease {lease_id!r} ({name!r}) is {lease.state}, not {' or '.join(states)}",
                code="target_unknown",
                target=name,
                lease=lease_id,
                state=lease.state,
            )
        return lease

    def lease_named(
        self, controller_id: str, name: str, lease_id: str | None, states: tuple[str, ...], machine: str
    ) -> Instance:
        """:meth:`lease_by_id` when the caller names the instance, else :meth:`lease_by_name`."""
        if lease_id is not None:
            return self.lease_by_id(controller_id, name, lease_id, states, machine)
        return self.lease_by_name(controller_id, name, states, (machine,))

    def refuse_adopted(self, controller_id: str, name: str) -> None:
        """A name that only an adopted lease holds is refused as such: an adoption is for cleanup only
        (``corral adopted close|release``), never a target of prompts, waits or reviewer/writer verbs."""
        for lease in self.store.find("adopted", LIVE_LEASE_STATES):
            if lease.data.get("name") == name and lease.data.get("controller_id") == controller_id:
                raise RefusedError(
                    f"{name!r} is an adopted pane ({lease.id}): adoption allows only `corral adopted close` and "
                    "`corral adopted release`, never prompts",
                    code="lease_adopted",
                    target=name,
                    lease=lease.id,
                )

    def lease_view(self, instance: Instance) -> AgentLeaseView:
        """An agent lease instance as listings show it (its machine's public data only)."""
        spec = self.library.builtin(instance.machine)
        return AgentLeaseView(
            instance.id, instance.machine, instance.state, instance.version, spec.public_data(instance.data)
        )

    def lease(self, instance_id: str) -> AgentLeaseView | None:
        """The agent lease (reviewer, writer, adopted, pane) with this instance id, or None."""
        found = self.store.get(instance_id)
        if found is None or found.machine not in AGENT_MACHINES:
            return None
        return self.lease_view(found)

    def leases(
        self,
        machine: str,
        states: tuple[str, ...] | None,
        controller_id: str | None,
        *,
        after: str | None = None,
        limit: int | None = None,
    ) -> Page[AgentLeaseView]:
        """Leases of ``machine`` in ``states`` (None: every state), of one controller if given; a page
        of at most ``limit`` after the instance id ``after`` (``next_after``: the last one's id)."""
        keep = None if controller_id is None else (lambda i: i.data.get("controller_id") == controller_id)
        found, more = self.page(machine, states, after=after, limit=limit, keep=keep)
        return Page(self.with_runs([self.lease_view(i) for i in found]), found[-1].id if more else None)

    def with_runs(self, views: list[AgentLeaseView]) -> list[AgentLeaseView]:
        """The views of leases whose agents a driver runs (claude, codex), each with what its runs
        learnt: the conversation's ``session_id``, its ``spend``, and how its permissions are enforced
        (``confinement``, the driver's word for its role: ``cli-permissions`` for Claude Code,
        ``codex-sandbox:read-only`` / ``codex-sandbox:workspace-write`` for Codex, ``unconfined`` for a
        kind that widens them). One slot read per host."""
        candidates = [
            view
            for view in views
            if view.state in ("active", "closing", "close_failed", "releasing", "release_failed")
            and view.data.get("host") == "process"
            and isinstance(view.data.get("pane_id"), str)
            and isinstance(view.data.get("kind"), str)
        ]
        if not candidates or not self.has_hosts:
            return views  # (the drivers are not imported for a listing with no live agent: cold start)
        from runner.agents.drivers import RunSpec, driver

        driven: dict[str, list[AgentLeaseView]] = {}
        for view in candidates:
            name = str(view.data["kind"])
            if name in self.kinds.names() and driver(self.kinds.get(name).driver).structured:
                driven.setdefault("process", []).append(view)
        if not driven:
            return views
        enriched: dict[str, AgentLeaseView] = {}
        for host_name, group in driven.items():
            seen = self.host(host_name).get_many([str(v.data["pane_id"]) for v in group])
            for view in group:
                observed = seen.get(str(view.data["pane_id"]))
                kind = self.kinds.get(str(view.data["kind"]))
                extra = {
                    "session_id": observed.session_id if observed is not None else None,
                    "spend": dict(observed.spend) if observed is not None and observed.spend else None,
                    "confinement": driver(kind.driver).confinement(
                        RunSpec(role=view.machine, unconfined=kind.unconfined)
                    ),
                }
                enriched[view.id] = AgentLeaseView(
                    view.id, view.machine, view.state, view.version, {**view.data, **extra}
                )
        return [enriched.get(v.id, v) for v in views]

    def page(
        self,
        machine: str,
        states: Iterable[str] | None,
        *,
        after: str | None = None,
        limit: int | None = None,
        keep: Callable[[Instance], bool] | None = None,
    ) -> tuple[list[Instance], bool]:
        """Instances of ``machine`` in ``states`` after the id ``after`` that ``keep`` accepts, at most
        ``limit`` of them, in id order; and whether more follow the last. Keyset pages of the store
        (:meth:`Reader.find`): only the rows of the page (and, with ``keep``, those it skips) are read."""
        wanted = None if states is None else tuple(states)
        if limit is None:
            found = self.store.find(machine, wanted, after=after)
            return [i for i in found if keep is None or keep(i)], False
        kept: list[Instance] = []
        batch = limit + 1 if keep is None else max(limit + 1, 256)
        cursor = after
        while True:
            chunk = self.store.find(machine, wanted, after=cursor, limit=batch)
            for instance in chunk:
                if keep is None or keep(instance):
                    kept.append(instance)
                    if len(kept) > limit:
                        return kept[:limit], True
            if len(chunk) < batch:
                return kept, False
            cursor = chunk[-1].id

    def settled(self, result: Result, code: str, doing: str) -> AgentLeaseView:
        """The lease after a two-phase start or close; :class:`AgentOperationError` unless it succeeded."""
        view = self.lease_view(result.instance)
        if result.outcome == "failure" and result.instance.data.get("failure_code") == "agent_kind_unknown":
            # The host refused the kind (Herdr does not run it) and closed the pane it had made: nothing
            # is left behind, so it is the guard's refusal, not an agent operation that failed.
            raise RefusedError(
                f"{doing} was refused: {result.instance.data.get('failure')}",
                code="agent_kind_unknown",
                kind=result.instance.data.get("kind"),
                started=False,
                lease=view.to_dict(),
            )
        if result.outcome != "success":
            raise AgentOperationError(
                f"{doing} failed; the lease is {result.instance.state}: {result.instance.data.get('failure')}",
                code=code,
                lease=view.to_dict(),
            )
        return view

    def agent_options(
        self,
        kind: str,
        model: str | None,
        effort: str | None,
        host: str = "process",
        *,
        role: str | None = None,
        limits: Mapping[str, Any] | None = None,
        owned: tuple[str, ...] = (),
        locked: tuple[str, ...] = (),
        unconfined_reason: str | None = None,
    ) -> dict[str, Any]:
        """The start options a lease records and its agent's driver reads: model and effort (checked
        against the kind), the role, a writer's scopes, the limits, an operator's reason to run it
        without the process host's confinement.

        Raises:
            SandboxUnavailableError: ``sandbox_unavailable``: on the process host, Bubblewrap cannot
                start for a writer and no ``unconfined_reason`` was given (nothing was started); a
                reviewer or bare agent then starts with the reason recorded as its own.
        """
        recorded: dict[str, Any] = dict(self._agent_options(kind, model, effort, host))
        if role is not None:
            recorded["role"] = role
        if role == "writer":
            recorded["owned"] = list(owned)
            recorded["locked"] = list(locked)
        recorded.update(limits or {})
        if unconfined_reason is not None:
            recorded["unconfined_reason"] = unconfined_reason
        elif host == "process" and kind in self.kinds.names():
            from runner.sandbox import confine
            from runner.sandbox.bwrap import SandboxUnavailableError

            try:
                confine.probe(self.kinds.get(kind).network)  # cached: one real start per process
            except SandboxUnavailableError as exc:
                if role == "writer":
                    raise
                # A reader (a reviewer, a bare agent) still runs, kept read-only by its CLI's own
                # permissions alone: recorded, and shown by status as unconfined with this reason.
                recorded["unconfined_reason"] = f"Bubblewrap unavailable ({exc.message})"
        return recorded

    def _agent_options(self, kind: str, model: str | None, effort: str | None, host: str = "process") -> dict[str, str]:
        """The start options to record; --model/--effort are refused for a kind that does not take them
        (unknown kinds: the guard says so). On the process host the kind's executable must exist: a
        missing one would only show as a run that exits 127, which looks like a finished review."""
        if kind in self.kinds.names():
            spec = self.kinds.get(kind)
            options = StartOptions(model=model, effort=effort)
            spec.check_options(options)
            if host == "process":
                import shutil

                command = spec.command(options)[0]
                searched = os.environ.get("PATH", os.defpath)
                if shutil.which(command, path=searched) is None:
                    raise InputError(
                        "kind",
                        f"the {kind!r} agent's command {command!r} is not an executable on PATH ({searched}); "
                        "install it, or configure the kind's argv in agents.yaml",
                        code="agent_command_missing",
                        command=command,
                        path=searched.split(os.pathsep),
                    )
        return {k: v for k, v in (("model", model), ("effort", effort)) if v is not None}

    @staticmethod
    @contextlib.contextmanager
    def starting() -> Iterator[dict[str, Any]]:
        """What a start records in its intent, before the host creates anything: a nonce the host keeps
        with the pane, and this process and call as its starter (so reconcile never races a start that
        is still running, and settles one whose call ended without recording its outcome, even in a
        process that lives on). The call is marked running for the ``with`` block."""
        from runner import lockstatus

        nonce = uuid.uuid4().hex
        with lockstatus.attempt(nonce) as running:
            starter = lockstatus.current()
            if running.marked:
                starter["attempt"] = nonce
            yield {"start_nonce": nonce, "starter": starter}

    def close_lease(
        self,
        lease: Instance,
        trigger: str,
        credential: Credential,
        params: dict[str, Any],
        lines: int,
        observe: Callable[[], Mapping[str, Any]] | None = None,
    ) -> CloseResult:
        """Capture the agent's output (identity and cursor read before and after), then fire ``trigger``
        (a reviewer's ``close``, a writer's ``release``), whose effect closes the pane. ``observe`` adds
        facts read after the capture (a writer's git state)."""
        host = self.host(lease.data["host"])
        before, output, after = self.capture(host, lease.data["pane_id"], lines)
        result = self.fire_on(
            lease.machine,
            lease.id,
            trigger,
            credential,
            params,
            {
                "agent": before,
                "agent_after": after,
                "capture_sha256": sha256(output),
                **(observe() if observe else {}),
            },
            host=host,
        )
        return CloseResult(self.settled(result, "agent_close_failed", "closing the pane"), output)

    def find_pane(self, host: AgentHost, lease: Instance) -> tuple[dict[str, Any], str | None]:
        """The pane a lease stands for: the one it recorded, or, for a start killed before it recorded
        one, the single live pane no other lease holds with its name, kind, cwd and start nonce.
        Returns the observation (``GONE`` if none) and, when several panes match, why none was chosen."""
        pane_id = lease.data.get("pane_id")
        if pane_id is not None:
            return self.observe(host, pane_id), None
        held = {
            other.data.get("pane_id")
            for machine in PANE_LEASE_MACHINES
            for other in self.store.find(machine, LIVE_LEASE_STATES)
            if other.data.get("host") == lease.data.get("host")
        }
        nonce = lease.data.get("start_nonce")
        found = [
            o
            for o in host.find(
                str(lease.data.get("name")), str(lease.data.get("kind")), str(lease.data.get("cwd")), nonce
            )
            if o.pane_id not in held
        ]
        exact = [o for o in found if nonce is not None and o.nonce == nonce]
        if exact:
            found = exact
        if not found:
            return dict(GONE), None
        if len(found) > 1:
            panes = ", ".join(o.pane_id for o in found)
            return (
                dict(GONE),
                f"{len(found)} unleased panes ({panes}) match this start: close the right one (`corral agent close`)",
            )
        return {**found[0].to_dict(), "nonce": found[0].nonce}, None

    # --- receipts ----------------------------------------------------------------------------------------

    def receipt_instance(self, token: str) -> Instance:
        """The receipt instance with this token.

        Raises:
            NotFoundError: ``receipt_unknown``.
        """
        match = TOKEN.match(token)
        found = self.store.get(f"receipt/{match.group(1)}") if match else None
        if found is None:
            raise NotFoundError(f"no receipt {token}", code="receipt_unknown", receipt=token)
        return found

    @staticmethod
    def receipt_view(instance: Instance) -> ReceiptView:
        """A receipt instance as a view (its data carries no prompt and no output)."""
        return ReceiptView(instance.state, instance.version, dict(instance.data))


T = TypeVar("T")
Ts = TypeVarTuple("Ts")


async def in_thread(func: Callable[[*Ts], T], *args: *Ts) -> T:
    """``func(*args)`` on a worker thread (``anyio.to_thread.run_sync``): how an async operation calls
    anything that may block (a store read or transaction, the engine, a synchronous host call), so an
    event loop is never blocked by the SQLite busy retry or a subprocess. Not abandoned on
    cancellation: a transition that started is always let finish (and recorded)."""
    import anyio.to_thread  # anyio costs a cold CLI ~35 ms: only the commands that wait import it

    return await anyio.to_thread.run_sync(func, *args)
