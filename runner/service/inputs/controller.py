"""The controller lease's inputs: acquire, renew, resume, takeover, release, list."""

from __future__ import annotations

from dataclasses import dataclass, field

from runner import fence
from runner.errors import InputError
from runner.service.checks import (
    TTL_DEFAULT,
    UUID,
    check_controller_id,
    check_holder,
    check_ref,
    check_sha256,
    check_ttl,
)
from runner.service.inputs.base import FencedInput, ListingInput


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
class RenewInput(FencedInput):
    """Extend the lease the credential holds; ``ttl_seconds`` defaults to the lease's own."""

    ttl_seconds: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        check_ttl(self.ttl_seconds)


@dataclass(frozen=True)
class ResumeInput(FencedInput):
    """Continue one's own lease (even expired) with a new token and the next generation."""

    ttl_seconds: int | None = None
    holder: str | None = None
    proposal: fence.Proposal | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        super().__post_init__()
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
class ReleaseInput(FencedInput):
    """Give the lease up, recording where the work stands."""

    checkpoint_ref: str
    checkpoint_sha256: str | None
    """The checkpoint's SHA-256; None only with a ``memory:<id>`` ref, whose digest the service fills."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_ref("checkpoint_ref", self.checkpoint_ref)
        if self.checkpoint_sha256 is not None or not self.checkpoint_ref.startswith("memory:"):
            check_sha256("checkpoint_sha256", self.checkpoint_sha256)  # type: ignore[arg-type]  # reason: None is refused here


@dataclass(frozen=True)
class ListLeasesInput(ListingInput):
    """Controller leases (or one), with expiry judged now; never a secret.

    Held (``active``) ones only unless ``include_ended`` (which adds released ones); one
    ``controller_id`` is shown in any state. ``after`` (a controller id: the previous page's
    ``next_after``) and ``limit`` page through them in controller id order.
    """
