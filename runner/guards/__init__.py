"""The guard registry: named checks that must pass before a transition commits.

A guard is ``fn(ctx: Context, **with_args) -> Rejection | None``: a pure function of the context
(the instance, the request, fresh observations, the store's clock and a read view of the store
inside the serialized transaction). It returns None to pass, or a :class:`~runner.context.Rejection`
with a stable code. Guards never write and never perform I/O of their own.
"""

from __future__ import annotations

from collections.abc import Callable

from runner.context import Rejection
from runner.registry import Registry

GuardFn = Callable[..., Rejection | None]

GUARDS: Registry[GuardFn] = Registry("guard", "corral.guards")

from runner.guards import adopted as _adopted  # noqa: E402, F401  (registers the built-ins; needs GUARDS)
from runner.guards import agents as _agents  # noqa: E402, F401
from runner.guards import git as _git  # noqa: E402, F401
from runner.guards import lease as _lease  # noqa: E402, F401
from runner.guards import mesh as _mesh  # noqa: E402, F401
from runner.guards import plans as _plans  # noqa: E402, F401

__all__ = ["GUARDS", "GuardFn"]
