"""The real Claude Code CLI driven through the real ``corral`` executable, offline, against a scripted
Anthropic Messages API on loopback (tests/support/anthropic_model.py): conversations that continue,
permissions by role, denials reported, failures and lost sessions as errors, budgets, verdicts, and
the prompt never in any process's argv.

The CLI comes from tests/agentcli (pinned by its lockfile, ``npm ci``); without it these tests skip
in one line, except under CI, where they fail.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.anthropic_model import AnthropicModel, anthropic_model, user_prompts
from tests.support.gitrepo import feature_worktree, git

pytestmark = pytest.mark.slow

CLIS = Path(__file__).resolve().parents[1] / "agentcli" / "node_modules" / ".bin"
CLAUDE = CLIS / "claude"
SHA = "e" * 64


@pytest.fixture
def model() -> Iterator[AnthropicModel]:
    with anthropic_model() as served:
        yield served


@pytest.fixture
def claude_env(cli_env: dict[str, str], tmp_path: Path, model: AnthropicModel, hermetic_git: None) -> dict[str, str]:
    """corral's environment with the real ``claude`` first on PATH, pointed at the scripted model."""
    if not CLAUDE.exists():
        why = "the real Claude Code CLI is not installed (npm ci --prefix tests/agentcli)"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    home = tmp_path / "agent-home"
    home.mkdir()
    env = {**cli_env, **{k: v for k, v in os.environ.items() if k.startswith("GIT_")}}
    env.update(
        PATH=f"{CLIS}{os.pathsep}{env['PATH']}",
        HOME=str(home),
        ANTHROPIC_BASE_URL=model.url,
        ANTHROPIC_API_KEY="sk-test-not-a-key",
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
        DISABLE_AUTOUPDATER="1",
    )
    return env


class Corral:
    def __init__(self, env: dict[str, str], cwd: Path) -> None:
        self.env, self.cwd = env, cwd

    def run(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(Path(sys.executable).parent / "corral"), *args],
            input=stdin, capture_output=True, text=True, env=self.env, cwd=self.cwd, timeout=120, check=False,
        )  # fmt: skip

    def ok(self, *args: str, stdin: str | None = None) -> Any:
        proc = self.run(*args, "--json", stdin=stdin)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return json.loads(proc.stdout)

    def refused(self, status: int, code: str, *args: str) -> dict[str, Any]:
        proc = self.run(*args, "--json")
        assert proc.returncode == status, proc.stdout + proc.stderr
        doc: dict[str, Any] = json.loads(proc.stdout)["error"]
        assert doc["code"] == code, doc
        return doc

    def ask(self, target: str, text: str, *more: str) -> Any:
        return self.ok("ask", target, "--controller", "ctl", "--text", text, "--timeout", "90", *more)


@pytest.fixture
def corral(claude_env: dict[str, str], tmp_path: Path) -> Corral:
    c = Corral(claude_env, tmp_path)
    c.ok("controller", "acquire", "--controller", "ctl", "--authority-ref", "T", "--authority-sha256", SHA)
    return c


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "lib.py").write_text("x = 1\n")
    return root


def reviewer(corral: Corral, project: Path, *more: str) -> dict[str, Any]:
    args = ("reviewer", "start", "--controller", "ctl", "--name", "rev", "--kind", "claude", "--cwd", str(project))
    return dict(corral.ok(*args, *more)["lease"])


def test_a_reviewers_second_prompt_continues_its_conversation(
    corral: Corral, project: Path, model: AnthropicModel
) -> None:
    reviewer(corral, project)
    first = corral.ask("rev", "first question about alpha")
    assert first["output"].startswith("turns=1"), first["output"]
    second = corral.ask("rev", "second question about beta")
    assert second["output"].startswith("turns=2") and "first question about alpha" in second["output"]
    assert user_prompts(model.requests[-1])[:2] == ["first question about alpha", "second question about beta"]
    session = first["receipt"]["session_id"]
    assert session and second["receipt"]["session_id"] == session
    (listed,) = corral.ok("reviewer", "list")["reviewers"]
    assert listed["session_id"] == session and listed["confinement"] == "cli-permissions"
    assert listed["spend"]["runs"] == 2 and listed["spend"]["tokens"] > 0
    assert first["run"]["usage"]["input_tokens"] > 0 and first["run"]["cost_usd"] is not None
    assert first["run"]["turns"] >= 1 and first["denials"] == []


def test_a_reviewer_cannot_write_and_the_denial_is_reported(corral: Corral, project: Path) -> None:
    reviewer(corral, project)
    target = project / "review-notes.md"
    asked = corral.ask("rev", f"WRITE {target}")
    assert not target.exists()
    assert asked["denials"] == [{"tool": "Write", "path": "review-notes.md"}]
    assert asked["receipt"]["denied"] is True


def lane(corral: Corral, tmp_path: Path) -> Path:
    (tmp_path / "git").mkdir()
    worktree = feature_worktree(tmp_path / "git")
    facts = corral.ok("preflight", str(worktree))
    corral.ok(
        "writer", "start", "--controller", "ctl", "--name", "wri", "--kind", "claude", "--worktree", str(worktree),
        "--branch", facts["branch"], "--base-commit", facts["head"], "--expect-head", facts["head"],
        "--expect-status", facts["status_sha256"], "--own", "src", "--lock", "docs", "--purpose", "real agents",
        "--ticket", "T", "--authority-ref", "plan.md", "--authority-sha256", SHA,
    )  # fmt: skip
    return worktree


def test_a_writer_edits_its_owned_scope_and_nothing_else(corral: Corral, tmp_path: Path) -> None:
    worktree = lane(corral, tmp_path)
    inside = corral.ask("wri", f"WRITE {worktree}/src/new.py")
    assert (worktree / "src" / "new.py").read_text() == "written by the model\n"
    assert inside["run"]["file_changes"] == ["src/new.py"] and inside["denials"] == []
    assert inside["receipt"]["denied"] is False
    assert git(worktree, "status", "--porcelain").strip() == "?? src/new.py"


def test_a_failed_turn_is_exit_6_with_the_agents_own_error(corral: Corral, project: Path) -> None:
    reviewer(corral, project)
    doc = corral.refused(6, "agent_run_failed", "ask", "rev", "--controller", "ctl", "--text", "FAIL now")
    assert "scripted failure" in doc["message"] or "scripted failure" in json.dumps(doc["details"])
    assert doc["details"]["receipt"]["state"] == "completed"


def test_a_lost_session_is_agent_session_lost_never_a_fresh_start(
    corral: Corral, project: Path, claude_env: dict[str, str], model: AnthropicModel
) -> None:
    reviewer(corral, project)
    corral.ask("rev", "remember alpha")
    projects = Path(claude_env["HOME"]) / ".claude" / "projects"
    assert projects.is_dir()
    shutil.rmtree(projects)  # the CLI's session store is gone
    seen = len(model.requests)
    doc = corral.refused(6, "agent_session_lost", "ask", "rev", "--controller", "ctl", "--text", "and now?")
    assert "No conversation found" in doc["message"]
    assert len(model.requests) == seen  # no fresh conversation was started in its place


def test_a_spent_budget_stops_the_next_prompt(corral: Corral, project: Path) -> None:
    reviewer(corral, project, "--budget-tokens", "10")
    corral.ask("rev", "the one prompt the budget allows")
    doc = corral.refused(4, "budget_exhausted", "ask", "rev", "--controller", "ctl", "--text", "one more")
    assert doc["details"]["limit"] == "budget_tokens" and doc["details"]["spent"] >= 10
    assert corral.ok("receipts")["receipts"] == []  # nothing was reserved, nothing delivered


def test_the_prompt_is_never_in_any_processs_argv(corral: Corral, project: Path) -> None:
    reviewer(corral, project)
    marker = "SLOW secret-prompt-marker-7f3a"
    relayed = corral.ok("relay", "rev", "--controller", "ctl", stdin=marker)
    seen_working = False
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
                except OSError:
                    continue
                assert b"secret-prompt-marker" not in cmdline, cmdline
                seen_working = seen_working or b"stream-json" in cmdline
        if seen_working:
            break
        time.sleep(0.05)
    assert seen_working, "the claude run was never seen running"
    collected = corral.ok("collect", "--controller", "ctl", "--receipt", relayed["receipt"]["token"], "--timeout", "90")
    assert "secret-prompt-marker" in collected["results"][0]["output"]
