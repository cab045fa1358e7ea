"""The agent, receipt, writer and adoption updates (:mod:`runner.updates.agents`, ``writers``, ``adopted``):
what they record from the request, the observations and the leases read through a real store's view."""

from __future__ import annotations

import pytest

from runner.context import format_time
from runner.sql.store_sqlite import SQLiteStore
from tests.conftest import FakeClock
from tests.support.contexts import Contexts

AGENT = {"pane_id": "p1", "name": "rev", "kind": "script", "cwd": "/work/project"}


@pytest.fixture
def contexts(store: SQLiteStore) -> Contexts:
    return Contexts(store)


def test_a_lease_records_the_resolved_cwd_and_its_start_nonce_before_any_pane(contexts: Contexts) -> None:
    params = {"controller_id": "ctl", "name": "rev", "kind": "script", "cwd": "/link", "start_nonce": "n-1"}
    update = contexts.update(
        "record_agent_lease", contexts.absent("reviewer/r1"), params=params, observations={"cwd": {"real": "/real"}}
    )
    assert (update.data["cwd"], update.data["lease_id"], update.data["start_nonce"]) == ("/real", "r1", "n-1")
    assert update.data["options"] == {}


def test_a_receipt_is_bound_to_the_target_lease_as_stored_and_the_cursor_seen(
    contexts: Contexts, clock: FakeClock
) -> None:
    contexts.put("reviewer/r1", "active", {**AGENT, "host": "process", "terminal_id": None})
    params = {"target": "reviewer/r1", "token": "tok", "controller_id": "ctl", "prompt_sha256": "c" * 64}
    observed = {"agent": {"exists": True, **AGENT, "seq": 7, "revision": 2}}
    update = contexts.update("record_receipt", contexts.absent("receipt/x"), params=params, observations=observed)
    assert {
        k: update.data[k] for k in (*AGENT, "target", "target_machine", "host", "before_seq", "before_revision")
    } == {
        **AGENT,
        "target": "reviewer/r1",
        "target_machine": "reviewer",
        "host": "process",
        "before_seq": 7,
        "before_revision": 2,
    }
    assert update.data["reserved_at"] == format_time(clock.now)


def test_a_capture_of_a_blocked_agent_records_the_operators_decision(contexts: Contexts, clock: FakeClock) -> None:
    lease = contexts.put("reviewer/r1", "active", AGENT)
    observed = {"agent": {"exists": True, **AGENT, "seq": 9, "status": "blocked"}, "capture_sha256": "d" * 64}
    update = contexts.update(
        "record_capture", lease, trigger="close", params={"blocked_reason": "stuck on a prompt"}, observations=observed
    )
    assert update.data == {
        "capture_sha256": "d" * 64,
        "closing_seq": 9,
        "decision": {
            "kind": "close a blocked agent",
            "reason": "stuck on a prompt",
            "actor": "tester",
            "at": format_time(clock.now),
        },
    }
    idle = {**observed, "agent": {**observed["agent"], "status": "idle"}}
    assert (
        "decision"
        not in contexts.update("record_capture", lease, params={"blocked_reason": "x"}, observations=idle).data
    )


def test_reconcile_and_failure_records(contexts: Contexts, clock: FakeClock) -> None:
    lease = contexts.put("reviewer/r1", "active", AGENT)
    assert contexts.update("record_reconcile", lease).data == {"reconciled_at": format_time(clock.now)}
    lost = contexts.update("record_reconcile", lease, {"lost": True}).data
    assert "nothing was captured" in lost["failure"]
    failed = contexts.update(
        "record_failure", lease, {"reason": "identity_changed"}, observations={"agent": {"seq": 3}}
    )
    assert failed.data == {"reason": "identity_changed", "observed_seq": 3, "failed_at": format_time(clock.now)}


def test_a_writer_lane_records_the_git_facts_as_re_read_not_as_requested(contexts: Contexts) -> None:
    git = {"realpath": "/r/wt", "common_dir": "/r/.git", "branch": "lane", "head": "h1", "status_sha256": "s1"}
    params = {"worktree": "/link/wt", "owned_scopes": ("src",), "base_commit": "b0"}
    update = contexts.update(
        "record_writer_lane", contexts.absent("writer/w1"), params=params, observations={"git": git}
    )
    assert (update.data["cwd"], update.data["start_head"], update.data["start_status_sha256"]) == ("/r/wt", "h1", "s1")
    assert (update.data["worktree"], update.data["owned_scopes"], update.data["locked_scopes"]) == (
        "/link/wt",
        ["src"],
        [],
    )
    released = contexts.update(
        "record_release",
        contexts.absent("writer/w1"),
        params={"checkpoint_ref": "c", "checkpoint_sha256": "e" * 64},
        observations={"git": {**git, "head": "h2"}},
    )
    assert (released.data["release_head"], released.data["release_status_sha256"]) == ("h2", "s1")


def test_an_adoption_records_the_agent_as_observed(contexts: Contexts, clock: FakeClock) -> None:
    observed = {"agent": {"exists": True, **AGENT, "terminal_id": "t-1", "seq": 5}}
    update = contexts.update(
        "record_adoption",
        contexts.absent("adopted/a1"),
        params={"controller_id": "ctl", "host": "herdr", "name": "ignored"},
        observations=observed,
    )
    assert update.data == {
        "controller_id": "ctl",
        "lease_id": "a1",
        "host": "herdr",
        **AGENT,
        "terminal_id": "t-1",
        "adopted_seq": 5,
        "adopted_at": format_time(clock.now),
    }
