"""CLI commands for adopted panes: ``corral adopt`` and ``corral adopted list|close|release|reconcile``.

An adoption is a cleanup-only lease over an agent corral did not start: it can be closed (fenced, at a
settled cursor, its output captured first) or released (the pane left running), never prompted.
Output as in :mod:`runner.cli.app`: text for people, ``--json`` for programs.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

from runner.cli import render
from runner.cli.agents import host_option, lines_option
from runner.cli.app import (
    App,
    cli,
    controller_option,
    credential_option,
    fenced,
    json_option,
    load_credential,
    page_options,
)


@cli.command()
@click.argument("target")
@controller_option
@click.option("--expect-name", "expected_name", required=True, help="The agent's name, as you saw it.")
@click.option("--expect-kind", "expected_kind", required=True, help="Its kind, as you saw it.")
@click.option("--expect-cwd", "expected_cwd", required=True, help="Its working directory, as you saw it.")
@click.option("--expect-seq", "expected_seq", type=int, required=True, help="The cursor you saw it settled at.")
@host_option("The agent host the pane is on.")
@credential_option
@json_option
@click.pass_obj
def adopt(
    app: App,
    target: str,
    controller_id: str,
    expected_name: str,
    expected_kind: str,
    expected_cwd: str,
    expected_seq: int,
    host_name: str,
    credential_path: Path | None,
    as_json: bool,
) -> None:
    """Adopt the agent in pane TARGET (made outside corral) for cleanup only: close or release, never prompts.

    Refused unless the pane holds exactly the agent you name, settled at --expect-seq, the pane is not
    protected ($HERDR_PANE_ID on herdr, $CORRAL_PROTECTED_PANES) and no live lease holds it.
    """

    lease = fenced(
        app,
        "adopt",
        controller_id,
        credential_path,
        target,
        expected_name,
        expected_kind,
        os.path.abspath(expected_cwd),
        expected_seq,
        host_name,
    )
    if as_json:
        render.emit_result("adopt", lease)
        return
    click.echo(
        f"adopted {expected_name} ({expected_kind}) in pane {target} at seq {expected_seq}: lease {lease.id} "
        "(close or release only)"
    )


@cli.group()
def adopted() -> None:
    """Adopted panes: cleanup-only leases over agents corral did not start."""


@adopted.command(name="list")
@click.option("--controller", "controller_id", help="Only this controller's adoptions.")
@click.option("--all", "include_ended", is_flag=True, help="Include closed and released ones.")
@page_options
@json_option
@click.pass_obj
def adopted_list(
    app: App, controller_id: str | None, include_ended: bool, limit: int | None, after: str | None, as_json: bool
) -> None:
    """Adopted leases (live ones unless --all); pages in lease id order with --limit and --after."""
    from runner.service import AdoptedListInput

    leases = app.service.adopted.leases(AdoptedListInput(controller_id, include_ended, after, limit))
    render.listing(
        "adopted list",
        leases,
        as_json,
        ["name", "state", "kind", "pane", "host", "controller", "cwd", "lease"],
        lambda lease: (
            lease.data.get("name"),
            lease.state,
            lease.data.get("kind"),
            lease.data.get("pane_id"),
            lease.data.get("host"),
            lease.data.get("controller_id"),
            lease.data.get("cwd"),
            lease.id,
        ),
    )


@adopted.command(name="close")
@click.argument("target", metavar="NAME_OR_PANE")
@controller_option
@click.option("--expect-seq", "expected_seq", type=int, required=True, help="The cursor you saw it settled at.")
@lines_option
@credential_option
@json_option
@click.pass_obj
def adopted_close(
    app: App,
    target: str,
    controller_id: str,
    expected_seq: int,
    lines: int,
    credential_path: Path | None,
    as_json: bool,
) -> None:
    """Capture the adopted agent's output at the expected cursor and close its pane."""

    result = fenced(app, "adopted close", controller_id, credential_path, target, expected_seq, lines)
    if as_json:
        render.emit_result("adopted close", result)
        return
    click.echo(
        f"closed adopted {result.lease.data.get('name')} (pane {result.lease.data.get('pane_id')}) at seq "
        f"{result.lease.data.get('closing_seq')}; its last output:"
    )
    click.echo(result.output.rstrip("\n") if result.output.strip() else "(no output)")


@adopted.command(name="release")
@click.argument("target", metavar="NAME_OR_PANE")
@controller_option
@credential_option
@json_option
@click.pass_obj
def adopted_release(app: App, target: str, controller_id: str, credential_path: Path | None, as_json: bool) -> None:
    """End the adoption; the pane is left running, as it was found."""

    lease = fenced(app, "adopted release", controller_id, credential_path, target)
    if as_json:
        render.emit_result("adopted release", lease)
        return
    click.echo(f"released adopted {lease.data.get('name')} (pane {lease.data.get('pane_id')}); it keeps running")


def _show(result: Any, as_json: bool) -> None:
    if as_json:
        render.emit_json(result.to_dict())
        return
    if not result.actions:
        click.echo("nothing to reconcile")
    for action in result.actions:
        why = f": {action['why']}" if action.get("why") else ""
        to = f" -> {action['to']}" if action.get("to") else ""
        click.echo(f"{action['action']:>16} {action['name']} ({action['lease']}, {action['state']}{to}){why}")
    if not result.applied:
        click.echo("(dry run: nothing was changed; add --apply to reconcile)")


@adopted.command(name="reconcile")
@controller_option
@click.option("--apply", is_flag=True, help="Really reconcile (default: a dry run that only reports).")
@credential_option
@json_option
@click.pass_obj
def adopted_reconcile(app: App, controller_id: str, apply: bool, credential_path: Path | None, as_json: bool) -> None:
    """Settle adopted leases whose pane vanished, or whose recorded close never finished."""
    from runner.service import ControllerInput

    credential = load_credential(app, controller_id, credential_path)
    _show(app.service.adopted.reconcile(ControllerInput(controller_id, credential, apply)), as_json)
