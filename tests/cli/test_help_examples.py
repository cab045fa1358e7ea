"""The ``--help`` of every command a user types first ends with an example that works as written:
the examples are read out of the help text and run, in order, by bash in a directory ``corral init``
made (the servers' examples are parsed, not served).

Real components: the ``corral`` executable, bash, git, the process host with the scripted agent,
Bubblewrap for the writer lane.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import click
import pytest

from runner.cli.app import cli

FIRST = [
    "controller acquire",
    "reviewer start",
    "ask",
    "collect",
    "run",
    "memory checkpoint",
    "mesh send",
    "writer start",
    "mcp config",
    "serve",
]
"""In the order they run: each example builds on the ones before (the controller, the reviewer)."""
SERVED = {"serve"}


def _command(path: str) -> click.Command:
    command: click.Command = cli
    for part in path.split():
        assert isinstance(command, click.Group)
        found = command.get_command(click.Context(command), part)
        assert found is not None, path
        command = found
    return command


def example(path: str) -> list[str]:
    """The shell lines of the example that ends ``corral PATH --help``."""
    text = subprocess.run(
        [str(Path(sys.executable).parent / "corral"), *path.split(), "--help"],
        capture_output=True, text=True, check=True, timeout=30,
    ).stdout  # fmt: skip
    lines = text.split("\nOptions:")[0].splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip().startswith("Example")), None)
    assert start is not None, f"corral {path} --help has no example"
    block = [line.strip() for line in lines[start + 1 :] if line.startswith("    ")]
    assert block and any(line.startswith(f"corral {path} ") for line in block), (path, block)
    return block


@pytest.mark.slow
@pytest.mark.usefixtures("hermetic_git")
def test_every_first_command_ends_with_an_example_that_works(tmp_path: Path, cli_env: dict[str, str]) -> None:
    if shutil.which("bwrap") is None:
        pytest.skip("the writer lane's example starts a confined agent (Bubblewrap)")
    root = tmp_path / "demo"
    env = dict(cli_env, CORRAL_HOME=str(tmp_path / "home"))
    assert subprocess.run(["corral", "init", str(root)], env=env, check=False, capture_output=True).returncode == 0
    for path in FIRST:
        lines = example(path)
        if path in SERVED:  # a server runs until stopped: its example must parse, not serve
            (line,) = lines
            args = shlex.split(line)[1 + len(path.split()) :]
            _command(path).make_context(path, args)
            continue
        script = "set -euo pipefail\n" + "\n".join(lines) + "\n"
        ran = subprocess.run(
            ["bash", "-c", script], cwd=root, env=env, capture_output=True, text=True, timeout=180, check=False
        )
        assert ran.returncode == 0, f"corral {path}'s example failed:\n{script}\n{ran.stdout}\n{ran.stderr}"


def test_the_authority_digest_is_explained() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()
    assert "sha256sum" in doc and "--authority-sha256" in doc
    assert "_CORRAL_COMPLETE" in doc, "shell completion is documented"
