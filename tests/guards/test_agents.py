"""The agent and receipt guards (:mod:`runner.guards.agents`), called directly: over leases and receipts
written to a real SQLite store (read back through the guard's view) and over the observations the
service passes in, as plain dicts."""

from __future__ import annotations

from typing import Any

import pytest

from runner.sql.store_sqlite import SQLiteStore
from tests.support.contexts import Contexts

CWD = "/work/project"
AGENT = {"pane_id": "p1", "name": "rev", "kind": "script", "cwd": CWD}


@pytest.fixture
def contexts(store: SQLiteStore) -> Contexts:
    return Contexts(store)


def seen(status: str = "idle", seq: int = 4, **more: Any) -> dict[str, Any]:
    """An observation of the agent of ``AGENT`` (``exists``: its pane is live)."""
    return {"exists": True, **AGENT, "status": status, "seq": seq, **more}


def test_a_name_held_by_any_live_lease_is_taken_and_a_closed_one_frees_it(contexts: Contexts) -> None:
    contexts.put("reviewer/r1", "active", {"name": "rev", "controller_id": "other"})
    contexts.put("writer/w1", "closed", {"name": "wri", "controller_id": "ctl"})
    contexts.put("adopted/a1", "close_failed", {"name": "old", "controller_id": "ctl"})
    start = contexts.absent("reviewer/r2")
    refused = contexts.refusal("agent_name_free", start, params={"name": "rev"})
    assert (refused.code, refused.details) == (
        "agent_name_taken",
        {"name": "rev", "holder": "reviewer/r1", "state": "active"},
    )
    assert contexts.refusal("agent_name_free", start, params={"name": "old"}).details["holder"] == "adopted/a1"
    assert contexts.guard("agent_name_free", start, params={"name": "wri"}) is None


@pytest.mark.parametrize(
    ("cwd", "message"),
    [
        ({"given": "relative/dir", "is_dir": True}, "is not an absolute path"),
        ({"given": "/no/such", "is_dir": False}, "does not exist or is not a directory"),
        ({}, "is not an absolute path"),
    ],
)
def test_agent_cwd_needs_an_existing_absolute_directory(contexts: Contexts, cwd: dict[str, Any], message: str) -> None:
    start = contexts.absent("reviewer/r1")
    refused = contexts.refusal("agent_cwd", start, observations={"cwd": cwd})
    assert refused.code == "cwd_invalid" and message in refused.message
    assert contexts.guard("agent_cwd", start, observations={"cwd": {"given": "/tmp", "is_dir": True}}) is None


def test_an_unknown_kind_is_refused_naming_the_configured_ones(contexts: Contexts) -> None:
    start = contexts.absent("reviewer/r1")
    kinds = {"kinds": ["claude", "script"]}
    assert contexts.guard("agent_kind_known", start, params={"kind": "script"}, observations=kinds) is None
    refused = contexts.refusal("agent_kind_known", start, params={"kind": "gpt"}, observations=kinds)
    assert (refused.code, refused.details) == (
        "agent_kind_unknown",
        {"kind": "gpt", "configured": ["claude", "script"]},
    )


def test_agent_identity_tells_a_gone_pane_from_another_agent(contexts: Contexts) -> None:
    lease = contexts.put("reviewer/r1", "active", {**AGENT, "terminal_id": "t-1"})
    assert contexts.guard("agent_identity", lease, observations={"agent": seen(terminal_id="t-1")}) is None
    assert contexts.refusal("agent_identity", lease, observations={}).code == "agent_gone"
    moved = contexts.refusal("agent_identity", lease, observations={"agent": seen(cwd="/elsewhere", terminal_id="t-1")})
    assert moved.code == "identity_changed"
    assert (moved.details["expected"]["cwd"], moved.details["observed"]["cwd"]) == (CWD, "/elsewhere")
    # The same pane id in a new terminal (a restarted host) is another agent.
    reused = contexts.refusal("agent_identity", lease, observations={"agent": seen(terminal_id="t-2")})
    assert reused.code == "identity_changed"
    # identity_changed is the inverse: it passes exactly where agent_identity refuses.
    assert contexts.guard("identity_changed", lease, observations={"agent": seen(terminal_id="t-2")}) is None
    assert contexts.refusal("identity_changed", lease, observations={"agent": seen(terminal_id="t-1")}).code == (
        "identity_unchanged"
    )


@pytest.mark.parametrize(
    ("status", "allow_blocked", "passes"),
    [
        ("idle", False, True),
        ("done", False, True),
        ("blocked", False, False),
        ("blocked", True, True),
        ("working", True, False),
    ],
)
def test_agent_settled(contexts: Contexts, status: str, allow_blocked: bool, passes: bool) -> None:
    lease = contexts.put("reviewer/r1", "active", AGENT)
    verdict = contexts.guard(
        "agent_settled", lease, {"allow_blocked": allow_blocked}, observations={"agent": seen(status)}
    )
    assert (verdict is None) == passes
    if not passes:
        assert verdict is not None and (verdict.code, verdict.details) == (
            "agent_not_settled",
            {"status": status, "seq": 4},
        )


def test_agent_cursor_and_capture_stable(contexts: Contexts) -> None:
    lease = contexts.put("reviewer/r1", "active", AGENT)
    assert (
        contexts.guard("agent_cursor", lease, params={"expected_state_change_seq": 4}, observations={"agent": seen()})
        is None
    )
    refused = contexts.refusal(
        "agent_cursor", lease, params={"expected_state_change_seq": 3}, observations={"agent": seen()}
    )
    assert (refused.code, refused.details) == ("cursor_mismatch", {"expected_seq": 3, "observed_seq": 4})
    stable = {"agent": seen(), "agent_after": seen()}
    assert contexts.guard("capture_stable", lease, observations=stable) is None
    moved = contexts.refusal("capture_stable", lease, observations={"agent": seen(), "agent_after": seen("working", 5)})
    assert (moved.code, moved.details) == ("cursor_superseded", {"before_seq": 4, "after_seq": 5})


@pytest.mark.parametrize(
    ("observed", "passes"),
    [
        (seen("done", 6, revision=3), True),  # settled, its very next own change after the prompt
        (seen("done", 6, revision=4), False),  # settled, but after later work too
        (seen("working", 6, revision=3), False),
        (seen("done", 5, revision=3), False),  # not past the cursor the prompt was taken at
    ],
)
def test_collect_cursor_takes_only_the_settle_right_after_the_prompt(
    contexts: Contexts, observed: dict[str, Any], passes: bool
) -> None:
    receipt = contexts.put("receipt/x", "pending", {**AGENT, "after_seq": 5, "after_revision": 2})
    verdict = contexts.guard("collect_cursor", receipt, observations={"agent": observed})
    assert (verdict is None) == passes
    # cursor_superseded passes where the agent went past that settle (its revision moved on).
    superseded = contexts.guard("cursor_superseded", receipt, observations={"agent": observed})
    assert (superseded is None) == (observed["revision"] > 3)


def test_one_open_receipt_per_target(contexts: Contexts) -> None:
    contexts.put("receipt/a", "pending", {"target": "reviewer/r1", "token": "tok-a", "name": "rev"})
    contexts.put("receipt/b", "completed", {"target": "reviewer/r2", "token": "tok-b", "name": "two"})
    new = contexts.absent("receipt/c")
    refused = contexts.refusal("no_open_receipt", new, params={"target": "reviewer/r1"})
    assert (refused.code, refused.details) == (
        "receipt_outstanding",
        {"receipt": "tok-a", "state": "pending", "target": "reviewer/r1"},
    )
    assert contexts.guard("no_open_receipt", new, params={"target": "reviewer/r2"}) is None
    # The lease's own check (a close) names no target: the instance itself is the target.
    lease = contexts.put("reviewer/r1", "active", AGENT)
    assert contexts.refusal("no_open_receipt", lease).code == "receipt_outstanding"


def test_target_leased_wants_one_active_lease_of_the_caller_holding_the_observed_agent(contexts: Contexts) -> None:
    contexts.put("reviewer/r1", "active", {**AGENT, "controller_id": "ctl"})
    contexts.put("reviewer/r9", "closed", {**AGENT, "controller_id": "ctl"})
    relay = contexts.absent("receipt/x")

    def verdict(target: str, controller: str = "ctl", agent: dict[str, Any] | None = None) -> str | None:
        refused = contexts.guard(
            "target_leased",
            relay,
            params={"target": target, "controller_id": controller},
            observations={"agent": agent or seen()},
        )
        return None if refused is None else refused.code

    assert verdict("reviewer/r1") is None
    assert verdict("reviewer/r9") == "target_not_leased"
    assert verdict("reviewer/none") == "target_not_leased"
    assert verdict("reviewer/r1", controller="other") == "not_owner"
    assert verdict("reviewer/r1", agent=seen(name="imposter")) == "identity_changed"
    contexts.put("writer/w1", "active", {**AGENT, "pane_id": "p2", "controller_id": "ctl"})
    assert verdict("reviewer/r1") == "target_ambiguous", "two active leases of ctl are named 'rev'"


def test_start_abandoned_judges_only_a_provisioning_lease_by_its_starter(contexts: Contexts) -> None:
    starter = {"pid": 4242, "host": "elsewhere"}
    provisioning = contexts.put("reviewer/r1", "provisioning", {"starter": starter})
    for status in ("stale", "absent"):
        assert contexts.guard("start_abandoned", provisioning, observations={"starter": status}) is None
    running = contexts.refusal("start_abandoned", provisioning, observations={"starter": "active"})
    assert running.code == "start_in_progress" and "process 4242" in running.message
    unknown = contexts.refusal("start_abandoned", provisioning, observations={"starter": "indeterminate"})
    assert unknown.code == "start_indeterminate" and "'elsewhere'" in unknown.message
    active = contexts.put("reviewer/r2", "active", {"starter": starter})
    assert contexts.guard("start_abandoned", active, observations={"starter": "active"}) is None


def test_a_pane_is_closed_around_no_lease_and_only_if_corral_started_it(contexts: Contexts) -> None:
    contexts.put("reviewer/r1", "active", {**AGENT, "host": "herdr"})
    contexts.put("writer/w1", "closed", {**AGENT, "pane_id": "p7", "host": "herdr"})
    close = contexts.absent("pane/x")
    held = contexts.refusal("pane_unleased", close, params={"host": "herdr", "pane_id": "p1"})
    assert (held.code, held.details) == ("pane_leased", {"lease": "reviewer/r1", "state": "active", "pane_id": "p1"})
    assert contexts.guard("pane_unleased", close, params={"host": "process", "pane_id": "p1"}) is None
    assert contexts.guard("pane_started_by_corral", close, params={"host": "herdr", "pane_id": "p7"}) is None
    assert contexts.guard("pane_started_by_corral", close, params={"host": "process", "pane_id": "p99"}) is None
    stranger = contexts.refusal("pane_started_by_corral", close, params={"host": "herdr", "pane_id": "p99"})
    assert stranger.code == "pane_not_corrals"


def test_agent_closable_lets_a_blocked_agent_go_only_with_an_operators_reason(contexts: Contexts) -> None:
    lease = contexts.put("reviewer/r1", "active", AGENT)
    blocked = {"agent": seen("blocked")}
    refused = contexts.refusal("agent_closable", lease, observations=blocked)
    assert refused.code == "agent_not_settled" and "--blocked --reason" in refused.message
    assert contexts.refusal("agent_closable", lease, params={"blocked_reason": "  "}, observations=blocked)
    assert contexts.guard("agent_closable", lease, params={"blocked_reason": "stuck"}, observations=blocked) is None
    assert contexts.refusal(
        "agent_closable", lease, params={"blocked_reason": "x"}, observations={"agent": seen("working")}
    )
