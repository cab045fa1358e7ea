"""The scope audit against real repositories: one linked worktree per test, every kind of change.

The lane owns ``src`` and locks ``docs``; everything else is outside. Expected values are written
out by hand from what each test did with git, never computed by the code under test.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from runner.git import audit as audit_module
from runner.git.audit import audit
from runner.git.preflight import GitReadError
from tests.support.gitrepo import commit, git, head_of

pytestmark = pytest.mark.usefixtures("hermetic_git")

OWNED, LOCKED = ("src",), ("docs",)


@pytest.fixture
def lane(tmp_path: Path) -> tuple[Path, str]:
    """A linked worktree on ``feat`` and its base commit (``src/a.py``, ``docs/d.md``, ``other.txt``,
    a symlink ``link -> src/a.py``, a gitlink ``vendor/lib``; ``*.log`` ignored)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "link").symlink_to("src/a.py")
    commit(
        repo,
        "base",
        {"src/a.py": "a\n", "docs/d.md": "d\n", "other.txt": "x\n", ".gitignore": "*.log\n", "src/old.py": "o\n"},
    )
    git(repo, "update-index", "--add", "--cacheinfo", f"160000,{head_of(repo)},vendor/lib")
    git(repo, "commit", "-q", "-m", "a gitlink")
    wt = tmp_path / "wt"
    git(repo, "worktree", "add", "-q", "-b", "feat", str(wt))
    return wt, head_of(repo)


def changes(wt: Path, base: str) -> dict[str, tuple[str, str]]:
    return {c.path: (c.kind, c.scope) for c in audit(str(wt), base, OWNED, LOCKED).changes}


def test_nothing_changed_is_clean(lane: tuple[Path, str]) -> None:
    wt, base = lane
    (wt / "src" / "a.py").touch()  # touched, not changed
    found = audit(str(wt), base, OWNED, LOCKED)
    assert found.changes == () and found.clean and found.head == base == found.base_commit
    assert found.to_dict()["counts"] == {
        "changes": 0, "owned": 0, "locked": 0, "outside": 0, "violations": 0, "ignored": 0
    }  # fmt: skip


def test_tracked_edits_owned_locked_outside(lane: tuple[Path, str]) -> None:
    wt, base = lane
    (wt / "src" / "a.py").write_text("a2\n")
    (wt / "docs" / "d.md").write_text("d2\n")
    (wt / "other.txt").write_text("x2\n")
    found = audit(str(wt), base, OWNED, LOCKED)
    assert {c.path: (c.kind, c.scope) for c in found.changes} == {
        "src/a.py": ("modified", "owned"),
        "docs/d.md": ("modified", "locked"),
        "other.txt": ("modified", "outside"),
    }
    assert [c.path for c in found.violations] == ["docs/d.md", "other.txt"] and not found.clean
    assert found.counts()["violations"] == 2


def test_untracked_file(lane: tuple[Path, str]) -> None:
    wt, base = lane
    (wt / "src" / "deep").mkdir()
    (wt / "src" / "deep" / "n.py").write_text("n\n")
    (wt / "srcx").write_text("not under src\n")
    assert changes(wt, base) == {"src/deep/n.py": ("added", "owned"), "srcx": ("added", "outside")}


def test_deletion(lane: tuple[Path, str]) -> None:
    wt, base = lane
    (wt / "other.txt").unlink()
    (wt / "src" / "a.py").unlink()
    assert changes(wt, base) == {"other.txt": ("deleted", "outside"), "src/a.py": ("deleted", "owned")}


def test_rename_into_and_out_of_scope_judges_both_paths(lane: tuple[Path, str]) -> None:
    wt, base = lane
    git(wt, "mv", "other.txt", "src/other.txt")  # into the scope: the old path is outside
    git(wt, "mv", "src/old.py", "moved.py")  # out of it: the new path is outside
    found = {c.path: c for c in audit(str(wt), base, OWNED, LOCKED).changes}
    assert set(found) == {"src/other.txt", "moved.py"}
    assert (found["src/other.txt"].kind, found["src/other.txt"].old_path) == ("renamed", "other.txt")
    assert found["src/other.txt"].scope == "outside"
    assert (found["moved.py"].old_path, found["moved.py"].scope) == ("src/old.py", "outside")


def test_rename_within_scope_is_owned_and_out_of_a_lock_is_locked(lane: tuple[Path, str]) -> None:
    wt, base = lane
    git(wt, "mv", "src/old.py", "src/new.py")
    git(wt, "mv", "docs/d.md", "src/d.md")
    found = {c.path: c.scope for c in audit(str(wt), base, OWNED, LOCKED).changes}
    assert found == {"src/new.py": "owned", "src/d.md": "locked"}


def test_mode_change(lane: tuple[Path, str]) -> None:
    wt, base = lane
    os.chmod(wt / "other.txt", 0o755)
    (found,) = audit(str(wt), base, OWNED, LOCKED).changes
    assert (found.path, found.kind, found.scope) == ("other.txt", "mode", "outside")
    assert (found.old_mode, found.new_mode) == ("100644", "100755")


def test_new_symlink_and_retarget(lane: tuple[Path, str]) -> None:
    wt, base = lane
    (wt / "src" / "to-docs").symlink_to("../docs/d.md")
    (wt / "link").unlink()
    (wt / "link").symlink_to("docs")
    git(wt, "add", "-A")
    assert changes(wt, base) == {"src/to-docs": ("symlink", "owned"), "link": ("symlink", "outside")}


def test_submodule_gitlink_moved(lane: tuple[Path, str]) -> None:
    wt, base = lane
    other = git(wt, "rev-parse", "HEAD")  # the gitlink records HEAD~1
    git(wt, "update-index", "--cacheinfo", f"160000,{other},vendor/lib")
    (found,) = audit(str(wt), base, OWNED, LOCKED).changes
    assert (found.path, found.kind, found.scope, found.sources) == (
        "vendor/lib",
        "submodule",
        "outside",
        ("index", "worktree"),
    )


def test_committed_since_base(lane: tuple[Path, str]) -> None:
    wt, base = lane
    commit(wt, "work", {"src/a.py": "a3\n", "other.txt": "x3\n"})
    found = audit(str(wt), base, OWNED, LOCKED)
    assert found.head == head_of(wt) != base
    assert {c.path: (c.scope, c.sources) for c in found.changes} == {
        "other.txt": ("outside", ("head", "index", "worktree")),
        "src/a.py": ("owned", ("head", "index", "worktree")),
    }


def test_committed_then_changed_back_on_disk_still_counts(lane: tuple[Path, str]) -> None:
    """The branch holds the commit even when the worktree no longer does: the head diff sees it."""
    wt, base = lane
    commit(wt, "outside", {"other.txt": "x3\n"})
    (wt / "other.txt").write_text("x\n")
    (found,) = audit(str(wt), base, OWNED, LOCKED).changes
    assert (found.path, found.scope, found.sources) == ("other.txt", "outside", ("head", "index"))


def test_staged_only_change(lane: tuple[Path, str]) -> None:
    """Staged, then removed from disk: a commit now would still hold it."""
    wt, base = lane
    (wt / "staged.txt").write_text("s\n")
    git(wt, "add", "staged.txt")
    (wt / "staged.txt").unlink()
    (found,) = audit(str(wt), base, OWNED, LOCKED).changes
    assert (found.path, found.kind, found.scope, found.sources) == ("staged.txt", "added", "outside", ("index",))


def test_paths_with_newlines_and_unicode(lane: tuple[Path, str]) -> None:
    wt, base = lane
    (wt / "src" / "two\nlines é.py").write_text("n\n")
    (wt / "a\nb").write_text("n\n")
    commit(wt, "odd names", {"src/ünï.py": "u\n"})
    assert changes(wt, base) == {
        "src/two\nlines é.py": ("added", "owned"),
        "a\nb": ("added", "outside"),
        "src/ünï.py": ("added", "owned"),
    }


def test_ignored_files_are_reported_apart_not_as_violations(lane: tuple[Path, str]) -> None:
    wt, base = lane
    (wt / "debug.log").write_text("hidden\n")
    (wt / "src" / "mine.log").write_text("inside the scope\n")
    found = audit(str(wt), base, OWNED, LOCKED)
    assert found.changes == () and found.clean
    assert found.ignored == ("debug.log",)
    assert found.to_dict()["counts"]["ignored"] == 1
    git(wt, "add", "-f", "debug.log")  # force-added: now a change like any other
    assert changes(wt, base) == {"debug.log": ("added", "outside")}


def test_locked_directory_held_by_a_change() -> None:
    """A change whose path holds a locked scope (a nested repository over it) is judged locked."""
    found = audit_module.Judge(("src",), ("docs/api",))
    assert found.scope("docs") == "locked" and found.scope("docs/api/x") == "locked"
    assert found.scope("docs/other") == "outside" and found.scope("src/x") == "owned"


def test_to_dict_caps_lists(lane: tuple[Path, str]) -> None:
    wt, base = lane
    for i in range(5):
        (wt / f"f{i}.txt").write_text("x\n")
    document = audit(str(wt), base, OWNED, LOCKED).to_dict(limit=2)
    assert len(document["changes"]) == 2 and len(document["violations"]) == 2 and document["truncated"]
    assert document["counts"]["violations"] == 5


def test_unknown_base_and_not_a_repository(lane: tuple[Path, str], tmp_path: Path) -> None:
    wt, _ = lane
    with pytest.raises(GitReadError) as caught:
        audit(str(wt), "0" * 40, OWNED, LOCKED)
    assert caught.value.code == "git_unreadable" and caught.value.details["field"] == "base_commit"
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(GitReadError):
        audit(str(plain), "HEAD", OWNED, LOCKED)
    with pytest.raises(GitReadError):
        audit("relative/path", "HEAD", OWNED, LOCKED)


def test_reads_without_touching_the_index(lane: tuple[Path, str]) -> None:
    wt, base = lane
    (wt / "src" / "a.py").write_text("a2\n")
    index = Path(git(wt, "rev-parse", "--path-format=absolute", "--git-path", "index"))
    before = index.stat().st_mtime_ns
    time.sleep(0.01)
    audit(str(wt), base, OWNED, LOCKED)
    assert index.stat().st_mtime_ns == before
    assert not index.with_name("index.lock").exists()
