"""The plans' inputs: submit, run, resume, retry, cancel, decide, show and list a plan.

One Input per operation, shared by the CLI, the MCP tools and the HTTP API.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class PlanSubmitInput:
    """A plan document (``plan``, ``recipe``, ``controller``, ``inputs``) to record, or find if recorded.

    ``parent`` names the plan and step that call this one (``recipe.call``)."""

    document: Mapping[str, Any]
    parent: str | None = None


@dataclass(frozen=True)
class PlanRunInput:
    """Run (or continue) a submitted plan until it ends or pauses."""

    plan_id: str


@dataclass(frozen=True)
class PlanResumeInput:
    """Continue a paused or interrupted plan from its last recorded step (as run does)."""

    plan_id: str


@dataclass(frozen=True)
class PlanRetryInput:
    """Redrive a failed plan from its failed step."""

    plan_id: str


@dataclass(frozen=True)
class PlanCancelInput:
    """Cancel a plan: no further step runs."""

    plan_id: str


@dataclass(frozen=True)
class PlanDecideInput:
    """A person's decision on a step that waits on one: ``approve`` or reject, and why (1-1000 characters).

    The reason is checked after the plan is found waiting (``plan_not_waiting`` comes first). ``actor``
    names who decided, when a surface knows better than the service's own actor (the HTTP API's
    authenticated caller); it is the decide event's actor and the decision's ``actor``."""

    plan_id: str
    step_id: str
    approve: bool
    reason: str
    actor: str | None = None


@dataclass(frozen=True)
class PlanShowInput:
    """One plan, with what its running steps wait on and the agent output its steps collected."""

    plan_id: str


@dataclass(frozen=True)
class PlanListInput:
    """Plans not finished (succeeded or cancelled) unless ``include_ended``; ``after`` (a plan id: the
    previous page's ``next_after``) and ``limit`` page through them in plan id order."""

    include_ended: bool = False
    after: str | None = None
    limit: int | None = None

    def __post_init__(self) -> None:
        from runner.service.inputs.base import check_page

        check_page(self.after, self.limit)
