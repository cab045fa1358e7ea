"""The plans' inputs: submit, run, resume, retry, cancel, decide, show and list a plan.

One Input per operation, shared by the CLI, the MCP tools and the HTTP API.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runner.service.inputs.fields import described, input_class


@input_class
class PlanSubmitInput:
    """A plan document (``plan``, ``recipe``, ``controller``, ``inputs``) to record, or find if recorded.

    ``parent`` names the plan and step that call this one (``recipe.call``)."""

    document: Mapping[str, Any] = described("plan", "The plan document, as a JSON object.")
    parent: str | None = None


@input_class
class PlanRunInput:
    """Run (or continue) a submitted plan until it ends or pauses."""

    plan_id: str


@input_class
class PlanResumeInput:
    """Continue a paused or interrupted plan from its last recorded step (as run does)."""

    plan_id: str = described("plan_id", "The plan's id.")


@input_class
class PlanRetryInput:
    """Redrive a failed plan from its failed step."""

    plan_id: str = described("plan_id", "The plan's id.")


@input_class
class PlanCancelInput:
    """Cancel a plan: no further step runs."""

    plan_id: str = described("plan_id", "The plan's id.")


@input_class
class PlanDecideInput:
    """A person's decision on a step that waits on one: ``approve`` or reject, and why (1-1000 characters).

    The reason is checked after the plan is found waiting (``plan_not_waiting`` comes first). ``actor``
    names who decided, when a surface knows better than the service's own actor (the HTTP API's
    authenticated caller); it is the decide event's actor and the decision's ``actor``."""

    plan_id: str = described("plan_id", "The plan's id.")
    step_id: str = described("step", "The step that waits.")
    approve: bool = described("approve", "true: approve; false: reject.")
    reason: str = described("reason", "Why (1-1000 characters), recorded.")
    actor: str | None = None


@input_class
class PlanShowInput:
    """One plan, with what its running steps wait on and the agent output its steps collected."""

    plan_id: str = described("plan_id", "The plan's id.")


@input_class
class PlanListInput:
    """Plans not finished (succeeded or cancelled) unless ``include_ended``; ``after`` (a plan id: the
    previous page's ``next_after``) and ``limit`` page through them in plan id order."""

    include_ended: bool = described(
        "all", "Include ended ones too (released, closed, settled, finished).", default=False
    )
    after: str | None = described("after", "Start after this key: the previous page's next_after.", default=None)
    limit: int | None = described(
        "limit", "At most this many rows (1-10000); the reply's next_after starts the next page.", default=None
    )

    def __post_init__(self) -> None:
        from runner.service.inputs.base import check_page

        check_page(self.after, self.limit)
