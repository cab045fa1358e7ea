"""The scope hook against a real repository: git itself refuses a commit outside the lane's scopes,
allows one inside, and after removal the worktree's configuration holds no hook and the main
checkout's never did."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from runner.git import hook
from tests.support.gitrepo import commit, git, head_of

pytestmark = pytest.mark.usefixtures("hermetic_git")


@pytest.fixture
def lane(tmp_path: Path) -> tuple[Path, Path, Path]:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    commit(repo, "base", {"src/a.py": "a\n", "docs/d.md": "d\n", "README.md": "r\n"})
    wt = tmp_path / "wt"
    git(repo, "worktree", "add", "-q", "-b", "feat", str(wt))
    hooks = tmp_path / "home" / "hooks" / "writer-1"
    hooks.mkdir(parents=True, mode=0o700)
    return repo, wt, hooks


def try_commit(wt: Path, files: dict[str, str]) -> subprocess.CompletedProcess[str]:
    for name, text in files.items():
        (wt / name).parent.mkdir(parents=True, exist_ok=True)
        (wt / name).write_text(text)
    git(wt, "add", "-A")
    return subprocess.run(["git", "commit", "-q", "-m", "w"], cwd=wt, capture_output=True, text=True, check=False)


def test_a_commit_outside_the_scopes_is_refused_inside_allowed_and_the_hook_goes(
    lane: tuple[Path, Path, Path],
) -> None:
    repo, wt, hooks = lane
    hook.install(str(wt), hooks, ["src"], ["docs"])
    assert hook.installed(str(wt)) == str(hooks)
    main = subprocess.run(["git", "config", "--get", "core.hooksPath"], cwd=repo, capture_output=True, check=False)
    assert main.returncode == 1, "the main checkout has no hooks path"
    assert not (repo / ".git" / "hooks" / "pre-commit").exists()
    assert oct(os.stat(hooks / "pre-commit").st_mode & 0o777) == "0o700"

    before = head_of(wt)
    outside = try_commit(wt, {"README.md": "changed\n"})
    assert outside.returncode != 0 and "outside 'README.md'" in outside.stderr
    assert head_of(wt) == before
    git(wt, "reset", "-q")  # the test's own cleanup of the index
    git(wt, "checkout", "-q", "--", "README.md")
    locked = try_commit(wt, {"docs/d.md": "changed\n"})
    assert locked.returncode != 0 and "locked 'docs/d.md'" in locked.stderr
    git(wt, "reset", "-q")
    git(wt, "checkout", "-q", "--", "docs/d.md")
    git(wt, "mv", "src/a.py", "moved.py")  # a rename out of the scope: its new path is outside
    moved = subprocess.run(["git", "commit", "-q", "-m", "m"], cwd=wt, capture_output=True, text=True, check=False)
    assert moved.returncode != 0 and "outside 'moved.py'" in moved.stderr
    git(wt, "mv", "moved.py", "src/a.py")

    inside = try_commit(wt, {"src/b.py": "b\n", "src/odd\nname.py": "n\n"})
    assert inside.returncode == 0, inside.stderr
    assert head_of(wt) != before

    hook.remove(str(wt), hooks)
    assert hook.installed(str(wt)) is None and not hooks.exists()
    after = try_commit(wt, {"README.md": "free again\n"})
    assert after.returncode == 0, after.stderr


def test_a_worktree_hooks_path_of_its_own_is_restored(lane: tuple[Path, Path, Path], tmp_path: Path) -> None:
    _, wt, hooks = lane
    git(wt, "config", "extensions.worktreeConfig", "true")
    git(wt, "config", "--worktree", "core.hooksPath", str(tmp_path / "theirs"))
    hook.install(str(wt), hooks, ["src"], [])
    assert hook.installed(str(wt)) == str(hooks)
    hook.remove(str(wt), hooks)
    assert hook.installed(str(wt)) == str(tmp_path / "theirs")


def test_a_hook_left_by_a_lane_that_never_released_is_not_restored(lane: tuple[Path, Path, Path]) -> None:
    _, wt, hooks = lane
    stale = hooks.parent / "writer-0"
    stale.mkdir(mode=0o700)
    hook.install(str(wt), stale, ["docs"], [])  # a lane reconciled away: its key stayed
    hook.install(str(wt), hooks, ["src"], [])
    hook.remove(str(wt), hooks)
    assert hook.installed(str(wt)) is None
