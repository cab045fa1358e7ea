"""A call's credential over HTTP: read from the ``Corral-Credential`` header, a grant's handed back."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from runner.errors import CredentialError

if TYPE_CHECKING:
    from runner.fence import Credential


class HeaderKeeper:
    """A call's credential from the request's ``Corral-Credential`` header; a grant's is handed back."""

    def __init__(self, header: str | None) -> None:
        self.header = header
        self.issued: Credential | None = None

    def load(self, controller_id: str) -> Credential:
        from runner.fence import Credential

        if not self.header:
            raise CredentialError(
                f"controller {controller_id!r}: present the lease's credential in the Corral-Credential header "
                "(the grant's response handed it out)",
                code="credential_missing",
                controller_id=controller_id,
            )
        parts = self.header.strip().split(".")
        if len(parts) != 4 or parts[0] != "v1" or not parts[2].isdigit() or not parts[3]:
            raise CredentialError(
                "the Corral-Credential header is not a credential (v1.LEASE.GENERATION.TOKEN)",
                code="credential_corrupt",
            )
        return Credential(controller_id, parts[1], int(parts[2]), parts[3])

    def grant(self, controller_id: str, fire: Any, keep_binding: bool = False) -> Any:
        from runner.fence import Proposal
        from runner.service.checks import check_controller_id

        check_controller_id(controller_id)
        granted = fire(Proposal.new())
        self.issued = granted.credential
        return granted

    def discard(self, controller_id: str, credential: Credential) -> None:
        """Nothing is kept server-side: the caller drops its copy."""


def credential_header(credential: Credential) -> str:
    """What a grant hands out and later calls present: ``v1.<lease id>.<generation>.<token>``."""
    return f"v1.{credential.lease_id}.{credential.generation}.{credential.token}"
