"""``flow.pass`` and ``flow.fail``: steps that only shape the flow (as the Amazon States Language's)."""

from __future__ import annotations

from typing import Any

from runner.plans.ops.base import operation
from runner.service.steps import OpContext, Outputs, StepFailed


@operation("flow.pass")
async def flow_pass(ctx: OpContext, args: dict[str, Any]) -> Outputs:
    values = args.get("values")
    return Outputs(dict(values) if isinstance(values, dict) else {})


@operation("flow.fail")
async def flow_fail(ctx: OpContext, args: dict[str, Any]) -> Outputs:
    raise StepFailed(str(args.get("message") or f"step {ctx.step_id} failed on purpose"), code=str(args["code"]))
