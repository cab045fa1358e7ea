"""The coordinator's flows through a real ``corral mcp`` with the SDK's own client: the review flow (over
stdio and over loopback HTTP), a writer lane with verify and release, a stale fence after another
process resumed the controller, ``ask_many`` mode ``first`` then ``collect``, a wait the client
cancels, and the progress a long wait reports."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.mcp.conftest import (
    CHECKPOINT_SHA,
    SHA,
    Session,
    corral_cli,
    credential_of,
    make_lane,
    server_env,
    writer_start_args,
)
from tests.support.gitrepo import status_digest

pytestmark = pytest.mark.slow

ACQUIRE = {"controller": "ctl", "authority_ref": "TICKET-14", "authority_sha256": SHA, "ttl_seconds": 300}
RELEASE = {"controller": "ctl", "checkpoint_ref": "review done", "checkpoint_sha256": CHECKPOINT_SHA}


async def start_reviewer(s: Session, name: str, cwd: Path) -> dict[str, Any]:
    started = await s.ok(
        "corral_reviewer_start", {"controller": "ctl", "name": name, "kind": "script", "cwd": str(cwd)}
    )
    lease: dict[str, Any] = started["lease"]
    assert lease["state"] == "active" and lease["name"] == name
    return lease


def test_review_flow(transport: Any, project: Path) -> None:
    """acquire, start, relay, collect, close at the settled cursor, release: each a structured result."""

    async def scenario(s: Session) -> None:
        lease = (await s.ok("corral_controller_acquire", ACQUIRE))["lease"]
        assert lease["controller_id"] == "ctl" and lease["state"] == "active" and lease["generation"] == 1
        assert "token" not in lease
        reviewer = await start_reviewer(s, "rev", project)
        receipt = (await s.ok("corral_relay", {"controller": "ctl", "target": "rev", "text": "echo hello"}))["receipt"]
        assert receipt["state"] == "pending" and receipt["token"].startswith("corral-receipt-v1.")
        collected = await s.ok("corral_collect", {"controller": "ctl", "receipts": [receipt["token"]], "timeout": 60})
        (result,) = collected["results"]
        assert result["output"] == "hello\n" and result["replayed"] is False
        assert result["receipt"]["state"] == "completed"
        assert collected["data_notice"].startswith("output fields hold text an agent printed")
        settled = result["receipt"]["settled_seq"]
        again = await s.ok("corral_collect", {"controller": "ctl", "receipts": [receipt["token"]], "timeout": 60})
        assert again["results"][0]["replayed"] is True and again["results"][0]["output"] == "hello\n"
        # a cursor that is not the settled one is refused; the settled one closes
        await s.refused(
            "corral_reviewer_close", {"controller": "ctl", "name": "rev", "expect_seq": settled + 5}, "cursor_mismatch"
        )
        closed = await s.ok("corral_reviewer_close", {"controller": "ctl", "name": "rev", "expect_seq": settled})
        assert closed["lease"]["id"] == reviewer["id"] and closed["lease"]["state"] == "closed"
        assert "hello" in closed["output"]
        listed = await s.ok("corral_reviewer_list", {"controller": "ctl"})
        assert listed["reviewers"] == []
        released = (await s.ok("corral_controller_release", RELEASE))["lease"]
        assert released["state"] == "released" and released["checkpoint_ref"] == "review done"
        assert not (s.home / "credentials" / "ctl.json").exists()
        await s.refused("corral_controller_release", RELEASE, "lease_released")

    transport(scenario)


def _bwrap_usable() -> bool:
    if shutil.which("bwrap") is None:
        return False
    probe = subprocess.run(["bwrap", "--ro-bind", "/", "/", "true"], capture_output=True, check=False, timeout=30)
    return probe.returncode == 0


def test_writer_lane_verify_release(stdio: Any, tmp_path: Path, hermetic_git: None) -> None:
    """preflight, start in a linked worktree, ask for an edit, verify in the sandbox, release with a
    checkpoint at the HEAD and status seen: the worktree is left exactly as it was."""
    if not _bwrap_usable():
        if os.environ.get("CI"):
            pytest.fail("bubblewrap cannot start; under CI the sandbox must run (apt-get install bubblewrap)")
        pytest.skip("bubblewrap cannot start here; corral never runs validations unsandboxed")
    lane = make_lane(tmp_path)

    async def scenario(s: Session) -> None:
        await s.ok("corral_controller_acquire", ACQUIRE)
        facts = await s.ok("corral_preflight", {"worktree": str(lane)})
        assert facts["linked"] is True and facts["branch"] == "feat"
        start = writer_start_args(facts, lane)
        lease = (await s.ok("corral_writer_start", start))["lease"]
        assert lease["machine"] == "writer" and lease["state"] == "active"
        # one lane per worktree
        await s.refused("corral_writer_start", {**start, "name": "writer2"}, "worktree_taken")
        asked = await s.ok(
            "corral_ask",
            {"controller": "ctl", "target": "writer1", "text": "write src/feature.py X = 42", "timeout": 60},
        )
        assert "write src/feature.py" in asked["output"]
        assert (lane / "src" / "feature.py").read_text() == "X = 42\n"
        verified = await s.ok("corral_writer_verify", {"controller": "ctl", "name": "writer1"})
        assert verified["verification"]["passed"] is True, verified
        assert [v["name"] for v in verified["verification"]["results"]] == ["compiles"]
        now = await s.ok("corral_preflight", {"worktree": str(lane)})
        assert now["status_sha256"] == status_digest(lane) != facts["status_sha256"]
        seq = asked["receipt"]["settled_seq"]
        release = {
            "controller": "ctl", "name": "writer1", "expect_seq": seq, "expect_head": now["head"],
            "expect_status": now["status_sha256"], "checkpoint_ref": "uncommitted work in lane",
            "checkpoint_sha256": CHECKPOINT_SHA,
        }  # fmt: skip
        await s.refused(
            "corral_writer_release", {**release, "expect_status": facts["status_sha256"]}, "git_status_mismatch"
        )
        released = await s.ok("corral_writer_release", release)
        assert released["lease"]["state"] == "released"
        after = await s.ok("corral_preflight", {"worktree": str(lane)})
        assert after["status_sha256"] == now["status_sha256"] and after["head"] == now["head"]
        assert (lane / "src" / "feature.py").read_text() == "X = 42\n"

    stdio(scenario)


def test_writer_audit_and_a_release_over_a_scope_violation(stdio: Any, tmp_path: Path, hermetic_git: None) -> None:
    """corral_writer_audit names a write outside the owned scopes; corral_writer_release refuses it
    (scope_violation) until accept_violation with a reason (without one: input_invalid naming reason)."""
    lane = make_lane(tmp_path)

    async def scenario(s: Session) -> None:
        await s.ok("corral_controller_acquire", ACQUIRE)
        facts = await s.ok("corral_preflight", {"worktree": str(lane)})
        # Unconfined (with its reason), so the stray write lands: the case the audit is the check for.
        unconfined = {"unconfined": True, "reason": "the audit's own test: a write outside must land"}
        await s.ok("corral_writer_start", writer_start_args(facts, lane) | unconfined)
        asked = await s.ok(
            "corral_ask", {"controller": "ctl", "target": "writer1", "text": "write stray.txt out", "timeout": 60}
        )
        report = await s.ok("corral_writer_audit", {"controller": "ctl", "name": "writer1"})
        assert report["clean"] is False
        assert [(v["path"], v["scope"]) for v in report["violations"]] == [("stray.txt", "outside")]
        now = await s.ok("corral_preflight", {"worktree": str(lane)})
        release = {
            "controller": "ctl", "name": "writer1", "expect_seq": asked["receipt"]["settled_seq"],
            "expect_head": now["head"], "expect_status": now["status_sha256"], "checkpoint_ref": "lane",
            "checkpoint_sha256": CHECKPOINT_SHA,
        }  # fmt: skip
        await s.refused("corral_writer_release", release, "scope_violation")
        await s.refused("corral_writer_release", {**release, "accept_violation": True}, "input_invalid")
        accepted = {**release, "accept_violation": True, "reason": "the stray file was asked for"}
        released = await s.ok("corral_writer_release", accepted)
        assert released["lease"]["state"] == "released"
        assert released["lease"]["violation_acceptance"]["reason"] == "the stray file was asked for"

    stdio(scenario)


def test_stale_fence_after_another_process_resumed(stdio: Any, mcp_home: Path, tmp_path: Path) -> None:
    """Another process resumes the controller (its own copy of the credential, the same store): the
    server's credential is stale, and renewing through MCP is refused fence_stale, as a tool error."""
    other_home = tmp_path / "other-home"

    async def acquire(s: Session) -> None:
        await s.ok("corral_controller_acquire", ACQUIRE)
        await s.ok("corral_controller_renew", {"controller": "ctl", "ttl_seconds": 600})

    stdio(acquire)
    mine = credential_of(mcp_home, "ctl")
    (other_home / "credentials").mkdir(parents=True, mode=0o700)
    os.chmod(other_home, 0o700)
    copy = other_home / "credentials" / "ctl.json"
    shutil.copyfile(mcp_home / "credentials" / "ctl.json", copy)
    os.chmod(copy, stat.S_IRUSR | stat.S_IWUSR)
    env = server_env(other_home, CORRAL_STORE=mine["store"])
    resumed = corral_cli(env, "controller", "resume", "--controller", "ctl", "--json")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["lease"]["generation"] == 2
    assert mine["token"] not in resumed.stdout + resumed.stderr
    assert credential_of(mcp_home, "ctl")["token"] == mine["token"]  # the server's file is untouched

    async def renew(s: Session) -> None:
        error = await s.refused("corral_controller_renew", {"controller": "ctl"}, "fence_stale")
        assert "stale" in error["message"]
        # the refusal is final, the server still answers
        listed = await s.ok("corral_controller_list", {"controller": "ctl"})
        assert listed["leases"][0]["generation"] == 2

    stdio(renew)


def test_ask_many_first_then_collect(stdio: Any, project: Path) -> None:
    """mode first returns the first to settle and leaves the others pending; collect gets them later."""

    async def scenario(s: Session) -> None:
        await s.ok("corral_controller_acquire", ACQUIRE)
        for name in ("fast", "slow1", "slow2"):
            await start_reviewer(s, name, project)
        asked = await s.ok(
            "corral_ask_many",
            {
                "controller": "ctl",
                "requests": [
                    {"target": "slow1", "text": "sleep 2\necho one"},
                    {"target": "fast", "text": "echo quick"},
                    {"target": "slow2", "text": "sleep 2\necho two"},
                ],
                "mode": "first",
                "timeout": 60,
            },
        )
        (first,) = asked["results"]
        assert first["receipt"]["name"] == "fast" and first["output"] == "quick\n"
        pending = asked["pending_receipts"]
        assert sorted(r["name"] for r in pending) == ["slow1", "slow2"]
        assert {r["state"] for r in pending} == {"pending"}
        listed = await s.ok("corral_receipts", {"controller": "ctl", "state": ["pending"]})
        assert sorted(r["token"] for r in listed["receipts"]) == sorted(r["token"] for r in pending)
        collected = await s.ok(
            "corral_collect", {"controller": "ctl", "receipts": [r["token"] for r in pending], "timeout": 60}
        )
        assert sorted(r["output"] for r in collected["results"]) == ["one\n", "two\n"]
        assert {r["receipt"]["state"] for r in collected["results"]} == {"completed"}
        left = await s.ok("corral_receipts", {"controller": "ctl"})
        assert left["receipts"] == []

    stdio(scenario)


def test_wait_cancelled_by_the_client(stdio: Any, project: Path) -> None:
    """The client gives up on a collect: the receipt is still pending, the server still answers, and a
    later collect gets the result."""

    async def scenario(s: Session) -> None:
        await s.ok("corral_controller_acquire", ACQUIRE)
        await start_reviewer(s, "rev", project)
        (project / "go").unlink(missing_ok=True)
        receipt = (
            await s.ok("corral_relay", {"controller": "ctl", "target": "rev", "text": "wait-file go\necho late"})
        )["receipt"]
        with anyio.move_on_after(1.5) as scope:
            await s.call("corral_collect", {"controller": "ctl", "receipts": [receipt["token"]], "timeout": 120})
        assert scope.cancelled_caught, "the collect returned while its agent still waited on a file"
        listed = await s.ok("corral_receipts", {"controller": "ctl"})
        assert [(r["token"], r["state"]) for r in listed["receipts"]] == [(receipt["token"], "pending")]
        status = await s.ok("corral_status", {})
        assert status["version"]
        with anyio.move_on_after(1.0) as scope:  # a cancelled wait_any changes nothing either
            await s.call(
                "corral_wait_any",
                {"controller": "ctl", "targets": [{"name": "rev", "after_seq": receipt["after_seq"]}], "timeout": 120},
            )
        assert scope.cancelled_caught
        (project / "go").write_text("")
        done = await s.ok("corral_collect", {"controller": "ctl", "receipts": [receipt["token"]], "timeout": 60})
        assert done["results"][0]["output"] == "late\n" and done["results"][0]["replayed"] is False

    stdio(scenario)


def test_progress_notifications(stdio: Any, project: Path) -> None:
    """A wait of more than two seconds reports progress: the tool, the elapsed time, each target's status."""

    async def scenario(s: Session) -> None:
        await s.ok("corral_controller_acquire", ACQUIRE)
        await start_reviewer(s, "rev", project)
        receipt = (await s.ok("corral_relay", {"controller": "ctl", "target": "rev", "text": "sleep 3\necho done"}))[
            "receipt"
        ]
        seen: list[str] = []
        waited = await s.ok(
            "corral_wait_any",
            {"controller": "ctl", "targets": [{"name": "rev", "after_seq": receipt["after_seq"]}], "timeout": 60},
            progress=seen,
        )
        assert waited["target"] == "rev" and "done" in waited["output"]
        assert len(seen) >= 2, seen
        reports = [json.loads(m) for m in seen]
        assert {r["tool"] for r in reports} == {"corral_wait_any"}
        elapsed = [r["elapsed"] for r in reports]
        assert elapsed == sorted(elapsed) and elapsed[0] > 0
        assert reports[0]["rev"]["status"] in ("working", "idle", "done")
        seen_collect: list[str] = []
        await s.ok(
            "corral_collect",
            {"controller": "ctl", "receipts": [receipt["token"]], "timeout": 60},
            progress=seen_collect,
        )
        for message in seen_collect:  # a quick collect may report nothing; what it reports names the receipt
            assert receipt["token"] in json.loads(message)["receipts"]

    stdio(scenario)


def test_review_over_unix_socket(unix_http: Any, project: Path, tmp_path: Path) -> None:
    """The HTTP transport on a unix socket: the socket is 0600 and the review flow's start works over it."""
    server, run = unix_http

    async def scenario(s: Session) -> None:
        mode = stat.S_IMODE(os.stat(tmp_path / "mcp.sock").st_mode)
        assert stat.S_ISSOCK(os.stat(tmp_path / "mcp.sock").st_mode) and mode == 0o600, oct(mode)
        await s.ok("corral_controller_acquire", ACQUIRE)
        await start_reviewer(s, "rev", project)
        asked = await s.ok(
            "corral_ask", {"controller": "ctl", "target": "rev", "text": "echo over-unix", "timeout": 60}
        )
        assert asked["output"] == "over-unix\n"

    run(scenario)
    assert "Traceback" not in server.stderr()
