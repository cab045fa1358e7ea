"""Step operations: what each recipe operation does, and how a step found in flight is resolved.

One object per operation (its catalogue entry, ``run`` and ``resume``), registered by area:
:mod:`.controller` (the lease), :mod:`.leases` (reviewers and writer lanes), :mod:`.receipts`
(relay, collect, ask, abandon), :mod:`.waits`, :mod:`.git`, :mod:`.flow` (pass, fail),
:mod:`.recipe` (a nested plan), :mod:`.human` (an approval by a person) and :mod:`.memory` (a handoff
checkpoint). Adding a built-in is
one function in its area (or one new module imported below) plus its entry in
``runner/definitions/operations.py``; a plugin distribution adds one through the entry point group
``corral.operations`` (an object with ``spec``, ``run``, ``resume``).
:data:`OPERATIONS` finds both; hand it to :class:`runner.service.plans.Plans`.
"""

from __future__ import annotations

from runner.plans.ops import controller as _controller  # noqa: F401  (registers the built-ins)
from runner.plans.ops import flow as _flow  # noqa: F401
from runner.plans.ops import git as _git  # noqa: F401
from runner.plans.ops import human as _human  # noqa: F401
from runner.plans.ops import leases as _leases  # noqa: F401
from runner.plans.ops import memory as _memory  # noqa: F401
from runner.plans.ops import receipts as _receipts  # noqa: F401
from runner.plans.ops import recipe as _recipe  # noqa: F401
from runner.plans.ops import waits as _waits  # noqa: F401
from runner.plans.ops.base import OPERATIONS
from runner.service.steps import (
    NOT_CREATED,
    RUN,
    AgentBlocked,
    ApprovalRequested,
    NotCreatedByPlan,
    OpContext,
    Operation,
    Outputs,
    Resume,
    StepFailed,
    StepOperation,
    WaitsOnPerson,
)

__all__ = [
    "NOT_CREATED",
    "OPERATIONS",
    "RUN",
    "AgentBlocked",
    "ApprovalRequested",
    "NotCreatedByPlan",
    "OpContext",
    "Operation",
    "Outputs",
    "Resume",
    "StepFailed",
    "StepOperation",
    "WaitsOnPerson",
]
