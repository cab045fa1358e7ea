"""The claim index behind the lane-conflict check: the same answers as the pairwise check, and migrated.

Properties over generated scope sets, on a real SQLite store: ``overlapping_claims`` returns exactly the
claims :func:`runner.scopes.overlaps` pairs with the asked scopes, and the ``lane_conflicts`` guard,
which reads only the lanes the index names, gives the verdict of judging every live lane. Then a
version-2 store (the schema before the index) with live lanes migrates, and its lanes still conflict.
"""

from __future__ import annotations

import itertools
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runner import scopes
from runner.context import Instance, Rejection
from runner.guards.git import LANE_STATES, lane_rejection
from runner.sql.store_sqlite import MIGRATIONS, SCHEMA_VERSION, SQLiteStore
from runner.sql.store_sqlite_file import APPLICATION_ID
from tests.support.contexts import Contexts
from tests.support.examples import examples

# Few segment names, shallow paths: overlaps (equal, ancestor, under) are common, and so are mere
# string prefixes (``a`` / ``a-b`` / ``a.b`` / ``a0``: '-' and '.' sort below '/', '0' just above).
SEGMENT = st.sampled_from(["a", "b", "a-b", "a.b", "a0", "ü"])
SCOPE = st.lists(SEGMENT, min_size=1, max_size=4).map("/".join)
SCOPES = st.lists(SCOPE, max_size=6).map(lambda raw: list(scopes.normalize(raw)))
STATES = st.sampled_from(["active", "provisioning", "released", "discarding"])
LANE = st.fixed_dictionaries(
    {"owned": SCOPES, "locked": SCOPES, "state": STATES, "repo": st.sampled_from(["r1", "r2"])}
)

_examples = itertools.count()


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One store for every example (each example writes under its own prefix)."""
    store = SQLiteStore(tmp_path_factory.mktemp("claims") / "corral.db")
    yield store
    store.close()


@settings(max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lanes=st.lists(LANE, max_size=6), mine=SCOPES, kinds=st.sampled_from([None, ["owned"], ["owned", "locked"]]))
def test_the_index_finds_exactly_the_pairwise_overlaps(
    shared: SQLiteStore, lanes: list[dict[str, Any]], mine: list[str], kinds: list[str] | None
) -> None:
    n = next(_examples)
    space = f"space-{n}"
    with shared.write() as tx:
        for i, lane in enumerate(lanes):
            lane_id = f"writer/{n}-{i}"
            tx.put(Instance(lane_id, "writer", "absent", 0, {}), lane["state"], {})
            claims = [(space + lane["repo"], "owned", s) for s in lane["owned"]]
            claims += [(space + lane["repo"], "locked", s) for s in lane["locked"]]
            tx.set_claims(lane_id, claims)
    expected = sorted(
        (f"writer/{n}-{i}", kind, theirs)
        for i, lane in enumerate(lanes)
        if lane["repo"] == "r1" and lane["state"] in LANE_STATES
        for kind in ("owned", "locked")
        if kinds is None or kind in kinds
        for theirs in set(lane[kind])
        if any(scopes.overlaps(m, theirs) for m in mine)
    )
    with shared.read() as reader:
        found = reader.overlapping_claims(space + "r1", mine, kinds, LANE_STATES)
    assert [(c.instance_id, c.kind, c.scope) for c in found] == expected
    assert {c.space for c in found} <= {space + "r1"}


def _reference(lanes: list[Instance], facts: dict[str, Any], owned: list[str], locked: list[str]) -> Rejection | None:
    """The check before the index: every live lane, by id, judged in full."""
    for lane in sorted(lanes, key=lambda x: x.id):
        if lane.state in LANE_STATES:
            refused = lane_rejection(lane, facts, owned, locked)
            if refused is not None:
                return refused
    return None


WORKTREE = st.sampled_from(["/w/a", "/w/a/b", "/w/ab", "/w/c", "/x"])
BRANCH = st.sampled_from(["one", "two", "f/x"])
GIT_LANE = st.fixed_dictionaries(
    {
        "owned": SCOPES,
        "locked": SCOPES,
        "state": STATES,
        "repo": st.sampled_from(["/r1/.git", "/r2/.git"]),
        "cwd": WORKTREE,
        "branch": BRANCH,
    }
)


@settings(max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lanes=st.lists(GIT_LANE, max_size=5),
    owned=SCOPES,
    locked=SCOPES,
    cwd=WORKTREE,
    branch=BRANCH,
    repo=st.sampled_from(["/r1/.git", "/r2/.git"]),
)
def test_lane_conflicts_gives_the_verdict_of_judging_every_live_lane(
    shared: SQLiteStore,
    lanes: list[dict[str, Any]],
    owned: list[str],
    locked: list[str],
    cwd: str,
    branch: str,
    repo: str,
) -> None:
    root = f"/e{next(_examples)}"  # this example's paths: no lane of another example is near them
    contexts = Contexts(shared)
    written = []
    with shared.write() as tx:  # one commit per example: the lanes as writer start records them
        for i, lane in enumerate(lanes):
            lane_id = f"writer{root}-{i:02d}"
            data = {
                "name": f"lane{i}",
                "cwd": root + lane["cwd"],
                "common_dir": root + lane["repo"],
                "branch": lane["branch"],
                "owned_scopes": lane["owned"],
                "locked_scopes": lane["locked"],
            }
            written.append(tx.put(Instance(lane_id, "writer", "absent", 0, {}), lane["state"], data))
            tx.set_claims(
                lane_id,
                scopes.lane_claims(data["common_dir"], data["branch"], data["cwd"], lane["owned"], lane["locked"]),
            )
    facts = {"realpath": root + cwd, "common_dir": root + repo, "branch": branch}
    params = {"owned_scopes": owned, "locked_scopes": locked}
    start = contexts.absent(f"writer{root}-new")
    verdict = contexts.guard("lane_conflicts", start, params=params, observations={"git": facts})
    assert verdict == _reference(written, facts, owned, locked)


# --- migration -------------------------------------------------------------------------------------

BEFORE_THE_INDEX = 2  # the schema version corral shipped before issue 13's claim index


def _version_two(db: Path, rows: list[tuple[str, str, dict[str, Any]]]) -> None:
    conn = sqlite3.connect(db, isolation_level=None)
    for script in MIGRATIONS[:BEFORE_THE_INDEX]:
        conn.executescript(script)
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    conn.execute(f"PRAGMA user_version = {BEFORE_THE_INDEX}")
    for instance_id, state, data in rows:
        conn.execute(
            "INSERT INTO instances VALUES (?, 'writer', ?, 2, ?, 't', 't')", (instance_id, state, json.dumps(data))
        )
    conn.close()


def test_a_version_two_store_with_live_lanes_migrates_and_its_lanes_still_conflict(tmp_path: Path) -> None:
    live = {
        "name": "alpha",
        "cwd": "/w/alpha",
        "common_dir": "/r/.git",
        "branch": "alpha",
        "owned_scopes": ["src"],
        "locked_scopes": ["docs/api.md"],
    }
    ended = {**live, "name": "old", "cwd": "/w/old", "branch": "old", "owned_scopes": ["tests"]}
    db = tmp_path / "corral.db"
    _version_two(db, [("writer/1", "active", live), ("writer/2", "released", ended)])
    with SQLiteStore(db) as store:
        assert store.info()["schema_version"] == SCHEMA_VERSION
        with store.read() as reader:
            found = reader.overlapping_claims(None, ["src/app.py", "docs", "tests", "alpha", "w/alpha"])
        assert sorted((c.instance_id, c.space, c.kind, c.scope) for c in found) == [
            ("writer/1", "/", "worktree", "w/alpha"),
            ("writer/1", "/r/.git", "branch", "alpha"),
            ("writer/1", "/r/.git", "locked", "docs/api.md"),
            ("writer/1", "/r/.git", "owned", "src"),
        ], "live lanes are backfilled; a released one claims nothing"
        contexts = Contexts(store)
        start = contexts.absent("writer/3")

        def code(owned: list[str], locked: list[str] = [], **facts: str) -> str | None:  # noqa: B006 (never mutated)
            seen = {"realpath": "/w/beta", "common_dir": "/r/.git", "branch": "beta", **facts}
            params = {"owned_scopes": owned, "locked_scopes": locked}
            refused = contexts.guard("lane_conflicts", start, params=params, observations={"git": seen})
            return None if refused is None else refused.code

        assert code(["src/app.py"]) == "scope_overlap"
        assert code(["docs"]) == "scope_locked"
        assert code(["tests"]) is None, "the released lane's scopes are free"
        assert code(["lib"], branch="alpha") == "branch_taken"
        assert code(["lib"], realpath="/w/alpha/sub") == "worktree_nested"
        assert code(["lib"]) is None
        with store.write() as tx:  # and the migrated store takes writes
            tx.put(Instance("thing/1", "thing", "absent", 0, {}), "on", {})
    with SQLiteStore(db) as again:
        assert again.get("thing/1") is not None


def test_a_migration_skips_rows_it_cannot_read_as_lanes(tmp_path: Path) -> None:
    """A lane without a repository, or with scopes that are not strings, claims what it can, and the
    store still opens."""
    odd = {"name": "odd", "cwd": "relative", "owned_scopes": ["src"]}
    mixed = {"name": "mixed", "cwd": "/w/m", "common_dir": "/r/.git", "owned_scopes": ["ok", 3, None]}
    db = tmp_path / "corral.db"
    _version_two(db, [("writer/1", "active", odd), ("writer/2", "active", mixed)])
    with SQLiteStore(db) as store, store.read() as reader:
        found = reader.overlapping_claims(None, ["src", "ok", "w/m", "relative", "elative"])
        assert sorted((c.instance_id, c.kind, c.scope) for c in found) == [
            ("writer/2", "owned", "ok"),
            ("writer/2", "worktree", "w/m"),
        ]
