"""The controller lease operations: acquire, renew, resume, takeover, release, list."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from runner import fence
from runner.context import Instance
from runner.definitions.model import MachineSpec
from runner.engine import Request, Result
from runner.errors import NotFoundError, RefusedError, TransitionNotAllowedError
from runner.fence import Credential
from runner.service.checks import default_holder
from runner.service.core import Core
from runner.service.views.controller import Grant, LeaseView
from runner.service.views.pages import Page

if TYPE_CHECKING:
    from runner.service.inputs.controller import (
        AcquireInput,
        ListLeasesInput,
        ReleaseInput,
        RenewInput,
        ResumeInput,
        TakeoverInput,
    )


class Controller:
    """The controller lease: acquire, renew, resume, takeover, release, list, and read-only checks."""

    def __init__(self, core: Core) -> None:
        self.core = core

    def _controller(self) -> MachineSpec:
        return self.core.library.builtin("controller")

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
            actor=self.core.actor,
        )
        try:
            return self.core.engine.fire(spec, request)
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
        expired = instance.state == "active" and fence.is_expired(instance, self.core.store.now())
        return LeaseView(
            instance.data["controller_id"], instance.state, instance.version, expired, spec.public_data(instance.data)
        )

    def controller_lease(self, controller_id: str) -> LeaseView | None:
        """The lease of ``controller_id`` (any state), or None if it never had one."""
        found = self.core.store.get(fence.instance_id(controller_id))
        return None if found is None else self._view(found)

    def holds(self, credential: Credential, *, allow_expired: bool = False) -> bool:
        """Whether ``credential`` holds its controller's lease now (read only; nothing is recorded)."""
        lease = self.core.store.get(fence.instance_id(credential.controller_id))
        return fence.check(lease, credential, self.core.store.now(), allow_expired=allow_expired) is None

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
            current = self.core.store.get(fence.instance_id(inp.controller_id))
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
        """Give the lease up with a checkpoint (allowed after expiry unless someone took it over).

        A ``memory:<id>`` checkpoint must be of the project named as the controller id; its
        ref and digest are filled from its content (a given digest must match).
        """
        checkpoint_ref, checkpoint_sha256 = inp.checkpoint_ref, inp.checkpoint_sha256
        if checkpoint_ref.startswith("memory:"):
            from runner.service.memory import Memory

            checkpoint_ref, checkpoint_sha256 = Memory(self.core).resolve_ref(
                checkpoint_ref, checkpoint_sha256, project=inp.controller_id
            )
        result = self._fire(
            inp.controller_id,
            "release",
            {
                "lease_id": inp.credential.lease_id,
                "generation": inp.credential.generation,
                "checkpoint_ref": checkpoint_ref,
                "checkpoint_sha256": checkpoint_sha256,
            },
            token=inp.credential.token,
        )
        return self._view(result.instance)

    def leases(self, inp: ListLeasesInput) -> Page[LeaseView]:
        """Leases by controller id, with ``expired`` judged by the store's clock: held ones only unless
        ``inp.include_ended``, a page of ``inp.limit`` after the controller id ``inp.after``."""
        if inp.controller_id is not None:
            found = self.core.store.get(fence.instance_id(inp.controller_id))
            if found is None:
                raise NotFoundError(
                    f"no lease was ever granted for controller {inp.controller_id!r}",
                    code="controller_unknown",
                    controller_id=inp.controller_id,
                )
            return Page([self._view(found)])
        after = None if inp.after is None else fence.instance_id(inp.after)
        states = None if inp.include_ended else ("active",)
        found_page, more = self.core.page("controller", states, after=after, limit=inp.limit)
        views = [self._view(i) for i in found_page]
        return Page(views, views[-1].controller_id if more else None)
