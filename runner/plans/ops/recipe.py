"""``recipe.call``: another recipe run as a nested plan, through the plans component."""

from __future__ import annotations

from typing import Any

from runner.plans.ops.base import operation
from runner.service.steps import OpContext, Outputs, StepFailed


@operation("recipe.call")
async def recipe_call(ctx: OpContext, args: dict[str, Any]) -> Outputs:
    from runner.service.inputs.plans import PlanRunInput, PlanSubmitInput

    child_id = f"{ctx.plan_id}.{ctx.step_id}"
    document = {
        "plan": child_id,
        "recipe": str(args["recipe"]),
        "controller": ctx.controller_id,
        "inputs": dict(args.get("inputs") or {}),
    }
    ctx.plans.submit(PlanSubmitInput(document, parent=f"{ctx.plan_id}/{ctx.step_id}"))
    final = await ctx.plans.run(PlanRunInput(child_id), ctx.progress)
    steps = {sid: rec.get("outputs", {}) for sid, rec in (final.data.get("steps") or {}).items()}
    if final.state != "succeeded":
        failure = final.data.get("failure") or {}
        raise StepFailed(
            f"the called plan {child_id} ended {final.state}: {failure.get('message')}",
            code=str(failure.get("code") or "plan_failed"),
            plan=child_id,
        )
    return Outputs({"plan": child_id, "state": final.state, "steps": steps})
