"""DNS rebinding: a real ``corral serve`` on loopback answers only the host names it is served as.

A page on ``evil.example`` that resolves to 127.0.0.1 makes the browser send ``Host: evil.example:PORT``
(and ``Origin: http://evil.example:PORT``). Raw requests (http.client, the Host header written by hand)
against every route of the route table, the streams, the OpenAPI document and the dashboard show that
none reaches its handler: each is ``421 host_not_allowed`` (a foreign Host) or ``403 origin_forbidden``
(an allowed Host with a foreign Origin), with or without a token, and no lease is granted.
"""

from __future__ import annotations

import http.client
import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from runner.http.routes import ROUTES, VIEWS
from tests.http.conftest import SHA, Served

# The routes build_app adds beside the route table (streams, ping, OpenAPI, decisions, the dashboard).
EXTRA = (
    ("GET", "/api/ping"),
    ("GET", "/api/openapi.json"),
    ("GET", "/api/events"),
    ("GET", "/api/plans/{plan_id}/events"),
    ("GET", "/api/instances/{id}/events"),
    ("GET", "/api/instances/{id}"),
    ("GET", "/api/decisions"),
    ("POST", "/api/decisions/{id}"),
    ("GET", "/"),
    ("GET", "/static/api.js"),
    ("GET", "/metrics"),
)
TOKEN = "s3cret-bearer-token-for-hosts"
BODY = json.dumps({"authority_ref": "T-REBIND", "authority_sha256": SHA, "ttl_seconds": 600}).encode()


def every_route() -> list[tuple[str, str]]:
    table = [(r.method, r.path) for r in ROUTES] + [("GET", v.path) for v in VIEWS] + list(EXTRA)
    return [(method, re.sub(r"\{[^}]+\}", "x1", path)) for method, path in table]


def raw(served: Served, method: str, path: str, headers: dict[str, str]) -> tuple[int, bytes]:
    """One request with exactly these headers (the Host included), its status and body."""
    where = urlsplit(served.where)
    conn = http.client.HTTPConnection(where.hostname or "127.0.0.1", where.port, timeout=30)
    try:
        conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        for name, value in headers.items():
            conn.putheader(name, value)
        body = BODY if method == "POST" else b""
        if method == "POST":
            conn.putheader("Content-Type", "application/json")
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body or None)
        response = conn.getresponse()
        if (response.getheader("content-type") or "").startswith("text/event-stream"):
            return response.status, b"(an event stream: its handler answered)"
        return response.status, response.read(4096)
    finally:
        conn.close()


def _code(body: bytes) -> str | None:
    try:
        return str(json.loads(body)["error"]["code"])
    except (ValueError, KeyError, TypeError):
        return None


def forged(port: int) -> list[tuple[dict[str, str], int, str]]:
    """Forged Host/Origin pairs and what each must be answered (status, code)."""
    evil = f"evil.example:{port}"
    return [
        ({"Host": evil, "Origin": f"http://{evil}"}, 421, "host_not_allowed"),  # the rebinding page
        ({"Host": evil}, 421, "host_not_allowed"),  # a script without an Origin (curl, a no-cors fetch)
        ({"Host": f"127.0.0.1.evil.example:{port}"}, 421, "host_not_allowed"),
        ({"Host": f"localhost:{port}", "Origin": f"http://{evil}"}, 403, "origin_forbidden"),
        ({"Host": f"127.0.0.1:{port}", "Origin": f"https://evil.example:{port}"}, 403, "origin_forbidden"),
    ]


def attack(served: Served, extra_headers: dict[str, str]) -> tuple[int, list[str]]:
    """Every forged pair on every route: how many attempts, and the ones that were not refused."""
    port = urlsplit(served.where).port or 0
    attempts, reached = 0, []
    for method, path in every_route():
        for headers, status, code in forged(port):
            got, body = raw(served, method, path, {**headers, **extra_headers})
            attempts += 1
            if got != status or _code(body) != code or b"credential" in body:
                reached.append(f"{method} {path} {headers} -> {got} {body[:120]!r}")
    return attempts, reached


def test_no_forged_host_or_origin_reaches_a_handler_without_a_token(serve: Any, corral: Any) -> None:
    served: Served = serve()
    attempts, reached = attack(served, {})
    assert attempts == len(every_route()) * 5 and attempts > 300
    assert reached == [], f"{len(reached)} of {attempts} forged requests reached a handler:\n" + "\n".join(reached)
    listed = json.loads(corral("controller", "list", "--all", "--json").stdout)
    assert listed["leases"] == [], listed  # no acquire got through: no lease, no credential
    # The names it is served as still work, a page of its own included.
    port = urlsplit(served.where).port
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost"):
        status, body = raw(served, "GET", "/api/ping", {"Host": host, "Origin": f"http://{host}"})
        assert status == 200 and json.loads(body)["ok"] is True, (host, body)


def test_no_forged_host_reaches_a_handler_with_a_token_either(serve: Any, tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text(TOKEN)
    path.chmod(0o600)
    served: Served = serve("--auth-token-file", str(path), token=TOKEN)
    attempts, reached = attack(served, {"Authorization": f"Bearer {TOKEN}"})
    assert reached == [], f"{len(reached)} of {attempts} reached a handler:\n" + "\n".join(reached)


def test_allow_host_adds_a_name(serve: Any, corral: Any) -> None:
    served: Served = serve("--allow-host", "corral.test", "--allow-host", "Box.Internal")
    port = urlsplit(served.where).port
    for host in (f"corral.test:{port}", "box.internal", f"BOX.internal:{port}"):
        status, body = raw(served, "GET", "/api/ping", {"Host": host, "Origin": f"https://{host}"})
        assert status == 200, (host, body)
    status, body = raw(served, "GET", "/api/ping", {"Host": f"other.test:{port}"})
    assert status == 421 and _code(body) == "host_not_allowed"
    status, body = raw(served, "GET", "/api/ping", {"Host": f"corral.test:{port}", "Origin": "http://other.test"})
    assert status == 403 and _code(body) == "origin_forbidden"
    bad = corral("serve", "--listen", "127.0.0.1:0", "--allow-host", "http://x.test:80")
    assert bad.returncode == 3 and "allow_host" in bad.stderr and "Traceback" not in bad.stderr


def test_odd_host_headers_are_refused(serve: Any) -> None:
    served: Served = serve()
    for host in ("evil.example", "[::2]:80", "localhost.:80", "127.0.0.2", "127.0.0.1:80@evil.example", "a b"):
        status, body = raw(served, "GET", "/api/status", {"Host": host})
        assert (status, _code(body)) == (421, "host_not_allowed") or status == 400, (host, status, body)
    status, body = raw(served, "GET", "/api/status", {})  # HTTP/1.1 without a Host at all
    assert status in (400, 421), (status, body)
