"""Record the transcripts the driver contract reads: the real claude and codex (tests/agentcli) run
with their drivers' argv against the scripted models of tests/support, stdout and stderr together as
a run's log holds them, the working directory rewritten to ``/w/tree``.

Run from the repository root after ``npm ci --prefix tests/agentcli``:
``.venv/bin/python -m tests.agents.transcripts.record``.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import uuid
from pathlib import Path
from typing import Any

from runner.agents.drivers import RunSpec
from runner.agents.kinds import BUILTIN
from tests.support.anthropic_model import anthropic_model
from tests.support.responses_model import codex_config, responses_model

HERE = Path(__file__).parent
BIN = HERE.parents[1] / "agentcli" / "node_modules" / ".bin"


def record(name: str, env: dict[str, str], spec: RunSpec, prompt: str, case: str, base: Path) -> str:
    """Run one case and write ``<name>-<case>.log``; the log's text (paths not yet rewritten)."""
    argv = BUILTIN[name].run_argv(spec)
    argv[0] = str(BIN / argv[0])
    proc = subprocess.run(
        argv, input=prompt, cwd=spec.cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, timeout=90, check=False,
    )  # fmt: skip
    (HERE / f"{name}-{case}.log").write_text(proc.stdout.replace(spec.cwd, "/w/tree").replace(str(base), "/w"))
    return proc.stdout


def main() -> None:
    # Outside /tmp: codex refuses to create its helper binaries under the temporary directory, and warns.
    with tempfile.TemporaryDirectory(dir=HERE.parents[2]) as where:
        base = Path(where)
        project, scratch = base / "proj", base / "tmp"
        project.mkdir()
        scratch.mkdir()
        (project / "lib.py").write_text("x = 1\n")

        def spec(**fields: Any) -> RunSpec:
            return RunSpec(cwd=str(project), **fields)

        path = os.environ["PATH"]
        with responses_model() as model:
            home = base / "codex-home" / ".codex"
            home.mkdir(parents=True)
            (home / "config.toml").write_text(codex_config(model.url))
            env = {"PATH": path, "HOME": str(home.parent), "CODEX_HOME": str(home), "CODEX_API_KEY": "x"}
            env["TMPDIR"] = str(scratch)
            first = record("codex", env, spec(role="reviewer"), "first question", "success", base)
            thread = next(line for line in first.splitlines() if "thread.started" in line).split('"')[-2]
            record("codex", env, spec(role="reviewer", session_id=thread), "second question", "resumed", base)
            record("codex", env, spec(role="reviewer"), "FAIL now", "failed", base)
            lost = spec(role="reviewer", session_id="01a242ef-0000-7000-8000-000000000000")
            record("codex", env, lost, "hello", "lost", base)
            record("codex", env, spec(role="reviewer"), f"WRITE {project}/notes.md", "denied", base)
            record("codex", env, spec(role="writer"), f"WRITE {project}/src/new.py", "edited", base)
        with anthropic_model() as model:
            home = base / "claude-home"
            home.mkdir()
            env = {"PATH": path, "HOME": str(home), "ANTHROPIC_BASE_URL": model.url, "ANTHROPIC_API_KEY": "sk-test"}
            env |= {"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1", "TMPDIR": str(scratch)}
            session = str(uuid.uuid4())
            record("claude", env, spec(role="reviewer", new_session_id=session), "first question", "success", base)
            record("claude", env, spec(role="reviewer", session_id=session), "second question", "resumed", base)
            record("claude", env, spec(role="reviewer", new_session_id=str(uuid.uuid4())), "FAIL now", "failed", base)
            record("claude", env, spec(role="reviewer", session_id=str(uuid.uuid4())), "hello", "lost", base)
            denied = spec(role="reviewer", new_session_id=str(uuid.uuid4()))
            record("claude", env, denied, f"WRITE {project}/notes.md", "denied", base)
            edited = spec(role="writer", owned=("src",), new_session_id=str(uuid.uuid4()))
            record("claude", env, edited, f"WRITE {project}/src/new.py", "edited", base)


if __name__ == "__main__":
    main()
