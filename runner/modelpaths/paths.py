"""Test paths through a machine: shortest walks from its initial state that cover every transition and guard outcome.

Model-based testing over the graph a :class:`~runner.definitions.model.MachineSpec` defines. The
*targets* are what a test suite should exercise:

* every **transition edge**: each ``source -> dest`` of each transition, and each outcome edge of a
  two-phase transition (its intermediate state to the ``success``, ``failure`` and ``ambiguous``
  state; an ``ambiguous`` left undeclared stays in the intermediate state, as the engine does);
* every **guard outcome**: for each transition and each of its guards, the guard refusing (the
  guards before it passing) and the guard passing.

A *path* is a list of :class:`Step` from the initial state. Each target gets the shortest path that
reaches it (breadth-first, in definition order, so the result is deterministic); a path that is a
prefix of another is dropped, because the longer one covers its target at the same depth.

How steps read:

* A taken step moves ``from -> to`` with every guard of its transition passing. When several
  transitions share a trigger and a source, the engine tries them in definition order: a step taken
  by a later one implies the earlier ones were refused.
* A two-phase transition is two steps, as the engine records two events: the intent
  (``start``: ``absent -> provisioning``) and then, right after it, the outcome step (``start`` with
  ``outcome: success``: ``provisioning -> active``, recorded as ``start:success``). An outcome step
  follows only its own intent; a path may instead go on from the intermediate state with another
  trigger: the second phase never happened (a ``recheck`` guard refused, or the runner died between
  the two writes). :meth:`CoveragePath.interrupted` names those intent steps, and ``--json`` marks
  them ``"interrupted": true``, so a test generator knows to stop the second phase there.
* A refusal step has the guard at its position refuse and stays in its state (``from == to``); no
  other candidate for the trigger is taken.

``recheck`` guards are not targets (the built-in machines recheck only the fence, a guard of the same
transition); a path through an interrupted intent is where a test makes one refuse.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from runner.definitions.model import MachineSpec, TransitionSpec

Verdict = Literal["pass", "refuse"]


# A node of the walk graph: a state, and the two-phase transition whose intent just entered it (the
# only one whose outcome edges may follow), or None.
_Node = tuple[str, int | None]


@dataclass(frozen=True)
class EdgeTarget:
    """One transition edge to exercise: ``source -> dest`` of transition ``transition`` (or its outcome edge)."""

    transition: int
    trigger: str
    source: str
    dest: str
    outcome: str | None = None

    @property
    def event_trigger(self) -> str:
        """The trigger as the event log records it: ``start`` or ``start:success``."""
        return self.trigger if self.outcome is None else f"{self.trigger}:{self.outcome}"

    @property
    def id(self) -> str:
        """A stable, readable name: ``t0 start absent->provisioning``, ``t0 start:success provisioning->active``."""
        return f"t{self.transition} {self.event_trigger} {self.source}->{self.dest}"

    def to_json(self) -> dict[str, Any]:
        """The target for ``corral paths --json``."""
        return {
            "id": self.id,
            "transition": self.transition,
            "trigger": self.trigger,
            "event_trigger": self.event_trigger,
            "from": self.source,
            "to": self.dest,
            "outcome": self.outcome,
        }


@dataclass(frozen=True)
class GuardTarget:
    """One guard outcome to exercise: guard ``position`` of transition ``transition`` passing or refusing."""

    transition: int
    trigger: str
    guard: str
    position: int
    verdict: Verdict

    @property
    def id(self) -> str:
        """A stable, readable name: ``t0 start fence#0 refuse``."""
        return f"t{self.transition} {self.trigger} {self.guard}#{self.position} {self.verdict}"

    def to_json(self) -> dict[str, Any]:
        """The target for ``corral paths --json``."""
        return {
            "id": self.id,
            "transition": self.transition,
            "trigger": self.trigger,
            "guard": self.guard,
            "position": self.position,
            "outcome": self.verdict,
        }


Target = EdgeTarget | GuardTarget


@dataclass(frozen=True)
class Targets:
    """Everything a test suite should exercise in one machine, in definition order."""

    transitions: tuple[EdgeTarget, ...]
    guards: tuple[GuardTarget, ...]

    def __iter__(self) -> Iterator[Target]:
        yield from self.transitions
        yield from self.guards

    def to_json(self) -> dict[str, Any]:
        """``{"transitions": [...], "guards": [...]}`` for ``corral paths --json``."""
        return {
            "transitions": [t.to_json() for t in self.transitions],
            "guards": [g.to_json() for g in self.guards],
        }


@dataclass(frozen=True)
class Step:
    """One firing in a path.

    ``guard_outcomes`` holds the guards of transition ``transition`` that ran, in order, each
    ``pass`` or ``refuse`` (guards stop at the first refusal); outcome steps have none.
    """

    transition: int
    trigger: str
    source: str
    dest: str
    guard_outcomes: tuple[tuple[str, Verdict], ...] = ()
    outcome: str | None = None
    intent: bool = False  # the first phase of a two-phase transition: its outcome step may follow

    @property
    def refused(self) -> bool:
        """True if a guard refused: the step stays in its state."""
        return any(verdict == "refuse" for _, verdict in self.guard_outcomes)

    @property
    def event_trigger(self) -> str:
        """The trigger the event log records for this step (a refusal records none)."""
        return self.trigger if self.outcome is None else f"{self.trigger}:{self.outcome}"

    def covers(self) -> list[Target]:
        """The targets this step exercises."""
        out: list[Target] = []
        if not self.refused:
            out.append(EdgeTarget(self.transition, self.trigger, self.source, self.dest, self.outcome))
        for position, (key, verdict) in enumerate(self.guard_outcomes):
            out.append(GuardTarget(self.transition, self.trigger, key.split("#", 1)[0], position, verdict))
        return out

    def to_json(self) -> dict[str, Any]:
        """``{trigger, from, to, guard_outcomes, transition[, outcome]}``."""
        out: dict[str, Any] = {
            "trigger": self.trigger,
            "from": self.source,
            "to": self.dest,
            "guard_outcomes": dict(self.guard_outcomes),
            "transition": self.transition,
        }
        if self.outcome is not None:
            out["outcome"] = self.outcome
        if self.intent:
            out["intent"] = True
        return out


@dataclass(frozen=True)
class CoveragePath:
    """A walk from the initial state; its last step is the target it was generated for."""

    steps: tuple[Step, ...]

    def covers(self) -> list[Target]:
        """The targets the walk exercises, in order, each once."""
        return list(dict.fromkeys(target for step in self.steps for target in step.covers()))

    def interrupted(self) -> list[int]:
        """Positions of intent steps not followed by their outcome: the second phase must not happen there.

        A test realises one by having the ``recheck`` guard refuse, or by crashing between the two writes.
        """
        return [
            i
            for i, step in enumerate(self.steps)
            if step.intent
            and not (
                i + 1 < len(self.steps)
                and self.steps[i + 1].outcome is not None
                and self.steps[i + 1].transition == step.transition
            )
        ]

    def to_json(self) -> dict[str, Any]:
        """``{"steps": [...], "covers": [target ids]}``; interrupted intent steps say ``"interrupted": true``."""
        steps = [s.to_json() for s in self.steps]
        for i in self.interrupted():
            steps[i]["interrupted"] = True
        return {"steps": steps, "covers": [t.id for t in self.covers()]}


@dataclass(frozen=True)
class Coverage:
    """The paths for one machine, the targets they cover, and any target no path can reach."""

    machine: str
    targets: Targets
    paths: tuple[CoveragePath, ...]
    unreachable: tuple[Target, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """``{"machine", "paths", "targets", "unreachable"}``: what ``corral paths --json`` prints."""
        return {
            "machine": self.machine,
            "paths": [p.to_json() for p in self.paths],
            "targets": self.targets.to_json(),
            "unreachable": [t.id for t in self.unreachable],
        }


def list_targets(spec: MachineSpec) -> Targets:
    """Every transition edge and guard outcome of ``spec``, in definition order."""
    edges: list[EdgeTarget] = []
    guards: list[GuardTarget] = []
    for t in spec.transitions:
        edges.extend(EdgeTarget(t.index, t.trigger, source, t.dest) for source in t.sources)
        edges.extend(EdgeTarget(t.index, t.trigger, t.dest, dest, outcome) for outcome, dest in t.outcome_edges())
        for position, ref in enumerate(t.guards):
            for verdict in ("refuse", "pass"):
                guards.append(GuardTarget(t.index, t.trigger, ref.name, position, verdict))
    return Targets(tuple(edges), tuple(guards))


def find_paths(spec: MachineSpec) -> Coverage:
    """The shortest paths from ``spec.initial`` that together cover every target of :func:`list_targets`."""
    parents = _search(spec)
    order = {node: i for i, node in enumerate(parents)}  # breadth-first order: nearer nodes first
    nearest: dict[str, _Node] = {}
    for node in parents:
        nearest.setdefault(node[0], node)

    def walk_to(states: Iterable[str]) -> tuple[Step, ...] | None:
        """The steps to the nearest node in one of ``states`` (the first in breadth-first order)."""
        reached = [nearest[s] for s in states if s in nearest]
        if not reached:
            return None
        node: _Node | None = min(reached, key=order.__getitem__)
        steps: list[Step] = []
        while node is not None:
            parent = parents[node]
            if parent is None:
                break
            node, step = parent
            steps.append(step)
        return tuple(reversed(steps))

    targets = list_targets(spec)
    candidates: list[tuple[Step, ...]] = []
    unreachable: list[Target] = []
    for target in targets:
        t = spec.transitions[target.transition]
        if isinstance(target, EdgeTarget) and target.outcome is None:
            prefix = walk_to([target.source])
            steps = None if prefix is None else (*prefix, _taken(t, target.source))
        elif isinstance(target, EdgeTarget):
            prefix = walk_to(t.sources)
            steps = None if prefix is None else (*prefix, _taken(t, _end(prefix, spec)), _outcome(t, target.outcome))
        elif target.verdict == "pass":
            prefix = walk_to(t.sources)
            steps = None if prefix is None else (*prefix, _taken(t, _end(prefix, spec)))
        else:
            prefix = walk_to(t.sources)
            steps = None if prefix is None else (*prefix, _refusal(t, _end(prefix, spec), target.position))
        if steps is None:
            unreachable.append(target)
        else:
            candidates.append(steps)
    kept = _drop_prefixes(candidates)
    return Coverage(spec.name, targets, tuple(CoveragePath(p) for p in kept), tuple(unreachable))


def covered_by(paths: Iterable[CoveragePath]) -> set[Target]:
    """Every target the steps of ``paths`` exercise."""
    return {target for path in paths for target in path.covers()}


# --- the walk graph ---------------------------------------------------------------------------------


def _keys(t: TransitionSpec) -> list[str]:
    """Guard names as step keys; a name repeated within one transition gets ``#position``."""
    seen: set[str] = set()
    keys = []
    for position, ref in enumerate(t.guards):
        keys.append(ref.name if ref.name not in seen else f"{ref.name}#{position}")
        seen.add(ref.name)
    return keys


def _taken(t: TransitionSpec, source: str) -> Step:
    return Step(t.index, t.trigger, source, t.dest, tuple((k, "pass") for k in _keys(t)), intent=t.two_phase)


def _refusal(t: TransitionSpec, source: str, position: int) -> Step:
    keys = _keys(t)[: position + 1]
    verdicts: tuple[tuple[str, Verdict], ...] = tuple(
        (k, "refuse" if i == position else "pass") for i, k in enumerate(keys)
    )
    return Step(t.index, t.trigger, source, source, verdicts)


def _outcome(t: TransitionSpec, outcome: str | None) -> Step:
    dest = dict(t.outcome_edges())[outcome or ""]
    return Step(t.index, t.trigger, t.dest, dest, (), outcome)


def _end(prefix: tuple[Step, ...], spec: MachineSpec) -> str:
    return prefix[-1].dest if prefix else spec.initial


def _moves(spec: MachineSpec, node: _Node) -> Iterator[tuple[Step, _Node]]:
    state, pending = node
    if pending is not None:
        intent = spec.transitions[pending]
        for outcome, _ in intent.outcome_edges():
            step = _outcome(intent, outcome)
            yield step, (step.dest, None)
    for t in spec.transitions:
        if state in t.sources:
            yield _taken(t, state), (t.dest, t.index if t.two_phase else None)


def _search(spec: MachineSpec) -> dict[_Node, tuple[_Node, Step] | None]:
    """Breadth-first from the initial state: each node's parent and the step that reached it."""
    start: _Node = (spec.initial, None)
    parents: dict[_Node, tuple[_Node, Step] | None] = {start: None}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for step, nxt in _moves(spec, node):
            if nxt not in parents:
                parents[nxt] = (node, step)
                queue.append(nxt)
    return parents


def _drop_prefixes(candidates: list[tuple[Step, ...]]) -> list[tuple[Step, ...]]:
    """Distinct paths, without those that are a prefix of another (which covers the same at the same depth)."""
    distinct = list(dict.fromkeys(candidates))
    return [
        path
        for path in distinct
        if not any(len(other) > len(path) and other[: len(path)] == path for other in distinct)
    ]
