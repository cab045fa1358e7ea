"""Fixtures of the CLI tests: the real ``corral`` executable in a private state home, a project dir."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture
def corral(cli_env: dict[str, str], tmp_path: Path) -> Any:
    def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(Path(sys.executable).parent / "corral"), *args],
            input=stdin, capture_output=True, text=True, env=cli_env, cwd=tmp_path, timeout=60, check=False,
        )  # fmt: skip

    return run


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "lib.py").write_text("x = 1\ny = 2\n")
    return root
