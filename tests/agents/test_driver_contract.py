"""The driver contract: one suite every built-in driver passes (``plain``, ``script``, ``claude``,
``codex``), as the host contract runs over every host.

Every driver builds its run's argv without the prompt, never grants a role more than it needs (a
wider grant only through an ``unconfined`` kind), starts a conversation on a lease's first prompt and
resumes that one afterwards (the drivers whose CLIs keep conversations), and reads its CLI's output
into a run result through the supervisor's own reading (:func:`runner.agents.supervisor.read_result`):
a success, a failure, a lost conversation, a refused write and an edit.

The Claude and Codex outputs are transcripts of the real CLIs (tests/agents/transcripts/, stdout and
stderr together as the run's log holds them), recorded from claude-code 2.1.328 and codex-cli 0.171.0
against the scripted models of tests/support (reviewer runs, and a writer's ``edited``; the working
directory rewritten to ``/w/tree``). The script driver's output is the bundled demo agent's, run here.
"""

from __future__ import annotations

import subprocess
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from runner.agents.drivers import DRIVERS, RunSpec, driver
from runner.agents.kinds import BUILTIN, Kind
from runner.agents.supervisor import read_result

TRANSCRIPTS = Path(__file__).parent / "transcripts"
CWD = "/w/tree"
PROMPT = "PROMPT-TEXT-NEVER-IN-ARGV"
WIDE = ("bypassPermissions", "--dangerously", "danger-full-access", "acceptEdits")
KINDS = {**BUILTIN, "plain": Kind("plain", ("some-agent", "--run"), driver="plain")}
ALL = ["plain", "script", "claude", "codex"]
CONVERSING = ["claude", "codex"]
"""The drivers whose CLIs keep a conversation and print machine output (``Driver.structured``)."""


def argv(name: str, **fields: Any) -> list[str]:
    spec = RunSpec(cwd=CWD, owned=("src",), locked=("docs",), **fields)
    return KINDS[name].run_argv(spec)


def writes_granted(name: str, args: list[str]) -> bool:
    """Whether the argv lets the agent edit files (by the CLI's own permission words)."""
    if name == "codex":
        return any(arg.startswith("sandbox_mode=") and "read-only" not in arg for arg in args)
    if name == "claude":
        allowed = args[args.index("--allowedTools") + 1].split(",") if "--allowedTools" in args else []
        mode = args[args.index("--permission-mode") + 1] if "--permission-mode" in args else "default"
        return mode in ("acceptEdits", "bypassPermissions") or any(r.startswith(("Edit", "Write")) for r in allowed)
    return False  # plain and script: the kind's argv as configured, nothing granted by corral


def transcript(name: str, case: str) -> list[str]:
    if name == "script":
        # The bundled demo agent, for real: its output is its text, its failure its exit status.
        request = {"success": "echo reviewed", "failed": "fail 2"}[case]
        proc = subprocess.run(
            KINDS["script"].run_argv(RunSpec()), input=request, capture_output=True, text=True, check=False
        )
        return (proc.stdout + proc.stderr).splitlines()
    if name == "plain":
        return {"success": ["done: looked at lib.py"], "failed": ["some-agent: cannot reach the model"]}[case]
    return (TRANSCRIPTS / f"{name}-{case}.log").read_text().splitlines()


def read(tmp_path: Path, name: str, lines: list[str], code: int, spec: RunSpec) -> dict[str, Any] | None:
    """The supervisor's reading of a finished run whose log holds ``lines`` and which exited ``code``."""
    log = tmp_path / "run-1.log"
    log.write_text("".join(f"{line}\n" for line in lines))
    return read_result({"driver": name, "spec": asdict(spec), "log": str(log)}, code)


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("role", ["reviewer", "writer", "agent"])
@pytest.mark.parametrize("session", [None, "01a242ef-7013-7902-aa47-985cbae2ce55"], ids=["first", "later"])
def test_the_prompt_is_never_in_the_argv_and_no_role_is_widened(name: str, role: str, session: str | None) -> None:
    args = argv(name, role=role, session_id=session, new_session_id="11111111-2222-3333-4444-555555555555")
    assert PROMPT not in " ".join(args)
    assert not any(wide in arg for arg in args for wide in WIDE), args
    assert driver(KINDS[name].driver).confinement(RunSpec(role=role)) != "unconfined"
    if role != "writer":
        assert not writes_granted(name, args), args  # a reviewer (or a bare agent) reads


@pytest.mark.parametrize("name", CONVERSING)
def test_a_writer_may_edit_and_only_an_unconfined_kind_is_wider(name: str) -> None:
    assert writes_granted(name, argv(name, role="writer"))
    wide = argv(name, role="writer", unconfined=True)
    assert any(w in arg for arg in wide for w in WIDE)
    assert driver(name).confinement(RunSpec(role="writer", unconfined=True)) == "unconfined"


@pytest.mark.parametrize("name", ["plain", "script"])
def test_a_driver_without_conversations_runs_the_kind_as_configured(name: str) -> None:
    base = argv(name)
    assert argv(name, role="writer") == base and argv(name, session_id="S") == base
    lines = transcript(name, "success")
    parsed = driver(name).parse(lines, RunSpec(cwd=CWD))
    assert parsed.final == "\n".join(lines) and parsed.session_id is None and parsed.error is None


@pytest.mark.parametrize("name", CONVERSING)
def test_a_first_prompt_starts_a_conversation_and_a_later_one_resumes_it(name: str) -> None:
    first = argv(name, new_session_id="11111111-2222-3333-4444-555555555555")
    later = argv(name, session_id="01a242ef-7013-7902-aa47-985cbae2ce55")
    assert "01a242ef-7013-7902-aa47-985cbae2ce55" in later
    assert "--resume" not in first and "resume" not in first
    if driver(name).takes_session_id:  # corral names the conversation (Claude); Codex names its thread itself
        assert "11111111-2222-3333-4444-555555555555" in first
        assert "11111111-2222-3333-4444-555555555555" not in later


@pytest.mark.parametrize("name", ALL)
def test_a_recorded_success_reads_as_a_success(name: str, tmp_path: Path) -> None:
    spec = RunSpec(role="reviewer", cwd=CWD)
    lines = transcript(name, "success")
    result = read(tmp_path, name, lines, 0, spec)
    if name in ("plain", "script"):
        assert result is None  # nothing to read: the output is the text, the exit status the outcome
        return
    assert result is not None and result["error"] is None and result["final"]
    assert result["session_id"] and result["turns"] >= 1
    assert result["usage"]["input_tokens"] > 0 and result["usage"]["output_tokens"] > 0
    assert result["denials"] == [] and result["exit_status"] == 0


@pytest.mark.parametrize("name", CONVERSING)
def test_a_resumed_run_reads_its_own_usage_on_the_same_conversation(name: str) -> None:
    first = driver(name).parse(transcript(name, "success"), RunSpec(role="reviewer", cwd=CWD))
    spec = RunSpec(role="reviewer", cwd=CWD, session_id=first.session_id, session_usage=first.session_usage or None)
    later = driver(name).parse(transcript(name, "resumed"), spec)
    assert later.error is None and later.session_id == first.session_id and not later.session_lost
    assert later.usage["input_tokens"] == first.usage["input_tokens"]  # one model call each


@pytest.mark.parametrize("name", ALL)
def test_a_recorded_failure_reads_as_a_failure(name: str, tmp_path: Path) -> None:
    spec = RunSpec(role="reviewer", cwd=CWD)
    lines = transcript(name, "failed")
    result = read(tmp_path, name, lines, 1, spec)
    if name in ("plain", "script"):
        assert result is None and driver(name).parse(lines, spec).error is None
        return  # the exit status (1) is the failure: the service refuses it (agent_run_failed)
    assert result is not None and result["error"] and "scripted failure" in result["error"]
    assert result["session_lost"] is False


@pytest.mark.parametrize("name", CONVERSING)
def test_a_recorded_lost_conversation_reads_as_lost(name: str, tmp_path: Path) -> None:
    lines = transcript(name, "lost")
    result = read(tmp_path, name, lines, 1, RunSpec(role="reviewer", cwd=CWD, session_id=_resumed_id(lines)))
    assert result is not None and result["session_lost"] is True and result["error"]


def _resumed_id(lines: list[str]) -> str:
    """The conversation id a lost run was asked to resume (the last UUID-looking word it printed)."""
    words = [w.strip("().,:") for line in lines for w in line.split()]
    return [w for w in words if w.count("-") == 4][-1]


@pytest.mark.parametrize("name", CONVERSING)
def test_a_recorded_refused_write_reads_as_a_denial(name: str, tmp_path: Path) -> None:
    result = read(tmp_path, name, transcript(name, "denied"), 0, RunSpec(role="reviewer", cwd=CWD))
    assert result is not None and result["error"] is None
    assert result["denials"] and result["file_changes"] == []
    assert {"tool", "path"} <= set(result["denials"][0])


@pytest.mark.parametrize("name", CONVERSING)
def test_a_recorded_edit_reads_as_a_file_change(name: str, tmp_path: Path) -> None:
    spec = RunSpec(role="writer", cwd=CWD, owned=("src",))
    result = read(tmp_path, name, transcript(name, "edited"), 0, spec)
    assert result is not None and result["error"] is None and result["denials"] == []
    assert result["file_changes"] == ["src/new.py"] and result["tool_calls"] == 1


def test_the_suite_covers_every_built_in_driver() -> None:
    assert set(ALL) == set(DRIVERS) == {kind.driver for kind in KINDS.values()}
    assert [name for name in ALL if DRIVERS[name].structured] == CONVERSING
