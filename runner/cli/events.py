"""CLI commands for the event log: read it (``events``, ``--follow``) and prune it (``events prune``)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator
from typing import Any

import click

from runner.cli import render
from runner.cli.app import (
    App,
    cli,
    json_option,
)
from runner.errors import UsageError

# --- events ---------------------------------------------------------------------------------------


@cli.group(invoke_without_command=True)
@click.option(
    "--since",
    type=int,
    help="Only events after this sequence number (default: every event still kept, from the retention floor).",
)
@click.option("--limit", type=int, help="At most this many events (not with --follow).")
@click.option("--instance", "instance_id", help="Only events of this instance (e.g. controller/NAME).")
@click.option("--follow", "-f", is_flag=True, help="Keep printing new events as they are appended.")
@click.option(
    "--from-floor",
    is_flag=True,
    help="Start at the retention floor if --since is below it (the pruned events are gone), instead of "
    "failing with events_pruned.",
)
@json_option
@click.pass_context
def events(
    ctx: click.Context,
    since: int | None,
    limit: int | None,
    instance_id: str | None,
    follow: bool,
    from_floor: bool,
    as_json: bool,
) -> None:
    """Print the event log (JSON lines with --json), oldest first, as it is read.

    Without --since it prints every event still kept (a note on stderr says where the retention floor
    is, once events were pruned). A --since below the floor (see `corral events prune`) fails with
    events_pruned (exit 5) naming the floor, never skipping events silently; --from-floor starts at the
    floor on purpose.
    """
    if ctx.invoked_subcommand is not None:
        flags = {"--since": since is not None, "--limit": limit, "--instance": instance_id, "--follow": follow}
        given = [flag for flag, value in {**flags, "--from-floor": from_floor}.items() if value]
        if given:
            raise UsageError(
                f"the options of `corral events` ({', '.join(given)}) do not go with "
                f"`corral events {ctx.invoked_subcommand}`",
                code="usage",
            )
        ctx.meta["events_json"] = as_json
        return
    from runner.service import EventsInput

    app: App = ctx.obj
    if since is None:  # everything still kept: not a request for what was pruned
        since, from_floor = 0, True
        floor = app.service.events.floor()
        if floor:
            click.echo(f"note: events up to {floor} were pruned (the retention floor); showing the rest", err=True)
    last = since
    backlog = app.service.events.stream(EventsInput(since, limit, instance_id), from_floor=from_floor)
    for event in _print_events(backlog, as_json):
        last = event.seq
    if not follow:
        return
    followed = app.service.events.follow(last, from_floor=from_floor)
    wanted = followed if instance_id is None else (e for e in followed if e.instance_id == instance_id)
    for _ in _print_events(wanted, as_json, flush_every=1):
        pass


# What render.emit_json writes for one event (json.dumps with these options), built once, not per event.
_encode_event = json.JSONEncoder(sort_keys=True, default=str).encode


def _print_events(found: Iterable[Any], as_json: bool, flush_every: int = 1000) -> Iterator[Any]:
    """Write each event as it is read (one JSON line, or one text line), yielding it after; flushed
    every ``flush_every`` events and at the end, so a reader of the pipe sees them promptly."""
    write = sys.stdout.write
    count = 0
    try:
        for event in found:
            if as_json:
                write(_encode_event(event.to_dict()) + "\n")
            else:
                changed = event.payload.get("changed") or {}
                shown = ", ".join(
                    f"{k}={v}" for k, v in changed.items() if k in ("generation", "lease_id", "expires_at")
                )
                write(
                    f"{event.seq:>6} {event.at} {event.instance_id} {event.trigger}: "
                    f"{event.from_state} -> {event.to_state} (v{event.version}) by {event.actor}"
                    + (f"  {shown}" if shown else "")
                    + "\n"
                )
            count += 1
            if count % flush_every == 0:
                sys.stdout.flush()
            yield event
    finally:
        sys.stdout.flush()


@events.command(name="prune")
@click.option("--keep", type=int, metavar="N", help="Keep the newest N events; the older ones go.")
@click.option("--before", type=int, metavar="SEQ", help="Delete the events with a sequence number below SEQ.")
@click.option(
    "--older-than", metavar="DURATION", help="Delete the events recorded longer ago than DURATION (30d, 12h, 1d12h)."
)
@click.option("--dry-run", is_flag=True, help="Only say what would be deleted.")
@json_option
@click.pass_context
def prune_events(
    ctx: click.Context, keep: int | None, before: int | None, older_than: str | None, dry_run: bool, as_json: bool
) -> None:
    """Delete the oldest events, by exactly one of --keep, --before, --older-than.

    Without any, applies the policy in $CORRAL_EVENTS_KEEP (a count to keep, or a duration); nothing
    prunes the log on its own. Only event rows go, never an instance. The store records the highest
    pruned sequence number as its retention floor (`corral status`); a reader asking for events
    below it is told so (events_pruned). Deletes in batches, each a short transaction.
    """
    from runner.service.events import PruneEventsInput

    app: App = ctx.obj
    as_json = as_json or bool(ctx.meta.get("events_json"))
    source = "options"
    if keep is None and before is None and older_than is None:
        policy = app.config.events_keep
        if policy is None:
            raise UsageError(
                "give one of --keep N, --before SEQ, --older-than DURATION (or set a policy in CORRAL_EVENTS_KEEP)",
                code="usage",
            )
        inp = PruneEventsInput.from_policy(policy, dry_run=dry_run)
        source = "CORRAL_EVENTS_KEEP"
    else:
        inp = PruneEventsInput(keep, before, older_than, dry_run)
    pruned = app.service.events.prune(inp)
    if as_json:
        render.emit_json({"pruned": {**pruned.to_dict(), "by": inp.criterion, "source": source}})
        return
    by = ", ".join(f"{name.replace('_', '-')} {value}" for name, value in inp.criterion.items())
    if dry_run:
        click.echo(
            f"would delete {pruned.events} event(s) (by {by}): retention floor {pruned.floor_before} -> "
            f"{pruned.floor}; dry run, nothing deleted"
        )
    else:
        click.echo(
            f"deleted {pruned.events} event(s) (by {by}) in {pruned.batches} batch(es): retention floor "
            f"{pruned.floor_before} -> {pruned.floor}"
        )
