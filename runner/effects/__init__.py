"""The effect registry: named actions a transition performs outside the store.

An effect is ``fn(ctx: Context, **with_args) -> EffectResult``. It runs after the transition's intent
is committed (the instance sits in an intermediate state) and before the outcome is committed, so a
crash in between leaves evidence for ``reconcile`` instead of a blind retry. An effect that raises is
treated as ``ambiguous``: it may or may not have acted. corral's own effects start and close agents
and deliver prompts (:mod:`runner.effects.agents`).
"""

from __future__ import annotations

from collections.abc import Callable

from runner.context import EffectResult
from runner.registry import Registry

EffectFn = Callable[..., EffectResult]

EFFECTS: Registry[EffectFn] = Registry("effect", "corral.effects")

from runner.effects import agents as _agents  # noqa: E402, F401  (registers the built-ins; needs EFFECTS)

__all__ = ["EFFECTS", "EffectFn"]
