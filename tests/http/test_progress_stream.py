"""Live progress on the event stream of a real ``corral serve`` (issue 23): ``agent.progress`` events
while a driven agent (a real subprocess printing Claude's stream-json) works, carrying no ``id:`` so
that resuming by ``Last-Event-ID`` is unchanged; a reconnecting client gets a snapshot of the runs
working now; a run's end is said once; names and paths only, never a tool's contents."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from httpx_sse import connect_sse

from tests.http.conftest import Served, acquire
from tests.support import stream_agent

pytestmark = pytest.mark.slow  # the real executable


def _read(
    client: httpx.Client, until: Callable[[list[Any]], bool], on: Callable[[Any], None] | None = None, **kw: Any
) -> list[Any]:
    """Events of ``/api/events`` until ``until(events)`` (at most 30 s)."""
    got: list[Any] = []
    deadline = time.monotonic() + 30
    with connect_sse(client, "GET", "/api/events", **kw) as source:
        assert source.response.status_code == 200
        for event in source.iter_sse():
            got.append(event)
            if on is not None:
                on(event)
            if until(got) or time.monotonic() > deadline:
                break
    assert until(got), [(e.event, e.data) for e in got]
    return got


def _progress(events: list[Any]) -> list[dict[str, Any]]:
    return [json.loads(e.data) for e in events if e.event == "agent.progress"]


def _lines(events: list[Any]) -> list[str]:
    """The run's lines as a client keeps them: by index, an event seen twice changing nothing."""
    kept: list[str] = []
    for update in _progress(events):
        kept[update["start"] :] = update["lines"]
    return kept


def test_progress_events_stream_live_and_resume_by_snapshot(serve: Any, state_home: Path, tmp_path: Path) -> None:
    (state_home / "agents.yaml").write_text(stream_agent.kind_yaml())
    project = tmp_path / "project"
    project.mkdir()
    go = project / "go"  # where the confined reviewer reads: its own directory
    served: Served = serve()
    with served.client(timeout=30) as client:
        credential = acquire(client)["credential"]
        auth = {"Corral-Credential": credential}
        started = client.post(
            "/api/reviewers",
            json={"controller": "ctl", "name": "rev", "kind": "streamer", "cwd": str(project)},
            headers=auth,
        )
        assert started.status_code == 200, started.text
        pane = started.json()["lease"]["pane_id"]
        text = f"read lib.py\nwrite /tmp/out.txt\nwait {go}\nedit /tmp/out.txt\nreviewed"
        relayed = client.post("/api/relay", json={"controller": "ctl", "target": "rev", "text": text}, headers=auth)
        assert relayed.status_code == 200, relayed.text

        first = _read(
            client, lambda got: _lines(got)[:3] == ["tool Read lib.py", "tool Write /tmp/out.txt", "file /tmp/out.txt"]
        )
        durable = [e for e in first if e.event != "agent.progress"]
        assert durable and durable[0].event == "acquire", durable
        last_id = durable[-1].id
        for update in _progress(first):
            assert update["pane_id"] == pane and update["name"] == "rev" and update["kind"] == "streamer"
            assert update["running"] is True and update["run"] == 1
        assert _progress(first)[-1]["items"][-1] == {"type": "file", "path": "/tmp/out.txt"}
        raw = b"".join(e.data.encode() for e in first)
        assert stream_agent.SECRET.encode() not in raw

        # Resuming from the last durable event: nothing of the log again, the working run's snapshot.
        def release(event: Any) -> None:
            if event.event == "agent.progress":
                go.write_text("")

        resumed = _read(
            client,
            lambda got: any(not u["running"] for u in _progress(got)),
            on=release,
            headers={"Last-Event-ID": last_id},
        )
        durable_id = ""
        for event in resumed:  # a progress event leaves the last event id as it was: it has none
            if event.event == "agent.progress":
                assert event.id == durable_id
            else:
                durable_id = event.id
        snapshot = _progress(resumed)[0]
        assert snapshot["start"] == 0 and snapshot["running"] is True
        assert snapshot["lines"][:3] == ["tool Read lib.py", "tool Write /tmp/out.txt", "file /tmp/out.txt"]
        replayed = [json.loads(e.data)["seq"] for e in resumed if e.event != "agent.progress"]
        assert all(seq > int(last_id.rpartition(":")[2]) for seq in replayed), "no durable event twice"
        assert _lines(resumed) == [
            "tool Read lib.py", "tool Write /tmp/out.txt", "file /tmp/out.txt",
            "tool Edit /tmp/out.txt", "file /tmp/out.txt",
        ]  # fmt: skip
        end = [u for u in _progress(resumed) if not u["running"]]
        assert len(end) == 1 and end[0]["total"] == 5

        # Without progress: the durable stream alone.
        quiet = _read(client, lambda got: len(got) >= 2, params={"progress": "0"})
        assert all(e.event != "agent.progress" for e in quiet)
