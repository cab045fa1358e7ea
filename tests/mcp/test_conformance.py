"""Errors are tool errors, and credentials never cross the MCP boundary.

``test_errors_are_tool_errors``: schema-invalid arguments, an unknown tool and refused guards all come
back as ``isError`` results carrying ``{code, message, details}`` (the argument named as the tool names
it), never as a protocol error.

``test_conformance_run_leaks_no_secret``: one session calls every tool at least once (successes and
refusals), then scans every response (text and structured content), every progress message and the
server's stderr for each credential token the server held during the run (read from the 0600 files in
the state home), in every form it could take (as is, upper case, its stored SHA-256, base64).
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from runner.mcp.tools import TOOLS
from tests.mcp.conftest import (
    CHECKPOINT_SHA,
    SHA,
    Session,
    StdioRunner,
    credential_of,
    make_lane,
    writer_start_args,
)

pytestmark = pytest.mark.slow

ACQUIRE = {"controller": "ctl", "authority_ref": "TICKET-14", "authority_sha256": SHA, "ttl_seconds": 300}


def test_errors_are_tool_errors(stdio: StdioRunner, project: Path) -> None:
    async def scenario(s: Session) -> None:
        async def invalid(name: str, arguments: dict[str, Any], field: str) -> dict[str, Any]:
            error = await s.refused(name, arguments, "input_invalid")
            assert error["details"]["field"] == field, error
            return error

        await invalid("corral_controller_acquire", {**ACQUIRE, "ttl_seconds": "soon"}, "ttl_seconds")
        missing = await invalid(
            "corral_controller_acquire", {"controller": "ctl", "authority_sha256": SHA}, "authority_ref"
        )
        assert "authority_ref" in missing["message"]
        extra = await invalid("corral_status", {"verbose": True}, "verbose")
        assert "takes no argument 'verbose'" in extra["message"]
        await invalid("corral_collect", {"controller": "ctl", "receipts": ["r"], "mode": "some"}, "mode")
        await invalid(
            "corral_ask_many", {"controller": "ctl", "requests": [{"target": 3, "text": "x"}]}, "requests.0.target"
        )
        await invalid("corral_receipts", {"state": ["lost"]}, "state.0")
        # checks the service makes (not the schema) name the tool's argument, not the Input field behind it
        await invalid("corral_controller_acquire", {**ACQUIRE, "ttl_seconds": 1}, "ttl_seconds")
        await invalid("corral_controller_acquire", {**ACQUIRE, "controller": "no spaces"}, "controller")
        await invalid("corral_draw", {"machine": "controller", "recipe": "review"}, "machine")
        # a controller id is checked before a credential path is made from it (no file outside the home)
        await invalid("corral_controller_renew", {"controller": str(project / "elsewhere")}, "controller")
        await invalid("corral_relay", {"controller": "../ctl", "target": "r", "text": "x"}, "controller")
        unknown = await s.refused("corral_nothing", {}, "tool_unknown")
        assert "corral_nothing" in unknown["message"]
        # refused guards
        await s.refused("corral_controller_renew", {"controller": "ctl"}, "credential_missing")
        lease = (await s.ok("corral_controller_acquire", ACQUIRE))["lease"]
        await invalid(
            "corral_reviewer_start", {"controller": "ctl", "name": "r", "kind": "script", "cwd": "rel"}, "cwd"
        )
        # the service's checks of list arguments name the tool's argument (receipts, not --receipt)
        await invalid("corral_collect", {"controller": "ctl", "receipts": ["nope"]}, "receipts")
        await invalid("corral_wait_any", {"controller": "ctl", "targets": []}, "targets")
        held = await s.refused("corral_controller_acquire", ACQUIRE, "lease_held")
        assert held["details"]
        await invalid(
            "corral_controller_takeover", {"controller": "ctl", "expect_lease": "x", "ttl_seconds": 60}, "expect_lease"
        )
        await s.refused(
            "corral_controller_takeover",
            {"controller": "ctl", "expect_lease": lease["lease_id"], "ttl_seconds": 60},
            "lease_not_expired",
        )
        await s.refused("corral_relay", {"controller": "ctl", "target": "nobody", "text": "hi"}, "target_unknown")
        # a wait that ends without its agent settling is refused wait_timeout (not internal: the waits
        # run in a task group beside their progress, which must not wrap the refusal)
        await s.ok("corral_reviewer_start", {"controller": "ctl", "name": "rev", "kind": "script", "cwd": str(project)})
        receipt = (await s.ok("corral_relay", {"controller": "ctl", "target": "rev", "text": "sleep 30"}))["receipt"]
        timed_out = await s.refused(
            "corral_collect", {"controller": "ctl", "receipts": [receipt["token"]], "timeout": 0.5}, "wait_timeout"
        )
        assert timed_out["details"]["receipt"]["state"] == "pending"
        await s.refused(
            "corral_wait_any",
            {"controller": "ctl", "targets": [{"name": "rev", "after_seq": receipt["after_seq"]}], "timeout": 0.5},
            "wait_timeout",
        )
        await s.refused("corral_agent_wait", {"target": "p999", "until": ["done"], "timeout": 0.5}, "agent_gone")
        await s.refused(
            "corral_ask", {"controller": "ctl", "target": "ghost", "text": "x", "timeout": 1}, "target_unknown"
        )
        # after all that the server still answers
        assert (await s.ok("corral_status", {}))["version"]
        for _, result in s.results:
            text = " ".join(getattr(block, "text", "") for block in result.content)
            assert "Traceback" not in text and 'File "' not in text

    stdio(scenario)
    assert "Traceback" not in stdio.last_session.stderr()


def _forms(token: str) -> set[str]:
    """A token in every form a leak could take."""
    raw = token.encode()
    forms = {token, token.upper(), hashlib.sha256(raw).hexdigest(), base64.b64encode(raw).decode()}
    forms.add(base64.urlsafe_b64encode(raw).decode().rstrip("="))
    if all(c in "0123456789abcdef" for c in token):
        forms.add(base64.b64encode(bytes.fromhex(token)).decode().rstrip("="))
    return {f for f in forms if len(f) >= 16}


def _plan(cwd: Path) -> dict[str, Any]:
    return {
        "plan": "mcp-plan-1",
        "recipe": "review",
        "controller": "planctl",
        "inputs": {
            "cwd": str(cwd),
            "prompt": "echo planned",
            "kind": "script",
            "reviewer": "planrev",
            "timeout": 60,
            "authority_ref": "PLAN-14",
            "keep_controller": True,  # its credential stays, so the scan below looks for its token too
            "authority_sha256": SHA,
        },
    }


def test_conformance_run_leaks_no_secret(stdio: StdioRunner, project: Path, tmp_path: Path, hermetic_git: None) -> None:
    lane = make_lane(tmp_path / "git")
    tokens: set[str] = set()

    def keep(controller: str) -> None:
        tokens.add(credential_of(project.parent / "home", controller)["token"])

    async def scenario(s: Session) -> None:
        ok, refused = s.ok, s.refused
        c = {"controller": "ctl"}
        # the controller lease
        await refused("corral_controller_renew", c, "credential_missing")
        lease = (await ok("corral_controller_acquire", ACQUIRE))["lease"]
        keep("ctl")
        await refused("corral_controller_acquire", ACQUIRE, "lease_held")
        await ok("corral_controller_renew", {**c, "ttl_seconds": 600})
        resumed = (await ok("corral_controller_resume", {**c, "ttl_seconds": 600}))["lease"]
        keep("ctl")
        assert resumed["generation"] == lease["generation"] + 1
        await refused(
            "corral_controller_takeover",
            {**c, "expect_lease": resumed["lease_id"], "ttl_seconds": 60},
            "lease_not_expired",
        )
        leases = await ok("corral_controller_list", {"all": True})
        assert [lease["controller_id"] for lease in leases["leases"]] == ["ctl"]
        # reviewers and receipts
        await ok("corral_reviewer_start", {**c, "name": "rev", "kind": "script", "cwd": str(project)})
        await ok("corral_reviewer_start", {**c, "name": "rev2", "kind": "script", "cwd": str(project)})
        await refused(
            "corral_reviewer_start", {**c, "name": "rev", "kind": "script", "cwd": str(project)}, "agent_name_taken"
        )
        receipt = (await ok("corral_relay", {**c, "target": "rev", "text": "echo one"}))["receipt"]
        await refused("corral_relay", {**c, "target": "rev", "text": "echo two"}, "receipt_outstanding")
        collected = await ok("corral_collect", {**c, "receipts": [receipt["token"]], "timeout": 60})
        await ok("corral_ask", {**c, "target": "rev", "text": "sleep 1.5\necho two", "timeout": 60})
        many = await ok(
            "corral_ask_many",
            {
                **c,
                "requests": [{"target": "rev", "text": "echo a"}, {"target": "rev2", "text": "echo b"}],
                "timeout": 60,
            },
        )
        assert len(many["results"]) == 2 and collected["results"][0]["output"] == "one\n"
        seq = many["results"][0]["receipt"]["settled_seq"]
        await ok("corral_wait_any", {**c, "targets": [{"name": "rev", "after_seq": None}], "timeout": 30})
        await ok("corral_receipts", {**c, "all": True})
        await refused("corral_abandon", {**c, "receipt": receipt["token"]}, "transition_not_allowed")
        # observations
        agents = (await ok("corral_agents", {}))["agents"]
        pane = next(a for a in agents if a["name"] == "rev")
        await ok("corral_agent_get", {"target": pane["pane_id"]})
        await ok("corral_agent_read", {"target": pane["pane_id"], "lines": 20})
        await ok(
            "corral_agent_wait",
            {"target": pane["pane_id"], "until": ["done", "idle"], "after_seq": pane["seq"] - 1, "timeout": 30},
        )
        await refused("corral_agent_get", {"target": "p999"}, "agent_gone")
        await refused(
            "corral_agent_close",
            {**c, "target": pane["pane_id"], "expect_name": "rev", "expect_kind": "script",
             "expect_cwd": str(project), "expect_seq": pane["seq"]},
            "pane_leased",
        )  # fmt: skip
        await refused(
            "corral_adopt",
            {**c, "target": pane["pane_id"], "expect_name": "rev", "expect_kind": "script",
             "expect_cwd": str(project), "expect_seq": pane["seq"]},
            "pane_leased",
        )  # fmt: skip
        await refused("corral_adopted_close", {**c, "target": "p999", "expect_seq": 1}, "target_unknown")
        await refused("corral_adopted_release", {**c, "target": "p999"}, "target_unknown")
        await ok("corral_adopted_list", {"all": True})
        await ok("corral_adopted_reconcile", c)
        await ok("corral_agent_reconcile", c)
        await ok("corral_reviewer_reconcile", c)
        await ok("corral_reviewer_list", {"all": True})
        rev2 = many["results"][1]["receipt"]
        await ok("corral_reviewer_close", {**c, "name": "rev", "expect_seq": seq})
        await ok("corral_reviewer_cleanup", {**c, "apply": True})
        assert rev2["name"] == "rev2"
        # a writer lane
        facts = await ok("corral_preflight", {"worktree": str(lane)})
        await ok("corral_scopes_check", {"own": ["src"], "worktree": str(lane)})
        await ok("corral_writer_start", writer_start_args(facts, lane))
        conflict = await ok("corral_scopes_check", {"own": ["src/x.py"], "worktree": str(lane)})
        assert conflict["ok"] is False
        await ok("corral_writer_list", c)
        verify = await s.call("corral_writer_verify", {**c, "name": "writer1"})
        assert verify.is_error is False or verify.structured_content["error"]["code"] == "sandbox_unavailable"
        await ok("corral_writer_reconcile", c)
        now = await ok("corral_preflight", {"worktree": str(lane)})
        writer = next(a for a in (await ok("corral_agents", {}))["agents"] if a["name"] == "writer1")
        release = {
            **c, "name": "writer1", "expect_seq": writer["seq"], "expect_head": now["head"],
            "expect_status": now["status_sha256"], "checkpoint_ref": "lane", "checkpoint_sha256": CHECKPOINT_SHA,
        }  # fmt: skip
        await refused("corral_writer_release", {**release, "expect_seq": writer["seq"] + 9}, "cursor_mismatch")
        await ok("corral_writer_release", release)
        # plans, definitions, the log
        plan = await ok("corral_run", {"plan": _plan(project)})
        assert plan["state"] == "succeeded", plan
        keep("planctl")
        shown = await ok("corral_plans_show", {"plan_id": "mcp-plan-1"})
        assert shown["runner"]["status"] == "expired", shown  # issue 24: the runner's lease ended with the plan
        order = ["acquire", "start", "relay", "collect", "close", "release-controller"]
        assert [step["id"] for step in shown["steps"]] == order, "the steps in run order"
        await ok("corral_plans_list", {"all": True})
        await refused("corral_plans_retry", {"plan_id": "mcp-plan-1"}, "plan_not_failed")
        await refused(
            "corral_plans_decide", {"plan_id": "mcp-plan-1", "step": "close", "approve": True, "reason": "ok"},
            "plan_not_waiting",
        )  # fmt: skip
        await s.call("corral_plans_resume", {"plan_id": "mcp-plan-1"})
        await s.call("corral_plans_cancel", {"plan_id": "mcp-plan-1"})
        await refused("corral_plans_show", {"plan_id": "nope"}, "plan_unknown")
        await ok("corral_recipe_list", {})
        await ok("corral_recipe_show", {"name": "review"})
        await ok("corral_machines", {})
        await ok("corral_draw", {"machine": "controller"})
        await ok("corral_draw", {"plan": "mcp-plan-1", "format": "dot"})
        await ok("corral_check", {"names": ["controller"], "actors": 2})
        events = await ok("corral_events", {"since": 0, "limit": 10000})
        assert len(events["events"]) > 20
        await ok("corral_status", {})
        await ok("corral_controller_release", {**c, "checkpoint_ref": "done", "checkpoint_sha256": CHECKPOINT_SHA})
        await refused(
            "corral_controller_release", {**c, "checkpoint_ref": "done", "checkpoint_sha256": SHA}, "lease_released"
        )
        # and every tool once more with an argument it does not take
        for name in TOOLS:
            await refused(name, {"zzz_unknown": 1}, "input_invalid")

    stdio(scenario)
    # reading the session back: every tool was called, and nothing carried a token
    session: Session = stdio.last_session
    assert session.called == set(TOOLS), sorted(set(TOOLS) - session.called)
    assert len(tokens) == 3
    assert session.progress, "the waits reported no progress: the scan would not cover progress messages"
    texts = [*session.texts(), session.stderr()]
    for token in tokens:
        for form in _forms(token):
            leaks = [text[:200] for text in texts if form in text]
            assert not leaks, f"a credential token ({form[:6]}…) reached the client or the log: {leaks}"
    assert json.dumps([t for t in texts if "corral-receipt-v1." in t][:1])  # receipts (not secrets) do show
