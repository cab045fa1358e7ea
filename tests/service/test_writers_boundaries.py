"""Where a writer lane's boundary could leak: scopes through symlinks, worktrees nested in one another,
and the protected branches of a repository without a remote. Real repositories, a real store, the
real process host (the helpers of ``test_writers.py``)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.service import ScopesCheckInput
from tests.service.test_writers import Lab, refused_start
from tests.support.gitrepo import commit, git

pytestmark = pytest.mark.usefixtures("hermetic_git")


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Lab]:
    (tmp_path / "lab").mkdir()
    world = Lab(tmp_path / "lab")
    yield world
    world.store.close()


# --- scopes through symlinks ------------------------------------------------------------------------


def _linked_repo(lab: Lab) -> Path:
    """The lab's repository with a tracked symlink ``lib -> src``, and a worktree on a new branch."""
    os.symlink("src", lab.repo / "lib")
    commit(lab.repo, "lib is src", {})
    return lab.worktree("wt-links")


def test_a_scope_through_a_tracked_symlink_is_refused(lab: Lab) -> None:
    wt = _linked_repo(lab)
    assert (wt / "lib").is_symlink()
    error = refused_start(lab, "scope_symlink", lambda: lab.start("alpha", wt, owned_scopes=("lib/a.py",)))
    assert error.details["links"] == [{"scope": "lib/a.py", "link": "lib", "target": "src", "where": "both"}]
    refused_start(lab, "scope_symlink", lambda: lab.start("alpha", wt, owned_scopes=("lib",)))
    refused_start(lab, "scope_symlink", lambda: lab.start("alpha", wt, owned_scopes=("src",), locked_scopes=("lib",)))
    # The real path is accepted, and then no other lane can reach it through the link either.
    assert lab.start("alpha", wt, owned_scopes=("src/a.py",)).state == "active"


def test_a_symlink_made_only_in_the_worktree_and_one_pointing_outside_are_refused(lab: Lab, tmp_path: Path) -> None:
    wt = lab.worktree("wt-disk")
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(str(outside), wt / "docs-out")  # untracked, on disk only, out of the repository
    error = refused_start(lab, "scope_symlink", lambda: lab.start("alpha", wt, owned_scopes=("docs-out/x.md",)))
    assert error.details["links"] == [
        {"scope": "docs-out/x.md", "link": "docs-out", "target": str(outside), "where": "worktree"}
    ]


def test_a_symlink_tracked_at_head_but_replaced_on_disk_is_refused(lab: Lab) -> None:
    wt = _linked_repo(lab)
    (wt / "lib").unlink()
    (wt / "lib").mkdir()  # a real directory now, but HEAD still says symlink
    error = refused_start(lab, "scope_symlink", lambda: lab.start("alpha", wt, owned_scopes=("lib/a.py",)))
    assert error.details["links"][0]["where"] == "head"


def test_scopes_check_reports_symlinks(lab: Lab) -> None:
    wt = _linked_repo(lab)
    report = lab.service.writers.scopes_check(ScopesCheckInput(owned_scopes=("lib/a.py", "docs"), worktree=str(wt)))
    assert report["symlinks"] == [{"scope": "lib/a.py", "link": "lib", "target": "src", "where": "both"}]
    assert report["ok"] is False
    clean = lab.service.writers.scopes_check(ScopesCheckInput(owned_scopes=("src/a.py",), worktree=str(wt)))
    assert clean["symlinks"] == [] and clean["ok"] is True


# --- nested worktrees -------------------------------------------------------------------------------


def test_a_worktree_inside_a_live_lanes_worktree_is_refused(lab: Lab) -> None:
    outer = lab.worktree("wt-outer")
    lab.start("outer", outer, owned_scopes=("src",))
    inner = outer / "nested"
    git(lab.repo, "worktree", "add", "-q", "-b", "nested", str(inner))
    error = refused_start(lab, "worktree_nested", lambda: lab.start("inner", inner, owned_scopes=("docs",)))
    assert error.details["worktree"] == os.path.realpath(inner)
    assert error.details["their_worktree"] == os.path.realpath(outer)


def test_a_worktree_containing_a_live_lanes_worktree_is_refused(lab: Lab) -> None:
    outer = lab.worktree("wt-outer")
    inner = outer / "nested"
    git(lab.repo, "worktree", "add", "-q", "-b", "nested", str(inner))
    lab.start("inner", inner, owned_scopes=("docs",))
    error = refused_start(lab, "worktree_nested", lambda: lab.start("outer", outer, owned_scopes=("src",)))
    assert error.details["worktree"] == os.path.realpath(outer)
    assert error.details["their_worktree"] == os.path.realpath(inner)
    assert error.details["name"] == "inner"


# --- protected branches without a remote ------------------------------------------------------------


def test_without_a_remote_main_stays_protected_while_the_main_checkout_is_on_a_topic(lab: Lab) -> None:
    git(lab.repo, "checkout", "-q", "-b", "topic")
    wt = lab.worktree("wt-main", "--force", start="main")
    error = refused_start(lab, "git_branch_protected", lambda: lab.start("alpha", wt))
    assert error.details["protected"] == ["main"]
    facts = lab.service.writers.preflight(str(wt))
    assert facts["default_branch"] is None and facts["protected_default"] == ["main"]


def test_init_default_branch_and_master_join_the_default_set(lab: Lab) -> None:
    git(lab.repo, "branch", "master")
    git(lab.repo, "config", "init.defaultBranch", "trunk")
    git(lab.repo, "branch", "trunk")
    wt = lab.worktree("wt-trunk", start="trunk")
    error = refused_start(lab, "git_branch_protected", lambda: lab.start("alpha", wt))
    assert error.details["protected"] == ["main", "master", "trunk"]


def test_protect_adds_to_the_default_set(lab: Lab) -> None:
    wt = lab.worktree("wt-release")
    error = refused_start(lab, "git_branch_protected", lambda: lab.start("alpha", wt, protected_branches=("release",)))
    assert error.details["protected"] == ["main", "release"]
    main = lab.worktree("wt-main", "--force", start="main")
    error = refused_start(lab, "git_branch_protected", lambda: lab.start("beta", main, protected_branches=("release",)))
    assert error.details["protected"] == ["main", "release"], "naming a branch no longer unprotects main"


def test_protect_only_replaces_the_default_set(lab: Lab) -> None:
    main = lab.worktree("wt-main", "--force", start="main")
    lane = lab.start("alpha", main, protected_branches=("release",), protect_defaults=False)
    assert lane.state == "active" and lane.data["protected_branches"] == ["release"]
