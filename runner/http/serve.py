"""Running the HTTP app on uvicorn (``corral serve``)."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from runner.errors import InputError

if TYPE_CHECKING:
    from runner.runtime import Runtime


def serve(
    runtime: Runtime,
    listen: str,
    auth_token_file: Path | None,
    max_request_size: int,
    workdir_root: Path | None,
    idempotency_ttl: int,
    *,
    heartbeat: float = 15.0,
    subscriber_buffer: int = 1000,
    subscriber_grace: float = 5.0,
    allow_hosts: tuple[str, ...] = (),
) -> None:
    """Check the options, bind the socket, and serve until stopped (SIGINT/SIGTERM end it cleanly)."""
    from runner.http.server import Options
    from runner.mcp.hosts import allowed_names
    from runner.mcp.listen import serving

    endpoint, token = serving(listen, auth_token_file, max_request_size)
    names = allowed_names(endpoint.host, endpoint.loopback, allow_hosts)
    if not 60 <= idempotency_ttl <= 7 * 86400:
        raise InputError("idempotency_ttl", f"{idempotency_ttl} is not from 60 s to 7 days")
    if not 0.01 <= heartbeat <= 3600:
        raise InputError("heartbeat", f"{heartbeat} is not from 0.01 s to 1 h")
    if not 1 <= subscriber_buffer <= 1_000_000:
        raise InputError("subscriber_buffer", f"{subscriber_buffer} is not from 1 to 1,000,000 events")
    if not 0.01 <= subscriber_grace <= 3600:
        raise InputError("subscriber_grace", f"{subscriber_grace} is not from 0.01 s to 1 h")
    if workdir_root is not None and not workdir_root.is_dir():
        raise InputError("workdir_root", f"{workdir_root} is not a directory")
    options = Options(
        token=token,
        max_request_size=max_request_size,
        workdir_root=workdir_root.resolve() if workdir_root is not None else None,
        idempotency_ttl=idempotency_ttl,
        loopback=endpoint.loopback,
        allowed_hosts=names,
        check_host=endpoint.kind == "tcp",
        heartbeat=heartbeat,
        subscriber_buffer=subscriber_buffer,
        subscriber_grace=subscriber_grace,
    )
    runtime.store  # noqa: B018 - open (and migrate) the store before listening: a bad store fails here
    anyio.run(_serve, runtime, options, endpoint)


async def _serve(runtime: Runtime, options: Any, endpoint: Any) -> None:
    import uvicorn

    from runner.http.app import build_app
    from runner.mcp.listen import bound, hostport

    app = build_app(runtime, options)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on", ws="none")

    class Web(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            # uvicorn re-raises a SIGTERM it caught once it has shut down, which ends the process before
            # bound()'s cleanup runs: remove the unix socket first, so no stale socket file is left.
            with super().capture_signals():
                try:
                    yield
                finally:
                    if endpoint.kind == "unix":
                        with contextlib.suppress(OSError):
                            os.unlink(endpoint.path)

    web = Web(config)
    with bound(endpoint) as sock:
        where = f"unix://{endpoint.path}" if endpoint.kind == "unix" else f"http://{hostport(sock)}"
        sys.stderr.write(f"corral serve: serving {where} (API under /api, dashboard at /)\n")
        sys.stderr.flush()
        await web.serve(sockets=[sock])
