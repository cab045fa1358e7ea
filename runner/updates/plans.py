"""Updates of plans: what was submitted, who runs it, each step's record, how it ended."""

from __future__ import annotations

import json
from typing import Any

from runner.context import Context, Update, format_time
from runner.updates import UPDATES


@UPDATES.register("record_plan")
def record_plan(ctx: Context) -> Update:
    """Record the plan as submitted: recipe, its resolved digest, the plan's digest, its inputs."""
    return Update(
        data={
            "plan_id": ctx.params["plan_id"],
            "recipe": ctx.params["recipe"],
            "recipe_version": ctx.params["recipe_version"],
            "recipe_sha256": ctx.params["recipe_sha256"],
            "content_sha256": ctx.params["content_sha256"],
            "controller_id": ctx.params["controller_id"],
            "parent": ctx.params.get("parent"),
            # Inputs may hold prompt text: they travel as a secret and the field is secret, so the event
            # log never shows them.
            "inputs": json.loads(ctx.secrets.get("inputs", "{}")),
            "steps": {},
            "submitted_at": format_time(ctx.now),
        }
    )


@UPDATES.register("record_runner")
def record_runner(ctx: Context) -> Update:
    """Record the runner now executing the plan."""
    return Update(data={"runner": dict(ctx.params["runner"]), "paused_reason": None, "waiting_on": None})


@UPDATES.register("record_step")
def record_step(ctx: Context) -> Update:
    """Record one step's state (running, succeeded, failed, skipped), attempt, outputs and error."""
    steps: dict[str, Any] = dict(ctx.data.get("steps") or {})
    record = dict(ctx.params["record"])
    record["at"] = format_time(ctx.now)
    steps[ctx.params["step_id"]] = record
    data: dict[str, Any] = {"steps": steps}
    if ctx.secrets.get("private"):
        # Agent output text, kept for later steps' references but never logged (a secret field).
        private = dict(ctx.data.get("private") or {})
        private[ctx.params["step_id"]] = json.loads(ctx.secrets["private"])
        data["private"] = private
    return Update(data=data)


@UPDATES.register("record_pause")
def record_pause(ctx: Context) -> Update:
    """Record why the plan waits for a person, and what it waits on (a blocked agent), if anything."""
    return Update(data={"paused_reason": ctx.params["reason"], "waiting_on": ctx.params.get("waiting_on")})


@UPDATES.register("record_decision")
def record_decision(ctx: Context) -> Update:
    """Record a person's decision on a waiting step: approve or reject, why, who, when."""
    steps: dict[str, Any] = dict(ctx.data.get("steps") or {})
    step_id = ctx.params["step_id"]
    record = dict(steps[step_id])
    record["decision"] = {
        "approve": bool(ctx.params["approve"]),
        "reason": ctx.params["reason"],
        "actor": ctx.actor,
        "at": format_time(ctx.now),
    }
    steps[step_id] = record
    return Update(data={"steps": steps})


@UPDATES.register("record_finish")
def record_finish(ctx: Context) -> Update:
    """Record the end: when, and the failure (if any)."""
    return Update(data={"finished_at": format_time(ctx.now), "failure": ctx.params.get("failure")})


@UPDATES.register("record_retry")
def record_retry(ctx: Context) -> Update:
    """Reset the failed step and every later one (``params["reset"]``, in recipe order) to ``pending``
    at its next attempt; keep the earlier steps' records; record the redrive and clear the failure."""
    steps: dict[str, Any] = dict(ctx.data.get("steps") or {})
    for step_id in ctx.params["reset"]:
        old = steps.get(step_id)
        if old is None:
            continue
        steps[step_id] = {"state": "pending", "attempt": int(old.get("attempt") or 0) + 1, "at": format_time(ctx.now)}
    retries = [
        *list(ctx.data.get("retries") or []),
        {
            "at": format_time(ctx.now),
            "from_step": ctx.params["from_step"],
            "failure": ctx.data.get("failure"),
        },
    ]
    return Update(data={"steps": steps, "retries": retries, "failure": None, "finished_at": None})
