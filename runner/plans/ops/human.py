"""``human.approve``: a step that waits on a person's approval.

The step asks nothing of an agent: it raises :class:`~runner.service.steps.ApprovalRequested`, and the
plans component records it ``waiting`` and pauses the plan, exactly as a step whose agent settled
blocked does. ``corral plans decide PLAN --step ID --approve|--reject --reason TEXT`` decides it; the
next run of the plan turns it ``succeeded`` (outputs ``approved``, ``reason``, ``decided_by``) or
``failed`` with ``decision_rejected``, and, once its ``timeout`` passed undecided, ``failed`` with
``approval_timeout`` (both catchable). The wait is measured from the step's start as recorded (its
``running`` record), so a runner that crashes and resumes does not restart the clock.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from runner.context import format_time, parse_time
from runner.errors import InputError
from runner.plans.ops.base import operation
from runner.service.steps import RUN, ApprovalRequested, OpContext, Outputs, Resume

PROMPT_MAX = 4000  # characters: a question for a person, not a document


def _resume(ctx: OpContext, args: dict[str, Any]) -> Resume:
    """Found in flight: nothing outside the store happened, so it asks again (its clock keeps running
    from the recorded start)."""
    return RUN


@operation("human.approve", _resume)
async def human_approve(ctx: OpContext, args: dict[str, Any]) -> Outputs:
    prompt = args.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip() or len(prompt) > PROMPT_MAX:
        raise InputError("prompt", f"an approval's prompt is 1-{PROMPT_MAX} characters of text")
    timeout = args.get("timeout")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0):
        raise InputError("timeout", f"{timeout!r} is not a positive number of seconds")
    record = (ctx.plan().data.get("steps") or {}).get(ctx.step_id) or {}
    started = record.get("at")
    since = parse_time(started) if isinstance(started, str) else ctx.service.now()
    deadline = None if timeout is None else format_time(since + timedelta(seconds=float(timeout)))
    raise ApprovalRequested(
        f"waits on a person's approval: {prompt}",
        prompt=prompt,
        since=format_time(since),
        timeout=None if timeout is None else float(timeout),
        deadline=deadline,
    )
