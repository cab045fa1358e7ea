"""Git for the tests, done without the code under test: a fixed identity and dates, and the helpers
every suite that builds real repositories uses. ``tests/conftest.py`` applies ``GIT_ENV`` with an
empty global configuration (the ``hermetic_git`` fixture), for the tests' git, GitPython inside the
runner, and the agents alike."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

GIT_ENV = {
    "GIT_AUTHOR_NAME": "Corral Test",
    "GIT_AUTHOR_EMAIL": "author@example.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00+00:00",
    "GIT_COMMITTER_NAME": "Corral Test",
    "GIT_COMMITTER_EMAIL": "committer@example.invalid",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00+00:00",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_TERMINAL_PROMPT": "0",
}
# Variables that would point git at another repository than the one a test names.
GIT_REDIRECTS = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR", "GIT_OBJECT_DIRECTORY")


def git(cwd: Path, *args: str) -> str:
    """``git ARGS`` in ``cwd``; its output, stripped."""
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def head_of(cwd: Path) -> str:
    return git(cwd, "rev-parse", "HEAD")


def git_bytes(cwd: Path, *args: str) -> bytes:
    """``git ARGS`` in ``cwd``; its output byte for byte."""
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True).stdout


def status_digest(cwd: Path) -> str:
    """What corral calls the status digest, computed independently: SHA-256 of the porcelain status."""
    return hashlib.sha256(git_bytes(cwd, "status", "--porcelain=v1", "--untracked-files=all")).hexdigest()


def commit(cwd: Path, message: str, files: dict[str, str | bytes]) -> str:
    """Write ``files``, commit everything, return the new HEAD."""
    for name, content in files.items():
        path = cwd / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    git(cwd, "add", "-A")
    git(cwd, "commit", "-q", "-m", message)
    return head_of(cwd)


def feature_worktree(root: Path) -> Path:
    """``root/repo`` (default branch ``main``, one commit with ``src/app.py``) and its linked worktree
    ``root/wt-feat`` on branch ``feat``: the smallest repository a writer lane can start in."""
    repo = root / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "src").mkdir()
    (repo / "src" / "app.py").write_text("print('app')\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    path = root / "wt-feat"
    git(repo, "worktree", "add", "-q", "-b", "feat", str(path))
    return path
