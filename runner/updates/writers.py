"""Updates of writer lanes: the git facts and scopes a lane starts with, its checkpoint, its validation."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runner import scopes
from runner.context import Context, Update, format_time
from runner.updates import UPDATES


def _git(ctx: Context) -> Mapping[str, Any]:
    facts = ctx.observations.get("git")
    return facts if isinstance(facts, Mapping) else {}


@UPDATES.register("record_writer_lane")
def record_writer_lane(ctx: Context) -> Update:
    """Record the lane's purpose, authority, git facts as re-read, and its normalized scopes; claim its
    scopes, branch and worktree in the store's claim index (the ``lane_conflicts`` guard looks there).

    Scopes are recorded here only: no later transition changes them, so the claims hold for the lane's
    whole life (until a terminal state clears them)."""
    facts = _git(ctx)
    owned = list(ctx.params.get("owned_scopes") or ())
    locked = list(ctx.params.get("locked_scopes") or ())
    return Update(
        claims=scopes.lane_claims(facts.get("common_dir"), facts.get("branch"), facts.get("realpath"), owned, locked),
        data={
            "purpose": ctx.params.get("purpose"),
            "ticket_ref": ctx.params.get("ticket_ref"),
            "authority_ref": ctx.params.get("authority_ref"),
            "authority_sha256": ctx.params.get("authority_sha256"),
            "worktree": ctx.params.get("worktree"),
            "cwd": facts.get("realpath"),
            "common_dir": facts.get("common_dir"),
            "branch": facts.get("branch"),
            "base_commit": ctx.params.get("base_commit"),
            "start_head": facts.get("head"),
            "start_status_sha256": facts.get("status_sha256"),
            "owned_scopes": owned,
            "locked_scopes": locked,
            "protected_branches": list(ctx.params.get("protected_branches") or ()),
        },
    )


@UPDATES.register("record_release")
def record_release(ctx: Context) -> Update:
    """Record the checkpoint, the HEAD and status digest git read at release, the scope audit's
    verdict, and an operator's acceptance of its violations (reason, actor, when, the paths)."""
    facts = _git(ctx)
    data: dict[str, Any] = {
        "checkpoint_ref": ctx.params["checkpoint_ref"],
        "checkpoint_sha256": ctx.params["checkpoint_sha256"],
        "release_head": facts.get("head"),
        "release_status_sha256": facts.get("status_sha256"),
    }
    found = ctx.observations.get("audit")
    if isinstance(found, Mapping):
        data["scope_audit"] = {
            "clean": found.get("clean"),
            "head": found.get("head"),
            "base_commit": found.get("base_commit"),
            "counts": dict(found.get("counts") or {}),
        }
        if not found.get("clean") and ctx.params.get("accept_violation") is True:
            violations = list(found.get("violations") or ())
            data["violation_acceptance"] = {
                "reason": ctx.params.get("violation_reason"),
                "actor": ctx.actor,
                "at": format_time(ctx.now),
                "count": (found.get("counts") or {}).get("violations"),
                "paths": [{k: v[k] for k in ("path", "old_path", "kind", "scope") if k in v} for v in violations],
            }
    return Update(data=data)


@UPDATES.register("record_verification")
def record_verification(ctx: Context) -> Update:
    """Record a validation result: per command exit status, duration and output digest."""
    return Update(data={"verification": dict(ctx.params["verification"]), "verified_at": format_time(ctx.now)})
