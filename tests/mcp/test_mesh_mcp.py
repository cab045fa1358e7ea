"""The mesh's tools over a real ``corral mcp`` (stdio), issue 24: an agent's token is its ``agent_token``
argument; each call as another agent (check in over its id, send as it, read its inbox, ack its
messages) is a tool error with a code, never a protocol error or an internal one, and changes nothing."""

from __future__ import annotations

from typing import Any

from tests.mcp.conftest import Session, StdioRunner


def test_spoofing_an_agent_over_mcp_is_refused_and_changes_nothing(stdio: StdioRunner) -> None:
    seen: dict[str, Any] = {}

    async def scenario(s: Session) -> None:
        victim = (await s.ok("corral_mesh_checkin", {"agent_id": "victim", "status": "mine"}))["agent_token"]
        thief = (await s.ok("corral_mesh_checkin", {"agent_id": "thief"}))["agent_token"]
        seen["tokens"] = (victim, thief)
        sent = await s.ok(
            "corral_mesh_send", {"agent_id": "thief", "to": "victim", "subject": "s", "body": "b", "agent_token": thief}
        )

        async def presences() -> list[dict[str, Any]]:
            found = (await s.ok("corral_mesh_agents", {"all": True}))["agents"]
            return [{k: v for k, v in a.items() if k != "status_age_seconds"} for a in found]

        before = await presences()
        for token, code in ((None, "mesh_agent_token_missing"), (thief, "mesh_agent_token_invalid")):
            given = {} if token is None else {"agent_token": token}
            await s.refused("corral_mesh_checkin", {"agent_id": "victim", "status": "spoofed", **given}, code)
            await s.refused(
                "corral_mesh_send", {"agent_id": "victim", "to": "thief", "subject": "s", "body": "b", **given}, code
            )
            await s.refused("corral_mesh_inbox", {"agent_id": "victim", **given}, code)
            await s.refused(
                "corral_mesh_ack", {"agent_id": "victim", "message_ids": [sent["message_id"]], **given}, code
            )
        assert await presences() == before
        read = await s.ok("corral_mesh_inbox", {"agent_id": "victim", "agent_token": victim})
        assert [m["message_id"] for m in read["messages"]] == [sent["message_id"]]
        renewed = await s.ok("corral_mesh_checkin", {"agent_id": "victim", "agent_token": victim})
        assert "agent_token" not in renewed and renewed["claimed"] is False
        listed = str(await s.ok("corral_mesh_agents", {"all": True}))
        assert victim not in listed and thief not in listed

    stdio(scenario)
    stderr = stdio.last_session.stderr()
    assert "Traceback" not in stderr and all(t not in stderr for t in seen["tokens"])
