"""CLI command ``corral paths MACHINE``: the test paths that cover every transition and guard outcome.

Text for people (one numbered path per block, one line per step); ``--json`` for test generators
(``{"machine", "paths", "targets", "unreachable"}``, see :mod:`runner.modelpaths.paths`).
"""

from __future__ import annotations

import click

from runner.cli import render
from runner.cli.app import App, cli, json_option


@cli.command()
@click.argument("machine")
@json_option
@click.pass_obj
def paths(app: App, machine: str, as_json: bool) -> None:
    """The shortest paths through MACHINE that cover every transition and every guard outcome."""
    from runner.modelpaths.paths import find_paths

    spec = app.library.get(machine)
    coverage = find_paths(spec)
    if as_json:
        render.emit_json(coverage.to_json())
        return
    targets = coverage.targets
    click.echo(
        f"machine {spec.name} v{spec.version}: {len(coverage.paths)} path(s) covering "
        f"{len(targets.transitions)} transition edge(s) and {len(targets.guards)} guard outcome(s)"
    )
    for number, path in enumerate(coverage.paths, 1):
        interrupted = set(path.interrupted())
        click.echo(f"\npath {number}")
        for position, step in enumerate(path.steps):
            guards = " ".join(f"{name}={verdict}" for name, verdict in step.guard_outcomes)
            move = f"{step.source} (refused, stays)" if step.refused else f"{step.source} -> {step.dest}"
            note = " (second phase interrupted)" if position in interrupted else ""
            click.echo(f"  {position + 1}. {step.event_trigger}: {move}{note}" + (f"  [{guards}]" if guards else ""))
    for target in coverage.unreachable:
        click.echo(f"unreachable: {target.id}")
