"""The approval step (issue 15): ``do: human.approve`` pauses a plan until a person decides; approved it
succeeds with who and why, rejected it fails with ``decision_rejected``, undecided past its timeout it
fails with ``approval_timeout`` (both catchable), and a runner that dies while it waits resumes it with
its clock still running from the recorded start.

In process over a real SQLite store on a controllable clock (the step needs no agent), plus one run of
the real ``corral`` (run, plans show, status, plans decide).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest

from runner.context import Instance, format_time, parse_time
from runner.definitions.recipes import RecipeLibrary
from runner.errors import InputError, RefusedError
from runner.plans.keeper import MemoryKeeper
from runner.plans.ops import OPERATIONS, Operation, StepOperation
from runner.service import Service
from runner.service.inputs.plans import PlanDecideInput, PlanResumeInput, PlanRunInput, PlanShowInput, PlanSubmitInput
from runner.service.plans import Plans
from runner.sql.store_sqlite import SQLiteStore
from tests.conftest import FakeClock
from tests.support.plans import step_records, steps_by_id
from tests.support.specs import shared_library

RECIPES = {
    "gate": """
        recipe: gate
        version: 1
        description: Something before, a person's approval, something after.
        inputs: {type: object}
        steps:
          - id: before
            do: flow.pass
            with: {values: {n: 1}}
          - id: approve
            do: human.approve
            with: {prompt: "Ship release 1.2?", timeout: 60}
          - id: after
            do: flow.pass
            with: {values: {by: "${steps.approve.decided_by}", why: "${steps.approve.reason}"}}
        """,
    "gate-caught": """
        recipe: gate-caught
        version: 1
        description: An approval whose refusal or timeout is handled.
        inputs: {type: object}
        steps:
          - id: approve
            do: human.approve
            with: {prompt: "Go on?", timeout: 60}
            catch: [{errors: [decision_rejected, approval_timeout], next: handled}]
          - id: after
            do: flow.pass
          - id: handled
            do: flow.pass
            with: {values: {handled: true}}
        """,
    "gate-forever": """
        recipe: gate-forever
        version: 1
        description: An approval without a timeout.
        inputs: {type: object}
        steps:
          - id: approve
            do: human.approve
            with: {prompt: "Whenever you like."}
        """,
    "gate-bad": """
        recipe: gate-bad
        version: 1
        description: An approval with an empty prompt.
        inputs: {type: object}
        steps:
          - id: approve
            do: human.approve
            with: {prompt: "  "}
        """,
}


def recipes_in(directory: Path) -> Path:
    directory.mkdir(exist_ok=True)
    for name, text in RECIPES.items():
        (directory / f"{name}.yaml").write_text(textwrap.dedent(text))
    return directory


class Crash(BaseException):
    """A runner dying inside a step (not an error a step can catch: it stops the runner)."""


class Crashing:
    """The built-in operations, but ``human.approve`` dies after its step's ``running`` record."""

    def get(self, name: str) -> StepOperation | None:
        if name == "human.approve":
            spec = OPERATIONS.get(name)
            assert spec is not None

            async def die(ctx: Any, args: Any) -> Any:
                raise Crash

            return Operation(spec.spec, die)
        return OPERATIONS.get(name)


class ApprovalRig:
    """A real SQLite store on a fake clock, a service and a plans component with the test recipes."""

    def __init__(self, root: Path) -> None:
        self.clock = FakeClock()
        self.store = SQLiteStore(root / "corral.db", clock=self.clock)
        self.service = Service(self.store, shared_library(), actor="test")
        self.recipes = RecipeLibrary([recipes_in(root / "recipes")])
        self.plans = Plans(self.service, self.recipes, MemoryKeeper(), OPERATIONS)

    def run(self, plan_id: str, recipe: str = "gate") -> Instance:
        self.plans.submit(PlanSubmitInput({"plan": plan_id, "recipe": recipe, "controller": "ctl", "inputs": {}}))
        return anyio.run(self.plans.run, PlanRunInput(plan_id))

    def resume(self, plan_id: str, plans: Plans | None = None) -> Instance:
        return anyio.run((plans or self.plans).resume, PlanResumeInput(plan_id))

    def decide(self, plan_id: str, approve: bool, reason: str = "looked at it", actor: str | None = None) -> Instance:
        return self.plans.decide(PlanDecideInput(plan_id, "approve", approve, reason, actor))

    def plan_events(self, plan_id: str) -> list[Any]:
        return [e for e in self.store.events() if e.instance_id == f"plan/{plan_id}"]


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[ApprovalRig]:
    made = ApprovalRig(tmp_path)
    yield made
    made.store.close()


def test_an_approval_step_pauses_the_plan_and_says_what_it_waits_on(rig: ApprovalRig) -> None:
    started = format_time(rig.clock.now)
    plan = rig.run("p1")
    assert plan.state == "paused"
    steps = plan.data["steps"]
    assert steps["before"]["state"] == "succeeded" and "after" not in steps
    assert steps["approve"]["state"] == "waiting"
    waiting = plan.data["waiting_on"]
    assert waiting == {
        "kind": "approval",
        "step": "approve",
        "prompt": "Ship release 1.2?",
        "since": started,
        "timeout": 60.0,
        "deadline": format_time(rig.clock.now + timedelta(seconds=60)),
    }
    assert steps["approve"]["waiting_on"] == waiting
    assert "Ship release 1.2?" in plan.data["paused_reason"]
    assert rig.plans.show(PlanShowInput("p1")).plan.data["waiting_on"] == waiting
    rig.clock.advance(59)
    again = rig.resume("p1")
    assert again.state == "paused" and again.data["steps"]["approve"]["state"] == "waiting", "undecided: it waits"
    assert again.data["waiting_on"] == waiting
    status = rig.service.inventory.status()
    (item,) = [i for i in status["needs_attention"] if i["kind"] == "plan_paused"]
    assert item["next"].startswith("corral plans decide p1 --step approve")


def test_approved_the_plan_goes_on_with_who_and_why(rig: ApprovalRig) -> None:
    rig.run("p2")
    rig.clock.advance(5)
    decided = rig.decide("p2", True, "release notes read", actor="alice@http")
    assert decided.state == "paused" and decided.data["steps"]["approve"]["decision"]["actor"] == "alice@http"
    plan = rig.resume("p2")
    assert plan.state == "succeeded", plan.data.get("failure")
    approve = plan.data["steps"]["approve"]
    assert approve["state"] == "succeeded"
    assert approve["outputs"] == {"approved": True, "reason": "release notes read", "decided_by": "alice@http"}
    assert plan.data["steps"]["after"]["outputs"] == {"by": "alice@http", "why": "release notes read"}
    (decide,) = [e for e in rig.plan_events("p2") if e.trigger == "decide"]
    assert decide.actor == "alice@http", "the decide event carries the deciding actor"
    assert decide.payload["params"]["approve"] is True
    with pytest.raises(RefusedError) as caught:
        rig.decide("p2", False)
    assert caught.value.code == "plan_not_waiting"


def test_without_an_actor_the_service_decides_and_a_blank_actor_is_refused(rig: ApprovalRig) -> None:
    rig.run("p3")
    with pytest.raises(InputError) as caught:
        rig.decide("p3", True, actor=" ")
    assert caught.value.details["field"] == "actor"
    rig.decide("p3", True)
    (decide,) = [e for e in rig.plan_events("p3") if e.trigger == "decide"]
    assert decide.actor == "test"
    assert rig.resume("p3").data["steps"]["approve"]["outputs"]["decided_by"] == "test"


def test_rejected_the_step_fails_with_decision_rejected(rig: ApprovalRig) -> None:
    rig.run("p4")
    rig.decide("p4", False, "not this week")
    plan = rig.resume("p4")
    assert plan.state == "failed"
    assert (plan.data["failure"]["step"], plan.data["failure"]["code"]) == ("approve", "decision_rejected")
    approve = plan.data["steps"]["approve"]
    assert approve["state"] == "failed" and approve["decision"]["reason"] == "not this week"
    assert "after" not in plan.data["steps"] or plan.data["steps"]["after"]["state"] == "skipped"


@pytest.mark.parametrize("ending", ["reject", "timeout"])
def test_a_rejection_or_a_timeout_is_catchable(rig: ApprovalRig, ending: str) -> None:
    rig.run(f"c-{ending}", "gate-caught")
    if ending == "reject":
        rig.decide(f"c-{ending}", False, "no")
    else:
        rig.clock.advance(60)
    plan = rig.resume(f"c-{ending}")
    assert plan.state == "succeeded", plan.data.get("failure")
    approve = plan.data["steps"]["approve"]
    code = "decision_rejected" if ending == "reject" else "approval_timeout"
    assert (approve["state"], approve["error"]["code"], approve["next"]) == ("caught", code, "handled")
    assert plan.data["steps"]["handled"]["outputs"] == {"handled": True}
    assert "after" not in plan.data["steps"], "the catch jumped past it"


def test_past_its_timeout_the_decision_is_refused_and_the_step_fails(rig: ApprovalRig) -> None:
    rig.run("p5")
    rig.clock.advance(60)
    before = len(rig.store.events())
    with pytest.raises(RefusedError) as caught:
        rig.decide("p5", True)
    assert caught.value.code == "approval_timeout"
    assert caught.value.details["deadline"] == format_time(rig.clock.now)
    assert "corral plans resume p5" in caught.value.message
    assert len(rig.store.events()) == before, "nothing written"
    plan = rig.resume("p5")
    assert plan.state == "failed"
    assert (plan.data["failure"]["step"], plan.data["failure"]["code"]) == ("approve", "approval_timeout")


def test_an_approval_without_a_timeout_waits_for_ever(rig: ApprovalRig) -> None:
    plan = rig.run("p6", "gate-forever")
    assert plan.data["waiting_on"]["deadline"] is None and plan.data["waiting_on"]["timeout"] is None
    rig.clock.advance(86400 * 30)
    assert rig.resume("p6").state == "paused"
    rig.decide("p6", True)
    assert rig.resume("p6").state == "succeeded"


def test_a_bad_prompt_fails_the_step(rig: ApprovalRig) -> None:
    plan = rig.run("p7", "gate-bad")
    assert plan.state == "failed"
    assert (plan.data["failure"]["step"], plan.data["failure"]["code"]) == ("approve", "input_invalid")


def test_a_runner_that_died_in_the_step_resumes_it_with_its_clock_running(rig: ApprovalRig) -> None:
    started = rig.clock.now
    crashing = Plans(rig.service, rig.recipes, MemoryKeeper(), Crashing())
    crashing.submit(PlanSubmitInput({"plan": "p8", "recipe": "gate", "controller": "ctl", "inputs": {}}))
    with pytest.raises(Crash):
        anyio.run(crashing.run, PlanRunInput("p8"))
    left = rig.plans.plan("p8")
    assert left.state == "running" and left.data["steps"]["approve"]["state"] == "running"
    rig.clock.advance(30)
    plan = rig.resume("p8")  # a new runner: the step is resolved (nothing acted), asked again
    assert plan.state == "paused"
    waiting = plan.data["waiting_on"]
    assert waiting["since"] == format_time(started), "the wait counts from the recorded start"
    assert parse_time(waiting["deadline"]) == started + timedelta(seconds=60)
    resumed = [e.payload["params"] for e in rig.plan_events("p8") if e.trigger == "step"]
    # The flow.pass step before it is pure: no running record, its outcome rides on approve's start.
    assert [r for _, r in step_records({"params": p} for p in resumed) if r["state"] == "running"] == [
        {"state": "running", "attempt": 1, "do": "human.approve"},
    ], "the step was not started twice"
    rig.clock.advance(30)
    failed = rig.resume("p8")
    assert (failed.state, failed.data["failure"]["code"]) == ("failed", "approval_timeout")


def test_a_paused_approval_survives_its_runner_and_a_new_process_decides_it(rig: ApprovalRig, tmp_path: Path) -> None:
    rig.run("p9")
    rig.store.close()
    # Another process (a new store connection, a new plans component) finds it paused and decides it.
    with SQLiteStore(tmp_path / "corral.db", clock=rig.clock) as store:
        service = Service(store, shared_library(), actor="ops")
        plans = Plans(service, rig.recipes, MemoryKeeper(), OPERATIONS)
        assert plans.plan("p9").data["waiting_on"]["kind"] == "approval"
        plans.decide(PlanDecideInput("p9", "approve", True, "fine"))
        final = anyio.run(plans.resume, PlanResumeInput("p9"))
        assert final.state == "succeeded"
        assert final.data["steps"]["approve"]["outputs"]["decided_by"] == "ops"
    rig.store = SQLiteStore(tmp_path / "corral.db", clock=rig.clock)  # the fixture closes it


# --- the real executable ---------------------------------------------------------------------------------


def run_corral(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runner.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=120,
        check=False,
    )


@pytest.mark.slow  # the real executable, several times
def test_corral_runs_shows_and_decides_an_approval(tmp_path: Path, cli_env: dict[str, str]) -> None:
    env = {
        **cli_env,
        "CORRAL_RECIPES": str(recipes_in(tmp_path / "recipes")),
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
    }
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"plan": "cli-1", "recipe": "gate", "controller": "ctl", "inputs": {}}))
    ran = run_corral(env, tmp_path, "run", str(plan), "--json")
    assert ran.returncode == 5, ran.stdout + ran.stderr  # paused: a person decides
    shown = run_corral(env, tmp_path, "plans", "show", "cli-1")
    assert shown.returncode == 0, shown.stderr
    assert "waits on: a person's approval since" in shown.stdout and "Ship release 1.2?" in shown.stdout
    assert "corral plans decide cli-1 --step approve" in shown.stdout
    as_json = json.loads(run_corral(env, tmp_path, "plans", "show", "cli-1", "--json").stdout)
    assert as_json["waiting_on"]["kind"] == "approval" and steps_by_id(as_json)["approve"]["state"] == "waiting"
    # Steps in run order, the one not run yet included with its state.
    assert [(s["id"], s["state"]) for s in as_json["steps"]] == [
        ("before", "succeeded"),
        ("approve", "waiting"),
        ("after", "pending"),
    ]
    first_words = [line.split()[0] for line in shown.stdout.splitlines() if line.split()]
    rows = [word for word in first_words if word in ("before", "approve", "after")]
    assert rows == ["before", "approve", "after"], "the text table in run order too"
    status = json.loads(run_corral(env, tmp_path, "status", "--json").stdout)
    assert any(i.get("plan") == "cli-1" and "plans decide" in i["next"] for i in status["needs_attention"])
    decided = run_corral(
        env, tmp_path, "plans", "decide", "cli-1", "--step", "approve", "--approve", "--reason", "ok", "--json"
    )
    assert decided.returncode == 0, decided.stdout + decided.stderr
    final = [json.loads(line) for line in decided.stdout.splitlines() if line.strip()][-1]
    assert final["state"] == "succeeded"
    assert steps_by_id(final)["approve"]["outputs"]["approved"] is True
    assert steps_by_id(final)["approve"]["outputs"]["decided_by"].startswith("cli:")


def test_racing_deciders_record_one_decision(rig: ApprovalRig, tmp_path: Path) -> None:
    import threading

    from runner.errors import CorralError

    rig.run("race")
    stores = [SQLiteStore(tmp_path / "corral.db", clock=rig.clock) for _ in range(6)]
    start = threading.Barrier(len(stores))
    outcomes: list[str] = []
    lock = threading.Lock()

    def decide(index: int, store: SQLiteStore) -> None:
        plans = Plans(Service(store, shared_library(), actor=f"p{index}"), rig.recipes,
                      MemoryKeeper(), OPERATIONS)  # fmt: skip
        start.wait()
        try:
            plans.decide(PlanDecideInput("race", "approve", index % 2 == 0, f"by {index}"))
            outcome = "decided"
        except CorralError as exc:
            outcome = exc.code
        with lock:
            outcomes.append(outcome)

    try:
        threads = [threading.Thread(target=decide, args=(i, s)) for i, s in enumerate(stores)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        for store in stores:
            store.close()
    assert outcomes.count("decided") == 1, outcomes
    assert set(outcomes) <= {"decided", "plan_not_waiting", "version_conflict"}, outcomes
    decides = [e for e in rig.plan_events("race") if e.trigger == "decide"]
    assert len(decides) == 1
    record = rig.plans.plan("race").data["steps"]["approve"]["decision"]
    assert record["actor"] == decides[0].actor, "the one decision recorded is the one the event logged"
