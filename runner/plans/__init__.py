"""Plans: a recipe and its inputs, executed durably, step by step, resumable after any crash.

This module stays light (no anyio, no operations): ``plans show`` and ``draw --plan`` only read a plan.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runner.errors import NotFoundError

if TYPE_CHECKING:
    from runner.context import Instance
    from runner.store.abc import Store


def plan_instance_id(plan_id: str) -> str:
    return f"plan/{plan_id}"


def get_plan(store: Store, plan_id: str) -> Instance:
    """The plan instance, or ``plan_unknown``."""
    found = store.get(plan_instance_id(plan_id))
    if found is None:
        raise NotFoundError(f"no plan {plan_id!r}", code="plan_unknown", plan=plan_id)
    return found
