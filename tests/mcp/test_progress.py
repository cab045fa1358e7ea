"""Live progress in MCP progress notifications (issue 23): a real ``corral mcp`` driven by the SDK's own
client, a reviewer of a driven kind that is a real subprocess printing Claude's stream-json
(``tests/support/stream_agent.py``). The waits (``corral_ask``, ``corral_collect``,
``corral_wait_any``, ``corral_agent_wait``) carry each tool call and file change as it happens,
names and paths only, once each, never the previous run's and never a tool's contents."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.mcp.conftest import SHA, Session
from tests.support import stream_agent

pytestmark = pytest.mark.slow

ACQUIRE = {"controller": "ctl", "authority_ref": "TICKET-23", "authority_sha256": SHA, "ttl_seconds": 300}


def _progress(messages: list[str], label: str) -> list[str]:
    lines: list[str] = []
    for message in messages:
        lines += json.loads(message).get("progress", {}).get(label, [])
    return lines


def _start(mcp_home: Path, project: Path) -> dict[str, Any]:
    mcp_home.mkdir(parents=True, exist_ok=True)
    (mcp_home / "agents.yaml").write_text(stream_agent.kind_yaml())
    return {"controller": "ctl", "name": "rev", "kind": "streamer", "cwd": str(project)}


def test_waits_report_tool_calls_and_file_changes_as_they_happen(stdio: Any, mcp_home: Path, project: Path) -> None:
    start = _start(mcp_home, project)

    async def scenario(s: Session) -> None:
        await s.ok("corral_controller_acquire", ACQUIRE)
        await s.ok("corral_reviewer_start", start)
        seen: list[str] = []
        script = "read lib.py\nsleep 0.6\nwrite /tmp/notes.txt\nsleep 0.6\nedit /tmp/notes.txt\nsleep 0.6\nreviewed"
        asked = await s.ok(
            "corral_ask", {"controller": "ctl", "target": "rev", "text": script, "timeout": 60}, progress=seen
        )
        assert asked["output"] == "reviewed" and asked["receipt"]["state"] == "completed"
        lines = _progress(seen, "rev")
        assert lines == [
            "tool Read lib.py",
            "tool Write /tmp/notes.txt",
            "file /tmp/notes.txt",
            "tool Edit /tmp/notes.txt",
            "file /tmp/notes.txt",
        ]
        carrying = [json.loads(m) for m in seen if "progress" in json.loads(m)]
        assert len(carrying) >= 2, "lines go out as they happen, not all at the end"
        assert all(m["tool"] == "corral_ask" and m["target"] == "rev" for m in carrying)

        # An agent wait (by pane, no lease needed) on a run still going: its lines, none of the run before.
        go = project / "go"
        relayed = await s.ok(
            "corral_relay", {"controller": "ctl", "target": "rev", "text": f"read a.py\nwait {go}\nread b.py\nok"}
        )
        receipt = relayed["receipt"]
        waited: list[str] = []

        async def release() -> None:
            await anyio.sleep(1.5)
            go.write_text("")

        async with anyio.create_task_group() as group:
            group.start_soon(release)
            wait_args = {"target": receipt["pane_id"], "until": ["done"], "after_seq": receipt["after_seq"]}
            await s.ok("corral_agent_wait", {**wait_args, "timeout": 60}, progress=waited)
        assert _progress(waited, receipt["pane_id"]) == ["tool Read a.py", "tool Read b.py"]
        collected: list[str] = []
        await s.ok("corral_collect", {"controller": "ctl", "receipts": [receipt["token"]]}, progress=collected)
        assert _progress(collected, "rev") == [], "a run that ended before the wait began is not reported"

        # Nothing of a tool's input but its path crosses the boundary.
        assert all(stream_agent.SECRET not in text for text in s.texts())

    stdio(scenario)


def test_wait_any_and_collect_report_the_progress_of_their_targets(stdio: Any, mcp_home: Path, project: Path) -> None:
    start = _start(mcp_home, project)

    async def scenario(s: Session) -> None:
        await s.ok("corral_controller_acquire", ACQUIRE)
        await s.ok("corral_reviewer_start", start)
        relayed = await s.ok(
            "corral_relay", {"controller": "ctl", "target": "rev", "text": "read lib.py\nsleep 1.2\nreviewed"}
        )
        seen: list[str] = []
        target = {"name": "rev", "after_seq": relayed["receipt"]["after_seq"]}
        won = await s.ok("corral_wait_any", {"controller": "ctl", "targets": [target], "timeout": 60}, progress=seen)
        assert won["target"] == "rev"
        assert _progress(seen, "rev") == ["tool Read lib.py"]
        await s.ok("corral_collect", {"controller": "ctl", "receipts": [relayed["receipt"]["token"]]})
        relayed = await s.ok(
            "corral_relay", {"controller": "ctl", "target": "rev", "text": "read x.py\nsleep 1.2\nwrite /tmp/y.txt\nok"}
        )
        collected: list[str] = []
        done = await s.ok(
            "corral_collect",
            {"controller": "ctl", "receipts": [relayed["receipt"]["token"]], "timeout": 60},
            progress=collected,
        )
        assert done["results"][0]["output"] == "ok"
        assert _progress(collected, "rev") == ["tool Read x.py", "tool Write /tmp/y.txt", "file /tmp/y.txt"]

    stdio(scenario)
