"""``corral serve``: the HTTP API, its event streams and the dashboard (``runner.http``)."""

from __future__ import annotations

from pathlib import Path

import click

from runner.cli.app import App, cli, http_server_options


@cli.command()
@http_server_options(8421, token_for="every /api request must send")
@click.option(
    "--workdir-root",
    type=click.Path(file_okay=False, path_type=Path),
    help="Every path input (cwd, worktree) must resolve under this directory.",
)
@click.option(
    "--idempotency-ttl",
    type=int,
    default=24 * 3600,
    show_default=True,
    help="How long an Idempotency-Key's response is kept, in seconds (60-604800).",
)
@click.option("--heartbeat", type=float, default=15.0, hidden=True, help="Seconds between SSE heartbeat comments.")
@click.option("--subscriber-buffer", type=int, default=1000, hidden=True, help="Events buffered per SSE subscriber.")
@click.option(
    "--subscriber-grace", type=float, default=5.0, hidden=True, help="Seconds a full buffer may stay full."
)  # hidden: tunables the tests set small (a fast heartbeat, a slow subscriber's overflow)
@click.pass_obj
def serve(
    app: App,
    listen: str,
    auth_token_file: Path | None,
    allow_hosts: tuple[str, ...],
    max_request_size: int,
    workdir_root: Path | None,
    idempotency_ttl: int,
    heartbeat: float,
    subscriber_buffer: int,
    subscriber_grace: float,
) -> None:
    """Serve the HTTP API (/api, resumable SSE under /api/events) and the live dashboard (/).

    \b
    Example (then open http://127.0.0.1:8421/ for the dashboard; Ctrl-C stops it):
      corral serve --listen 127.0.0.1:8421
    """
    from dataclasses import replace

    from runner.http.serve import serve as run
    from runner.runtime import Runtime

    with Runtime.open(replace(app.config, surface="http")) as runtime:  # events name the surface that acted
        run(
            runtime,
            listen,
            auth_token_file,
            max_request_size,
            workdir_root,
            idempotency_ttl,
            heartbeat=heartbeat,
            subscriber_buffer=subscriber_buffer,
            subscriber_grace=subscriber_grace,
            allow_hosts=allow_hosts,
        )
