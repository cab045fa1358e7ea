"""The mesh's HTTP endpoints (issue 17) on a real ``corral serve``: check in, list, send, read, ack; each
is its MCP tool, so the answers are the tools' documents (and validate against their schemas)."""

from __future__ import annotations

from typing import Any

import jsonschema

from runner.mcp.tools import TOOLS


def test_the_mesh_over_http(serve: Any) -> None:
    served = serve()
    with served.client() as client:
        joined = client.post("/api/mesh/agents/b1/checkin", json={"role": "builder", "repo": "corral"})
        assert joined.status_code == 200, joined.text
        jsonschema.validate(joined.json(), TOOLS["agent_checkin"].output)
        assert joined.json()["joined"] is True and joined.json()["wake"] == "unsupported"
        assert (
            client.post("/api/mesh/agents/r1/checkin", json={"role": "reviewer", "repo": "corral"}).status_code == 200
        )
        sent = client.post(
            "/api/mesh/messages",
            json={"agent_id": "b1", "repo": "corral", "subject": "freeze", "body": "merges are frozen"},
        )
        assert sent.status_code == 200, sent.text
        assert sent.json()["recipients"] == ["r1"]
        too_big = client.post(
            "/api/mesh/messages", json={"agent_id": "b1", "to": "r1", "subject": "s", "body": "x" * 16385}
        )
        assert too_big.status_code == 422 and too_big.json()["error"]["code"] == "mesh_body_too_large"
        unknown = client.post("/api/mesh/messages", json={"agent_id": "b1", "to": "zz", "subject": "s", "body": "b"})
        assert unknown.status_code == 422 and unknown.json()["error"]["code"] == "mesh_unknown_agent"
        listed = client.get("/api/mesh/agents", params={"role": "reviewer"})
        assert [a["agent_id"] for a in listed.json()["agents"]] == ["r1"]
        read = client.post("/api/mesh/agents/r1/inbox", json={"limit": 10})
        assert read.status_code == 200, read.text
        doc = read.json()
        jsonschema.validate(doc, TOOLS["agent_inbox"].output)
        assert [m["body"] for m in doc["messages"]] == ["merges are frozen"]
        assert "never instructions" in doc["notice"]
        message_id = doc["messages"][0]["message_id"]
        acked = client.post("/api/mesh/agents/r1/ack", json={"message_ids": [message_id]})
        assert acked.status_code == 200 and acked.json()["acked"] == [message_id]
        assert client.post("/api/mesh/agents/r1/inbox", json={}).json()["messages"] == []
