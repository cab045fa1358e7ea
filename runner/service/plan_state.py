"""A plan instance as the store holds it and readers see it: its id, its view (the header with its
step records), the summary every surface shows, and its runner's lease."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from runner import lockstatus
from runner.context import Instance, parse_time
from runner.updates.plans import PRIVATE, STEP

PLAN_RUNNER_TTL = 60.0
"""Seconds a plan runner's lease lasts unless renewed; it renews every third of it. A runner
on another machine takes a plan whose runner stopped renewing once this much has passed."""


def plan_instance_id(plan_id: str) -> str:
    return f"plan/{plan_id}"


def plan_summary(plan: Instance, order: Sequence[str] = ()) -> dict[str, Any]:
    """A plan as every surface shows it (``corral plans show --json``, the MCP and HTTP plan tools).

    ``steps`` is a list in run order: each of ``order`` (its recipe's step ids) with its record, or
    ``{"state": "pending"}`` if it has not run, and then any recorded step ``order`` does not name;
    each entry carries its ``id``."""
    data = plan.data
    records = data.get("steps") or {}
    steps = [{**(records.get(step) or {"state": "pending"}), "id": step} for step in order]
    named = set(order)  # (a set: a plan of 10,000 steps must not cost 10,000 squared comparisons)
    steps += [{**record, "id": step} for step, record in records.items() if step not in named]
    return {
        "plan": data.get("plan_id"),
        "recipe": data.get("recipe"),
        "state": plan.state,
        "controller": data.get("controller_id"),
        "paused_reason": data.get("paused_reason"),
        "waiting_on": data.get("waiting_on"),
        "failure": data.get("failure"),
        "steps": steps,
    }


def runner_lease(plan: Instance, now: datetime) -> dict[str, Any]:
    """The runner's lease on a plan as ``plans show`` reports it: ``status`` ``active`` (held:
    its lease has not expired by the store's clock, and its process is not known gone), ``expired``
    (it stopped renewing, paused or ended, or its process is gone from this machine: any runner may
    take the plan) or ``absent`` (no runner ever took it); its ``host``, ``pid`` and ``expires_at``.
    The record holds no credential, and nothing else of it is shown."""
    recorded = plan.data.get("runner")
    if not isinstance(recorded, Mapping) or not recorded:
        return {"status": "absent", "host": None, "pid": None, "expires_at": None}
    expires = recorded.get("expires_at")
    expired = isinstance(expires, str) and parse_time(expires) <= now
    gone = lockstatus.status(recorded) == "stale"
    return {
        "status": "expired" if expired or gone else "active",
        "host": recorded.get("host"),
        "pid": recorded.get("pid"),
        "expires_at": expires if isinstance(expires, str) else None,
    }


def plan_view(header: Instance, parts: Mapping[str, Mapping[str, Any]]) -> Instance:
    """The plan as readers know it: its data with ``steps`` and ``private`` filled in from its parts.

    The store keeps a plan's step records as parts (``steps/STEP``, ``private/STEP``) beside a small
    header; a plan written before that layout has them in its data, and a part (written later)
    wins over such an entry."""
    steps = dict(header.data.get("steps") or {})
    private = dict(header.data.get("private") or {})
    for key, value in parts.items():
        if key.startswith(STEP):
            steps[key[len(STEP) :]] = dict(value)
        elif key.startswith(PRIVATE):
            private[key[len(PRIVATE) :]] = dict(value)
    data = {**header.data, "steps": steps}
    if private:
        data["private"] = private
    else:
        data.pop("private", None)
    return replace(header, data=data)
