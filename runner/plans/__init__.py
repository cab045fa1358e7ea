"""Plans: a recipe and its inputs, executed durably, step by step, resumable after any crash.

The component that submits and runs them is :class:`runner.service.plans.Plans` (``service.plans``);
this package holds what it is handed: the step operations (:mod:`runner.plans.ops`) and the
credential keepers (:mod:`runner.plans.keeper`).
"""

from __future__ import annotations

from runner.service.plan_state import plan_instance_id

__all__ = ["plan_instance_id"]
