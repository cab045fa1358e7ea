"""The controller lease through the service: every rule of machines/controller.yaml, by example."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from runner.errors import InputError, NotFoundError, RefusedError
from runner.fence import Credential, hash_token
from runner.service import (
    AcquireInput,
    EventsInput,
    Grant,
    ListLeasesInput,
    ReleaseInput,
    RenewInput,
    ResumeInput,
    Service,
    TakeoverInput,
)
from runner.store import Store

SHA = "a" * 64
Acquire = Callable[..., Grant]


def refused(code: str, call: Callable[[], Any]) -> RefusedError:
    with pytest.raises(RefusedError) as caught:
        call()
    assert caught.value.code == code, caught.value.to_dict()
    return caught.value


def test_acquire_issues_generation_one_and_a_token_stored_only_hashed(
    acquire: Acquire, service: Service, store: Store
) -> None:
    grant = acquire()
    assert grant.lease.state == "active" and not grant.lease.expired
    assert grant.credential.generation == 1 and len(grant.credential.token) == 32
    stored = store.get("controller/ctl")
    assert stored is not None
    assert stored.data["token_sha256"] == hash_token(grant.credential.token)
    assert grant.credential.token not in json.dumps(dict(stored.data))
    assert "token_sha256" not in grant.lease.to_dict()
    assert (
        grant.lease.data["authority_ref"] == "TICKET-1"
        and grant.lease.data["expires_at"] == "2026-01-01T00:01:00.000000Z"
    )


def test_acquire_is_refused_while_held_even_expired(acquire: Acquire, clock: Any) -> None:
    acquire()
    error = refused("lease_held", acquire)
    assert error.details["expired"] is False
    clock.advance(3600)
    error = refused("lease_held", acquire)
    assert error.details["expired"] is True and "take it over" in error.message


def test_renew_extends_expiry_and_keeps_the_fence(acquire: Acquire, service: Service, clock: Any) -> None:
    grant = acquire(ttl=60)
    clock.advance(50)
    lease = service.controller.renew(RenewInput("ctl", grant.credential))
    assert lease.data["expires_at"] == "2026-01-01T00:01:50.000000Z"
    assert lease.data["generation"] == 1 and lease.data["lease_id"] == grant.credential.lease_id
    longer = service.controller.renew(RenewInput("ctl", grant.credential, ttl_seconds=600))
    assert longer.data["ttl_seconds"] == 600 and longer.data["expires_at"] == "2026-01-01T00:10:50.000000Z"


def test_renew_after_expiry_is_refused_and_resume_continues(acquire: Acquire, service: Service, clock: Any) -> None:
    grant = acquire(ttl=60)
    clock.advance(60)  # expiry is inclusive: at expires_at the lease is over
    refused("lease_expired", lambda: service.controller.renew(RenewInput("ctl", grant.credential)))
    resumed = service.controller.resume(ResumeInput("ctl", grant.credential))
    assert resumed.credential.generation == 2
    assert resumed.credential.lease_id != grant.credential.lease_id
    assert resumed.lease.data["predecessor_lease_id"] == grant.credential.lease_id
    refused("fence_stale", lambda: service.controller.renew(RenewInput("ctl", grant.credential)))
    refused("fence_stale", lambda: service.controller.resume(ResumeInput("ctl", grant.credential)))
    assert service.controller.renew(RenewInput("ctl", resumed.credential)).data["generation"] == 2


@pytest.mark.parametrize(
    "tamper",
    [
        lambda c: replace(c, token="0" * 32),
        lambda c: replace(c, generation=c.generation - 1),
        lambda c: replace(c, generation=c.generation + 1),
        lambda c: replace(c, lease_id="00000000-0000-0000-0000-000000000000"),
    ],
    ids=["wrong-token", "older-generation", "newer-generation", "other-lease"],
)
def test_any_wrong_part_of_the_credential_is_stale(
    acquire: Acquire, service: Service, tamper: Callable[[Credential], Credential]
) -> None:
    grant = acquire()
    service.controller.resume(ResumeInput("ctl", grant.credential))
    current = service.controller.leases(ListLeasesInput("ctl"))[0]
    good = Credential("ctl", current.data["lease_id"], current.data["generation"], "")
    bad = tamper(replace(good, token=grant.credential.token))
    error = refused("fence_stale", lambda: service.controller.renew(RenewInput("ctl", bad)))
    assert grant.credential.token not in json.dumps(error.to_dict())


def test_takeover_only_after_expiry_and_only_of_the_lease_seen(acquire: Acquire, service: Service, clock: Any) -> None:
    grant = acquire(ttl=60)
    seen = grant.credential.lease_id
    refused("lease_not_expired", lambda: service.controller.takeover(TakeoverInput("ctl", seen, holder="b@host")))
    clock.advance(61)
    other = "11111111-2222-3333-4444-555555555555"
    refused("lease_mismatch", lambda: service.controller.takeover(TakeoverInput("ctl", other, holder="b@host")))
    taken = service.controller.takeover(TakeoverInput("ctl", seen, ttl_seconds=120, holder="b@host"))
    assert taken.credential.generation == 2 and taken.lease.data["holder"] == "b@host"
    assert taken.lease.data["authority_ref"] == "TICKET-1", "authority kept when none is given"
    # The old holder is fenced out for good, even for resume.
    refused("fence_stale", lambda: service.controller.renew(RenewInput("ctl", grant.credential)))
    refused("fence_stale", lambda: service.controller.resume(ResumeInput("ctl", grant.credential)))
    # A second taker that saw the same expired lease loses: the lease moved on.
    clock.advance(500)
    refused("lease_mismatch", lambda: service.controller.takeover(TakeoverInput("ctl", seen, holder="c@host")))


def test_takeover_may_record_a_new_authority(acquire: Acquire, service: Service, clock: Any) -> None:
    grant = acquire(ttl=60)
    clock.advance(61)
    taken = service.controller.takeover(TakeoverInput("ctl", grant.credential.lease_id, 60, None, "TICKET-2", "b" * 64))
    assert (taken.lease.data["authority_ref"], taken.lease.data["authority_sha256"]) == ("TICKET-2", "b" * 64)


def test_release_records_a_checkpoint_and_generations_keep_growing(
    acquire: Acquire, service: Service, clock: Any
) -> None:
    grant = acquire(ttl=60)
    clock.advance(120)  # release is allowed after expiry when nobody took over
    released = service.controller.release(ReleaseInput("ctl", grant.credential, "commit abc123", SHA))
    assert released.state == "released" and not released.expired
    assert released.data["checkpoint_ref"] == "commit abc123"
    refused("fence_stale", lambda: service.controller.renew(RenewInput("ctl", grant.credential)))
    refused("fence_stale", lambda: service.controller.release(ReleaseInput("ctl", grant.credential, "again", SHA)))
    refused("lease_not_held", lambda: service.controller.takeover(TakeoverInput("ctl", grant.credential.lease_id)))
    again = acquire()
    assert again.credential.generation == 2, "a re-acquire never reuses a generation"
    assert again.lease.data["checkpoint_ref"] is None


def test_unknown_controller(service: Service) -> None:
    credential = Credential("ghost", "00000000-0000-0000-0000-000000000000", 1, "0" * 32)
    for call in (
        lambda: service.controller.renew(RenewInput("ghost", credential)),
        lambda: service.controller.takeover(TakeoverInput("ghost", credential.lease_id)),
        lambda: service.controller.leases(ListLeasesInput("ghost")),
    ):
        with pytest.raises(NotFoundError) as caught:
            call()
        assert caught.value.code == "controller_unknown"


def test_listing_judges_expiry_by_the_store_clock_and_shows_no_secret(
    acquire: Acquire, service: Service, clock: Any
) -> None:
    acquire("a", ttl=60)
    acquire("b", ttl=600)
    clock.advance(120)
    leases = {lease.controller_id: lease for lease in service.controller.leases(ListLeasesInput())}
    assert (leases["a"].expired, leases["b"].expired) == (True, False)
    assert all("token_sha256" not in lease.to_dict() for lease in leases.values())


def test_events_carry_no_secrets(acquire: Acquire, service: Service, clock: Any) -> None:
    grant = acquire(ttl=60)
    resumed = service.controller.resume(ResumeInput("ctl", grant.credential))
    service.controller.renew(RenewInput("ctl", resumed.credential))
    events = service.events(EventsInput())
    assert [e.trigger for e in events] == ["acquire", "resume", "renew"]
    text = json.dumps([e.to_dict() for e in events])
    for secret in (grant.credential.token, resumed.credential.token, hash_token(resumed.credential.token)):
        assert secret not in text
    assert [e.payload["changed"].get("generation") for e in events] == [1, 2, None]


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: AcquireInput("", "T", SHA), "controller_id"),
        (lambda: AcquireInput("has space", "T", SHA), "controller_id"),
        (lambda: AcquireInput("x" * 101, "T", SHA), "controller_id"),
        (lambda: AcquireInput("a/b", "T", SHA), "controller_id"),
        (lambda: AcquireInput("ok", "", SHA), "authority_ref"),
        (lambda: AcquireInput("ok", "line\nbreak", SHA), "authority_ref"),
        (lambda: AcquireInput("ok", "T", "abc"), "authority_sha256"),
        (lambda: AcquireInput("ok", "T", SHA.upper()), "authority_sha256"),
        (lambda: AcquireInput("ok", "T", SHA, ttl_seconds=4), "ttl_seconds"),
        (lambda: AcquireInput("ok", "T", SHA, ttl_seconds=86401), "ttl_seconds"),
        (lambda: AcquireInput("ok", "T", SHA, ttl_seconds=True), "ttl_seconds"),
        (lambda: TakeoverInput("ok", "not-a-uuid"), "expected_lease_id"),
        (lambda: TakeoverInput("ok", "00000000-0000-0000-0000-000000000000", authority_ref="T"), "authority_sha256"),
        (lambda: RenewInput("ok", Credential("other", "x", 1, "t")), "credential"),
        (lambda: ReleaseInput("ok", Credential("ok", "x", 1, "t"), "ref", "nope"), "checkpoint_sha256"),
        (lambda: EventsInput(since=-1), "since"),
        (lambda: EventsInput(limit=0), "limit"),
    ],
)
def test_bad_input_names_the_field(build: Callable[[], Any], field: str) -> None:
    with pytest.raises(InputError) as caught:
        build()
    assert caught.value.details["field"] == field
    assert caught.value.status.exit == 3


def test_ttl_bounds_are_inclusive() -> None:
    assert AcquireInput("ok", "T", SHA, ttl_seconds=5).ttl_seconds == 5
    assert AcquireInput("ok", "T", SHA, ttl_seconds=86400).ttl_seconds == 86400


def test_credential_repr_hides_the_token(acquire: Acquire) -> None:
    grant = acquire()
    assert grant.credential.token not in repr(grant.credential)
    assert grant.credential.token not in repr(grant)
