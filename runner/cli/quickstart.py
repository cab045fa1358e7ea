"""CLI command ``corral init [DIR]``: a demo project to try corral in (:mod:`runner.service.quickstart`)."""

from __future__ import annotations

from pathlib import Path

import click

from runner.cli import render
from runner.cli.app import cli, json_option


@cli.command()
@click.argument("directory", default=".", type=click.Path(file_okay=False, path_type=Path))
@json_option
def init(directory: Path, as_json: bool) -> None:
    """Make a demo project in DIRECTORY (default: here) and print the first commands to run.

    It makes project/ (files for a reviewer), repo/ (a git repository with .corral/validate.yaml)
    and its linked worktree lane/ (a writer lane on branch example-lane), .corral/agents.yaml (the
    agent CLIs found on PATH) and plans/ (the example plans). It overwrites nothing: if any of these
    is already there it refuses (init_exists) and writes nothing.

    \b
    Example:
      corral init try-corral && cd try-corral && corral run plans/review.yaml
    """
    from runner.service.quickstart import init_project

    made = init_project(directory)
    if as_json:
        render.emit_json(made.to_dict())
        return
    click.echo(f"made a demo project in {made.root}: {', '.join(n + '/' for n in made.made)}")
    for name, path in made.agents.items():
        click.echo(f"  agent CLI {name}: {path or 'not found on PATH (the scripted agent is always there)'}")
    click.echo("next, from that directory:" if Path.cwd() != made.root else "next:")
    if Path.cwd() != made.root:
        click.echo(f"  cd {made.root}")
    for command in made.commands:
        click.echo(f"  {command}")
