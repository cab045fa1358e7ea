"""The controller lease's inputs: acquire, renew, resume, takeover, release, list."""

from __future__ import annotations

from dataclasses import field

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
from runner.service.inputs.fields import described, input_class


@input_class
class AcquireInput:
    """Take the lease of a controller id that nobody holds."""

    controller_id: str = described(
        "controller", "The controller id whose lease you hold (its credential stays on the server)."
    )
    authority_ref: str = described("authority_ref", "What authorises this controller (ticket, plan, URL).")
    authority_sha256: str = described(
        "authority_sha256", "SHA-256 of the authority document (64 hex digits).", lower=True
    )
    ttl_seconds: int = described(
        "ttl_seconds", "Lease time to live in seconds, 5-86400.", default=TTL_DEFAULT, was="ttl"
    )
    holder: str | None = described(
        "holder", "Who holds it, for listings (default: user@host of the server).", default=None
    )
    proposal: fence.Proposal | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        check_controller_id(self.controller_id)
        check_ref("authority_ref", self.authority_ref)
        check_sha256("authority_sha256", self.authority_sha256)
        check_ttl(self.ttl_seconds, required=True)
        check_holder(self.holder)


@input_class
class RenewInput(FencedInput):
    """Extend the lease the credential holds; ``ttl_seconds`` defaults to the lease's own."""

    ttl_seconds: int | None = described(
        "ttl_seconds", "Lease time to live in seconds, 5-86400 (default: the lease's own).", default=None, was="ttl"
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        check_ttl(self.ttl_seconds)


@input_class
class ResumeInput(FencedInput):
    """Continue one's own lease (even expired) with a new token and the next generation."""

    ttl_seconds: int | None = described(
        "ttl_seconds", "Lease time to live in seconds, 5-86400 (default: the lease's own).", default=None, was="ttl"
    )
    holder: str | None = described(
        "holder", "Who holds it, for listings (default: user@host of the server).", default=None
    )
    proposal: fence.Proposal | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_ttl(self.ttl_seconds)
        check_holder(self.holder)


@input_class
class TakeoverInput:
    """Claim another holder's expired lease, naming the lease id seen expire."""

    controller_id: str = described(
        "controller", "The controller id whose lease you hold (its credential stays on the server)."
    )
    expected_lease_id: str = described("expect_lease", "The lease id you saw expire (corral_controller_list).")
    ttl_seconds: int = described("ttl_seconds", "Time to live in seconds, 5-86400.", default=TTL_DEFAULT, was="ttl")
    holder: str | None = described(
        "holder", "Who holds it, for listings (default: user@host of the server).", default=None
    )
    authority_ref: str | None = described(
        "authority_ref", "A new authority reference (default: keep the predecessor's).", default=None
    )
    authority_sha256: str | None = described(
        "authority_sha256", "Its SHA-256 (64 hex digits), with authority_ref.", default=None, lower=True
    )
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


@input_class
class ReleaseInput(FencedInput):
    """Give the lease up, recording where the work stands."""

    checkpoint_ref: str = described(
        "checkpoint_ref",
        "Where the handoff checkpoint is (a file, a URL, a ticket), or memory:<id> (corral_memory_checkpoint's ref: a"
        " checkpoint of the project named as the controller id).",
    )
    checkpoint_sha256: str | None = described(
        "checkpoint_sha256",
        "SHA-256 of the checkpoint (64 hex digits); with a memory:<id> ref optional (filled from its content,"
        " or checked against it).",
        required=False,
        lower=True,
    )
    """The checkpoint's SHA-256; None only with a ``memory:<id>`` ref, whose digest the service fills."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_ref("checkpoint_ref", self.checkpoint_ref)
        if self.checkpoint_sha256 is not None or not self.checkpoint_ref.startswith("memory:"):
            check_sha256("checkpoint_sha256", self.checkpoint_sha256)  # type: ignore[arg-type]  # reason: None is refused here


@input_class
class ListLeasesInput(ListingInput):
    """Controller leases (or one), with expiry judged now; never a secret.

    Held (``active``) ones only unless ``include_ended`` (which adds released ones); one
    ``controller_id`` is shown in any state. ``after`` (a controller id: the previous page's
    ``next_after``) and ``limit`` page through them in controller id order.
    """
