"""Plans and driven agent runs (issue 23): a plan's budget refuses its next prompt, a run whose actions
the CLI denied fails its step ``agent_denied`` unless the step allows denials, and a plan branches on
a reviewer's verdict. Real SQLite, the real process host and real subprocess agents: the scripted
stream-json agent (tests/support/stream_agent.py, through the claude driver) and the demo agent."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from runner.agents.abc import AgentError, StartOptions
from runner.agents.kinds import Kinds
from runner.agents.process import ProcessHost
from runner.context import Instance
from runner.errors import InputError
from runner.service.inputs.plans import PlanRunInput, PlanSubmitInput
from tests.support.agent_plans import AgentPlans

AUTHORITY = hashlib.sha256(b"the plan's authority").hexdigest()

RECIPES = {
    "twice": """\
        recipe: twice
        version: 1
        description: two prompts to one reviewer, then close it
        budget: {tokens: 100}
        inputs:
          type: object
          properties:
            cwd: {type: string}
            kind: {type: string, default: streamer}
            first: {type: string, default: first question}
            second: {type: string, default: second question}
            allow: {type: boolean, default: false}
        steps:
          - id: acquire
            do: controller.acquire
            with: {authority_ref: T-23, authority_sha256: "AUTHORITY"}
          - id: start
            do: reviewer.start
            with: {name: rev, kind: "${inputs.kind}", cwd: "${inputs.cwd}"}
          - id: one
            do: receipt.ask
            with: {target: rev, text: "${inputs.first}", timeout: 60, allow_denials: "${inputs.allow}"}
          - id: two
            do: receipt.ask
            with: {target: rev, text: "${inputs.second}", timeout: 60}
          - id: close
            do: reviewer.close
            with: {lease: "${steps.start.lease}"}
            finally: true
        """.replace("AUTHORITY", AUTHORITY),
    "gate": """\
        recipe: gate
        version: 1
        description: review, then go on only when the reviewer approves
        extends: review
        insert_before:
          close:
            - id: changes-requested
              do: flow.fail
              with: {code: changes_requested, message: the reviewer asked for changes}
              when: {left: "${steps.collect.verdict.verdict}", op: "==", right: request_changes}
        """,
}


class Rig(AgentPlans):
    def __init__(self, root: Path) -> None:
        super().__init__(root, RECIPES)

    def run(self, doc: dict[str, Any]) -> Instance:
        self.plans.submit(PlanSubmitInput(doc))
        return anyio.run(self.plans.run, PlanRunInput(str(doc["plan"])), lambda event: None)

    def twice(self, plan_id: str, budget: dict[str, Any] | None = None, **inputs: Any) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "plan": plan_id,
            "recipe": "twice",
            "controller": "ctl",
            "inputs": {"cwd": str(self.project), **inputs},
        }
        if budget is not None:
            doc["budget"] = budget
        return doc


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    made = Rig(tmp_path)
    yield made
    made.store.close()


def test_a_plans_budget_refuses_its_next_prompt_with_the_spend(rig: Rig) -> None:
    plan = rig.run(rig.twice("spend-1"))  # the recipe's budget: 100 tokens; one run spends 120
    assert plan.state == "failed"
    assert plan.data["failure"]["step"] == "two" and plan.data["failure"]["code"] == "budget_exhausted"
    assert plan.data["budget"] == {"tokens": 100}
    assert len(rig.store.find("receipt")) == 1, "the refused prompt reserved no receipt"
    spend = rig.plans.spend(rig.plans.plan("spend-1"))
    assert spend["total"]["tokens"] == 120 and spend["total"]["runs"] == 1
    assert spend["reached"] == {"limit": "tokens", "budget": 100, "spent": 120}
    (lease,) = rig.store.find("reviewer")
    assert lease.state == "closed", "the finally step still closed the reviewer"


def test_a_plans_own_budget_overrides_its_recipes_limit_by_limit(rig: Rig) -> None:
    plan = rig.run(rig.twice("spend-2", budget={"tokens": 1000, "usd": 5}))
    assert plan.state == "succeeded", plan.data.get("failure")
    assert plan.data["budget"] == {"tokens": 1000, "usd": 5}
    assert rig.plans.spend(plan)["total"] == {"tokens": 240, "cost_usd": 0.5, "turns": 2, "runs": 2}
    stopped = rig.run(rig.twice("spend-3", budget={"usd": 0.25}))
    assert stopped.data["failure"]["code"] == "budget_exhausted"
    assert rig.plans.spend(stopped)["reached"]["limit"] == "usd"


def test_the_timeline_shows_what_each_step_spent_and_a_dash_where_no_agent_ran(rig: Rig) -> None:
    rig.run(rig.twice("spend-t", budget={"tokens": 1000, "usd": 5}))
    timeline = rig.service.board.timeline("spend-t")
    steps = {step["id"]: step for step in timeline["steps"]}
    for asked in ("one", "two"):  # each ask: one driven run of 120 tokens, $0.25, one turn
        assert (steps[asked]["tokens"], steps[asked]["cost_usd"], steps[asked]["turns"]) == (120, 0.25, 1)
        [attempt] = steps[asked]["attempts"]
        assert attempt["tokens"] == 120 and attempt["state"] == "succeeded"
    for other in ("acquire", "start", "close"):  # no driven run: unknown, never zero
        assert steps[other]["tokens"] is None and steps[other]["cost_usd"] is None
    assert (timeline["tokens"], timeline["cost_usd"], timeline["turns"]) == (240, 0.5, 2)
    assert timeline["tokens"] == rig.plans.spend(rig.plans.plan("spend-t"))["total"]["tokens"]


def test_a_bad_budget_is_refused_before_anything_is_recorded(rig: Rig) -> None:
    with pytest.raises(InputError) as refused:
        rig.plans.submit(PlanSubmitInput(rig.twice("spend-bad", budget={"tokens": 0})))
    assert "budget" in str(refused.value)
    with pytest.raises(InputError):
        rig.plans.submit(PlanSubmitInput(rig.twice("spend-bad", budget={"dollars": 1})))
    assert rig.store.find("plan") == []


def test_a_denied_run_fails_its_step_unless_the_step_allows_denials(rig: Rig) -> None:
    target = rig.project / "notes.md"
    plan = rig.run(rig.twice("deny-1", budget={"tokens": 10**6}, first=f"deny {target}"))
    assert plan.state == "failed"
    assert plan.data["failure"]["step"] == "one" and plan.data["failure"]["code"] == "agent_denied"
    (receipt,) = rig.store.find("receipt")
    assert receipt.state == "completed" and receipt.data["denied"] is True
    assert receipt.data["denials"][0]["tool"] == "Write"
    allowed = rig.run(rig.twice("deny-2", budget={"tokens": 10**6}, first=f"deny {target}", allow=True))
    assert allowed.state == "succeeded", allowed.data.get("failure")
    assert allowed.data["steps"]["one"]["outputs"]["denied"] is True
    assert allowed.data["steps"]["two"]["outputs"]["denials"] == []


def review(rig: Rig, plan_id: str, prompt: str) -> dict[str, Any]:
    inputs = {
        "cwd": str(rig.project),
        "prompt": prompt,
        "kind": "script",
        "timeout": 60,
        "authority_ref": "T-23",
        "authority_sha256": AUTHORITY,
    }
    return {"plan": plan_id, "recipe": "gate", "controller": "ctl", "inputs": inputs}


def test_a_plan_branches_on_the_reviewers_verdict(rig: Rig) -> None:
    approved = rig.run(review(rig, "gate-1", "Review this project."))
    assert approved.state == "succeeded", approved.data.get("failure")
    assert approved.data["steps"]["changes-requested"]["state"] == "skipped"
    assert approved.data["private"]["collect"]["verdict"]["verdict"] == "approve"
    changes = rig.run(review(rig, "gate-2", "Review this project.\nfinding main.py prints instead of logging"))
    assert changes.state == "failed" and changes.data["failure"]["code"] == "changes_requested"
    verdict = changes.data["private"]["collect"]["verdict"]
    assert verdict == {
        "verdict": "request_changes",
        "findings": ["main.py prints instead of logging"],
        "summary": verdict["summary"],
    }
    assert "main.py prints" not in str([e.to_dict() for e in rig.store.events()]), "the verdict is never logged"


def test_a_kind_that_cannot_answer_to_a_schema_is_refused_before_delivery(rig: Rig, tmp_path: Path) -> None:
    config = tmp_path / "plain.yaml"
    config.write_text("kinds:\n  plainer:\n    argv: [cat]\n")
    kinds = Kinds.load([config])
    host = ProcessHost(rig.store, tmp_path / "agents2", kinds)
    started = host.start("p", "plainer", str(rig.project), StartOptions())
    with pytest.raises(AgentError) as refused:
        host.prompt(started.pane_id, "hello", schema='{"type": "object"}')
    assert refused.value.code == "agent_schema_unsupported"
