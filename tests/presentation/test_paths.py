"""Test paths: every built-in machine's paths cover every target, walk validly, and are shortest.

The checks here recompute targets and distances independently of :mod:`runner.modelpaths.paths` (a plain
breadth-first search over states), so a wrong generator fails them instead of agreeing with itself.
"""

from __future__ import annotations

import hashlib
import json
from collections import deque
from pathlib import Path
from typing import Any

import pytest

from runner.cli import main
from runner.definitions.library import Library
from runner.definitions.model import MachineSpec, TransitionSpec
from runner.modelpaths.paths import (
    CoveragePath,
    EdgeTarget,
    GuardTarget,
    Step,
    covered_by,
    find_paths,
    list_targets,
)

BUILTINS = sorted(p.stem for p in Library().builtin_paths())
MACHINES = [*BUILTINS, "toy", "detour"]  # the built-ins, and two spelled out below


def builtin(name: str) -> MachineSpec:
    return Library().builtin(name)


def machine(name: str) -> MachineSpec:
    """A built-in machine, or one of the synthetic ones defined in this file."""
    return {"toy": toy, "detour": detour}.get(name, lambda: builtin(name))()


def outcome_dests(t: TransitionSpec) -> dict[str, str]:
    """Where each outcome of a two-phase transition leads; the engine stays put for an undeclared ambiguous."""
    if not t.effects or t.outcomes is None:
        return {}
    return {"success": t.outcomes.success, "failure": t.outcomes.failure, "ambiguous": t.outcomes.ambiguous or t.dest}


def expected_edges(spec: MachineSpec) -> set[tuple[int, str, str, str | None]]:
    edges: set[tuple[int, str, str, str | None]] = set()
    for t in spec.transitions:
        edges |= {(t.index, source, t.dest, None) for source in t.sources}
        edges |= {(t.index, t.dest, dest, outcome) for outcome, dest in outcome_dests(t).items()}
    return edges


def distances(spec: MachineSpec) -> dict[tuple[str, int | None], int]:
    """Breadth-first distance of every (state, pending two-phase transition) from the initial state."""
    start: tuple[str, int | None] = (spec.initial, None)
    dist = {start: 0}
    queue = deque([start])
    while queue:
        state, pending = queue.popleft()
        nexts: list[tuple[str, int | None]] = []
        if pending is not None:
            nexts += [(dest, None) for dest in outcome_dests(spec.transitions[pending]).values()]
        nexts += [(t.dest, t.index if t.effects else None) for t in spec.transitions if state in t.sources]
        for node in nexts:
            if node not in dist:
                dist[node] = dist[(state, pending)] + 1
                queue.append(node)
    return dist


def state_distance(spec: MachineSpec, states: tuple[str, ...] | list[str]) -> int:
    dist = distances(spec)
    return min(d for (state, _), d in dist.items() if state in states)


def check_walk(spec: MachineSpec, steps: tuple[Step, ...]) -> None:
    """Each step starts where the previous one ended, with a trigger that exists from there."""
    state = spec.initial
    previous: Step | None = None
    for i, step in enumerate(steps):
        assert step.source == state, (i, step)
        t = spec.transitions[step.transition]
        assert step.trigger == t.trigger
        if step.outcome is not None:
            assert previous is not None and previous.intent and previous.transition == step.transition, step
            assert not previous.refused
            assert (step.source, step.dest) == (t.dest, outcome_dests(t)[step.outcome])
            assert step.guard_outcomes == ()
        else:
            assert spec.transitions_for(step.trigger, state), f"no {step.trigger!r} from {state!r}"
            assert state in t.sources
            names = [name for name, _ in step.guard_outcomes]
            assert names == [g.name for g in t.guards][: len(names)]
            verdicts = [v for _, v in step.guard_outcomes]
            if step.refused:
                assert verdicts == ["pass"] * (len(verdicts) - 1) + ["refuse"], "only the last guard run refuses"
                assert step.dest == state, "a refusal stays in its state"
                assert i == len(steps) - 1, "a refusal ends its path"
            else:
                assert len(names) == len(t.guards) and set(verdicts) <= {"pass"}
                assert step.dest == t.dest
            assert step.intent == (bool(t.effects) and not step.refused)
        state = step.dest
        previous = step


@pytest.mark.parametrize("name", MACHINES)
def test_targets_are_every_edge_and_guard_outcome(name: str) -> None:
    spec = machine(name)
    targets = list_targets(spec)
    edges = {(e.transition, e.source, e.dest, e.outcome) for e in targets.transitions}
    assert edges == expected_edges(spec)
    assert len(edges) == len(targets.transitions), "no edge listed twice"
    guards = {(g.transition, g.position, g.guard, g.verdict) for g in targets.guards}
    assert guards == {
        (t.index, i, ref.name, verdict)
        for t in spec.transitions
        for i, ref in enumerate(t.guards)
        for verdict in ("pass", "refuse")
    }


@pytest.mark.parametrize("name", MACHINES)
def test_paths_cover_every_target(name: str) -> None:
    coverage = find_paths(machine(name))
    assert coverage.unreachable == ()
    missing = [t.id for t in coverage.targets if t not in covered_by(coverage.paths)]
    assert missing == []


@pytest.mark.parametrize("name", MACHINES)
def test_paths_walk_validly_from_the_initial_state(name: str) -> None:
    spec = machine(name)
    for path in find_paths(spec).paths:
        check_walk(spec, path.steps)


@pytest.mark.parametrize("name", MACHINES)
def test_no_path_is_longer_than_its_target_needs(name: str) -> None:
    spec = machine(name)
    for path in find_paths(spec).paths:
        last = path.steps[-1]
        t = spec.transitions[last.transition]
        if last.outcome is not None:  # the intent step and its outcome, after the nearest source
            prefix = path.steps[:-2]
            assert len(prefix) == state_distance(spec, t.sources), path
        elif last.refused:  # a refusal needs any source: the nearest one
            prefix = path.steps[:-1]
            assert len(prefix) == state_distance(spec, t.sources), path
        else:  # an edge needs its own source
            prefix = path.steps[:-1]
            assert len(prefix) == state_distance(spec, [last.source]), path


@pytest.mark.parametrize("name", MACHINES)
def test_paths_are_distinct_deterministic_and_not_prefixes(name: str) -> None:
    spec = machine(name)
    first, second = find_paths(spec), find_paths(machine(name))
    assert first.to_json() == second.to_json()
    walks = [p.steps for p in first.paths]
    for i, walk in enumerate(walks):
        for j, other in enumerate(walks):
            assert i == j or other[: len(walk)] != walk, f"path {i + 1} is a prefix of path {j + 1}"


def test_dropping_any_path_loses_a_target() -> None:
    """Each path earns its place: without it some target is uncovered (the coverage check can fail)."""
    coverage = find_paths(builtin("reviewer"))
    every = set(coverage.targets)
    for i in range(len(coverage.paths)):
        rest = coverage.paths[:i] + coverage.paths[i + 1 :]
        assert every - covered_by(rest), f"path {i + 1} covers nothing the others do not"


def toy() -> MachineSpec:
    """A two-phase start, a shared-trigger pair and a multi-source transition, small enough to spell out."""
    doc: dict[str, Any] = {
        "machine": "toy",
        "version": 1,
        "description": "d",
        "initial": "idle",
        "states": {
            "idle": {"description": "i"},
            "starting": {"description": "s", "intermediate": True},
            "up": {"description": "u"},
            "down": {"description": "d", "terminal": True},
        },
        "transitions": [
            {
                "trigger": "start",
                "source": "idle",
                "dest": "starting",
                "guards": ["fence", "agent_name_free"],
                "effects": ["start_agent"],
                "outcomes": {"success": "up", "failure": "down"},
            },
            {"trigger": "stop", "source": ["up", "starting"], "dest": "down", "guards": ["owner"]},
        ],
    }
    return MachineSpec.from_document(doc, "toy.yaml", hashlib.sha256(b"toy").hexdigest())


def detour() -> MachineSpec:
    """A long way and a short way to ``e``, the long one defined first: only breadth-first finds the short."""
    doc: dict[str, Any] = {
        "machine": "detour",
        "version": 1,
        "description": "d",
        "initial": "a",
        "states": {name: {"description": name} for name in "abcde"},
        "transitions": [
            {"trigger": "go", "source": "a", "dest": "b"},
            {"trigger": "turn", "source": "a", "dest": "c"},
            {"trigger": "on", "source": "c", "dest": "d"},
            {"trigger": "on", "source": "d", "dest": "e"},
            {"trigger": "on", "source": "b", "dest": "e", "guards": ["owner"]},
            {"trigger": "back", "source": "e", "dest": "a"},
        ],
    }
    return MachineSpec.from_document(doc, "detour.yaml", hashlib.sha256(b"detour").hexdigest())


def test_detour_paths_take_the_short_way() -> None:
    assert [compact(p) for p in find_paths(detour()).paths] == [
        ["turn a->c", "on c->d", "on d->e"],
        ["go a->b", "on b->e", "back e->a"],  # not by way of c and d, though their transitions come first
        ["go a->b", "on b->b refused"],
    ]


def compact(path: CoveragePath) -> list[str]:
    return [
        f"{s.event_trigger} {s.source}->{s.dest}" + (" refused" if s.refused else "") + (" !" if s.intent else "")
        for s in path.steps
    ]


def test_toy_machine_paths_spelled_out() -> None:
    coverage = find_paths(toy())
    assert [compact(p) for p in coverage.paths] == [
        ["start idle->starting !", "start:failure starting->down"],
        ["start idle->starting !", "start:ambiguous starting->starting"],
        ["start idle->starting !", "start:success starting->up", "stop up->down"],
        ["start idle->starting !", "stop starting->down"],
        ["start idle->idle refused"],
        ["start idle->idle refused"],
        ["start idle->starting !", "stop starting->starting refused"],
    ]
    refusals = [p.steps[-1] for p in coverage.paths if p.steps[-1].refused]
    assert [dict(s.guard_outcomes) for s in refusals] == [
        {"fence": "refuse"},
        {"fence": "pass", "agent_name_free": "refuse"},
        {"owner": "refuse"},
    ]
    # stop from 'starting' right after the intent: the second phase never happened there.
    stop = next(p for p in coverage.paths if p.steps[-1].trigger == "stop" and p.steps[-1].refused)
    assert stop.interrupted() == [0]
    assert stop.to_json()["steps"][0]["interrupted"] is True
    assert stop.steps[-1].dest == "starting"


def test_toy_targets_include_the_undeclared_ambiguous_outcome() -> None:
    targets = list_targets(toy())
    assert EdgeTarget(0, "start", "starting", "starting", "ambiguous") in targets.transitions
    assert [t.id for t in targets.transitions] == [
        "t0 start idle->starting",
        "t0 start:success starting->up",
        "t0 start:failure starting->down",
        "t0 start:ambiguous starting->starting",
        "t1 stop up->down",
        "t1 stop starting->down",
    ]
    assert GuardTarget(1, "stop", "owner", 0, "refuse") in targets.guards


# --- corral paths -----------------------------------------------------------------------------------


def step_from_json(spec: MachineSpec, doc: dict[str, Any]) -> Step:
    """A step back from JSON; ``--json`` sorts keys, so guards are put back in the transition's order."""
    order = [g.name for g in spec.transitions[doc["transition"]].guards]
    return Step(
        doc["transition"],
        doc["trigger"],
        doc["from"],
        doc["to"],
        tuple(sorted(doc["guard_outcomes"].items(), key=lambda item: order.index(item[0]))),
        doc.get("outcome"),
        bool(doc.get("intent")),
    )


@pytest.mark.parametrize("name", BUILTINS)
def test_cli_json_round_trip(name: str, home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["paths", name, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    spec = builtin(name)
    coverage = find_paths(spec)
    assert doc == json.loads(json.dumps(coverage.to_json()))
    assert doc["machine"] == name and doc["unreachable"] == []
    paths = [CoveragePath(tuple(step_from_json(spec, s) for s in p["steps"])) for p in doc["paths"]]
    for path, raw in zip(paths, doc["paths"], strict=True):
        check_walk(spec, path.steps)
        assert [t.id for t in path.covers()] == raw["covers"]
    target_ids = {t["id"] for t in doc["targets"]["transitions"] + doc["targets"]["guards"]}
    assert target_ids == {t.id for t in list_targets(spec)}
    assert target_ids == {t.id for t in covered_by(paths)}


def test_cli_text_numbers_each_path(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["paths", "receipt"]) == 0
    out = capsys.readouterr().out
    count = len(find_paths(builtin("receipt")).paths)
    assert out.startswith(f"machine receipt v1: {count} path(s) covering 9 transition edge(s)")
    assert [line for line in out.splitlines() if line.startswith("path ")] == [f"path {n}" for n in range(1, count + 1)]
    assert "  2. relay:success: reserved -> pending" in out
    assert "(refused, stays)" in out and "fence=refuse" in out


def test_cli_unknown_machine(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["paths", "nosuchmachine", "--json"]) == 3
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["code"] == "machine_unknown"
    assert main(["paths", "nosuchmachine"]) == 3
    assert "error [machine_unknown]" in capsys.readouterr().err
