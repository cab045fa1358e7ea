"""Guards of plans: one runner at a time, and only the runner that took the plan records its steps."""

from __future__ import annotations

from runner import lockholder
from runner.context import Context, Rejection, parse_time
from runner.guards import GUARDS


@GUARDS.register("plan_runner_free")
def plan_runner_free(ctx: Context) -> Rejection | None:
    """No other live runner holds the plan: the recorded runner's lease expired (by the store's clock,
    whatever machine it ran on), or it is gone (on this machine: its process is not running)."""
    recorded = ctx.instance.data.get("runner")
    if not recorded or lockholder.same(recorded, ctx.params.get("runner")):
        return None
    seen = ctx.observations.get("runner_status")
    if seen == "stale":
        return None
    expires = recorded.get("expires_at")
    if isinstance(expires, str) and parse_time(expires) <= ctx.now:
        return None
    until = f"; its lease expires at {expires}" if isinstance(expires, str) else ""
    return Rejection(
        "plan_busy",
        f"plan {ctx.instance.data.get('plan_id')!r} is being run by pid {recorded.get('pid')} on "
        f"{recorded.get('host')} ({seen}{until})",
        {"runner": dict(recorded), "runner_status": seen, **({"expires_at": expires} if until else {})},
    )


@GUARDS.register("plan_runner")
def plan_runner(ctx: Context) -> Rejection | None:
    """The caller is the runner that holds the plan."""
    if lockholder.same(ctx.instance.data.get("runner"), ctx.params.get("runner")):
        return None
    return Rejection(
        "plan_runner_changed", "another runner took this plan over; stop", {"runner": ctx.instance.data.get("runner")}
    )
