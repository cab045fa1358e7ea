"""The controller lease's updates (:mod:`runner.updates.lease`), called directly on a real store's lease."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from runner import fence
from runner.context import format_time
from runner.service import Grant
from runner.sql.store_sqlite import SQLiteStore
from tests.conftest import FakeClock
from tests.support.contexts import Contexts


@pytest.fixture
def contexts(store: SQLiteStore) -> Contexts:
    return Contexts(store)


def test_issue_lease_grants_the_next_generation_with_a_fresh_token_stored_hashed(
    contexts: Contexts, clock: FakeClock
) -> None:
    update = contexts.update(
        "issue_lease",
        contexts.absent("controller/ctl"),
        params={"controller_id": "ctl", "ttl_seconds": 60, "holder": "me"},
    )
    token = update.reply["token"]
    assert len(token) == 32 and token not in str(dict(update.data))
    assert update.data["token_sha256"] == fence.hash_token(token)
    assert (update.data["generation"], update.data["holder"], update.data["predecessor_lease_id"]) == (1, "me", None)
    assert update.data["expires_at"] == format_time(clock.now.replace(minute=1))


def test_a_regrant_of_an_active_lease_names_its_predecessor_and_a_proposal_is_honoured(
    contexts: Contexts, acquire: Callable[..., Grant], store: SQLiteStore
) -> None:
    grant = acquire("ctl")
    lease = store.get("controller/ctl")
    assert lease is not None
    proposal = fence.Proposal.new()
    update = contexts.update(
        "issue_lease",
        lease,
        params={"controller_id": "ctl", "ttl_seconds": 30, "proposed_lease_id": proposal.lease_id},
        secrets={"proposed_token": proposal.token},
    )
    assert (update.data["lease_id"], update.reply["token"]) == (proposal.lease_id, proposal.token)
    assert update.data["generation"] == 2 and update.data["predecessor_lease_id"] == grant.credential.lease_id
    assert update.data["holder"] == lease.data["holder"], "kept when the request names none"


def test_issue_lease_without_a_ttl_is_a_bug_not_a_lease(contexts: Contexts) -> None:
    with pytest.raises(ValueError, match="needs ttl_seconds"):
        contexts.update("issue_lease", contexts.absent("controller/ctl"), params={"controller_id": "ctl"})


def test_extend_authority_and_checkpoint(
    contexts: Contexts, acquire: Callable[..., Grant], store: SQLiteStore, clock: FakeClock
) -> None:
    acquire("ctl", ttl=60)
    lease = store.get("controller/ctl")
    assert lease is not None
    clock.advance(10)
    extended = contexts.update("extend_lease", lease)
    assert extended.data == {
        "ttl_seconds": 60,
        "renewed_at": format_time(clock.now),
        "expires_at": format_time(clock.now.replace(minute=1, second=10)),
    }
    assert contexts.update("extend_lease", lease, params={"ttl_seconds": 5}).data["ttl_seconds"] == 5
    assert contexts.update("record_authority", lease, {"optional": True}).data == {}
    with pytest.raises(ValueError, match="needs authority_ref"):
        contexts.update("record_authority", lease)
    authority = {"authority_ref": "T-2", "authority_sha256": "e" * 64}
    assert contexts.update("record_authority", lease, params=authority).data == authority
    done = contexts.update("record_checkpoint", lease, params={"checkpoint_ref": "c1", "checkpoint_sha256": "f" * 64})
    assert done.data["token_sha256"] is None, "the token is retired for good"
    assert (done.data["checkpoint_ref"], done.data["released_at"]) == ("c1", format_time(clock.now))
