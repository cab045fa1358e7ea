"""CLI commands for the store itself: ``corral store info`` and ``corral store migrate``."""

from __future__ import annotations

import click

from runner.cli import render
from runner.cli.app import App, cli, json_option


@cli.group()
def store() -> None:
    """The store itself: what it is and its sizes; moving it to another store."""


@store.command(name="info")
@json_option
@click.pass_obj
def info(app: App, as_json: bool) -> None:
    """The store (--store / CORRAL_STORE): adapter, where, id, schema version, retention floor, sizes."""
    from runner.service.stores import store_info

    found = store_info(app.store)
    if as_json:
        render.emit_result("store info", found)
        return
    for key, value in found.items():
        if key != "sizes":
            click.echo(f"{key}: {value}")
    sizes = found["sizes"]
    click.echo(f"bytes: {sizes['bytes']}")
    render.table(None, ["table", "rows"], [(name, n) for name, n in sizes.items() if name != "bytes"])


@store.command(name="migrate")
@click.option("--from", "source", required=True, metavar="URL", help="The store to copy (e.g. sqlite:///path.db).")
@click.option(
    "--to", "target", required=True, metavar="URL", help="The empty store to copy it into (e.g. postgresql://…)."
)
@json_option
@click.pass_obj
def migrate(app: App, source: str, target: str, as_json: bool) -> None:
    """Copy a whole store into an empty one, in one transaction, verified by counts and a digest.

    Instances, their parts, events (seq kept), claims, counters, agent slots, idempotency records, the
    agent mesh, handoff memory (its search index rebuilt on the target) and the store's id, retention
    floor and last seq. The target must be empty (store_not_empty, exit 4).
    Stop the coordinators of the source first: what they write after the copy began is not copied.
    """
    from runner.service.stores import migrate_store

    done = migrate_store(source, target)
    if as_json:
        render.emit_result("store migrate", done)
        return
    click.echo(f"copied {done['from']['url']} to {done['to']['url']} (store {done['to']['store_id']})")
    render.table(None, ["table", "rows"], sorted(done["counts"].items()))
    click.echo(f"digest sha256:{done['digest']} verified")
