"""The controller lease's guards (:mod:`runner.guards.lease`), called directly on a lease the real service
granted in a real SQLite store, with the store's clock under test control."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from runner.fence import Credential
from runner.service import Grant
from runner.sql.store_sqlite import SQLiteStore
from tests.conftest import FakeClock
from tests.support.contexts import Contexts


@pytest.fixture
def contexts(store: SQLiteStore) -> Contexts:
    return Contexts(store)


def presented(credential: Credential) -> dict[str, Any]:
    """The request a fenced operation makes: public parts as params, the token as a secret."""
    return {
        "params": {
            "controller_id": credential.controller_id,
            "lease_id": credential.lease_id,
            "generation": credential.generation,
        },
        "secrets": {"token": credential.token},
    }


def test_the_fence_passes_the_holder_and_refuses_a_wrong_token_or_an_older_grant(
    contexts: Contexts, acquire: Callable[..., Grant], store: SQLiteStore
) -> None:
    grant = acquire("ctl", ttl=60)
    lease = store.get("controller/ctl")
    assert lease is not None
    assert contexts.guard("fence", lease, **presented(grant.credential)) is None
    forged = Credential("ctl", grant.credential.lease_id, grant.credential.generation, "0" * 32)
    refused = contexts.refusal("fence", lease, **presented(forged))
    assert refused.code == "fence_stale"
    assert refused.details == {"controller_id": "ctl", "presented_generation": 1, "current_generation": 1}
    older = Credential("ctl", grant.credential.lease_id, 0, grant.credential.token)
    assert contexts.refusal("fence", lease, **presented(older)).code == "fence_stale"


def test_the_fence_reads_the_lease_through_the_view_on_another_machine(
    contexts: Contexts, acquire: Callable[..., Grant]
) -> None:
    grant = acquire("ctl")
    reviewer = contexts.put("reviewer/r1", "active", {"controller_id": "ctl"})
    assert contexts.guard("fence", reviewer, **presented(grant.credential)) is None
    other = Credential("nobody", grant.credential.lease_id, 1, grant.credential.token)
    refused = contexts.refusal("fence", reviewer, **presented(other))
    assert (refused.code, refused.message) == ("fence_stale", "no lease was ever granted for controller 'nobody'")


def test_an_expired_lease_fails_the_fence_unless_expiry_is_allowed(
    contexts: Contexts, acquire: Callable[..., Grant], store: SQLiteStore, clock: FakeClock
) -> None:
    grant = acquire("ctl", ttl=30)
    clock.advance(30)  # expiry is inclusive: at expires_at the lease is gone
    lease = store.get("controller/ctl")
    assert lease is not None
    refused = contexts.refusal("fence", lease, **presented(grant.credential))
    assert refused.code == "lease_expired" and refused.details["expires_at"] == lease.data["expires_at"]
    assert contexts.guard("fence", lease, {"allow_expired": True}, **presented(grant.credential)) is None


def test_lease_expired_lets_a_takeover_through_only_after_expiry(
    contexts: Contexts, acquire: Callable[..., Grant], store: SQLiteStore, clock: FakeClock
) -> None:
    acquire("ctl", ttl=30)
    lease = store.get("controller/ctl")
    assert lease is not None
    clock.advance(29)
    refused = contexts.refusal("lease_expired", lease)
    assert (refused.code, refused.details) == ("lease_not_expired", {"expires_at": lease.data["expires_at"]})
    clock.advance(1)
    assert contexts.guard("lease_expired", lease) is None


def test_lease_predecessor_names_the_grant_the_caller_saw(contexts: Contexts, acquire: Callable[..., Grant]) -> None:
    grant = acquire("ctl")
    lease = contexts.store.get("controller/ctl")
    assert lease is not None
    seen = grant.credential.lease_id
    assert contexts.guard("lease_predecessor", lease, params={"expected_lease_id": seen}) is None
    refused = contexts.refusal("lease_predecessor", lease, params={"expected_lease_id": "older"})
    assert refused.code == "lease_mismatch"
    assert refused.details == {"expected_lease_id": "older", "current_lease_id": seen}
