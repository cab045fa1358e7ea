"""Guards of writer lanes: git facts re-read by the runner, and scopes that must not overlap.

They judge ``observations["git"]`` (a :class:`~runner.git.preflight.GitFacts` as a dict, plus
``base_is_ancestor``) against what the caller expects (``params``), and the lane's worktree, branch and
scopes against every live lane of the same repository, inside the serialized transaction: the store's
claim index names the lanes that could conflict, and only those are read. A refusal says which fact
differed and carries the expected and actual values (digests, never the status text).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from runner import scopes
from runner.context import Context, Instance, Rejection, View
from runner.guards import GUARDS
from runner.guards.agents import LEASE_MACHINES, LIVE_LEASE_STATES

LANE_STATES = ("provisioning", "active", "releasing", "orphaned", "release_failed")


def _git(ctx: Context) -> Mapping[str, Any]:
    facts = ctx.observations.get("git")
    return facts if isinstance(facts, Mapping) else {}


@GUARDS.register("git_linked_worktree")
def git_linked_worktree(ctx: Context) -> Rejection | None:
    """The worktree is the top level of a linked git worktree: not the main checkout, not a clone."""
    facts = _git(ctx)
    if facts.get("toplevel") != facts.get("realpath"):
        return Rejection(
            "git_not_toplevel",
            f"{facts.get('worktree')} resolves to {facts.get('realpath')}, not a worktree's top level "
            f"({facts.get('toplevel')})",
            {"realpath": facts.get("realpath"), "toplevel": facts.get("toplevel")},
        )
    if not facts.get("linked"):
        return Rejection(
            "git_not_linked_worktree",
            f"{facts.get('worktree')} is a main checkout or a clone, not a linked worktree (git worktree add)",
            {"git_dir": facts.get("git_dir"), "common_dir": facts.get("common_dir")},
        )
    return None


@GUARDS.register("git_branch")
def git_branch(ctx: Context) -> Rejection | None:
    """HEAD is on the expected branch (not detached), and that branch is not protected."""
    facts = _git(ctx)
    branch, expected = facts.get("branch"), ctx.params.get("branch")
    if branch is None:
        return Rejection("git_detached_head", "HEAD is detached; a lane works on a branch", {"expected": expected})
    if branch != expected:
        return Rejection(
            "git_branch_mismatch",
            f"the worktree is on {branch!r}, not {expected!r}",
            {"expected": expected, "actual": branch},
        )
    protected = list(ctx.params.get("protected_branches") or ())
    if branch in protected:
        return Rejection("git_branch_protected", f"the branch {branch!r} is protected", {"protected": protected})
    return None


@GUARDS.register("git_same_worktree")
def git_same_worktree(ctx: Context) -> Rejection | None:
    """The worktree read now is the lane's: same resolved path, same repository, same branch."""
    facts = _git(ctx)
    data = ctx.instance.data
    recorded = (data.get("cwd"), data.get("common_dir"), data.get("branch"))
    seen = (facts.get("realpath"), facts.get("common_dir"), facts.get("branch"))
    if recorded == seen:
        return None
    return Rejection(
        "git_worktree_changed",
        "the lane's worktree is no longer the one it started in (path, repository or branch differ)",
        {
            "expected": dict(zip(("realpath", "common_dir", "branch"), recorded, strict=True)),
            "actual": dict(zip(("realpath", "common_dir", "branch"), seen, strict=True)),
        },
    )


@GUARDS.register("git_head")
def git_head(ctx: Context) -> Rejection | None:
    """HEAD is the commit the caller expects."""
    actual, expected = _git(ctx).get("head"), ctx.params.get("expected_head")
    if actual == expected:
        return None
    return Rejection(
        "git_head_mismatch", f"HEAD is {actual}, not the expected {expected}", {"expected": expected, "actual": actual}
    )


@GUARDS.register("git_base")
def git_base(ctx: Context) -> Rejection | None:
    """The base commit is an ancestor of HEAD."""
    facts = _git(ctx)
    if facts.get("base_is_ancestor") is True:
        return None
    return Rejection(
        "git_base_not_ancestor",
        f"{ctx.params.get('base_commit')} is not an ancestor of HEAD",
        {"base_commit": ctx.params.get("base_commit"), "head": facts.get("head")},
    )


@GUARDS.register("git_status")
def git_status(ctx: Context) -> Rejection | None:
    """The worktree's status digest (SHA-256 of porcelain v1 with untracked files) is the expected one."""
    actual, expected = _git(ctx).get("status_sha256"), ctx.params.get("expected_status_sha256")
    if actual == expected:
        return None
    return Rejection(
        "git_status_mismatch",
        "the worktree's status changed since it was read",
        {"expected": expected, "actual": actual},
    )


@GUARDS.register("git_content")
def git_content(ctx: Context) -> Rejection | None:
    """When the caller gave ``expected_content_sha256``, the worktree's content digest (every tracked
    and untracked file's bytes, :func:`runner.git.preflight.content_digest`) is that one. Without an
    expectation it passes: the status digest alone is then what binds the operation."""
    expected = ctx.params.get("expected_content_sha256")
    if expected is None:
        return None
    actual = _git(ctx).get("content_sha256")
    if actual == expected:
        return None
    return Rejection(
        "git_content_mismatch",
        "the worktree's file contents changed since they were read (or were not read)",
        {"expected": expected, "actual": actual},
    )


VIOLATIONS_SHOWN = 100
"""At most this many violating paths in a ``scope_violation`` refusal's details (``count`` says how many)."""


@GUARDS.register("scopes_respected")
def scopes_respected(ctx: Context) -> Rejection | None:
    """What the lane changed since its base (``observations["audit"]``, read by
    :func:`runner.git.audit.audit` in the same moment as the git facts) lies inside its owned scopes
    and outside its locked ones. A violation passes only on an operator's decision:
    ``accept_violation`` with a ``violation_reason`` (recorded with the lane by ``record_release``).
    Without an audit it refuses: a release is never judged on changes nobody read."""
    found = ctx.observations.get("audit")
    if not isinstance(found, Mapping):
        return Rejection("scope_violation", "the lane's changes were not audited", {"count": None, "violations": []})
    counts = found.get("counts")
    listed = list(found.get("violations") or ())
    count = int(counts.get("violations") or 0) if isinstance(counts, Mapping) else len(listed)
    if count == 0 and not listed and found.get("clean") is True:
        return None
    if ctx.params.get("accept_violation") is True and ctx.params.get("violation_reason"):
        return None
    shown = listed[:VIOLATIONS_SHOWN]
    first = shown[0] if shown else {}
    return Rejection(
        "scope_violation",
        f"{count} change(s) since the base commit lie outside the lane's owned scopes or inside its locked "
        f"ones (first: {first.get('path')!r}, {first.get('scope')}); release with accept_violation and a "
        "reason to accept them",
        {
            "count": count,
            "violations": shown,
            "truncated": count > len(shown),
            "head": found.get("head"),
            "base_commit": found.get("base_commit"),
            "owned_scopes": list(found.get("owned_scopes") or ()),
            "locked_scopes": list(found.get("locked_scopes") or ()),
        },
    )


@GUARDS.register("scopes_disjoint")
def scopes_disjoint(ctx: Context) -> Rejection | None:
    """The lane's owned scopes do not overlap its own locked scopes."""
    pairs = scopes.conflicts(ctx.params.get("owned_scopes") or (), ctx.params.get("locked_scopes") or ())
    if not pairs:
        return None
    return Rejection(
        "scope_overlap",
        f"owned and locked scopes overlap: {pairs[0][0]} / {pairs[0][1]}",
        {"pairs": [list(p) for p in pairs]},
    )


@GUARDS.register("scopes_resolved")
def scopes_resolved(ctx: Context) -> Rejection | None:
    """No owned or locked scope goes through a symlink (on disk in the worktree, or tracked at HEAD).

    Scopes are judged as literal paths; through a link ``lib -> src`` a lane owning ``lib`` would edit
    ``src``, which the overlap check never compared. Refused rather than resolved: a resolved path
    would still change under the lane whenever the link does.
    """
    links = list(ctx.observations.get("scope_links") or ())
    if not links:
        return None
    first = links[0]
    return Rejection(
        "scope_symlink",
        f"the scope {first.get('scope')!r} goes through the symlink {first.get('link')!r} "
        f"(-> {first.get('target')!r}); name the real path instead",
        {"links": links},
    )


@GUARDS.register("lane_conflicts")
def lane_conflicts(ctx: Context) -> Rejection | None:
    """No live lane of the same repository shares the worktree or branch, or overlaps the scopes.

    Owned against owned, and owned against locked in both directions: a new lane may not own what
    another locks, nor lock what another owns.

    The store's claim index (what ``record_writer_lane`` claims) names the candidates in index probes,
    O(own scopes x depth): the lanes whose worktree is this one, inside it or around it, whose branch
    is this one, or whose claims overlap these scopes. Only those lanes are read, in id order, and
    judged by :func:`lane_rejection`; no other lane could be refused, so the verdict is the one a check
    of every live lane would give, without decoding every lane inside the write transaction.
    """
    facts = _git(ctx)
    owned = tuple(ctx.params.get("owned_scopes") or ())
    locked = tuple(ctx.params.get("locked_scopes") or ())
    for lane in lane_candidates(ctx.view, facts, owned, locked, exclude=ctx.instance.id):
        refused = lane_rejection(lane, facts, owned, locked)
        if refused is not None:
            return refused
    return None


def lane_candidates(
    view: View, facts: Mapping[str, Any], owned: Iterable[str], locked: Iterable[str], exclude: str | None = None
) -> list[Instance]:
    """The live lanes (by id) that the claim index says may conflict with a lane of these git facts
    and scopes: a superset of those :func:`lane_rejection` refuses, found without reading the others."""
    realpath, common_dir, branch = facts.get("realpath"), facts.get("common_dir"), facts.get("branch")
    ids: set[str] = set()
    if isinstance(realpath, str) and scopes.worktree_scope(realpath):
        where = [scopes.worktree_scope(realpath)]
        ids.update(
            c.instance_id for c in view.overlapping_claims(scopes.FILESYSTEM, where, [scopes.WORKTREE], LANE_STATES)
        )
    if isinstance(common_dir, str):
        if isinstance(branch, str):
            found = view.overlapping_claims(common_dir, [branch], [scopes.BRANCH], LANE_STATES)
            ids.update(c.instance_id for c in found if c.scope == branch)
        ids.update(scope_conflicting(view, common_dir, owned, locked))
    ids.discard(exclude or "")
    lanes = []
    for lane_id in sorted(ids):
        lane = view.get(lane_id)
        if lane is not None and lane.machine == "writer" and lane.state in LANE_STATES:
            lanes.append(lane)
    return lanes


def scope_conflicting(view: View, space: str | None, owned: Iterable[str], locked: Iterable[str]) -> set[str]:
    """The ids of live lanes (in ``space``, or any) that own a scope overlapping ``owned`` or ``locked``,
    or lock one overlapping ``owned``: one probe of the claim index for both kinds."""
    owned = tuple(owned)
    found = view.overlapping_claims(space, (*owned, *locked), [scopes.OWNED, scopes.LOCKED], LANE_STATES)
    ids = {c.instance_id for c in found if c.kind == scopes.OWNED}
    their_locks = [c for c in found if c.kind == scopes.LOCKED and c.instance_id not in ids]
    if their_locks:  # locks may overlap locks: only those overlapping an owned scope count
        hit = {theirs for _, theirs in scopes.conflicts(owned, {c.scope for c in their_locks})}
        ids.update(c.instance_id for c in their_locks if c.scope in hit)
    return ids


def lane_rejection(
    lane: Instance, facts: Mapping[str, Any], owned: Iterable[str], locked: Iterable[str]
) -> Rejection | None:
    """Why a new lane with these git facts and scopes may not start beside the live ``lane``, or None."""
    owned, locked = tuple(owned), tuple(locked)
    realpath = facts.get("realpath")
    data = lane.data
    who = {"lane": lane.id, "name": data.get("name"), "state": lane.state}
    theirs = data.get("cwd")
    # Invariant: no live lane's worktree lies inside another's, in either direction and whatever
    # the repository: the outer lane's agent could edit every file of the inner one.
    if theirs != realpath and (inside(realpath, theirs) or inside(theirs, realpath)):
        where = "inside" if inside(realpath, theirs) else "contains"
        return Rejection(
            "worktree_nested",
            f"this worktree {where} the worktree of lane {data.get('name')!r} ({theirs})",
            {**who, "worktree": realpath, "their_worktree": theirs},
        )
    if data.get("common_dir") != facts.get("common_dir"):
        return None
    if data.get("cwd") == facts.get("realpath"):
        return Rejection("worktree_taken", f"lane {data.get('name')!r} already works in this worktree", who)
    if data.get("branch") == facts.get("branch"):
        return Rejection("branch_taken", f"lane {data.get('name')!r} already works on {data.get('branch')!r}", who)
    for code, mine, their_scopes, what in (
        ("scope_overlap", owned, data.get("owned_scopes") or (), "owns"),
        ("scope_locked", owned, data.get("locked_scopes") or (), "locks"),
        ("scope_locked", locked, data.get("owned_scopes") or (), "owns"),
    ):
        pairs = scopes.conflicts(mine, their_scopes)
        if pairs:
            return Rejection(
                code,
                f"lane {data.get('name')!r} {what} {pairs[0][1]}, which overlaps {pairs[0][0]}",
                {**who, "pairs": [list(p) for p in pairs]},
            )
    return None


def inside(path: object, root: object) -> bool:
    """``path`` is ``root`` or lies under it (both absolute and resolved): ``/r/wt/src`` is inside ``/r/wt``,
    ``/r/wtx`` is not."""
    if not isinstance(path, str) or not isinstance(root, str) or not root:
        return False
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


@GUARDS.register("worktree_free")
def worktree_free(ctx: Context) -> Rejection | None:
    """No agent already runs in the worktree or anywhere under it: no live lease there, and none observed
    by the host."""
    realpath = _git(ctx).get("realpath")
    for machine in LEASE_MACHINES:
        for lease in ctx.view.find(machine, LIVE_LEASE_STATES):
            if inside(lease.data.get("cwd"), realpath) and lease.id != ctx.instance.id:
                return Rejection(
                    "worktree_busy",
                    f"lease {lease.id} ({lease.data.get('name')!r}) runs in {realpath}",
                    {"lease": lease.id},
                )
    observed = list(ctx.observations.get("worktree_agents") or ())
    if observed:
        agent = observed[0]
        return Rejection(
            "worktree_busy",
            f"agent {agent.get('name')!r} in pane {agent.get('pane_id')} runs in {realpath}",
            {"pane_id": agent.get("pane_id"), "name": agent.get("name")},
        )
    return None
