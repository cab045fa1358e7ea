"""One MCP tool call's context (:class:`Call`): the runtime, where its credentials are kept, and its
progress; and :class:`FileKeeper`, the credentials kept as the CLI keeps them.

A handler gets its Call: it reaches the service through it, takes a controller's credential from
it (never from the caller), and a wait reports what it watches through it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

import anyio.to_thread

from runner.errors import CorralError, CredentialError, InputError, RefusedError

if TYPE_CHECKING:
    from runner.fence import Credential
    from runner.runtime import Runtime as App

T = TypeVar("T")


class FileKeeper:
    """Credentials kept as the CLI keeps them: a 0600 file per controller in the state home."""

    def __init__(self, runtime: App) -> None:
        self.files = runtime.credentials

    def load(self, controller_id: str) -> Credential:
        return self.files.load(controller_id)

    def grant(self, controller_id: str, fire: Callable[[Any], T], keep_binding: bool = False) -> T:
        from runner.service.checks import check_controller_id

        check_controller_id(controller_id)  # before a path is made from it
        path = self.files.path(controller_id)
        return self.files.grant(controller_id, path, fire, binding=None, keep_binding=keep_binding)

    def discard(self, controller_id: str, credential: Credential) -> None:
        self.files.discard(self.files.path(controller_id), controller_id, credential)


class Call:
    """One tool call: the runtime, where its credentials are kept (``keeper``: the state home's files
    for MCP, the request's header for HTTP), and the call's progress."""

    def __init__(self, runtime: App, tool: Any, keeper: Any = None) -> None:
        # tool: the runner.mcp.tool.Tool called (typed loosely: the tools' module imports this one)
        self.runtime = runtime
        self.tool = tool
        self.keeper = keeper if keeper is not None else FileKeeper(runtime)
        self._watch: Callable[[], dict[str, Any]] | None = None
        self._events: list[dict[str, Any]] = []
        self._events_lock = threading.Lock()
        self._agents: list[dict[str, Any]] | None = None
        self._resolve: Callable[[], list[tuple[str, str, str]]] | None = None
        self._followed: dict[str, tuple[str, str]] = {}
        self._runs: dict[str, tuple[int, int, bool]] = {}
        self._pending: dict[str, list[str]] = {}

    @property
    def service(self) -> Any:
        return self.runtime.service

    # --- credentials -----------------------------------------------------------------------------------

    def credential(self, controller_id: str, *, releasing: bool = False) -> Credential:
        """The controller's credential (the CLI's ``load_credential``; a second release is ``lease_released``)."""
        from runner.service.checks import check_controller_id

        check_controller_id(controller_id)  # before a path is made from it: "/x/y" would name a file elsewhere
        try:
            return self.keeper.load(controller_id)
        except CredentialError as exc:
            if releasing and exc.code == "credential_missing":
                lease = self.service.controller.controller_lease(controller_id)
                if lease is not None and lease.state == "released":
                    raise RefusedError(
                        f"the lease of controller {controller_id!r} was already released at "
                        f"{lease.data.get('released_at')} (checkpoint {lease.data.get('checkpoint_ref')!r}); "
                        "nothing to release",
                        code="lease_released",
                        controller_id=controller_id,
                        released_at=lease.data.get("released_at"),
                    ) from None
            raise

    def grant(self, controller_id: str, fire: Callable[[Any], T], keep_binding: bool = False) -> T:
        """A grant (acquire, resume, takeover) with its credential kept first, crash-safely."""
        return self.keeper.grant(controller_id, fire, keep_binding)

    def discard(self, controller_id: str, credential: Credential) -> None:
        self.keeper.discard(controller_id, credential)

    # --- waits: threads, progress ---------------------------------------------------------------------

    async def in_thread(self, func: Callable[..., T], *args: Any) -> T:
        return await anyio.to_thread.run_sync(func, *args)

    def watching(self, snapshot: Callable[[], dict[str, Any]]) -> None:
        """What each progress notification of this wait reports beside the elapsed time."""
        self._watch = snapshot

    def following(self, resolve: Callable[[], list[tuple[str, str, str]]]) -> None:
        """The agents whose runs' progress (tool calls, file changes) this wait's notifications carry:
        ``resolve()`` gives ``(label, host, pane_id)`` for each it can find (called until all are)."""
        self._resolve = resolve

    @property
    def follows(self) -> bool:
        return self._resolve is not None

    def leased_pane(self, name: str) -> list[tuple[str, str, str]]:
        """A leased agent's ``(name, host, pane_id)`` by its name (empty while it is not found)."""
        for agent in self._agents_now():
            if agent.get("name") == name and agent.get("lease_state"):
                return [(name, str(agent.get("host") or "process"), str(agent["pane_id"]))]
        return []

    def poll_progress(self) -> bool:
        """Look for the followed agents' new progress lines (called on a worker thread); whether some
        wait to go out (:meth:`take_progress`).

        Only a run seen working counts: the run an agent had finished when the wait began is its
        baseline, never reported (an ``ask`` before its prompt is delivered sees the previous one).
        Lines found are kept until taken, so a poll cut short by the wait's end loses none."""
        found = self._new_lines()
        with self._events_lock:
            for label, lines in found.items():
                self._pending.setdefault(label, []).extend(lines)
            return bool(self._pending)

    def take_progress(self) -> dict[str, list[str]]:
        with self._events_lock:
            taken, self._pending = self._pending, {}
        return taken

    def _new_lines(self) -> dict[str, list[str]]:
        from runner.service import AgentProgressInput

        if self._resolve is None:
            return {}
        if not self._followed:
            # Looked up until found (the leases and receipts a wait follows exist when it starts, so
            # once is the rule): not every 0.25 s.
            self._agents = None
            try:
                for label, host, pane_id in self._resolve():
                    self._followed.setdefault(label, (host, pane_id))
            except CorralError:
                pass  # not found yet (a receipt not recorded, a lease not listed): looked up again next time
        out: dict[str, list[str]] = {}
        for label, (host, pane_id) in self._followed.items():
            known = self._runs.get(label)
            try:
                found = self.service.waits.progress(AgentProgressInput(pane_id, host, known[1] if known else 0))
                if found is not None and known is not None and found.run != known[0]:
                    known = None  # another run: from its start
                    found = self.service.waits.progress(AgentProgressInput(pane_id, host, 0))
            except CorralError:
                continue  # gone: the wait says so itself
            if found is None:
                continue
            # Invariant: a run is reported only if it was seen working (or is the one after a baseline).
            shown = known[2] if known is not None else (found.running or label in self._runs)
            self._runs[label] = (found.run, found.start + len(found.lines), shown)
            if shown and found.lines:
                out[label] = list(found.lines)
        return out

    def _agents_now(self) -> list[dict[str, Any]]:
        if self._agents is None:
            self._agents = list(self.service.inventory.agents("process"))
        return self._agents

    def agent_status(self, name: str) -> dict[str, Any]:
        """A leased agent's status and cursor by name (progress only: best effort)."""
        for agent in self._agents_now():
            if agent.get("name") == name and agent.get("lease_state"):
                return {"status": agent.get("status"), "seq": agent.get("seq")}
        return {"status": "unknown"}

    def pane_status(self, pane_id: str, host: str) -> dict[str, Any]:
        from runner.service import AgentInput

        observed = self.service.waits.get(AgentInput(pane_id, host))
        return {"target": pane_id, "status": observed.status, "seq": observed.seq}

    def snapshot(self) -> dict[str, Any]:
        """One progress report's details (called on a worker thread)."""
        self._agents = None
        watch = self._watch
        if watch is None:
            return {}
        try:
            return watch()
        except Exception as exc:  # noqa: BLE001 - progress is best effort; the wait reports its own errors
            return {"unavailable": exc.code if isinstance(exc, CorralError) else type(exc).__name__}

    def plan_progress(self) -> Callable[[dict[str, Any]], None]:
        """The plan runner's progress callback: each step event goes out with the next notification."""

        def record(event: dict[str, Any]) -> None:
            kept = {
                k: v for k, v in event.items() if k in ("plan", "event", "step", "attempt", "state", "code", "seconds")
            }
            with self._events_lock:
                self._events.append(kept)

        return record

    def take_events(self) -> list[dict[str, Any]]:
        with self._events_lock:
            events, self._events = self._events, []
        return events

    # --- plans, recipes, drawings ---------------------------------------------------------------------

    def plans(self, runs: bool = True) -> Any:
        if runs:
            self.runtime.home.ensure("credentials")
            self.runtime.home.ensure("snapshots")
        return self.service.plans

    def summary(self, plan: Any) -> dict[str, Any]:
        return cast("dict[str, Any]", self.plans(runs=False).summary(plan))

    def recipes(self) -> dict[str, Any]:
        from runner.service.definitions import recipe_listing

        return recipe_listing()

    def recipe(self, name: str, resolved: bool) -> dict[str, Any]:
        from runner.service.definitions import recipe_document

        return recipe_document(name, resolved)

    def runtime_draw(self, a: dict[str, Any]) -> dict[str, Any]:
        from runner.service.definitions import draw

        chosen = [k for k in ("machine", "recipe", "plan") if a.get(k)]
        if len(chosen) != 1:
            raise InputError(
                "machine", f"give exactly one of machine, recipe, plan (got {', '.join(chosen) or 'none'})"
            )
        if a.get("instance") and not a.get("machine"):
            raise InputError("instance", "instance goes with machine")
        doc, picture, _ = draw(
            self.service,
            self.runtime.library,
            machine=a.get("machine"),
            instance_id=a.get("instance"),
            recipe_name=a.get("recipe"),
            plan_id=a.get("plan"),
            fmt=a["format"],
        )
        return {**doc, "drawing": picture if isinstance(picture, str) else picture.decode("utf-8")}
