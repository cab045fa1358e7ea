"""``corral init``: a demo project made in one directory, nothing overwritten, the agent CLIs found
named in its agents.yaml, and the commands it prints work as written.

Real components: the ``corral`` executable, real git, the process host with the scripted agent.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from runner.agents.kinds import Kinds

pytestmark = pytest.mark.usefixtures("hermetic_git")


def corral(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [str(Path(sys.executable).parent / "corral"), *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, cwd=cwd, timeout=120, check=False)


def test_init_makes_a_project_whose_printed_commands_work(tmp_path: Path, cli_env: dict[str, str]) -> None:
    made = corral(cli_env, tmp_path, "init", "demo")
    assert made.returncode == 0, made.stderr
    root = tmp_path / "demo"
    assert sorted(p.name for p in root.iterdir()) == [".corral", "lane", "plans", "project", "repo"]
    branch = ["git", "-C", str(root / "lane"), "branch", "--show-current"]
    lane = subprocess.run(branch, capture_output=True, text=True, check=True)
    assert lane.stdout.strip() == "example-lane"
    assert (root / "lane" / ".corral" / "validate.yaml").is_file(), "the lane's HEAD carries its validations"
    lines = made.stdout.splitlines()
    assert f"  cd {root}" in lines
    commands = [line.strip().split("  #")[0].strip() for line in lines if line.startswith("  corral ")]
    assert len(commands) == 3 and commands[0] == "corral run plans/review.yaml"
    first = corral(cli_env, root, *commands[0].split()[1:], "--json")
    assert first.returncode == 0, first.stdout + first.stderr
    assert json.loads(first.stdout.splitlines()[-1])["state"] == "succeeded"
    status = corral(cli_env, root, *commands[2].split()[1:])
    assert status.returncode == 0 and "controller: 1 released" in status.stdout


def test_init_overwrites_nothing_and_writes_nothing_when_refused(tmp_path: Path, cli_env: dict[str, str]) -> None:
    (tmp_path / "plans").mkdir()
    (tmp_path / "plans" / "mine.yaml").write_text("keep me\n")
    refused = corral(cli_env, tmp_path, "init", "--json")
    assert refused.returncode == 3, refused.stdout + refused.stderr
    error = json.loads(refused.stdout)["error"]
    assert error["code"] == "init_exists" and error["details"]["taken"] == ["plans"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plans"]
    assert (tmp_path / "plans" / "mine.yaml").read_text() == "keep me\n"
    a_file = tmp_path / "file"
    a_file.write_text("x")
    assert json.loads(corral(cli_env, tmp_path, "init", str(a_file), "--json").stdout)["error"]["code"] == "usage"


def test_the_agent_clis_found_on_path_are_kinds_of_its_agents_yaml(tmp_path: Path, cli_env: dict[str, str]) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "claude"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    env = dict(cli_env, PATH=f"{bin_dir}{os.pathsep}{cli_env['PATH']}")
    made = corral(env, tmp_path, "init", "demo", "--json")
    assert made.returncode == 0, made.stderr
    report = json.loads(made.stdout)
    assert report["agents"]["claude"] == str(fake)
    path = tmp_path / "demo" / ".corral" / "agents.yaml"
    document = yaml.safe_load(path.read_text())
    assert list(document["kinds"]) == ["claude"] + (["codex"] if report["agents"]["codex"] else [])
    kinds = Kinds.load([path])
    claude = kinds.get("claude")
    assert claude.argv[0] == str(fake) and claude.driver == "claude"
    assert "ANTHROPIC_BASE_URL" in claude.env_allow, "pinned to the CLI found, otherwise the built-in"
