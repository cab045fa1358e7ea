"""A validated machine's transition table: what the engine consults to fire a trigger.

Guard names become condition callables looked up in corral's registries when the table is built.
:meth:`TransitionTable.fire` evaluates a trigger's candidates straight from the spec, the way a
``transitions.Machine`` would (tests/definitions/test_table.py holds it to the library's answers), so
a command that only fires (``controller renew``) never imports ``transitions`` (nor the ``logging`` it
imports). The ``transitions.Machine`` itself (:attr:`TransitionTable.machine`) is built on first use,
for a trigger the table holds no route for; its ``resolve_callable`` refuses every string, so
transitions' default of importing a dotted path named in a definition can never happen.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from runner.context import Context, Rejection
from runner.definitions.model import MachineSpec, Ref, TransitionSpec
from runner.errors import Diagnostic, SpecError
from runner.guards import GUARDS, GuardFn

if TYPE_CHECKING:
    from transitions import EventData, Machine


@dataclass
class Firing:
    """One trigger as transitions evaluated it: the context, what the guards said, what was taken."""

    ctx: Context
    rejections: list[tuple[str, Rejection]] = field(default_factory=list)
    chosen: TransitionSpec | None = None


class _Model:
    """The one model registered with a table; it carries the firing being evaluated.

    Registering a model per firing costs more than the trigger itself (transitions binds every
    trigger to the model), so one model is reused under a lock and placed at each firing's state.
    """

    def __init__(self, initial: str) -> None:
        self.state = initial
        self.firing: Firing | None = None


def _firing(event: EventData) -> Firing:
    model = event.model
    assert isinstance(model, _Model) and model.firing is not None
    return model.firing


@dataclass(frozen=True)
class _Guard:
    ref: Ref
    fn: GuardFn

    def __call__(self, event: EventData) -> bool:
        firing = _firing(event)
        rejection = self.fn(firing.ctx, **self.ref.args)
        if rejection is None:
            return True
        firing.rejections.append((self.ref.name, rejection))
        return False


class TransitionTable:
    """The transition table of one :class:`MachineSpec` (its ``transitions.Machine`` built on first use)."""

    def __init__(self, spec: MachineSpec) -> None:
        self.spec = spec
        missing: list[Diagnostic] = []
        self._guards: dict[int, tuple[_Guard, ...]] = {}
        # Each (trigger, source) with its candidates in definition order and their guards, as the
        # machine would hold them (a ``transitions.Machine`` adds a transition's sources in order, and
        # an event's candidates for a source in the order added): :meth:`fire` evaluates them the way
        # ``Event.trigger`` does without moving a model (no lock, no state change, no callbacks).
        routes: dict[tuple[str, str], list[tuple[TransitionSpec, tuple[_Guard, ...]]]] = {}
        for t in spec.transitions:
            conditions = []
            for i, ref in enumerate(t.guards):
                entry = GUARDS.get(ref.name)
                if entry is None:
                    missing.append(
                        Diagnostic(
                            "spec_unknown_guard",
                            "error",
                            f"no guard named {ref.name!r} is registered",
                            spec.path,
                            pointer=f"/transitions/{t.index}/guards/{i}",
                        )
                    )
                    continue
                conditions.append(_Guard(ref, entry.fn))
            self._guards[t.index] = tuple(conditions)
            for source in t.sources:
                routes.setdefault((t.trigger, source), []).append((t, self._guards[t.index]))
        if missing:
            raise SpecError(missing)
        self._lock = threading.Lock()
        self._routes = {key: tuple(route) for key, route in routes.items()}

    @cached_property
    def _model(self) -> _Model:
        return _Model(self.spec.initial)

    @cached_property
    def machine(self) -> Machine:
        """The ``transitions.Machine`` of the spec: its transitions (the guards as conditions) and the
        outcome edges of two-phase transitions (``renew:success`` …), built on first use."""
        from transitions import Machine

        class _Choose:  # the machine's ``after`` callback of a transition (made with the machine: a renew never is)
            def __init__(self, spec: TransitionSpec) -> None:
                self.spec = spec

            def __call__(self, event: EventData) -> None:
                _firing(event).chosen = self.spec

        class _Table(Machine):
            @staticmethod
            def resolve_callable(func: Any, event_data: EventData) -> Any:
                if isinstance(func, str):
                    raise TypeError(f"corral never resolves callables by name inside transitions (asked for {func!r})")
                return func

        definitions: list[dict[str, Any]] = []
        for t in self.spec.transitions:
            definitions.append(
                {
                    "trigger": t.trigger,
                    "source": list(t.sources),
                    "dest": t.dest,
                    "conditions": list(self._guards[t.index]),
                    "after": [_Choose(t)],
                }
            )
            for outcome, dest in t.outcome_edges():
                if dest != t.dest:
                    definitions.append({"trigger": f"{t.trigger}:{outcome}", "source": t.dest, "dest": dest})
        return _Table(
            model=self._model,
            states=list(self.spec.states),
            transitions=definitions,
            initial=self.spec.initial,
            auto_transitions=False,
            send_event=True,
        )

    def allows(self, trigger: str, state: str) -> bool:
        """Whether ``trigger`` has any transition from ``state`` (guards not judged)."""
        return (trigger, state) in self._routes

    def candidates(self, trigger: str, state: str) -> tuple[TransitionSpec, ...]:
        """The transitions ``trigger`` may take from ``state``, in definition order (empty: not allowed)."""
        return tuple(chosen for chosen, _ in self._routes.get((trigger, state), ()))

    def fire(self, trigger: str, state: str, ctx: Context) -> Firing:
        """Evaluate ``trigger`` from ``state``: the first candidate whose guards all pass wins.

        As ``transitions`` does, a candidate's guards run in order and stop at its first refusal, and
        the first candidate whose guards all pass is taken. Returns the :class:`Firing`: ``chosen`` is
        the transition taken (None if every candidate was refused; ``rejections`` then says why, in the
        order the guards ran).
        """
        route = self._routes.get((trigger, state))
        if route is None:
            return self._fire_machine(trigger, state, ctx)  # not a route: the machine raises as it always did
        firing = Firing(ctx=ctx)
        for chosen, guards in route:
            for guard in guards:
                rejection = guard.fn(ctx, **guard.ref.args)
                if rejection is not None:
                    firing.rejections.append((guard.ref.name, rejection))
                    break
            else:
                firing.chosen = chosen
                break
        return firing

    def _fire_machine(self, trigger: str, state: str, ctx: Context) -> Firing:
        firing = Firing(ctx=ctx)
        with self._lock:
            machine = self.machine
            self._model.firing = firing
            try:
                machine.set_state(state, model=self._model)
                machine.events[trigger].trigger(self._model)
            finally:
                self._model.firing = None
        return firing
