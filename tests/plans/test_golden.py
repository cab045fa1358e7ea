"""The ``review`` plan's event history, pinned: recorded once, committed, compared on every run, and
replayed through the machines' own transition tables.

``tests/plans/golden/review.json`` holds, for every event of one run of the review plan (scripted
agent, in-process executor), the instance (as ``machine#n`` in order of first appearance: no ids), its
machine, trigger, from and to state, and for the plan's ``step`` events the step and the record's
states (a ``step`` event commits the outcome of one step and the start of the next; ``finish`` the
last outcome); then every instance's final state. Any change to the order or shape of the transitions a plan
makes fails the comparison until the file is deliberately re-recorded::

    .venv/bin/python tests/plans/test_golden.py      # or CORRAL_UPDATE_GOLDEN=1 pytest tests/plans/test_golden.py

The replay checks that each recorded event is a transition its machine allows: the trigger is defined
from ``from`` and leads to ``to`` (an outcome ``T:success``/``T:failure``/``T:ambiguous`` through the
outcomes of the two-phase transition ``T`` whose intermediate state is ``from``), both in the spec
(``transitions_for``) and in the ``transitions.Machine`` the engine consults (``Library().table``).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio
import pytest

from runner.agents.kinds import Kinds
from runner.agents.process import ProcessHost
from runner.definitions.library import Library
from runner.definitions.recipes import RecipeLibrary
from runner.plans.keeper import MemoryKeeper
from runner.plans.ops import OPERATIONS
from runner.service import Service
from runner.service.inputs.plans import PlanRunInput, PlanSubmitInput
from runner.service.plans import Plans
from runner.sql.store_sqlite import SQLiteStore
from tests.support.plans import records_of
from tests.support.specs import shared_library

GOLDEN = Path(__file__).with_name("golden") / "review.json"
AUTHORITY = hashlib.sha256(b"golden authority").hexdigest()


def record(root: Path) -> dict[str, Any]:
    """Run the review plan once in ``root`` and return its normalized history and final states."""
    with SQLiteStore(root / "corral.db") as store:
        kinds = Kinds.load([])
        host = ProcessHost(store, root / "agents", kinds)
        service = Service(store, shared_library(), actor="golden", hosts=lambda n: host, kinds=kinds)
        plans = Plans(service, RecipeLibrary([]), MemoryKeeper(), OPERATIONS, scratch=root)
        project = root / "project"
        project.mkdir()
        (project / "main.py").write_text("print('hi')\n")
        doc = {
            "plan": "golden-review",
            "recipe": "review",
            "controller": "golden",
            "inputs": {
                "cwd": str(project),
                "prompt": "Review this project.\necho golden",
                "kind": "script",
                "timeout": 60,
                "authority_ref": "GOLDEN-1",
                "authority_sha256": AUTHORITY,
            },
        }
        plans.submit(PlanSubmitInput(doc))
        final = anyio.run(plans.run, PlanRunInput("golden-review"))
        assert final.state == "succeeded", final.data.get("failure")
        events = store.events()
        names: dict[str, str] = {}
        counts: dict[str, int] = {}
        history = []
        for event in events:
            if event.instance_id not in names:
                counts[event.machine] = counts.get(event.machine, 0) + 1
                names[event.instance_id] = f"{event.machine}#{counts[event.machine]}"
            entry = {
                "instance": names[event.instance_id],
                "machine": event.machine,
                "trigger": event.trigger,
                "from": event.from_state,
                "to": event.to_state,
            }
            if event.machine == "plan" and records_of(event.payload):
                # The records the event committed: the outcome of one step and the start of the next.
                entry["records"] = [[step, record["state"]] for step, record in records_of(event.payload)]
            history.append(entry)
        finals = {}
        for instance_id, name in names.items():
            instance = store.get(instance_id)
            assert instance is not None
            finals[name] = instance.state
    return {"recipe": "review", "events": history, "final": finals}


def write_golden() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        doc = record(Path(scratch))
    GOLDEN.parent.mkdir(exist_ok=True)
    # One event per line: a changed history shows as a readable diff.
    lines = ",\n".join(f"  {json.dumps(e)}" for e in doc["events"])
    GOLDEN.write_text(
        f'{{\n "recipe": {json.dumps(doc["recipe"])},\n "events": [\n{lines}\n ],\n'
        f' "final": {json.dumps(doc["final"], sort_keys=True)}\n}}\n'
    )


def replay(history: list[dict[str, Any]], library: Library) -> dict[str, str]:
    """Walk the recorded events through each machine's transitions; returns the final states."""
    states: dict[str, str] = {}
    for index, event in enumerate(history):
        where = f"event {index} ({event['instance']} {event['trigger']}: {event['from']} -> {event['to']})"
        spec = library.builtin(event["machine"])
        table = library.table(spec)
        current = states.get(event["instance"], spec.initial)
        assert event["from"] == current, f"{where}: the instance was {current!r}"
        trigger, _, outcome = event["trigger"].partition(":")
        if outcome:
            # An outcome: the second phase of a two-phase transition T, from T's intermediate state.
            phases = [t for t in spec.transitions if t.trigger == trigger and t.outcomes and t.dest == current]
            assert phases, f"{where}: no two-phase {trigger!r} has {current!r} as its intermediate state"
            leads = set()
            for t in phases:
                assert t.outcomes is not None
                dest = getattr(t.outcomes, outcome)
                leads.add(dest if dest is not None or outcome != "ambiguous" else t.dest)
            assert event["to"] in leads, f"{where}: {outcome} leads to {sorted(map(str, leads))}"
        else:
            candidates = spec.transitions_for(trigger, current)
            assert candidates, f"{where}: {trigger!r} is not allowed from {current!r}"
            assert event["to"] in {t.dest for t in candidates}, f"{where}: {trigger!r} never leads there"
        if event["to"] != current or not outcome:
            found = table.machine.get_transitions(trigger=event["trigger"], source=current, dest=event["to"])
            assert found, f"{where}: the engine's transition table has no such transition"
        states[event["instance"]] = event["to"]
    return states


@pytest.fixture(scope="module")
def golden() -> dict[str, Any]:
    if os.environ.get("CORRAL_UPDATE_GOLDEN") == "1":
        write_golden()
    if not GOLDEN.exists():
        pytest.fail(f"{GOLDEN} is missing: record it with `.venv/bin/python {Path(__file__).name}` and commit it")
    doc: dict[str, Any] = json.loads(GOLDEN.read_text())
    return doc


def test_the_review_plan_makes_exactly_the_recorded_transitions(golden: dict[str, Any], tmp_path: Path) -> None:
    fresh = record(tmp_path)
    assert fresh["events"] == golden["events"], "the review plan's event history changed (see the module doc)"
    assert fresh["final"] == golden["final"]


def test_the_recorded_history_replays_through_the_transition_tables(golden: dict[str, Any], tmp_path: Path) -> None:
    library = shared_library()
    finals = replay(golden["events"], library)
    assert finals == golden["final"]
    assert finals["plan#1"] == "succeeded" and library.builtin("plan").states["succeeded"].terminal
    assert {m: s for m, s in finals.items() if not m.startswith("controller")} == {
        "plan#1": "succeeded",
        "reviewer#1": "closed",
        "receipt#1": "completed",
    }


def test_the_recorded_history_is_the_review_recipe(golden: dict[str, Any]) -> None:
    steps = [s.id for s in RecipeLibrary([]).get("review").steps]
    recorded = [(step, state) for e in golden["events"] for step, state in e.get("records", [])]
    assert recorded == [(s, state) for s in steps for state in ("running", "succeeded")]
    # One commit per step: each step event settles the last step and starts the next; finish the last.
    plan_steps = [e for e in golden["events"] if e["trigger"] == "step"]
    assert len(plan_steps) == len(steps)
    assert [len(e["records"]) for e in plan_steps] == [1] + [2] * (len(steps) - 1)
    plan = [(e["trigger"], e["to"]) for e in golden["events"] if e["machine"] == "plan" and e["trigger"] != "step"]
    assert plan == [("submit", "submitted"), ("start", "running"), ("finish", "succeeded")]


@pytest.mark.parametrize(
    ("index", "change"),
    [
        (0, {"from": "running"}),  # an event from a state the instance is not in
        (1, {"trigger": "finish"}),  # a trigger the state does not allow
        (-1, {"to": "failed"}),  # a transition that leads elsewhere
    ],
)
def test_the_replay_refuses_an_impossible_history(
    golden: dict[str, Any], tmp_path: Path, index: int, change: dict[str, str]
) -> None:
    history = [dict(e) for e in golden["events"]]
    history[index].update(change)
    with pytest.raises(AssertionError):
        replay(history, shared_library())


def test_the_replay_refuses_a_wrong_outcome(golden: dict[str, Any], tmp_path: Path) -> None:
    history = [dict(e) for e in golden["events"]]
    index = next(i for i, e in enumerate(history) if e["trigger"] == "relay:success")
    history[index]["to"] = "completed"
    with pytest.raises(AssertionError, match="success leads to"):
        replay(history, shared_library())


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    write_golden()
    print(f"wrote {GOLDEN}")
