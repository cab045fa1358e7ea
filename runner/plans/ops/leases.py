"""``reviewer.start``/``close`` and ``writer.start``/``verify``/``release``: the agents a plan leases.

A plan acts only on what it created: a closing step finds its lease by the start step's id (or by name
among the leases this plan started) and raises :class:`NotCreatedByPlan` for any other.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from runner.definitions.operations import OPERATIONS as CATALOGUE
from runner.errors import CorralError, InputError, RefusedError
from runner.plans.ops.base import checkpoint_sha256, operation
from runner.service.steps import NOT_CREATED, RUN, NotCreatedByPlan, OpContext, Outputs, Resume, ResumeFn

if TYPE_CHECKING:
    from runner.service import AgentLeaseView


def _lease_outputs(view: AgentLeaseView) -> Outputs:
    return Outputs(
        {
            "lease": view.id,
            "pane_id": view.data.get("pane_id"),
            "seq": view.data.get("started_seq"),
            "state": view.state,
        }
    )


def _resume_start(machine: str) -> ResumeFn:
    def resume(ctx: OpContext, args: dict[str, Any]) -> Resume:
        view = ctx.service.inventory.lease(f"{machine}/{ctx.key}")
        if view is None:
            return RUN
        if view.state == "active":
            return Resume("done", _lease_outputs(view))
        if view.state in ("provisioning", "orphaned"):
            return Resume(
                "pause",
                reason=f"{machine} {args.get('name')!r} was being started when the runner stopped "
                f"({view.state}); check `corral agents`, then "
                f"`corral {machine} reconcile --apply`",
            )
        return Resume(
            "fail",
            error=CorralError(
                f"{machine} {args.get('name')!r} did not start ({view.state}): {view.data.get('failure')}",
                code="agent_start_failed",
            ),
        )

    return resume


def _current_seq(ctx: OpContext, lease: AgentLeaseView) -> int:
    """The cursor the leased agent sits at now (what a plan closes or releases at by default)."""
    return ctx.service.host(lease.data["host"]).get(lease.data["pane_id"]).seq


def _close_outputs(do: str, lease: AgentLeaseView) -> dict[str, Any]:
    """A closed reviewer's or released lane's step outputs (the catalogue's, but the output text), read
    from its lease: the same whether the step just ran or was found done after a crash."""
    keys = [k for k in CATALOGUE[do].outputs if k not in ("state", "output")]
    return {"state": lease.state, **{k: lease.data.get(k) for k in keys}}


def _leases_of(ctx: OpContext, machine: str) -> list[AgentLeaseView]:
    """Every lease of ``machine`` (any state) the plan's controller holds or held."""
    from runner.service import ReviewerListInput

    if machine == "writer":
        return ctx.service.writers(ctx.controller_id, include_ended=True)
    return ctx.service.reviewers(ReviewerListInput(ctx.controller_id, include_ended=True))


def _own_lease(ctx: OpContext, machine: str, args: Mapping[str, Any], states: tuple[str, ...] | None) -> AgentLeaseView:
    """The lease a closing step means, which this plan created: ``lease`` (the start step's recorded
    lease id) or, failing that, the latest lease named ``name`` among those this plan started.
    Raises :class:`NotCreatedByPlan` for a lease the plan did not create, whatever its name."""
    lease_id, name = args.get("lease"), args.get("name")
    if lease_id is None and name is None:
        raise InputError("lease", f"{machine} step {ctx.step_id!r} names neither a lease nor a name")
    if lease_id is not None:
        found = ctx.service.inventory.lease(str(lease_id))
        if found is None or found.machine != machine or not ctx.created(found.id):
            raise NotCreatedByPlan(
                f"{machine} lease {lease_id!r} was {NOT_CREATED}; step {ctx.step_id!r} leaves it alone",
                lease=str(lease_id),
            )
        if name is not None and found.data.get("name") != name:
            raise RefusedError(
                f"lease {lease_id!r} is named {found.data.get('name')!r}, not {name!r}",
                code="lease_mismatch",
                lease=str(lease_id),
            )
        return found
    keys = ctx.created_keys()
    mine = [
        lease
        for lease in _leases_of(ctx, machine)
        if (states is None or lease.state in states)
        and lease.data.get("name") == name
        and lease.id.partition("/")[2] in keys
    ]
    # Started when it was requested (the start records requested_at with the instance it creates).
    latest = max(mine, key=lambda lease: str(lease.data.get("requested_at") or ""), default=None)
    if latest is None:
        raise NotCreatedByPlan(
            f"no {machine} named {name!r} was started by this plan: step {ctx.step_id!r} leaves any other alone",
            target=str(name),
        )
    return latest


def _resume_close(do: str, machine: str, done_state: str, closing: str) -> ResumeFn:
    def resume(ctx: OpContext, args: dict[str, Any]) -> Resume:
        try:
            latest = _own_lease(ctx, machine, args, None)
        except NotCreatedByPlan:
            return RUN  # the run says so (skipped)
        if latest.state == done_state:
            return Resume("done", Outputs(_close_outputs(do, latest)))
        if latest.state == closing:
            return Resume(
                "pause",
                reason=f"{machine} {args.get('name')!r} was being closed when the runner stopped; "
                f"run `corral {machine} reconcile --apply` once its pane is gone, then resume the plan",
            )
        return RUN

    return resume


def _decided_reason(ctx: OpContext) -> str | None:
    """A person's decision recorded on this plan (a step that waited on a blocked agent): it is also the
    operator's decision that lets the plan's clean-up close that blocked agent (recorded with the lease)."""
    for step_id, record in (ctx.plan().data.get("steps") or {}).items():
        decision = record.get("decision") if isinstance(record, dict) else None
        if isinstance(decision, dict) and decision.get("reason"):
            return f"plan {ctx.plan_id}, step {step_id}: {decision['reason']}"
    return None


def _budget(args: dict[str, Any]) -> dict[str, Any]:
    """A start step's budget arguments (those given), for the lease's own limits."""
    return {k: args[k] for k in ("budget_usd", "budget_tokens", "max_turns") if args.get(k) is not None}


# --- reviewers ------------------------------------------------------------------------------------------


@operation("reviewer.start", _resume_start("reviewer"))
async def reviewer_start(ctx: OpContext, args: dict[str, Any]) -> Outputs:
    from runner.service import ReviewerStartInput

    view = ctx.service.reviewers.start(
        ReviewerStartInput(
            ctx.controller_id,
            ctx.credential(),
            str(args["name"]),
            str(args["kind"]),
            str(args["cwd"]),
            str(args.get("host") or "process"),
            args.get("model"),
            args.get("effort"),
            lease_id=ctx.key,
            **_budget(args),
        )
    )
    return _lease_outputs(view)


@operation("reviewer.close", _resume_close("reviewer.close", "reviewer", "closed", "closing"))
async def reviewer_close(ctx: OpContext, args: dict[str, Any]) -> Outputs:
    from runner.service import ReviewerCloseInput

    lease = _own_lease(ctx, "reviewer", args, ("active", "close_failed"))
    seq = args.get("expected_seq")
    if seq is None:
        seq = _current_seq(ctx, lease)
    result = ctx.service.reviewers.close(
        ReviewerCloseInput(
            ctx.controller_id,
            ctx.credential(),
            str(lease.data["name"]),
            int(seq),
            int(args.get("lines") or 200),
            blocked_reason=_decided_reason(ctx),
            lease_id=lease.id,
        )
    )
    return Outputs(_close_outputs("reviewer.close", result.lease), {"output": result.output})


# --- writer lanes ---------------------------------------------------------------------------------------


@operation("writer.start", _resume_start("writer"))
async def writer_start(ctx: OpContext, args: dict[str, Any]) -> Outputs:
    from runner.service import WriterStartInput

    view = ctx.service.writers.start(
        WriterStartInput(
            ctx.controller_id,
            ctx.credential(),
            str(args["name"]),
            str(args["kind"]),
            str(args["worktree"]),
            str(args["branch"]),
            str(args["base_commit"]),
            str(args["expected_head"]),
            str(args["expected_status_sha256"]),
            tuple(args["owned_scopes"]),
            str(args["purpose"]),
            str(args["ticket_ref"]),
            str(args["authority_ref"]),
            str(args["authority_sha256"]).lower(),
            tuple(args.get("locked_scopes") or ()),
            tuple(args.get("protected_branches") or ()),
            str(args.get("host") or "process"),
            args.get("model"),
            args.get("effort"),
            lease_id=ctx.key,
            **_budget(args),
        )
    )
    return _lease_outputs(view)


@operation("writer.verify")
async def writer_verify(ctx: OpContext, args: dict[str, Any]) -> Outputs:
    from runner.service import WriterVerifyInput

    if args.get("lease") is not None:
        # By id, a lane this plan started: never another lane that carries the same name.
        lease = _own_lease(ctx, "writer", args, ("active",))
        inp = WriterVerifyInput(ctx.controller_id, ctx.credential(), str(lease.data["name"]), lease_id=lease.id)
    elif args.get("name") is not None:
        inp = WriterVerifyInput(ctx.controller_id, ctx.credential(), str(args["name"]))  # a live lane (validate)
    else:
        raise InputError("lease", f"writer.verify step {ctx.step_id!r} names neither a lease nor a name")
    result = ctx.service.writers.verify(inp, scratch=ctx.scratch)
    v = result.verification
    outputs = {"passed": v["passed"], "head": v["head"], "status_sha256": v["status_sha256"], "results": v["results"]}
    try:
        result.check()
    except CorralError as exc:
        exc.details.pop("result", None)  # the step records its outputs instead (no tails: none were asked for)
        exc.details["outputs"] = outputs
        raise
    return Outputs(outputs)


@operation("writer.release", _resume_close("writer.release", "writer", "released", "releasing"))
async def writer_release(ctx: OpContext, args: dict[str, Any]) -> Outputs:
    from runner.service import WriterReleaseInput

    lease = _own_lease(ctx, "writer", args, ("active", "release_failed"))
    name = str(lease.data["name"])
    head, status = args.get("expected_head"), args.get("expected_status_sha256")
    if not (head and status):  # expect what is there now: read git once here (the release reads it again)
        facts = ctx.service.writers.preflight(str(lease.data["cwd"]))
        head, status = head or facts["head"], status or facts["status_sha256"]
    seq = args.get("expected_seq")
    result = ctx.service.writers.release(
        WriterReleaseInput(
            ctx.controller_id,
            ctx.credential(),
            name,
            int(_current_seq(ctx, lease) if seq is None else seq),
            str(head),
            str(status),
            str(args["checkpoint_ref"]),
            checkpoint_sha256(args),
            int(args.get("lines") or 200),
            blocked_reason=_decided_reason(ctx),
            lease_id=lease.id,
        )
    )
    return Outputs(_close_outputs("writer.release", result.lease), {"output": result.output})
