"""The writer-lane git guards (:mod:`runner.guards.git`), judged on the facts the real preflight reads from
real repositories (a main checkout and a linked worktree), and lane conflicts over lanes in a real store."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from runner import scopes
from runner.git import preflight
from runner.sql.store_sqlite import SQLiteStore
from tests.support.contexts import Contexts

pytestmark = pytest.mark.usefixtures("hermetic_git")


@pytest.fixture
def contexts(store: SQLiteStore) -> Contexts:
    return Contexts(store)


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> tuple[Path, Path]:
    """(main checkout on ``main``, linked worktree on ``lane``), one commit."""
    main = tmp_path / "main"
    main.mkdir()
    git(main, "init", "-q", "-b", "main")
    (main / "a.txt").write_text("a\n")
    git(main, "add", "-A")
    git(main, "commit", "-q", "-m", "base")
    git(main, "worktree", "add", "-q", "-b", "lane", str(tmp_path / "lane"))
    return main, tmp_path / "lane"


def facts(worktree: Path) -> dict[str, Any]:
    return preflight.read(str(worktree)).to_dict()


def test_only_the_top_of_a_linked_worktree_is_a_lane(contexts: Contexts, repo: tuple[Path, Path]) -> None:
    main, lane = repo
    start = contexts.absent("writer/w1")
    assert contexts.guard("git_linked_worktree", start, observations={"git": facts(lane)}) is None
    assert contexts.refusal("git_linked_worktree", start, observations={"git": facts(main)}).code == (
        "git_not_linked_worktree"
    )
    (lane / "sub").mkdir()
    assert contexts.refusal("git_linked_worktree", start, observations={"git": facts(lane / "sub")}).code == (
        "git_not_toplevel"
    )


def test_branch_head_and_status_must_be_what_the_caller_saw(contexts: Contexts, repo: tuple[Path, Path]) -> None:
    _, lane = repo
    start = contexts.absent("writer/w1")
    seen = facts(lane)
    git_facts = {"git": seen}
    assert contexts.guard("git_branch", start, params={"branch": "lane"}, observations=git_facts) is None
    wrong = contexts.refusal("git_branch", start, params={"branch": "other"}, observations=git_facts)
    assert (wrong.code, wrong.details) == ("git_branch_mismatch", {"expected": "other", "actual": "lane"})
    protected = {"branch": "lane", "protected_branches": ["lane"]}
    assert (
        contexts.refusal("git_branch", start, params=protected, observations=git_facts).code == "git_branch_protected"
    )
    assert contexts.guard("git_head", start, params={"expected_head": seen["head"]}, observations=git_facts) is None
    status = {"expected_status_sha256": seen["status_sha256"]}
    assert contexts.guard("git_status", start, params=status, observations=git_facts) is None
    (lane / "new.txt").write_text("new\n")
    moved = {"git": facts(lane)}
    refused = contexts.refusal("git_status", start, params=status, observations=moved)
    assert refused.code == "git_status_mismatch" and refused.details["expected"] == seen["status_sha256"]
    git(lane, "checkout", "-q", "--detach")
    detached = contexts.refusal("git_branch", start, params={"branch": "lane"}, observations={"git": facts(lane)})
    assert detached.code == "git_detached_head"


def put_lane(contexts: Contexts, lane_id: str, state: str, data: dict[str, Any]) -> None:
    """A lane as ``writer start`` records it: its row and the claims ``record_writer_lane`` declares."""
    contexts.put(lane_id, state, data)
    claims = scopes.lane_claims(
        data.get("common_dir"), data.get("branch"), data.get("cwd"), data["owned_scopes"], data["locked_scopes"]
    )
    with contexts.store.write() as tx:
        tx.set_claims(lane_id, claims)


def test_a_lane_conflicting_with_a_live_lane_of_the_repository_is_refused(
    contexts: Contexts, repo: tuple[Path, Path]
) -> None:
    _, lane = repo
    seen = facts(lane)
    put_lane(
        contexts,
        "writer/w1",
        "active",
        {
            "name": "first",
            "cwd": "/elsewhere/wt",
            "common_dir": seen["common_dir"],
            "branch": "other",
            "owned_scopes": ["src"],
            "locked_scopes": ["docs"],
        },
    )
    start = contexts.absent("writer/w2")

    def code(owned: list[str], locked: list[str] = []) -> str | None:  # noqa: B006 (never mutated)
        params = {"owned_scopes": owned, "locked_scopes": locked}
        refused = contexts.guard("lane_conflicts", start, params=params, observations={"git": seen})
        return None if refused is None else refused.code

    assert code(["tests"], ["README.md"]) is None
    assert code(["src/core"]) == "scope_overlap"
    assert code(["docs/index.md"]) == "scope_locked", "owning what another lane locks"
    assert code(["tests"], ["src"]) == "scope_locked", "locking what another lane owns"
    contexts.put("writer/w1", "released", {"owned_scopes": ["src"], "common_dir": seen["common_dir"]})
    assert code(["src"]) is None, "a released lane holds nothing"
