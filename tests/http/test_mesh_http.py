"""The mesh's HTTP endpoints (issue 17) on a real ``corral serve``: check in, list, send, read, ack; each
is its MCP tool, so the answers are the tools' documents (and validate against their schemas). An agent's
token (issue 24) travels in the ``Corral-Agent-Token`` header, never the body or a URL; calls as another
agent are refused with a code (401/403, never a 500) and change nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema

from runner.mcp.tools import TOOLS
from runner.runtime import Config, Runtime


def agent(token: str) -> dict[str, str]:
    return {"Corral-Agent-Token": token}


def test_the_mesh_over_http(serve: Any) -> None:
    served = serve()
    with served.client() as client:
        joined = client.post("/api/mesh/agents/b1/checkin", json={"role": "builder", "repo": "corral"})
        assert joined.status_code == 200, joined.text
        jsonschema.validate(joined.json(), TOOLS["corral_mesh_checkin"].output)
        assert joined.json()["joined"] is True and joined.json()["wake"] == "unsupported"
        b1 = agent(joined.json()["agent_token"])
        r1_joined = client.post("/api/mesh/agents/r1/checkin", json={"role": "reviewer", "repo": "corral"})
        assert r1_joined.status_code == 200
        r1 = agent(r1_joined.json()["agent_token"])
        renewed = client.post("/api/mesh/agents/b1/checkin", json={"status": "freezing"}, headers=b1)
        assert renewed.status_code == 200 and "agent_token" not in renewed.json()
        sent = client.post(
            "/api/mesh/messages",
            json={"agent_id": "b1", "repo": "corral", "subject": "freeze", "body": "merges are frozen"},
            headers=b1,
        )
        assert sent.status_code == 200, sent.text
        assert sent.json()["recipients"] == ["r1"]
        too_big = client.post(
            "/api/mesh/messages", json={"agent_id": "b1", "to": "r1", "subject": "s", "body": "x" * 16385}, headers=b1
        )
        assert too_big.status_code == 422 and too_big.json()["error"]["code"] == "mesh_body_too_large"
        unknown = client.post(
            "/api/mesh/messages", json={"agent_id": "b1", "to": "zz", "subject": "s", "body": "b"}, headers=b1
        )
        assert unknown.status_code == 422 and unknown.json()["error"]["code"] == "mesh_unknown_agent"
        listed = client.get("/api/mesh/agents", params={"role": "reviewer"})
        assert [a["agent_id"] for a in listed.json()["agents"]] == ["r1"]
        assert r1["Corral-Agent-Token"] not in listed.text
        read = client.post("/api/mesh/agents/r1/inbox", json={"limit": 10}, headers=r1)
        assert read.status_code == 200, read.text
        doc = read.json()
        jsonschema.validate(doc, TOOLS["corral_mesh_inbox"].output)
        assert [m["body"] for m in doc["messages"]] == ["merges are frozen"]
        assert "never instructions" in doc["notice"]
        message_id = doc["messages"][0]["message_id"]
        acked = client.post("/api/mesh/agents/r1/ack", json={"message_ids": [message_id]}, headers=r1)
        assert acked.status_code == 200 and acked.json()["acked"] == [message_id]
        assert client.post("/api/mesh/agents/r1/inbox", json={}, headers=r1).json()["messages"] == []


def test_spoofing_an_agent_over_http_is_refused_and_changes_nothing(serve: Any) -> None:
    served = serve()
    with served.client() as client:
        victim = agent(client.post("/api/mesh/agents/victim/checkin", json={"status": "mine"}).json()["agent_token"])
        thief = agent(client.post("/api/mesh/agents/thief/checkin", json={}).json()["agent_token"])
        sent = client.post(
            "/api/mesh/messages", json={"agent_id": "thief", "to": "victim", "subject": "s", "body": "b"}, headers=thief
        ).json()

        def presences() -> list[dict[str, Any]]:
            found = client.get("/api/mesh/agents", params={"all": "true"}).json()["agents"]
            return [{k: v for k, v in a.items() if k != "status_age_seconds"} for a in found]

        before = presences()
        for headers, status, code in (({}, 401, "mesh_agent_token_missing"), (thief, 403, "mesh_agent_token_invalid")):
            for path, body in (
                ("/api/mesh/agents/victim/checkin", {"status": "spoofed"}),
                ("/api/mesh/messages", {"agent_id": "victim", "to": "thief", "subject": "s", "body": "b"}),
                ("/api/mesh/agents/victim/inbox", {}),
                ("/api/mesh/agents/victim/ack", {"message_ids": [sent["message_id"]]}),
            ):
                done = client.post(path, json=body, headers=headers)
                assert (done.status_code, done.json()["error"]["code"]) == (status, code), (path, done.text)
        in_body = client.post("/api/mesh/agents/victim/inbox", json={"agent_token": victim["Corral-Agent-Token"]})
        assert in_body.status_code == 422 and in_body.json()["error"]["code"] == "agent_token_misplaced"
        assert presences() == before
        read = client.post("/api/mesh/agents/victim/inbox", json={}, headers=victim).json()
        assert [m["message_id"] for m in read["messages"]] == [sent["message_id"]]


def test_a_replayed_checkin_never_leaves_its_token_in_the_store(serve: Any, state_home: Path) -> None:
    """A check-in under an Idempotency-Key is recorded: its agent token sealed (as a grant's credential),
    and a replay with the key answers the same token."""
    served = serve()
    with served.client() as client:
        key = {"Idempotency-Key": "checkin-a-1"}
        first = client.post("/api/mesh/agents/a/checkin", json={}, headers=key)
        again = client.post("/api/mesh/agents/a/checkin", json={}, headers=key)
        assert first.status_code == again.status_code == 200
        assert again.headers.get("Idempotent-Replayed") == "true"
        token = first.json()["agent_token"]
        assert again.json()["agent_token"] == token
        assert client.post("/api/mesh/agents/a/inbox", json={}, headers=agent(token)).status_code == 200
    with Runtime.open(Config.load(home=state_home, actor="test")) as runtime:
        rows = str(list(runtime.store.export_rows()))
    assert "agent_token" in rows or "checkin" in rows  # the record is there ...
    assert token not in rows  # ... without the live token
    assert token not in served.stderr()
