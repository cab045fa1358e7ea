"""What ``corral check`` asks of the explorer: the limits it accepts, and each result as a document.

A result's document (:func:`result_document`) is what ``--json`` prints and what ``--trace-out``
writes for one violation (:func:`trace_document`); ``corral draw --trace`` reads the latter back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from runner.definitions.model import MachineSpec
from runner.errors import InputError
from runner.proof.explorer import CURRENT, FAULTS, STALE, Explorer, Result, Step, Violation, World

MAX_ACTORS = 6
MAX_DEPTH = 64
MAX_BUDGET = 5_000_000


@dataclass(frozen=True)
class CheckOptions:
    """How hard to look: actors contending, the faults injected, and where to stop."""

    actors: int = 3
    depth: int = 40
    faults: tuple[str, ...] = FAULTS
    budget: int = 200_000

    def __post_init__(self) -> None:
        if not 1 <= self.actors <= MAX_ACTORS:
            raise InputError(
                "--actors", f"{self.actors} actors: give 1 to {MAX_ACTORS} (more explodes)", code="check_limit"
            )
        if not 1 <= self.depth <= MAX_DEPTH:
            raise InputError(
                "--depth", f"depth {self.depth}: give 1 to {MAX_DEPTH} (more explodes)", code="check_limit"
            )
        if not 1 <= self.budget <= MAX_BUDGET:
            raise InputError("--budget", f"budget {self.budget}: give 1 to {MAX_BUDGET} worlds", code="check_limit")
        unknown = [f for f in self.faults if f not in FAULTS]
        if unknown:
            raise InputError(
                "--faults",
                f"no fault named {', '.join(map(repr, unknown))} (known: {', '.join(FAULTS)})",
                code="fault_unknown",
            )

    @classmethod
    def parse_faults(cls, raw: str | None) -> tuple[str, ...]:
        """``crash,expiry,pause`` (or ``none``) as a tuple; None: every fault."""
        if raw is None:
            return FAULTS
        if raw.strip() in ("", "none"):
            return ()
        return tuple(dict.fromkeys(part.strip() for part in raw.split(",")))


def check_machine(spec: MachineSpec, options: CheckOptions) -> Result:
    """Explore ``spec`` under ``options``: every invariant, declared and built in."""
    return Explorer(spec, options.actors, options.faults, options.budget, options.depth).run()


def result_document(result: Result, spec: MachineSpec) -> dict[str, Any]:
    return {
        "machine": result.machine,
        "path": spec.path,
        "ok": not result.violations and result.stopped is None,
        "actors": result.actors,
        "instances": result.instances,
        "faults": list(result.faults),
        "states": result.states,
        "transitions": result.transitions,
        "depth": result.depth,
        "seconds": round(result.seconds, 3),
        "stopped": result.stopped,
        "invariants": [
            {"name": i.name, "kind": i.kind, "builtin": i.builtin, "description": i.description}
            for i in result.invariants
        ],
        "violations": [trace_document(result, spec, v) for v in result.violations],
    }


def trace_document(result: Result, spec: MachineSpec, violation: Violation) -> dict[str, Any]:
    """One counterexample: the invariant and the numbered steps that break it, the data that matters."""
    steps = []
    generation = 0
    for n, (step, world) in enumerate(violation.path, 1):
        if step.lease == "issue":
            generation += 1
        steps.append(_step_document(n, step, world, generation))
    return {
        "format": "corral-trace-v1",
        "machine": result.machine,
        "invariant": violation.invariant.name,
        "kind": violation.invariant.kind,
        "description": violation.invariant.description,
        "actors": result.actors,
        "faults": list(result.faults),
        "steps": steps,
    }


def _step_document(n: int, step: Step, world: World, generation: int) -> dict[str, Any]:
    live, granted, insts, actors = world
    who = f"A{step.actor + 1}" if step.actor is not None else "clock"
    out: dict[str, Any] = {"n": n, "actor": who, "action": step.action}
    if step.trigger:
        out.update(trigger=step.trigger, instance=step.instance + 1, source=step.source, dest=step.dest)
        out["guards"] = [{"name": name, "outcome": outcome} for name, outcome in step.guards]
    if step.outcome:
        out["outcome"] = step.outcome
    if step.fired:
        out["fired"] = True
    out["caller_current"] = step.current
    names = {CURRENT: "current", STALE: "stale"}
    out["after"] = {
        "states": [s[0] for s in insts],
        "lease": ("live" if live else "expired") if granted else "none",
        "generation": generation,
        "holders": {f"A{k + 1}": names.get(c, "none") for k, (c, _, _) in enumerate(actors)},
        "unexpired": [f"A{k + 1}" for k, (_, u, _) in enumerate(actors) if u],
        "intents": [f"A{k + 1}" for k, (_, _, i) in enumerate(actors) if i is not None],
    }
    return out


def render_trace(doc: dict[str, Any]) -> list[str]:
    """The numbered lines of one counterexample, for a terminal."""
    lines = [f"  VIOLATED {doc['invariant']} ({doc['kind']}): {doc['description']}"]
    for s in doc["steps"]:
        after = s["after"]
        if "trigger" in s:
            guards = ", ".join(f"{g['name']}={g['outcome']}" for g in s["guards"]) or "no guards"
            move = f"{s['action']} {s['trigger']}#{s['instance']} {s['source']} -> {s['dest']}"
            if "outcome" in s:
                move += f" [{s['outcome']}]"
            move += f" ({guards})"
        else:
            move = s["action"]
        holders = " ".join(f"{k}:{v}" for k, v in after["holders"].items())
        unexpired = ",".join(after["unexpired"]) or "none"
        lines.append(
            f"    {s['n']:>2}. {s['actor']:<5} {move}  => {'/'.join(after['states'])}, lease {after['lease']} "
            f"gen {after['generation']}, {holders}, unexpired {unexpired}"
        )
    return lines
