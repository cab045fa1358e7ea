"""Updates of adopted leases: what an adoption records (the agent as observed) and its release."""

from __future__ import annotations

from typing import Any

from runner.agentfacts import IDENTITY
from runner.context import Context, Update, format_time
from runner.updates import UPDATES


@UPDATES.register("record_adoption")
def record_adoption(ctx: Context) -> Update:
    """Record who holds the pane and exactly which agent it held when adopted (identity, host lifetime,
    cursor): later closes are judged against this record, never against what a caller names then."""
    observed: dict[str, Any] = dict(ctx.observations.get("agent") or {})
    return Update(
        data={
            "controller_id": ctx.params["controller_id"],
            "lease_id": ctx.instance.id.split("/", 1)[1],
            "host": ctx.params["host"],
            **{k: observed.get(k) for k in IDENTITY},
            "terminal_id": observed.get("terminal_id"),
            "adopted_seq": observed.get("seq"),
            "adopted_at": format_time(ctx.now),
        }
    )


@UPDATES.register("record_adoption_release")
def record_adoption_release(ctx: Context) -> Update:
    """Record when the adoption ended; the pane was left as it was."""
    return Update(data={"released_at": format_time(ctx.now)})
