"""The operation table and its surfaces agree: every operation is on the CLI, MCP and HTTP or says
why not, and an operation's MCP arguments are named as its CLI command's options.

Real components: the click command tree of ``corral``, the MCP tool list the server serves, the HTTP
route table.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import click
import pytest

from runner.cli.app import cli
from runner.http.routes import ROUTES
from runner.mcp.tools import TOOLS
from runner.service.inputs.fields import surface_fields
from runner.service.operations import BY_COMMAND, BY_TOOL, OPERATIONS, Operation

SURFACES = ("cli", "mcp", "http")

CLI_ONLY = {"json", "credential", "bind_process", "agent_token_file"}
"""Options every command of their kind takes on the CLI alone: ``--json`` (MCP and HTTP answer JSON),
``--credential``/``--bind-process`` (a server keeps the credential in its state home),
``--agent-token-file`` (a secret is never an argument on a command line: the MCP tool takes it as
``agent_token``)."""

CLI_EXTRA = {
    ("controller release", "checkpoint"),  # --checkpoint FILE: the CLI digests a local file for you
    ("writer release", "checkpoint"),
    ("events", "follow"),  # a terminal's tail; MCP and HTTP clients read pages (or the SSE stream)
    ("events", "from_floor"),
    ("draw", "out"),  # writes a local file
    ("draw", "trace"),  # reads a local file (a counterexample corral check wrote)
    ("check", "trace_out"),  # writes a local file
}

KNOWN_DIFFERENCES = {
    ("agent close", "target"): "the CLI's positional is PANE (a pane id: the tool's target)",
    ("scopes check", "own"): "the CLI's positional OWNED... and --locked",
    ("scopes check", "lock"): "the CLI's positional OWNED... and --locked",
    ("scopes check", "locked"): "the CLI's positional OWNED... and --locked",
    ("run", "plan"): "the CLI runs plan files; the tool takes the document itself",
    ("run", "run"): "the CLI always runs what it submits",
}
"""Names that differ today between a tool and its command, each with what the CLI calls it. A new
difference fails the test; one made to agree must leave this list (the test says so)."""


def _commands(group: click.Group, path: tuple[str, ...] = ()) -> Iterator[tuple[str, click.Command]]:
    ctx = click.Context(group)
    if path and group.invoke_without_command:
        yield " ".join(path), group
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None, name
        if isinstance(command, click.Group):
            yield from _commands(command, (*path, name))
        else:
            yield " ".join((*path, name)), command


COMMANDS = dict(_commands(cli))


def _surface_name(param: click.Parameter) -> str:
    longs = [opt for opt in param.opts if opt.startswith("--")]
    return longs[0][2:].replace("-", "_") if longs and isinstance(param, click.Option) else str(param.name)


def test_the_table_is_not_empty_and_names_are_unique() -> None:
    assert len(OPERATIONS) >= 60
    names = [op.name for op in OPERATIONS]
    assert len(names) == len(set(names))
    assert len(BY_TOOL) == len([op for op in OPERATIONS if op.tool]) >= 60
    assert len(BY_COMMAND) == len([op for op in OPERATIONS if op.command])


@pytest.mark.parametrize("op", OPERATIONS, ids=lambda op: op.name)
def test_every_operation_is_on_each_surface_or_says_why_not(op: Operation) -> None:
    routed = {route.tool for route in ROUTES}
    where = {
        "cli": op.command is not None and op.command in COMMANDS,
        "mcp": op.tool is not None and op.tool in TOOLS,
        "http": (op.tool is not None and op.tool in routed) or op.http is not None,
    }
    for surface in SURFACES:
        if where[surface]:
            assert surface not in op.not_on, f"{op.name} is on {surface} and says it is not"
        else:
            assert op.not_on.get(surface), f"{op.name} is not on {surface} and does not say why (not_on)"
    assert set(op.not_on) <= set(SURFACES)


def test_every_surface_entry_is_an_operation() -> None:
    assert sorted(set(TOOLS) - set(BY_TOOL)) == []
    assert sorted(set(COMMANDS) - set(BY_COMMAND)) == ["mcp"]  # the group's own help, listed by click as a command
    assert sorted({route.tool for route in ROUTES} - set(BY_TOOL)) == []


@pytest.mark.parametrize("op", [op for op in OPERATIONS if op.tool], ids=lambda op: op.name)
def test_a_tool_takes_what_its_operation_says(op: Operation) -> None:
    tool = TOOLS[str(op.tool)]
    assert (tool.title, tool.hints, tool.input_type) == (op.title, op.hints, op.input_type)
    assert tool.is_async == op.waits, f"{op.name}: a tool that waits is async, and only it"
    if op.input_type is not None:
        offered = set(tool.input_schema["properties"])
        described = {f.metadata["arg"] for f in surface_fields(op.input_type)} - set(tool.exclude)
        assert described <= offered
        secret = {f.name for f in dataclasses.fields(op.input_type)} & {"credential", "proposal"}
        assert not secret & {f.name for f in surface_fields(op.input_type)}


def _differences(op: Operation) -> list[tuple[str, str]]:
    tool, command = TOOLS[str(op.tool)], COMMANDS[str(op.command)]
    args = set(tool.input_schema["properties"])
    options = {_surface_name(p) for p in command.params if isinstance(p, click.Option)}
    positionals = {str(p.name) for p in command.params if isinstance(p, click.Argument)}

    def on_cli(arg: str) -> bool:  # a list is a repeated option in the singular (--receipt for receipts)
        if arg in options or arg in positionals or (arg.endswith("s") and arg[:-1] in options):
            return True
        return arg.endswith("_token") and f"{arg}_file" in options  # a secret: read from a file, never argv

    found = [(str(op.command), arg) for arg in sorted(args) if not on_cli(arg)]
    found += [
        (str(op.command), opt)
        for opt in sorted(options)
        if opt not in args and f"{opt}s" not in args and opt not in CLI_ONLY and (op.command, opt) not in CLI_EXTRA
    ]
    return found


def test_a_tools_arguments_are_named_as_its_commands_options() -> None:
    both = [op for op in OPERATIONS if op.tool and op.command]
    assert len(both) >= 55
    found = {pair for op in both for pair in _differences(op)}
    new = sorted(found - set(KNOWN_DIFFERENCES))
    assert not new, f"a tool's argument and its command's option differ in name: {new}"
    settled = sorted(set(KNOWN_DIFFERENCES) - found)
    assert not settled, f"these agree now: take them out of KNOWN_DIFFERENCES: {settled}"


def test_the_name_check_can_fail() -> None:
    """A tool argument no option matches is found (the check above is not vacuous)."""
    op = BY_COMMAND["controller renew"]
    tool = TOOLS[str(op.tool)]
    renamed = dataclasses.replace(tool, extras={"time_to_live": tool.extras.get("x") or _an_arg()})
    TOOLS[str(op.tool)] = renamed
    try:
        assert ("controller renew", "time_to_live") in _differences(op)
    finally:
        TOOLS[str(op.tool)] = tool


def _an_arg() -> object:
    from runner.mcp.schema import Arg

    return Arg("a renamed argument", schema={"type": "integer"})


@pytest.mark.parametrize(
    ("result", "value", "expected"),
    [
        ("lease", {"id": 1}, {"lease": {"id": 1}}),
        (None, {"a": 1}, {"a": 1}),
    ],
)
def test_the_document_envelope(result: str | None, value: dict[str, int], expected: dict[str, object]) -> None:
    op = Operation("x", None, None, "X", BY_COMMAND["status"].hints, result=result)
    assert op.document(value) == expected


def test_a_page_document_carries_where_the_next_page_starts() -> None:
    class Page(list[dict[str, int]]):
        next_after = "k"

    op = Operation("x", None, None, "X", BY_COMMAND["status"].hints, result="page:rows")
    assert op.document(Page([{"a": 1}])) == {"rows": [{"a": 1}], "next_after": "k"}
