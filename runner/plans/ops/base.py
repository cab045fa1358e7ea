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


def checkpoint_sha256(args: Mapping[str, Any]) -> str | None:
    """A release's ``checkpoint_sha256`` argument, lowercased; None when absent (a ``memory:`` ref's is filled)."""
    value = args.get("checkpoint_sha256")
    return None if value in (None, "") else str(value).lower()
