"""Guards of mesh wake-ups: whose authority covers a wake, one outstanding wake per agent,
the token's owner, and the wake window.

A wake is not asked with a fence token: the controller proved its credential when it enabled
wake-ups (``corral mesh wake enable``), and the grant it held then is recorded beside its lease (the
part :data:`WAKE_PART` of ``controller/<id>``). :func:`wake_authority` admits a wake only while that
lease is still that very grant (active, unexpired, the same lease id and generation) and wake-ups
are still enabled: once the lease moves on (resumed, taken over, released, expired) every wake it
covered is refused ``fence_stale``, at admission and again at the moment of the prompt (``recheck``).
"""

from __future__ import annotations

from runner import fence
from runner.context import Context, Rejection, parse_time
from runner.guards import GUARDS

WAKE_PART = "mesh_wake"
"""The key of the part of a controller lease that records its mesh wake-up grant."""
OPEN_WAKE_STATES = ("delivering", "outstanding")


@GUARDS.register("wake_authority")
def wake_authority(ctx: Context) -> Rejection | None:
    """The controller enabled wake-ups under the grant it holds now, and that grant is live."""
    controller_id = str(ctx.params.get("controller_id"))
    lease_id = fence.instance_id(controller_id)
    lease = ctx.view.get(lease_id)
    grant = ctx.view.part(lease_id, WAKE_PART)
    facts = {"controller_id": controller_id, "enabled_generation": ctx.params.get("generation")}
    if grant is None or not grant.get("enabled"):
        return Rejection("mesh_wake_disabled", f"controller {controller_id!r} has not enabled mesh wake-ups", facts)
    same = grant.get("lease_id") == ctx.params.get("lease_id") and grant.get("generation") == ctx.params.get(
        "generation"
    )
    if lease is None or not lease.exists or lease.state != "active" or not same:
        return Rejection(
            "fence_stale",
            f"the lease of controller {controller_id!r} is not the grant wake-ups were enabled under",
            {**facts, "current_generation": lease.data.get("generation") if lease else None},
        )
    if lease.data.get("lease_id") != grant.get("lease_id") or lease.data.get("generation") != grant.get("generation"):
        return Rejection(
            "fence_stale",
            f"the lease of controller {controller_id!r} moved on since wake-ups were enabled "
            f"(generation {grant.get('generation')} -> {lease.data.get('generation')}): enable them again",
            {**facts, "current_generation": lease.data.get("generation")},
        )
    if fence.is_expired(lease, ctx.now):
        return Rejection(
            "fence_stale",
            f"the lease of controller {controller_id!r} expired at {lease.data.get('expires_at')}",
            {**facts, "expires_at": lease.data.get("expires_at")},
        )
    return None


@GUARDS.register("no_open_wake")
def no_open_wake(ctx: Context) -> Rejection | None:
    """No other wake-up of this agent is outstanding (at most one at a time)."""
    agent_id = ctx.params.get("agent_id")
    for wake in ctx.view.find("wake", OPEN_WAKE_STATES):
        if wake.data.get("agent_id") == agent_id and wake.id != ctx.instance.id:
            return Rejection(
                "wake_outstanding",
                f"a wake-up of {agent_id!r} is {wake.state} until {wake.data.get('window_ends_at')}",
                {"agent_id": agent_id, "state": wake.state},
            )
    return None


@GUARDS.register("wake_owner")
def wake_owner(ctx: Context) -> Rejection | None:
    """The token is used by the agent it was handed to."""
    if ctx.params.get("agent_id") == ctx.instance.data.get("agent_id"):
        return None
    return Rejection("wake_token_unknown", "this wake token was handed to another agent", {})


@GUARDS.register("wake_window_over")
def wake_window_over(ctx: Context) -> Rejection | None:
    """The wake's window has passed by the store's clock (its token unused)."""
    ends = ctx.instance.data.get("window_ends_at")
    if ends is not None and parse_time(str(ends)) <= ctx.now:
        return None
    return Rejection("wake_window_open", f"the wake's window is open until {ends}", {"window_ends_at": ends})
