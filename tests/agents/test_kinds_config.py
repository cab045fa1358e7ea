"""agents.yaml that is there but not a regular file is refused by path; absent means the built-ins.

Through the real ``corral`` executable: ``corral status --json`` lists the kinds in force, so a
silently ignored configuration would show the built-ins alone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from runner.agents.kinds import Kinds
from runner.errors import InvalidError

CONFIG = "kinds:\n  mine:\n    argv: ['{python}', '-m', 'runner.agents.demo_agent']\n"


def corral(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(Path(sys.executable).parent / "corral"), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=30,  # a FIFO that blocked the open would hang here: the timeout fails the test
        check=False,
    )


def _directory(path: Path) -> None:
    path.mkdir()


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _dangling(path: Path) -> None:
    path.symlink_to(path.parent / "gone.yaml")


BAD: dict[str, Callable[[Path], None]] = {"directory": _directory, "fifo": _fifo, "dangling-symlink": _dangling}


@pytest.mark.parametrize("where", ["home", "project"])
@pytest.mark.parametrize("bad", list(BAD))
def test_an_unusable_agents_yaml_is_refused_by_path(
    cli_env: dict[str, str], home: Path, tmp_path: Path, where: str, bad: str
) -> None:
    project = tmp_path / "project"
    (project / ".corral").mkdir(parents=True)
    home.mkdir(mode=0o700)
    path = home / "agents.yaml" if where == "home" else project / ".corral" / "agents.yaml"
    BAD[bad](path)
    proc = corral(cli_env, project, "status", "--json")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    error = json.loads(proc.stdout)["error"]
    assert error["code"] == "agents_config_invalid"
    assert error["details"]["path"] == str(path)
    assert str(path) in error["message"]


def test_absent_means_built_ins_and_a_file_or_symlink_to_one_is_used(
    cli_env: dict[str, str], home: Path, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    proc = corral(cli_env, project, "status", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["agent_host"]["kinds"] == ["claude", "codex", "script"]

    real = tmp_path / "shared-agents.yaml"
    real.write_text(CONFIG)
    (home / "agents.yaml").symlink_to(real)
    proc = corral(cli_env, project, "status", "--json")
    assert proc.returncode == 0, proc.stderr
    assert "mine" in json.loads(proc.stdout)["agent_host"]["kinds"]


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    """In process, too: no writer ever opens the FIFO, so a blocking open would never return."""
    fifo = tmp_path / "agents.yaml"
    os.mkfifo(fifo)
    with pytest.raises(InvalidError) as caught:
        Kinds.load([fifo])
    assert caught.value.code == "agents_config_invalid"
    assert caught.value.details == {"path": str(fifo)}
