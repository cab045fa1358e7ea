"""Exit statuses of agent operations through the real ``corral`` executable (issue 24).

Exit 1 is for bugs only: an agent host that fails to start a pane is ``agent_start_failed`` with its
own exit status (7), and Herdr refusing a kind is the refusal ``agent_kind_unknown`` (exit 4) with
nothing left behind (its pane closed, the name free again). Herdr is the contract fake in the tree.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fake_herdr import FakeHerdr

from runner.errors import STATUS

SHA = "e" * 64
EXOTIC = "kinds:\n  exotic:\n    argv: [exotic]\n    herdr_kind: exotic\n"


def run(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(Path(sys.executable).parent / "corral"), *args],
        capture_output=True, text=True, env=env, cwd=cwd, timeout=60, check=False,
    )  # fmt: skip


@pytest.fixture
def env(fake_herdr: FakeHerdr, home: Path) -> dict[str, str]:
    """The executable's environment, taken after the fake Herdr is first on PATH."""
    environ = dict(os.environ)
    environ["CORRAL_HOME"] = str(home)
    environ["PATH"] = f"{fake_herdr.bin}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{environ['PATH']}"
    return environ


def start(env: dict[str, str], project: Path, kind: str, name: str = "rev") -> subprocess.CompletedProcess[str]:
    return run(env, project, "reviewer", "start", "--controller", "ctl", "--name", name, "--kind", kind,
               "--cwd", str(project), "--host", "herdr", "--json")  # fmt: skip


@pytest.fixture
def project(tmp_path: Path, env: dict[str, str], home: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    home.mkdir(parents=True, exist_ok=True)
    home.chmod(0o700)
    (home / "agents.yaml").write_text(EXOTIC)
    acquired = run(env, root, "controller", "acquire", "--controller", "ctl", "--authority-ref", "T",
                   "--authority-sha256", SHA)  # fmt: skip
    assert acquired.returncode == 0, acquired.stdout + acquired.stderr
    return root


def error(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(proc.stdout)["error"]
    return doc


def test_the_agent_operation_category_has_its_own_exit_status() -> None:
    assert STATUS["agent_operation"].exit == 7
    assert STATUS["internal"].exit == 1
    assert len({row.exit for row in STATUS.values()}) == len(STATUS), "two categories share an exit status"


def test_herdr_refusing_a_kind_is_agent_kind_unknown_and_leaves_nothing_behind(
    env: dict[str, str], project: Path, fake_herdr: FakeHerdr
) -> None:
    before = set(fake_herdr.state()["panes"])  # the coordinator's own pane

    refused = start(env, project, "exotic")

    assert refused.returncode == STATUS["refused"].exit, refused.stdout + refused.stderr
    doc = error(refused)
    assert doc["code"] == "agent_kind_unknown", doc
    assert "unsupported interactive agent kind: exotic" in doc["message"]
    assert doc["details"]["started"] is False and doc["details"]["kind"] == "exotic"
    assert set(fake_herdr.state()["panes"]) == before, "the refused start left a pane open"
    listed = json.loads(run(env, project, "reviewer", "list", "--json").stdout)
    assert [lease["name"] for lease in listed["reviewers"]] == [], "the refused start left a live lease"
    # Nothing holds the name: a start of a kind Herdr runs takes it.
    started = start(env, project, "script")
    assert started.returncode == 0, started.stdout + started.stderr


def test_a_failed_start_on_the_host_exits_with_the_agent_operation_status_not_1(
    env: dict[str, str], project: Path, fake_herdr: FakeHerdr
) -> None:
    env = {**env, "FAKE_HERDR_DETECT_KIND": "codex"}  # Herdr detects another agent: agent_kind_mismatch

    failed = start(env, project, "script")

    assert failed.returncode == 7, failed.stdout + failed.stderr
    doc = error(failed)
    assert doc["code"] == "agent_start_failed", doc
    assert doc["details"]["lease"]["state"] == "failed_closed"
    assert "Traceback" not in failed.stderr
