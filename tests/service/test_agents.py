"""Reviewer leases and receipts end to end: the real process host, the scripted agent, real processes."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from runner.agents.abc import AgentError, AgentHost, Expect, Observation, StartOptions
from runner.agents.kinds import Kinds
from runner.agents.process import ProcessHost
from runner.definitions.library import Library
from runner.errors import CorralError, InputError, RefusedError
from runner.fence import Credential
from runner.service import (
    AbandonInput,
    AcquireInput,
    AskManyInput,
    CollectInput,
    ControllerInput,
    DeliveryError,
    ReceiptsInput,
    RelayInput,
    ResumeInput,
    ReviewerCloseInput,
    ReviewerListInput,
    ReviewerStartInput,
    Service,
    WaitAnyInput,
)
from runner.store.sqlite import SQLiteStore

SHA = "d" * 64


class World:
    """A real store (wall clock), a real process host and a service, plus a controller lease."""

    def __init__(self, root: Path, host_factory: Callable[[SQLiteStore, Path], AgentHost] | None = None) -> None:
        self.root = root
        self.store = SQLiteStore(root / "corral.db")
        self.kinds = Kinds.load([])
        factory = host_factory or (lambda store, agents: ProcessHost(store, agents, self.kinds))
        self.host = factory(self.store, root / "agents")
        self.service = Service(
            self.store, Library(cache_dir=root / "cache"), actor="test", hosts=lambda name: self.host, kinds=self.kinds
        )
        self.credential = self.service.acquire(AcquireInput("ctl", "T-3", SHA, 900, "t@h")).credential
        self.worktree = root / "wt"
        self.worktree.mkdir()
        (self.worktree / "main.py").write_text("print('hi')\n")

    def start(self, name: str = "rev", kind: str = "script") -> Any:
        return self.service.reviewer_start(ReviewerStartInput("ctl", self.credential, name, kind, str(self.worktree)))

    def relay(self, text: str, target: str = "rev", credential: Credential | None = None) -> Any:
        return self.service.relay(RelayInput("ctl", credential or self.credential, target, text))

    def collect(self, *tokens: str, timeout: float = 30) -> Any:
        return anyio.run(self.service.collect, CollectInput("ctl", self.credential, tokens, timeout))

    def observe(self, name: str = "rev") -> Observation:
        lease = next(x for x in self.service.reviewers(ReviewerListInput("ctl")) if x.data["name"] == name)
        return self.host.get(lease.data["pane_id"])


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path)
    yield w
    w.store.close()


def refused(code: str, call: Callable[[], Any]) -> CorralError:
    with pytest.raises(CorralError) as caught:
        call()
    assert caught.value.code == code, caught.value.to_dict()
    return caught.value


def test_full_review_flow(world: World) -> None:
    lease = world.start()
    assert (lease.state, lease.data["pane_id"], lease.data["started_seq"]) == ("active", "p1", 0)
    assert lease.data["cwd"] == str(world.worktree.resolve())
    receipt = world.relay("please review the worktree")
    assert receipt.state == "pending"
    assert (receipt.data["before_seq"], receipt.data["after_seq"]) == (0, 1)
    assert receipt.data["prompt_sha256"] == hashlib.sha256(b"please review the worktree").hexdigest()
    (result,) = world.collect(receipt.token)
    assert result.receipt.state == "completed" and result.receipt.data["settled_seq"] == 2
    assert "main.py: 1 lines" in result.output and "verdict: 1 files reviewed" in result.output
    assert result.receipt.data["output_sha256"] == hashlib.sha256(result.output.encode()).hexdigest()
    closed = world.service.reviewer_close(ReviewerCloseInput("ctl", world.credential, "rev", 2))
    assert closed.lease.state == "closed" and closed.output == result.output
    assert closed.lease.data["capture_sha256"] == hashlib.sha256(closed.output.encode()).hexdigest()
    triggers = [(e.instance_id.split("/")[0], e.trigger, e.to_state) for e in world.store.events()]
    assert triggers == [
        ("controller", "acquire", "active"),
        ("reviewer", "start", "provisioning"),
        ("reviewer", "start:success", "active"),
        ("receipt", "relay", "reserved"),
        ("receipt", "relay:success", "pending"),
        ("receipt", "collect", "completed"),
        ("reviewer", "close", "closing"),
        ("reviewer", "close:success", "closed"),
    ]
    text = json.dumps([e.to_dict() for e in world.store.events()])
    assert "please review" not in text and "verdict" not in text, "no prompt or output in the event log"
    assert world.service.reviewers(ReviewerListInput("ctl")) == []


def test_second_prompt_is_refused_while_a_receipt_is_unresolved(world: World) -> None:
    world.start()
    first = world.relay("sleep 0.5\necho first")
    error = refused("receipt_outstanding", lambda: world.relay("echo second"))
    assert error.details["receipt"] == first.token
    assert world.observe().seq == 1, "nothing was delivered"
    (result,) = world.collect(first.token)
    assert result.output.strip() == "first"
    assert world.relay("echo second").state == "pending"


def test_close_with_a_stale_cursor_is_refused(world: World) -> None:
    world.start()
    world.collect(world.relay("echo one").token)
    refused(
        "cursor_mismatch", lambda: world.service.reviewer_close(ReviewerCloseInput("ctl", world.credential, "rev", 0))
    )
    assert [x.state for x in world.service.reviewers(ReviewerListInput("ctl"))] == ["active"]
    assert world.service.reviewer_close(ReviewerCloseInput("ctl", world.credential, "rev", 2)).lease.state == "closed"


def test_close_is_refused_while_a_receipt_is_open_or_the_agent_works(world: World) -> None:
    world.start()
    receipt = world.relay("sleep 0.4")
    refused(
        "agent_not_settled", lambda: world.service.reviewer_close(ReviewerCloseInput("ctl", world.credential, "rev", 1))
    )
    world.collect(receipt.token)
    blocked = world.relay("block")
    world.collect(blocked.token)
    assert world.observe().status == "blocked"
    refused(
        "agent_not_settled", lambda: world.service.reviewer_close(ReviewerCloseInput("ctl", world.credential, "rev", 4))
    )


def test_prompt_with_a_fence_resumed_elsewhere_is_refused(world: World) -> None:
    world.start()
    resumed = world.service.resume(ResumeInput("ctl", world.credential))
    refused("fence_stale", lambda: world.relay("echo stale"))
    assert world.observe().seq == 0, "nothing was delivered"
    assert world.service.receipts(ReceiptsInput("ctl")) == []
    assert world.relay("echo fresh", credential=resumed.credential).state == "pending"


def test_agent_moving_during_capture_fails_collect_and_never_mislabels(world: World) -> None:
    world.start()
    receipt = world.relay("echo mine")
    outsider = ProcessHost(world.store, world.root / "agents", world.kinds)
    real_read = world.host.read

    def read_then_move(pane_id: str, lines: int) -> str:
        output = real_read(pane_id, lines)
        outsider.prompt(pane_id, "sleep 0.2\necho not yours")  # someone drives the agent outside corral
        return output

    world.host.read = read_then_move  # type: ignore[method-assign]
    error = refused("cursor_superseded", lambda: world.collect(receipt.token))
    stored = world.service.receipts(ReceiptsInput("ctl"))[0]
    assert (stored.state, stored.data["reason"]) == ("failed", "cursor_superseded")
    assert stored.data.get("output_sha256") is None and "collected" not in error.details


def test_batch_first_returns_one_result_and_pending_receipts_that_collect_later(world: World) -> None:
    world.start("fast")
    world.start("slow")
    result = anyio.run(
        world.service.ask_many,
        AskManyInput(
            "ctl",
            world.credential,
            (("fast", "echo quick"), ("slow", "sleep 0.8\necho late")),
            "first",
            30,
        ),
    )
    ((first,), (pending,)) = (result.results, result.pending_receipts)
    assert (first.receipt.data["name"], first.output.strip()) == ("fast", "quick")
    assert (pending.data["name"], pending.state) == ("slow", "pending")
    assert first.receipt.data["batch_id"] == pending.data["batch_id"]
    refused("receipt_outstanding", lambda: world.relay("echo again", target="slow"))
    (later,) = world.collect(pending.token)
    assert later.output.strip() == "late"


def test_batch_all_collects_every_result(world: World) -> None:
    world.start("a")
    world.start("b")
    result = anyio.run(
        world.service.ask_many,
        AskManyInput(
            "ctl",
            world.credential,
            (("a", "echo A"), ("b", "sleep 0.2\necho B")),
            "all",
            30,
        ),
    )
    assert [(r.receipt.data["name"], r.output.strip()) for r in result.results] == [("a", "A"), ("b", "B")]
    assert result.pending_receipts == []


def test_wait_any_returns_the_first_to_settle(world: World) -> None:
    world.start("a")
    world.start("b")
    world.relay("sleep 2", target="a")
    world.relay("sleep 0.1", target="b")
    started = time.monotonic()
    result = anyio.run(world.service.wait_any, WaitAnyInput("ctl", world.credential, (("a", 1), ("b", 1)), 10))
    assert (result.target, result.observation.status, result.observation.seq) == ("b", "done", 2)
    assert time.monotonic() - started < 1.5, "the loser's wait was cancelled, not awaited"
    refused(
        "wait_timeout",
        lambda: anyio.run(world.service.wait_any, WaitAnyInput("ctl", world.credential, (("b", 2),), 0.2)),
    )


def test_wait_any_without_a_cursor_is_won_at_once_by_settled_agents_with_their_output(world: World) -> None:
    """Issue 10: agents already done win a cursor-less wait (it used to time out); --fresh waits."""
    world.start("a")
    world.start("b")
    world.start("c")
    for name in ("a", "b"):
        world.relay(f"echo from {name}", target=name)
    world.relay("sleep 30", target="c")
    anyio.run(world.service.wait_any, WaitAnyInput("ctl", world.credential, (("a", 1),), 10))
    anyio.run(world.service.wait_any, WaitAnyInput("ctl", world.credential, (("b", 1),), 10))
    started = time.monotonic()
    result = anyio.run(
        world.service.wait_any, WaitAnyInput("ctl", world.credential, (("c", None), ("a", None), ("b", None)), 10)
    )
    assert time.monotonic() - started < 1.0, "nothing was waited for"
    assert [(w.target, w.observation.status, w.observation.seq) for w in result.winners] == [
        ("a", "done", 2),
        ("b", "done", 2),
    ]
    assert [w.output.strip() for w in result.winners] == ["from a", "from b"]
    doc = result.to_dict()
    assert doc["target"] == "a" and doc["output"].strip() == "from a" and len(doc["winners"]) == 2
    refused(
        "wait_timeout",
        lambda: anyio.run(
            world.service.wait_any, WaitAnyInput("ctl", world.credential, (("a", None),), 0.2, fresh=True)
        ),
    )


def test_wait_any_output_is_bounded_by_lines(world: World) -> None:
    world.start("a")
    world.relay("echo l1\necho l2\necho l3\necho l4", target="a")
    result = anyio.run(world.service.wait_any, WaitAnyInput("ctl", world.credential, (("a", 1),), 10, lines=2))
    assert result.winners[0].output.strip().splitlines() == ["l3", "l4"]


class LostReplyHost(ProcessHost):
    """The process host, except that the first prompt's confirmation is lost after it was handed over."""

    lose = True

    def prompt(self, pane_id: str, text: str, expect: Expect | None = None, gate: Any = None) -> Observation:
        observed = super().prompt(pane_id, text, expect, gate)
        if self.lose:
            self.lose = False
            raise AgentError("the reply from the host was lost", code="agent_prompt_unconfirmed", delivered=None)
        return observed


def test_ambiguous_delivery_stays_reserved_and_blocks_until_abandoned(tmp_path: Path) -> None:
    world = World(tmp_path, lambda store, agents: LostReplyHost(store, agents, Kinds.load([])))
    world.start()
    error = refused("delivery_ambiguous", lambda: world.relay("sleep 0.5\necho maybe"))
    token = error.details["receipt"]["token"]
    assert error.details["receipt"]["state"] == "reserved"
    refused("receipt_outstanding", lambda: world.relay("echo other"))
    refused("receipt_reserved", lambda: world.collect(token))
    refused("agent_not_settled", lambda: world.service.abandon(AbandonInput("ctl", world.credential, token)))
    anyio.run(world.host.wait, "p1", 1, 10)
    abandoned = world.service.abandon(AbandonInput("ctl", world.credential, token, "operator saw it finish"))
    assert (abandoned.state, abandoned.data["reason"], abandoned.data["observed_seq"]) == ("abandoned", "abandoned", 2)
    assert world.relay("echo next").state == "pending"
    status = world.service.status()
    assert status["counts"]["receipt"] == {"abandoned": 1, "pending": 1}


def test_needs_attention_lists_reserved_receipts(tmp_path: Path) -> None:
    world = World(tmp_path, lambda store, agents: LostReplyHost(store, agents, Kinds.load([])))
    world.start()
    with pytest.raises(DeliveryError):
        world.relay("echo x")
    attention = world.service.status()["needs_attention"]
    assert [(a["machine"], a["state"]) for a in attention] == [("receipt", "reserved")]


class FlakyStartHost(ProcessHost):
    """Starts fail after creating a pane; closing that pane may fail too."""

    close_fails = False

    def start(
        self, name: str, kind: str, cwd: str, options: StartOptions, gate: Any = None, nonce: Any = None
    ) -> Observation:
        started = super().start(name, kind, cwd, options, gate, nonce)
        raise AgentError("the agent did not come up", code="agent_start_failed", pane_id=started.pane_id)

    def close(self, pane_id: str, gate: Any = None) -> None:
        if self.close_fails:
            raise AgentError("the pane would not close", code="pane_close_failed")
        super().close(pane_id, gate)


def test_failed_start_closes_its_pane_or_is_orphaned_until_reconciled(tmp_path: Path) -> None:
    world = World(tmp_path, lambda store, agents: FlakyStartHost(store, agents, Kinds.load([])))
    error = refused("agent_start_failed", world.start)
    assert error.details["lease"]["state"] == "failed_closed"
    assert world.host.list() == [], "the pane it got was closed"
    world.host.close_fails = True  # type: ignore[attr-defined]
    error = refused("agent_start_failed", lambda: world.start("rev2"))
    assert error.details["lease"]["state"] == "orphaned"
    pane = error.details["lease"]["pane_id"]
    # Reconcile closes the orphaned start's pane itself (fenced); while closing keeps failing, it stays orphaned.
    again = world.service.reviewer_reconcile(ControllerInput("ctl", world.credential, apply=True))
    assert [(a["action"], a["to"]) for a in again.actions] == [("reconciled", "orphaned")]
    assert [o.pane_id for o in world.host.list()] == [pane]
    world.host.close_fails = False  # type: ignore[attr-defined]
    done = world.service.reviewer_reconcile(ControllerInput("ctl", world.credential, apply=True))
    assert [(a["action"], a["to"], a["closed_pane"]) for a in done.actions] == [("reconciled", "failed_closed", pane)]
    assert world.host.list() == [], "the orphaned pane is closed"
    assert {x.state for x in world.service.reviewers(ReviewerListInput("ctl", include_ended=True))} == {"failed_closed"}


class KindlessHost(ProcessHost):
    """A host that does not know the kind after all (Herdr's own kind list can differ from corral's)."""

    def start(
        self, name: str, kind: str, cwd: str, options: StartOptions, gate: Any = None, nonce: Any = None
    ) -> Observation:
        from runner.agents.abc import AgentKindError

        raise AgentKindError(f"the host has no agent kind {kind!r}", kind=kind)


def test_a_host_refusing_the_kind_fails_the_start_cleanly(tmp_path: Path) -> None:
    world = World(tmp_path, lambda store, agents: KindlessHost(store, agents, Kinds.load([])))
    error = refused("agent_start_failed", world.start)
    assert error.details["lease"]["state"] == "failed_closed"
    assert "no agent kind" in error.details["lease"]["failure"]


def test_close_failure_then_reconcile(tmp_path: Path) -> None:
    world = World(tmp_path, lambda store, agents: FlakyStartHost(store, agents, Kinds.load([])))
    world.host.start = lambda *a, **k: ProcessHost.start(world.host, *a, **k)  # type: ignore[method-assign, assignment]
    world.start()
    world.host.close_fails = True  # type: ignore[attr-defined]
    error = refused(
        "agent_close_failed",
        lambda: world.service.reviewer_close(ReviewerCloseInput("ctl", world.credential, "rev", 0)),
    )
    assert error.details["lease"]["state"] == "close_failed"
    ProcessHost.close(world.host, "p1")
    done = world.service.reviewer_reconcile(ControllerInput("ctl", world.credential, apply=True))
    assert [(a["action"], a["to"]) for a in done.actions] == [("reconciled", "closed")]


def test_cleanup_is_a_dry_run_by_default_and_closes_only_settled_matching_agents(world: World) -> None:
    world.start("idle1")
    world.start("busy")
    world.start("waiting")
    world.relay("sleep 2", target="busy")
    blocked = world.relay("block", target="waiting")
    world.collect(blocked.token)
    dry = world.service.reviewer_cleanup(ControllerInput("ctl", world.credential))
    assert {a["name"]: a["action"] for a in dry.actions} == {"idle1": "would_close", "busy": "skip", "waiting": "skip"}
    assert len(world.service.reviewers(ReviewerListInput("ctl"))) == 3
    applied = world.service.reviewer_cleanup(ControllerInput("ctl", world.credential, apply=True))
    assert {a["name"]: a["action"] for a in applied.actions}["idle1"] == "closed"
    assert sorted(x.data["name"] for x in world.service.reviewers(ReviewerListInput("ctl"))) == ["busy", "waiting"]


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({"kind": "nosuchkind"}, "agent_kind_unknown"),
        ({"cwd": "relative/dir"}, "cwd_invalid"),
        ({"cwd": "/no/such/directory"}, "cwd_invalid"),
    ],
)
def test_start_refusals_write_nothing(world: World, change: dict[str, str], code: str) -> None:
    fields = {"name": "rev", "kind": "script", "cwd": str(world.worktree), **change}
    refused(code, lambda: world.service.reviewer_start(ReviewerStartInput("ctl", world.credential, **fields)))
    assert world.store.find("reviewer") == [] and world.host.list() == []


def test_name_taken_and_bad_inputs(world: World) -> None:
    world.start()
    refused("agent_name_taken", world.start)
    with pytest.raises(InputError) as bad:
        ReviewerStartInput("ctl", world.credential, "Bad Name", "script", "/tmp")
    assert bad.value.details["field"] == "name"
    with pytest.raises(InputError) as model:
        world.service.reviewer_start(
            ReviewerStartInput("ctl", world.credential, "m", "script", str(world.worktree), model="opus")
        )
    assert model.value.details["field"] == "model"
    with pytest.raises(InputError):
        RelayInput("ctl", world.credential, "rev", "   ")


def test_collect_after_the_coordinator_is_killed(world: World, tmp_path: Path) -> None:
    """kill -9 the collecting process mid-wait, and again right after completion: a new collect
    completes, then replays the same result while the agent sits at the settled cursor."""
    world.start()
    home = tmp_path / "clihome"
    credential_file = home / "credentials" / "ctl.json"
    from runner import credentials

    credentials.save(credential_file, world.credential, world.store.url)
    env = {**os.environ, "CORRAL_HOME": str(home), "CORRAL_STORE": world.store.url}
    receipt = world.relay("sleep 1.0\necho survived")
    cli = [sys.executable, "-m", "runner.cli", "collect", "--controller", "ctl", "--receipt", receipt.token, "--json"]
    victim = subprocess.Popen(cli, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait()
    assert world.service.receipts(ReceiptsInput("ctl"))[0].state == "pending"
    (result,) = world.collect(receipt.token)
    assert result.output.strip() == "survived" and not result.replayed
    again = subprocess.run(cli, env=env, capture_output=True, text=True, check=True)
    (replayed,) = json.loads(again.stdout)["results"]
    assert replayed["replayed"] is True and replayed["output"] == result.output
    assert replayed["receipt"]["output_sha256"] == result.receipt.data["output_sha256"]
    world.collect(world.relay("echo moved on").token)
    refused("cursor_superseded", lambda: world.collect(receipt.token))


def test_agents_outlive_the_prompting_process(world: World, tmp_path: Path) -> None:
    world.start()
    home = tmp_path / "clihome"
    from runner import credentials

    credentials.save(home / "credentials" / "ctl.json", world.credential, world.store.url)
    env = {**os.environ, "CORRAL_HOME": str(home), "CORRAL_STORE": world.store.url}
    relayed = subprocess.run(
        [sys.executable, "-m", "runner.cli", "relay", "rev", "--controller", "ctl", "--json"],
        input="sleep 0.3\necho after the relay exited",
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert relayed.returncode == 0, relayed.stdout + relayed.stderr
    token = json.loads(relayed.stdout)["receipt"]["token"]
    (result,) = world.collect(token)
    assert result.output.strip() == "after the relay exited"


def test_receipts_hold_hashes_and_cursors_only(world: World) -> None:
    world.start()
    (result,) = world.collect(world.relay("echo SECRET-ish text").token)
    stored = world.store.get(f"receipt/{result.receipt.token.split('.', 1)[1]}")
    assert stored is not None
    assert "SECRET-ish" not in json.dumps(dict(stored.data))
    assert set(stored.data) >= {"prompt_sha256", "output_sha256", "before_seq", "after_seq", "settled_seq"}


def test_refusal_codes_reach_the_caller_as_refusals(world: World) -> None:
    world.start()
    with pytest.raises(RefusedError):
        world.relay("echo x", target="rev", credential=Credential("ctl", "x", 99, "0" * 32))
    refused("target_unknown", lambda: world.relay("echo x", target="nobody"))
