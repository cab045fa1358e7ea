"""One naming scheme (issue 30): a tool's name and arguments can be derived from its CLI command.

- Every MCP tool is ``corral_`` and its CLI command's words joined by ``_`` (``plans list`` ->
  ``corral_plans_list``, ``ask-many`` -> ``corral_ask_many``), and every command that has a tool has
  that one: a model derives the tool from the command and back (docs/mcp.md, "Names").
- No argument is a bare ``id`` or ``ttl``: ids are named for what they are (``item_id``,
  ``checkpoint_id``), durations for their unit (``ttl_seconds``). That a tool's arguments are named as
  its command's options is ``tests/test_operations.py``'s check.
- Each deprecated name (a tool's, an argument's) resolves to a current one, is never listed, and a
  call by it answers what the current name answers, with a ``corral/deprecated`` note in ``_meta``.

Real components: the click command tree, the tool table, an in-process MCP server over a scratch home.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from runner.cli.app import cli
from runner.mcp.tool import DEPRECATED_TOOLS, TOOLS, deprecation, resolve
from runner.service.operations import OPERATIONS
from tests.mcp.conftest import SHA, InProcess
from tests.test_operations import COMMANDS

PREFIX = "corral_"
BARE = {"id", "ttl", "checkpoint"}
"""Argument names a caller must guess the meaning of: an id of what, a time in what unit."""


def tool_of(command: str) -> str:
    """The tool a CLI command's operation has: ``corral_`` and the command's words, ``-`` as ``_``."""
    return PREFIX + command.replace(" ", "_").replace("-", "_")


def off_scheme(tools: Mapping[str, str | None]) -> list[tuple[str, str | None]]:
    """(tool, command) pairs whose tool is not named for its command (or has no command)."""
    return [(tool, command) for tool, command in tools.items() if command is None or tool != tool_of(command)]


def test_every_tool_is_named_for_its_command() -> None:
    tools = {str(op.tool): op.command for op in OPERATIONS if op.tool}
    assert len(tools) >= 60
    assert off_scheme(tools) == []
    assert set(tools) == set(TOOLS)


def test_from_a_command_to_its_tool_and_back() -> None:
    """Every command with a tool has the derived one; the derivation is one to one (no two commands
    name the same tool), so a tool's name gives back its command."""
    derived = {tool_of(command): command for command in COMMANDS}
    assert len(derived) == len(COMMANDS)
    for op in OPERATIONS:
        if op.tool is None or op.command is None:
            continue
        assert derived[op.tool] == op.command
        assert TOOLS[op.tool].operation.command == op.command


def test_the_scheme_check_can_fail() -> None:
    """The check above is not vacuous: an old name, a component in another number, a missing command."""
    assert off_scheme({"memory_pin": "memory pin"}) == [("memory_pin", "memory pin")]
    assert off_scheme({"corral_plan_list": "plans list"}) == [("corral_plan_list", "plans list")]
    assert off_scheme({"corral_receipt_abandon": "abandon", "corral_x": None}) == [
        ("corral_receipt_abandon", "abandon"),
        ("corral_x", None),
    ]
    assert off_scheme({"corral_ask_many": "ask-many", "corral_memory_session_close": "memory session close"}) == []


def test_no_argument_is_a_bare_id_or_a_time_without_its_unit() -> None:
    found = sorted(
        (name, arg) for name, tool in TOOLS.items() for arg in tool.input_schema["properties"] if arg in BARE
    )
    assert found == []


def test_every_deprecated_tool_name_resolves_to_a_current_tool() -> None:
    assert len(DEPRECATED_TOOLS) == 23
    for old, new in DEPRECATED_TOOLS.items():
        assert old not in TOOLS, f"{old} is a current name and a deprecated one"
        assert new in TOOLS, f"{old} stands for {new}, which is no tool"
        assert resolve(old) is TOOLS[new]
        assert deprecation(old) == f"{old} is deprecated: use {new} (the old name goes in the next release)"
    assert all(resolve(name) is tool and deprecation(name) is None for name, tool in TOOLS.items())
    assert resolve("corral_nothing") is None


def test_every_deprecated_argument_name_maps_to_a_current_one() -> None:
    renamed = {(name, was, now) for name, tool in TOOLS.items() for was, now in tool.renamed.items()}
    assert renamed == {
        ("corral_controller_acquire", "ttl", "ttl_seconds"),
        ("corral_controller_renew", "ttl", "ttl_seconds"),
        ("corral_controller_resume", "ttl", "ttl_seconds"),
        ("corral_controller_takeover", "ttl", "ttl_seconds"),
        ("corral_memory_pin", "checkpoint", "checkpoint_id"),
        ("corral_memory_show", "id", "item_id"),
    }
    for name, was, now in renamed:
        assert now in TOOLS[name].input_schema["properties"] and was not in TOOLS[name].input_schema["properties"]


@pytest.mark.parametrize("command", ["acquire", "renew", "resume", "takeover"])
def test_the_cli_takes_ttl_seconds_and_still_its_old_name_unshown(command: str) -> None:
    group = COMMANDS[f"controller {command}"]
    (option,) = [p for p in group.params if p.name == "ttl_seconds"]
    assert option.opts[0] == "--ttl-seconds" and "--ttl" in option.opts
    shown = CliRunner().invoke(cli, ["controller", command, "--help"]).output
    assert "--ttl-seconds" in shown and "--ttl " not in shown and "--ttl," not in shown


def test_mesh_send_takes_agent_id_and_still_from_unshown() -> None:
    (option,) = [p for p in COMMANDS["mesh send"].params if p.name == "agent_id"]
    assert option.opts[0] == "--agent-id" and "--from" in option.opts
    shown = CliRunner().invoke(cli, ["mesh", "send", "--help"]).output
    assert "--agent-id" in shown and "--from" not in shown


# --- a call by a deprecated name answers what the current name answers -------------------------------


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[InProcess]:
    home = tmp_path / "home"
    monkeypatch.setenv("CORRAL_HOME", str(home))
    for name in ("CORRAL_STORE", "CORRAL_CONTROLLER", "CORRAL_MACHINES", "XDG_STATE_HOME"):
        monkeypatch.delenv(name, raising=False)
    project = tmp_path / "project"
    project.mkdir()
    with InProcess(home) as served:
        served.ok("corral_controller_acquire", {"controller": "ctl", "authority_ref": "T-1", "authority_sha256": SHA})
        yield served


def _answer(result: Any) -> Any:
    """What a call answered, comparable between two calls: its result, or its refusal's code."""
    doc = dict(result.structured_content or {})
    if result.is_error:
        return ("refused", doc["error"]["code"])
    for presence in (doc, *(doc.get("agents") or [])):  # a mesh call renews the caller's presence
        for moving in ("status_age_seconds", "expires_at"):
            presence.pop(moving, None)
    return doc


def test_a_deprecated_tool_name_answers_what_its_current_name_answers(server: InProcess, tmp_path: Path) -> None:
    plan = {
        "plan": "p-1", "recipe": "review", "controller": "planctl",
        "inputs": {"cwd": str(tmp_path / "project"), "prompt": "echo p", "kind": "script", "authority_ref": "P",
                   "authority_sha256": SHA},
    }  # fmt: skip
    cp = server.ok(
        "corral_memory_checkpoint",
        {"project": "demo", "goal": "g", "agent": "a", "summary": "handoff", "next_steps": ["n"]},
    )["checkpoint_id"]
    joined = server.ok("corral_mesh_checkin", {"agent_id": "a1", "role": "builder"})
    me = {"agent_id": "a1", "agent_token": joined["agent_token"]}
    sent = server.ok("corral_mesh_send", {**me, "to": "a1", "subject": "s", "body": "b"})
    # Each deprecated name with arguments for the call by it (old argument names where there were any)
    # and for the call by its current name; both are called after a first call by the current name, so
    # an idempotent write (or a refusal) answers the same to both.
    calls: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
        "corral_receipt_abandon": ({"controller": "ctl", "receipt": "nope", "message": "m"},) * 2,
        "corral_reconcile": ({"controller": "ctl"},) * 2,
        "corral_recipes": ({},) * 2,
        "corral_plan_submit": ({"plan": plan, "run": False},) * 2,
        "corral_plan_show": ({"plan_id": "p-1"},) * 2,
        "corral_plan_list": ({"all": True},) * 2,
        "corral_plan_decide": ({"plan_id": "nope", "step": "s", "approve": True, "reason": "r"},) * 2,
        "corral_plan_resume": ({"plan_id": "nope"},) * 2,
        "corral_plan_retry": ({"plan_id": "nope"},) * 2,
        "corral_plan_cancel": ({"plan_id": "nope"},) * 2,
        "memory_bootstrap": ({"project": "demo"},) * 2,
        "memory_readiness": ({"project": "demo"},) * 2,
        "memory_pin": ({"checkpoint": cp}, {"checkpoint_id": cp}),
        "memory_session_close": ({"status": "completed", "session": "ses_nope"},) * 2,
        "memory_show": ({"id": cp}, {"item_id": cp}),
        "memory_list": ({"project": "demo"},) * 2,
        "memory_search": ({"query": "handoff"},) * 2,
        "agents_list": ({"all": True},) * 2,
        "agent_inbox": (me,) * 2,
        "agent_ack": ({**me, "message_ids": [sent["message_id"]]},) * 2,
    }
    writes = {"memory_checkpoint", "agent_checkin", "agent_send"}  # each call writes anew: the same shape
    assert set(calls) | writes == set(DEPRECATED_TOOLS)
    for old, (by_old, by_new) in calls.items():
        new = DEPRECATED_TOOLS[old]
        server.call(new, by_new)
        first = server.call(old, by_old)
        second = server.call(new, by_new)
        assert _answer(first) == _answer(second), old
        assert (first.meta or {}).get("corral/deprecated") == deprecation(old), old
        assert not (second.meta or {}).get("corral/deprecated"), new
    for old, arguments in (
        ("memory_checkpoint", {"project": "demo", "agent": "a", "summary": "more", "next_steps": ["n"]}),
        ("agent_checkin", me),
        ("agent_send", {**me, "to": "a1", "subject": "s", "body": "b"}),
    ):
        first, second = server.call(old, arguments), server.call(DEPRECATED_TOOLS[old], arguments)
        assert not first.is_error and not second.is_error, (old, first.structured_content)
        assert sorted(first.structured_content) == sorted(second.structured_content), old
        assert (first.meta or {}).get("corral/deprecated") == deprecation(old), old


def test_deprecated_names_are_served_but_never_listed(server: InProcess) -> None:
    listed = {tool.name for tool in server.list_tools().tools}
    assert listed == set(TOOLS)
    assert not listed & set(DEPRECATED_TOOLS)
    unknown = server.call("corral_nothing", {})
    assert unknown.is_error and unknown.structured_content["error"]["code"] == "tool_unknown"


def test_each_listed_description_names_the_old_names_its_tool_still_takes(server: InProcess) -> None:
    described = {tool.name: tool.description or "" for tool in server.list_tools().tools}
    for old, now in DEPRECATED_TOOLS.items():
        assert f"`{old}` (tool)" in described[now], (old, now)
    for name, tool in TOOLS.items():
        for was, arg in tool.renamed.items():
            assert f"`{was}` (argument, now `{arg}`)" in described[name], (name, was)
        if not tool.renamed and name not in DEPRECATED_TOOLS.values():
            assert "Deprecated" not in described[name], name
    assert "`ttl` (argument, now `ttl_seconds`)" in described["corral_controller_acquire"]


def test_a_deprecated_argument_name_is_taken_as_its_current_one(server: InProcess) -> None:
    renewed = server.ok("corral_controller_renew", {"controller": "ctl", "ttl": 123})["lease"]
    assert renewed["ttl_seconds"] == 123
    renewed = server.ok("corral_controller_renew", {"controller": "ctl", "ttl_seconds": 124})["lease"]
    assert renewed["ttl_seconds"] == 124
    both = server.call("corral_controller_renew", {"controller": "ctl", "ttl": 5, "ttl_seconds": 6})
    error = both.structured_content["error"]
    assert both.is_error and error["code"] == "input_invalid" and error["details"]["field"] == "ttl"
    wrong = server.call("corral_controller_renew", {"controller": "ctl", "ttl": 1})
    assert wrong.structured_content["error"]["details"]["field"] == "ttl_seconds"
