"""The update registry: named, pure changes a transition makes to its instance's data.

An update is ``fn(ctx: Context, **with_args) -> Update``: new data values (merged in the order the
transition lists its updates; later updates see earlier ones in ``ctx.data``) and values for the
caller's reply only (a freshly issued token), which are never stored or logged.
"""

from __future__ import annotations

from collections.abc import Callable

from runner.context import Update
from runner.registry import Registry

UpdateFn = Callable[..., Update]

UPDATES: Registry[UpdateFn] = Registry("update", "corral.updates")

from runner.updates import adopted as _adopted  # noqa: E402, F401  (registers the built-ins; needs UPDATES)
from runner.updates import agents as _agents  # noqa: E402, F401
from runner.updates import lease as _lease  # noqa: E402, F401
from runner.updates import mesh as _mesh  # noqa: E402, F401
from runner.updates import plans as _plans  # noqa: E402, F401
from runner.updates import writers as _writers  # noqa: E402, F401

__all__ = ["UPDATES", "UpdateFn"]
