"""``receipt.relay``/``collect``/``collect_many``/``ask``/``ask_many``/``abandon``: prompts handed to a
leased agent, each with a receipt, and their results collected.

A receipt a step creates has the step's key as its id, so a step found in flight is resolved from its
receipt: ``reserved`` (the delivery was never confirmed) pauses the plan; nothing is sent twice.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from runner.errors import AgentDeniedError, CorralError, InputError, RefusedError
from runner.plans.ops.base import operation, timeout
from runner.service.steps import NOT_CREATED, RUN, AgentBlocked, NotCreatedByPlan, OpContext, Outputs, Resume

if TYPE_CHECKING:
    from runner.service import ReceiptView


def _receipt_outputs(view: ReceiptView) -> dict[str, Any]:
    data = view.data
    return {
        "token": data["token"],
        "before_seq": data.get("before_seq"),
        "after_seq": data.get("after_seq"),
        "settled_seq": data.get("settled_seq"),
        "output_sha256": data.get("output_sha256"),
        "state": view.state,
        # What a driven run reported (tool and path of each denial; a verdict the schema checked).
        "denials": list(data.get("denials") or []),
        "denied": bool(data.get("denied")),
    }


def _verdict(view: ReceiptView) -> dict[str, Any]:
    """A collected run's verdict, as a private output (the agent's words stay out of the event log;
    ``${steps.ID.verdict...}`` still reads it, so a plan can branch on it)."""
    verdict = view.data.get("verdict")
    return {"verdict": verdict} if isinstance(verdict, dict) else {}


def _schema(args: Mapping[str, Any]) -> str | None:
    """A step's verdict ``schema`` argument (an object) as the JSON text a relay takes."""
    import json

    schema = args.get("schema")
    if schema is None:
        return None
    if not isinstance(schema, dict):
        raise InputError("schema", "give a JSON Schema object (the verdict the agent must answer with)")
    return json.dumps(schema, sort_keys=True)


def _within_budget(ctx: OpContext) -> None:
    """Refuse the plan's next prompt once what its agents spent reached the plan's budget."""
    spend = ctx.plans.spend(ctx.plan())
    reached = spend["reached"]
    if reached is None:
        return
    raise RefusedError(
        f"plan {ctx.plan_id} has spent its budget: {reached['limit']} {reached['budget']:g}, spent "
        f"{reached['spent']:g}; submit a new plan with a larger budget to go on",
        code="budget_exhausted",
        plan=ctx.plan_id,
        **reached,
        spend=spend["total"],
    )


def _denied(ctx: OpContext, views: list[ReceiptView], args: Mapping[str, Any]) -> None:
    """Fail the step when a collected run's edits or tools were denied, unless the step allows it."""
    if args.get("allow_denials") is True:
        return
    for view in views:
        if view.data.get("denied"):
            denials = list(view.data.get("denials") or [])
            shown = ", ".join(f"{d.get('tool')} {d.get('path') or ''}".strip() for d in denials[:5])
            raise AgentDeniedError(
                f"{view.data.get('name')!r} was denied {len(denials)} action(s) ({shown}): not a clean "
                "success; give the step allow_denials: true if that is expected",
                receipt=view.token,
                target=view.data.get("name"),
                denials=denials,
            )


def _receipt_key(token: str) -> str:
    """A receipt's id (its instance key) from its token (``corral-receipt-v1.<id>``)."""
    return token.rpartition(".")[2]


def _resume_receipt(ctx: OpContext, receipt_id: str) -> Resume:
    found = ctx.service.receipts.receipt_by_id(receipt_id)
    if found is None:
        return RUN
    if found.state == "reserved":
        return Resume(
            "pause",
            reason=f"the delivery of receipt {found.token} was never confirmed; observe "
            "the agent, abandon the receipt (corral abandon) if it is settled, then resume the plan",
        )
    if found.state in ("failed", "abandoned"):
        return Resume(
            "fail",
            error=CorralError(
                f"receipt {found.token} is {found.state} ({found.data.get('reason')})",
                code=str(found.data.get("reason") or "receipt_ended"),
            ),
        )
    return Resume("done", Outputs(_receipt_outputs(found)))


def _own_receipts(ctx: OpContext, tokens: tuple[str, ...]) -> None:
    """Refuse (skip) a collect or abandon of a receipt this plan did not create (``receipt_unknown`` for
    a token that names no receipt)."""
    keys = ctx.created_keys()
    for token in tokens:
        receipt = ctx.service.receipts.receipt(token)
        if _receipt_key(receipt.token) not in keys:
            raise NotCreatedByPlan(f"receipt {token} was {NOT_CREATED}; step {ctx.step_id!r} leaves it alone")


def _results(results: list[Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A batch's public results (each receipt's outputs and target) and private outputs (by target)."""
    public = [_receipt_outputs(r.receipt) | {"target": r.receipt.data.get("name")} for r in results]
    private: dict[str, Any] = {"outputs": {str(r.receipt.data.get("name")): r.output for r in results}}
    verdicts = {str(r.receipt.data.get("name")): _verdict(r.receipt).get("verdict") for r in results}
    if any(v is not None for v in verdicts.values()):
        private["verdicts"] = verdicts
    return public, private


@operation("receipt.relay", lambda ctx, args: _resume_receipt(ctx, ctx.key))
async def receipt_relay(ctx: OpContext, args: dict[str, Any]) -> Outputs:
    from runner.service import RelayInput

    _within_budget(ctx)
    view = ctx.service.receipts.relay(
        RelayInput(
            ctx.controller_id,
            ctx.credential(),
            str(args["target"]),
            str(args["text"]),
            receipt_id=ctx.key,
            schema=_schema(args),
        )
    )
    return Outputs(_receipt_outputs(view))


async def _collect(ctx: OpContext, token: str, args: Mapping[str, Any]) -> Outputs:
    from runner.service import CollectInput

    (result,) = await ctx.service.receipts.collect(
        CollectInput(ctx.controller_id, ctx.credential(), (token,), timeout(ctx, args), int(args.get("lines") or 200))
    )
    observed_status = "done"
    with contextlib.suppress(CorralError):
        observed_status = ctx.service.host(result.receipt.data["host"]).get(result.receipt.data["pane_id"]).status
    outputs = Outputs(
        {**_receipt_outputs(result.receipt), "status": observed_status},
        {"output": result.output, **_verdict(result.receipt)},
    )
    if result.receipt.data.get("settled_status") == "blocked":
        name = str(result.receipt.data.get("name"))
        raise AgentBlocked(
            f"{name!r} is blocked: it waits on a person (decide with `corral plans decide`)",
            outputs,
            name,
            result.receipt.data.get("completed_at"),
        )
    _denied(ctx, [result.receipt], args)
    return outputs


@operation("receipt.collect")
async def receipt_collect(ctx: OpContext, args: dict[str, Any]) -> Outputs:
    _own_receipts(ctx, (str(args["receipt"]),))
    return await _collect(ctx, str(args["receipt"]), args)


@operation("receipt.collect_many")
async def receipt_collect_many(ctx: OpContext, args: dict[str, Any]) -> Outputs:
    from runner.service import CollectInput

    tokens = tuple(str(t) for t in args.get("receipts") or ())
    if not tokens:
        return Outputs({"results": []})
    _own_receipts(ctx, tokens)
    results = await ctx.service.receipts.collect(
        CollectInput(ctx.controller_id, ctx.credential(), tokens, timeout(ctx, args), int(args.get("lines") or 200))
    )
    _denied(ctx, [r.receipt for r in results], args)
    public, private = _results(results)
    return Outputs({"results": public}, private)


def _resume_ask(ctx: OpContext, args: dict[str, Any]) -> Resume:
    resolution = _resume_receipt(ctx, ctx.key)
    return RUN if resolution.kind == "done" else resolution  # done: collecting again is safe (replay)


@operation("receipt.ask", _resume_ask)
async def receipt_ask(ctx: OpContext, args: dict[str, Any]) -> Outputs:
    from runner.service import RelayInput

    existing = ctx.service.receipts.receipt_by_id(ctx.key)
    if existing is None:
        _within_budget(ctx)
        view = ctx.service.receipts.relay(
            RelayInput(
                ctx.controller_id,
                ctx.credential(),
                str(args["target"]),
                str(args["text"]),
                receipt_id=ctx.key,
                schema=_schema(args),
            )
        )
        token = view.token
    else:
        token = existing.token
    return await _collect(ctx, token, args)


def _resume_ask_many(ctx: OpContext, args: dict[str, Any]) -> Resume:
    for index, _ in enumerate(args.get("requests") or ()):
        resolution = _resume_receipt(ctx, ctx.subkey(index))
        if resolution.kind in ("pause", "fail"):
            return resolution
    return RUN


@operation("receipt.ask_many", _resume_ask_many)
async def receipt_ask_many(ctx: OpContext, args: dict[str, Any]) -> Outputs:
    from runner.service import AskManyInput, CollectInput, RelayInput

    requests = list(args["requests"])
    if not 1 <= len(requests) <= 8:
        raise InputError("requests", "give 1-8 requests")
    credential = ctx.credential()  # read once for the whole batch
    keys = tuple(ctx.subkey(index) for index in range(len(requests)))
    existing = [ctx.service.receipts.receipt_by_id(key) for key in keys]
    if all(found is None for found in existing):
        _within_budget(ctx)
        # Admitted all at once: every receipt reserved in one transaction, or none (a refusal).
        views = ctx.service.receipts.relay_many(
            AskManyInput(
                ctx.controller_id,
                credential,
                tuple((str(r["target"]), str(r["text"])) for r in requests),
                batch_id=ctx.key,
                receipt_ids=keys,
            )
        )
        tokens = [view.token for view in views]
    else:
        tokens = []
        for key, found, request in zip(keys, existing, requests, strict=True):
            if found is not None:
                tokens.append(found.token)
                continue
            # Only a batch admitted before admission was atomic can be partly reserved.
            view = ctx.service.receipts.relay(
                RelayInput(ctx.controller_id, credential, str(request["target"]), str(request["text"]), ctx.key, key)
            )
            tokens.append(view.token)
    lines = int(args.get("lines") or 200)
    collect = CollectInput(ctx.controller_id, credential, tuple(tokens), timeout(ctx, args), lines)
    if str(args.get("mode") or "all") == "first":
        # The first to settle (a completed one at once), collected; the others left pending.
        first = await ctx.service.receipts.collect_first(collect)
        results = first.results
        pending = [view.token for view in first.pending_receipts]
    else:
        results = await ctx.service.receipts.collect(collect)
        pending = []
    _denied(ctx, [r.receipt for r in results], args)
    public, private = _results(results)
    first_name = results[0].receipt.data.get("name")
    return Outputs({"results": public, "pending_receipts": pending, "first": first_name}, private)


@operation("receipt.abandon")
async def receipt_abandon(ctx: OpContext, args: dict[str, Any]) -> Outputs:
    from runner.service import AbandonInput

    _own_receipts(ctx, (str(args["receipt"]),))
    receipt = ctx.service.receipts.receipt(str(args["receipt"]))
    if receipt.state == "abandoned":
        return Outputs({"state": "abandoned"})
    view = ctx.service.receipts.abandon(
        AbandonInput(ctx.controller_id, ctx.credential(), str(args["receipt"]), args.get("message"))
    )
    return Outputs({"state": view.state})
