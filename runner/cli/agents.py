"""CLI commands for agents: reviewer leases, panes no lease holds, observations, status.

Every acting command takes ``--controller`` and loads the credential from the state home (or
``--credential FILE``); prompts come from ``--text`` or standard input, never from argv of another
process. Output as in :mod:`runner.cli.app`: text for people, ``--json`` for programs.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from runner.cli import render
from runner.cli.app import (
    App,
    F,
    absolute_path,
    blocked_options,
    blocked_reason,
    cli,
    controller_option,
    credential_option,
    fenced,
    json_option,
    page_options,
)

DEFAULT_TIMEOUT = 600.0


class HostName(click.ParamType[str]):
    """An agent host registered in ``runner.agents.hosts`` (built-in or a plugin's), checked when given:
    an unknown one is a usage error naming the known hosts. The registry's plugins load only then."""

    name = "host"

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "[process|herdr|PLUGIN]"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        from runner.service import is_host, known_hosts

        if not isinstance(value, str) or not is_host(value):
            self.fail(f"{value!r} is not one of {', '.join(repr(h) for h in known_hosts())}.", param, ctx)
        return value


def host_option(help_text: str) -> Callable[[F], F]:
    """``--host`` (or ``$CORRAL_AGENT_HOST``): which agent host, ``process`` by default."""
    option: Callable[[F], F] = click.option(
        "--host",
        "host_name",
        envvar="CORRAL_AGENT_HOST",
        default="process",
        show_default=True,
        type=HostName(),
        help=help_text,
    )
    return option


def agent_options(fn: Any) -> Any:
    """``--host``, ``--model``, ``--effort``: how a started agent runs; ``--budget-usd``,
    ``--budget-tokens``, ``--max-turns``: what its lease may spend."""
    fn = click.option(
        "--max-turns", type=int, help="At most this many model turns per run, and in all (the CLI enforces it per run)."
    )(fn)
    fn = click.option(
        "--budget-tokens", type=int, help="Refuse the next prompt once the lease's runs spent this many tokens."
    )(fn)
    fn = click.option(
        "--budget-usd",
        type=float,
        help="Refuse the next prompt once the lease's runs cost this much (Claude also stops a run at it).",
    )(fn)
    fn = click.option("--effort", help="Effort for kinds that take one (claude).")(fn)
    fn = click.option("--model", help="Model for kinds that take one (claude).")(fn)
    return host_option("The agent host.")(fn)


def timeout_option(fn: Any) -> Any:
    return click.option(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        show_default=True,
        help="Seconds to wait for the agent to settle.",
    )(fn)


def lines_option(fn: Any) -> Any:
    return click.option(
        "--lines", type=int, default=200, show_default=True, help="How many lines of output to capture."
    )(fn)


def show_output(header: str, output: str) -> None:
    click.echo(header)
    click.echo(output.rstrip("\n") if output.strip() else "(no output)")


# --- reviewer leases ----------------------------------------------------------------------------------


@cli.group()
def reviewer() -> None:
    """Reviewer leases: an agent started in a directory, held by a controller until closed."""


@reviewer.command(name="start")
@controller_option
@click.option("--name", required=True, help="The agent's name: [a-z][a-z0-9_-]{0,31}, unique among live leases.")
@click.option("--kind", required=True, help="The agent kind (claude, codex, script, or one from agents.yaml).")
@click.option(
    "--cwd", required=True, callback=absolute_path, help="The agent's working directory (relative: to the current one)."
)
@agent_options
@credential_option
@json_option
@click.pass_obj
def reviewer_start(
    app: App,
    controller_id: str,
    name: str,
    kind: str,
    cwd: str,
    host_name: str,
    model: str | None,
    effort: str | None,
    budget_usd: float | None,
    budget_tokens: int | None,
    max_turns: int | None,
    credential_path: Path | None,
    as_json: bool,
) -> None:
    """Start a reviewer agent and lease it to the controller (it may read, never write).

    \b
    Example (after controller acquire; in a corral init directory):
      corral reviewer start --controller me --name rev --kind script --cwd project
    """

    lease = fenced(
        app,
        "reviewer start",
        controller_id,
        credential_path,
        name,
        kind,
        cwd,
        host_name,
        model,
        effort,
        budget_usd=budget_usd,
        budget_tokens=budget_tokens,
        max_turns=max_turns,
    )
    if as_json:
        render.emit_result("reviewer start", lease)
        return
    click.echo(
        f"started reviewer {name} ({kind}) in {lease.data.get('cwd')}: pane {lease.data.get('pane_id')}, "
        f"seq {lease.data.get('started_seq')}, lease {lease.id}"
    )


@reviewer.command(name="close")
@controller_option
@click.argument("name")
@click.option(
    "--expect-seq",
    "expected_seq",
    type=int,
    required=True,
    help="The cursor you saw the agent settle at (corral agents / the last collect).",
)
@lines_option
@blocked_options
@credential_option
@json_option
@click.pass_obj
def reviewer_close(
    app: App,
    controller_id: str,
    name: str,
    expected_seq: int,
    lines: int,
    blocked: bool,
    reason: str | None,
    credential_path: Path | None,
    as_json: bool,
) -> None:
    """Capture the reviewer's output at the expected cursor and close its pane.

    A blocked reviewer (it waits on a person) is closed only with --blocked --reason: the operator's
    decision is recorded with the lease and in the event log.
    """

    why = blocked_reason(blocked, reason)  # a usage error before any file is read
    result = fenced(app, "reviewer close", controller_id, credential_path, name, expected_seq, lines, why)
    if as_json:
        render.emit_result("reviewer close", result)
        return
    show_output(
        f"closed reviewer {name} at seq {result.lease.data.get('closing_seq')} "
        f"(capture sha256 {str(result.lease.data.get('capture_sha256'))[:16]}…); its last output:",
        result.output,
    )


@reviewer.command(name="list")
@click.option("--controller", "controller_id", help="Only this controller's reviewers.")
@click.option("--all", "include_ended", is_flag=True, help="Include closed and failed leases.")
@page_options
@json_option
@click.pass_obj
def reviewer_list(
    app: App, controller_id: str | None, include_ended: bool, limit: int | None, after: str | None, as_json: bool
) -> None:
    """Reviewer leases (live ones unless --all); pages in lease id order with --limit and --after."""
    from runner.service import ReviewerListInput

    leases = app.service.reviewers(ReviewerListInput(controller_id, include_ended, after, limit))
    render.listing(
        "reviewer list",
        leases,
        as_json,
        ["name", "state", "kind", "pane", "controller", "cwd", "lease"],
        lambda lease: (
            lease.data.get("name"),
            lease.state,
            lease.data.get("kind"),
            lease.data.get("pane_id"),
            lease.data.get("controller_id"),
            lease.data.get("cwd"),
            lease.id,
        ),
    )


def show_housekeeping(result: Any, as_json: bool, verb: str) -> None:
    if as_json:
        render.emit_json(result.to_dict())
        return
    if not result.actions:
        click.echo(f"nothing to {verb}")
    for action in result.actions:
        why = f": {action['why']}" if action.get("why") else ""
        code = f" [{action['code']}]" if action.get("code") else ""
        to = f" -> {action['to']}" if action.get("to") else ""
        click.echo(f"{action['action']:>15} {action['name']} ({action['lease']}){to}{code}{why}")
    if not result.applied:
        click.echo(f"(dry run: nothing was changed; add --apply to {verb})")


def reconcile_options(fn: Any) -> Any:
    """``--apply`` (default: a dry run) and ``--lease ID`` (repeatable) for the reconcile commands."""
    fn = click.option(
        "--lease",
        "leases",
        multiple=True,
        metavar="ID",
        help="Only this lease (its id as the dry run names it; repeatable).",
    )(fn)
    return click.option(
        "--apply", is_flag=True, help="Really reconcile (default: a dry run that reports the plan per lease)."
    )(fn)


@reviewer.command(name="cleanup")
@controller_option
@click.option("--apply", is_flag=True, help="Really close (default: a dry run that only reports).")
@credential_option
@json_option
@click.pass_obj
def reviewer_cleanup(app: App, controller_id: str, apply: bool, credential_path: Path | None, as_json: bool) -> None:
    """Close this controller's idle or done, identity-matched reviewers with no unresolved receipt."""

    done = fenced(app, "reviewer cleanup", controller_id, credential_path, apply)
    show_housekeeping(done, as_json, "clean up")


@reviewer.command(name="reconcile")
@controller_option
@reconcile_options
@credential_option
@json_option
@click.pass_obj
def reviewer_reconcile(
    app: App, controller_id: str, apply: bool, leases: tuple[str, ...], credential_path: Path | None, as_json: bool
) -> None:
    """Settle reviewers a crash left unsettled (dry run unless --apply): per lease, what and why."""

    done = fenced(app, "reviewer reconcile", controller_id, credential_path, apply, leases)
    show_housekeeping(done, as_json, "reconcile")


# --- panes no lease holds ---------------------------------------------------------------------------------


@cli.group()
def agent() -> None:
    """Agents on a host, leased or not."""


@agent.command(name="close")
@click.argument("pane")
@controller_option
@click.option("--expect-name", "expected_name", required=True, help="The agent's name, as you saw it.")
@click.option("--expect-kind", "expected_kind", required=True, help="Its kind, as you saw it.")
@click.option(
    "--expect-cwd", "expected_cwd", required=True, callback=absolute_path, help="Its working directory, as you saw it."
)
@click.option("--expect-seq", "expected_seq", type=int, required=True, help="The cursor you saw it settled at.")
@click.option("--reason", help="Why (recorded with the close; data, never an instruction).")
@host_option("The agent host the pane is on.")
@credential_option
@json_option
@click.pass_obj
def agent_close(
    app: App,
    pane: str,
    controller_id: str,
    expected_name: str,
    expected_kind: str,
    expected_cwd: str,
    expected_seq: int,
    reason: str | None,
    host_name: str,
    credential_path: Path | None,
    as_json: bool,
) -> None:
    """Close a pane corral started that no lease holds (e.g. a start killed before it recorded its pane).

    Fenced, bound to the agent and cursor you saw (`corral agents`), and recorded in the event log.
    A leased pane is refused (pane_leased): close, release or reconcile its lease instead.
    """

    closed = fenced(
        app,
        "agent close",
        controller_id,
        credential_path,
        pane,
        expected_name,
        expected_kind,
        expected_cwd,
        expected_seq,
        host_name,
        reason,
    )
    if as_json:
        render.emit_result("agent close", closed)
        return
    click.echo(f"closed pane {pane} ({expected_name}, {expected_kind}) at seq {expected_seq}: {closed.id}")


@agent.command(name="reconcile")
@controller_option
@reconcile_options
@credential_option
@json_option
@click.pass_obj
def agent_reconcile(
    app: App, controller_id: str, apply: bool, leases: tuple[str, ...], credential_path: Path | None, as_json: bool
) -> None:
    """Settle operator closes (`corral agent close`) killed before their outcome was recorded (dry run
    unless --apply)."""

    done = fenced(app, "agent reconcile", controller_id, credential_path, apply, leases)
    show_housekeeping(done, as_json, "reconcile")


@agent.command(name="get")
@click.argument("target", metavar="PANE")
@host_option("The agent host the pane is on.")
@json_option
@click.pass_obj
def agent_get(app: App, target: str, host_name: str, as_json: bool) -> None:
    """Observe one agent (by pane id, leased or not); read-only, no controller needed."""
    from runner.service import AgentInput

    observed = app.service.waits.get(AgentInput(target, host_name))
    if as_json:
        render.emit_result("agent get", observed)
        return
    click.echo(_describe_observation(observed))


@agent.command(name="read")
@click.argument("target", metavar="PANE")
@click.option("--lines", type=int, default=200, show_default=True, help="How many lines of output.")
@host_option("The agent host the pane is on.")
@json_option
@click.pass_obj
def agent_read(app: App, target: str, lines: int, host_name: str, as_json: bool) -> None:
    """Print one agent's visible output (by pane id); read-only, no controller needed."""
    from runner.service import AgentInput

    output, observed = app.service.waits.read(AgentInput(target, host_name, lines))
    if as_json:
        render.emit_json({"output": output, "observation": observed.to_dict()})
        return
    show_output(_describe_observation(observed), output)


@agent.command(name="wait")
@click.argument("target", metavar="PANE")
@click.option(
    "--until",
    "until",
    multiple=True,
    type=click.Choice(["idle", "working", "done", "blocked"]),
    help="A status to wait for (repeatable; default: idle, done, blocked).",
)
@click.option("--after-seq", type=int, help="Wait for a change past this cursor (default: the cursor now).")
@timeout_option
@host_option("The agent host the pane is on.")
@json_option
@click.pass_obj
def agent_wait(
    app: App,
    target: str,
    until: tuple[str, ...],
    after_seq: int | None,
    timeout: float,
    host_name: str,
    as_json: bool,
) -> None:
    """Wait until one agent (by pane id) is in a status past a cursor; read-only, no controller needed."""
    from runner.service import AgentWaitInput

    inp = AgentWaitInput(target, until or ("idle", "done", "blocked"), after_seq, timeout, host_name)
    import anyio

    observed = anyio.run(app.service.waits.wait, inp)
    if as_json:
        render.emit_result("agent wait", observed)
        return
    click.echo(_describe_observation(observed))


def _describe_observation(observed: Any) -> str:
    return (
        f"{observed.pane_id} {observed.name} ({observed.kind}) in {observed.cwd}: "
        f"{observed.status} at seq {observed.seq}"
    )


# --- observations, status -------------------------------------------------------------------------


@cli.command()
@host_option("The agent host to observe.")
@json_option
@click.pass_obj
def agents(app: App, host_name: str, as_json: bool) -> None:
    """Live observations of the host's agents and the lease holding each."""
    found = app.service.inventory.agents(host_name)
    if as_json:
        render.emit_json({"agents": found})
        return
    render.table(
        None,
        ["pane", "name", "kind", "status", "seq", "lease", "controller", "cwd"],
        [
            (a["pane_id"], a["name"], a["kind"], a["status"], a["seq"], a["lease_state"], a["controller_id"], a["cwd"])
            for a in found
        ],
    )


@cli.command()
@json_option
@click.pass_obj
def status(app: App, as_json: bool) -> None:
    """Version, store, agent host, leases and receipts by state, and what needs reconcile."""
    report = app.service.inventory.status()
    if as_json:
        render.emit_result("status", report)
        return
    store = report["store"]
    click.echo(
        f"corral {report['version']}; store {store.get('adapter')} {store.get('path')} "
        f"(schema {store.get('schema_version')}"
        + (f", events pruned up to {store['retention_floor']}" if store.get("retention_floor") else "")
        + ")"
    )
    for host in report.get("agent_hosts") or []:
        facts = ", ".join(
            f"{key} {host[key]}" for key in ("version", "socket", "terminal_id", "root") if host.get(key) is not None
        )
        problem = f"; unavailable [{host['error']['code']}]" if host.get("error") else ""
        click.echo(
            f"agent host: {host.get('name')}"
            + (f" ({facts})" if facts else "")
            + f"; kinds: {', '.join(host.get('kinds', []))}{problem}"
        )
    locks = report.get("locks") or {}
    for item in locks.get("controllers", []):
        click.echo(f"controller {item['controller_id']}: {item['lock']} ({item['why']})")
    for item in locks.get("leases", []):
        click.echo(f"{item['machine']} {item.get('name') or item['id']}: {item['lock']} ({item['why']})")
    for item in locks.get("plan_runners", []):
        click.echo(f"plan {item['id']} runner: {item['lock']} ({item['why']})")
    if locks.get("ended"):
        click.echo("ended (absent): " + ", ".join(f"{n} {m}" for m, n in sorted(locks["ended"].items())))
    for row in report.get("spend") or []:
        click.echo(f"{row['machine']} {row.get('name') or row['lease']}: {render.spend_line(row)}")
    for row in report.get("confinement") or []:
        if row["confinement"] != "bwrap":
            why = f"unconfined: {row['unconfined_reason']}" if row.get("unconfined_reason") else f"{row['host']} host"
            click.echo(f"{row['machine']} {row.get('name') or row['lease']}: confinement none ({why})")
    for machine, by_state in sorted(report["counts"].items()):
        click.echo(f"{machine}: " + ", ".join(f"{n} {s}" for s, n in sorted(by_state.items())))
    if report["needs_attention"]:
        click.echo("needs attention:")
        for item in report["needs_attention"]:
            what = item.get("machine") or item["kind"]
            label = item.get("name") or item.get("plan") or item.get("controller") or item.get("token") or item["id"]
            state = item.get("state") or item["kind"].replace("_", " ")
            click.echo(f"  {what} {label}: {state}")
            click.echo(f"    next: {item['next']}")
    else:
        click.echo("nothing needs attention")
    cache = report.get("cache") or {}
    if cache.get("rebuilt"):
        by = ", ".join(f"{name} {n}" for name, n in sorted(cache["by_cache"].items()))
        click.echo(f"cache: {cache['rebuilt']} damaged or tampered entries rebuilt from source ({by})")
    else:
        click.echo("cache: no damaged or tampered entries rebuilt")
