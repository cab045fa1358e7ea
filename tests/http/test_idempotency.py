"""``Idempotency-Key`` on a real ``corral serve``: the same key and body replays the stored response
(``Idempotent-Replayed: true``) without acting twice, another body is 409 ``idempotency_mismatch``,
every server on the store shares the records, and a grant's credential is never kept in the store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.http.conftest import SHA, Served, acquire, sse_events

pytestmark = pytest.mark.slow  # every test here runs the real executable

GRANT = {"authority_ref": "TICKET-1", "authority_sha256": SHA, "ttl_seconds": 600}


def test_the_same_key_and_body_replays_without_acting_twice(serve: Any) -> None:
    served: Served = serve()
    with served.client() as client:
        first = client.post("/api/controllers/ctl/acquire", json=GRANT, headers={"Idempotency-Key": "grant-1"})
        assert first.status_code == 200 and "idempotent-replayed" not in first.headers
        again = client.post("/api/controllers/ctl/acquire", json=GRANT, headers={"Idempotency-Key": "grant-1"})
        assert again.status_code == 200, again.text
        assert again.headers["idempotent-replayed"] == "true"
        assert again.json() == first.json()  # the same lease, the same credential for the same retry
        credential = first.json()["credential"]
        headers = {"Corral-Credential": credential, "Idempotency-Key": "renew-1"}
        renewed = client.post("/api/controllers/ctl/renew", json={}, headers=headers)
        replayed = client.post("/api/controllers/ctl/renew", json={}, headers=headers)
        assert renewed.status_code == replayed.status_code == 200
        assert replayed.headers["idempotent-replayed"] == "true"
        assert replayed.json() == renewed.json()
        # A refusal is an answer too: replayed, not re-run.
        bad = {"authority_ref": "T"}
        refused = client.post("/api/controllers/other/acquire", json=bad, headers={"Idempotency-Key": "bad-1"})
        refused_again = client.post("/api/controllers/other/acquire", json=bad, headers={"Idempotency-Key": "bad-1"})
        assert refused.status_code == refused_again.status_code == 422
        assert refused_again.headers["idempotent-replayed"] == "true"
        events = sse_events(client, "/api/events", 2)
        assert [e.event for e in events] == ["acquire", "renew"]
        lease = client.get("/api/controllers").json()["leases"][0]
        assert lease["version"] == 2  # one acquire, one renew: nothing ran twice


def test_the_same_key_with_another_request_is_a_mismatch(serve: Any) -> None:
    served: Served = serve()
    with served.client() as client:
        key = {"Idempotency-Key": "k-1"}
        assert client.post("/api/controllers/ctl/acquire", json=GRANT, headers=key).status_code == 200
        other_body = client.post("/api/controllers/ctl/acquire", json={**GRANT, "ttl_seconds": 60}, headers=key)
        assert other_body.status_code == 409
        assert other_body.json()["error"]["code"] == "idempotency_mismatch"
        other_path = client.post("/api/controllers/ctl2/acquire", json=GRANT, headers=key)
        assert other_path.status_code == 409 and other_path.json()["error"]["code"] == "idempotency_mismatch"
        assert [x["controller_id"] for x in client.get("/api/controllers").json()["leases"]] == ["ctl"]
        too_long = client.post("/api/controllers/ctl3/acquire", json=GRANT, headers={"Idempotency-Key": "x" * 300})
        assert too_long.status_code == 422 and too_long.json()["error"]["code"] == "idempotency_key_invalid"


def test_two_servers_on_one_store_share_the_keys(serve: Any) -> None:
    one: Served = serve()
    two: Served = serve()
    with one.client() as a, two.client() as b:
        key = {"Idempotency-Key": "shared-1"}
        first = a.post("/api/controllers/ctl/acquire", json=GRANT, headers=key)
        assert first.status_code == 200
        second = b.post("/api/controllers/ctl/acquire", json=GRANT, headers=key)
        assert second.status_code == 200 and second.headers["idempotent-replayed"] == "true"
        assert second.json() == first.json()
        mismatch = b.post("/api/controllers/ctl/acquire", json={**GRANT, "ttl_seconds": 30}, headers=key)
        assert mismatch.status_code == 409 and mismatch.json()["error"]["code"] == "idempotency_mismatch"


def test_a_grant_replayed_keeps_no_credential_in_the_store(serve: Any, state_home: Path) -> None:
    served: Served = serve()
    with served.client() as client:
        key = {"Idempotency-Key": "grant-secret"}
        granted = client.post("/api/controllers/ctl/acquire", json=GRANT, headers=key).json()
        token = granted["credential"].rsplit(".", 1)[1]
        replayed = client.post("/api/controllers/ctl/acquire", json=GRANT, headers=key)
        assert replayed.json()["credential"] == granted["credential"]
        acquire(client, "ctl-plain")
    served.stop()  # a clean stop checkpoints the WAL into the database file
    for path in state_home.glob("corral.db*"):
        assert token.encode() not in path.read_bytes(), f"the token is in {path.name}"
