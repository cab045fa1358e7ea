"""``wait.any``: the first of several leased agents to settle after its cursor."""

from __future__ import annotations

from typing import Any

from runner.plans.ops.base import operation, timeout
from runner.service.steps import OpContext, Outputs


@operation("wait.any")
async def wait_any(ctx: OpContext, args: dict[str, Any]) -> Outputs:
    from runner.service import WaitAnyInput

    targets = tuple(
        (str(t["target"]), t.get("after_seq")) if isinstance(t, dict) else (str(t), None) for t in args["targets"]
    )
    result = await ctx.service.waits.wait_any(
        WaitAnyInput(ctx.controller_id, ctx.credential(), targets, timeout(ctx, args))
    )
    return Outputs({"target": result.target, "status": result.observation.status, "seq": result.observation.seq})
