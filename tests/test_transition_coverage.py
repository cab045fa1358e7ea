"""Focused tests for the transitions the rest of the suite left unexercised (or exercised only by chance).

``tests/plugins/transitions.py`` fails a whole-suite run if any transition edge of a built-in machine
(:func:`runner.modelpaths.paths.list_targets`) was never committed by the engine. The edges here were missing,
or reached only by Hypothesis' random walks or ``slow`` tests, when that check was added; each test
drives one through the real :class:`~runner.service.Service` and engine, on a real SQLite store, with
the real process host and the scripted agent (kind ``script``), and asserts the edge in the event log.

Faults are injected at the agent host's boundary only:

* ``RunnerDied`` (a ``BaseException``, so no effect or executor catches it) is the coordinator dying
  while an effect runs: the intent is committed, the outcome never is, as after ``kill -9``;
* a host whose ``close`` raises an ``OSError`` (not an ``AgentError``) is a host failing in a way no one
  planned for: the engine records the outcome ``ambiguous`` and leaves the intermediate state;
* a host whose ``close`` fails with an ``AgentError``, or whose ``prompt`` finds the agent busy, is a
  plain, certain failure.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from runner.agents.abc import AgentBusyError, AgentError, Expect, Observation, StartOptions
from runner.agents.kinds import Kinds
from runner.agents.process import ProcessHost
from runner.definitions.recipes import RecipeLibrary
from runner.errors import CorralError
from runner.plans import plan_instance_id
from runner.plans.keeper import MemoryKeeper
from runner.plans.ops import OPERATIONS
from runner.service import (
    AbandonInput,
    AcquireInput,
    CollectInput,
    ControllerInput,
    RelayInput,
    ReviewerCloseInput,
    ReviewerStartInput,
    Service,
    WriterReleaseInput,
    WriterStartInput,
)
from runner.service.inputs.plans import PlanCancelInput, PlanDecideInput, PlanRunInput, PlanSubmitInput
from runner.service.plans import Plans as PlansComponent
from runner.sql.store_sqlite import SQLiteStore
from tests.support.gitrepo import feature_worktree
from tests.support.specs import shared_library

SHA = hashlib.sha256(b"coverage authority").hexdigest()


class RunnerDied(BaseException):
    """The coordinator process died here; nothing after this point ran (not an error anyone handles)."""


class FaultyHost(ProcessHost):
    """The process host with switchable faults at its boundary."""

    die_on_start = False
    die_after_create = False  # the pane exists, the coordinator dies before recording it
    close_fault: str | None = None  # None, "error" (AgentError), "unexpected" (OSError), "die", "die_after"
    busy_on_prompt = False

    def start(
        self, name: str, kind: str, cwd: str, options: StartOptions, gate: Any = None, nonce: Any = None
    ) -> Observation:
        if self.die_on_start:
            raise RunnerDied(f"killed while starting {name}")
        started = super().start(name, kind, cwd, options, gate, nonce)
        if self.die_after_create:
            raise RunnerDied(f"killed after the pane of {name} was created")
        return started

    def close(self, pane_id: str, gate: Any = None) -> None:
        if self.close_fault == "error":
            raise AgentError("the pane would not close", code="pane_close_failed")
        if self.close_fault == "unexpected":
            raise OSError(5, "Input/output error talking to the pane")
        if self.close_fault == "die":
            raise RunnerDied(f"killed before closing {pane_id}")
        super().close(pane_id, gate)
        if self.close_fault == "die_after":
            raise RunnerDied(f"killed after closing {pane_id}")

    def prompt(
        self, pane_id: str, text: str, expect: Expect | None = None, gate: Any = None, schema: str | None = None
    ) -> Observation:
        if self.busy_on_prompt:
            raise AgentBusyError("the agent started working on something else", pane_id=pane_id)
        return super().prompt(pane_id, text, expect, gate, schema)


class World:
    """A real store, the faulty process host, a service and a controller lease."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.store = SQLiteStore(root / "corral.db")
        self.host = FaultyHost(self.store, root / "agents", Kinds.load([]))
        self.service = Service(
            self.store,
            shared_library(),
            actor="test",
            hosts=lambda name: self.host,
            kinds=Kinds.load([]),
        )
        self.credential = self.service.controller.acquire(AcquireInput("ctl", "T-9", SHA, 900, "t@h")).credential
        self.cwd = root / "cwd"
        self.cwd.mkdir()
        # A RunnerDied start is a coordinator that died: record its starter as a process that is gone
        # (pid above pid_max), so reconcile may settle it as it would after a real kill -9.
        self.service.core.starting = self._dead_starting  # type: ignore[method-assign]
        self._marks: list[Any] = []

    @staticmethod
    def _dead_starter() -> dict[str, Any]:
        import uuid

        from runner import lockstatus

        return {"start_nonce": uuid.uuid4().hex, "starter": {**lockstatus.current(), "pid": 2**22 + 7}}

    @staticmethod
    @contextlib.contextmanager
    def _dead_starting() -> Iterator[dict[str, Any]]:
        yield World._dead_starter()

    def keep_starting(self) -> None:
        """Starts from now on record this process as their starter, with their call marked running
        until the world shuts down: a start that "died" in-process still looks running, as one that
        is really still running (in another thread, or another process) does."""
        import uuid

        from runner import lockstatus

        @contextlib.contextmanager
        def still_running() -> Iterator[dict[str, Any]]:
            nonce = uuid.uuid4().hex
            mark = lockstatus.attempt(nonce)
            self._marks.append(mark)
            assert mark.marked
            yield {"start_nonce": nonce, "starter": {**lockstatus.current(), "attempt": nonce}}

        self.service.core.starting = still_running  # type: ignore[method-assign]

    def start(self, name: str = "rev") -> Any:
        return self.service.reviewers.start(ReviewerStartInput("ctl", self.credential, name, "script", str(self.cwd)))

    def close(self, name: str = "rev", seq: int = 0) -> Any:
        return self.service.reviewers.close(ReviewerCloseInput("ctl", self.credential, name, seq))

    def reconcile(self, machine: str = "reviewer") -> list[dict[str, Any]]:
        return self.service.inventory.reconcile(ControllerInput("ctl", self.credential, apply=True), machine).actions

    def relay(self, text: str, target: str = "rev") -> Any:
        return self.service.receipts.relay(RelayInput("ctl", self.credential, target, text))

    def collect(self, token: str, timeout: float = 30) -> Any:
        return anyio.run(self.service.receipts.collect, CollectInput("ctl", self.credential, (token,), timeout))

    def edges(self, machine: str) -> list[tuple[str, str, str]]:
        """(trigger, from, to) of every event of ``machine``, oldest first."""
        return [(e.trigger, e.from_state, e.to_state) for e in self.store.events() if e.machine == machine]

    def only(self, machine: str) -> Any:
        (instance,) = self.store.find(machine)
        return instance

    def shutdown(self) -> None:
        for mark in self._marks:
            mark.close()
        self.host.close_fault = None
        for observed in self.host.list():
            self.host.close(observed.pane_id)
        self.store.close()


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path)
    yield w
    w.shutdown()


def refused(code: str, call: Callable[[], Any]) -> CorralError:
    with pytest.raises(CorralError) as caught:
        call()
    assert caught.value.code == code, caught.value.to_dict()
    return caught.value


# --- reviewer ----------------------------------------------------------------------------------------


def test_reviewer_start_interrupted_stays_provisioning_until_reconciled(world: World) -> None:
    """reviewer reconcile provisioning -> failed_closed."""
    world.host.die_on_start = True
    with pytest.raises(RunnerDied):
        world.start()
    assert world.only("reviewer").state == "provisioning"
    assert world.edges("reviewer") == [("start", "absent", "provisioning")], "no outcome was ever written"
    world.host.die_on_start = False
    refused("agent_name_taken", world.start)  # the interrupted lease still holds its name
    actions = world.reconcile()
    assert [(a["state"], a["action"], a["to"]) for a in actions] == [("provisioning", "reconciled", "failed_closed")]
    assert world.edges("reviewer")[-1] == ("reconcile", "provisioning", "failed_closed")
    assert world.start().state == "active", "the name is free again"


def test_reviewer_close_failed_then_closed_again(world: World) -> None:
    """reviewer close close_failed -> closing."""
    world.start()
    world.host.close_fault = "error"
    error = refused("agent_close_failed", world.close)
    assert error.details["lease"]["state"] == "close_failed"
    world.host.close_fault = None
    assert world.close().lease.state == "closed"
    assert world.edges("reviewer")[-4:] == [
        ("close", "active", "closing"),
        ("close:failure", "closing", "close_failed"),
        ("close", "close_failed", "closing"),
        ("close:success", "closing", "closed"),
    ]
    assert world.host.list() == []


def test_reviewer_close_ambiguous_stays_closing_until_the_pane_is_gone(world: World) -> None:
    """reviewer close:ambiguous closing -> closing, then reconcile closing -> closed."""
    lease = world.start()
    world.host.close_fault = "unexpected"
    error = refused("agent_close_failed", world.close)
    assert error.details["lease"]["state"] == "closing"
    assert world.edges("reviewer")[-1] == ("close:ambiguous", "closing", "closing")
    world.host.close_fault = None
    ProcessHost.close(world.host, lease.data["pane_id"])  # the operator closes it by other means
    assert [(a["action"], a["to"]) for a in world.reconcile()] == [("reconciled", "closed")]
    assert world.edges("reviewer")[-1] == ("reconcile", "closing", "closed")


def test_an_active_reviewer_whose_pane_vanished_fails_its_receipt_and_is_reconciled(world: World) -> None:
    """receipt collect pending -> failed (identity_changed), reviewer reconcile active -> closed."""
    lease = world.start()
    receipt = world.relay("sleep 30")
    assert receipt.state == "pending"
    ProcessHost.close(world.host, lease.data["pane_id"])  # closed outside corral while it works
    error = refused("identity_changed", lambda: world.collect(receipt.token))
    assert error.details["receipt"]["state"] == "failed"
    assert world.edges("receipt")[-1] == ("collect", "pending", "failed")
    assert world.only("receipt").data["reason"] == "identity_changed"
    assert [(a["state"], a["action"], a["to"]) for a in world.reconcile()] == [("active", "reconciled", "closed")]
    assert world.edges("reviewer")[-1] == ("reconcile", "active", "closed")
    assert world.only("reviewer").data.get("capture_sha256") is None, "nothing was captured"


# --- receipts ----------------------------------------------------------------------------------------


def test_a_delivery_the_agent_refused_fails_the_receipt(world: World) -> None:
    """receipt relay:failure reserved -> failed."""
    world.start()
    world.host.busy_on_prompt = True
    error = refused("delivery_failed", lambda: world.relay("echo never"))
    assert error.details["receipt"]["state"] == "failed"
    assert world.edges("receipt") == [("relay", "absent", "reserved"), ("relay:failure", "reserved", "failed")]
    assert world.only("receipt").data["reason"] == "delivery_failed"
    world.host.busy_on_prompt = False
    assert world.relay("echo now").state == "pending", "a failed receipt does not block the target"


def test_a_pending_receipt_whose_agent_settled_can_be_abandoned(world: World) -> None:
    """receipt abandon pending -> abandoned."""
    lease = world.start()
    receipt = world.relay("wait-file go\necho done")  # working at the first abandon: held until released
    refused(
        "agent_not_settled",
        lambda: world.service.receipts.abandon(AbandonInput("ctl", world.credential, receipt.token)),
    )
    (world.cwd / "go").write_text("")
    anyio.run(world.host.wait, lease.data["pane_id"], receipt.data["after_seq"], 30)
    abandoned = world.service.receipts.abandon(
        AbandonInput("ctl", world.credential, receipt.token, "result not needed")
    )
    assert (abandoned.state, abandoned.data["observed_seq"]) == ("abandoned", 2)
    assert world.edges("receipt")[-1] == ("abandon", "pending", "abandoned")
    assert world.relay("echo next").state == "pending", "the target takes prompts again"


# --- writer lanes ------------------------------------------------------------------------------------


@pytest.fixture
def worktree(world: World, hermetic_git: None) -> Path:
    """A linked worktree on branch ``feat`` of a fresh repository whose default branch is ``main``."""
    return feature_worktree(world.root)


def start_lane(world: World, wt: Path, name: str = "alpha") -> Any:
    facts = world.service.writers.preflight(str(wt))
    return world.service.writers.start(
        WriterStartInput(
            "ctl",
            world.credential,
            name=name,
            kind="script",
            worktree=str(wt),
            branch=facts["branch"],
            base_commit=facts["head"],
            expected_head=facts["head"],
            expected_status_sha256=facts["status_sha256"],
            owned_scopes=("src",),
            purpose="cover the writer machine",
            ticket_ref="T-9",
            authority_ref="plan.md",
            authority_sha256=SHA,
        )
    )


def release_lane(world: World, wt: Path, name: str = "alpha") -> Any:
    facts = world.service.writers.preflight(str(wt))
    return world.service.writers.release(
        WriterReleaseInput("ctl", world.credential, name, 0, facts["head"], facts["status_sha256"], "ck/alpha", SHA)
    )


def test_writer_start_interrupted_stays_provisioning_until_reconciled(world: World, worktree: Path) -> None:
    """writer reconcile provisioning -> failed_closed."""
    world.host.die_on_start = True
    with pytest.raises(RunnerDied):
        start_lane(world, worktree)
    assert world.only("writer").state == "provisioning"
    assert world.edges("writer") == [("start", "absent", "provisioning")]
    world.host.die_on_start = False
    refused("worktree_taken", lambda: start_lane(world, worktree, "beta"))  # the interrupted lane holds it
    assert [(a["state"], a["to"]) for a in world.reconcile("writer")] == [("provisioning", "failed_closed")]
    assert world.edges("writer")[-1] == ("reconcile", "provisioning", "failed_closed")
    assert start_lane(world, worktree, "beta").state == "active", "the worktree and scopes are free again"


def test_writer_release_ambiguous_stays_releasing_until_the_pane_is_gone(world: World, worktree: Path) -> None:
    """writer release:ambiguous releasing -> releasing, then reconcile releasing -> released."""
    lane = start_lane(world, worktree)
    world.host.close_fault = "unexpected"
    error = refused("agent_close_failed", lambda: release_lane(world, worktree))
    assert error.details["lease"]["state"] == "releasing"
    assert world.edges("writer")[-1] == ("release:ambiguous", "releasing", "releasing")
    world.host.close_fault = None
    ProcessHost.close(world.host, lane.data["pane_id"])
    assert [(a["action"], a["to"]) for a in world.reconcile("writer")] == [("reconciled", "released")]
    assert world.edges("writer")[-1] == ("reconcile", "releasing", "released")
    assert (worktree / "src" / "app.py").read_text() == "print('app')\n", "the worktree is untouched"


# --- plans -------------------------------------------------------------------------------------------


class Plans:
    """The plans component over the world's service, with credentials kept in memory and the built-in recipes."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.plans = PlansComponent(
            world.service, RecipeLibrary([]), MemoryKeeper(), OPERATIONS, scratch=world.root / "snapshots"
        )

    def submit(self, plan_id: str, prompt: str = "echo reviewed", controller: str | None = None) -> None:
        inputs = {
            "cwd": str(self.world.cwd),
            "prompt": prompt,
            "reviewer": plan_id.replace(".", "-"),
            "kind": "script",
            "timeout": 30,
            "authority_ref": "T-9",
            "authority_sha256": SHA,
        }
        doc = {"plan": plan_id, "recipe": "review", "controller": controller or f"ctl-{plan_id}", "inputs": inputs}
        assert self.plans.submit(PlanSubmitInput(doc)).created

    def run(self, plan_id: str) -> Any:
        return anyio.run(self.plans.run, PlanRunInput(plan_id))

    def edges(self, plan_id: str) -> list[tuple[str, str, str]]:
        instance_id = plan_instance_id(plan_id)
        return [(e.trigger, e.from_state, e.to_state) for e in self.world.store.events(instance_id=instance_id)]


def plan_moves(edges: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """The plan's events without its ``step`` records (running -> running), which only say what ran."""
    return [edge for edge in edges if edge[0] != "step"]


def test_a_plan_runs_to_success(world: World) -> None:
    """plan submit, start submitted -> running, step, finish."""
    plans = Plans(world)
    plans.submit("ok")
    ran = plans.run("ok")
    assert ran.state == "succeeded", ran.data.get("failure")
    edges = plans.edges("ok")
    assert plan_moves(edges) == [
        ("submit", "absent", "submitted"),
        ("start", "submitted", "running"),
        ("finish", "running", "succeeded"),
    ]
    assert ("step", "running", "running") in edges


def test_a_plan_whose_runner_died_mid_step_pauses_resumes_and_fails(world: World) -> None:
    """plan start running -> running, pause, start paused -> running, fail."""
    plans = Plans(world)
    plans.submit("crash")
    world.host.die_on_start = True
    with pytest.raises(RunnerDied):
        plans.run("crash")
    world.host.die_on_start = False
    assert world.store.get(plan_instance_id("crash")).state == "running"  # type: ignore[union-attr]
    paused = plans.run("crash")  # the same runner again: it may take the plan back
    assert paused.state == "paused" and "reconcile" in paused.data["paused_reason"]
    still = plans.run("crash")  # resumed without a decision: the step is still undecided
    assert still.state == "paused"
    credential = plans.plans.credentials.load("ctl-crash")
    assert credential is not None
    actions = world.service.inventory.reconcile(
        ControllerInput("ctl-crash", credential, apply=True), "reviewer"
    ).actions
    assert [(a["state"], a["to"]) for a in actions] == [("provisioning", "failed_closed")]
    failed = plans.run("crash")
    assert failed.state == "failed" and failed.data["failure"]["step"] == "start"
    assert plan_moves(plans.edges("crash")) == [
        ("submit", "absent", "submitted"),
        ("start", "submitted", "running"),
        ("start", "running", "running"),
        ("pause", "running", "paused"),
        ("start", "paused", "running"),
        ("pause", "running", "paused"),
        ("start", "paused", "running"),
        ("fail", "running", "failed"),
    ]


def test_plans_are_cancelled_from_every_live_state(world: World) -> None:
    """plan cancel submitted -> cancelled, running -> cancelled, paused -> cancelled."""
    plans = Plans(world)
    plans.submit("waiting")
    assert plans.plans.cancel(PlanCancelInput("waiting")).state == "cancelled"

    plans.submit("died")
    world.host.die_on_start = True
    with pytest.raises(RunnerDied):
        plans.run("died")
    assert plans.plans.cancel(PlanCancelInput("died")).state == "cancelled"

    plans.submit("stuck")
    with pytest.raises(RunnerDied):
        plans.run("stuck")
    world.host.die_on_start = False
    assert plans.run("stuck").state == "paused"
    assert plans.plans.cancel(PlanCancelInput("stuck")).state == "cancelled"

    assert [plan_moves(plans.edges(p))[-1] for p in ("waiting", "died", "stuck")] == [
        ("cancel", "submitted", "cancelled"),
        ("cancel", "running", "cancelled"),
        ("cancel", "paused", "cancelled"),
    ]
    assert plans.run("stuck").state == "cancelled", "nothing more runs"


def test_a_plan_paused_on_a_blocked_agent_is_decided_and_goes_on(world: World) -> None:
    """plan decide paused -> paused: a person's decision on the waiting step, then it continues."""
    plans = Plans(world)
    plans.submit("blocked", prompt="block")
    paused = plans.run("blocked")
    assert paused.state == "paused" and paused.data["waiting_on"]["kind"] == "agent_blocked"
    decided = plans.plans.decide(PlanDecideInput("blocked", "collect", True, "an operator read the question"))
    assert decided.state == "paused" and decided.data["steps"]["collect"]["decision"]["approve"] is True
    assert plans.run("blocked").state == "succeeded"
    assert ("decide", "paused", "paused") in plan_moves(plans.edges("blocked"))
    with pytest.raises(CorralError) as caught:
        plans.plans.decide(PlanDecideInput("blocked", "collect", True, "again"))
    assert caught.value.code == "plan_not_waiting"
