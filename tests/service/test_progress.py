"""Live progress and spend through the service (issue 23): ``agent_progress``, the follower's feed
``live_progress``, the spend against budget in ``status`` and ``agents``. A real store, the real
process host and a real subprocess printing Claude's stream-json (``tests/support/stream_agent.py``)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from runner.agents.kinds import Kinds
from runner.agents.process import ProcessHost
from runner.errors import InputError
from runner.service import (
    AcquireInput,
    AgentProgressInput,
    CollectInput,
    RelayInput,
    ReviewerStartInput,
    Service,
)
from tests.support import stream_agent
from tests.support.specs import shared_library
from tests.support.stores import open_test_store

SHA = "d" * 64


class StreamWorld:
    def __init__(self, root: Path) -> None:
        config = root / "agents.yaml"
        config.write_text(stream_agent.kind_yaml())
        self.root = root
        self.store = open_test_store(root)
        self.kinds = Kinds.load([config])
        self.host = ProcessHost(self.store, root / "agents", self.kinds)
        self.service = Service(
            self.store, shared_library(), actor="test", hosts=lambda name: self.host, kinds=self.kinds
        )
        self.credential = self.service.controller.acquire(AcquireInput("ctl", "T-23", SHA, 900, "t@h")).credential
        self.work = root / "work"
        self.work.mkdir()

    def start(self, name: str = "rev", **limits: Any) -> Any:
        return self.service.reviewers.start(
            ReviewerStartInput("ctl", self.credential, name, "streamer", str(self.work), **limits)
        )


@pytest.fixture
def world(tmp_path: Path) -> Iterator[StreamWorld]:
    w = StreamWorld(tmp_path)
    try:
        yield w
    finally:
        w.store.close()


def _until(check: Any, timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.01)
    raise AssertionError("not reached in time")


def test_the_feed_gives_a_run_once_whole_then_only_what_is_new_then_its_end(world: StreamWorld) -> None:
    lease = world.start()
    pane = lease.data["pane_id"]
    updates, seen = world.service.waits.live_progress("process", {})
    assert updates == [] and seen == {pane: (0, 0)}  # idle: nothing to follow yet
    go = Path(lease.data["cwd"]) / "go"  # where the confined agent reads: its own directory
    receipt = world.service.receipts.relay(
        RelayInput("ctl", world.credential, "rev", f"read a.py\nwait {go}\nread b.py\nwait {go}2\nok")
    )
    first = _until(lambda: world.service.waits.live_progress("process", seen)[0])
    (update,) = first
    assert update["pane_id"] == pane and update["name"] == "rev" and update["kind"] == "streamer"
    assert update["running"] is True and update["run"] == 1 and update["start"] == 0
    assert update["lines"] in ([], ["tool Read a.py"])
    _, seen = world.service.waits.live_progress("process", seen)
    _until(lambda: world.service.waits.progress(AgentProgressInput(pane)).total == 1)  # type: ignore[union-attr]
    updates, seen = world.service.waits.live_progress("process", seen)
    assert [u["lines"] for u in updates] in ([], [["tool Read a.py"]])
    assert world.service.waits.live_progress("process", seen)[0] == []  # nothing new: nothing said
    go.write_text("")
    _until(lambda: world.service.waits.progress(AgentProgressInput(pane)).total == 2)  # type: ignore[union-attr]
    updates, seen = world.service.waits.live_progress("process", seen)
    assert [(u["start"], u["lines"]) for u in updates] == [(1, ["tool Read b.py"])]
    go.with_name("go2").write_text("")
    anyio.run(world.service.receipts.collect, CollectInput("ctl", world.credential, (receipt.token,), 30))
    updates, seen = world.service.waits.live_progress("process", seen)
    assert [(u["running"], u["lines"], u["total"]) for u in updates] == [(False, [], 2)]  # the end, once
    assert world.service.waits.live_progress("process", seen)[0] == []
    # A new follower starts from what runs now: an ended run is not replayed to it.
    assert world.service.waits.live_progress("process", {})[0] == []
    progress = world.service.waits.progress(AgentProgressInput(pane, after=1))
    assert progress is not None and progress.lines == ("tool Read b.py",) and not progress.running
    with pytest.raises(InputError):
        AgentProgressInput(pane, after=-1)


def test_status_and_agents_show_spend_against_budget(world: StreamWorld) -> None:
    lease = world.start(budget_usd=1.0, budget_tokens=1000, max_turns=5)
    receipt = world.service.receipts.relay(RelayInput("ctl", world.credential, "rev", "hello"))
    anyio.run(world.service.receipts.collect, CollectInput("ctl", world.credential, (receipt.token,), 30))
    (agent,) = world.service.inventory.agents("process")
    assert agent["budget"] == {"budget_usd": 1.0, "budget_tokens": 1000, "max_turns": 5}
    assert agent["spend"]["tokens"] == 120 and agent["session_id"]
    (row,) = world.service.inventory.status()["spend"]
    assert row["lease"] == lease.id and row["name"] == "rev" and row["machine"] == "reviewer"
    assert row["session_id"] == agent["session_id"]
    assert row["spend"] == {"tokens": 120, "cost_usd": 0.25, "turns": 1, "runs": 1}
    assert row["budget"] == {"budget_usd": 1.0, "budget_tokens": 1000, "max_turns": 5}
    assert row["left"] == {"budget_usd": 0.75, "budget_tokens": 880, "max_turns": 4}
    assert row["exhausted"] is None


def test_plans_show_sums_what_the_plan_leases_spent(world: StreamWorld) -> None:
    from runner.definitions.recipes import RecipeLibrary
    from runner.plans.keeper import MemoryKeeper
    from runner.plans.ops import OPERATIONS
    from runner.service.inputs.plans import PlanRunInput, PlanShowInput, PlanSubmitInput
    from runner.service.plans import Plans

    (world.root / "scratch").mkdir()
    plans = Plans(world.service, RecipeLibrary([]), MemoryKeeper(), OPERATIONS, scratch=world.root / "scratch")
    inputs = {
        "cwd": str(world.work),
        "prompt": "read lib.py\nreviewed",
        "kind": "streamer",
        "verdict_schema": None,  # the scripted stream agent answers in text
        "timeout": 60,
        "authority_ref": "T-1",
        "authority_sha256": SHA,
    }
    plans.submit(PlanSubmitInput({"plan": "rev-1", "recipe": "review", "controller": "planner", "inputs": inputs}))
    plan = anyio.run(plans.run, PlanRunInput("rev-1"), lambda event: None)
    assert plan.state == "succeeded", plan.data.get("failure")
    spend = plans.show(PlanShowInput("rev-1")).spend
    (row,) = spend["leases"]
    assert row["lease"] == plan.data["steps"]["start"]["outputs"]["lease"] and row["state"] == "closed"
    assert row["spend"] == {"tokens": 120, "cost_usd": 0.25, "turns": 1, "runs": 1} and row["session_id"]
    assert row["budget"] == {} and row["left"] == {} and row["exhausted"] is None
    assert spend["total"] == {"tokens": 120, "cost_usd": 0.25, "turns": 1, "runs": 1}
