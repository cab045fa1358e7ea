"""``controller.acquire`` and ``controller.release``: the plan's controller lease."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from runner import fence
from runner.errors import CorralError, CredentialError, NotFoundError, RefusedError
from runner.plans.ops.base import checkpoint_sha256, operation
from runner.service.steps import RUN, OpContext, Outputs, Resume


def _resume_acquire(ctx: OpContext, args: dict[str, Any]) -> Resume:
    """An acquire in flight: run it again (it renews a credential that holds the lease), unless the lease
    is held and the credential kept here does not hold it: then a person must decide."""
    lease = ctx.service.controller.controller_lease(ctx.controller_id)
    if lease is None or lease.state != "active":
        return RUN
    try:
        held = ctx.credentials.load(ctx.controller_id)
    except CredentialError:
        held = None
    if held is not None and ctx.service.controller.holds(held, allow_expired=True):
        return RUN
    return Resume(
        "pause",
        reason=f"controller {ctx.controller_id!r} is held by lease {lease.data.get('lease_id')} "
        "whose credential is not kept here (a runner may have died between the grant and saving it); "
        "wait for it to expire and `corral controller takeover`, or release it, then resume the plan",
    )


@operation("controller.acquire", _resume_acquire)
async def controller_acquire(ctx: OpContext, args: dict[str, Any]) -> Outputs:
    from runner.service import AcquireInput, RenewInput, ResumeInput

    service = ctx.service
    keeper = ctx.credentials
    try:
        held = keeper.load(ctx.controller_id)
    except CredentialError:
        held = None
    ttl = args.get("ttl_seconds")
    if held is not None:
        # A live credential is shared, not replaced: other plans of this controller may hold it too,
        # and a resume would fence them out. Renew it; resume only an expired one.
        try:
            lease = service.controller.renew(RenewInput(ctx.controller_id, held, ttl))
            return _lease_fields(lease.data)
        except RefusedError as exc:
            if exc.code != "lease_expired":
                held = None  # stale: the lease moved on without us; acquire afresh below
        except NotFoundError:
            held = None
    # Keep the credential-to-be before the grant commits: a runner killed in between leaves a
    # credential that either holds the lease (the grant happened) or is stale (it did not).
    current = service.controller.controller_lease(ctx.controller_id)
    proposal = fence.Proposal.new()
    generation = int((current.data.get("generation") if current else 0) or 0) + 1
    keeper.save(fence.Credential(ctx.controller_id, proposal.lease_id, generation, proposal.token))
    try:
        if held is not None:
            grant = service.controller.resume(ResumeInput(ctx.controller_id, held, ttl, proposal=proposal))
        else:
            grant = service.controller.acquire(
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
    lease = ctx.service.controller.controller_lease(ctx.controller_id)
    if lease is not None and lease.state == "released":
        return Resume("done", Outputs({"state": "released"}))
    return RUN


@operation("controller.release", _resume_release)
async def controller_release(ctx: OpContext, args: dict[str, Any]) -> Outputs:
    from runner.service import ReleaseInput

    # Other plans of this controller still running (run together, or by another runner) share its
    # credential: releasing it would fence them out, so it stays held for the last one to release.
    others = [
        str(p.data.get("plan_id"))
        for p in ctx.service.store.find("plan", ("running", "paused"))
        if p.data.get("controller_id") == ctx.controller_id and p.data.get("plan_id") != ctx.plan_id
    ]
    if others:
        return Outputs({"state": "active", "kept_for": sorted(others)})
    held = ctx.credential()
    ref = str(args["checkpoint_ref"])
    digest = checkpoint_sha256(args)
    if digest is None and not ref.startswith("memory:"):
        digest = hashlib.sha256(ref.encode()).hexdigest()  # a ref that is its own record: its text's digest
    lease = ctx.service.controller.release(ReleaseInput(ctx.controller_id, held, ref, digest))
    ctx.credentials.remove(ctx.controller_id, held)  # not a successor's, written meanwhile
    return Outputs({"state": lease.state})
