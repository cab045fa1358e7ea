"""A step operation: its catalogue entry, ``run`` and ``resume``, as one object."""

from __future__ import annotations

from typing import Any

from runner.definitions.operations import OperationSpec, Param
from runner.plans.ops import RUN, OpContext, Outputs, Resume


class Echo:
    """Give the text back, with the plan that ran it: safe to run again after a crash."""

    spec = OperationSpec(
        "example.echo",
        "Give the text back (an example plugin's step operation).",
        (Param("text", "string", True),),
        ("echoed", "plan"),
        safe_to_retry=True,
    )

    async def run(self, ctx: OpContext, args: dict[str, Any]) -> Outputs:
        return Outputs({"echoed": str(args["text"]), "plan": ctx.plan_id})

    def resume(self, ctx: OpContext, args: dict[str, Any]) -> Resume:
        return RUN  # nothing happened outside the store: run it again


ECHO = Echo()
