"""Guards of plans: one runner at a time, and only the runner that took the plan records its steps."""

from __future__ import annotations

from runner import lockstatus
from runner.context import Context, Rejection
from runner.guards import GUARDS


@GUARDS.register("plan_runner_free")
def plan_runner_free(ctx: Context) -> Rejection | None:
    """No other live runner holds the plan (a recorded runner that is gone may be replaced)."""
    recorded = ctx.instance.data.get("runner")
    if not recorded or lockstatus.same(recorded, ctx.params.get("runner")):
        return None
    seen = ctx.observations.get("runner_status")
    if seen == "stale":
        return None
    return Rejection(
        "plan_busy",
        f"plan {ctx.instance.data.get('plan_id')!r} is being run by pid {recorded.get('pid')} on "
        f"{recorded.get('host')} ({seen})",
        {"runner": dict(recorded), "runner_status": seen},
    )


@GUARDS.register("plan_runner")
def plan_runner(ctx: Context) -> Rejection | None:
    """The caller is the runner that holds the plan."""
    if lockstatus.same(ctx.instance.data.get("runner"), ctx.params.get("runner")):
        return None
    return Rejection(
        "plan_runner_changed", "another runner took this plan over; stop", {"runner": ctx.instance.data.get("runner")}
    )
