"""The HTTP app's state: how the server runs (:class:`Options`) and what it holds (:class:`Server`)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread

from runner.errors import CorralError
from runner.log import get_logger
from runner.mcp.paths import contain_paths

if TYPE_CHECKING:
    from runner.http.keeper import HeaderKeeper
    from runner.runtime import Runtime

log = get_logger("corral.http")

IDEMPOTENCY_TTL_DEFAULT = 24 * 3600
BODY_MAX_DEFAULT = 1 << 20


@dataclass(frozen=True)
class Options:
    """How the server runs (``corral serve``'s options)."""

    token: str | None = None
    max_request_size: int = BODY_MAX_DEFAULT
    workdir_root: Path | None = None
    idempotency_ttl: int = IDEMPOTENCY_TTL_DEFAULT
    heartbeat: float = 15.0
    subscriber_buffer: int = 1000
    subscriber_grace: float = 5.0
    """How long a subscriber's full buffer may stay full before it is disconnected."""
    loopback: bool = True
    allowed_hosts: frozenset[str] = frozenset({"localhost", "127.0.0.1", "::1"})
    """The ``Host`` (and ``Origin``) names answered (:mod:`runner.mcp.hosts`); others are 421/403."""
    check_host: bool = True
    """False on a unix socket, which no browser reaches (the ``Origin`` is still checked)."""


class Server:
    """The app's state: the runtime, the options, the plans it runs in the background."""

    def __init__(self, runtime: Runtime, options: Options) -> None:
        self.runtime = runtime
        self.options = options
        self.group: Any = None
        self.started = time.monotonic()
        # A plan's documents name paths too: its steps' path arguments are contained as a
        # request's are, at submission and again before each step the server runs.
        runtime.contain_plan_paths = self.contain_step_paths

    def contain_step_paths(self, args: dict[str, Any], names: tuple[str, ...]) -> None:
        """:func:`contain_paths` for the path parameters ``names`` of one plan step's arguments."""
        contain_paths(args, self.options.workdir_root, names)

    @property
    def service(self) -> Any:
        return self.runtime.service

    async def call(self, tool_name: str, args: dict[str, Any], keeper: HeaderKeeper) -> dict[str, Any]:
        from runner.mcp.server import call_tool
        from runner.mcp.tools import TOOLS

        async def no_progress(progress: float, total: float | None, message: str) -> None:
            return None

        contain_paths(args, self.options.workdir_root)
        return await call_tool(self.runtime, TOOLS[tool_name], args, no_progress, keeper)

    def run_plan_later(self, plan_id: str, how: str) -> None:
        """Run (or resume) a plan in the server; its event stream shows it, ``GET /api/plans/ID`` its state."""

        async def run() -> None:
            from runner.service.inputs.plans import PlanResumeInput, PlanRunInput

            plans = await anyio.to_thread.run_sync(self._plans)
            try:
                if how == "run":
                    await plans.run(PlanRunInput(plan_id))
                else:
                    await plans.resume(PlanResumeInput(plan_id))
            except CorralError as exc:
                log.warning("plan %s stopped: %s [%s]", plan_id, exc.message, exc.code)
            except Exception as exc:  # noqa: BLE001 - a background run must not take the server down
                log.error("plan %s: unexpected %s: %s", plan_id, type(exc).__name__, exc)

        assert self.group is not None
        self.group.start_soon(run)

    def _plans(self) -> Any:
        self.runtime.home.ensure("credentials")
        self.runtime.home.ensure("snapshots")
        return self.service.plans
