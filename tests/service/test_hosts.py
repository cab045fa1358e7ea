"""The reviewer, receipt and writer suite, run on every agent host (issue 10).

One world (a real SQLite store, a real :class:`~runner.service.Service`, ``hosts=lambda name: host``)
per host of the ``host`` fixture (``tests/service/conftest.py``): the process host with the scripted
agent, and the Herdr host driving the contract fake of ``herdr`` with four busy background agents
moving its one server-wide counter all the time. Leases are started with ``host=`` that host, and
prompts use the directives both agents obey (``echo``, ``sleep``, ``wait-file``, ``block``), so every
assertion means the same on both; an agent that must still be working when a test checks what that
refuses is held by ``wait-file`` and released (:meth:`World.release`), never given a long sleep;
cursors are read from what corral recorded, never assumed contiguous.

Where the hosts truly differ, each host's documented behaviour is asserted (docs/hosts.md), never
skipped. The host is wrapped (:class:`HookedHost`, by composition) so a test can act between the
engine's checks and the host's hand-over, or kill the coordinator right after a pane exists.
"""

from __future__ import annotations

import builtins
import contextlib
import hashlib
import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from runner.agents.abc import AgentError, AgentHost, Expect, Observation, StartOptions
from runner.agents.kinds import Kinds
from runner.context import Gate
from runner.errors import AuthorityMovedError, CorralError
from runner.fence import Credential
from runner.git import hook
from runner.service import (
    AbandonInput,
    AcquireInput,
    AskManyInput,
    CollectInput,
    ControllerInput,
    Core,
    PaneCloseInput,
    ReceiptsInput,
    RelayInput,
    ResumeInput,
    ReviewerCloseInput,
    ReviewerListInput,
    ReviewerStartInput,
    Service,
    WaitAnyInput,
    WriterReleaseInput,
    WriterStartInput,
)
from tests.service.conftest import HostRig
from tests.support.gitrepo import commit, git, head_of, status_digest
from tests.support.specs import shared_library
from tests.support.stores import open_test_store

SHA = hashlib.sha256(b"hosts authority").hexdigest()
CHECKPOINT_SHA = hashlib.sha256(b"hosts checkpoint").hexdigest()


class RunnerDied(BaseException):
    """The coordinator died here (as after ``kill -9``): no effect or executor catches it."""


class HookedHost(AgentHost):
    """Any host, with hooks a test sets: ``before[what]`` runs after the engine's checks and before the
    host is asked to act (``start``, ``prompt``, ``close``: the gate still runs inside the host);
    ``after[what]`` runs once the host has acted, and may raise. Each hook runs once."""

    def __init__(self, inner: AgentHost) -> None:
        self.inner = inner
        self.name = inner.name
        self.confines_writes = inner.confines_writes  # type: ignore[misc]  # reason: the inner host's
        self.before: dict[str, Callable[[], None]] = {}
        self.after: dict[str, Callable[[], None]] = {}

    def _run(self, hooks: dict[str, Callable[[], None]], what: str) -> None:
        hook = hooks.pop(what, None)
        if hook is not None:
            hook()

    def start(
        self, name: str, kind: str, cwd: str, options: StartOptions, gate: Gate | None = None, nonce: str | None = None
    ) -> Observation:
        self._run(self.before, "start")
        started = self.inner.start(name, kind, cwd, options, gate, nonce)
        self._run(self.after, "start")
        return started

    def get(self, pane_id: str) -> Observation:
        return self.inner.get(pane_id)

    def list(self) -> builtins.list[Observation]:
        return self.inner.list()

    def prompt(self, pane_id: str, text: str, expect: Expect | None = None, gate: Gate | None = None) -> Observation:
        self._run(self.before, "prompt")
        observed = self.inner.prompt(pane_id, text, expect, gate)
        self._run(self.after, "prompt")
        return observed

    def read(self, pane_id: str, lines: int) -> str:
        output = self.inner.read(pane_id, lines)
        self._run(self.after, "read")
        return output

    async def wait(self, pane_id: str, after_seq: int, timeout: float) -> Observation:
        return await self.inner.wait(pane_id, after_seq, timeout)

    def close(self, pane_id: str, gate: Gate | None = None) -> None:
        self._run(self.before, "close")
        self.inner.close(pane_id, gate)

    def find(self, name: str, kind: str, cwd: str, nonce: str | None = None) -> builtins.list[Observation]:
        return self.inner.find(name, kind, cwd, nonce)

    def describe(self) -> dict[str, Any]:
        return self.inner.describe()


class World:
    """A real store (wall clock), the rig's host (hooked), a service and a controller lease."""

    def __init__(self, rig: HostRig) -> None:
        self.rig = rig
        self.root = rig.root
        self.store = open_test_store(self.root)
        self.kinds = Kinds.load([])
        self.host = HookedHost(rig.build(self.store, self.kinds))
        self.service = Service(
            self.store,
            shared_library(),
            actor="test",
            hosts=lambda name: self.host,
            kinds=self.kinds,
        )
        self.credential = self.service.controller.acquire(AcquireInput("ctl", "T-10", SHA, 900, "t@h")).credential
        self.worktree = self.root / "wt"
        self.worktree.mkdir()
        (self.worktree / "main.py").write_text("print('hi')\n")

    # --- driving ---------------------------------------------------------------------------------

    def start(self, name: str = "rev", credential: Credential | None = None) -> Any:
        return self.service.reviewers.start(
            ReviewerStartInput(
                "ctl", credential or self.credential, name, "script", str(self.worktree), host=self.rig.name
            )
        )

    def relay(self, text: str, target: str = "rev", credential: Credential | None = None) -> Any:
        return self.service.receipts.relay(RelayInput("ctl", credential or self.credential, target, text))

    def collect(self, *tokens: str, timeout: float = 30) -> Any:
        return anyio.run(self.service.receipts.collect, CollectInput("ctl", self.credential, tokens, timeout))

    def close(self, seq: int, name: str = "rev", credential: Credential | None = None, **changes: Any) -> Any:
        return self.service.reviewers.close(
            ReviewerCloseInput("ctl", credential or self.credential, name, seq, **changes)
        )

    def ask_many(self, requests: tuple[tuple[str, str], ...], mode: str, timeout: float = 30) -> Any:
        return anyio.run(self.service.receipts.ask_many, AskManyInput("ctl", self.credential, requests, mode, timeout))

    def wait_any(self, targets: tuple[tuple[str, int | None], ...], timeout: float, fresh: bool = False) -> Any:
        return anyio.run(
            self.service.waits.wait_any, WaitAnyInput("ctl", self.credential, targets, timeout, fresh=fresh)
        )

    def reconcile(self, machine: str = "reviewer") -> list[dict[str, Any]]:
        return self.service.inventory.reconcile(ControllerInput("ctl", self.credential, apply=True), machine).actions

    def resume(self, credential: Credential | None = None) -> Credential:
        return self.service.controller.resume(ResumeInput("ctl", credential or self.credential, 900)).credential

    def release(self, name: str = "go") -> None:
        """Let an agent held by ``wait-file NAME`` (in the reviewers' worktree) go on."""
        (self.worktree / name).write_text("")

    def settle(self, pane_id: str, after_seq: int) -> Observation:
        """Wait on the host itself (not through corral) for the agent to settle after ``after_seq``."""
        return anyio.run(self.host.inner.wait, pane_id, after_seq, 30)

    # --- observing -------------------------------------------------------------------------------

    def lease(self, name: str = "rev", include_ended: bool = False) -> Any:
        (found,) = [
            x for x in self.service.reviewers(ReviewerListInput("ctl", include_ended)) if x.data["name"] == name
        ]
        return found

    def pane(self, name: str = "rev") -> str:
        return str(self.lease(name).data["pane_id"])

    def observe(self, name: str = "rev") -> Observation:
        return self.host.get(self.pane(name))

    def ours(self) -> list[Observation]:
        """The live agents, less the host's background agents (which corral did not start)."""
        return [o for o in self.host.list() if o.pane_id not in self.rig.background]

    def receipt(self, token: str) -> Any:
        (found,) = [r for r in self.service.receipts(ReceiptsInput("ctl", include_ended=True)) if r.token == token]
        return found

    def triggers(self) -> list[tuple[str, str, str]]:
        return [(e.instance_id.split("/")[0], e.trigger, e.to_state) for e in self.store.events()]

    def shutdown(self) -> None:
        for observed in self.ours():  # stop any process-host supervisor a test left working
            self.host.inner.close(observed.pane_id)
        self.store.close()


@pytest.fixture
def world(host: HostRig) -> Iterator[World]:
    w = World(host)
    yield w
    w.shutdown()


def refused(code: str, call: Callable[[], Any]) -> CorralError:
    with pytest.raises(CorralError) as caught:
        call()
    assert caught.value.code == code, caught.value.to_dict()
    return caught.value


def assert_next(before: int, after: Observation | dict[str, Any], before_revision: int | None = None) -> None:
    """``after`` is a later change of the agent than cursor ``before``: past it by any amount on Herdr
    (one counter for the server), by exactly one where the host counts the agent's own changes."""
    seq = after.seq if isinstance(after, Observation) else after["seq"]
    assert seq > before
    revision = after.revision if isinstance(after, Observation) else after.get("revision")
    if revision is not None and before_revision is not None:
        assert revision == before_revision + 1


# --- the review flow -----------------------------------------------------------------------------


def test_full_review_flow(world: World) -> None:
    lease = world.start()
    started = world.observe()
    assert (lease.state, lease.data["host"], lease.data["pane_id"]) == ("active", world.rig.name, started.pane_id)
    assert lease.data["started_seq"] == started.seq and started.status == "idle"
    assert lease.data["cwd"] == str(world.worktree.resolve())
    # Herdr's pane lifetime is part of the lease's identity; the process host has none (docs/hosts.md).
    assert lease.data["terminal_id"] == started.terminal_id
    assert (started.terminal_id is None) == (world.rig.name == "process")

    receipt = world.relay("echo reviewed the worktree\necho verdict: fine")
    assert receipt.state == "pending" and receipt.data["before_seq"] == started.seq
    assert receipt.data["after_seq"] > receipt.data["before_seq"]
    if world.rig.name == "process":
        assert receipt.data["after_seq"] == receipt.data["before_seq"] + 1, "the slot's own counter"
    assert (
        receipt.data["prompt_sha256"] == hashlib.sha256(b"echo reviewed the worktree\necho verdict: fine").hexdigest()
    )

    (result,) = world.collect(receipt.token)
    settled = world.observe()
    assert result.receipt.state == "completed" and not result.replayed
    assert result.receipt.data["settled_seq"] == settled.seq > receipt.data["after_seq"]
    assert "reviewed the worktree\nverdict: fine\n" in result.output
    assert result.receipt.data["output_sha256"] == hashlib.sha256(result.output.encode()).hexdigest()

    (replayed,) = world.collect(receipt.token)
    assert replayed.replayed and replayed.output == result.output, "replayed while the agent sits at the cursor"

    closed = world.close(settled.seq)
    assert closed.lease.state == "closed" and closed.output == result.output
    assert closed.lease.data["closing_seq"] == settled.seq
    assert closed.lease.data["capture_sha256"] == hashlib.sha256(closed.output.encode()).hexdigest()
    assert world.triggers() == [
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
    assert "reviewed the worktree" not in text and "verdict" not in text, "no prompt or output in the event log"
    assert world.ours() == [] and world.service.reviewers(ReviewerListInput("ctl")) == []
    refused("cursor_superseded", lambda: world.collect(receipt.token))  # its pane is gone: no replay


def test_a_second_prompt_is_refused_while_a_receipt_is_open(world: World) -> None:
    world.start()
    pane = world.pane()
    first = world.relay("wait-file go\necho first")
    error = refused("receipt_outstanding", lambda: world.relay("echo second"))
    assert error.details["receipt"] == first.token
    assert world.rig.prompts(pane) == 1, "nothing more reached the agent"
    world.release()
    (result,) = world.collect(first.token)
    assert "first" in result.output and "second" not in result.output
    second = world.relay("echo second")
    assert second.state == "pending" and second.data["before_seq"] == result.receipt.data["settled_seq"]
    assert world.rig.prompts(pane) == 2


def test_a_stale_close_cursor_and_a_working_agent_are_refused(world: World) -> None:
    lease = world.start()
    receipt = world.relay("wait-file go")  # working until released, however loaded the machine
    refused("agent_not_settled", lambda: world.close(receipt.data["after_seq"]))
    world.release()
    (result,) = world.collect(receipt.token)
    refused("cursor_mismatch", lambda: world.close(lease.data["started_seq"]))
    assert world.lease().state == "active"
    assert world.close(result.receipt.data["settled_seq"]).lease.state == "closed"


def test_the_agent_moving_during_capture_fails_collect_and_never_mislabels(world: World) -> None:
    world.start()
    pane = world.pane()
    receipt = world.relay("echo mine")
    # Someone drives the agent outside corral right after corral read its output.
    world.host.after["read"] = lambda: world.host.inner.prompt(pane, "sleep 0.5\necho not yours")
    error = refused("cursor_superseded", lambda: world.collect(receipt.token))
    stored = world.receipt(receipt.token)
    assert (stored.state, stored.data["reason"]) == ("failed", "cursor_superseded")
    assert stored.data.get("output_sha256") is None and "collected" not in error.details


def test_work_done_around_corral_before_collect_is_refused_only_where_the_host_counts_changes(
    world: World,
) -> None:
    """A receipt's run settles, then someone else prompts the agent and that run settles too, all
    before corral collects. Where the host counts the agent's own changes (process: ``revision``),
    collect sees it moved past the receipt's window (``cursor_superseded``). Herdr has no per-agent
    change counter (``revision`` is None): collection proves the agent settled after the cursor, in the
    same terminal, with nothing moving during the read, not that it changed only once in between, so
    the later run is collected (docs/hosts.md "Cursors are monotonic, not contiguous";
    docs/security.md "No per-agent change counter"). corral itself never prompts an agent whose
    receipt is open: the window is a person typing into the pane."""
    world.start()
    pane = world.pane()
    receipt = world.relay("echo mine")
    done = world.settle(pane, receipt.data["after_seq"])
    outsider = world.host.inner.prompt(pane, "echo not yours")
    world.settle(pane, outsider.seq)
    if world.rig.name == "process":
        assert done.revision is not None
        refused("cursor_superseded", lambda: world.collect(receipt.token))
        assert world.receipt(receipt.token).data["reason"] == "cursor_superseded"
    else:
        assert done.revision is None and outsider.revision is None
        (result,) = world.collect(receipt.token)
        assert result.receipt.state == "completed" and "not yours" in result.output
        assert result.receipt.data["settled_seq"] > outsider.seq, "bound to the later settle, as documented"


# --- batches ---------------------------------------------------------------------------------------


def test_ask_many_all_collects_every_result(world: World) -> None:
    world.start("a")
    world.start("b")
    result = world.ask_many((("a", "echo A"), ("b", "sleep 0.3\necho B")), "all")
    assert [r.receipt.data["name"] for r in result.results] == ["a", "b"]
    assert "A" in result.results[0].output and "B" in result.results[1].output
    assert result.pending_receipts == []
    assert len({r.receipt.data["batch_id"] for r in result.results}) == 1


@pytest.mark.slow
def test_ask_many_first_returns_one_result_and_pending_receipts_that_collect_later(world: World) -> None:
    world.start("fast")
    world.start("slow")
    # "slow" still works when "fast" has answered, even on a loaded machine.
    result = world.ask_many((("fast", "echo quick"), ("slow", "wait-file go\necho late")), "first")
    ((first,), (pending,)) = (result.results, result.pending_receipts)
    assert first.receipt.data["name"] == "fast" and "quick" in first.output
    assert (pending.data["name"], pending.state) == ("slow", "pending")
    assert first.receipt.data["batch_id"] == pending.data["batch_id"]
    refused("receipt_outstanding", lambda: world.relay("echo again", target="slow"))
    world.release()
    (later,) = world.collect(pending.token)
    assert "late" in later.output


def test_a_refused_ask_many_delivers_to_no_target(world: World) -> None:
    for name in ("a", "b", "c"):
        world.start(name)
    seqs = {name: world.observe(name).seq for name in ("a", "c")}
    busy = world.relay("sleep 30", target="b")
    refused(
        "receipt_outstanding",
        lambda: world.ask_many((("a", "echo a"), ("b", "echo b"), ("c", "echo c")), "all", timeout=5),
    )
    for name in ("a", "c"):
        assert world.rig.prompts(world.pane(name)) == 0, f"no prompt reached {name}"
        assert world.observe(name).seq == seqs[name]
    assert world.rig.prompts(world.pane("b")) == 1
    listed = world.service.receipts(ReceiptsInput(include_ended=True))
    assert [r.token for r in listed] == [busy.token], "nothing reserved"


# --- abandon ---------------------------------------------------------------------------------------


def test_an_ambiguous_delivery_stays_reserved_and_is_abandoned_once_settled(world: World) -> None:
    world.start()
    pane = world.pane()

    def lose_the_reply() -> None:
        raise AgentError("the reply from the host was lost", code="agent_prompt_unconfirmed", delivered=None)

    world.host.after["prompt"] = lose_the_reply  # handed over, then the confirmation is lost
    before = world.observe().seq
    # Held, so that it is still running when abandon is tried, however loaded the machine.
    error = refused("delivery_ambiguous", lambda: world.relay("wait-file go\necho maybe"))
    token = error.details["receipt"]["token"]
    assert error.details["receipt"]["state"] == "reserved"
    refused("receipt_outstanding", lambda: world.relay("echo other"))
    refused("receipt_reserved", lambda: world.collect(token))
    refused("agent_not_settled", lambda: world.service.receipts.abandon(AbandonInput("ctl", world.credential, token)))
    world.release()
    settled = world.settle(pane, before)
    abandoned = world.service.receipts.abandon(AbandonInput("ctl", world.credential, token, "operator saw it finish"))
    assert (abandoned.state, abandoned.data["reason"]) == ("abandoned", "abandoned")
    assert abandoned.data["observed_seq"] == settled.seq
    assert world.relay("echo next").state == "pending"
    assert world.service.inventory.status()["counts"]["receipt"] == {"abandoned": 1, "pending": 1}


def test_a_pending_receipt_is_abandoned_only_once_its_agent_settled(world: World) -> None:
    world.start()
    pane = world.pane()
    receipt = world.relay("wait-file go")  # still running at the abandon below: held until released
    refused(
        "agent_not_settled",
        lambda: world.service.receipts.abandon(AbandonInput("ctl", world.credential, receipt.token)),
    )
    assert world.receipt(receipt.token).state == "pending"
    world.release()
    settled = world.settle(pane, receipt.data["after_seq"])
    abandoned = world.service.receipts.abandon(AbandonInput("ctl", world.credential, receipt.token, "not needed"))
    assert (abandoned.state, abandoned.data["observed_seq"]) == ("abandoned", settled.seq)
    refused("receipt_ended", lambda: world.collect(receipt.token))
    assert world.relay("echo next").state == "pending", "the target is free again"


# --- waits -----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_wait_any_returns_the_first_to_settle_and_a_cursorless_settled_target_wins_at_once(
    world: World,
) -> None:
    world.start("a")
    world.start("b")
    slow = world.relay("wait-file go", target="a")  # held until released: a loaded machine still tells them apart
    fast = world.relay("sleep 0.1", target="b")
    began = time.monotonic()
    result = world.wait_any((("a", slow.data["after_seq"]), ("b", fast.data["after_seq"])), 20)
    assert (result.target, result.observation.status) == ("b", "done")
    assert_next(fast.data["after_seq"], result.observation)
    assert time.monotonic() - began < 3.5, "the loser's wait was cancelled, not awaited"
    # No cursor: judged now. b is already settled, so it wins at once; --fresh waits for its next
    # settle instead (none comes), so there a wins.
    assert world.wait_any((("b", None),), 0.3).target == "b"
    refused("wait_timeout", lambda: world.wait_any((("b", None),), 0.3, fresh=True))
    world.release()
    later = world.wait_any((("b", None), ("a", slow.data["after_seq"])), 20, fresh=True)
    assert (later.target, later.observation.status) == ("a", "done")
    assert world.observe("b").seq == result.observation.seq, "b did not move"


# --- blocked, gone, killed ---------------------------------------------------------------------------


def test_a_blocked_agent_is_closed_only_with_an_operators_reason(world: World) -> None:
    world.start()
    receipt = world.relay("block")
    (result,) = world.collect(receipt.token)
    assert result.receipt.data["settled_status"] == "blocked" and "CORRAL-BLOCKED" in result.output
    blocked = world.observe()
    assert blocked.status == "blocked" and blocked.seq == result.receipt.data["settled_seq"]
    refused("agent_not_settled", lambda: world.relay("echo are you there"))
    error = refused("agent_not_settled", lambda: world.close(blocked.seq))
    assert "--blocked" in error.message
    closed = world.close(blocked.seq, blocked_reason="it asks for a decision nobody here can take")
    assert closed.lease.state == "closed"
    assert closed.lease.data["decision"]["reason"] == "it asks for a decision nobody here can take"
    assert world.ours() == []


def test_a_pane_closed_around_corral_fails_its_receipt_and_reconcile_settles_the_lease(world: World) -> None:
    world.start()
    pane = world.pane()
    receipt = world.relay("sleep 30")
    world.host.inner.close(pane)  # someone closes the pane outside corral
    error = refused("identity_changed", lambda: world.collect(receipt.token))
    assert error.details["receipt"]["state"] == "failed"
    assert world.receipt(receipt.token).data["reason"] == "identity_changed"
    (action,) = world.reconcile()
    assert (action["action"], action["to"]) == ("reconciled", "closed")
    assert world.lease(include_ended=True).state == "closed"
    assert world.start().state == "active", "the name is free again"


def test_a_start_killed_after_its_pane_exists_is_found_and_closed_by_reconcile(world: World) -> None:
    """The coordinator dies right after the host created the pane: the lease stays ``provisioning``
    with no pane recorded. Reconcile finds the pane (process: by the start nonce kept with the slot;
    Herdr keeps none: by name, kind and cwd among unleased panes, never a background agent) and
    closes it, fenced, through ``discarding``."""

    def die() -> None:
        raise RunnerDied("killed after the pane was created")

    world.service.core.starting = dead_starting  # type: ignore[method-assign]
    world.host.after["start"] = die
    with pytest.raises(RunnerDied):
        world.start()
    (lease,) = world.store.find("reviewer")
    assert lease.state == "provisioning" and lease.data.get("pane_id") is None
    (orphan,) = world.ours()
    assert orphan.name == "rev"
    if world.rig.name == "process":
        assert orphan.nonce == lease.data["start_nonce"]
    else:
        assert orphan.nonce is None and orphan.terminal_id is not None
    (action,) = world.reconcile()
    assert (action["state"], action["action"], action["to"]) == ("provisioning", "reconciled", "failed_closed")
    assert action["closed_pane"] == orphan.pane_id
    assert world.ours() == [], "reconcile closed the pane the dead start left"
    assert set(world.rig.background) <= {o.pane_id for o in world.host.list()}, "no background agent touched"
    edges = [(e.trigger, e.from_state, e.to_state) for e in world.store.events() if e.machine == "reviewer"]
    assert edges[-2:] == [
        ("reconcile", "provisioning", "discarding"),
        ("reconcile:success", "discarding", "failed_closed"),
    ]
    world.service.core.starting = Core.starting  # type: ignore[method-assign]
    assert world.start().state == "active", "the name and directory are free again"


def test_an_operator_closes_the_pane_of_a_killed_start_fenced_and_bound_to_its_cursor(world: World) -> None:
    """``corral agent close`` (machine ``pane``) on a pane a dead start left. Every process-host pane is
    corral's; on Herdr only a pane a lease recorded (or the name, kind and cwd of a start that never
    recorded one) is, so a background agent's pane is refused ``pane_not_corrals``."""

    def die() -> None:
        raise RunnerDied("killed after the pane was created")

    world.service.core.starting = dead_starting  # type: ignore[method-assign]
    world.host.after["start"] = die
    with pytest.raises(RunnerDied):
        world.start()
    (orphan,) = world.ours()

    def pane_close(pane_id: str, seq: int, **changes: Any) -> Any:
        fields: dict[str, Any] = {
            "expected_name": "rev",
            "expected_kind": "script",
            "expected_cwd": str(world.worktree.resolve()),
            "expected_state_change_seq": seq,
            "host": world.rig.name,
            **changes,
        }
        return world.service.inventory.pane_close(PaneCloseInput("ctl", world.credential, pane_id, **fields))

    refused("cursor_mismatch", lambda: pane_close(orphan.pane_id, orphan.seq + 1))
    # Naming another agent: the process host's pane is corral's whatever it holds, so the identity is
    # refused; on Herdr the pane is corral's only as the start that recorded this name, kind and cwd.
    wrong = "identity_changed" if world.rig.name == "process" else "pane_not_corrals"
    refused(wrong, lambda: pane_close(orphan.pane_id, orphan.seq, expected_name="someone"))
    if world.rig.background:
        seen = world.host.get(min(world.rig.background))
        refused(
            "pane_not_corrals",
            lambda: pane_close(seen.pane_id, seen.seq, expected_name="bg", expected_kind=seen.kind, expected_cwd="/"),
        )
    closed = pane_close(orphan.pane_id, orphan.seq, reason="the start was killed; the pane is mine")
    assert closed.state == "closed" and closed.data["closing_seq"] == orphan.seq
    assert world.ours() == []
    assert set(world.rig.background) <= {o.pane_id for o in world.host.list()}
    (action,) = world.reconcile()
    assert (action["action"], action["to"]) == ("reconciled", "failed_closed"), "its lease settles: pane gone"


@contextlib.contextmanager
def dead_starting() -> Iterator[dict[str, Any]]:
    """A start's intent recorded by a process that no longer exists (pid above pid_max), as after a
    real ``kill -9``, so reconcile may settle it (tests/test_transition_coverage.py does the same)."""
    import uuid

    from runner import lockstatus

    yield {"start_nonce": uuid.uuid4().hex, "starter": {**lockstatus.current(), "pid": 2**22 + 7}}


# --- the fence gate ----------------------------------------------------------------------------------


def test_a_relay_held_past_a_resume_delivers_nothing(world: World) -> None:
    world.start()
    pane = world.pane()
    before = world.observe()
    fresh: list[Credential] = []
    world.host.before["prompt"] = lambda: fresh.append(world.resume())  # between the engine's check and the host
    with pytest.raises(AuthorityMovedError) as caught:
        world.relay("echo from the stale controller")
    assert caught.value.code == "fence_stale" and caught.value.details["delivered"] is False
    observed = world.host.get(pane)
    assert (observed.status, observed.seq) == ("idle", before.seq), "the prompt never reached the agent"
    assert world.rig.prompts(pane) == 0
    receipt = caught.value.details["receipt"]
    assert (receipt["state"], receipt["reason"]) == ("failed", "fence_stale")
    assert [e.trigger for e in world.store.events() if e.machine == "receipt"] == ["relay", "relay:failure"]
    assert world.relay("echo new holder", credential=fresh[0]).state == "pending", "nothing left blocking"


def test_a_start_held_past_a_resume_creates_no_pane(world: World) -> None:
    fresh: list[Credential] = []
    world.host.before["start"] = lambda: fresh.append(world.resume())
    with pytest.raises(AuthorityMovedError) as caught:
        world.start()
    assert caught.value.code == "fence_stale"
    assert world.ours() == [], "no pane was created under the moved fence"
    lease = world.lease(include_ended=True)
    assert lease.state == "failed_closed" and "not started" in lease.data["failure"]
    assert world.start(credential=fresh[0]).state == "active", "the new holder starts it"


def test_a_close_held_past_a_resume_leaves_the_pane(world: World) -> None:
    lease = world.start()
    pane = world.pane()
    fresh: list[Credential] = []
    world.host.before["close"] = lambda: fresh.append(world.resume())
    with pytest.raises(AuthorityMovedError) as caught:
        world.close(lease.data["started_seq"])
    assert caught.value.code == "fence_stale"
    assert world.host.get(pane).status == "idle", "the pane is still open"
    assert world.lease().state == "close_failed"
    assert world.close(lease.data["started_seq"], credential=fresh[0]).lease.state == "closed", "the new holder"


# --- a writer lane -----------------------------------------------------------------------------------


@pytest.mark.usefixtures("hermetic_git", "home")
def test_a_writer_lane_starts_in_a_linked_worktree_relays_and_releases_at_head_and_status(world: World) -> None:
    repo, base = _repository(world)
    wt = world.root / "wt-feat"
    git(repo, "worktree", "add", "-q", "-b", "feat", str(wt))
    (wt / "src" / "draft.py").write_text("print('draft')\n")  # uncommitted work, left in place throughout
    started = world.service.writers.start(
        WriterStartInput(
            "ctl",
            world.credential,
            name="alpha",
            kind="script",
            worktree=str(wt),
            branch="feat",
            base_commit=base,
            expected_head=head_of(wt),
            expected_status_sha256=status_digest(wt),
            owned_scopes=("src",),
            purpose="implement the feature",
            ticket_ref="T-10",
            authority_ref="plan.md",
            authority_sha256=SHA,
            host=world.rig.name,
        )
    )
    assert (started.machine, started.state, started.data["host"]) == ("writer", "active", world.rig.name)
    assert started.data["cwd"] == os.path.realpath(wt)
    assert [o.cwd for o in world.ours()] == [os.path.realpath(wt)]
    if world.rig.name == "herdr":  # it cannot confine: git itself refuses a commit outside the scopes
        assert hook.installed(str(wt)) is not None
        (wt / "README.md").write_text("outside\n")
        git(wt, "add", "README.md")
        refused_commit = subprocess.run(["git", "commit", "-q", "-m", "x"], cwd=wt, capture_output=True, check=False)
        assert refused_commit.returncode != 0 and b"outside 'README.md'" in refused_commit.stderr
        git(wt, "reset", "-q")
        git(wt, "checkout", "-q", "--", "README.md")
    else:
        assert hook.installed(str(wt)) is None
    receipt = world.relay("sleep 0.2\necho lane at work", target="alpha")
    (result,) = world.collect(receipt.token)
    assert "lane at work" in result.output
    head, status = head_of(wt), status_digest(wt)
    refused(
        "cursor_mismatch",
        lambda: world.service.writers.release(
            WriterReleaseInput(
                "ctl", world.credential, "alpha", receipt.data["before_seq"], head, status, "ck/alpha", CHECKPOINT_SHA
            )
        ),
    )
    released = world.service.writers.release(
        WriterReleaseInput(
            "ctl",
            world.credential,
            "alpha",
            result.receipt.data["settled_seq"],
            head,
            status,
            "ck/alpha",
            CHECKPOINT_SHA,
        )
    )
    lane = released.lease
    assert lane.state == "released" and "lane at work" in released.output
    assert (lane.data["release_head"], lane.data["release_status_sha256"]) == (head, status)
    assert lane.data["closing_seq"] == result.receipt.data["settled_seq"]
    assert world.ours() == [], "the pane is closed"
    assert (wt / "src" / "draft.py").read_text() == "print('draft')\n", "the worktree is untouched"
    assert (head_of(wt), status_digest(wt)) == (head, status)
    assert git(wt, "stash", "list") == "", "nothing stashed"
    assert hook.installed(str(wt)) is None, "the scope hook went with the lane"


def _repository(world: World) -> tuple[Path, str]:
    """``world.root/repo`` on main with one base commit (README.md, src/app.py): its path and that commit."""
    repo = world.root / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    return repo, commit(repo, "base", {"README.md": "hello\n", "src/app.py": "print('app')\n"})


@pytest.mark.parametrize("host", ["herdr"], indirect=True)
@pytest.mark.usefixtures("hermetic_git")
def test_a_refused_start_on_herdr_leaves_no_scope_hook(world: World, home: Path) -> None:
    repo, base = _repository(world)
    lanes = []
    for name in ("a", "b"):
        wt = world.root / f"wt-{name}"
        git(repo, "worktree", "add", "-q", "-b", name, str(wt))
        lanes.append(wt)

    def start(name: str, wt: Path) -> Any:
        return world.service.writers.start(
            WriterStartInput(
                "ctl", world.credential, name=name, kind="script", worktree=str(wt), branch=wt.name[3:],
                base_commit=base, expected_head=head_of(wt), expected_status_sha256=status_digest(wt),
                owned_scopes=("src",), purpose="p", ticket_ref="T", authority_ref="plan.md", authority_sha256=SHA,
                host="herdr",
            )
        )  # fmt: skip

    start("alpha", lanes[0])
    refused("scope_overlap", lambda: start("beta", lanes[1]))
    assert hook.installed(str(lanes[0])) is not None
    assert hook.installed(str(lanes[1])) is None, "the refused lane's hook was removed"
    assert len(list((home / "hooks").iterdir())) == 1


@pytest.mark.parametrize("host", ["herdr"], indirect=True)
@pytest.mark.usefixtures("hermetic_git")
def test_a_herdr_lane_settled_by_reconcile_loses_its_scope_hook(world: World, home: Path) -> None:
    repo, base = _repository(world)
    wt = world.root / "wt-gone"
    git(repo, "worktree", "add", "-q", "-b", "gone", str(wt))
    started = world.service.writers.start(
        WriterStartInput(
            "ctl", world.credential, name="gone", kind="script", worktree=str(wt), branch="gone",
            base_commit=base, expected_head=head_of(wt), expected_status_sha256=status_digest(wt),
            owned_scopes=("src",), purpose="p", ticket_ref="T", authority_ref="plan.md", authority_sha256=SHA,
            host="herdr",
        )
    )  # fmt: skip
    assert hook.installed(str(wt)) is not None
    world.host.inner.close(started.data["pane_id"])  # someone closes the pane outside corral
    (action,) = world.reconcile("writer")
    assert action["action"] == "reconciled", action
    assert hook.installed(str(wt)) is None, "the scope hook went with the lane"
    assert not (home / "hooks").exists() or list((home / "hooks").iterdir()) == []


# --- what only Herdr has -------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("host", ["herdr"], indirect=True)
def test_after_a_herdr_restart_nothing_takes_the_new_agent_for_the_leased_one(world: World) -> None:
    """Herdr only: the process host has no server to restart (its slots live in corral's store). A
    restart gives every pane a new ``terminal_id``, drops agent names and restarts the shared counter
    from 0 (docs/hosts.md "Restarts"): an open receipt fails ``identity_changed`` at once (its cursor
    belongs to the old lifetime: a wait for a seq past it would run out the whole timeout), the lease
    cannot be closed as if it were its agent, and reconcile reports it, touching nothing."""
    assert world.rig.fake is not None
    lease = world.start()
    world.start("other")
    receipt = world.relay("sleep 5")
    other = world.relay("sleep 5", target="other")
    world.rig.fake.restart()
    began = time.monotonic()
    error = refused("identity_changed", lambda: world.collect(receipt.token, timeout=20))
    assert error.details["receipt"]["state"] == "failed"
    first = CollectInput("ctl", world.credential, (other.token,), 20, mode="first")
    refused("identity_changed", lambda: anyio.run(world.service.receipts.collect_first, first))
    assert time.monotonic() - began < 10, "the old-lifetime cursors were not waited out"
    observed = world.observe()
    assert observed.name == "" and observed.terminal_id != lease.data["terminal_id"]
    assert observed.seq < receipt.data["after_seq"], "the counter started again"
    refused("identity_changed", lambda: world.close(observed.seq))
    actions = world.reconcile()
    assert sorted((a["name"], a["action"], a.get("code")) for a in actions) == [
        ("other", "skip", "identity_changed"),
        ("rev", "skip", "identity_changed"),
    ]
    assert world.lease().state == "active" and observed.pane_id in {o.pane_id for o in world.host.list()}
    world.host.inner.close(observed.pane_id)  # a person closes it in Herdr: the lease then settles as gone
    assert [(a["name"], a.get("to")) for a in world.reconcile() if a["name"] == "rev"] == [("rev", "closed")]
