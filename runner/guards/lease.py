"""Guards of the controller lease: the fence, expiry, and the predecessor named by a takeover."""

from __future__ import annotations

from runner import fence
from runner.context import Context, Rejection
from runner.guards import GUARDS


def credential_of(ctx: Context) -> fence.Credential:
    """The credential presented with the request (public parts in params, the token in secrets)."""
    return fence.Credential(
        controller_id=str(ctx.params["controller_id"]),
        lease_id=str(ctx.params["lease_id"]),
        generation=int(ctx.params["generation"]),
        token=ctx.secrets.get("token", ""),
    )


@GUARDS.register("fence")
def fence_guard(ctx: Context, allow_expired: bool = False) -> Rejection | None:
    """The caller's credential holds the controller lease now (and it has not expired)."""
    credential = credential_of(ctx)
    lease_id = fence.instance_id(credential.controller_id)
    # On the controller machine the lease is the instance the engine just read in this transaction.
    lease = ctx.instance if ctx.instance.id == lease_id else ctx.view.get(lease_id)
    return fence.check(lease, credential, ctx.now, allow_expired=allow_expired)


@GUARDS.register("lease_expired")
def lease_expired(ctx: Context) -> Rejection | None:
    """The lease has expired by the store's clock (a takeover may not cut a live lease short)."""
    if fence.is_expired(ctx.instance, ctx.now):
        return None
    return Rejection(
        "lease_not_expired",
        f"the lease is live until {ctx.instance.data.get('expires_at')}; only an expired lease can be taken over",
        {"expires_at": ctx.instance.data.get("expires_at")},
    )


@GUARDS.register("lease_predecessor")
def lease_predecessor(ctx: Context) -> Rejection | None:
    """The lease is still the grant the caller saw (the takeover names it as its predecessor)."""
    expected = ctx.params.get("expected_lease_id")
    current = ctx.instance.data.get("lease_id")
    if expected == current:
        return None
    return Rejection(
        "lease_mismatch",
        f"the lease id {expected!r} does not match the current lease {current!r} (`corral controller list` "
        "shows it); take over only the lease you saw expire",
        {"expected_lease_id": expected, "current_lease_id": current},
    )
