"""Plans: a recipe and its inputs, executed durably, step by step, resumable after any crash.

The component that submits and runs them is :class:`runner.service.plans.Plans`; this package holds
what it is handed: the step operations (:mod:`runner.plans.ops`) and the credential keepers
(:mod:`runner.plans.keeper`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runner.service.plans import plan_instance_id

if TYPE_CHECKING:
    from runner.context import Instance
    from runner.store.abc import Store


def get_plan(store: Store, plan_id: str) -> Instance:
    """The plan instance, or ``plan_unknown`` (for ``draw --plan``; others use ``Plans.plan``)."""
    from runner.errors import NotFoundError

    found = store.get(plan_instance_id(plan_id))
    if found is None:
        raise NotFoundError(f"no plan {plan_id!r}", code="plan_unknown", plan=plan_id)
    return found


__all__ = ["get_plan", "plan_instance_id"]
