"""What each recipe operation does, and how a step that was in flight when a runner died is resolved.

Every operation is ``run(ctx, args) -> Outputs``. Operations that create an instance (a lease, a
receipt) use the step's deterministic key as the instance id, so ``resume(ctx, args)`` can look the
instance up and decide, from its machine's state, whether the step already happened (``done``), never
happened (``run``), or might have happened in a way only a person can judge (``pause``). Nothing is
blindly sent twice: a receipt left ``reserved`` pauses the plan.

Outputs are split: ``public`` values (cursors, tokens, digests) are recorded with the step and appear
in the event log; ``private`` values (agent output text) are kept with the plan but never logged.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner.errors import CorralError, CredentialError, InputError, NotFoundError, RefusedError
from runner.fence import Credential

if TYPE_CHECKING:
    from runner.context import Instance
    from runner.plans.executor import Executor
    from runner.service import AgentLeaseView, Service


@dataclass
class Outputs:
    public: dict[str, Any] = field(default_factory=dict)
    private: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Resume:
    """How to continue a step found in flight: ``run`` it, it is ``done``, ``pause`` for a person, or ``fail``."""

    kind: str
    outputs: Outputs | None = None
    reason: str = ""
    error: CorralError | None = None


RUN = Resume("run")


class StepFailed(CorralError):
    """A ``flow.fail`` step, or an operation that reports failure without another error. The code is the step's."""

    category = "conflict"
    default_code = "step_failed"


class AgentBlocked(CorralError):
    """A step's agent settled **blocked**: it waits on a person (a question, an approval). corral never
    answers it; the executor records the step ``waiting`` (its outputs kept) and pauses the plan with
    ``waiting_on: {kind: agent_blocked, target, since}`` until ``corral plans decide`` approves (the step
    succeeds with what was collected) or rejects it (``decision_rejected``, catchable)."""

    category = "refused"
    default_code = "agent_blocked"

    def __init__(self, message: str, outputs: Outputs, target: str, since: str | None) -> None:
        super().__init__(message, target=target, since=since)
        self.outputs = outputs


class NotCreatedByPlan(CorralError):
    """A step would act on a lease or receipt this plan did not create (a reviewer of the same name
    started by someone else, a lane whose start failed). The executor records the step ``skipped``
    with ``skipped: "not created by this plan"``: a plan acts only on what it created, by id."""

    category = "refused"
    default_code = "not_created_by_plan"


NOT_CREATED = "not created by this plan"


@dataclass
class OpContext:
    """What an operation may use: the service, the plan, the step, and the controller's credential."""

    executor: Executor
    plan_id: str
    step_id: str
    attempt: int
    controller_id: str
    timeout: float | None

    @property
    def service(self) -> Service:
        return self.executor.service

    @property
    def scratch(self) -> Path | None:
        """Where snapshots for sandboxed validation go (the executor's)."""
        return self.executor.scratch

    @property
    def key(self) -> str:
        """This step's idempotency key: the same for the same plan, step and attempt."""
        return str(uuid.uuid5(uuid.NAMESPACE_URL, f"corral-plan:{self.plan_id}/{self.step_id}/{self.attempt}"))

    def subkey(self, index: int) -> str:
        return str(uuid.uuid5(uuid.NAMESPACE_URL, f"corral-plan:{self.plan_id}/{self.step_id}/{self.attempt}/{index}"))

    def created_keys(self) -> set[str]:
        """Every instance key this plan's steps may have created: each recorded step's keys and
        subkeys for every attempt it reached (leases are ``MACHINE/KEY``, receipts ``receipt/KEY``)."""
        from runner.plans import get_plan

        plan = get_plan(self.service.store, self.plan_id)
        keys: set[str] = set()
        records = dict(plan.data.get("steps") or {})
        records.setdefault(self.step_id, {"attempt": self.attempt})
        for step_id, record in records.items():
            for attempt in range(1, max(int(record.get("attempt") or 1), 1) + 1):
                base = f"corral-plan:{self.plan_id}/{step_id}/{attempt}"
                keys.add(str(uuid.uuid5(uuid.NAMESPACE_URL, base)))
                keys.update(str(uuid.uuid5(uuid.NAMESPACE_URL, f"{base}/{index}")) for index in range(8))
        return keys

    def created(self, instance_id: str) -> bool:
        """Whether ``instance_id`` is one this plan created (its key derives from this plan's steps)."""
        return instance_id.partition("/")[2] in self.created_keys()

    def credential(self) -> Credential:
        found = self.executor.credentials.load(self.controller_id)
        if found is None:
            raise CredentialError(
                f"no credential for controller {self.controller_id!r}: the plan must acquire it "
                "first (controller.acquire)",
                code="credential_missing",
            )
        return found


Run = Callable[[OpContext, dict[str, Any]], Awaitable[Outputs]]
ResumeFn = Callable[[OpContext, dict[str, Any]], Resume]


@dataclass(frozen=True)
class Operation:
    run: Run
    resume: ResumeFn | None = None  # None: safe to run again


OPERATIONS: dict[str, Operation] = {}


def operation(name: str, resume: ResumeFn | None = None) -> Callable[[Run], Run]:
    def register(fn: Run) -> Run:
        OPERATIONS[name] = Operation(fn, resume)
        return fn

    return register


def _timeout(ctx: OpContext, args: Mapping[str, Any], default: float = 600.0) -> float:
    value = args.get("timeout", ctx.timeout if ctx.timeout is not None else default)
    return float(value)


# --- controller ----------------------------------------------------------------------------------------


def _resume_acquire(ctx: OpContext, args: dict[str, Any]) -> Resume:
    """An acquire in flight: run it again (it renews a credential that holds the lease), unless the lease
    is held and the credential kept here does not hold it: then a person must decide."""
    from runner import fence

    lease = ctx.service.store.get(fence.instance_id(ctx.controller_id))
    if lease is None or lease.state != "active":
        return RUN
    try:
        held = ctx.executor.credentials.load(ctx.controller_id)
    except CredentialError:
        held = None
    if held is not None and fence.check(lease, held, ctx.service.store.now(), allow_expired=True) is None:
        return RUN
    return Resume(
        "pause",
        reason=f"controller {ctx.controller_id!r} is held by lease {lease.data.get('lease_id')} "
        "whose credential is not kept here (a runner may have died between the grant and saving it); "
        "wait for it to expire and `corral controller takeover`, or release it, then resume the plan",
    )


@operation("controller.acquire", _resume_acquire)
async def controller_acquire(ctx: OpContext, args: dict[str, Any]) -> Outputs:
    from runner import fence
    from runner.service import AcquireInput, RenewInput, ResumeInput

    service = ctx.service
    keeper = ctx.executor.credentials
    try:
        held = keeper.load(ctx.controller_id)
    except CredentialError:
        held = None
    ttl = args.get("ttl_seconds")
    if held is not None:
        # A live credential is shared, not replaced: other plans of this controller may hold it too,
        # and a resume would fence them out. Renew it; resume only an expired one.
        try:
            lease = service.renew(RenewInput(ctx.controller_id, held, ttl))
            return _lease_fields(lease.data)
        except RefusedError as exc:
            if exc.code != "lease_expired":
                held = None  # stale: the lease moved on without us; acquire afresh below
        except NotFoundError:
            held = None
    # Keep the credential-to-be before the grant commits: a runner killed in between leaves a
    # credential that either holds the lease (the grant happened) or is stale (it did not).
    current = service.store.get(fence.instance_id(ctx.controller_id))
    proposal = fence.Proposal.new()
    generation = int((current.data.get("generation") if current else 0) or 0) + 1
    keeper.save(fence.Credential(ctx.controller_id, proposal.lease_id, generation, proposal.token))
    try:
        if held is not None:
            grant = service.resume(ResumeInput(ctx.controller_id, held, ttl, proposal=proposal))
        else:
            grant = service.acquire(
                AcquireInput(
                    ctx.controller_id,
                    str(args["authority_ref"]),
                    str(args["authority_sha256"]).lower(),
                    int(ttl or 900),
                    proposal=proposal,
                )
            )
    except CorralError:
        if held is not None:
            keeper.save(held)
        else:
            proposed = fence.Credential(ctx.controller_id, proposal.lease_id, generation, proposal.token)
            keeper.remove(ctx.controller_id, proposed)
        raise
    keeper.save(grant.credential)
    return _lease_fields(grant.lease.data)


def _lease_fields(data: Mapping[str, Any]) -> Outputs:
    return Outputs({"lease_id": data["lease_id"], "generation": data["generation"], "expires_at": data["expires_at"]})


def _resume_release(ctx: OpContext, args: dict[str, Any]) -> Resume:
    from runner import fence

    lease = ctx.service.store.get(fence.instance_id(ctx.controller_id))
    if lease is not None and lease.state == "released":
        return Resume("done", Outputs({"state": "released"}))
    return RUN


@operation("controller.release", _resume_release)
async def controller_release(ctx: OpContext, args: dict[str, Any]) -> Outputs:
    from runner.service import ReleaseInput

    held = ctx.credential()
    lease = ctx.service.release(
        ReleaseInput(ctx.controller_id, held, str(args["checkpoint_ref"]), str(args["checkpoint_sha256"]).lower())
    )
    ctx.executor.credentials.remove(ctx.controller_id, held)  # not a successor's, written meanwhile
    return Outputs({"state": lease.state})


# --- leases ---------------------------------------------------------------------------------------------


def _lease_outputs(view: Any) -> Outputs:
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
        found = ctx.service.store.get(f"{machine}/{ctx.key}")
        if found is None:
            return RUN
        view = ctx.service._lease_view(found)
        if found.state == "active":
            return Resume("done", _lease_outputs(view))
        if found.state in ("provisioning", "orphaned"):
            return Resume(
                "pause",
                reason=f"{machine} {args.get('name')!r} was being started when the runner stopped "
                f"({found.state}); check `corral agents`, then "
                f"`corral {machine} reconcile --apply`",
            )
        return Resume(
            "fail",
            error=CorralError(
                f"{machine} {args.get('name')!r} did not start ({found.state}): {found.data.get('failure')}",
                code="agent_start_failed",
            ),
        )

    return resume


@operation("reviewer.start", _resume_start("reviewer"))
async def reviewer_start(ctx: OpContext, args: dict[str, Any]) -> Outputs:
    from runner.service import ReviewerStartInput

    view = ctx.service.reviewer_start(
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
        )
    )
    return _lease_outputs(view)


def _current_seq(ctx: OpContext, lease: Instance) -> int:
    """The cursor the leased agent sits at now (what a plan closes or releases at by default)."""
    return ctx.service.host(lease.data["host"]).get(lease.data["pane_id"]).seq


def _close_outputs(do: str, lease: Instance | AgentLeaseView) -> dict[str, Any]:
    """A closed reviewer's or released lane's step outputs (the catalogue's, but the output text), read
    from its lease: the same whether the step just ran or was found done after a crash."""
    from runner.definitions.operations import OPERATIONS as CATALOGUE

    keys = [k for k in CATALOGUE[do].outputs if k not in ("state", "output")]
    return {"state": lease.state, **{k: lease.data.get(k) for k in keys}}


def _own_lease(ctx: OpContext, machine: str, args: Mapping[str, Any], states: tuple[str, ...] | None) -> Instance:
    """The lease a closing step means, which this plan created: ``lease`` (the start step's recorded
    lease id) or, failing that, the latest lease named ``name`` among those this plan started.
    Raises :class:`NotCreatedByPlan` for a lease the plan did not create, whatever its name."""
    store = ctx.service.store
    lease_id, name = args.get("lease"), args.get("name")
    if lease_id is None and name is None:
        raise InputError("lease", f"{machine} step {ctx.step_id!r} names neither a lease nor a name")
    if lease_id is not None:
        found = store.get(str(lease_id))
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
        for lease in store.find(machine, states)
        if lease.data.get("name") == name
        and lease.data.get("controller_id") == ctx.controller_id
        and lease.id.partition("/")[2] in keys
    ]
    latest = max(mine, key=lambda lease: lease.created_at or "", default=None)
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


@operation("reviewer.close", _resume_close("reviewer.close", "reviewer", "closed", "closing"))
async def reviewer_close(ctx: OpContext, args: dict[str, Any]) -> Outputs:
    from runner.service import ReviewerCloseInput

    lease = _own_lease(ctx, "reviewer", args, ("active", "close_failed"))
    seq = args.get("expected_seq")
    if seq is None:
        seq = _current_seq(ctx, lease)
    result = ctx.service.reviewer_close(
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


def _decided_reason(ctx: OpContext) -> str | None:
    """A person's decision recorded on this plan (a step that waited on a blocked agent): it is also the
    operator's decision that lets the plan's clean-up close that blocked agent (recorded with the lease)."""
    from runner.plans import get_plan

    for step_id, record in (get_plan(ctx.service.store, ctx.plan_id).data.get("steps") or {}).items():
        decision = record.get("decision") if isinstance(record, dict) else None
        if isinstance(decision, dict) and decision.get("reason"):
            return f"plan {ctx.plan_id}, step {step_id}: {decision['reason']}"
    return None


@operation("writer.start", _resume_start("writer"))
async def writer_start(ctx: OpContext, args: dict[str, Any]) -> Outputs:
    from runner.service import WriterStartInput

    view = ctx.service.writer_start(
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
    result = ctx.service.writer_verify(inp, scratch=ctx.scratch)
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
        facts = ctx.service.preflight(str(lease.data["cwd"]))
        head, status = head or facts["head"], status or facts["status_sha256"]
    seq = args.get("expected_seq")
    result = ctx.service.writer_release(
        WriterReleaseInput(
            ctx.controller_id,
            ctx.credential(),
            name,
            int(_current_seq(ctx, lease) if seq is None else seq),
            str(head),
            str(status),
            str(args["checkpoint_ref"]),
            str(args["checkpoint_sha256"]).lower(),
            int(args.get("lines") or 200),
            blocked_reason=_decided_reason(ctx),
            lease_id=lease.id,
        )
    )
    return Outputs(_close_outputs("writer.release", result.lease), {"output": result.output})


@operation("git.preflight")
async def git_preflight(ctx: OpContext, args: dict[str, Any]) -> Outputs:
    facts = ctx.service.preflight(str(args["worktree"]))
    keys = ("branch", "head", "status_sha256", "linked", "default_branch", "common_dir")
    return Outputs({k: facts[k] for k in keys})


# --- receipts -------------------------------------------------------------------------------------------


def _receipt_outputs(view: Any) -> dict[str, Any]:
    data = view.data
    return {
        "token": data["token"],
        "before_seq": data.get("before_seq"),
        "after_seq": data.get("after_seq"),
        "settled_seq": data.get("settled_seq"),
        "output_sha256": data.get("output_sha256"),
        "state": view.state,
    }


def _resume_receipt(ctx: OpContext, receipt_id: str) -> Resume:
    found = ctx.service.store.get(f"receipt/{receipt_id}")
    if found is None:
        return RUN
    view = ctx.service._receipt_view(found)
    if found.state == "reserved":
        return Resume(
            "pause",
            reason=f"the delivery of receipt {found.data['token']} was never confirmed; observe "
            "the agent, abandon the receipt (corral abandon) if it is settled, then resume the plan",
        )
    if found.state in ("failed", "abandoned"):
        return Resume(
            "fail",
            error=CorralError(
                f"receipt {found.data['token']} is {found.state} ({found.data.get('reason')})",
                code=str(found.data.get("reason") or "receipt_ended"),
            ),
        )
    return Resume("done", Outputs(_receipt_outputs(view)))


@operation("receipt.relay", lambda ctx, args: _resume_receipt(ctx, ctx.key))
async def receipt_relay(ctx: OpContext, args: dict[str, Any]) -> Outputs:
    from runner.service import RelayInput

    view = ctx.service.relay(
        RelayInput(ctx.controller_id, ctx.credential(), str(args["target"]), str(args["text"]), receipt_id=ctx.key)
    )
    return Outputs(_receipt_outputs(view))


async def _collect(ctx: OpContext, token: str, args: Mapping[str, Any]) -> Outputs:
    from runner.service import CollectInput

    (result,) = await ctx.service.collect(
        CollectInput(ctx.controller_id, ctx.credential(), (token,), _timeout(ctx, args), int(args.get("lines") or 200))
    )
    observed_status = "done"
    with contextlib.suppress(CorralError):
        observed_status = ctx.service.host(result.receipt.data["host"]).get(result.receipt.data["pane_id"]).status
    outputs = Outputs({**_receipt_outputs(result.receipt), "status": observed_status}, {"output": result.output})
    if result.receipt.data.get("settled_status") == "blocked":
        name = str(result.receipt.data.get("name"))
        raise AgentBlocked(
            f"{name!r} is blocked: it waits on a person (decide with `corral plans decide`)",
            outputs,
            name,
            result.receipt.data.get("completed_at"),
        )
    return outputs


def _own_receipts(ctx: OpContext, tokens: tuple[str, ...]) -> None:
    """Refuse (skip) a collect or abandon of a receipt this plan did not create."""
    keys = ctx.created_keys()
    for token in tokens:
        receipt = ctx.service._receipt(token)
        if receipt.id.partition("/")[2] not in keys:
            raise NotCreatedByPlan(f"receipt {token} was {NOT_CREATED}; step {ctx.step_id!r} leaves it alone")


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
    results = await ctx.service.collect(
        CollectInput(ctx.controller_id, ctx.credential(), tokens, _timeout(ctx, args), int(args.get("lines") or 200))
    )
    return Outputs(
        {"results": [_receipt_outputs(r.receipt) | {"target": r.receipt.data.get("name")} for r in results]},
        {"outputs": {str(r.receipt.data.get("name")): r.output for r in results}},
    )


def _resume_ask(ctx: OpContext, args: dict[str, Any]) -> Resume:
    resolution = _resume_receipt(ctx, ctx.key)
    return RUN if resolution.kind == "done" else resolution  # done: collecting again is safe (replay)


@operation("receipt.ask", _resume_ask)
async def receipt_ask(ctx: OpContext, args: dict[str, Any]) -> Outputs:
    from runner.service import RelayInput

    existing = ctx.service.store.get(f"receipt/{ctx.key}")
    if existing is None:
        view = ctx.service.relay(
            RelayInput(ctx.controller_id, ctx.credential(), str(args["target"]), str(args["text"]), receipt_id=ctx.key)
        )
        token = view.token
    else:
        token = str(existing.data["token"])
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
    existing = [ctx.service.store.get(f"receipt/{key}") for key in keys]
    if all(found is None for found in existing):
        # Admitted all at once: every receipt reserved in one transaction, or none (a refusal).
        views = ctx.service.relay_many(
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
                tokens.append(str(found.data["token"]))
                continue
            # Only a batch admitted before admission was atomic can be partly reserved.
            view = ctx.service.relay(
                RelayInput(ctx.controller_id, credential, str(request["target"]), str(request["text"]), ctx.key, key)
            )
            tokens.append(view.token)
    mode = str(args.get("mode") or "all")
    timeout = _timeout(ctx, args)
    chosen = tokens
    if mode == "first":
        entries: list[tuple[str, Any, str, int]] = []
        for token in tokens:
            receipt = ctx.service._receipt(token)
            if receipt.state == "completed":
                entries = []
                chosen = [token]
                break
            entries.append(
                (
                    token,
                    ctx.service.host(receipt.data["host"]),
                    str(receipt.data["pane_id"]),
                    int(receipt.data["after_seq"]),
                )
            )
        if entries:
            chosen = [await ctx.service._first_settled(entries, timeout)]
    results = await ctx.service.collect(
        CollectInput(ctx.controller_id, credential, tuple(chosen), timeout, int(args.get("lines") or 200))
    )
    pending = [t for t in tokens if t not in chosen]
    return Outputs(
        {
            "results": [_receipt_outputs(r.receipt) | {"target": r.receipt.data.get("name")} for r in results],
            "pending_receipts": pending,
            "first": results[0].receipt.data.get("name"),
        },
        {"outputs": {str(r.receipt.data.get("name")): r.output for r in results}},
    )


@operation("receipt.abandon")
async def receipt_abandon(ctx: OpContext, args: dict[str, Any]) -> Outputs:
    from runner.service import AbandonInput

    _own_receipts(ctx, (str(args["receipt"]),))
    receipt = ctx.service._receipt(str(args["receipt"]))
    if receipt.state == "abandoned":
        return Outputs({"state": "abandoned"})
    view = ctx.service.abandon(
        AbandonInput(ctx.controller_id, ctx.credential(), str(args["receipt"]), args.get("message"))
    )
    return Outputs({"state": view.state})


@operation("wait.any")
async def wait_any(ctx: OpContext, args: dict[str, Any]) -> Outputs:
    from runner.service import WaitAnyInput

    targets = tuple(
        (str(t["target"]), t.get("after_seq")) if isinstance(t, dict) else (str(t), None) for t in args["targets"]
    )
    result = await ctx.service.wait_any(WaitAnyInput(ctx.controller_id, ctx.credential(), targets, _timeout(ctx, args)))
    return Outputs({"target": result.target, "status": result.observation.status, "seq": result.observation.seq})


# --- flow ------------------------------------------------------------------------------------------------


@operation("flow.pass")
async def flow_pass(ctx: OpContext, args: dict[str, Any]) -> Outputs:
    values = args.get("values")
    return Outputs(dict(values) if isinstance(values, dict) else {})


@operation("flow.fail")
async def flow_fail(ctx: OpContext, args: dict[str, Any]) -> Outputs:
    raise StepFailed(str(args.get("message") or f"step {ctx.step_id} failed on purpose"), code=str(args["code"]))


@operation("recipe.call")
async def recipe_call(ctx: OpContext, args: dict[str, Any]) -> Outputs:
    child_id = f"{ctx.plan_id}.{ctx.step_id}"
    final = await ctx.executor.run_child(
        child_id,
        str(args["recipe"]),
        dict(args.get("inputs") or {}),
        ctx.controller_id,
        parent=f"{ctx.plan_id}/{ctx.step_id}",
    )
    steps = {sid: rec.get("outputs", {}) for sid, rec in (final.data.get("steps") or {}).items()}
    if final.state != "succeeded":
        failure = final.data.get("failure") or {}
        raise StepFailed(
            f"the called plan {child_id} ended {final.state}: {failure.get('message')}",
            code=str(failure.get("code") or "plan_failed"),
            plan=child_id,
        )
    return Outputs({"plan": child_id, "state": final.state, "steps": steps})
