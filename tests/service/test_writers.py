"""Writer lanes end to end: real git worktrees, a real SQLite store, the real process host and the
scripted agent (kind ``script``), driven through :class:`~runner.service.Service`.

Expected git facts (HEAD, branch, status digest) are computed here by running git in a subprocess, never
through the code under test, so a preflight that read the wrong thing would not agree with itself.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest

from runner.agents.abc import AgentError, AgentHost, Observation, StartOptions
from runner.agents.kinds import Kinds
from runner.agents.process import ProcessHost
from runner.agents.slots import slot_store
from runner.errors import CorralError
from runner.service import (
    AcquireInput,
    AgentLeaseView,
    CollectInput,
    ControllerInput,
    RelayInput,
    ReviewerCloseInput,
    ReviewerStartInput,
    ScopesCheckInput,
    Service,
    WriterReleaseInput,
    WriterStartInput,
)
from runner.store import Store
from tests.support.gitrepo import commit, git, head_of, status_digest
from tests.support.specs import shared_library
from tests.support.stores import open_test_store, raw_rows, store_fingerprint

AUTHORITY_SHA = hashlib.sha256(b"authority").hexdigest()
CHECKPOINT_SHA = hashlib.sha256(b"checkpoint").hexdigest()
pytestmark = pytest.mark.usefixtures("hermetic_git")


def make_repo(path: Path, branch: str = "main") -> Path:
    """A main checkout on ``branch``: a base commit and a second one; ``*.log`` is ignored."""
    path.mkdir()
    git(path, "init", "-q", "-b", branch)
    commit(
        path,
        f"base of {path.name}",
        {"README.md": "hello\n", "src/app.py": "print('app')\n", "docs/guide.md": "# guide\n", ".gitignore": "*.log\n"},
    )
    commit(path, f"second of {path.name}", {"src/app.py": "print('app v2')\n"})
    return path


def settle_index(wt: Path) -> None:
    """Make the index's stat data final, so that a later read-only ``git status`` has nothing to write.

    Files written in the same second as the index are "racily clean" to a git built without nanosecond
    timestamps: every status then rewrites the index (same bytes, new mtime, sometimes smudged entries).
    Ageing the files by a minute and refreshing once takes that noise away from the comparison.
    """
    past = time.time() - 60
    for path in wt.rglob("*"):
        if path.is_file() and not path.is_symlink():
            os.utime(path, (past, past))
    for _ in range(2):
        git(wt, "status", "--porcelain")


def fingerprint(wt: Path) -> dict[str, Any]:
    """Every byte (and mode and mtime) of the worktree's files and its admin dir, its refs, HEAD, stash."""
    admin = Path(git(wt, "rev-parse", "--absolute-git-dir"))
    found: dict[str, Any] = {}
    for label, top in (("wt", wt), ("admin", admin)):
        for path in sorted(top.rglob("*")):
            if path.is_file():
                info = path.stat()
                found[f"{label}:{path.relative_to(top)}"] = (
                    hashlib.sha256(path.read_bytes()).hexdigest(),
                    stat.S_IMODE(info.st_mode),
                    info.st_mtime_ns,
                )
    found["index"] = hashlib.sha256((admin / "index").read_bytes()).hexdigest()
    found["HEAD"] = (admin / "HEAD").read_text()
    found["head"] = head_of(wt)
    found["refs"] = git(wt, "for-each-ref", "--format=%(refname) %(objectname)")
    found["stash"] = git(wt, "stash", "list")
    found["worktrees"] = git(wt, "worktree", "list", "--porcelain")
    return found


# --- the world --------------------------------------------------------------------------------------


class Lab:
    """A real store (wall clock), a real process host, a service and a controller lease, and a repo."""

    def __init__(self, root: Path, host_factory: Callable[[Store, Path], AgentHost] | None = None) -> None:
        self.root = root
        self.store = open_test_store(root)
        self.kinds = Kinds.load([])
        factory = host_factory or (lambda store, agents: ProcessHost(store, agents, self.kinds))
        self.host = factory(self.store, root / "agents")
        self.service = Service(
            self.store, shared_library(), actor="test", hosts=lambda name: self.host, kinds=self.kinds
        )
        self.credential = self.service.controller.acquire(
            AcquireInput("ctl", "T-7", AUTHORITY_SHA, 900, "t@h")
        ).credential
        self.repo = make_repo(root / "repo")
        self.base = git(self.repo, "rev-parse", "HEAD~1")

    def worktree(self, name: str, *options: str, repo: Path | None = None, start: str | None = None) -> Path:
        """``git worktree add [options] <root>/<name> [start]``; with neither, a new branch named like it."""
        path = self.root / name
        opts = options or (() if start else ("-b", name.removeprefix("wt-")))
        git(repo or self.repo, "worktree", "add", "-q", *opts, str(path), *([start] if start else []))
        return path

    def start_input(self, name: str, worktree: Path | str, **changes: Any) -> WriterStartInput:
        real = Path(os.path.realpath(worktree))
        try:
            branch = git(real, "symbolic-ref", "--short", "HEAD")
        except subprocess.CalledProcessError:
            branch = "detached"
        fields: dict[str, Any] = {
            "name": name,
            "kind": "script",
            "worktree": str(worktree),
            "branch": branch,
            "base_commit": self.base,
            "expected_head": head_of(real),
            "expected_status_sha256": status_digest(real),
            "owned_scopes": ("src",),
            "purpose": "implement the feature",
            "ticket_ref": "T-7",
            "authority_ref": "plan.md",
            "authority_sha256": AUTHORITY_SHA,
            **changes,
        }
        return WriterStartInput("ctl", self.credential, **fields)

    def start(self, name: str, worktree: Path | str, **changes: Any) -> AgentLeaseView:
        return self.service.writers.start(self.start_input(name, worktree, **changes))

    def release(self, name: str, seq: int, worktree: Path, **changes: Any) -> Any:
        fields: dict[str, Any] = {
            "name": name,
            "expected_state_change_seq": seq,
            "expected_head": head_of(worktree),
            "expected_status_sha256": status_digest(worktree),
            "checkpoint_ref": f"checkpoint/{name}",
            "checkpoint_sha256": CHECKPOINT_SHA,
            **changes,
        }
        return self.service.writers.release(WriterReleaseInput("ctl", self.credential, **fields))

    def ask(self, target: str, text: str) -> Any:
        receipt = self.service.receipts.relay(RelayInput("ctl", self.credential, target, text))
        (result,) = anyio.run(self.service.receipts.collect, CollectInput("ctl", self.credential, (receipt.token,), 30))
        return result

    def lane(self, name: str) -> AgentLeaseView:
        (found,) = [x for x in self.service.writers(include_ended=True) if x.data["name"] == name]
        return found

    def footprint(self) -> tuple[list[tuple[str, str]], int, int, list[tuple[str, ...]]]:
        """Lanes (id, state), agent slots ever made, events, claims: what a refused start must leave alone."""
        with slot_store(self.store).read() as reader:
            slots = reader.slots(include_closed=True)
        lanes = sorted((i.id, i.state) for i in self.store.find("writer"))
        return lanes, len(slots), len(self.store.events()), self.claims()

    def claims(self) -> list[tuple[str, ...]]:
        """Every row of the claim index (instance, space, kind, scope), read from the file itself."""
        return raw_rows(self.store.url, "SELECT instance_id, space, kind, scope FROM claims ORDER BY 1, 2, 3, 4")


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Lab]:
    world = Lab(tmp_path)
    yield world
    world.store.close()


def refused(code: str, call: Callable[[], Any]) -> CorralError:
    with pytest.raises(CorralError) as caught:
        call()
    assert caught.value.code == code, caught.value.to_dict()
    return caught.value


def refused_start(lab: Lab, code: str, call: Callable[[], Any]) -> CorralError:
    """Refused with ``code``, and nothing written: no lane, no agent slot, no event."""
    before = lab.footprint()
    error = refused(code, call)
    assert lab.footprint() == before, "a refused start wrote something"
    return error


# --- the round trip ----------------------------------------------------------------------------------


def test_start_edit_through_a_receipt_and_release(lab: Lab) -> None:
    wt = lab.worktree("wt-feat")
    lane = lab.start("alpha", wt, owned_scopes=("./src/x.py", "src/x.py/"), locked_scopes=("docs/",))
    data = lane.data
    assert (lane.machine, lane.state, data["pane_id"], data["started_seq"]) == ("writer", "active", "p1", 0)
    assert data["cwd"] == os.path.realpath(wt) and data["worktree"] == str(wt)
    assert data["common_dir"] == os.path.realpath(lab.repo / ".git")
    assert (data["branch"], data["base_commit"]) == ("feat", lab.base)
    assert (data["start_head"], data["start_status_sha256"]) == (head_of(wt), status_digest(wt))
    assert (data["owned_scopes"], data["locked_scopes"]) == (["src/x.py"], ["docs"])
    assert data["protected_branches"] == ["main"], "the repository's default branch, when none are named"
    assert [o.cwd for o in lab.host.list()] == [os.path.realpath(wt)]
    clean = status_digest(wt)

    result = lab.ask("alpha", "write src/x.py print('x')\nappend src/x.py print('y')")
    assert result.output.split() == ["write", "src/x.py", "append", "src/x.py"]
    assert (wt / "src" / "x.py").read_text() == "print('x')\nprint('y')\n"
    assert status_digest(wt) != clean
    assert git(wt, "status", "--porcelain=v1", "--untracked-files=all") == "?? src/x.py"

    settle_index(wt)
    before = fingerprint(wt)
    released = lab.release("alpha", 2, wt, checkpoint_ref="refs/corral/alpha")
    assert fingerprint(wt) == before, "release changed the worktree, its index, HEAD or refs"
    assert (wt / "src" / "x.py").read_text() == "print('x')\nprint('y')\n", "uncommitted work is left in place"
    lane = released.lease
    assert lane.state == "released"
    assert (lane.data["release_head"], lane.data["release_status_sha256"]) == (
        head_of(wt),
        status_digest(wt),
    )
    assert (lane.data["checkpoint_ref"], lane.data["checkpoint_sha256"]) == ("refs/corral/alpha", CHECKPOINT_SHA)
    assert lane.data["closing_seq"] == 2
    assert lane.data["capture_sha256"] == hashlib.sha256(released.output.encode()).hexdigest()
    assert "write src/x.py" in released.output
    assert lab.host.list() == [], "the pane is closed"
    assert lab.service.writers("ctl") == []
    assert [x.state for x in lab.service.writers("ctl", include_ended=True)] == ["released"]

    events = [(e.instance_id.split("/")[0], e.trigger, e.to_state) for e in lab.store.events()]
    assert events == [
        ("controller", "acquire", "active"),
        ("writer", "start", "provisioning"),
        ("writer", "start:success", "active"),
        ("receipt", "relay", "reserved"),
        ("receipt", "relay:success", "pending"),
        ("receipt", "collect", "completed"),
        ("writer", "release", "releasing"),
        ("writer", "release:success", "released"),
    ]
    assert "print('x')" not in json.dumps([e.to_dict() for e in lab.store.events()]), "no prompt text logged"


def test_preflight_gives_what_a_start_expects(lab: Lab) -> None:
    wt = lab.worktree("wt-feat")
    (wt / "untracked.txt").write_text("u\n")
    facts = lab.service.writers.preflight(str(wt))
    assert (facts["branch"], facts["head"], facts["status_sha256"]) == (
        "feat",
        head_of(wt),
        status_digest(wt),
    )
    assert facts["linked"] is True and facts["is_toplevel"] is True and facts["protected_default"] == ["main"]
    lane = lab.start(
        "alpha", wt, expected_head=facts["head"], expected_status_sha256=facts["status_sha256"], branch=facts["branch"]
    )
    assert lane.state == "active"


# --- start refusals: git ------------------------------------------------------------------------------


def test_the_main_checkout_is_refused(lab: Lab) -> None:
    error = refused_start(lab, "git_not_linked_worktree", lambda: lab.start("alpha", lab.repo))
    assert error.details["git_dir"] == error.details["common_dir"]
    assert lab.store.find("writer") == [] and lab.host.list() == []


def test_an_independent_clone_is_refused(lab: Lab) -> None:
    clone = lab.root / "clone"
    git(lab.root, "clone", "-q", str(lab.repo), str(clone))
    git(clone, "checkout", "-q", "-b", "topic")
    refused_start(lab, "git_not_linked_worktree", lambda: lab.start("alpha", clone))


def test_the_default_branch_is_protected(lab: Lab) -> None:
    wt = lab.worktree("wt-main", "--force", start="main")  # main is also checked out in the main checkout
    error = refused_start(lab, "git_branch_protected", lambda: lab.start("alpha", wt))
    assert error.details["protected"] == ["main"]


def test_origins_default_branch_is_protected(lab: Lab) -> None:
    upstream = make_repo(lab.root / "upstream", branch="trunk")
    clone = lab.root / "clone"
    git(lab.root, "clone", "-q", str(upstream), str(clone))
    git(clone, "checkout", "-q", "-b", "elsewhere")  # the main checkout is no longer on trunk
    wt = lab.worktree("wt-trunk", repo=clone, start="trunk")
    error = refused_start(
        lab, "git_branch_protected", lambda: lab.start("alpha", wt, base_commit=git(wt, "rev-parse", "HEAD~1"))
    )
    assert error.details["protected"] == ["trunk"]


def test_named_protected_branches_are_protected(lab: Lab) -> None:
    wt = lab.worktree("wt-release")
    error = refused_start(
        lab, "git_branch_protected", lambda: lab.start("alpha", wt, protected_branches=("main", "release"))
    )
    assert error.details["protected"] == ["main", "release"]
    assert lab.start("alpha", wt, protected_branches=("main", "release/v1")).state == "active"


def test_an_unknown_default_branch_must_be_named(lab: Lab) -> None:
    # No origin, no init.defaultBranch, and neither main nor master exists: nothing to protect by default.
    repo = make_repo(lab.root / "trunk-only", branch="trunk")
    wt = lab.worktree("wt-feat", repo=repo)
    base = git(repo, "rev-parse", "HEAD~1")
    before = lab.footprint()
    with pytest.raises(CorralError) as caught:
        lab.start("alpha", wt, base_commit=base)
    assert caught.value.details["field"] == "protected_branches"
    assert lab.footprint() == before
    assert lab.start("alpha", wt, base_commit=base, protected_branches=("trunk",)).state == "active"


def test_a_detached_head_is_refused(lab: Lab) -> None:
    wt = lab.worktree("wt-detached", "--detach", start="main")
    refused_start(lab, "git_detached_head", lambda: lab.start("alpha", wt, branch="feat"))


def test_another_branch_is_refused(lab: Lab) -> None:
    wt = lab.worktree("wt-feat")
    error = refused_start(lab, "git_branch_mismatch", lambda: lab.start("alpha", wt, branch="other"))
    assert (error.details["expected"], error.details["actual"]) == ("other", "feat")


def test_an_unexpected_head_is_refused(lab: Lab) -> None:
    wt = lab.worktree("wt-feat")
    error = refused_start(lab, "git_head_mismatch", lambda: lab.start("alpha", wt, expected_head=lab.base))
    assert (error.details["expected"], error.details["actual"]) == (lab.base, head_of(wt))


def test_a_status_changed_since_it_was_read_is_refused(lab: Lab) -> None:
    wt = lab.worktree("wt-feat")
    read = status_digest(wt)
    (wt / "src" / "new.py").write_text("appeared after the read\n")
    error = refused_start(lab, "git_status_mismatch", lambda: lab.start("alpha", wt, expected_status_sha256=read))
    assert (error.details["expected"], error.details["actual"]) == (read, status_digest(wt))
    assert "new.py" not in json.dumps(error.to_dict()), "digests only, never the status text"


@pytest.mark.parametrize("which", ["sibling", "unknown", "descendant"])
def test_a_base_that_is_not_an_ancestor_is_refused(lab: Lab, which: str) -> None:
    wt = lab.worktree("wt-feat", "-b", "feat", start=lab.base)
    side = lab.worktree("wt-side")
    base = {
        "sibling": commit(side, "side work", {"side.txt": "s\n"}),
        "unknown": "0123456789abcdef" * 2 + "01234567",
        "descendant": git(
            lab.repo, "rev-parse", "HEAD"
        ),  # main's tip is a child of the worktree's HEAD, not an ancestor
    }[which]
    refused_start(lab, "git_base_not_ancestor", lambda: lab.start("alpha", wt, base_commit=base))


def test_a_subdirectory_of_a_worktree_is_refused_and_writes_nothing(lab: Lab) -> None:
    wt = lab.worktree("wt-feat")
    before = lab.footprint()
    with pytest.raises(CorralError):
        lab.start("alpha", wt / "src")
    assert lab.footprint() == before and lab.store.find("writer") == []


def test_a_subdirectory_of_a_worktree_is_refused_as_not_toplevel(lab: Lab) -> None:
    wt = lab.worktree("wt-feat")
    refused_start(lab, "git_not_toplevel", lambda: lab.start("alpha", wt / "src"))


# --- start refusals: other lanes and agents ------------------------------------------------------------


def test_a_symlink_to_another_lanes_worktree_is_taken(lab: Lab) -> None:
    wt = lab.worktree("wt-feat")
    links = lab.root / "links"
    links.mkdir()
    (links / "one").symlink_to(wt, target_is_directory=True)
    (links / "two").symlink_to(links / "one", target_is_directory=True)  # a chain of links
    alpha = lab.start("alpha", links / "one", owned_scopes=("src",))
    assert (alpha.data["worktree"], alpha.data["cwd"]) == (str(links / "one"), os.path.realpath(wt))
    for path in (wt, links / "two"):
        error = refused_start(lab, "worktree_taken", partial(lab.start, "beta", path, owned_scopes=("docs",)))
        assert error.details["name"] == "alpha"


def test_the_same_branch_in_another_worktree_is_taken(lab: Lab) -> None:
    wt = lab.worktree("wt-feat")
    lab.start("alpha", wt, owned_scopes=("src",))
    twin = lab.worktree("wt-twin", "--force", start="feat")  # git allows it when forced
    error = refused_start(lab, "branch_taken", lambda: lab.start("beta", twin, owned_scopes=("docs",)))
    assert error.details["name"] == "alpha"


@pytest.mark.parametrize(
    ("existing", "new", "code"),
    [
        ({"owned_scopes": ("src",)}, {"owned_scopes": ("src/app.py",)}, "scope_overlap"),
        ({"owned_scopes": ("src/app.py",)}, {"owned_scopes": ("src",)}, "scope_overlap"),
        ({"owned_scopes": ("src",)}, {"owned_scopes": ("src",)}, "scope_overlap"),
        ({"owned_scopes": ("src",), "locked_scopes": ("docs",)}, {"owned_scopes": ("docs/guide.md",)}, "scope_locked"),
        ({"owned_scopes": ("src",), "locked_scopes": ("docs/guide.md",)}, {"owned_scopes": ("docs",)}, "scope_locked"),
        ({"owned_scopes": ("src",)}, {"owned_scopes": ("docs",), "locked_scopes": ("src/app.py",)}, "scope_locked"),
        ({"owned_scopes": ("src/app.py",)}, {"owned_scopes": ("docs",), "locked_scopes": ("src",)}, "scope_locked"),
    ],
    ids=[
        "owned-under-owned",
        "owned-over-owned",
        "owned-equal-owned",
        "new-owned-under-existing-locked",
        "new-owned-over-existing-locked",
        "new-locked-under-existing-owned",
        "new-locked-over-existing-owned",
    ],
)
def test_scopes_conflicting_with_a_live_lane_are_refused(
    lab: Lab, existing: dict[str, Any], new: dict[str, Any], code: str
) -> None:
    lab.start("alpha", lab.worktree("wt-a"), **existing)
    wt = lab.worktree("wt-b")
    error = refused_start(lab, code, lambda: lab.start("beta", wt, **new))
    assert error.details["name"] == "alpha" and error.details["pairs"]


def test_locks_may_overlap_locks_and_disjoint_owners_coexist(lab: Lab) -> None:
    lab.start("alpha", lab.worktree("wt-a"), owned_scopes=("src/app.py",), locked_scopes=("docs",))
    beta = lab.start(
        "beta", lab.worktree("wt-b"), owned_scopes=("src/other.py", "srcx"), locked_scopes=("docs/guide.md",)
    )
    assert beta.state == "active"
    assert sorted(x.data["name"] for x in lab.service.writers("ctl")) == ["alpha", "beta"]


def test_a_lane_may_not_lock_what_it_owns(lab: Lab) -> None:
    wt = lab.worktree("wt-a")
    error = refused_start(
        lab, "scope_overlap", lambda: lab.start("alpha", wt, owned_scopes=("src",), locked_scopes=("src/app.py",))
    )
    assert error.details["pairs"] == [["src", "src/app.py"]]


def test_a_worktree_where_a_reviewer_runs_is_busy(lab: Lab) -> None:
    wt = lab.worktree("wt-a")
    lab.service.reviewers.start(ReviewerStartInput("ctl", lab.credential, "rev", "script", str(wt)))
    error = refused_start(lab, "worktree_busy", lambda: lab.start("alpha", wt))
    assert error.details["lease"].startswith("reviewer/")


def test_a_worktree_where_an_unleased_agent_runs_is_busy(lab: Lab) -> None:
    wt = lab.worktree("wt-a")
    stray = lab.host.start("stray", "script", os.path.realpath(wt), StartOptions())
    error = refused_start(lab, "worktree_busy", lambda: lab.start("alpha", wt))
    assert error.details["pane_id"] == stray.pane_id


def test_an_agent_in_a_subdirectory_makes_the_worktree_busy(lab: Lab) -> None:
    wt = lab.worktree("wt-a")
    lab.service.reviewers.start(ReviewerStartInput("ctl", lab.credential, "rev", "script", str(wt / "src")))
    error = refused_start(lab, "worktree_busy", lambda: lab.start("alpha", wt))
    assert error.details["lease"].startswith("reviewer/")
    lab.service.reviewers.close(ReviewerCloseInput("ctl", lab.credential, "rev", 0))
    stray = lab.host.start("stray", "script", os.path.realpath(wt / "src"), StartOptions())
    error = refused_start(lab, "worktree_busy", lambda: lab.start("alpha", wt))
    assert error.details["pane_id"] == stray.pane_id


def test_an_agent_in_a_sibling_sharing_the_prefix_does_not_block(lab: Lab) -> None:
    wt = lab.worktree("wt-a")
    sibling = lab.root / "wt-a-notes"
    sibling.mkdir()
    lab.service.reviewers.start(ReviewerStartInput("ctl", lab.credential, "rev", "script", str(sibling)))
    lab.host.start("stray", "script", os.path.realpath(sibling), StartOptions())
    assert lab.start("alpha", wt).state == "active"


def test_a_reviewer_elsewhere_does_not_block(lab: Lab) -> None:
    elsewhere = lab.root / "elsewhere"
    elsewhere.mkdir()
    lab.service.reviewers.start(ReviewerStartInput("ctl", lab.credential, "rev", "script", str(elsewhere)))
    assert lab.start("alpha", lab.worktree("wt-a")).state == "active"


def test_lanes_of_different_repositories_never_conflict(lab: Lab) -> None:
    other = make_repo(lab.root / "other")
    scopes = {"owned_scopes": ("src",), "locked_scopes": ("docs",)}
    alpha = lab.start("alpha", lab.worktree("wt-a", "-b", "feat"), **scopes)
    wt = lab.worktree("wt-other", "-b", "feat", repo=other)
    beta = lab.start("beta", wt, base_commit=git(other, "rev-parse", "HEAD~1"), **scopes)
    assert (alpha.state, beta.state) == ("active", "active")
    assert alpha.data["common_dir"] != beta.data["common_dir"]
    assert (alpha.data["branch"], alpha.data["owned_scopes"]) == (beta.data["branch"], beta.data["owned_scopes"])


# --- release ------------------------------------------------------------------------------------------


def test_release_refused_when_the_status_moved(lab: Lab) -> None:
    wt = lab.worktree("wt-a")
    lab.start("alpha", wt)
    read = status_digest(wt)
    (wt / "src" / "late.py").write_text("written after the coordinator read the status\n")
    error = refused("git_status_mismatch", lambda: lab.release("alpha", 0, wt, expected_status_sha256=read))
    assert error.details["actual"] == status_digest(wt)
    assert lab.lane("alpha").state == "active" and len(lab.host.list()) == 1
    assert lab.release("alpha", 0, wt).lease.state == "released"


def test_release_refused_when_head_moved(lab: Lab) -> None:
    wt = lab.worktree("wt-a")
    lab.start("alpha", wt)
    old_head, digest = head_of(wt), status_digest(wt)
    git(wt, "commit", "-q", "--allow-empty", "-m", "moved underneath")
    assert status_digest(wt) == digest, "only HEAD moved"
    error = refused("git_head_mismatch", lambda: lab.release("alpha", 0, wt, expected_head=old_head))
    assert (error.details["expected"], error.details["actual"]) == (old_head, head_of(wt))
    assert lab.lane("alpha").state == "active"
    assert lab.release("alpha", 0, wt).lease.data["release_head"] == head_of(wt)


def test_release_refused_with_a_stale_cursor(lab: Lab) -> None:
    wt = lab.worktree("wt-a")
    lab.start("alpha", wt)
    lab.ask("alpha", "write src/x.py x = 1")
    for stale in (0, 1, 3):
        error = refused("cursor_mismatch", partial(lab.release, "alpha", stale, wt))
        assert error.details["observed_seq"] == 2
    assert lab.lane("alpha").state == "active"
    assert lab.release("alpha", 2, wt).lease.state == "released"


def test_release_refused_while_a_receipt_is_open(lab: Lab) -> None:
    wt = lab.worktree("wt-a")
    lane = lab.start("alpha", wt)
    receipt = lab.service.receipts.relay(RelayInput("ctl", lab.credential, "alpha", "write src/x.py x = 1"))
    anyio.run(lab.host.wait, lane.data["pane_id"], 1, 30)  # settled, but nobody collected
    error = refused("receipt_outstanding", lambda: lab.release("alpha", 2, wt))
    assert error.details["receipt"] == receipt.token
    assert lab.lane("alpha").state == "active"
    anyio.run(lab.service.receipts.collect, CollectInput("ctl", lab.credential, (receipt.token,), 30))
    assert lab.release("alpha", 2, wt).lease.state == "released"


def test_release_refused_while_the_agent_works(lab: Lab) -> None:
    wt = lab.worktree("wt-a")
    lab.start("alpha", wt)
    # The signal file lies in the lane's owned scope (src): the release audits every file written.
    receipt = lab.service.receipts.relay(
        RelayInput("ctl", lab.credential, "alpha", f"wait-file src/{wt.name}.go\necho done")
    )
    go = wt / "src" / f"{wt.name}.go"
    try:
        refused("agent_not_settled", lambda: lab.release("alpha", 1, wt))
    finally:
        go.write_text("")
    anyio.run(lab.service.receipts.collect, CollectInput("ctl", lab.credential, (receipt.token,), 30))
    assert lab.release("alpha", 2, wt).lease.state == "released"


def test_released_lanes_free_their_worktree_branch_and_scopes(lab: Lab) -> None:
    wt_a = lab.worktree("wt-a")
    wt_b = lab.worktree("wt-b")
    lab.start("alpha", wt_a, owned_scopes=("src",), locked_scopes=("docs",))
    refused_start(lab, "scope_overlap", lambda: lab.start("beta", wt_b, owned_scopes=("src/app.py",)))
    refused_start(lab, "scope_locked", lambda: lab.start("beta", wt_b, owned_scopes=("docs",)))
    lab.release("alpha", 0, wt_a)
    beta = lab.start("beta", wt_b, owned_scopes=("src/app.py", "docs"))
    assert beta.state == "active"
    again = lab.start("alpha", wt_a, owned_scopes=("README.md",))  # same name, worktree and branch
    assert again.state == "active" and again.id != lab.lane("beta").id


def test_a_lane_claims_its_scopes_branch_and_worktree_while_live_and_nothing_once_released(lab: Lab) -> None:
    wt = lab.worktree("wt-a")
    alpha = lab.start("alpha", wt, owned_scopes=("src", "tests/unit"), locked_scopes=("docs",))
    common_dir = os.path.realpath(lab.repo / ".git")
    assert lab.claims() == [
        (alpha.id, "/", "worktree", os.path.realpath(wt).lstrip("/")),
        (alpha.id, common_dir, "branch", "a"),
        (alpha.id, common_dir, "locked", "docs"),
        (alpha.id, common_dir, "owned", "src"),
        (alpha.id, common_dir, "owned", "tests/unit"),
    ], "written with the lane's row"
    lab.release("alpha", 0, wt)
    assert lab.claims() == [], "a terminal state clears the lane's claims"


def test_release_through_a_retargeted_symlink_is_refused(lab: Lab) -> None:
    wt_a = lab.worktree("wt-a")
    wt_b = lab.worktree("wt-b")
    commit(wt_b, "only in b", {"b.txt": "b\n"})
    link = lab.root / "lane-link"
    link.symlink_to(wt_a, target_is_directory=True)
    lab.start("alpha", link)
    retarget = lab.root / "lane-link.new"
    retarget.symlink_to(wt_b, target_is_directory=True)
    retarget.replace(link)
    with pytest.raises(CorralError):  # today: released, release_head = wt-b's HEAD, a commit alpha never saw
        lab.release("alpha", 0, wt_b)
    assert lab.lane("alpha").state == "active"


# --- reconcile ----------------------------------------------------------------------------------------


class FlakyCloseHost(ProcessHost):
    """Closing a pane fails while ``close_fails``; starting can be made to fail after the pane exists."""

    close_fails = False
    start_fails = False

    def start(
        self, name: str, kind: str, cwd: str, options: StartOptions, gate: Any = None, nonce: Any = None
    ) -> Observation:
        started = super().start(name, kind, cwd, options, gate, nonce)
        if self.start_fails:
            raise AgentError("the agent did not come up", code="agent_start_failed", pane_id=started.pane_id)
        return started

    def close(self, pane_id: str, gate: Any = None) -> None:
        if self.close_fails:
            raise AgentError("the pane would not close", code="pane_close_failed")
        super().close(pane_id, gate)


@pytest.fixture
def flaky(tmp_path: Path) -> Iterator[tuple[Lab, FlakyCloseHost]]:
    world = Lab(tmp_path, lambda store, agents: FlakyCloseHost(store, agents, Kinds.load([])))
    assert isinstance(world.host, FlakyCloseHost)
    yield world, world.host
    world.store.close()


def test_a_release_whose_pane_vanished_is_reconciled_and_frees_the_lane(flaky: tuple[Lab, FlakyCloseHost]) -> None:
    lab, host = flaky
    wt = lab.worktree("wt-a")
    lane = lab.start("alpha", wt, owned_scopes=("src",))
    host.close_fails = True
    error = refused("agent_close_failed", lambda: lab.release("alpha", 0, wt))
    assert error.details["lease"]["state"] == "release_failed"
    wt_b = lab.worktree("wt-b")
    refused_start(lab, "scope_overlap", lambda: lab.start("beta", wt_b, owned_scopes=("src",)))
    skipped = lab.service.inventory.reconcile(ControllerInput("ctl", lab.credential, apply=True), "writer")
    assert [(a["name"], a["action"]) for a in skipped.actions] == [("alpha", "skip")], "its pane still exists"
    ProcessHost.close(host, lane.data["pane_id"])  # the pane vanishes by other means
    done = lab.service.inventory.reconcile(ControllerInput("ctl", lab.credential, apply=True), "writer")
    assert [(a["name"], a["action"], a["to"]) for a in done.actions] == [("alpha", "reconciled", "released")]
    assert lab.lane("alpha").data["reconciled_at"]
    assert lab.start("beta", wt_b, owned_scopes=("src",)).state == "active"
    again = lab.service.inventory.reconcile(ControllerInput("ctl", lab.credential, apply=True), "writer")
    assert again.actions == [], "a settled lane is not touched again"


def test_a_failed_release_can_be_released_again(flaky: tuple[Lab, FlakyCloseHost]) -> None:
    lab, host = flaky
    wt = lab.worktree("wt-a")
    lab.start("alpha", wt)
    host.close_fails = True
    refused("agent_close_failed", lambda: lab.release("alpha", 0, wt))
    assert lab.lane("alpha").state == "release_failed" and len(host.list()) == 1
    attention = lab.service.inventory.status()["needs_attention"]
    assert [(a["machine"], a["name"], a["state"]) for a in attention] == [("writer", "alpha", "release_failed")]
    host.close_fails = False
    settle_index(wt)
    before = fingerprint(wt)
    assert lab.release("alpha", 0, wt).lease.state == "released"
    assert fingerprint(wt) == before and host.list() == []


def test_an_orphaned_start_whose_pane_vanished_is_reconciled(flaky: tuple[Lab, FlakyCloseHost]) -> None:
    lab, host = flaky
    wt = lab.worktree("wt-a")
    host.start_fails = host.close_fails = True
    error = refused("agent_start_failed", lambda: lab.start("alpha", wt, owned_scopes=("src",)))
    assert error.details["lease"]["state"] == "orphaned"
    host.start_fails = host.close_fails = False
    wt_b = lab.worktree("wt-b")
    refused_start(lab, "scope_overlap", lambda: lab.start("beta", wt_b, owned_scopes=("src",)))
    refused_start(lab, "worktree_taken", lambda: lab.start("beta", wt, owned_scopes=("docs",)))
    ProcessHost.close(host, error.details["lease"]["pane_id"])
    done = lab.service.inventory.reconcile(ControllerInput("ctl", lab.credential, apply=True), "writer")
    assert [(a["action"], a["to"]) for a in done.actions] == [("reconciled", "failed_closed")]
    assert lab.start("beta", wt_b, owned_scopes=("src",)).state == "active"


def test_a_failed_start_that_closed_its_pane_frees_everything(flaky: tuple[Lab, FlakyCloseHost]) -> None:
    lab, host = flaky
    wt = lab.worktree("wt-a")
    host.start_fails = True
    error = refused("agent_start_failed", lambda: lab.start("alpha", wt))
    assert error.details["lease"]["state"] == "failed_closed"
    host.start_fails = False
    assert lab.start("alpha", wt).state == "active"


def test_an_active_lane_whose_pane_vanished_can_be_settled(lab: Lab) -> None:
    wt = lab.worktree("wt-a")
    lane = lab.start("alpha", wt, owned_scopes=("src",))
    lab.host.close(lane.data["pane_id"])
    refused("agent_gone", lambda: lab.release("alpha", 0, wt))
    lab.service.inventory.reconcile(ControllerInput("ctl", lab.credential, apply=True), "writer")
    assert lab.start("beta", lab.worktree("wt-b"), owned_scopes=("src",)).state == "active"


# --- scopes check ---------------------------------------------------------------------------------------


def test_scopes_check_reports_conflicts_and_writes_nothing(lab: Lab) -> None:
    lab.start("alpha", lab.worktree("wt-a"), owned_scopes=("src",), locked_scopes=("docs",))
    other = make_repo(lab.root / "other")
    other_wt = lab.worktree("wt-other", "-b", "feat", repo=other)
    lab.start("gamma", other_wt, base_commit=git(other, "rev-parse", "HEAD~1"), owned_scopes=("lib",))
    before = (lab.footprint(), [(i.id, i.version) for i in lab.store.find("writer")])
    db = store_fingerprint(lab.store.url)

    report = lab.service.writers.scopes_check(
        ScopesCheckInput(owned_scopes=("./src/x.py", "docs/", "lib/a"), locked_scopes=("src",), worktree=str(other_wt))
    )
    assert report["conflicts"] == [{"lane": "gamma", "kind": "owned/owned", "scope": "lib/a", "theirs": "lib"}]
    everywhere = lab.service.writers.scopes_check(
        ScopesCheckInput(owned_scopes=("./src/x.py", "docs/", "lib/a"), locked_scopes=("src",))
    )
    assert everywhere["owned_scopes"] == ["docs", "lib/a", "src/x.py"] and everywhere["locked_scopes"] == ["src"]
    assert everywhere["own_overlaps"] == [["src/x.py", "src"]]
    assert sorted(everywhere["conflicts"], key=lambda c: (c["lane"], c["kind"], c["scope"])) == [
        {"lane": "alpha", "kind": "locked/owned", "scope": "src", "theirs": "src"},
        {"lane": "alpha", "kind": "owned/locked", "scope": "docs", "theirs": "docs"},
        {"lane": "alpha", "kind": "owned/owned", "scope": "src/x.py", "theirs": "src"},
        {"lane": "gamma", "kind": "owned/owned", "scope": "lib/a", "theirs": "lib"},
    ]
    assert everywhere["ok"] is False and report["ok"] is False
    clear = lab.service.writers.scopes_check(ScopesCheckInput(owned_scopes=("tests",), worktree=str(lab.repo)))
    assert clear == {
        "owned_scopes": ["tests"],
        "locked_scopes": [],
        "own_overlaps": [],
        "conflicts": [],
        "symlinks": [],
        "ok": True,
    }
    assert (lab.footprint(), [(i.id, i.version) for i in lab.store.find("writer")]) == before
    assert store_fingerprint(lab.store.url) == db, "read-only: the database is unchanged"


def test_release_bound_to_the_content_refuses_a_dirty_file_edited_again(lab: Lab) -> None:
    """Issue 10: the status digest cannot see a second edit of a dirty file; the content digest can."""
    wt = lab.worktree("wt-a")
    lab.start("alpha", wt)
    (wt / "src" / "app.py").write_text("reviewed edit\n")
    reviewed = lab.service.writers.preflight(str(wt))
    (wt / "src" / "app.py").write_text("edited again after the review\n")
    assert lab.service.writers.preflight(str(wt))["status_sha256"] == reviewed["status_sha256"]
    error = refused(
        "git_content_mismatch",
        lambda: lab.release("alpha", 0, wt, expected_content_sha256=reviewed["content_sha256"]),
    )
    assert error.details["expected"] == reviewed["content_sha256"]
    assert error.details["actual"] == lab.service.writers.preflight(str(wt))["content_sha256"]
    assert lab.lane("alpha").state == "active" and len(lab.host.list()) == 1
    now = lab.service.writers.preflight(str(wt))["content_sha256"]
    assert lab.release("alpha", 0, wt, expected_content_sha256=now).lease.state == "released"


def test_release_with_a_memory_checkpoint_and_with_mismatching_ones(lab: Lab) -> None:
    """issue 18: ``memory:<id>`` names a checkpoint of a project whose repository is the lane's (here the
    main checkout: the lane is a linked worktree of it); the release fills the ref and the digest from
    the checkpoint's content and refuses another repository's checkpoint or another digest."""
    from runner.service.inputs.memory import CheckpointInput

    wt = lab.worktree("wt-a")
    lab.start("alpha", wt)
    (wt / "src" / "feature.py").write_text("x = 1\n")
    mine = lab.service.memory.checkpoint(
        CheckpointInput(
            "alpha", "the feature is written", project="app", goal="feature", repository=str(lab.repo),
            current_state="src/feature.py exists", next_steps=("review it",), auto_files=True,
        )
    )  # fmt: skip
    assert mine["checkpoint"]["files"] == [], "auto_files reads the project's directory (the main checkout)"
    other_repo = make_repo(lab.root / "other")
    theirs = lab.service.memory.checkpoint(
        CheckpointInput("alpha", "elsewhere", project="other", goal="g", repository=str(other_repo), next_steps=("x",))
    )
    error = refused("memory_project_mismatch", lambda: lab.release("alpha", 0, wt, checkpoint_ref=theirs["ref"]))
    assert error.details["project"] == "other"
    refused("memory_digest_mismatch", lambda: lab.release("alpha", 0, wt, checkpoint_ref=mine["ref"]))  # CHECKPOINT_SHA
    assert lab.lane("alpha").state == "active", "nothing was released"
    released = lab.release("alpha", 0, wt, checkpoint_ref=mine["ref"], checkpoint_sha256=None).lease
    assert released.state == "released"
    assert (released.data["checkpoint_ref"], released.data["checkpoint_sha256"]) == (
        mine["ref"],
        mine["content_sha256"],
    )


# --- confinement: where Bubblewrap cannot start ------------------------------------------------------


def test_without_bubblewrap_a_writer_start_is_refused_unless_unconfined_with_a_reason(
    lab: Lab, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runner.sandbox import confine

    monkeypatch.setenv(confine.BWRAP_ENV, str(lab.root / "no-such-bwrap"))
    wt = lab.worktree("wt-feat")
    error = refused_start(lab, "sandbox_unavailable", lambda: lab.start("alpha", wt, owned_scopes=("src",)))
    assert "not installed" in error.message
    with pytest.raises(CorralError) as caught:
        lab.start_input("alpha", wt, owned_scopes=("src",), unconfined=True)
    assert caught.value.code == "input_invalid"
    assert caught.value.details["field"] == "reason", "named as the surfaces name it (--reason, reason)"
    lane = lab.start("alpha", wt, owned_scopes=("src",), unconfined=True, unconfined_reason="no userns in CI")
    assert lane.data["options"]["unconfined_reason"] == "no userns in CI"
    (row,) = lab.service.inventory.status()["confinement"]
    assert (row["name"], row["confinement"], row["unconfined_reason"]) == ("alpha", "none", "no userns in CI")
    result = lab.ask("alpha", "write src/x.py x = 1")
    assert "corral: unconfined" not in result.output, "the output is the agent's own; the note is beside it"
    assert (wt / "src" / "x.py").read_text() == "x = 1\n"


def test_status_shows_a_confined_writer_as_bwrap(lab: Lab) -> None:
    lab.start("alpha", lab.worktree("wt-feat"), owned_scopes=("src",))
    (row,) = lab.service.inventory.status()["confinement"]
    assert (row["machine"], row["host"], row["confinement"], row["unconfined_reason"]) == (
        "writer",
        "process",
        "bwrap",
        None,
    )


def test_a_start_that_lost_its_store_is_settled_by_its_own_process_once_its_call_ended(
    lab: Lab, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A start whose outcome could not be recorded (the store went away after the agent came up) left
    its lane provisioning; the process that ran it lives on (``corral serve``, a plan runner), so its
    lane must not look busy for as long as that process runs: reconcile from it settles the lane."""
    from runner import faults
    from runner.errors import StoreUnavailableError

    wt = lab.worktree("wt-a")
    real_point = faults.point

    def lose_the_store(name: str) -> None:
        if name == "writer.start:effect":
            raise StoreUnavailableError("the store went away", code="store_unavailable")
        real_point(name)

    monkeypatch.setattr(faults, "point", lose_the_store)
    refused("store_unavailable", lambda: lab.start("alpha", wt, owned_scopes=("src",)))
    monkeypatch.setattr(faults, "point", real_point)
    stuck = lab.lane("alpha")
    assert stuck.state == "provisioning" and stuck.data["starter"]["pid"] == os.getpid()
    assert stuck.data["starter"]["attempt"] == stuck.data["start_nonce"]
    done = lab.service.inventory.reconcile(ControllerInput("ctl", lab.credential, apply=True), "writer")
    assert [(a["name"], a["action"]) for a in done.actions] == [("alpha", "reconciled")], done.actions
    assert lab.lane("alpha").state != "provisioning"


def test_a_start_still_running_is_left_alone_by_reconcile(lab: Lab, monkeypatch: pytest.MonkeyPatch) -> None:
    """While its call runs (marked), the starter is active even to another thread of the same process."""
    from runner import lockstatus

    with lockstatus.attempt("probe-attempt") as running:
        holder = {**lockstatus.current(), "attempt": "probe-attempt"}
        assert running.marked and lockstatus.status(holder) == "active"
    assert lockstatus.status(holder) == "stale", "the call ended: its holder is stale though the process lives"
    assert lockstatus.status(lockstatus.current()) == "active", "a holder without an attempt: its process decides"

    # Seen from another network namespace (its abstract sockets are not ours), an ended call could be
    # a running one: the process decides, never the probe.
    import runner.lockstatus as module

    monkeypatch.setattr(module, "_same_network_namespace", lambda pid: False)
    assert lockstatus.status(holder) == "active"
