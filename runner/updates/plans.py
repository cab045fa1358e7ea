"""Updates of plans: what was submitted, who runs it, each step's record, how it ended.

A plan's step records are parts of the plan instance (``steps/STEP``, and ``private/STEP`` for agent
output text), not entries of its data: a step's write touches that step only, and the plan's data
stays a small header (recipe, controller, runner, pause and failure) whatever the number of steps.
A plan written before that layout keeps ``steps`` and ``private`` in its data; the first update that
touches its steps (a run's ``start``, a ``retry``, a ``decide``) moves them to parts in the same
transaction (:func:`legacy_parts`), and readers merge both layouts until then
(:func:`runner.service.plans.plan_view`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from runner.context import Context, Update, format_time
from runner.updates import UPDATES

STEP = "steps/"
PRIVATE = "private/"


def legacy_parts(ctx: Context) -> tuple[dict[str, Any], dict[str, Mapping[str, Any]]]:
    """For a plan still in the old layout (its steps in its data): the data that empties those fields
    and the parts that hold them instead. Nothing for a plan already in parts."""
    steps, private = ctx.data.get("steps"), ctx.data.get("private")
    if steps is None and private is None:
        return {}, {}
    parts: dict[str, Mapping[str, Any]] = {STEP + k: v for k, v in (steps or {}).items() if isinstance(v, Mapping)}
    parts.update({PRIVATE + k: v for k, v in (private or {}).items() if isinstance(v, Mapping)})
    return {"steps": None, "private": None}, parts


def _current(ctx: Context, parts: Mapping[str, Mapping[str, Any]], step_id: str) -> dict[str, Any] | None:
    """A step's record as this transition sees it: written by an earlier update of it, or stored."""
    key = STEP + step_id
    if key in parts:
        return dict(parts[key])
    return ctx.view.part(ctx.instance.id, key)


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
            "budget": ctx.params.get("budget"),
            # Inputs may hold prompt text: they travel as a secret and the field is secret, so the event
            # log never shows them.
            "inputs": json.loads(ctx.secrets.get("inputs", "{}")),
            "submitted_at": format_time(ctx.now),
        }
    )


@UPDATES.register("record_runner")
def record_runner(ctx: Context) -> Update:
    """Record the runner now executing the plan (and move an old-layout plan's steps to parts)."""
    data, parts = legacy_parts(ctx)
    return Update(
        data={**data, "runner": _leased(ctx, ctx.params["runner"]), "paused_reason": None, "waiting_on": None},
        parts=parts,
    )


def _leased(ctx: Context, runner: Mapping[str, Any]) -> dict[str, Any]:
    """The runner with its lease: ``expires_at`` its TTL from now, by the store's clock."""
    ttl = ctx.params.get("runner_ttl", runner.get("ttl"))
    held = dict(runner)
    if isinstance(ttl, int | float) and not isinstance(ttl, bool) and ttl > 0:
        held["ttl"] = ttl
        held["expires_at"] = format_time(ctx.now + timedelta(seconds=ttl))
    return held


def _released(ctx: Context) -> dict[str, Any]:
    """The recorded runner with its lease ended now (it paused, or the plan ended): anyone may take it."""
    runner = ctx.instance.data.get("runner")
    if not isinstance(runner, Mapping):
        return {}
    return {"runner": {**runner, "expires_at": format_time(ctx.now)}}


@UPDATES.register("renew_runner")
def renew_runner(ctx: Context) -> Update:
    """Move the runner's lease expiry forward by its TTL (the runner is the recorded one: its guard)."""
    return Update(data={"runner": _leased(ctx, ctx.instance.data.get("runner") or ctx.params["runner"])})


@UPDATES.register("record_step")
def record_step(ctx: Context) -> Update:
    """Record step records (running, succeeded, failed, caught, skipped, waiting), each as its own part.

    ``params["records"]`` lists ``{"step_id", "record"}`` in order: the outcome of one step and the start
    of the next travel in one transition, so one commit settles one step and opens the next (after a
    run of pure steps, their outcomes all come first). The single
    form ``params["step_id"]`` and ``params["record"]`` records one. Agent output text comes as the
    secret ``privates`` (``{step_id: object}``; for the single form, ``private``: that step's object)
    and goes to the secret ``private`` parts only, never the event log. No records: nothing is written
    (``finish``, ``fail`` and ``pause`` run this update to carry the last outcome)."""
    params = ctx.params
    if "records" in params:
        records = [(str(r["step_id"]), dict(r["record"])) for r in params["records"]]
        privates = json.loads(ctx.secrets["privates"]) if ctx.secrets.get("privates") else {}
    elif "step_id" in params:
        records = [(str(params["step_id"]), dict(params["record"]))]
        privates = {records[0][0]: json.loads(ctx.secrets["private"])} if ctx.secrets.get("private") else {}
    else:
        records, privates = [], {}
    data, parts = legacy_parts(ctx)
    at = format_time(ctx.now)
    for step_id, record in records:
        record["at"] = at
        parts[STEP + step_id] = record
    for step_id, private in privates.items():
        parts[PRIVATE + str(step_id)] = dict(private)
    return Update(data=data, parts=parts)


@UPDATES.register("record_pause")
def record_pause(ctx: Context) -> Update:
    """Record why the plan waits for a person, and what it waits on (a blocked agent), if anything."""
    return Update(
        data={"paused_reason": ctx.params["reason"], "waiting_on": ctx.params.get("waiting_on"), **_released(ctx)}
    )


@UPDATES.register("record_decision")
def record_decision(ctx: Context) -> Update:
    """Record a person's decision on a waiting step: approve or reject, why, who, when."""
    data, parts = legacy_parts(ctx)
    step_id = ctx.params["step_id"]
    record = _current(ctx, parts, step_id) or {}
    record["decision"] = {
        "approve": bool(ctx.params["approve"]),
        "reason": ctx.params["reason"],
        "actor": ctx.actor,
        "at": format_time(ctx.now),
    }
    parts[STEP + step_id] = record
    return Update(data=data, parts=parts)


@UPDATES.register("record_finish")
def record_finish(ctx: Context) -> Update:
    """Record the end: when, and the failure (if any)."""
    return Update(data={"finished_at": format_time(ctx.now), "failure": ctx.params.get("failure"), **_released(ctx)})


@UPDATES.register("record_retry")
def record_retry(ctx: Context) -> Update:
    """Reset the failed step and every later one (``params["reset"]``, in recipe order) to ``pending``
    at its next attempt; keep the earlier steps' records; record the redrive and clear the failure."""
    data, parts = legacy_parts(ctx)
    for step_id in ctx.params["reset"]:
        old = _current(ctx, parts, step_id)
        if old is None:
            continue
        parts[STEP + step_id] = {
            "state": "pending",
            "attempt": int(old.get("attempt") or 0) + 1,
            "at": format_time(ctx.now),
        }
    retries = [
        *list(ctx.data.get("retries") or []),
        {
            "at": format_time(ctx.now),
            "from_step": ctx.params["from_step"],
            "failure": ctx.data.get("failure"),
        },
    ]
    return Update(data={**data, "retries": retries, "failure": None, "finished_at": None}, parts=parts)
