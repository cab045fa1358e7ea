"""The REST API of a real ``corral serve``: every route's success and refusal, the bearer token, the body
cap (declared and chunked), path containment under ``--workdir-root``, a unix socket, and the promise
that a grant's credential appears in exactly one response and nowhere else."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from runner.http.routes import ROUTES
from tests.http.conftest import CHECKPOINT_SHA, SHA, Served, acquire, renew, sse_events

pytestmark = pytest.mark.slow  # every test here runs the real executable

SECOND = "ctl-b"

# Every route, refused: (method, path, body or query, status, code). A route of ROUTES without a row
# fails test_every_route_has_a_refusal, so a new route is tested the day it lands.
REFUSALS: list[tuple[str, str, dict[str, Any] | None, int, str]] = [
    ("GET", "/api/status", {"verbose": "1"}, 422, "input_invalid"),
    ("GET", "/api/controllers", {"limit": "many"}, 422, "input_invalid"),
    ("POST", "/api/controllers/ctl/acquire", {"authority_ref": "T", "authority_sha256": "abc"}, 422, "input_invalid"),
    ("POST", "/api/controllers/ctl/renew", {}, 401, "credential_missing"),
    ("POST", "/api/controllers/ctl/resume", {}, 401, "credential_missing"),
    ("POST", "/api/controllers/ctl/takeover", {}, 422, "input_invalid"),
    ("POST", "/api/controllers/ctl/release", {}, 422, "input_invalid"),
    ("GET", "/api/reviewers", {"bogus": "1"}, 422, "input_invalid"),
    ("POST", "/api/reviewers", {}, 422, "input_invalid"),
    ("POST", "/api/reviewers/cleanup", {}, 422, "input_invalid"),
    ("POST", "/api/reviewers/reconcile", {}, 422, "input_invalid"),
    ("POST", "/api/reviewers/rev/close", {}, 422, "input_invalid"),
    ("POST", "/api/relay", {}, 422, "input_invalid"),
    ("POST", "/api/ask", {}, 422, "input_invalid"),
    ("POST", "/api/ask-many", {}, 422, "input_invalid"),
    ("POST", "/api/collect", {}, 422, "input_invalid"),
    ("POST", "/api/wait-any", {}, 422, "input_invalid"),
    ("GET", "/api/receipts", {"bogus": "1"}, 422, "input_invalid"),
    ("POST", "/api/receipts/r-1/abandon", {}, 422, "input_invalid"),
    ("GET", "/api/agents", {"bogus": "1"}, 422, "input_invalid"),
    ("POST", "/api/agents/reconcile", {}, 422, "input_invalid"),
    ("GET", "/api/agents/nope", None, 422, "agent_gone"),
    ("GET", "/api/agents/nope/output", None, 422, "agent_gone"),
    ("POST", "/api/agents/nope/close", {}, 422, "input_invalid"),
    ("GET", "/api/writers", {"bogus": "1"}, 422, "input_invalid"),
    ("POST", "/api/writers", {}, 422, "input_invalid"),
    ("POST", "/api/writers/reconcile", {}, 422, "input_invalid"),
    ("POST", "/api/writers/w/verify", {}, 422, "input_invalid"),
    ("POST", "/api/writers/w/release", {}, 422, "input_invalid"),
    ("GET", "/api/writers/w/audit", None, 422, "input_invalid"),
    ("GET", "/api/preflight", None, 422, "input_invalid"),
    ("POST", "/api/scopes/check", {}, 422, "input_invalid"),
    ("GET", "/api/adopted", {"bogus": "1"}, 422, "input_invalid"),
    ("POST", "/api/adopted", {}, 422, "input_invalid"),
    ("POST", "/api/adopted/reconcile", {}, 422, "input_invalid"),
    ("POST", "/api/adopted/p1/close", {}, 422, "input_invalid"),
    ("POST", "/api/adopted/p1/release", {}, 422, "input_invalid"),
    ("GET", "/api/plans", {"bogus": "1"}, 422, "input_invalid"),
    ("POST", "/api/plans", {}, 422, "input_invalid"),
    ("GET", "/api/plans/nope", None, 404, "plan_unknown"),
    ("POST", "/api/plans/nope/retry", {}, 404, "plan_unknown"),
    ("POST", "/api/plans/nope/resume", {}, 404, "plan_unknown"),
    ("POST", "/api/plans/nope/cancel", {}, 404, "plan_unknown"),
    ("GET", "/api/recipes", {"bogus": "1"}, 422, "input_invalid"),
    ("GET", "/api/recipes/nope", None, 404, "recipe_unknown"),
    ("GET", "/api/machines", {"bogus": "1"}, 422, "input_invalid"),
    ("GET", "/api/machines/nope/drawing", None, 404, "machine_unknown"),
    ("GET", "/api/mesh/agents", {"bogus": "1"}, 422, "input_invalid"),
    ("POST", "/api/mesh/agents/bad%20id/checkin", {}, 422, "input_invalid"),
    ("POST", "/api/mesh/agents/nobody/inbox", {}, 409, "mesh_not_checked_in"),
    ("POST", "/api/mesh/agents/nobody/ack", {}, 422, "input_invalid"),
    ("POST", "/api/mesh/messages", {}, 422, "input_invalid"),
    ("POST", "/api/memory/checkpoints", {"agent": "a", "summary": "s"}, 422, "input_invalid"),
    ("GET", "/api/memory/checkpoints", {"limit": "many"}, 422, "input_invalid"),
    ("GET", "/api/memory/search", {"query": " "}, 422, "input_invalid"),
    ("GET", "/api/memory/items/cp_0000000000000000", None, 404, "memory_checkpoint_unknown"),
    ("POST", "/api/memory/checkpoints/cp_0000000000000000/pin", {}, 404, "memory_checkpoint_unknown"),
    ("POST", "/api/memory/projects/demo/bootstrap", {"repository": "relative"}, 422, "input_invalid"),
    ("GET", "/api/memory/projects/-bad/readiness", None, 422, "input_invalid"),
    ("POST", "/api/memory/sessions/close", {"project": "demo", "status": "completed"}, 422, "memory_session_none"),
]


def _route_of(method: str, path: str) -> str:
    """The ROUTES template a concrete path matches (segments in braces match anything)."""
    for route in ROUTES:
        if route.method != method:
            continue
        want, got = route.path.split("/"), path.split("/")
        if len(want) == len(got) and all(w.startswith("{") or w == g for w, g in zip(want, got, strict=True)):
            return route.path
    raise AssertionError(f"{method} {path} matches no route")


def test_every_route_has_a_refusal() -> None:
    covered = {(m, _route_of(m, p)) for m, p, *_ in REFUSALS}
    assert covered == {(r.method, r.path) for r in ROUTES}


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """One server for the table-driven rows (they do not change what the others see)."""
    from tests.http.conftest import start_server

    home = tmp_path_factory.mktemp("shared-home")
    os.chmod(home, 0o700)
    served = start_server(home, tmp_path_factory.mktemp("shared-logs"))
    try:
        yield served
    finally:
        served.stop()


def _error(response: httpx.Response) -> dict[str, Any]:
    assert response.headers["content-type"].startswith("application/json"), response.headers
    doc = response.json()
    assert set(doc["error"]) >= {"code", "message", "details"}, doc
    assert "Traceback" not in response.text
    return dict(doc["error"])


REFUSAL_IDS = [f"{method} {path}" for method, path, *_ in REFUSALS]


@pytest.mark.parametrize(("method", "path", "args", "status", "code"), REFUSALS, ids=REFUSAL_IDS)
def test_each_route_refuses_with_its_code(
    shared: Served, method: str, path: str, args: dict[str, Any] | None, status: int, code: str
) -> None:
    with shared.client() as client:
        response = client.get(path, params=args) if method == "GET" else client.post(path, json=args)
    assert response.status_code == status, response.text
    assert _error(response)["code"] == code


READS: list[tuple[str, dict[str, Any] | None]] = [
    ("/api/status", None),
    ("/api/controllers", None),
    ("/api/controllers", {"limit": "5"}),
    ("/api/reviewers", None),
    ("/api/receipts", None),
    ("/api/agents", None),
    ("/api/writers", None),
    ("/api/adopted", None),
    ("/api/plans", None),
    ("/api/recipes", None),
    ("/api/recipes/review", None),
    ("/api/recipes/review", {"resolved": "false"}),
    ("/api/machines", None),
    ("/api/machines/controller/drawing", None),
    ("/api/machines/controller/drawing", {"format": "dot"}),
    ("/api/mesh/agents", None),
    ("/api/mesh/agents", {"all": "true"}),
]


@pytest.mark.parametrize(("path", "params"), READS, ids=[f"{r[0]} {r[1] or ''}" for r in READS])
def test_each_read_answers_its_documented_result(shared: Served, path: str, params: dict[str, Any] | None) -> None:
    import jsonschema

    from runner.mcp.tools import TOOLS

    route = next(r for r in ROUTES if r.method == "GET" and r.path == _route_of("GET", path))
    with shared.client() as client:
        response = client.get(path, params=params)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/json")
    jsonschema.validate(response.json(), TOOLS[route.tool].output)
    assert set(TOOLS[route.tool].output.get("required", [])) <= set(response.json())


def test_the_handoff_memory_over_http(serve: Any) -> None:
    """issue 18: a checkpoint by POST auto-starts its session; reads answer their tools' output schemas."""
    import jsonschema

    from runner.mcp.tools import TOOLS

    served: Served = serve()
    with served.client() as client:
        body = {"project": "demo", "goal": "g", "agent": "a", "summary": "wrote the port", "next_steps": ["tests"]}
        made = client.post("/api/memory/checkpoints", json=body)
        assert made.status_code == 200, made.text
        first = made.json()
        assert first["session_started"] and first["ref"] == "memory:" + first["checkpoint_id"]
        again = client.post("/api/memory/checkpoints", json={**body, "summary": "more"}).json()
        assert again["session_id"] == first["session_id"] and not again["session_started"]
        pinned = client.post(f"/api/memory/checkpoints/{first['checkpoint_id']}/pin", json={})
        assert pinned.status_code == 200 and pinned.json()["checkpoint"]["pinned"] is True
        for path, params, tool in (
            ("/api/memory/search", {"query": "port"}, "corral_memory_search"),
            ("/api/memory/checkpoints", {"project": "demo"}, "corral_memory_list"),
            (f"/api/memory/items/{first['session_id']}", None, "corral_memory_show"),
            ("/api/memory/projects/demo/readiness", None, "corral_memory_readiness"),
        ):
            answer = client.get(path, params=params)
            assert answer.status_code == 200, answer.text
            jsonschema.validate(answer.json(), TOOLS[tool].output)
        found = client.get("/api/memory/search", params={"query": "port"}).json()["checkpoints"]
        assert [c["id"] for c in found] == [first["checkpoint_id"]]
        both = client.post("/api/memory/checkpoints", json={**body, "session": first["session_id"]})
        assert both.status_code == 422 and _error(both)["details"]["field"] == "session"
        closed = client.post("/api/memory/sessions/close", json={"project": "demo", "status": "completed"})
        assert closed.status_code == 200 and closed.json()["session"]["status"] == "completed"


def test_a_controller_lease_through_its_whole_life(serve: Any) -> None:
    served: Served = serve()
    with served.client() as client:
        granted = acquire(client, "ctl", ttl=600)
        credential = granted["credential"]
        lease = granted["lease"]
        assert lease["controller_id"] == "ctl" and lease["generation"] == 1

        again = client.post(
            "/api/controllers/ctl/acquire", json={"authority_ref": "T", "authority_sha256": SHA, "ttl_seconds": 60}
        )
        assert again.status_code == 409 and "credential" not in again.json()

        renewed = renew(client, "ctl", credential)
        assert renewed.status_code == 200, renewed.text
        assert renewed.json()["lease"]["version"] > lease["version"] and "credential" not in renewed.json()

        wrong = renew(client, "ctl", f"v1.{lease['lease_id']}.1.{'0' * 32}")
        assert wrong.status_code in (401, 403), wrong.text
        assert _error(wrong)["code"] in ("credential_invalid", "fence_stale")
        corrupt = renew(client, "ctl", "not-a-credential")
        assert corrupt.status_code == 401 and _error(corrupt)["code"] == "credential_corrupt"

        resumed = client.post("/api/controllers/ctl/resume", json={}, headers={"Corral-Credential": credential})
        assert resumed.status_code == 200, resumed.text
        fresh = resumed.json()["credential"]
        assert fresh != credential and resumed.json()["lease"]["generation"] == 2
        stale = renew(client, "ctl", credential)
        assert stale.status_code in (401, 403) and _error(stale)["code"] in ("fence_stale", "credential_invalid")

        listed = client.get("/api/controllers").json()["leases"]
        assert [(x["controller_id"], x["generation"]) for x in listed] == [("ctl", 2)]

        released = client.post(
            "/api/controllers/ctl/release",
            json={"checkpoint_ref": "handoff.md", "checkpoint_sha256": CHECKPOINT_SHA},
            headers={"Corral-Credential": fresh},
        )
        assert released.status_code == 200, released.text
        assert released.json()["lease"]["state"] == "released"
        assert client.get("/api/controllers").json()["leases"] == []
        # A second controller: acquire, let nothing expire, a takeover of a live lease is refused.
        second = acquire(client, SECOND, ttl=600)
        takeover = client.post(
            f"/api/controllers/{SECOND}/takeover", json={"expect_lease": second["lease"]["lease_id"]}
        )
        assert takeover.status_code == 409, takeover.text
        assert "credential" not in takeover.json()


def test_plans_and_instances_answer_404_for_what_is_not_there(serve: Any) -> None:
    served: Served = serve()
    with served.client() as client:
        missing = client.get("/api/instances/controller/nobody")
        assert missing.status_code == 404 and _error(missing)["code"] == "instance_unknown"
        stream = client.get("/api/instances/controller/nobody/events")
        assert stream.status_code == 404 and _error(stream)["code"] == "instance_unknown"
        ping = client.get("/api/ping")
        assert ping.status_code == 200 and ping.json()["ok"] is True
        assert client.get("/api/openapi.json").json()["openapi"].startswith("3.1")
        bad_json = client.post("/api/controllers/ctl/acquire", content=b"{not json", headers={"Content-Type": "x"})
        assert bad_json.status_code == 422 and _error(bad_json)["code"] == "body_invalid"
        not_object = client.post("/api/controllers/ctl/acquire", json=[1, 2])
        assert not_object.status_code == 422 and _error(not_object)["code"] == "body_invalid"
        clash = client.post(
            "/api/controllers/ctl/acquire",
            json={"controller": "other", "authority_ref": "T", "authority_sha256": SHA},
        )
        assert clash.status_code == 422 and _error(clash)["code"] == "input_invalid"


# --- the bearer token -----------------------------------------------------------------------------------


def _token_file(tmp_path: Path, token: str) -> Path:
    path = tmp_path / "token"
    path.write_text(token + "\n")
    path.chmod(0o600)
    return path


def test_a_token_is_required_on_every_api_path(serve: Any, tmp_path: Path) -> None:
    token = "s3cret-token-0123456789"
    served: Served = serve("--auth-token-file", str(_token_file(tmp_path, token)), token=token)
    with served.client(token="") as anonymous:
        for path in ("/api/ping", "/api/status", "/api/openapi.json", "/api/events"):
            denied = anonymous.get(path)
            assert denied.status_code == 401, (path, denied.text)
            assert denied.headers["www-authenticate"] == "Bearer"
            assert _error(denied)["code"] == "unauthorized"
        posted = anonymous.post("/api/controllers/ctl/acquire", json={"authority_ref": "T", "authority_sha256": SHA})
        assert posted.status_code == 401
    with served.client(token="wrong-token-0123456789") as wrong:
        assert wrong.get("/api/status").status_code == 401
    with served.client() as client:
        assert client.get("/api/status").status_code == 200
        acquire(client)
    assert token not in served.stderr()


def test_a_token_file_readable_by_others_is_refused(corral: Any, tmp_path: Path) -> None:
    path = _token_file(tmp_path, "s3cret-token-0123456789")
    path.chmod(0o644)
    run = corral("serve", "--listen", "127.0.0.1:0", "--auth-token-file", str(path))
    assert run.returncode == 3, run.stderr
    assert "auth_token_invalid" in run.stderr or "readable by others" in run.stderr
    public = corral("serve", "--listen", "0.0.0.0:0")
    assert public.returncode == 3 and "auth-token-file" in public.stderr


def test_a_foreign_origin_is_refused(serve: Any) -> None:
    served: Served = serve()
    with served.client() as client:
        denied = client.get("/api/status", headers={"Origin": "https://evil.example"})
        assert denied.status_code == 403 and _error(denied)["code"] == "origin_forbidden"
        assert client.get("/api/status", headers={"Origin": "http://localhost:5173"}).status_code == 200


# --- the body cap ---------------------------------------------------------------------------------------


def test_a_body_over_the_cap_is_413_by_its_length_and_as_it_streams(serve: Any) -> None:
    served: Served = serve("--max-request-size", "2048")
    big = b'{"authority_ref": "' + b"x" * 4096 + b'"}'
    with served.client() as client:
        json_type = {"Content-Type": "application/json"}
        declared = client.post("/api/controllers/ctl/acquire", content=big, headers=json_type)
        assert declared.status_code == 413 and _error(declared)["code"] == "request_too_large"

        def chunks() -> Iterator[bytes]:
            for start in range(0, len(big), 512):
                yield big[start : start + 512]

        chunked = client.post("/api/controllers/ctl/acquire", content=chunks())
        assert chunked.request.headers.get("transfer-encoding") == "chunked"
        assert chunked.status_code == 413 and _error(chunked)["code"] == "request_too_large"
        keyed = client.post("/api/controllers/ctl/acquire", content=chunks(), headers={"Idempotency-Key": "big-1"})
        assert keyed.status_code == 413
        # Under the cap the same route is answered (here: refused for its input, not its size).
        small = client.post("/api/controllers/ctl/acquire", json={"authority_ref": "T"})
        assert small.status_code == 422
        assert client.get("/api/status").status_code == 200  # the server lives on


# --- path containment -----------------------------------------------------------------------------------


def test_paths_are_contained_under_the_workdir_root(serve: Any, tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "repo").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "escape").symlink_to(outside)
    served: Served = serve("--workdir-root", str(root))
    with served.client() as client:
        escaped = client.get("/api/preflight", params={"worktree": str(root / "escape")})
        assert escaped.status_code == 403 and _error(escaped)["code"] == "path_outside_root"
        assert _error(escaped)["details"]["field"] == "worktree" or "worktree" in _error(escaped)["message"]
        absolute = client.get("/api/preflight", params={"worktree": str(outside)})
        assert absolute.status_code == 403 and _error(absolute)["code"] == "path_outside_root"
        dotted = client.get("/api/preflight", params={"worktree": f"{root}/repo/../repo"})
        assert dotted.status_code == 422 and _error(dotted)["code"] == "path_traversal"
        started = client.post(
            "/api/reviewers", json={"controller": "ctl", "name": "rev", "kind": "script", "cwd": str(outside)}
        )
        assert started.status_code == 403 and _error(started)["code"] == "path_outside_root"
        scoped = client.post("/api/scopes/check", json={"own": ["src/**"], "worktree": str(root / "escape")})
        assert scoped.status_code == 403 and _error(scoped)["code"] == "path_outside_root"
        inside = client.get("/api/preflight", params={"worktree": str(root / "repo")})
        assert inside.status_code != 403, inside.text  # contained: the operation itself answers
        assert _error(inside)["code"] not in ("path_outside_root", "path_traversal") if inside.is_error else True


def test_a_raw_dotdot_is_refused_without_a_root(serve: Any, tmp_path: Path) -> None:
    served: Served = serve()
    with served.client() as client:
        dotted = client.get("/api/preflight", params={"worktree": f"{tmp_path}/a/../b"})
        assert dotted.status_code == 422 and _error(dotted)["code"] == "path_traversal"
        plain = client.get("/api/preflight", params={"worktree": str(tmp_path)})
        assert plain.is_error is False or _error(plain)["code"] != "path_traversal"


# --- a unix socket --------------------------------------------------------------------------------------


def test_the_api_on_a_unix_socket(serve: Any) -> None:
    served: Served = serve(uds=True)
    assert served.uds is not None
    assert stat.S_IMODE(os.stat(served.uds).st_mode) == 0o600
    with served.client() as client:
        assert client.get("/api/ping").json()["ok"] is True
        granted = acquire(client)
        assert renew(client, "ctl", granted["credential"]).status_code == 200
        events = sse_events(client, "/api/events", 2)
        assert [e.event for e in events] == ["acquire", "renew"]
    served.stop()
    assert not os.path.exists(served.uds)  # the socket goes with the server


# --- secrets --------------------------------------------------------------------------------------------


def test_a_credential_is_in_its_grant_response_only(serve: Any, tmp_path: Path) -> None:
    served: Served = serve()
    with served.client() as client:
        granted = acquire(client)
        credential = granted["credential"]
        token = credential.rsplit(".", 1)[1]
        header = {"Corral-Credential": credential}
        assert renew(client, "ctl", credential).status_code == 200
        client.get("/api/status")
        client.get("/api/controllers")
        client.get("/api/instances/controller/ctl")
        renew(client, "ctl", credential[:-1] + ("0" if credential[-1] != "0" else "1"))  # a wrong one: its error
        client.post("/api/controllers/ctl/takeover", json={"expect_lease": granted["lease"]["lease_id"]})
        client.post("/api/relay", json={"controller": "ctl", "target": "nope", "text": "hi"}, headers=header)
        client.post(
            "/api/controllers/ctl/release",
            json={"checkpoint_ref": "handoff.md", "checkpoint_sha256": CHECKPOINT_SHA},
            headers=header,
        )
        streamed = sse_events(client, "/api/events", 3)
        data = "\n".join(f"{e.id} {e.event} {e.data}" for e in streamed)
    texts = served.recorder.texts
    assert sum(token in text for text in texts) == 1, "the token is in the grant's response only"
    assert token not in data
    assert token not in served.stderr()
    assert [e.event for e in streamed] == ["acquire", "renew", "release"]


def test_the_listening_socket_says_it_is_tcp() -> None:
    """asyncio sets TCP_NODELAY only on a socket whose proto is IPPROTO_TCP; with proto 0 every small
    answer to a keep-alive client waited out a delayed ACK (44 ms for /api/ping in bench/http_api.py)."""
    import socket

    from runner.mcp.listen import bound, parse_listen

    with bound(parse_listen("127.0.0.1:0")) as sock:
        assert sock.proto == socket.IPPROTO_TCP
