"""Updates of the controller lease: grants, renewals, authority and checkpoints."""

from __future__ import annotations

import uuid
from datetime import timedelta

from runner import fence
from runner.context import Context, Update, format_time
from runner.updates import UPDATES


@UPDATES.register("issue_lease")
def issue_lease(ctx: Context) -> Update:
    """Grant a new lease: new lease id, generation + 1, a fresh token (returned once), new expiry."""
    previous = ctx.instance.data
    ttl = int(ctx.params.get("ttl_seconds") or previous.get("ttl_seconds") or 0)
    if ttl <= 0:
        raise ValueError("issue_lease needs ttl_seconds")  # the service validates it; this is a bug
    # A caller may have chosen the lease id and token beforehand (fence.Proposal), to keep the
    # credential safe across a crash; otherwise they are drawn here.
    token = ctx.secrets.get("proposed_token") or fence.new_token()
    data = {
        "controller_id": ctx.params["controller_id"],
        "lease_id": str(ctx.params.get("proposed_lease_id") or uuid.uuid4()),
        # Invariant: generations only grow, across releases and re-acquires too.
        "generation": int(previous.get("generation") or 0) + 1,
        "token_sha256": fence.hash_token(token),
        "holder": ctx.params.get("holder") or previous.get("holder"),
        "ttl_seconds": ttl,
        "issued_at": format_time(ctx.now),
        "renewed_at": None,
        "expires_at": format_time(ctx.now + timedelta(seconds=ttl)),
        "predecessor_lease_id": previous.get("lease_id") if ctx.instance.state == "active" else None,
        "checkpoint_ref": None,
        "checkpoint_sha256": None,
        "released_at": None,
    }
    return Update(data=data, reply={"token": token})


@UPDATES.register("extend_lease")
def extend_lease(ctx: Context) -> Update:
    """Push the expiry out by the TTL (the one given, else the lease's own); the fence is unchanged."""
    ttl = int(ctx.params.get("ttl_seconds") or ctx.data["ttl_seconds"])
    return Update(
        data={
            "ttl_seconds": ttl,
            "renewed_at": format_time(ctx.now),
            "expires_at": format_time(ctx.now + timedelta(seconds=ttl)),
        }
    )


@UPDATES.register("record_authority")
def record_authority(ctx: Context, optional: bool = False) -> Update:
    """Record what authorises the controller (reference and SHA-256); kept as is when optional and absent."""
    if ctx.params.get("authority_ref") is None:
        if optional:
            return Update()
        raise ValueError("record_authority needs authority_ref")  # the service validates it; this is a bug
    return Update(
        data={"authority_ref": ctx.params["authority_ref"], "authority_sha256": ctx.params["authority_sha256"]}
    )


@UPDATES.register("record_checkpoint")
def record_checkpoint(ctx: Context) -> Update:
    """Record where the released work stands and retire the token for good."""
    return Update(
        data={
            "checkpoint_ref": ctx.params["checkpoint_ref"],
            "checkpoint_sha256": ctx.params["checkpoint_sha256"],
            "released_at": format_time(ctx.now),
            "token_sha256": None,
        }
    )
