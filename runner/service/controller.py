"""The controller lease operations: acquire, renew, resume, takeover, release, list."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from runner import fence
from runner.context import Instance
from runner.definitions.model import MachineSpec
from runner.engine import Request, Result
from runner.errors import InputError, NotFoundError, RefusedError, TransitionNotAllowedError
from runner.fence import Credential
from runner.service.base import ServiceBase
from runner.service.checks import (
    TTL_DEFAULT,
    UUID,
    check_controller_id,
    check_credential,
    check_holder,
    check_ref,
    check_sha256,
    check_ttl,
    default_holder,
)


@dataclass(frozen=True)
class AcquireInput:
    """Take the lease of a controller id that nobody holds."""

    controller_id: str
    authority_ref: str
    authority_sha256: str
    ttl_seconds: int = TTL_DEFAULT
    holder: str | None = None
    proposal: fence.Proposal | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        check_controller_id(self.controller_id)
        check_ref("authority_ref", self.authority_ref)
        check_sha256("authority_sha256", self.authority_sha256)
        check_ttl(self.ttl_seconds, required=True)
        check_holder(self.holder)


@dataclass(frozen=True)
class RenewInput:
    """Extend the lease the credential holds; ``ttl_seconds`` defaults to the lease's own."""

    controller_id: str
    credential: Credential
    ttl_seconds: int | None = None

    def __post_init__(self) -> None:
        check_controller_id(self.controller_id)
        check_credential(self.credential, self.controller_id)
        check_ttl(self.ttl_seconds)


@dataclass(frozen=True)
class ResumeInput:
    """Continue one's own lease (even expired) with a new token and the next generation."""

    controller_id: str
    credential: Credential
    ttl_seconds: int | None = None
    holder: str | None = None
    proposal: fence.Proposal | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        check_controller_id(self.controller_id)
        check_credential(self.credential, self.controller_id)
        check_ttl(self.ttl_seconds)
        check_holder(self.holder)


@dataclass(frozen=True)
class TakeoverInput:
    """Claim another holder's expired lease, naming the lease id seen expire."""

    controller_id: str
    expected_lease_id: str
    ttl_seconds: int = TTL_DEFAULT
    holder: str | None = None
    authority_ref: str | None = None
    authority_sha256: str | None = None
    proposal: fence.Proposal | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        check_controller_id(self.controller_id)
        if not isinstance(self.expected_lease_id, str) or not UUID.match(self.expected_lease_id):
            raise InputError("expected_lease_id", f"{self.expected_lease_id!r} is not a lease id (a UUID)")
        check_ttl(self.ttl_seconds, required=True)
        check_holder(self.holder)
        if (self.authority_ref is None) != (self.authority_sha256 is None):
            raise InputError(
                "authority_sha256" if self.authority_ref else "authority_ref",
                "authority_ref and authority_sha256 go together",
            )
        if self.authority_ref is not None and self.authority_sha256 is not None:
            check_ref("authority_ref", self.authority_ref)
            check_sha256("authority_sha256", self.authority_sha256)


@dataclass(frozen=True)
class ReleaseInput:
    """Give the lease up, recording where the work stands."""

    controller_id: str
    credential: Credential
    checkpoint_ref: str
    checkpoint_sha256: str

    def __post_init__(self) -> None:
        check_controller_id(self.controller_id)
        check_credential(self.credential, self.controller_id)
        check_ref("checkpoint_ref", self.checkpoint_ref)
        check_sha256("checkpoint_sha256", self.checkpoint_sha256)


@dataclass(frozen=True)
class ListLeasesInput:
    """Every controller lease (or one), with expiry judged now; never a secret."""

    controller_id: str | None = None

    def __post_init__(self) -> None:
        if self.controller_id is not None:
            check_controller_id(self.controller_id)


@dataclass(frozen=True)
class LeaseView:
    """A lease as listings show it: every public field, the expiry judged by the store's clock."""

    controller_id: str
    state: str
    version: int
    expired: bool
    data: Mapping[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {
            "controller_id": self.controller_id,
            "state": self.state,
            "expired": self.expired,
            "version": self.version,
            **{k: v for k, v in self.data.items() if k != "controller_id"},
        }


@dataclass(frozen=True)
class Grant:
    """A newly issued lease. ``credential`` holds the token: hand it over once, never log it."""

    lease: LeaseView
    credential: Credential = field(repr=False)
    event_seq: int


class ControllerOps(ServiceBase):
    """The controller lease."""

    # --- controller lease -----------------------------------------------------------------------

    def _controller(self) -> MachineSpec:
        return self.library.builtin("controller")

    def _fire(
        self,
        controller_id: str,
        trigger: str,
        params: dict[str, Any],
        token: str | None = None,
        proposal: fence.Proposal | None = None,
    ) -> Result:
        spec = self._controller()
        secrets = {"token": token} if token is not None else {}
        if proposal is not None:
            params = {**params, "proposed_lease_id": proposal.lease_id}
            secrets["proposed_token"] = proposal.token
        request = Request(
            instance_id=fence.instance_id(controller_id),
            trigger=trigger,
            params={"controller_id": controller_id, **{k: v for k, v in params.items() if v is not None}},
            secrets=secrets,
            actor=self.actor,
        )
        try:
            return self.engine.fire(spec, request)
        except TransitionNotAllowedError as exc:
            if token is None:
                raise
            # A credential for a lease that is no longer active is stale, whatever the trigger.
            raise RefusedError(
                f"the lease of controller {controller_id!r} is {exc.details.get('state')}: the credential is stale",
                code="fence_stale",
                controller_id=controller_id,
                state=exc.details.get("state"),
            ) from None
        except NotFoundError as exc:
            if exc.code != "instance_unknown":
                raise
            raise NotFoundError(
                f"no lease was ever granted for controller {controller_id!r}; acquire it first",
                code="controller_unknown",
                controller_id=controller_id,
            ) from None

    def _grant(self, result: Result) -> Grant:
        data = result.instance.data
        credential = Credential(data["controller_id"], data["lease_id"], data["generation"], result.reply["token"])
        return Grant(self._view(result.instance), credential, result.events[-1].seq)

    def _view(self, instance: Instance) -> LeaseView:
        spec = self._controller()
        expired = instance.state == "active" and fence.is_expired(instance, self.store.now())
        return LeaseView(
            instance.data["controller_id"], instance.state, instance.version, expired, spec.public_data(instance.data)
        )

    def controller_lease(self, controller_id: str) -> LeaseView | None:
        """The lease of ``controller_id`` (any state), or None if it never had one."""
        found = self.store.get(fence.instance_id(controller_id))
        return None if found is None else self._view(found)

    def holds(self, credential: Credential, *, allow_expired: bool = False) -> bool:
        """Whether ``credential`` holds its controller's lease now (read only; nothing is recorded)."""
        lease = self.store.get(fence.instance_id(credential.controller_id))
        return fence.check(lease, credential, self.store.now(), allow_expired=allow_expired) is None

    def acquire(self, inp: AcquireInput) -> Grant:
        """Take the lease; refused with ``lease_held`` while any lease is active, even an expired one."""
        try:
            result = self._fire(
                inp.controller_id,
                "acquire",
                {
                    "ttl_seconds": inp.ttl_seconds,
                    "holder": inp.holder or default_holder(),
                    "authority_ref": inp.authority_ref,
                    "authority_sha256": inp.authority_sha256,
                },
                proposal=inp.proposal,
            )
        except TransitionNotAllowedError:
            current = self.store.get(fence.instance_id(inp.controller_id))
            view = self._view(current) if current else None
            how = "take it over (it has expired)" if view and view.expired else "wait for its release or expiry"
            raise RefusedError(
                f"controller {inp.controller_id!r} is held (lease {view.data.get('lease_id') if view else '?'}, "
                f"{'expired' if view and view.expired else 'live'}); its holder may resume it, others may {how}",
                code="lease_held",
                controller_id=inp.controller_id,
                expired=view.expired if view else None,
                lease_id=view.data.get("lease_id") if view else None,
                expires_at=view.data.get("expires_at") if view else None,
            ) from None
        return self._grant(result)

    def renew(self, inp: RenewInput) -> LeaseView:
        """Extend the lease; the fence is unchanged. Refused: ``fence_stale``, ``lease_expired``."""
        result = self._fire(
            inp.controller_id,
            "renew",
            {
                "lease_id": inp.credential.lease_id,
                "generation": inp.credential.generation,
                "ttl_seconds": inp.ttl_seconds,
            },
            token=inp.credential.token,
        )
        return self._view(result.instance)

    def resume(self, inp: ResumeInput) -> Grant:
        """Re-grant one's own lease with a new token and generation; the old token dies now."""
        result = self._fire(
            inp.controller_id,
            "resume",
            {
                "lease_id": inp.credential.lease_id,
                "generation": inp.credential.generation,
                "ttl_seconds": inp.ttl_seconds,
                "holder": inp.holder,
            },
            token=inp.credential.token,
            proposal=inp.proposal,
        )
        return self._grant(result)

    def takeover(self, inp: TakeoverInput) -> Grant:
        """Claim an expired lease. Refused: ``lease_not_expired``, ``lease_mismatch``."""
        try:
            result = self._fire(
                inp.controller_id,
                "takeover",
                {
                    "expected_lease_id": inp.expected_lease_id,
                    "ttl_seconds": inp.ttl_seconds,
                    "holder": inp.holder or default_holder(),
                    "authority_ref": inp.authority_ref,
                    "authority_sha256": inp.authority_sha256,
                },
                proposal=inp.proposal,
            )
        except TransitionNotAllowedError as exc:
            raise RefusedError(
                f"controller {inp.controller_id!r} is not held (it is {exc.details.get('state')}): acquire it instead",
                code="lease_not_held",
                controller_id=inp.controller_id,
                state=exc.details.get("state"),
            ) from None
        return self._grant(result)

    def release(self, inp: ReleaseInput) -> LeaseView:
        """Give the lease up with a checkpoint (allowed after expiry unless someone took it over)."""
        result = self._fire(
            inp.controller_id,
            "release",
            {
                "lease_id": inp.credential.lease_id,
                "generation": inp.credential.generation,
                "checkpoint_ref": inp.checkpoint_ref,
                "checkpoint_sha256": inp.checkpoint_sha256,
            },
            token=inp.credential.token,
        )
        return self._view(result.instance)

    def leases(self, inp: ListLeasesInput) -> list[LeaseView]:
        """Leases by controller id, with ``expired`` judged by the store's clock."""
        if inp.controller_id is not None:
            found = self.store.get(fence.instance_id(inp.controller_id))
            if found is None:
                raise NotFoundError(
                    f"no lease was ever granted for controller {inp.controller_id!r}",
                    code="controller_unknown",
                    controller_id=inp.controller_id,
                )
            return [self._view(found)]
        return [self._view(i) for i in self.store.find("controller")]
