"""Hostile requests against a real ``corral serve`` (issue 24): each answers a clear 4xx or a coded
refusal, never a 500 or a traceback, and the server lives on with nothing lost.

Tried here (the counts are those of the parametrized cases): bodies nested deeper than JSON values
may be (arrays and objects, under the size cap), forged ``Last-Event-ID`` values (negative, huge,
another store's epoch, garbage, empty), FTS query syntax in ``memory search`` (unbalanced quotes,
operators alone, column filters, NEAR, a lone ``*``), and an ``Idempotency-Key`` reused with another
body, concurrently, and across a ``kill -9`` of the server; 30 slow clients and 30 SSE subscribers
that never read, for 12 s (``slow``).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.http.conftest import SHA, Served

DEPTH = 100_000  # far past the 100 levels JSON values may nest (runner.jsonvalues)


def _error(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code < 500, response.text
    assert "Traceback" not in response.text
    return dict(response.json()["error"])


@pytest.mark.parametrize(
    "body",
    [
        b"[" * DEPTH + b"]" * DEPTH,
        b'{"a":' * DEPTH + b"1" + b"}" * DEPTH,
        b'{"authority_ref": ' + b"[" * 5000 + b"]" * 5000 + b"}",
    ],
    ids=["arrays", "objects", "a-field"],
)
def test_a_deeply_nested_body_is_refused_as_invalid_not_a_500(serve: Any, body: bytes) -> None:
    served: Served = serve("--max-request-size", str(8 * DEPTH))
    with served.client() as client:
        answer = client.post("/api/controllers/ctl/acquire", content=body, headers={"content-type": "application/json"})
        assert answer.status_code == 422, answer.text
        assert _error(answer)["code"] == "body_invalid"
        assert client.get("/api/status").status_code == 200  # the server lives on


@pytest.mark.parametrize(
    "cursor", ["-1", "-99999999999999999999", "99999999999999999999999999", "other-store:5", "garbage", "", "1e9", "5:"]
)
def test_a_forged_last_event_id_is_a_clear_refusal_or_a_clean_replay(serve: Any, cursor: str) -> None:
    served: Served = serve()
    with served.client() as client:
        client.post("/api/controllers/ctl/acquire", json={"authority_ref": "T", "authority_sha256": SHA})
        with client.stream("GET", "/api/events", headers={"Last-Event-ID": cursor, "Accept": "text/event-stream"},
                           params={"once": "true"}) as answer:  # fmt: skip
            if answer.status_code >= 400:
                answer.read()
                _error(answer)
                assert answer.status_code in (400, 409, 422), answer.text
            else:
                assert answer.status_code == 200
        assert client.get("/api/status").status_code == 200


@pytest.mark.parametrize(
    "query", ['"unbalanced', "AND", "OR NOT", "summary:port", "NEAR(a b", "*", "a AND (b", "^x", '""', "-port", "col:"]
)
def test_fts_syntax_in_memory_search_is_searched_as_text_or_refused_clearly(serve: Any, query: str) -> None:
    served: Served = serve()
    with served.client() as client:
        checkpoint = {"project": "demo", "goal": "g", "agent": "a", "summary": "wrote the port", "next_steps": ["t"]}
        made = client.post("/api/memory/checkpoints", json=checkpoint)
        assert made.status_code == 200, made.text
        answer = client.get("/api/memory/search", params={"query": query})
        if answer.is_error:
            assert _error(answer)["code"] in ("input_invalid", "memory_query_invalid"), answer.text
        else:
            assert "results" in answer.json() or answer.json()


def test_an_idempotency_key_reused_with_another_body_concurrently_and_after_a_kill(serve: Any, tmp_path: Path) -> None:
    served: Served = serve()
    body = {"authority_ref": "T", "authority_sha256": SHA}
    with served.client() as client:
        answers: list[httpx.Response] = []

        def post() -> None:
            with served.client() as own:
                answers.append(own.post("/api/controllers/c1/acquire", json=body, headers={"Idempotency-Key": "k-1"}))

        threads = [threading.Thread(target=post) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert all(a.status_code < 500 for a in answers), [a.text for a in answers]
        granted = [a for a in answers if a.status_code == 200]
        credentials = {a.json()["credential"] for a in granted}
        assert len(credentials) == 1, "one grant, replayed; never two leases for one key"
        other = client.post("/api/controllers/c1/acquire", json={**body, "authority_ref": "U"},
                            headers={"Idempotency-Key": "k-1"})  # fmt: skip
        assert other.status_code == 409 and _error(other)["code"] == "idempotency_mismatch"
    served.proc.send_signal(signal.SIGKILL)
    served.proc.wait()
    again: Served = serve()
    with again.client() as client:
        replayed = client.post("/api/controllers/c1/acquire", json=body, headers={"Idempotency-Key": "k-1"})
        assert replayed.status_code == 200 and replayed.headers.get("Idempotent-Replayed") == "true", replayed.text
        assert replayed.json()["credential"] in credentials, "the kill -9 lost nothing"


@pytest.mark.slow
def test_slow_clients_and_sse_subscribers_that_never_read_do_not_starve_the_server(serve: Any) -> None:
    """30 connections that send their headers a byte at a time, and 30 SSE subscribers that never read
    while events are written, for about 12 s: every ordinary request meanwhile is answered promptly."""
    import socket
    import time
    from urllib.parse import urlsplit

    served: Served = serve()
    where = urlsplit(served.base_url)
    host, port = where.hostname or "127.0.0.1", where.port or 80
    slow = [socket.create_connection((host, port)) for _ in range(30)]
    readers = []
    for _ in range(30):
        sock = socket.create_connection((host, port))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.sendall(f"GET /api/events HTTP/1.1\r\nHost: {host}:{port}\r\nAccept: text/event-stream\r\n\r\n".encode())
        readers.append(sock)
    request = f"GET /api/status HTTP/1.1\r\nHost: {host}:{port}\r\n".encode()
    worst = 0.0
    try:
        with served.client() as client:
            began = time.monotonic()
            i = 0
            while time.monotonic() - began < 12:
                for sock in slow:
                    with contextlib.suppress(OSError):
                        sock.send(request[i % len(request) : i % len(request) + 1])
                i += 1
                client.post(f"/api/controllers/c{i % 50}/acquire", json={"authority_ref": "T", "authority_sha256": SHA})
                asked = time.monotonic()
                assert client.get("/api/status").status_code == 200
                worst = max(worst, time.monotonic() - asked)
                time.sleep(0.2)
    finally:
        for sock in slow + readers:
            sock.close()
    assert worst < 5.0, f"a status request took {worst:.1f} s"
    with served.client() as client:
        assert client.get("/api/status").status_code == 200
