"""The real Codex CLI (``codex exec``) driven through the real ``corral`` executable, offline, against a
scripted OpenAI Responses API on loopback (tests/support/responses_model.py): conversations that
continue, sandboxes by role, denials as far as codex reports them, failures and lost sessions as
errors, usage, budgets, verdicts, and the prompt never in any process's argv.

Codex reads a private ``CODEX_HOME`` whose ``config.toml`` names the scripted provider. ``TMPDIR``
points into the test's directory: with the temporary directory above ``CODEX_HOME`` (pytest's
``tmp_path`` is under ``/tmp``) codex warns that it refuses to create its helper binaries there.

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

from tests.support.gitrepo import feature_worktree, git
from tests.support.responses_model import ResponsesModel, codex_config, responses_model, user_prompts

pytestmark = pytest.mark.slow

CLIS = Path(__file__).resolve().parents[1] / "agentcli" / "node_modules" / ".bin"
CODEX = CLIS / "codex"
SHA = "e" * 64
VERDICT = {
    "type": "object",
    "properties": {"verdict": {"enum": ["approve", "request_changes"]}, "findings": {"type": "array"}},
    "required": ["verdict", "findings"],
    "additionalProperties": False,
}


@pytest.fixture
def model() -> Iterator[ResponsesModel]:
    with responses_model() as served:
        yield served


@pytest.fixture
def codex_env(cli_env: dict[str, str], tmp_path: Path, model: ResponsesModel, hermetic_git: None) -> dict[str, str]:
    """corral's environment with the real ``codex`` first on PATH, pointed at the scripted model."""
    if not CODEX.exists():
        why = "the real Codex CLI is not installed (npm ci --prefix tests/agentcli)"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    home = tmp_path / "agent-home"
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True)
    (codex_home / "config.toml").write_text(codex_config(model.url, "CODEX_API_KEY"))
    scratch = tmp_path / "agent-tmp"
    scratch.mkdir()
    env = {**cli_env, **{k: v for k, v in os.environ.items() if k.startswith("GIT_")}}
    env.update(
        PATH=f"{CLIS}{os.pathsep}{env['PATH']}",
        HOME=str(home),
        CODEX_HOME=str(codex_home),
        CODEX_API_KEY="sk-test-not-a-key",
        TMPDIR=str(scratch),
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
def corral(codex_env: dict[str, str], tmp_path: Path) -> Corral:
    c = Corral(codex_env, tmp_path)
    c.ok("controller", "acquire", "--controller", "ctl", "--authority-ref", "T", "--authority-sha256", SHA)
    return c


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "lib.py").write_text("x = 1\n")
    return root


def reviewer(corral: Corral, project: Path, *more: str) -> dict[str, Any]:
    args = ("reviewer", "start", "--controller", "ctl", "--name", "rev", "--kind", "codex", "--cwd", str(project))
    return dict(corral.ok(*args, *more)["lease"])


def lane(corral: Corral, tmp_path: Path) -> Path:
    (tmp_path / "git").mkdir()
    worktree = feature_worktree(tmp_path / "git")
    facts = corral.ok("preflight", str(worktree))
    corral.ok(
        "writer", "start", "--controller", "ctl", "--name", "wri", "--kind", "codex", "--worktree", str(worktree),
        "--branch", facts["branch"], "--base-commit", facts["head"], "--expect-head", facts["head"],
        "--expect-status", facts["status_sha256"], "--own", "src", "--lock", "docs", "--purpose", "real agents",
        "--ticket", "T", "--authority-ref", "plan.md", "--authority-sha256", SHA,
    )  # fmt: skip
    return worktree


def test_a_reviewers_second_prompt_resumes_its_thread(corral: Corral, project: Path, model: ResponsesModel) -> None:
    reviewer(corral, project)
    first = corral.ask("rev", "first question about alpha")
    assert first["output"] == "turns=1 saw: first question about alpha", first["output"]
    second = corral.ask("rev", "second question about beta")
    assert second["output"] == "turns=2 saw: first question about alpha | second question about beta"
    assert user_prompts(model.requests[-1]) == ["first question about alpha", "second question about beta"]
    thread = first["receipt"]["session_id"]
    assert thread and second["receipt"]["session_id"] == thread
    (listed,) = corral.ok("reviewer", "list")["reviewers"]
    assert listed["session_id"] == thread and listed["confinement"] == "codex-sandbox:read-only"
    # Each run's own usage (one model call: 11 in, 3 of them cached, 5 out), though codex reports the
    # thread's running total (22/6/10 after the second run).
    usage = {"input_tokens": 11, "output_tokens": 5, "cache_read_tokens": 3}
    assert first["run"]["usage"] == usage and second["run"]["usage"] == usage
    assert listed["spend"] == {"tokens": 38, "cost_usd": 0.0, "turns": 2, "runs": 2}
    assert "cost_usd" not in first["run"]  # codex reports no cost
    assert first["run"]["turns"] == 1 and first["denials"] == [] and first["receipt"]["denied"] is False


def test_a_reviewer_cannot_write_and_a_refused_patch_is_a_denial(corral: Corral, project: Path) -> None:
    reviewer(corral, project)
    corral.ask("rev", "look at lib.py")  # the write comes on the resumed thread: the sandbox holds there too
    target = project / "review-notes.md"
    asked = corral.ask("rev", f"WRITE {target}")
    assert not target.exists()
    assert "patch rejected: writing is blocked by read-only sandbox" in asked["output"]
    # codex logs the refusal's reason, not its path (and --json has no item for it).
    assert asked["denials"] == [
        {"tool": "apply_patch", "path": "", "reason": "writing is blocked by read-only sandbox"}
    ]
    assert asked["receipt"]["denied"] is True


def test_a_reviewers_shell_write_does_not_land_and_codex_does_not_report_it(corral: Corral, project: Path) -> None:
    reviewer(corral, project)
    target = project / "notes.txt"
    asked = corral.ask("rev", f"SHELL echo x > {target}")
    assert not target.exists()
    assert "Read-only file system" in asked["output"]  # what the model was told
    # codex-cli 0.171 prints no command_execution item for a command its sandbox refused: nothing to read.
    assert asked["denials"] == [] and asked["run"]["tool_calls"] == 0


def test_a_writers_edit_inside_its_worktree_lands(corral: Corral, tmp_path: Path) -> None:
    worktree = lane(corral, tmp_path)
    inside = corral.ask("wri", f"WRITE {worktree}/src/new.py")
    assert (worktree / "src" / "new.py").read_text() == "written by the model\n"
    assert inside["run"]["file_changes"] == ["src/new.py"] and inside["denials"] == []
    assert inside["receipt"]["denied"] is False and inside["run"]["tool_calls"] == 1
    assert git(worktree, "status", "--porcelain").strip() == "?? src/new.py"
    (listed,) = corral.ok("writer", "list")["writers"]
    assert listed["confinement"] == "codex-sandbox:workspace-write"


def test_a_writer_cannot_write_outside_its_worktree(corral: Corral, tmp_path: Path, codex_env: dict[str, str]) -> None:
    worktree = lane(corral, tmp_path)
    outside = tmp_path / "outside.txt"
    patched = corral.ask("wri", f"WRITE {outside}")
    assert not outside.exists()
    assert patched["denials"] == [{"tool": "apply_patch", "path": "", "reason": "writing outside of the project"}]
    # Nor through the shell into $TMPDIR or /tmp, which workspace-write would open unless told not to.
    for target in (Path(codex_env["TMPDIR"]) / "t.txt", Path("/tmp") / f"corral-codex-{os.getpid()}.txt"):
        shelled = corral.ask("wri", f"SHELL echo x > {target}")
        assert not target.exists() and "Read-only file system" in shelled["output"]
    assert git(worktree, "status", "--porcelain").strip() == ""


def test_a_codex_writer_cannot_write_its_locked_scope(corral: Corral, tmp_path: Path) -> None:
    """Codex's own sandbox is the whole worktree; corral's Bubblewrap around it keeps the locked scope
    (here one that does not exist yet) read-only, so the write fails and nothing lands there."""
    worktree = lane(corral, tmp_path)
    asked = corral.ask("wri", f"WRITE {worktree}/docs/locked.md")
    assert not (worktree / "docs" / "locked.md").exists()
    assert asked["run"]["file_changes"] == []
    assert git(worktree, "status", "--porcelain").strip() == "", "nothing git would see"


def test_a_codex_writers_write_outside_its_owned_scopes_is_caught_by_the_audit(corral: Corral, tmp_path: Path) -> None:
    """What the outer layer leaves to the audit for a CLI with its own sandbox: a new file elsewhere in
    the worktree lands, and `writer audit` names it (release would refuse it: scope_violation)."""
    worktree = lane(corral, tmp_path)
    corral.ask("wri", f"WRITE {worktree}/stray.txt")
    assert (worktree / "stray.txt").exists()
    proc = corral.run("writer", "audit", "wri", "--controller", "ctl", "--json")
    assert proc.returncode == 4, proc.stdout + proc.stderr  # not clean: what release would refuse
    audited = json.loads(proc.stdout)
    assert [(v["path"], v["scope"]) for v in audited["violations"]] == [("stray.txt", "outside")], audited


@pytest.mark.parametrize(
    ("directive", "said"), [("FAIL", "scripted failure"), ("BROKEN", "scripted broken stream")], ids=["http", "stream"]
)
def test_a_failed_turn_is_exit_6_with_the_agents_own_error(
    corral: Corral, project: Path, directive: str, said: str
) -> None:
    reviewer(corral, project)
    doc = corral.refused(6, "agent_run_failed", "ask", "rev", "--controller", "ctl", "--text", f"{directive} now")
    assert said in doc["message"] and doc["details"]["agent_error"].endswith(said)
    assert doc["details"]["receipt"]["state"] == "completed"


def test_a_lost_thread_is_agent_session_lost_never_a_fresh_start(
    corral: Corral, project: Path, codex_env: dict[str, str], model: ResponsesModel
) -> None:
    reviewer(corral, project)
    corral.ask("rev", "remember alpha")
    sessions = Path(codex_env["CODEX_HOME"]) / "sessions"
    assert sessions.is_dir()
    shutil.rmtree(sessions)  # the CLI's thread store is gone
    seen = len(model.requests)
    doc = corral.refused(6, "agent_session_lost", "ask", "rev", "--controller", "ctl", "--text", "and now?")
    assert "no rollout found" in doc["message"]
    assert len(model.requests) == seen  # no fresh conversation was started in its place


def test_a_spent_budget_stops_the_next_prompt(corral: Corral, project: Path) -> None:
    reviewer(corral, project, "--budget-tokens", "10")
    corral.ask("rev", "the one prompt the budget allows")
    doc = corral.refused(4, "budget_exhausted", "ask", "rev", "--controller", "ctl", "--text", "one more")
    assert doc["details"]["limit"] == "budget_tokens" and doc["details"]["spent"] >= 10
    assert corral.ok("receipts")["receipts"] == []  # nothing was reserved, nothing delivered


def test_a_verdict_schema_reaches_the_model_and_is_enforced(
    corral: Corral, project: Path, tmp_path: Path, model: ResponsesModel
) -> None:
    schema = tmp_path / "verdict.json"
    schema.write_text(json.dumps(VERDICT))
    reviewer(corral, project)
    answer = {"verdict": "approve", "findings": []}
    asked = corral.ask("rev", f"JSON {json.dumps(answer)}", "--schema", str(schema))
    assert asked["receipt"]["verdict"] == answer
    # --output-schema: codex asks the model for that shape (strict JSON Schema output), it checks nothing itself.
    assert model.requests[-1]["text"]["format"]["schema"] == VERDICT
    wrong = json.dumps({"verdict": "maybe", "findings": []})
    doc = corral.refused(
        6, "agent_run_failed", "ask", "rev", "--controller", "ctl", "--text", f"JSON {wrong}", "--schema", str(schema)
    )
    assert "does not match the schema" in doc["message"]


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
                seen_working = seen_working or b"--skip-git-repo-check" in cmdline
        if seen_working:
            break
        time.sleep(0.05)
    assert seen_working, "the codex run was never seen running"
    collected = corral.ok("collect", "--controller", "ctl", "--receipt", relayed["receipt"]["token"], "--timeout", "90")
    assert "secret-prompt-marker" in collected["results"][0]["output"]
