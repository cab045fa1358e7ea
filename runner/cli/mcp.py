"""``corral mcp``: the MCP server (stdio, or streamable HTTP with ``--http``) and ``corral mcp config``."""

from __future__ import annotations

from pathlib import Path

import click
from click.core import ParameterSource

from runner.cli import render
from runner.cli.app import App, cli, http_server_options, json_option
from runner.errors import UsageError

# The clients and scopes of runner.mcp.clients (tests/mcp/test_clients.py checks they agree), named
# here so that serving (`corral mcp`) does not import the config writer.
CLIENTS = ("claude-code", "codex", "opencode")
SCOPES = ("project", "user")


@cli.group(invoke_without_command=True)
@click.option("--http", "http", is_flag=True, help="Serve streamable HTTP (path /mcp) instead of stdio.")
@http_server_options(8420, when="With --http: ", token_for="clients must send")
@click.option(
    "--workdir-root",
    type=click.Path(file_okay=False, path_type=Path),
    help="Every path argument (cwd, worktree, a plan's step paths...) must resolve under this directory.",
)
@click.pass_context
def mcp(
    ctx: click.Context,
    http: bool,
    listen: str,
    auth_token_file: Path | None,
    allow_hosts: tuple[str, ...],
    max_request_size: int,
    workdir_root: Path | None,
) -> None:
    """Serve corral's tools over MCP: stdio by default (what a coordinator launches), or --http."""
    if ctx.invoked_subcommand is not None:
        return
    app: App = ctx.obj
    from dataclasses import replace

    from runner.mcp.server import serve
    from runner.runtime import Runtime

    with Runtime.open(replace(app.config, surface="mcp")) as runtime:  # events name the surface that acted
        serve(
            runtime,
            http=http,
            listen=listen,
            auth_token_file=auth_token_file,
            max_request_size=max_request_size,
            allow_hosts=allow_hosts,
            workdir_root=workdir_root,
        )


@mcp.command(name="config")
@click.option(
    "--client",
    required=True,
    type=click.Choice(CLIENTS),
    help="The coordinator's MCP client whose configuration to print or write.",
)
@click.option(
    "--scope",
    type=click.Choice(SCOPES),
    default="project",
    show_default=True,
    help="project: a file in the project directory (see --dir); user: the client's own file in your home.",
)
@click.option("--write", is_flag=True, help="Merge the entry into the file (nothing else in it changes).")
@click.option(
    "--dir",
    "directory",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="With --scope project: the project directory (default: the git top level of the current "
    "directory, else the current directory).",
)
@json_option
@click.pass_context
def config(ctx: click.Context, client: str, scope: str, write: bool, directory: Path | None, as_json: bool) -> None:
    """Print (or, with --write, merge into the client's file) the entry that launches `corral mcp`.

    It names the absolute path of the installed corral, and passes on --home and --store (given on
    the command line or as $CORRAL_HOME and $CORRAL_STORE) so the client's server uses the same state;
    a store URL with a password is refused (store_url_password). An existing file that does not
    parse is refused (config_invalid) and left untouched; writing the same entry again changes nothing.

    \b
    Example (prints the entry; --write merges it into the project's .mcp.json):
      corral mcp config --client claude-code
    """
    from runner.mcp import clients  # the standard library only: no SDK import for `corral mcp config`

    if directory is not None and scope != "project":
        raise UsageError("--dir goes with --scope project", code="usage")
    parent = ctx.parent
    assert parent is not None and parent.parent is not None, "config is a subcommand of corral mcp"
    if any(
        parent.get_parameter_source(name) not in (None, ParameterSource.DEFAULT)
        for name in ("http", "listen", "auth_token_file", "allow_hosts", "max_request_size", "workdir_root")
    ):
        raise UsageError(
            "the options of `corral mcp` (--http, --listen, ...) do not go with `corral mcp config`", code="usage"
        )
    root = parent.parent
    app: App = ctx.obj
    given = (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)
    home = app.config.home.root if root.get_parameter_source("home_dir") in given else None
    store = root.params.get("store_url") if root.get_parameter_source("store_url") in given else None
    setup = clients.plan(
        client, scope, clients.corral_executable(), clients.server_args(home, store), directory=directory
    )
    outcome = clients.write(setup) if write else None
    if as_json:
        render.emit_json(
            {
                "client": client,
                "scope": scope,
                "path": str(setup.path),
                "command": setup.command,
                "args": setup.args,
                "config": setup.entry,
                "written": bool(outcome and outcome.written),
                "changed": bool(outcome and outcome.changed),
            }
        )
        return
    click.echo(setup.snippet(), nl=False)
    if outcome is None:
        click.echo(f"(for {setup.path}; run again with --write to merge it there)", err=True)
    elif outcome.changed:
        click.echo(f"wrote {setup.path}")
    else:
        click.echo(f"unchanged {setup.path} (it already holds this entry)")
