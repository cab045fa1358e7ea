"""Git preflight against real repositories: linked worktrees, main checkouts, clones, detached HEADs.

Every expected value is computed by running git itself in a subprocess (with a fixed author, committer
and an empty global configuration), never through the code under test.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from runner.errors import InputError
from runner.git import preflight
from runner.git.preflight import GitReadError
from tests.support.gitrepo import commit, git, git_bytes, status_digest

pytestmark = pytest.mark.usefixtures("hermetic_git")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A main checkout on ``main`` with two commits; ``*.log`` is ignored."""
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    commit(root, "base", {"README.md": "hello\n", "src/app.py": "print('app')\n", ".gitignore": "*.log\n"})
    commit(root, "second", {"src/app.py": "print('app v2')\n"})
    return root


def add_worktree(repo: Path, name: str, *options: str, start: str | None = None) -> Path:
    path = repo.parent / name
    git(repo, "worktree", "add", "-q", *options, str(path), *([start] if start else []))
    return path


def test_linked_worktree_facts(repo: Path) -> None:
    wt = add_worktree(repo, "wt-feat", "-b", "feat")
    head = commit(wt, "feature work", {"src/feature.py": "x = 1\n"})
    (wt / "README.md").write_text("changed\n")  # modified, unstaged
    (wt / "staged.txt").write_text("staged\n")
    git(wt, "add", "staged.txt")
    (wt / "new" / "deep").mkdir(parents=True)
    (wt / "new" / "deep" / "file.txt").write_text("untracked in a new directory\n")
    (wt / "name with spaces é.txt").write_text("quoted by porcelain\n")
    (wt / "debug.log").write_text("ignored\n")

    facts = preflight.read(str(wt))

    real = os.path.realpath(wt)
    assert facts.worktree == str(wt) and facts.realpath == real and facts.toplevel == real
    assert facts.branch == "feat"
    assert facts.head == head == git(wt, "rev-parse", "HEAD") and head != git(repo, "rev-parse", "HEAD")
    assert facts.git_dir == os.path.realpath(repo / ".git" / "worktrees" / "wt-feat")
    assert facts.common_dir == os.path.realpath(repo / ".git")
    assert facts.linked is True
    assert facts.default_branch is None, "no origin, no init.defaultBranch: not guessed from a checkout"
    assert facts.protected_default == ("main",)
    raw = git_bytes(wt, "status", "--porcelain=v1", "--untracked-files=all")
    assert b"new/deep/file.txt" in raw and b"debug.log" not in raw and b'"name with spaces' in raw
    assert facts.status_sha256 == hashlib.sha256(raw).hexdigest()
    normal = git_bytes(wt, "status", "--porcelain=v1", "--untracked-files=normal")
    assert facts.status_sha256 != hashlib.sha256(normal).hexdigest(), "untracked files are listed one by one"
    assert facts.to_dict() == {
        "worktree": str(wt),
        "realpath": real,
        "toplevel": real,
        "git_dir": facts.git_dir,
        "common_dir": facts.common_dir,
        "branch": "feat",
        "head": head,
        "status_sha256": facts.status_sha256,
        "default_branch": None,
        "protected_default": ["main"],
        "content_sha256": None,  # only read when asked for (it reads every file)
        "linked": True,
        "is_toplevel": True,
    }


def test_a_worktree_whose_path_has_a_newline_is_read_one_question_at_a_time(repo: Path) -> None:
    """git answers the three directories on separate lines: a newline in a path cannot be split on."""
    wt = add_worktree(repo, "wt\nline", "-b", "odd")
    facts = preflight.read(str(wt))
    real = os.path.realpath(wt)
    assert "\n" in real and (facts.realpath, facts.toplevel) == (real, real)
    assert facts.git_dir == os.path.realpath(git(wt, "rev-parse", "--absolute-git-dir"))
    assert facts.common_dir == os.path.realpath(repo / ".git")
    assert facts.linked is True and facts.branch == "odd"


def test_the_status_digest_follows_every_change_and_only_changes(repo: Path) -> None:
    wt = add_worktree(repo, "wt", "-b", "feat")
    clean = preflight.read(str(wt)).status_sha256
    assert clean == hashlib.sha256(b"").hexdigest() == status_digest(wt)
    (wt / "ignored.log").write_text("x\n")
    assert preflight.read(str(wt)).status_sha256 == clean, "ignored files do not count"
    seen = {clean}
    for change in (
        lambda: (wt / "a.txt").write_text("a\n"),
        lambda: (wt / "b" / "c").mkdir(parents=True),  # an empty directory is not listed
        lambda: (wt / "b" / "c" / "d.txt").write_text("d\n"),
        lambda: (wt / "src" / "app.py").write_text("changed\n"),
        lambda: git(wt, "add", "a.txt"),
        (wt / "README.md").unlink,
    ):
        change()
        digest = preflight.read(str(wt)).status_sha256
        assert digest == status_digest(wt)
        seen.add(digest)
    assert len(seen) == 6, "the empty directory changed nothing; every other change moved the digest"


def test_main_checkout_is_not_linked(repo: Path) -> None:
    add_worktree(repo, "wt", "-b", "feat")  # having linked worktrees does not make the main checkout one
    facts = preflight.read(str(repo))
    assert facts.linked is False
    assert facts.git_dir == facts.common_dir == os.path.realpath(repo / ".git")
    assert (facts.branch, facts.toplevel, facts.protected_default) == ("main", os.path.realpath(repo), ("main",))
    assert facts.to_dict()["is_toplevel"] is True


def test_detached_head_has_no_branch(repo: Path) -> None:
    base = git(repo, "rev-parse", "HEAD~1")
    wt = add_worktree(repo, "wt-detached", "--detach")
    git(wt, "checkout", "-q", base)
    facts = preflight.read(str(wt))
    assert facts.branch is None
    assert facts.head == base
    assert facts.linked is True
    assert facts.protected_default == ("main",)


@pytest.mark.parametrize("where", ["linked", "main"])
def test_a_subdirectory_reports_a_different_toplevel(repo: Path, where: str) -> None:
    top = add_worktree(repo, "wt", "-b", "feat") if where == "linked" else repo
    sub = top / "src"
    facts = preflight.read(str(sub))
    assert facts.realpath == os.path.realpath(sub)
    assert facts.toplevel == os.path.realpath(top) != facts.realpath
    assert facts.to_dict()["is_toplevel"] is False
    assert facts.linked is (where == "linked")


def test_a_symlink_to_a_worktree_resolves_to_it(repo: Path, tmp_path: Path) -> None:
    wt = add_worktree(repo, "wt", "-b", "feat")
    link = tmp_path / "links" / "lane"
    link.parent.mkdir()
    link.symlink_to(wt, target_is_directory=True)
    facts = preflight.read(str(link))
    assert facts.worktree == str(link), "the path as given is kept"
    assert facts.realpath == facts.toplevel == os.path.realpath(wt) != str(link)
    assert facts.linked is True and facts.branch == "feat"
    assert facts.to_dict()["is_toplevel"] is True
    direct = preflight.read(str(wt))
    assert (facts.git_dir, facts.common_dir, facts.head, facts.status_sha256) == (
        direct.git_dir,
        direct.common_dir,
        direct.head,
        direct.status_sha256,
    )


def test_an_independent_clone_is_not_linked_and_takes_origins_default(tmp_path: Path) -> None:
    upstream = tmp_path / "upstream"
    upstream.mkdir()
    git(upstream, "init", "-q", "-b", "trunk")
    commit(upstream, "up", {"a.txt": "a\n"})
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(upstream), str(clone))
    git(clone, "checkout", "-q", "-b", "topic")
    facts = preflight.read(str(clone))
    assert facts.linked is False and facts.git_dir == facts.common_dir == os.path.realpath(clone / ".git")
    assert facts.common_dir != os.path.realpath(upstream / ".git")
    assert facts.branch == "topic"
    assert facts.default_branch == "trunk", "origin's HEAD, not the branch checked out"
    wt = add_worktree(clone, "clone-wt", "-b", "lane")
    linked = preflight.read(str(wt))
    assert linked.linked is True and linked.common_dir == facts.common_dir
    assert linked.default_branch == "trunk"


def test_without_origin_the_default_is_init_default_branch_never_the_checked_out_one(repo: Path) -> None:
    git(repo, "checkout", "-q", "-b", "develop")
    wt = add_worktree(repo, "wt", "-b", "feat")
    facts = preflight.read(str(wt))
    assert (facts.default_branch, facts.protected_default) == (None, ("main",)), "not the main checkout's develop"
    git(repo, "config", "init.defaultBranch", "develop")
    facts = preflight.read(str(wt))
    assert (facts.default_branch, facts.protected_default) == ("develop", ("develop", "main"))
    git(repo, "branch", "-m", "main", "master")
    assert preflight.read(str(repo)).protected_default == ("develop", "master")


@pytest.mark.parametrize(
    ("path", "code"),
    [("relative/path", "git_worktree_invalid"), ("/no/such/dir", "git_unreadable")],
)
def test_unusable_paths_are_refused(path: str, code: str) -> None:
    with pytest.raises(InputError) as caught:
        preflight.read(path)
    assert caught.value.code == code


def test_a_plain_directory_or_a_file_is_unreadable(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    (tmp_path / "file").write_text("x")
    for path in (plain, tmp_path / "file"):
        with pytest.raises(GitReadError) as caught:
            preflight.read(str(path))
        assert caught.value.code == "git_unreadable"


def test_a_repository_without_commits_is_unreadable(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    git(empty, "init", "-q", "-b", "main")
    with pytest.raises(GitReadError) as caught:
        preflight.read(str(empty))
    assert caught.value.code == "git_unreadable"


def test_is_ancestor(repo: Path) -> None:
    base = git(repo, "rev-parse", "HEAD~1")
    head = git(repo, "rev-parse", "HEAD")
    wt = add_worktree(repo, "wt", "-b", "side", start=base)
    side = commit(wt, "side work", {"side.txt": "s\n"})
    assert preflight.is_ancestor(str(wt), base, head) is True
    assert preflight.is_ancestor(str(wt), head, head) is True, "a commit is its own ancestor"
    assert preflight.is_ancestor(str(wt), head, base) is False
    assert preflight.is_ancestor(str(wt), side, head) is False and preflight.is_ancestor(str(wt), head, side) is False
    assert preflight.is_ancestor(str(repo), base, side) is True, "any worktree of the repository can answer"
    with pytest.raises(GitReadError) as caught:
        preflight.is_ancestor(str(wt), "0" * 40, head)
    assert caught.value.code == "git_unreadable" and caught.value.details["field"] == "base_commit"


def test_file_at_returns_exact_bytes_or_none(repo: Path) -> None:
    base = git(repo, "rev-parse", "HEAD~1")
    wt = add_worktree(repo, "wt", "-b", "feat")
    payload = b"line one\r\n\x00\xff binary\n\n\n"
    later = commit(wt, "bytes", {"data/blob.bin": payload, "no-newline.txt": "tail"})
    (wt / "no-newline.txt").write_text("the worktree copy is not read\n")
    assert preflight.file_at(str(wt), later, "data/blob.bin") == payload
    assert preflight.file_at(str(wt), later, "no-newline.txt") == b"tail"
    assert preflight.file_at(str(wt), base, "src/app.py") == b"print('app')\n"
    assert preflight.file_at(str(wt), later, "src/app.py") == b"print('app v2')\n"
    assert preflight.file_at(str(wt), base, "data/blob.bin") is None, "not there yet at the base"
    assert preflight.file_at(str(wt), later, "missing.txt") is None
    assert preflight.file_at(str(wt), "0" * 40, "src/app.py") is None


def test_listed_files_are_tracked_and_untracked_but_not_ignored(repo: Path) -> None:
    wt = add_worktree(repo, "wt", "-b", "feat")
    (wt / "untracked.txt").write_text("u\n")
    (wt / "deep" / "er").mkdir(parents=True)
    (wt / "deep" / "er" / "file é.py").write_text("u\n")
    (wt / "build.log").write_text("ignored\n")
    (wt / "logs").mkdir()
    (wt / "logs" / "run.log").write_text("ignored\n")
    (wt / "nested-ignore").mkdir()
    (wt / "nested-ignore" / ".gitignore").write_text("secret.txt\n")
    (wt / "nested-ignore" / "secret.txt").write_text("ignored\n")
    (wt / "empty-dir").mkdir()
    assert preflight.listed_files(str(wt)) == [
        ".gitignore",
        "README.md",
        "deep/er/file é.py",
        "nested-ignore/.gitignore",
        "src/app.py",
        "untracked.txt",
    ]
    assert preflight.listed_files(str(repo)) == [".gitignore", "README.md", "src/app.py"], "per worktree"


# --- the content digest (issue 10) ------------------------------------------------------------------


def test_the_content_digest_sees_a_dirty_file_edited_again_where_the_status_digest_cannot(repo: Path) -> None:
    wt = add_worktree(repo, "wt-content", "-b", "content")
    (wt / "README.md").write_text("first edit\n")
    first = preflight.read(str(wt), content=True)
    (wt / "README.md").write_text("second edit\n")
    second = preflight.read(str(wt), content=True)
    assert first.status_sha256 == second.status_sha256 == status_digest(wt), "git status shows ` M README.md` twice"
    assert first.content_sha256 != second.content_sha256
    assert preflight.read(str(wt)).content_sha256 is None, "only computed when asked for"
    (wt / "README.md").write_text("first edit\n")
    assert preflight.content_digest(str(wt)) == first.content_sha256, "deterministic: the same bytes, the same digest"


def test_the_content_digest_covers_untracked_files_and_symlink_targets_but_not_ignored_files(repo: Path) -> None:
    wt = add_worktree(repo, "wt-content", "-b", "content")
    base = preflight.content_digest(str(wt))
    (wt / "debug.log").write_text("ignored\n")
    assert preflight.content_digest(str(wt)) == base, "ignored files are not the lane's content"
    (wt / "notes.txt").write_text("untracked\n")
    with_untracked = preflight.content_digest(str(wt))
    assert with_untracked != base
    (wt / "notes.txt").write_text("untracked, edited\n")
    assert preflight.content_digest(str(wt)) != with_untracked
    os.symlink("src/app.py", wt / "link")
    linked = preflight.content_digest(str(wt))
    (wt / "link").unlink()
    os.symlink("README.md", wt / "link")
    assert preflight.content_digest(str(wt)) != linked, "a link is hashed by its target text"
    (wt / "src" / "app.py").unlink()
    assert preflight.content_digest(str(wt)) not in (linked, base), "a missing tracked file counts"


def test_the_content_digest_never_opens_a_fifo(repo: Path) -> None:
    wt = add_worktree(repo, "wt-content", "-b", "content")
    os.mkfifo(wt / "pipe")
    assert len(preflight.content_digest(str(wt))) == 64, "an untracked FIFO is listed by kind, never read"


def test_the_content_digest_is_framed_so_names_and_bytes_cannot_be_shifted(repo: Path) -> None:
    a = add_worktree(repo, "wt-a", "-b", "a")
    b = add_worktree(repo, "wt-b", "-b", "b")
    (a / "ab").write_text("c")
    (b / "a").write_text("bc")
    assert preflight.content_digest(str(a)) != preflight.content_digest(str(b))
