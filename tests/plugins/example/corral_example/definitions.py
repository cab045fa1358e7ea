"""A guard, an update and an effect: pure functions of the transition's context, found by name."""

from __future__ import annotations

import re

from runner.context import Context, EffectResult, Rejection, Update

TICKET = re.compile(r"^[A-Z]{2,10}-[0-9]{1,6}$")


def ticket_guard(ctx: Context, prefix: str = "OPS") -> Rejection | None:
    """Pass only when the request names a ticket of the given project (e.g. OPS-12)."""
    ticket = ctx.params.get("ticket")
    if not isinstance(ticket, str) or not TICKET.match(ticket) or not ticket.startswith(prefix + "-"):
        return Rejection("ticket_missing", f"name a {prefix}-N ticket", {"ticket": ticket})
    return None


def stamp_update(ctx: Context) -> Update:
    """Record the ticket the transition was made under."""
    return Update(data={"ticket": ctx.params["ticket"]})


def note_effect(ctx: Context, outcome: str = "success") -> EffectResult:
    """Act outside the store (here: say so); the outcome picks the destination state."""
    return EffectResult(outcome, data={"note": f"noted {ctx.params.get('ticket')}"})
