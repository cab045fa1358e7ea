"""The registry of built-in step operations and what several areas share.

An operation is registered with its catalogue entry (``runner/definitions/operations.py``) by
``@operation("area.verb", resume)`` on its ``run`` function; see :mod:`runner.service.steps` for the
contract (``run``, ``resume``, :class:`Outputs`, :class:`Resume`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runner.service.steps import OpContext, OperationRegistry

OPERATIONS = OperationRegistry()
operation = OPERATIONS.operation


def timeout(ctx: OpContext, args: Mapping[str, Any], default: float = 600.0) -> float:
    """A waiting step's timeout: its ``timeout`` argument, else the step's, else ``default``."""
    value = args.get("timeout", ctx.timeout if ctx.timeout is not None else default)
    return float(value)
