"""``corral mcp --http`` at the door: bearer token, Origin, body cap, where it may listen.

Raw requests (httpx) show what the door answers before any MCP is spoken; the SDK client shows the
same server serving once the request is right.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.mcp.conftest import SHA, HttpServer, Session, corral_cli, http_server, run_http, server_env

pytestmark = pytest.mark.slow

TOKEN = "s3cret-bearer-token-for-the-test"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}},
}
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def post(server: HttpServer, body: bytes, **headers: str) -> httpx.Response:
    url = server.wait_ready()
    with httpx.Client(timeout=30) as web:
        return web.post(url, content=body, headers={**HEADERS, **headers})


def token_file(tmp_path: Path, mode: int = 0o600, text: str = TOKEN) -> Path:
    path = tmp_path / "token"
    path.write_text(text + "\n")
    os.chmod(path, mode)
    return path


async def status(s: Session) -> dict[str, Any]:
    return await s.ok("corral_status", {})


def test_the_door_token_origin_and_body_cap(mcp_home: Path, tmp_path: Path) -> None:
    """One server with a token file and a 4 KiB cap: 401 without the right bearer token, 403 for a
    foreign Origin (before any token check), 413 over the cap; the SDK client with the token is served,
    and the server stops cleanly."""
    args = ("--auth-token-file", str(token_file(tmp_path)), "--max-request-size", "4096")
    with http_server(mcp_home, "127.0.0.1:0", *args) as server:
        body = json.dumps(INITIALIZE).encode()
        bare = post(server, body)
        assert bare.status_code == 401 and bare.headers["www-authenticate"] == "Bearer"
        assert post(server, body, Authorization="Bearer not-the-token-at-all").status_code == 401
        assert post(server, body, Authorization=f"Bearer {TOKEN[:-1]}").status_code == 401
        assert post(server, body, Authorization=f"Basic {TOKEN}").status_code == 401
        bearer = f"Bearer {TOKEN}"
        assert post(server, body, Authorization=bearer).status_code == 200
        for origin in ("https://evil.example", "http://evil.example:8420", "null"):
            assert post(server, body, Authorization=bearer, Origin=origin).status_code == 403, origin
            assert post(server, body, Origin=origin).status_code == 403, origin
        assert post(server, body, Authorization=bearer, Origin="http://127.0.0.1:9999").status_code == 200
        assert post(server, body, Authorization=bearer, Origin="http://localhost:3000").status_code == 200
        big = dict(INITIALIZE, params={**INITIALIZE["params"], "padding": "x" * 8192})  # type: ignore[dict-item]
        assert post(server, json.dumps(big).encode(), Authorization=bearer).status_code == 413
        assert run_http(server, status, token=TOKEN)["version"]  # and it still serves
    assert server.proc.returncode in (0, -15), server.stderr()  # uvicorn re-raises the SIGTERM it caught
    assert TOKEN not in server.stderr() and "Traceback" not in server.stderr()


def test_a_token_file_others_can_read_is_refused(mcp_home: Path, tmp_path: Path) -> None:
    loose = token_file(tmp_path, 0o644)
    done = corral_cli(server_env(mcp_home), "mcp", "--http", "--listen", "127.0.0.1:0", "--auth-token-file", str(loose))
    assert done.returncode == 3 and "auth_token_invalid" in done.stderr, done.stderr
    assert TOKEN not in done.stderr + done.stdout
    short = token_file(tmp_path, 0o600, "short")
    done = corral_cli(server_env(mcp_home), "mcp", "--http", "--listen", "127.0.0.1:0", "--auth-token-file", str(short))
    assert done.returncode == 3 and "auth_token_invalid" in done.stderr, done.stderr


def test_off_loopback_needs_a_token(mcp_home: Path) -> None:
    done = corral_cli(server_env(mcp_home), "mcp", "--http", "--listen", "0.0.0.0:0")
    assert done.returncode == 3, done.stderr
    assert "auth_token_required" in done.stderr and "Traceback" not in done.stderr


def test_the_unix_socket_is_private(mcp_home: Path, tmp_path: Path) -> None:
    """Created 0600 (no window in which others could connect); a socket a stopped server left behind
    is replaced by the next one, a file that is not a socket is never replaced."""
    sock = tmp_path / "corral.sock"
    for _ in range(2):
        with http_server(mcp_home, f"unix://{sock}") as server:
            assert server.wait_ready() == f"unix://{sock}"
            info = os.stat(sock)
            assert stat.S_ISSOCK(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o600, oct(info.st_mode)
            assert run_http(server, status)["version"]
    plain = tmp_path / "not-a-socket"
    plain.write_text("keep me")
    done = corral_cli(server_env(mcp_home), "mcp", "--http", "--listen", f"unix://{plain}")
    assert done.returncode == 3 and "not a socket" in done.stderr, done.stderr
    assert plain.read_text() == "keep me"


def test_a_forged_host_is_refused_before_the_token_and_allow_host_adds_one(mcp_home: Path, tmp_path: Path) -> None:
    """DNS rebinding: the Host check (shared with `corral serve`, runner/mcp/hosts.py) comes first, so a
    forged Host is 421 host_not_allowed even with the right token; an --allow-host name is served."""
    args = ("--auth-token-file", str(token_file(tmp_path)), "--allow-host", "corral.test")
    with http_server(mcp_home, "127.0.0.1:0", *args) as server:
        body = json.dumps(INITIALIZE).encode()
        bearer = f"Bearer {TOKEN}"
        port = server.wait_ready().rsplit(":", 1)[1].split("/")[0]
        for host in (f"evil.example:{port}", "127.0.0.1.evil.example", f"corral.test.evil:{port}"):
            refused = post(server, body, Authorization=bearer, Host=host, Origin=f"http://{host}")
            assert refused.status_code == 421, (host, refused.text)
            assert refused.json()["error"]["code"] == "host_not_allowed"
        allowed = post(server, body, Authorization=bearer, Host=f"corral.test:{port}", Origin="http://corral.test")
        assert allowed.status_code == 200, allowed.text
        foreign = post(server, body, Authorization=bearer, Host=f"corral.test:{port}", Origin="http://evil.example")
        assert foreign.status_code == 403


def test_workdir_root_confines_every_path_argument_and_a_plans_step_paths(mcp_home: Path, tmp_path: Path) -> None:
    """Issue 24: ``corral mcp --http --workdir-root DIR`` holds the path arguments of every call to the
    table ``corral serve`` uses (runner.mcp.paths.PATH_ARGS): outside DIR (or out by a symlink) is
    ``path_outside_root``, a raw ``..`` is ``path_traversal`` even without a root, a plan document's
    step paths are checked before it is recorded; inside DIR the call goes on."""
    root = tmp_path / "root"
    (root / "inside").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "escape").symlink_to(outside)
    acquire = {"controller": "ctl", "authority_ref": "TICKET-24", "authority_sha256": SHA, "ttl_seconds": 300}

    def start(cwd: Path | str, name: str = "rev") -> dict[str, Any]:
        return {"controller": "ctl", "name": name, "kind": "script", "cwd": str(cwd)}

    def plan(plan_id: str, cwd: Path | str) -> dict[str, Any]:
        inputs = {"cwd": str(cwd), "prompt": "echo hi", "kind": "script", "timeout": 30,
                  "authority_ref": "T-1", "authority_sha256": SHA}  # fmt: skip
        return {"plan": {"plan": plan_id, "recipe": "review", "controller": "ctl2", "inputs": inputs}, "run": False}

    async def scenario(s: Session) -> None:
        await s.ok("corral_controller_acquire", acquire)
        for cwd, code in (
            (outside, "path_outside_root"),
            (root / "escape", "path_outside_root"),
            (f"{root}/inside/../../outside", "path_traversal"),
        ):
            error = await s.refused("corral_reviewer_start", start(cwd), code)
            assert error["details"]["field"] == "cwd", error
        for plan_id, cwd, code in (
            ("p-out", outside, "path_outside_root"),
            ("p-link", root / "escape", "path_outside_root"),
        ):
            error = await s.refused("corral_run", plan(plan_id, cwd), code)
            assert error["details"]["field"] == "cwd", error
            await s.refused("corral_plans_show", {"plan_id": plan_id}, "plan_unknown")
        assert (await s.ok("corral_reviewer_list", {"all": True}))["reviewers"] == [], "nothing was started"
        started = await s.ok("corral_reviewer_start", start(root / "inside"))
        assert started["lease"]["state"] == "active"
        assert (await s.ok("corral_run", plan("p-in", root / "inside")))["created"] is True

    with http_server(mcp_home, "127.0.0.1:0", "--workdir-root", str(root)) as server:
        run_http(server, scenario)
    assert "Traceback" not in server.stderr()


def test_without_a_root_a_raw_dot_dot_is_still_refused_over_http(mcp_home: Path, tmp_path: Path) -> None:
    acquire = {"controller": "ctl", "authority_ref": "TICKET-24", "authority_sha256": SHA, "ttl_seconds": 300}

    async def scenario(s: Session) -> None:
        await s.ok("corral_controller_acquire", acquire)
        args = {"controller": "ctl", "name": "rev", "kind": "script", "cwd": f"{tmp_path}/a/../b"}
        assert (await s.refused("corral_reviewer_start", args, "path_traversal"))["details"]["field"] == "cwd"

    with http_server(mcp_home) as server:
        run_http(server, scenario)
