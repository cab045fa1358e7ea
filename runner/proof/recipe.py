"""A recipe's plan machine: the plan lifecycle with the recipe's steps as triggers of their own.

The plan machine records any step with one ``step`` trigger; here the plan's ``running``, ``paused``
and ``failed`` states are numbered by how many steps are recorded (``running_2``), each step is the
trigger ``step:<id>`` from the state before it, and ``finish`` leaves only after the last step. So
``corral check RECIPE`` explores the plan of that recipe: every step recorded once, in order, by the
runner holding the plan, across runner takeovers, pauses and retries.
"""

from __future__ import annotations

from dataclasses import replace

from runner.definitions.model import InvariantSpec, MachineSpec, StateSpec, TransitionSpec

NUMBERED = ("running", "paused", "failed")


def plan_of(plan: MachineSpec, recipe: str, steps: list[str]) -> MachineSpec:
    """``plan`` unrolled over ``steps`` (the recipe's step ids, in order), named ``plan@<recipe>``."""
    n = len(steps)
    states: dict[str, StateSpec] = {}
    for name, state in plan.states.items():
        if name in NUMBERED:
            for k in range(n + 1):
                states[f"{name}_{k}"] = replace(state, name=f"{name}_{k}")
        else:
            states[name] = state
    transitions: list[TransitionSpec] = []

    def add(t: TransitionSpec, sources: list[str], dest: str, trigger: str | None = None) -> None:
        if sources:
            transitions.append(
                replace(t, index=len(transitions), trigger=trigger or t.trigger, sources=tuple(sources), dest=dest)
            )

    for t in plan.transitions:
        if t.trigger == "step":
            for k, step in enumerate(steps, 1):
                add(t, [f"running_{k - 1}"], f"running_{k}", f"step:{step}")
            continue
        if t.dest in NUMBERED:
            for k in range(n + 1):
                sources = [f"{s}_{k}" if s in NUMBERED else s for s in t.sources if s in NUMBERED or k == 0]
                add(t, sources, f"{t.dest}_{k}")
            continue
        if t.trigger == "finish":  # only after the last step
            add(t, [f"{s}_{n}" for s in t.sources if s in NUMBERED], t.dest)
            continue
        sources = [f"{s}_{k}" for s in t.sources if s in NUMBERED for k in range(n + 1)]
        add(t, sources + [s for s in t.sources if s not in NUMBERED], t.dest)
    step_triggers = tuple(f"step:{s}" for s in steps)
    invariants = [_unrolled(i, n, step_triggers) for i in plan.invariants]
    invariants.append(
        InvariantSpec(
            "steps_by_the_runner",
            "every step of the recipe is recorded only by the runner holding the plan",
            "fenced",
            triggers=step_triggers,
        )
    )
    return replace(
        plan,
        name=f"plan@{recipe}",
        states=states,
        transitions=tuple(transitions),
        invariants=tuple(invariants),
    )


def _unrolled(inv: InvariantSpec, n: int, steps: tuple[str, ...]) -> InvariantSpec:
    triggers = tuple(x for t in inv.triggers for x in (steps if t == "step" else (t,)))
    states = tuple(x for s in inv.states for x in ([f"{s}_{k}" for k in range(n + 1)] if s in NUMBERED else [s]))
    return replace(inv, triggers=triggers, states=states)
