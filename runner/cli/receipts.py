"""CLI commands for receipts: relay, ask, ask-many, collect, abandon, the receipts listing, wait-any.

A prompt comes from ``--text`` or standard input, never from argv of another process; every command
that acts takes ``--controller`` and its credential from the state home (or ``--credential FILE``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from runner.cli import render
from runner.cli.agents import (
    lines_option,
    show_output,
    timeout_option,
)
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
from runner.errors import InputError, UsageError


def _prompt_text(text: str | None) -> str:
    if text is not None:
        return text
    if sys.stdin.isatty():
        raise UsageError("give the prompt with --text or on standard input")
    return sys.stdin.read()


def _describe_receipt(receipt: Any) -> str:
    data = receipt.data
    cursors = ", ".join(f"{k}={data[k]}" for k in ("before_seq", "after_seq", "settled_seq") if data.get(k) is not None)
    reason = f" ({data['reason']})" if data.get("reason") else ""
    return f"receipt {data['token']}: {receipt.state}{reason}, {data.get('name')} [{cursors}]"


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
        show_output(_describe_receipt(result.receipt) + (" (replayed)" if result.replayed else ""), result.output)
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
    """Relay a prompt to TARGET and collect its result.

    \b
    Example (after reviewer start):
      corral ask rev --controller me --text "Review app.py for bugs."
    """
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
    _print_batch("ask-many", result, as_json)


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
    """Wait for receipts' agents to settle and collect exactly their results (or replay completed ones).

    \b
    Example (relay hands the prompt over and answers the receipt's token at once):
      token=$(corral relay rev --controller me --text "Look again." \\
        --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["receipt"]["token"])')
      corral collect --controller me --receipt "$token"
    """
    from runner.service import CollectInput

    inp = CollectInput(
        controller_id, load_credential(app, controller_id, credential_path), tokens, timeout, lines, mode
    )
    import anyio

    if mode == "all":
        _print_results(anyio.run(app.service.receipts.collect, inp), as_json)
        return
    _print_batch("collect", anyio.run(app.service.receipts.collect_first, inp), as_json)


def _print_batch(command: str, batch: Any, as_json: bool) -> None:
    """A batch's results and the receipts it left pending (``ask-many``, ``collect --mode first``)."""
    if as_json:
        render.emit_result(command, batch)
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
        show_output(f"{winner.target} settled: {observed.status} at seq {observed.seq}", winner.output)
