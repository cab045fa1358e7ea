"""The driver contract: every built-in driver builds an argv without the prompt and without a wider
grant than its role, resumes a conversation it was given, and reads its CLI's machine output into a
run result (final message, session, usage, denials, failures). The real CLIs are driven through
corral in tests/agents/test_real_agents.py; these cases pin the argv and the reading."""

from __future__ import annotations

import json

import pytest

from runner.agents.drivers import DRIVERS, RunSpec, driver
from runner.agents.kinds import BUILTIN

WIDE = ("bypassPermissions", "--dangerously", "danger-full-access")
PROMPT = "PROMPT-TEXT-NEVER-IN-ARGV"


def _argv(name: str, spec: RunSpec) -> list[str]:
    kind = BUILTIN[name]
    return kind.run_argv(spec)


@pytest.mark.parametrize("name", ["claude", "codex", "script"])
@pytest.mark.parametrize("role", ["reviewer", "writer"])
def test_no_driver_widens_a_role_or_puts_the_prompt_in_argv(name: str, role: str) -> None:
    spec = RunSpec(role=role, cwd="/w/tree", owned=("src",), locked=("docs",))
    argv = _argv(name, spec)
    joined = " ".join(argv)
    assert PROMPT not in joined
    assert not any(wide in joined for wide in WIDE), argv
    assert BUILTIN[name].driver == name


def test_an_unconfined_kind_is_the_only_way_to_a_wider_grant() -> None:
    claude = _argv("claude", RunSpec(role="writer", cwd="/w", unconfined=True))
    codex = _argv("codex", RunSpec(role="writer", cwd="/w", unconfined=True))
    assert "bypassPermissions" in claude
    assert 'sandbox_mode="danger-full-access"' in codex
    assert driver("claude").confinement(RunSpec(unconfined=True)) == "unconfined"


def test_claude_reviewer_reads_only_and_writer_edits_its_owned_scopes() -> None:
    reviewer = _argv("claude", RunSpec(role="reviewer", cwd="/w"))
    settings = json.loads(reviewer[reviewer.index("--settings") + 1])["permissions"]
    assert reviewer[reviewer.index("--permission-mode") + 1] == "dontAsk"
    assert not any(rule.startswith(("Edit", "Write")) for rule in settings["allow"])
    assert {"Write", "Edit", "Bash"} <= set(settings["deny"])
    writer = _argv("claude", RunSpec(role="writer", cwd="/w/tree", owned=("src", "README.md"), locked=("src/gen",)))
    rules = json.loads(writer[writer.index("--settings") + 1])["permissions"]
    assert "Edit(//w/tree/src/**)" in rules["allow"] and "Edit(//w/tree/README.md)" in rules["allow"]
    assert "Edit(//w/tree/src/gen/**)" in rules["deny"] and "Bash" in rules["deny"]
    assert not any("//w/tree/**" in rule for rule in rules["allow"])  # never the whole worktree


def test_claude_starts_a_chosen_session_then_resumes_it() -> None:
    first = _argv("claude", RunSpec(new_session_id="11111111-2222-3333-4444-555555555555"))
    assert first[first.index("--session-id") + 1] == "11111111-2222-3333-4444-555555555555"
    assert "--resume" not in first
    later = _argv("claude", RunSpec(session_id="11111111-2222-3333-4444-555555555555"))
    assert later[later.index("--resume") + 1] == "11111111-2222-3333-4444-555555555555"
    assert "--session-id" not in later


def test_codex_sandboxes_by_role_and_resumes_its_thread() -> None:
    reviewer = _argv("codex", RunSpec(role="reviewer", cwd="/w"))
    writer = _argv("codex", RunSpec(role="writer", cwd="/w"))
    assert 'sandbox_mode="read-only"' in reviewer and 'sandbox_mode="workspace-write"' in writer
    assert reviewer[-1] == "-" and "--json" in reviewer
    later = _argv("codex", RunSpec(role="reviewer", session_id="thread-1"))
    assert later[later.index("resume") + 1] == "thread-1" and later[-1] == "-"


def test_limits_and_schema_reach_the_cli_that_enforces_them() -> None:
    claude = _argv("claude", RunSpec(max_turns=3, budget_usd=0.5, schema='{"type":"object"}'))
    assert claude[claude.index("--max-turns") + 1] == "3"
    assert claude[claude.index("--max-budget-usd") + 1] == "0.5"
    assert claude[claude.index("--json-schema") + 1] == '{"type":"object"}'
    codex = _argv("codex", RunSpec(schema='{"type":"object"}', schema_path="/s/schema.json"))
    assert codex[codex.index("--output-schema") + 1] == "/s/schema.json"


CLAUDE_RUN = [
    {"type": "system", "subtype": "init", "session_id": "s-1", "cwd": "/w/tree"},
    {
        "type": "assistant",
        "message": {
            "content": [{"type": "tool_use", "id": "t1", "name": "Write", "input": {"file_path": "/w/tree/src/a.py"}}]
        },
    },
    {"type": "user", "message": {"content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]}},
    {
        "type": "assistant",
        "message": {"content": [{"type": "tool_use", "id": "t2", "name": "Write", "input": {"file_path": "/etc/x"}}]},
    },
    {
        "type": "user",
        "message": {"content": [{"type": "tool_result", "tool_use_id": "t2", "is_error": True, "content": "denied"}]},
    },
    {
        "type": "result",
        "subtype": "success",
        "is_error": False,
        "result": "DONE",
        "session_id": "s-1",
        "num_turns": 3,
        "duration_ms": 1200,
        "total_cost_usd": 0.0123,
        "usage": {"input_tokens": 100, "output_tokens": 20, "cache_read_input_tokens": 5},
        "permission_denials": [
            {"tool_name": "Write", "tool_use_id": "t2", "tool_input": {"file_path": "/etc/x", "content": "SECRET"}}
        ],
    },
]


def _lines(events: list[dict[str, object]]) -> list[str]:
    return [json.dumps(e) for e in events]


def test_claude_output_is_read_into_a_run_result_without_contents() -> None:
    result = driver("claude").parse(_lines(CLAUDE_RUN), RunSpec(role="writer", cwd="/w/tree"))
    assert result.final == "DONE" and result.session_id == "s-1" and result.error is None
    assert result.usage == {"input_tokens": 100, "output_tokens": 20, "cache_read_tokens": 5}
    assert result.cost_usd == pytest.approx(0.0123) and result.turns == 3 and result.tool_calls == 2
    assert result.file_changes == ["src/a.py"]
    assert result.denials == [{"tool": "Write", "path": "/etc/x"}]
    assert "SECRET" not in json.dumps(result.to_dict())


def test_claude_error_result_and_a_lost_session() -> None:
    failed = [{"type": "result", "subtype": "error_during_execution", "is_error": True, "result": "API Error: 500"}]
    result = driver("claude").parse(_lines(failed), RunSpec())
    assert result.error and "500" in result.error and not result.session_lost
    lost = driver("claude").parse(["No conversation found with session ID: s-9"], RunSpec(session_id="s-9"))
    assert lost.session_lost and lost.error


CODEX_RUN = [
    {"type": "thread.started", "thread_id": "th-1"},
    {"type": "turn.started"},
    {
        "type": "item.completed",
        "item": {"type": "file_change", "status": "completed", "changes": [{"path": "/w/src/b.py", "kind": "add"}]},
    },
    {
        "type": "item.completed",
        "item": {
            "type": "command_execution",
            "command": "touch /etc/y",
            "aggregated_output": "touch: /etc/y: Read-only file system",
            "exit_code": 1,
        },
    },
    {"type": "item.completed", "item": {"type": "agent_message", "text": "finished"}},
    {"type": "turn.completed", "usage": {"input_tokens": 50, "cached_input_tokens": 10, "output_tokens": 7}},
]


def test_codex_output_is_read_into_a_run_result() -> None:
    result = driver("codex").parse(_lines(CODEX_RUN), RunSpec(role="writer", cwd="/w"))
    assert result.session_id == "th-1" and result.final == "finished" and result.error is None
    assert result.usage == {"input_tokens": 50, "cache_read_tokens": 10, "output_tokens": 7}
    assert result.file_changes == ["src/b.py"] and result.turns == 1
    assert result.denials == [{"tool": "shell", "path": "/etc/y"}]
    failed = driver("codex").parse(
        _lines(
            [{"type": "thread.started", "thread_id": "th-1"}, {"type": "turn.failed", "error": {"message": "boom"}}]
        ),
        RunSpec(),
    )
    assert failed.error == "boom"


def test_every_built_in_kind_names_a_registered_driver() -> None:
    assert set(DRIVERS) == {"plain", "script", "claude", "codex"}
    for kind in BUILTIN.values():
        assert kind.driver in DRIVERS
