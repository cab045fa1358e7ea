"""``corral mcp``: the MCP server (stdio, or streamable HTTP with ``--http``) and ``corral mcp config``."""

from __future__ import annotations

from pathlib import Path

import click

from runner.cli.app import App, cli


@cli.group(invoke_without_command=True)
@click.option("--http", "http", is_flag=True, help="Serve streamable HTTP (path /mcp) instead of stdio.")
@click.option(
    "--listen",
    metavar="ADDR",
    default="127.0.0.1:8420",
    show_default=True,
    help="With --http: HOST:PORT, or unix:///path for a unix socket (created 0600).",
)
@click.option(
    "--auth-token-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="With --http: a file holding the bearer token clients must send (required off loopback).",
)
@click.option(
    "--max-request-size",
    type=int,
    default=1 << 20,
    show_default=True,
    help="With --http: the largest request body in bytes (larger ones are answered 413).",
)
@click.pass_context
def mcp(ctx: click.Context, http: bool, listen: str, auth_token_file: Path | None, max_request_size: int) -> None:
    """Serve corral's tools over MCP: stdio by default (what a coordinator launches), or --http."""
    if ctx.invoked_subcommand is not None:
        return
    app: App = ctx.obj
    from runner.mcp.server import serve

    serve(app, http=http, listen=listen, auth_token_file=auth_token_file, max_request_size=max_request_size)
