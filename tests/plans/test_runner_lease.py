"""The plan runner's lock is a lease in the store (issue 16): the runner records its lease (expiry by the
store's clock), renews it while steps run, ends it when it pauses or the plan ends, and a runner on
another machine takes a plan whose runner stopped renewing once the lease expired, never before, and
never by guessing from pids or boot ids it cannot see.

Real SQLite store and PostgreSQL (the suite's store kind), the real plans component and recipes; the
"other machine" is a runner whose recorded identity names another host (the guard only sees records).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from runner.context import parse_time
from runner.definitions.recipes import RecipeLibrary
from runner.errors import RefusedError
from runner.plans.keeper import MemoryKeeper
from runner.plans.ops import OPERATIONS, Operation, StepOperation
from runner.service import Service
from runner.service.inputs.plans import PlanResumeInput, PlanRunInput, PlanShowInput, PlanSubmitInput
from runner.service.plans import Plans
from runner.store import Store
from tests.conftest import FakeClock
from tests.plans.test_approval import Crash, Crashing, recipes_in
from tests.support.specs import shared_library
from tests.support.stores import open_test_store

ELSEWHERE = {"pid": 4242, "host": "another-machine", "boot_id": "0000-elsewhere", "start_time": 7}


class Slow:
    """The built-in operations, but ``human.approve`` takes ``seconds`` of real time and approves."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def get(self, name: str) -> StepOperation | None:
        if name == "human.approve":
            spec = OPERATIONS.get(name)
            assert spec is not None
            seconds = self.seconds

            async def slow(ctx: Any, args: Any) -> Any:
                from runner.service.steps import Outputs

                await anyio.sleep(seconds)
                return Outputs({"approved": True, "decided_by": "slow", "reason": "took its time"})

            return Operation(spec.spec, slow)
        return OPERATIONS.get(name)


class Rig:
    def __init__(self, root: Path) -> None:
        self.clock = FakeClock()
        self.store: Store = open_test_store(root, clock=self.clock)
        self.service = Service(self.store, shared_library(), actor="test")
        self.recipes = RecipeLibrary([recipes_in(root / "recipes")])

    def plans(self, operations: Any = OPERATIONS, me: dict[str, Any] | None = None, ttl: float = 60.0) -> Plans:
        made = Plans(self.service, self.recipes, MemoryKeeper(), operations, runner_ttl=ttl)
        if me is not None:
            made.me = me  # a runner with another identity: another machine
        return made

    def events(self, plan_id: str) -> list[Any]:
        return [e for e in self.store.events() if e.instance_id == f"plan/{plan_id}"]


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    made = Rig(tmp_path)
    yield made
    made.store.close()


def test_another_machine_takes_a_dead_runners_plan_only_once_its_lease_expired(rig: Rig) -> None:
    dead = rig.plans(Crashing())
    dead.submit(PlanSubmitInput({"plan": "p1", "recipe": "gate", "controller": "ctl", "inputs": {}}))
    with pytest.raises(Crash):
        anyio.run(dead.run, PlanRunInput("p1"))
    runner = dead.plan("p1").data["runner"]
    assert runner["ttl"] == 60.0 and (parse_time(runner["expires_at"]) - rig.clock.now).total_seconds() == 60
    other = rig.plans(me=ELSEWHERE)
    rig.clock.advance(59)
    with pytest.raises(RefusedError) as caught:
        anyio.run(other.resume, PlanResumeInput("p1"))
    assert caught.value.code == "plan_busy" and caught.value.details["expires_at"] == runner["expires_at"]
    assert "lease expires at" in caught.value.message
    rig.clock.advance(1)  # the lease is over: expiry is inclusive, as a controller lease's
    plan = anyio.run(other.resume, PlanResumeInput("p1"))
    assert plan.state == "paused", "the new runner took the plan and ran its approval step"
    taken = [e for e in rig.events("p1") if e.trigger == "start"]
    assert [e.payload["params"]["runner"]["host"] for e in taken] == [runner["host"], "another-machine"]
    assert plan.data["runner"]["host"] == "another-machine"
    assert parse_time(plan.data["runner"]["expires_at"]) == rig.clock.now, "a pause ends the lease"


def test_a_paused_plan_is_free_for_any_machine_at_once(rig: Rig) -> None:
    first = rig.plans()
    first.submit(PlanSubmitInput({"plan": "p2", "recipe": "gate", "controller": "ctl", "inputs": {}}))
    assert anyio.run(first.run, PlanRunInput("p2")).state == "paused"
    other = rig.plans(me=ELSEWHERE)
    again = anyio.run(other.resume, PlanResumeInput("p2"))  # no waiting out a lease after a pause
    assert again.state == "paused" and again.data["runner"]["host"] == "another-machine"


@pytest.mark.slow  # a step of 1.5 s, by design
def test_a_runner_renews_its_lease_while_a_step_runs_and_keeps_the_plan(rig: Rig) -> None:
    """TTL 0.6 s, a step of 1.5 s: the runner renews every 0.2 s; the store's clock (moved by the test)
    shows each renewal moving the expiry; a runner elsewhere is refused throughout."""
    runner = rig.plans(Slow(1.5), ttl=0.6)
    runner.submit(PlanSubmitInput({"plan": "p3", "recipe": "gate", "controller": "ctl", "inputs": {}}))
    refusals: list[str] = []

    async def run_and_try_elsewhere() -> Any:
        async with anyio.create_task_group() as group:
            done: list[Any] = []

            async def run() -> None:
                done.append(await runner.run(PlanRunInput("p3")))

            group.start_soon(run)
            other = rig.plans(me=ELSEWHERE, ttl=0.6)
            for _ in range(5):
                await anyio.sleep(0.25)
                rig.clock.advance(0.25)
                try:
                    await anyio.to_thread.run_sync(lambda: anyio.run(other.resume, PlanResumeInput("p3")))
                except RefusedError as exc:
                    refusals.append(exc.code)
        return done[0]

    started = time.monotonic()
    plan = anyio.run(run_and_try_elsewhere)
    assert time.monotonic() - started >= 1.5
    assert plan.state == "succeeded" and plan.data["runner"]["host"] != "another-machine"
    renewals = [e for e in rig.events("p3") if e.trigger == "renew_runner"]
    assert len(renewals) >= 3, [e.trigger for e in rig.events("p3")]
    # A renewal records the expiry it set when it moved (the store's clock moves only when the test says).
    expiries = [parse_time(e.payload["changed"]["runner"]["expires_at"]) for e in renewals if e.payload["changed"]]
    assert len(expiries) >= 2 and expiries == sorted(expiries) and expiries[-1] > expiries[0], renewals
    assert refusals and set(refusals) == {"plan_busy"}, refusals


def test_plans_show_reports_the_runners_lease_absent_active_expired_and_never_a_credential(rig: Rig) -> None:
    """Issue 24: ``plans show`` says whether a runner holds the plan (host, pid, expiry), by the store's clock."""
    dead = rig.plans(Crashing())
    dead.submit(PlanSubmitInput({"plan": "p4", "recipe": "gate", "controller": "ctl", "inputs": {}}))
    assert dead.show(PlanShowInput("p4")).runner == {"status": "absent", "host": None, "pid": None, "expires_at": None}

    with pytest.raises(Crash):
        anyio.run(dead.run, PlanRunInput("p4"))
    recorded = dead.plan("p4").data["runner"]
    held = dead.show(PlanShowInput("p4")).runner
    assert held == {"status": "active", "host": recorded["host"], "pid": recorded["pid"],
                    "expires_at": recorded["expires_at"]}  # fmt: skip
    assert set(held) == {"status", "host", "pid", "expires_at"}, "only these; no boot id, no credential"

    rig.clock.advance(60)  # the dead runner never renewed
    assert dead.show(PlanShowInput("p4")).runner["status"] == "expired"

    taken = anyio.run(rig.plans(me=ELSEWHERE).resume, PlanResumeInput("p4"))
    assert taken.state == "paused"
    after = dead.show(PlanShowInput("p4")).runner
    assert after["status"] == "expired" and after["host"] == "another-machine", "a pause ends the lease"


def test_plans_show_calls_a_runner_whose_process_is_gone_expired_before_its_lease_runs_out(rig: Rig) -> None:
    import subprocess
    import sys

    from runner import lockstatus

    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    )
    me = lockstatus.current(int(gone.stdout))  # a real process of this machine, now exited
    plans = rig.plans(Crashing(), me={**me, "start_time": me["start_time"] or 1})
    plans.submit(PlanSubmitInput({"plan": "p5", "recipe": "gate", "controller": "ctl", "inputs": {}}))
    with pytest.raises(Crash):
        anyio.run(plans.run, PlanRunInput("p5"))
    assert plans.show(PlanShowInput("p5")).runner["status"] == "expired"
