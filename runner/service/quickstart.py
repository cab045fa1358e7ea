"""``corral init``: a demo project to try corral in, made in one directory and nowhere else.

It holds ``project/`` (files for a reviewer), ``repo/`` (a git repository whose base commit carries
``.corral/validate.yaml``) with its linked worktree ``lane/`` on branch ``example-lane`` (a writer
lane), ``.corral/agents.yaml`` naming the agent CLIs found on PATH, and ``plans/``: the shipped
example plans, whose relative paths are this directory. Nothing is overwritten: a name that is
already there refuses the whole init before anything is written (``init_exists``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.data import data_dir
from runner.errors import CorralError, InputError

NAMES = ("project", "repo", "lane", "plans", ".corral")
"""What init makes in the directory, each refused if already there."""

BRANCH = "example-lane"

VALIDATE = """\
# The validations a writer lane's changes must pass, run in the sandbox by `corral writer verify`.
validations:
  - name: compiles
    argv:
      - python3
      - -c
      - "import pathlib; [compile(p.read_text(), str(p), 'exec') for p in pathlib.Path('.').rglob('*.py')]"
  - name: feature
    argv: [python3, -c, "import sys; sys.path.insert(0, 'src'); import feature; assert feature.feature() == 42"]
"""

PROJECT = {
    "README.md": "A small project for a reviewer to read (made by corral init).\n",
    "app.py": (
        "def average(values):\n"
        "    # bug: an empty list divides by zero\n"
        "    return sum(values) / len(values)\n\n\n"
        "print(average([1, 2, 3]))\n"
    ),
}

REPO = {
    "README.md": "The repository a writer lane works in (made by corral init).\n",
    "src/app.py": "print('app')\n",
    ".corral/validate.yaml": VALIDATE,
}

EXAMPLES = ("review", "batch-review", "writer-lane", "validate")


@dataclass
class Initialized:
    """What init made: the directory, the agent CLIs found, and the commands to run first."""

    root: Path
    agents: dict[str, str | None] = field(default_factory=dict)
    """Each built-in agent CLI (claude, codex) and where it was found on PATH, or None."""
    made: list[str] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"root": str(self.root), "made": self.made, "agents": self.agents, "next": self.commands}


def _git(cwd: Path, *args: str) -> None:
    """git with no user configuration or hooks in play: the same repository on every machine."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update({"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"})
    argv = [
        "git",
        "-c",
        "user.name=corral init",
        "-c",
        "user.email=init@corral.invalid",
        "-c",
        "commit.gpgsign=false",
        "-c",
        f"core.hooksPath={os.devnull}",
        *args,
    ]
    try:
        subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=True, timeout=60)
    except FileNotFoundError:
        raise InputError("git", "git is not installed (apt-get install git)", code="git_missing") from None
    except subprocess.CalledProcessError as exc:
        raise InputError(
            "git", f"git {args[0]} failed: {(exc.stderr or exc.stdout).strip()}", code="init_failed"
        ) from None


def _agents_yaml(found: dict[str, str | None]) -> str:
    from runner.agents.kinds import BUILTIN

    lines = [
        "# yaml-language-server: $schema=https://corral.dev/schemas/agents.schema.json",
        "# Agent kinds for this project (read when corral runs from this directory). Made by corral init:",
    ]
    for name, path in found.items():
        lines.append(f"#   {name}: {'found at ' + path if path else 'not found on PATH'}")
    lines.append("# A kind below is the built-in of its name pinned to the CLI found; `script` (corral's own")
    lines.append("# scripted agent) is always there. Set `kind: claude` or `kind: codex` in a plan to use one.")
    kinds = {name: path for name, path in found.items() if path}
    if not kinds:
        lines.append("kinds: {}")
        return "\n".join(lines) + "\n"
    lines.append("kinds:")
    for name, path in kinds.items():
        kind = BUILTIN[name]
        argv = [path, *kind.argv[1:]]
        lines.append(f"  {name}:")
        lines.append(f"    description: {kind.name} as built in, run from {path}")
        lines.append(f"    driver: {kind.driver}")
        lines.append(f"    argv: [{', '.join(_quote(a) for a in argv)}]")
        if kind.options:
            lines.append("    options: {" + ", ".join(f"{k}: {_quote(v)}" for k, v in kind.options.items()) + "}")
        if kind.env_allow:
            lines.append(f"    env_allow: [{', '.join(kind.env_allow)}]")
    return "\n".join(lines) + "\n"


def _quote(text: str) -> str:
    import json

    return json.dumps(text)


def init_project(root: Path, which: Callable[[str], str | None] = shutil.which) -> Initialized:
    """Make the demo project in ``root`` (created if missing).

    Raises:
        InputError: ``init_exists`` (a name init makes is already there: nothing written),
            ``init_failed`` (root is not a directory, or git failed: what was made is removed),
            ``git_missing``.
    """
    root = root.absolute()
    if root.exists() and not root.is_dir():
        raise InputError("directory", f"{root} is not a directory", code="init_failed", path=str(root))
    taken = [name for name in NAMES if os.path.lexists(root / name)]
    if taken:
        raise InputError(
            "directory",
            f"{root} already has {', '.join(taken)}: corral init makes these and overwrites nothing "
            "(choose an empty directory: corral init DIR)",
            code="init_exists",
            path=str(root),
            taken=taken,
        )
    root.mkdir(parents=True, exist_ok=True)
    found = {name: which(name) for name in ("claude", "codex")}
    # Made in a scratch directory inside root and moved into place, so a failure leaves nothing behind.
    scratch = Path(tempfile.mkdtemp(prefix=".corral-init-", dir=root))
    try:
        for name, text in PROJECT.items():
            _write(scratch / "project" / name, text)
        repo = scratch / "repo"
        for name, text in REPO.items():
            _write(repo / name, text)
        _git(repo, "init", "-q", "-b", "main")
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", "base: the validations a writer lane must pass")
        _write(scratch / ".corral" / "agents.yaml", _agents_yaml(found))
        examples = data_dir("recipes") / "examples"
        for name in EXAMPLES:
            _write(scratch / "plans" / f"{name}.yaml", (examples / f"{name}.yaml").read_text())
        for name in ("project", "repo", "plans", ".corral"):
            (scratch / name).rename(root / name)
        # The worktree is added where it lives: git records its absolute path.
        _git(root / "repo", "worktree", "add", "-q", "-b", BRANCH, str(root / "lane"))
    except (CorralError, OSError) as exc:
        for name in NAMES:
            target = root / name
            if target.is_dir() and not target.is_symlink() and name not in taken:
                shutil.rmtree(target, ignore_errors=True)
        if isinstance(exc, OSError):
            raise InputError("directory", f"cannot write in {root}: {exc.strerror}", code="init_failed") from None
        raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return Initialized(
        root,
        found,
        list(NAMES),
        [
            "corral run plans/review.yaml       # a scripted reviewer reads project/ and answers with a verdict",
            "corral run plans/writer-lane.yaml  # a scripted writer adds src/feature.py in lane/, validated, released",
            "corral status                      # what is held, and what needs a person",
        ],
    )


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
