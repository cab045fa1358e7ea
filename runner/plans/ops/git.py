"""``git.preflight``: a worktree's git facts, read."""

from __future__ import annotations

from typing import Any

from runner.plans.ops.base import operation
from runner.service.steps import OpContext, Outputs


@operation("git.preflight")
async def git_preflight(ctx: OpContext, args: dict[str, Any]) -> Outputs:
    facts = ctx.service.writers.preflight(str(args["worktree"]))
    keys = ("branch", "head", "status_sha256", "linked", "default_branch", "common_dir")
    return Outputs({k: facts[k] for k in keys})
