"""Explicit-state exploration of one machine: N actors contending for its instances, under faults.

Breadth first, so the first violation found of each invariant has a shortest counterexample. A world
is a hashable tuple: the lease (live, ever granted), the instances (state, fields set, effects
fired) and the actors (credential, grant unexpired, pending intent). Actors are interchangeable, so
a world is kept with its actors sorted (symmetry reduction); a counterexample is replayed on the
unsorted world so its actors keep their names. Pure: reads a :class:`MachineSpec`, nothing else.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from runner.definitions.model import InvariantSpec, MachineSpec, Ref, TransitionSpec
from runner.proof.invariants import STATE_KINDS, builtin_invariants
from runner.proof.models import GUARD_MODELS, UNKNOWN_GUARD, UNKNOWN_UPDATE, UPDATE_MODELS, View

FAULTS = ("crash", "expiry", "pause")
"""crash: a process dies between an intent and its effect (or between the effect and its outcome);
expiry: the store's clock passes the lease's expires_at; pause: a process stops past its TTL while
it holds an intent, and carries on with its old belief."""

NONE, STALE, CURRENT = 0, 1, 2  # an actor's credential

Actor = tuple[int, bool, "tuple[int, int, bool] | None"]  # credential, grant unexpired, (instance, transition, moved)
Instance = tuple[str, frozenset[str], frozenset[str]]  # state, fields set, triggers whose effect fired
World = tuple[bool, bool, tuple[Instance, ...], tuple[Actor, ...]]  # lease live, granted, instances, actors


@dataclass(frozen=True)
class Step:
    """One move of the exploration: an actor's trigger, effect or crash, or the clock's expiry."""

    actor: int | None
    action: str
    """``fire`` (a transition, or a two-phase transition's intent), ``effect``, ``refused`` (an effect's
    gate said no), ``crash``, ``expire`` or ``grant`` (the actor takes the lease the machine's guards
    fence on)."""
    trigger: str = ""
    instance: int = 0
    transition: int = -1
    source: str = ""
    dest: str = ""
    guards: tuple[tuple[str, str], ...] = ()
    outcome: str = ""
    fired: bool = False
    """An effect acted in this step."""
    current: bool = False
    """The actor held the current generation when it moved."""
    live: bool = False
    lease: str | None = None
    """What the step did to the lease: ``issue``, ``extend`` or ``release``."""


@dataclass
class Violation:
    invariant: InvariantSpec
    path: list[tuple[Step, World]]


@dataclass
class Result:
    """What one exploration found: its size and time, and each violated invariant's shortest trace."""

    machine: str
    actors: int
    instances: int
    faults: tuple[str, ...]
    invariants: list[InvariantSpec]
    states: int = 0
    transitions: int = 0
    depth: int = 0
    seconds: float = 0.0
    stopped: str | None = None
    """None: every reachable world was explored; ``budget`` or ``depth``: it stopped short."""
    violations: list[Violation] = field(default_factory=list)


class Explorer:
    """Explore ``spec`` with ``actors`` actors under ``faults``, within ``budget`` worlds and ``depth``."""

    def __init__(self, spec: MachineSpec, actors: int, faults: tuple[str, ...], budget: int, depth: int) -> None:
        self.spec = spec
        self.actors = actors
        self.faults = faults
        self.budget = budget
        self.depth = depth
        refs = [r for t in spec.transitions for r in (*t.guards, *t.recheck)]
        self.own_lease = any(_update(r).lease == "issue" for t in spec.transitions for r in t.updates)
        self.leased = self.own_lease or any(_guard(r).lease for r in refs)
        contended = any(i.kind == "at_most_one" for i in spec.invariants) or any(
            r.name in ("no_open_receipt", "no_open_wake") and spec.name in ("receipt", "wake") for r in refs
        )
        self.instances = 2 if contended else 1
        self.invariants = [*builtin_invariants(spec, self.leased), *spec.invariants]
        self.terminal = frozenset(n for n, s in spec.states.items() if s.terminal)

    # --- the moves --------------------------------------------------------------------------------

    def initial(self) -> World:
        inst: Instance = (self.spec.initial, frozenset(), frozenset())
        return (False, False, (inst,) * self.instances, ((NONE, False, None),) * self.actors)

    def successors(self, world: World) -> Iterator[tuple[Step, World]]:
        live, granted, insts, actors = world
        intents = any(a[2] is not None for a in actors)
        if live and "expiry" in self.faults and (not intents or "pause" in self.faults):
            expired = tuple((c, False, i) for c, _, i in actors)
            yield Step(None, "expire", live=False), (False, granted, insts, expired)
        for a, (cred, _, intent) in enumerate(actors):
            if intent is not None:
                yield from self._second_phase(world, a, intent)
                if "crash" in self.faults:
                    yield (
                        Step(a, "crash", current=cred == CURRENT, live=live),
                        (live, granted, insts, _set(actors, a, intent=None)),
                    )
                continue
            if self.leased and not self.own_lease and not live:
                yield Step(a, "grant", current=True, live=True, lease="issue"), self._lease("issue", world, a)
            for i, inst in enumerate(insts):
                for t in self.spec.transitions:
                    if inst[0] in t.sources:
                        yield from self._fire(world, a, i, t)

    def _view(self, world: World, a: int, i: int) -> View:
        live, granted, insts, actors = world
        others = any(j != i and self._open(s[0]) for j, s in enumerate(insts))
        return View(self.spec.name, actors[a][0] == CURRENT, live, granted, others)

    def _open(self, state: str) -> bool:
        return state != self.spec.initial and state not in self.terminal

    def _guards(self, refs: tuple[Ref, ...], view: View) -> tuple[tuple[str, str], ...] | None:
        outcomes = []
        for ref in refs:
            verdict = _guard(ref).decide(view, ref.args)
            if verdict is False:
                return None
            outcomes.append((ref.label(), "pass" if verdict else "free"))
        return tuple(outcomes)

    def _fire(self, world: World, a: int, i: int, t: TransitionSpec) -> Iterator[tuple[Step, World]]:
        view = self._view(world, a, i)
        guards = self._guards(t.guards, view)
        if guards is None:
            return
        lease = None
        after = world
        for ref in t.updates:
            model = _update(ref)
            if model.lease is not None and self.leased:
                lease = model.lease
                after = self._lease(model.lease, after, a)
        live, granted, insts, actors = after
        state, fields, fired = insts[i]
        fields = fields | {f for r in t.updates for f in _update(r).sets}
        insts = _put(insts, i, (t.dest, fields, fired))
        actors = _moved(actors, i)
        if t.two_phase:
            actors = _set(actors, a, intent=(i, t.index, False))
        step = Step(
            a, "fire", t.trigger, i, t.index, state, t.dest, guards, current=view.current, live=view.live, lease=lease
        )
        yield step, (live, granted, insts, actors)

    def _second_phase(self, world: World, a: int, intent: tuple[int, int, bool]) -> Iterator[tuple[Step, World]]:
        live, granted, insts, actors = world
        i, index, moved = intent
        t = self.spec.transitions[index]
        assert t.outcomes is not None  # the schema ties outcomes to effects
        state, fields, fired = insts[i]
        cleared = _set(actors, a, intent=None)
        view = self._view(world, a, i)
        base = Step(a, "refused", t.trigger, i, index, state, state, current=view.current, live=view.live)
        if moved or state != t.dest:
            # The gate finds the instance moved on: nothing is done, the late outcome is not applied.
            yield _with(base, outcome="instance_moved"), (live, granted, insts, cleared)
            return
        guards = self._guards(t.recheck, view)
        failed = _put(insts, i, (t.outcomes.failure, fields, fired))
        if guards is None or any(o == "free" for _, o in guards):
            yield (
                _with(base, dest=t.outcomes.failure, outcome="gate_refused"),
                (live, granted, failed, _moved(cleared, i)),
            )
        if guards is None:
            return
        done = fired | {t.trigger}
        outcomes = [(name, dest) for name, dest in t.outcome_edges()]
        if "crash" in self.faults:
            outcomes.append(("crash", t.dest))  # it acted, then died before recording the outcome
        for name, dest in outcomes:
            step = Step(a, "effect", t.trigger, i, index, state, dest, guards, name, True, view.current, view.live)
            yield step, (live, granted, _put(insts, i, (dest, fields, done)), _moved(cleared, i))

    def _lease(self, op: str, world: World, a: int) -> World:
        _, granted, insts, actors = world
        if op == "issue":
            demoted = tuple((STALE if c == CURRENT else c, u, i) for c, u, i in actors)
            return (True, True, insts, _set(demoted, a, cred=CURRENT, unexpired=True))
        if op == "extend":
            renewed = tuple((c, u or c == CURRENT, i) for c, u, i in actors)
            return (True, granted, insts, _set(renewed, a, unexpired=True))
        cred = actors[a][0]
        return (False, granted, insts, _set(actors, a, cred=STALE if cred == CURRENT else cred, unexpired=False))

    # --- the invariants ---------------------------------------------------------------------------

    def broken_by_step(self, inv: InvariantSpec, step: Step, before: World) -> bool:
        kind = inv.kind
        if kind == "terminal_final":
            return step.action == "fire" and step.source in self.terminal
        if kind == "intermediate_exits":
            if step.action != "fire" or step.source == step.dest:
                return False
            state = self.spec.states.get(step.source)
            return (
                bool(state and state.intermediate) and step.source not in self.spec.transitions[step.transition].sources
            )
        if kind == "effects_fenced":
            return step.fired and not (step.current and step.live)
        if kind == "fenced":
            return step.action in ("fire", "effect") and step.trigger in inv.triggers and not step.current
        if kind == "at_most_once":
            return step.fired and step.trigger in inv.triggers and step.trigger in before[2][step.instance][2]
        # generation_monotonic, never_decreases: no modelled update lowers a counter; a model that did
        # would say so here.
        return False

    def broken_in(self, inv: InvariantSpec, world: World) -> bool:
        _, _, insts, actors = world
        if inv.kind == "one_live_holder":
            return sum(1 for _, unexpired, _ in actors if unexpired) > 1
        if inv.kind == "at_most_one":
            return sum(1 for s in insts if s[0] in inv.states) > 1
        if inv.kind == "holds":
            return any(s[0] in inv.states and inv.field not in s[1] for s in insts)
        return False

    # --- the search -------------------------------------------------------------------------------

    def run(self) -> Result:
        started = time.perf_counter()
        result = Result(self.spec.name, self.actors, self.instances, self.faults, self.invariants)
        state_invs = [inv for inv in self.invariants if inv.kind in STATE_KINDS]
        step_invs = [inv for inv in self.invariants if inv.kind not in STATE_KINDS]
        found: dict[str, Violation] = {}
        init = self.initial()
        parent: dict[World, tuple[World, Step] | None] = {init: None}
        frontier = [init]
        depth = 0
        for inv in state_invs:
            if self.broken_in(inv, init):
                found[inv.name] = Violation(inv, [])
        while frontier and result.stopped is None:
            if depth >= self.depth:
                if any(_canon(w2) not in parent for w in frontier for _, w2 in self.successors(w)):
                    result.stopped = "depth"
                break
            following: list[World] = []
            for world in frontier:
                for step, nxt in self.successors(world):
                    result.transitions += 1
                    for inv in step_invs:
                        if inv.name not in found and self.broken_by_step(inv, step, world):
                            found[inv.name] = Violation(inv, self._path(parent, world, step, nxt))
                    key = _canon(nxt)
                    if key in parent:
                        continue
                    parent[key] = (world, step)
                    for inv in state_invs:
                        if inv.name not in found and self.broken_in(inv, key):
                            found[inv.name] = Violation(inv, self._path(parent, world, step, nxt))
                    following.append(key)
                    if len(parent) >= self.budget:
                        result.stopped = "budget"
                        break
                if result.stopped:
                    break
            frontier = following
            depth += 1
        result.states = len(parent)
        result.depth = depth
        result.violations = [found[inv.name] for inv in self.invariants if inv.name in found]
        result.seconds = time.perf_counter() - started
        return result

    def _path(
        self, parent: dict[World, tuple[World, Step] | None], world: World, step: Step, nxt: World
    ) -> list[tuple[Step, World]]:
        """The steps from the initial world to ``nxt``, replayed so that actors keep their names."""
        canonical: list[tuple[Step, World, World]] = [(step, world, _canon(nxt))]
        at: World = world
        while (link := parent[at]) is not None:
            before, how = link
            canonical.append((how, before, at))
            at = before
        canonical.reverse()
        real = self.initial()
        out: list[tuple[Step, World]] = []
        for how, before, target in canonical:
            # The same move by an actor in the same situation: its name may differ, its belief may not.
            mover = None if how.actor is None else before[3][how.actor]
            for candidate, after in self.successors(real):
                same_actor = (None if candidate.actor is None else real[3][candidate.actor]) == mover
                if same_actor and _canon(after) == target and _same_move(candidate, how):
                    out.append((candidate, after))
                    real = after
                    break
            else:  # pragma: no cover - replay follows the same moves; a miss is a bug in this module
                raise AssertionError(f"cannot replay {how}")
        return out


def _same_move(a: Step, b: Step) -> bool:
    return (a.action, a.trigger, a.transition, a.instance, a.outcome, a.dest, a.guards) == (
        b.action, b.trigger, b.transition, b.instance, b.outcome, b.dest, b.guards
    )  # fmt: skip


def _guard(ref: Ref) -> Any:
    return GUARD_MODELS.get(ref.name, UNKNOWN_GUARD)


def _update(ref: Ref) -> Any:
    return UPDATE_MODELS.get(ref.name, UNKNOWN_UPDATE)


def _canon(world: World) -> World:
    live, granted, insts, actors = world
    return (live, granted, insts, tuple(sorted(actors, key=_actor_key)))


def _actor_key(actor: Actor) -> tuple[Any, ...]:
    cred, unexpired, intent = actor
    return (cred, unexpired, intent is not None, intent or (0, 0, False))


def _put(insts: tuple[Instance, ...], i: int, inst: Instance) -> tuple[Instance, ...]:
    return (*insts[:i], inst, *insts[i + 1 :])


_KEEP: Any = object()


def _set(
    actors: tuple[Actor, ...], a: int, *, cred: Any = _KEEP, unexpired: Any = _KEEP, intent: Any = _KEEP
) -> tuple[Actor, ...]:
    c, u, i = actors[a]
    new: Actor = (
        c if cred is _KEEP else cred,
        u if unexpired is _KEEP else unexpired,
        i if intent is _KEEP else intent,
    )
    return (*actors[:a], new, *actors[a + 1 :])


def _moved(actors: tuple[Actor, ...], i: int) -> tuple[Actor, ...]:
    """Every pending intent on instance ``i`` is now stale: the instance's version moved."""
    out = []
    for cred, unexpired, intent in actors:
        mark = (i, intent[1], True) if intent is not None and intent[0] == i else intent
        out.append((cred, unexpired, mark))
    return tuple(out)


def _with(step: Step, **changes: Any) -> Step:
    return replace(step, **changes)
