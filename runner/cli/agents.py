"""CLI commands for agents: reviewer leases, relay/ask/collect/abandon, receipts, waits, status.

Every acting command takes ``--controller`` and loads the credential from the state home (or
``--credential FILE``); prompts come from ``--text`` or standard input, never from argv of another
process. Output as in :mod:`runner.cli.app`: text for people, ``--json`` for programs.
"""

from __future__ import annotations

import sys
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
    load_credential,
    page_options,
)
from runner.errors import InputError, UsageError

DEFAULT_TIMEOUT = 600.0


def _prompt_text(text: str | None) -> str:
    if text is not None:
        return text
    if sys.stdin.isatty():
        raise UsageError("give the prompt with --text or on standard input")
    return sys.stdin.read()


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


def _show_output(header: str, output: str) -> None:
    click.echo(header)
    click.echo(output.rstrip("\n") if output.strip() else "(no output)")


def _describe_receipt(receipt: Any) -> str:
    data = receipt.data
    cursors = ", ".join(f"{k}={data[k]}" for k in ("before_seq", "after_seq", "settled_seq") if data.get(k) is not None)
    reason = f" ({data['reason']})" if data.get("reason") else ""
    return f"receipt {data['token']}: {receipt.state}{reason}, {data.get('name')} [{cursors}]"


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
    """Start a reviewer agent and lease it to the controller (it may read, never write)."""

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
    _show_output(
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
    _show_output(_describe_observation(observed), output)


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


# --- receipts --------------------------------------------------------------------------------------------


@cli.command()
@click.argument("target")
@controller_option
@click.option("--text", help="The prompt (default: standard input).")
@credential_option
@json_option
@click.pass_obj
def relay(
    app: App, target: str, controller_id: str, text: str | None, credential_path: Path | None, as_json: bool
) -> None:
    """Hand a prompt to the leased agent TARGET with a receipt (does not wait)."""

    receipt = fenced(app, "relay", controller_id, credential_path, target, _prompt_text(text))
    if as_json:
        render.emit_result("relay", receipt)
        return
    click.echo(_describe_receipt(receipt))
    click.echo(f"collect it with: corral collect --controller {controller_id} --receipt {receipt.token}")


def _print_results(results: list[Any], as_json: bool) -> None:
    if as_json:
        render.emit_json({"results": [r.to_dict() for r in results]})
        return
    for result in results:
        _show_output(_describe_receipt(result.receipt) + (" (replayed)" if result.replayed else ""), result.output)
        for denial in result.receipt.data.get("denials") or ():
            click.echo(f"denied: {denial.get('tool')} {denial.get('path') or ''}".rstrip())


@cli.command()
@click.argument("target")
@controller_option
@click.option("--text", help="The prompt (default: standard input).")
@click.option(
    "--schema",
    "schema_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A JSON Schema file the agent's final answer must match (claude, codex): validated and recorded.",
)
@timeout_option
@lines_option
@credential_option
@json_option
@click.pass_obj
def ask(
    app: App,
    target: str,
    controller_id: str,
    text: str | None,
    schema_file: Path | None,
    timeout: float,
    lines: int,
    credential_path: Path | None,
    as_json: bool,
) -> None:
    """Relay a prompt to TARGET and collect its result."""
    from runner.service import RelayInput

    credential = load_credential(app, controller_id, credential_path)
    schema = None
    if schema_file is not None:
        try:
            schema = schema_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError("schema", f"{schema_file}: cannot be read ({exc})") from None
    relay_input = RelayInput(controller_id, credential, target, _prompt_text(text), schema=schema)
    import anyio  # only the commands that wait pay for it

    result = anyio.run(app.service.receipts.ask, relay_input, timeout, lines)
    if as_json:
        render.emit_result("ask", result)
        return
    _print_results([result], False)


def _parse_request(raw: str) -> tuple[str, str]:
    target, sep, text = raw.partition("=")
    if not sep:
        raise InputError("request", f"{raw!r} is not TARGET=PROMPT")
    return target, text


@cli.command(name="ask-many")
@controller_option
@click.option(
    "--request",
    "requests",
    multiple=True,
    required=True,
    metavar="TARGET=PROMPT",
    help="One prompt for one target (1-8 distinct targets).",
)
@click.option(
    "--mode",
    type=click.Choice(["all", "first"]),
    default="all",
    show_default=True,
    help="Collect every result, or the first to settle (the rest stay pending).",
)
@timeout_option
@lines_option
@credential_option
@json_option
@click.pass_obj
def ask_many(
    app: App,
    controller_id: str,
    requests: tuple[str, ...],
    mode: str,
    timeout: float,
    lines: int,
    credential_path: Path | None,
    as_json: bool,
) -> None:
    """Ask several leased agents at once."""
    from runner.service import AskManyInput

    credential = load_credential(app, controller_id, credential_path)
    parsed = tuple(_parse_request(r) for r in requests)
    import anyio

    result = anyio.run(
        app.service.receipts.ask_many, AskManyInput(controller_id, credential, parsed, mode, timeout, lines)
    )
    if as_json:
        render.emit_result("ask-many", result)
        return
    _print_results(result.results, False)
    for pending in result.pending_receipts:
        click.echo(f"still pending: {_describe_receipt(pending)}")


@cli.command()
@controller_option
@click.option("--receipt", "tokens", multiple=True, required=True, help="A receipt token (repeatable, 1-8).")
@click.option(
    "--mode",
    type=click.Choice(["all", "first"]),
    default="all",
    show_default=True,
    help="all: every result; first: the first to settle, the others left pending.",
)
@timeout_option
@lines_option
@credential_option
@json_option
@click.pass_obj
def collect(
    app: App,
    controller_id: str,
    tokens: tuple[str, ...],
    mode: str,
    timeout: float,
    lines: int,
    credential_path: Path | None,
    as_json: bool,
) -> None:
    """Wait for receipts' agents to settle and collect exactly their results (or replay completed ones)."""
    from runner.service import CollectInput

    inp = CollectInput(
        controller_id, load_credential(app, controller_id, credential_path), tokens, timeout, lines, mode
    )
    import anyio

    if mode == "all":
        _print_results(anyio.run(app.service.receipts.collect, inp), as_json)
        return
    batch = anyio.run(app.service.receipts.collect_first, inp)
    if as_json:
        render.emit_result("collect", batch)
        return
    _print_results(batch.results, False)
    for pending in batch.pending_receipts:
        click.echo(f"still pending: {_describe_receipt(pending)}")


@cli.command()
@controller_option
@click.option("--receipt", "token", required=True, help="The receipt token.")
@click.option("--message", help="Why (recorded with the receipt).")
@credential_option
@json_option
@click.pass_obj
def abandon(
    app: App, controller_id: str, token: str, message: str | None, credential_path: Path | None, as_json: bool
) -> None:
    """Abandon a reserved or pending receipt on fresh evidence that its agent is settled."""

    receipt = fenced(app, "abandon", controller_id, credential_path, token, message)
    if as_json:
        render.emit_result("abandon", receipt)
        return
    click.echo(_describe_receipt(receipt))


@cli.command()
@click.option("--controller", "controller_id", help="Only this controller's receipts.")
@click.option(
    "--state",
    "states",
    multiple=True,
    type=click.Choice(["reserved", "pending", "completed", "failed", "abandoned"]),
    help="Only receipts in this state (repeatable; default: the open ones, reserved and pending).",
)
@click.option("--all", "include_ended", is_flag=True, help="Every state (completed, failed, abandoned too).")
@page_options
@json_option
@click.pass_obj
def receipts(
    app: App,
    controller_id: str | None,
    states: tuple[str, ...],
    include_ended: bool,
    limit: int | None,
    after: str | None,
    as_json: bool,
) -> None:
    """Receipts (open ones unless --all or --state): states and cursors, never prompts or outputs.

    Oldest reservation first; with --limit and --after, pages follow receipt ids (each page sorted by
    reservation) and --after takes the previous page's next_after."""
    from runner.service import ReceiptsInput

    if include_ended and states:
        raise UsageError("--all and --state exclude each other: --state already names the states", code="usage")
    found = app.service.receipts(ReceiptsInput(controller_id, states, include_ended, after, limit))
    render.listing(
        "receipts",
        found,
        as_json,
        ["token", "state", "target", "before", "after", "settled", "reason"],
        lambda r: (
            r.token,
            r.state,
            r.data.get("name"),
            r.data.get("before_seq"),
            r.data.get("after_seq"),
            r.data.get("settled_seq"),
            r.data.get("reason"),
        ),
    )


# --- waits, observations, status -----------------------------------------------------------------------


def _parse_target(raw: str) -> tuple[str, int | None]:
    name, sep, after = raw.partition(":")
    if not sep:
        return name, None
    if not after.isdigit():
        raise InputError("target", f"{raw!r} is not TARGET or TARGET:AFTER_SEQ")
    return name, int(after)


@cli.command(name="wait-any")
@controller_option
@click.option(
    "--target",
    "targets",
    multiple=True,
    required=True,
    metavar="TARGET[:AFTER_SEQ]",
    help="A leased agent, and the cursor to wait past (without one: already settled wins at once).",
)
@click.option(
    "--fresh",
    is_flag=True,
    help="A target without a cursor waits for its next settle after this call, even if it is settled now.",
)
@timeout_option
@click.option("--lines", type=int, default=40, show_default=True, help="Lines of each winner's output.")
@credential_option
@json_option
@click.pass_obj
def wait_any(
    app: App,
    controller_id: str,
    targets: tuple[str, ...],
    fresh: bool,
    timeout: float,
    lines: int,
    credential_path: Path | None,
    as_json: bool,
) -> None:
    """Wait until the first of 1-64 leased agents settles; print each winner's state and output."""
    from runner.service import WaitAnyInput

    credential = load_credential(app, controller_id, credential_path)
    parsed = tuple(_parse_target(t) for t in targets)
    import anyio

    result = anyio.run(
        app.service.waits.wait_any, WaitAnyInput(controller_id, credential, parsed, timeout, lines, fresh)
    )
    if as_json:
        render.emit_result("wait-any", result)
        return
    for winner in result.winners:
        observed = winner.observation
        _show_output(f"{winner.target} settled: {observed.status} at seq {observed.seq}", winner.output)


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
