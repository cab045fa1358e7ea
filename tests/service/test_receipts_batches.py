"""Batches are atomic (issue 11): ask-many admits every target or none, collect takes 1-8 receipts and
``--mode all|first``. Real store, real process host, real scripted agents."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from runner.errors import InputError
from runner.service import AskManyInput, CollectInput, ReceiptsInput
from tests.service.agents_world import World, refused


@pytest.fixture
def world(tmp_path: Path) -> Any:
    w = World(tmp_path)
    yield w
    w.store.close()


def runs(world: World, name: str) -> int:
    pane = world.observe(name).pane_id
    return len(list((world.root / "agents" / pane).glob("run-*.log")))


def test_a_refused_ask_many_delivers_to_no_target(world: World) -> None:
    """One target already has an open receipt: the whole batch is refused, and the other targets got
    nothing (no prompt ran, no receipt was reserved for them)."""
    for name in ("a", "b", "c"):
        world.start(name)
    busy = world.relay("sleep 30", target="b")
    batch = AskManyInput("ctl", world.credential, (("a", "echo a"), ("b", "echo b"), ("c", "echo c")), timeout=5)
    refused("receipt_outstanding", lambda: anyio.run(world.service.receipts.ask_many, batch))
    assert runs(world, "a") == 0 and runs(world, "c") == 0, "no prompt reached the other targets"
    assert (world.observe("a").seq, world.observe("c").seq) == (0, 0)
    receipts = world.service.receipts(ReceiptsInput(include_ended=True))
    assert [r.token for r in receipts] == [busy.token], "nothing was reserved for the batch"


def test_an_ask_many_is_admitted_in_one_transaction(world: World) -> None:
    for name in ("a", "b"):
        world.start(name)
    batch = AskManyInput("ctl", world.credential, (("a", "echo one"), ("b", "echo two")), timeout=30)
    result = anyio.run(world.service.receipts.ask_many, batch)
    assert sorted(r.receipt.data["name"] for r in result.results) == ["a", "b"]
    relays = [e for e in world.store.events() if e.machine == "receipt" and e.trigger == "relay"]
    assert len(relays) == 2 and relays[1].seq == relays[0].seq + 1, "both intents in one commit, nothing between"
    assert len({r.receipt.data["batch_id"] for r in result.results}) == 1


def test_collect_takes_one_to_eight_receipts(world: World) -> None:
    tokens = tuple(f"corral-receipt-v1.00000000-0000-4000-8000-00000000000{i}" for i in range(9))
    with pytest.raises(InputError) as caught:
        CollectInput("ctl", world.credential, tokens)
    assert "1-8" in caught.value.message
    with pytest.raises(InputError):
        CollectInput("ctl", world.credential, tokens[:2], mode="some")


def test_collect_first_returns_the_first_and_leaves_the_rest_pending(world: World) -> None:
    world.start("fast")
    world.start("slow")
    fast = world.relay("echo quick", target="fast")
    slow = world.relay("sleep 30", target="slow")
    batch = anyio.run(
        world.service.receipts.collect_first,
        CollectInput("ctl", world.credential, (slow.token, fast.token), 30, mode="first"),
    )
    (result,) = batch.results
    assert result.receipt.data["name"] == "fast" and result.receipt.state == "completed"
    assert [(r.data["name"], r.state) for r in batch.pending_receipts] == [("slow", "pending")]
    refused("receipt_outstanding", lambda: world.relay("echo no", target="slow"))
    again = anyio.run(
        world.service.receipts.collect_first,
        CollectInput("ctl", world.credential, (slow.token, fast.token), 1, mode="first"),
    )
    assert again.results[0].replayed, "a completed receipt wins at once"


def test_a_missing_agent_command_is_refused_at_start(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(world.root / "empty"))
    error = refused("agent_command_missing", lambda: world.start("rev", kind="claude"))
    assert error.details["command"] == "claude" and error.details["path"] == [str(world.root / "empty")]
    assert world.store.find("reviewer") == [], "nothing was recorded"


def test_a_run_that_fails_is_not_a_finished_review(world: World) -> None:
    """An agent whose command exits non-zero: the receipt records the exit status and ask/collect fail
    with agent_run_failed (exit 6), the output in details; a blocked exit is not a failure."""
    from runner.errors import AgentRunFailedError

    world.start()
    receipt = world.relay("echo about to fail\nfail 7")
    with pytest.raises(AgentRunFailedError) as caught:
        world.collect(receipt.token)
    assert caught.value.status.exit == 6 and caught.value.details["exit_status"] == 7
    assert "about to fail" in caught.value.details["output"]
    recorded = world.service.receipts(ReceiptsInput(include_ended=True))[-1]
    assert (recorded.state, recorded.data["exit_status"], recorded.data["settled_status"]) == ("completed", 7, "done")
    with pytest.raises(AgentRunFailedError):
        world.collect(receipt.token)  # a replay says the same
    blocked = world.relay("block")
    (result,) = world.collect(blocked.token)
    assert result.receipt.data["settled_status"] == "blocked"


def test_a_blocked_reviewer_is_closed_only_on_an_operators_recorded_decision(world: World) -> None:
    """Issue 11: a blocked agent was a dead end. corral still never answers it, but an operator may end
    the lease: fenced, cursor-bound, the decision recorded with the lease and in the event log."""
    from runner.service import AbandonInput, ReviewerCloseInput

    world.start()
    receipt = world.relay("block")
    anyio.run(world.host.wait, world.observe().pane_id, 1, 30)
    assert world.observe().status == "blocked"
    plain = ReviewerCloseInput("ctl", world.credential, "rev", 2)
    error = refused("agent_not_settled", lambda: world.service.reviewers.close(plain))
    assert "--blocked" in error.message
    decided = ReviewerCloseInput("ctl", world.credential, "rev", 2, blocked_reason="it asks for prod credentials")
    refused("receipt_outstanding", lambda: world.service.reviewers.close(decided))
    world.service.receipts.abandon(AbandonInput("ctl", world.credential, receipt.token, "blocked: a person decides"))
    closed = world.service.reviewers.close(decided)
    assert closed.lease.state == "closed"
    decision = closed.lease.data["decision"]
    assert (decision["reason"], decision["actor"]) == ("it asks for prod credentials", "test")
    intent = next(e for e in world.store.events() if e.machine == "reviewer" and e.trigger == "close")
    assert intent.payload["params"]["blocked_reason"] == "it asks for prod credentials"
    with pytest.raises(InputError):
        ReviewerCloseInput("ctl", world.credential, "rev", 2, blocked_reason=" ")


def test_status_lists_what_needs_a_person_with_the_next_command(world: World) -> None:
    """Issue 11: status said "nothing needs attention" with an expired controller still holding live
    reviewers and receipts, a blocked agent, or a paused plan. Each is listed with the command to run."""
    from datetime import UTC, datetime, timedelta

    from runner.service import AcquireInput, ReviewerStartInput, Service
    from tests.support.stores import open_test_store

    world.start()
    world.relay("block")
    anyio.run(world.host.wait, world.observe().pane_id, 1, 30)
    kinds = {item["kind"]: item for item in world.service.inventory.status()["needs_attention"]}
    assert "--blocked --reason" in kinds["agent_blocked"]["next"]
    short = world.service.controller.acquire(AcquireInput("brief", "T-1", "d" * 64, 5, "t@h")).credential
    world.service.reviewers.start(ReviewerStartInput("brief", short, "other", "script", str(world.worktree)))
    # Six seconds later, as the store's clock tells it (a second connection whose clock runs ahead):
    # the 5 s lease has expired there without the test sleeping it out.
    ahead = open_test_store(world.root, clock=lambda: datetime.now(UTC) + timedelta(seconds=6))
    later = Service(ahead, world.service.library, actor="test", hosts=lambda name: world.host, kinds=world.kinds)
    kinds = {item["kind"]: item for item in later.inventory.status()["needs_attention"]}
    ahead.close()
    expired = kinds["controller_expired"]
    assert expired["controller"] == "brief" and expired["holds"] == 1
    assert "corral controller takeover --controller brief" in expired["next"]
