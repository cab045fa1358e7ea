"""The event streams of a real ``corral serve``: replay after ``kill -9`` and a restart, a gap after a
prune or for another store's cursor, snapshot-then-tail against a racing process, ``instance_ended``,
two servers on one store, a slow subscriber cut off without slowing another, heartbeats."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from httpx_sse import connect_sse

from tests.http.conftest import Served, acquire, racing, renew, seq_of, sse_events, submit_plan

pytestmark = pytest.mark.slow  # every test here runs the real executable


def _ids(events: list[Any]) -> list[int]:
    return [seq_of(e) for e in events]


def _renews(client: httpx.Client, credential: str, count: int, controller: str = "ctl") -> None:
    for _ in range(count):
        assert renew(client, controller, credential).status_code == 200


def test_a_stream_resumes_after_kill_9_with_exactly_the_missed_events(serve: Any) -> None:
    first: Served = serve()
    with first.client() as client:
        credential = acquire(client)["credential"]
        _renews(client, credential, 4)
        seen = sse_events(client, "/api/events", 3)
        assert _ids(seen) == [1, 2, 3] and [e.event for e in seen] == ["acquire", "renew", "renew"]
        store_id = client.get("/api/ping").json()["store_id"]
        assert seen[-1].id == f"{store_id}:3"
    first.kill()
    second: Served = serve()
    with second.client() as client:
        _renews(client, credential, 3)  # the lease and its credential outlive the server
        resumed = sse_events(client, "/api/events", 5, headers={"Last-Event-ID": seen[-1].id})
        assert _ids(resumed) == [4, 5, 6, 7, 8]
        assert all(e.event == "renew" for e in resumed)
        versions = [json.loads(e.data)["version"] for e in resumed]
        assert versions == [4, 5, 6, 7, 8]
        by_since = sse_events(client, "/api/events", 2, params={"since": "6"})
        assert _ids(by_since) == [7, 8]


def test_a_cursor_below_the_floor_gets_one_gap_then_the_rest(serve: Any, corral: Any) -> None:
    served: Served = serve()
    with served.client() as client:
        credential = acquire(client)["credential"]
        _renews(client, credential, 5)
        store_id = client.get("/api/ping").json()["store_id"]
        pruned = corral("events", "prune", "--before", "4", "--json")
        assert pruned.returncode == 0, pruned.stderr
        floor = json.loads(pruned.stdout)["pruned"]["floor"]
        assert floor == 3
        got = sse_events(client, "/api/events", 4, headers={"Last-Event-ID": f"{store_id}:1"})
        assert got[0].event == "gap"
        gap = json.loads(got[0].data)
        assert gap["reason"] == "pruned" and gap["floor"] == 3 and gap["since"] == 1
        assert _ids(got[1:]) == [4, 5, 6]
        fresh = sse_events(client, "/api/events", 2)  # no cursor starts at 0: told what went, as the CLI is
        assert fresh[0].event == "gap" and json.loads(fresh[0].data)["since"] == 0
        assert fresh[1].event == "renew" and seq_of(fresh[1]) == 4


def test_a_cursor_of_another_store_gets_a_gap(serve: Any, tmp_path: Path) -> None:
    other_home = tmp_path / "other"
    other_home.mkdir(mode=0o700)
    other: Served = serve(home=other_home)
    with other.client() as client:
        acquire(client)
        foreign = sse_events(client, "/api/events", 1)[0].id
    served: Served = serve()
    with served.client() as client:
        credential = acquire(client)["credential"]
        _renews(client, credential, 2)
        got = sse_events(client, "/api/events", 4, headers={"Last-Event-ID": foreign})
        assert got[0].event == "gap"
        gap = json.loads(got[0].data)
        assert gap["reason"] == "epoch" and gap["epoch"] == foreign.rpartition(":")[0]
        assert gap["store_id"] != gap["epoch"]
        assert _ids(got[1:]) == [1, 2, 3]  # the whole of this store, from its floor
        bad = client.get("/api/events", headers={"Last-Event-ID": "store:abc"})
        assert bad.status_code == 422 and bad.json()["error"]["code"] == "cursor_invalid"


def test_snapshot_then_tail_sees_every_version_exactly_once(serve: Any, state_home: Path) -> None:
    served: Served = serve()
    want = 60
    with racing(state_home, "race") as racer, served.client() as client:
        racer.run()  # racing from here on, until stopped: between the snapshot and the stream's start too
        snap = client.get("/api/instances/controller/race")
        assert snap.status_code == 200
        doc = snap.json()
        assert doc["machine"] == "controller" and doc["terminal"] is False
        start = doc["version"]
        got = sse_events(client, "/api/instances/controller/race/events", want, params={"since": doc["last_event_seq"]})
        racer.stop()
        versions = [json.loads(e.data)["version"] for e in got]
        assert versions == list(range(start + 1, start + want + 1)), "every version after the snapshot, once, in order"
        assert all(json.loads(e.data)["instance"] == "controller/race" for e in got)


def test_instance_ended_closes_an_instance_stream(serve: Any, state_home: Path) -> None:
    served: Served = serve()
    assert submit_plan(state_home, "p-end")["state"] == "submitted"
    with served.client() as client, served.client() as other:
        acquire(client, "bystander")
        got: list[Any] = []
        with connect_sse(client, "GET", "/api/plans/p-end/events") as source:
            for event in source.iter_sse():
                got.append(event)
                if event.event == "submit":
                    cancelled = other.post("/api/plans/p-end/cancel", json={})
                    assert cancelled.status_code == 200, cancelled.text
        # The loop ended because the server closed the stream after instance_ended.
        assert [e.event for e in got] == ["submit", "cancel", "instance_ended"]
        ended = json.loads(got[-1].data)
        assert ended["instance"] == "plan/p-end" and ended["state"] == "cancelled"
        # A stream of an instance that has already ended replays it and closes too.
        with connect_sse(client, "GET", "/api/instances/plan/p-end/events") as source:
            again = list(source.iter_sse())
        assert [e.event for e in again] == ["submit", "cancel", "instance_ended"]
        assert "bystander" not in "".join(e.data for e in again)
        # An instance that does not end (a controller lease) keeps its stream open: its live tail.
        assert client.get("/api/instances/controller/bystander").json()["terminal"] is False


def test_two_servers_on_one_store_deliver_the_same_stream(serve: Any) -> None:
    one: Served = serve()
    two: Served = serve()
    with one.client() as a, two.client() as b:
        credential = acquire(a)["credential"]
        for i in range(6):
            assert renew(a if i % 2 else b, "ctl", credential).status_code == 200
        from_one = sse_events(a, "/api/events", 7)
        from_two = sse_events(b, "/api/events", 7)
        assert [(e.id, e.event, e.data) for e in from_one] == [(e.id, e.event, e.data) for e in from_two]
        assert _ids(from_one) == list(range(1, 8))
        assert a.get("/api/ping").json()["store_id"] == b.get("/api/ping").json()["store_id"]


def test_heartbeat_comments_keep_an_idle_stream_alive(serve: Any) -> None:
    served: Served = serve("--heartbeat", "0.2")
    with served.client() as client, client.stream("GET", "/api/events") as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        comments = []
        for line in response.iter_lines():
            if line:
                assert line.startswith(":"), line  # nothing happened: only comments
                comments.append(line)
            if len(comments) == 2:
                break
    assert len(comments) == 2


# --- a slow subscriber ------------------------------------------------------------------------------------


def _raw_subscribe(served: Served, path: str) -> socket.socket:
    """A subscriber that will not read, on the server's unix socket: its kernel buffers are small and
    fixed (a loopback TCP send buffer grows to megabytes), so the server's writes back up soon."""
    assert served.uds is not None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
    sock.connect(served.uds)
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: corral\r\nConnection: close\r\n\r\n".encode())
    return sock


def _read_to_end(sock: socket.socket) -> list[dict[str, str]]:
    """Everything the server sent until it closed the connection, as SSE events (comments dropped)."""
    sock.settimeout(10)
    data = bytearray()
    give_up = time.monotonic() + 60  # its heartbeats would keep a stream the server never ends open for good
    with sock:
        try:
            while chunk := sock.recv(65536):
                data += chunk
                if time.monotonic() > give_up:
                    pytest.fail(f"the server never ended the slow stream ({len(data)} bytes read)")
        except TimeoutError:
            pytest.fail(f"the server neither ended the slow stream nor sent on it ({len(data)} bytes read)")
    head, _, body = bytes(data).partition(b"\r\n\r\n")
    assert b"200" in head.split(b"\r\n")[0], head
    if b"chunked" in head.lower():
        plain = bytearray()
        while body:
            size_line, _, rest = body.partition(b"\r\n")
            size = int(size_line.split(b";")[0], 16)
            if size == 0:
                break
            plain += rest[:size]
            body = rest[size + 2 :]
        body = bytes(plain)
    events = []
    for block in body.decode().replace("\r\n", "\n").split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.split("\n"):
            if line and not line.startswith(":"):
                name, _, value = line.partition(":")
                fields[name] = value.removeprefix(" ")
        if fields:
            events.append(fields)
    return events


def test_a_slow_subscriber_is_cut_off_without_slowing_another(serve: Any, state_home: Path) -> None:
    grace = 1.0
    served: Served = serve("--subscriber-buffer", "8", "--subscriber-grace", str(grace), uds=True)
    slow = _raw_subscribe(served, "/api/events")
    rounds = 800
    with served.client() as client, racing(state_home, "flood") as racer:
        with connect_sse(client, "GET", "/api/events") as source:
            fast = source.iter_sse()
            racer.renew(rounds)
            first = [next(fast) for _ in range(rounds + 1)]  # reads as it comes: a burst 100x its buffer
            racer.done()
            # The one that reads nothing has a full buffer by now (the server holds a bounded number
            # of bytes for it, whether it was fed live or replayed in pages); wait a few graces more
            # so the cut is certain before it starts reading.
            time.sleep(3 * grace)
            racer.renew(rounds)
            second = [next(fast) for _ in range(rounds)]
            racer.done()
        assert _ids(first + second) == list(range(1, 2 * rounds + 2)), "the fast subscriber got everything"
    got = _read_to_end(slow)  # the server ended this stream: it did not wait for the reader
    seqs = [int(e["id"].rpartition(":")[2]) for e in got]
    assert seqs == list(range(1, len(seqs) + 1)), "what it got is a prefix, no holes"
    # Cut before the end: how much it got depends on what the kernel's socket buffers took before the
    # server's writes blocked and on the server's bounded buffer, never on the reader.
    assert len(seqs) < 2 * rounds + 1, "the slow subscriber was disconnected before the end"
    with served.client() as client:
        rest = sse_events(client, "/api/events", 2 * rounds + 1 - len(seqs), headers={"Last-Event-ID": got[-1]["id"]})
        assert _ids(rest) == list(range(len(seqs) + 1, 2 * rounds + 2))


def test_a_slow_subscriber_replaying_from_the_store_is_cut_off_too(serve: Any, state_home: Path) -> None:
    """One that connects far behind replays in pages from the store: what the server holds for it is
    bounded in bytes, not in writes, so it is cut off as one fed live is (and resumes where it was)."""
    grace = 1.0
    served: Served = serve("--subscriber-grace", str(grace), uds=True)
    rounds = 2000
    with racing(state_home, "behind") as racer:
        racer.renew(rounds)
        racer.done()
    slow = _raw_subscribe(served, "/api/events?progress=0")
    time.sleep(3 * grace)  # it reads nothing: the server's writes back up, then the grace runs out
    got = _read_to_end(slow)
    seqs = [int(e["id"].rpartition(":")[2]) for e in got]
    assert seqs == list(range(1, len(seqs) + 1)), "a prefix, no holes"
    assert len(seqs) < rounds + 1, "cut off before the end of the replay"
    with served.client() as client:
        rest = sse_events(client, "/api/events", rounds + 1 - len(seqs), headers={"Last-Event-ID": got[-1]["id"]})
        assert _ids(rest) == list(range(len(seqs) + 1, rounds + 2))
