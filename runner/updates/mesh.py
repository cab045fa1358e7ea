"""Updates of mesh wake-ups: what a wake records; never a message, never the token."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from runner.agentfacts import IDENTITY
from runner.context import Context, Update, format_time
from runner.updates import UPDATES


def _observed(ctx: Context) -> dict[str, Any]:
    observed = ctx.observations.get("agent")
    return dict(observed) if isinstance(observed, dict) else {}


@UPDATES.register("record_wake")
def record_wake(ctx: Context) -> Update:
    """Bind the wake to the agent's lease, its identity and the cursor seen before the prompt."""
    lease = ctx.view.get(str(ctx.params["target"]))
    assert lease is not None  # target_leased passed in this same transaction
    window = float(ctx.params.get("window_seconds") or 600)
    return Update(
        data={
            "agent_id": ctx.params["agent_id"],
            "controller_id": ctx.params["controller_id"],
            "lease_id": ctx.params["lease_id"],
            "generation": ctx.params["generation"],
            "target": lease.id,
            "target_machine": lease.machine,
            **{k: lease.data.get(k) for k in IDENTITY},
            "host": lease.data.get("host"),
            "terminal_id": lease.data.get("terminal_id"),
            "before_seq": _observed(ctx)["seq"],
            "before_revision": _observed(ctx).get("revision"),
            "messages": ctx.params["messages"],
            "upto_seq": ctx.params["upto_seq"],
            "prompt_sha256": ctx.params["prompt_sha256"],
            "created_at": format_time(ctx.now),
            "window_ends_at": format_time(ctx.now + timedelta(seconds=window)),
        }
    )


@UPDATES.register("record_wake_used")
def record_wake_used(ctx: Context) -> Update:
    return Update(data={"used_at": format_time(ctx.now)})


@UPDATES.register("record_wake_expired")
def record_wake_expired(ctx: Context) -> Update:
    return Update(data={"expired_at": format_time(ctx.now)})
