"""What the plan runner costs per step: a 200-step plan of instant steps, against its bare transitions.

Each step of a plan is two durable transitions of the plan machine (``step`` running, then ``step``
succeeded) around the operation; with ``flow.pass`` the operation does nothing, so what is left is
the runner's own work: resolving references, choosing the next step, recording outputs. Measured in
one run on real SQLite files (WAL, synchronous=FULL):

* the plan: submit + run of a generated recipe with N ``flow.pass`` steps, steps per second;
* the bare transitions: the same 2 x N ``step`` transitions fired straight through the engine;
* the runner's overhead per step = (plan time - bare time) / N, and the ratio plan / bare.

Figures are to be read as ratios from one run: the machines are noisy.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from runner import lockstatus
from runner.definitions.library import Library
from runner.definitions.recipes import RecipeLibrary
from runner.engine import Request
from runner.plans import plan_instance_id
from runner.plans.keeper import MemoryKeeper
from runner.plans.ops import OPERATIONS
from runner.service import Service
from runner.service.plans import PlanRunInput, Plans, PlanSubmitInput
from runner.store.sqlite import SQLiteStore


def write_recipe(directory: Path, steps: int) -> None:
    lines = [
        "# yaml-language-server: $schema=../schemas/recipe.schema.json",
        "recipe: instant",
        "version: 1",
        "description: Instant steps, each passing on the previous step's counter.",
        "steps:",
        "  - id: s0",
        "    do: flow.pass",
        "    with: {values: {n: 0}}",
    ]
    for i in range(1, steps):
        lines += [f"  - id: s{i}", "    do: flow.pass", f"    with: {{values: {{n: '${{steps.s{i - 1}.n}}'}}}}"]
    (directory / "instant.yaml").write_text("\n".join(lines) + "\n")


def run_plan(root: Path, steps: int, label: str) -> float:
    store = SQLiteStore(root / f"{label}.db")
    service = Service(store, Library(cache_dir=root / "cache"), actor="bench")
    plans = Plans(service, RecipeLibrary([root / "recipes"]), MemoryKeeper(), OPERATIONS)
    plans.submit(PlanSubmitInput({"plan": label, "recipe": "instant", "controller": "bench"}))
    started = time.perf_counter()
    final = anyio.run(plans.run, PlanRunInput(label))
    elapsed = time.perf_counter() - started
    assert final.state == "succeeded", final.state
    assert len(final.data["steps"]) == steps
    store.close()
    return elapsed


def run_bare(root: Path, steps: int, label: str) -> float:
    """The same transitions (start, 2 x N step, finish) fired directly, with the same records."""
    store = SQLiteStore(root / f"{label}.db")
    library = Library(cache_dir=root / "cache")
    service = Service(store, library, actor="bench")
    plans = Plans(service, RecipeLibrary([root / "recipes"]), MemoryKeeper(), OPERATIONS)
    plans.submit(PlanSubmitInput({"plan": label, "recipe": "instant", "controller": "bench"}))
    spec = library.builtin("plan")
    me = lockstatus.current()
    engine = service.engine

    def fire(trigger: str, **params: Any) -> None:
        engine.fire(spec, Request(plan_instance_id(label), trigger, params={"runner": me, **params}, actor="bench"))

    started = time.perf_counter()
    fire("start")
    for i in range(steps):
        fire("step", step_id=f"s{i}", record={"state": "running", "attempt": 1, "do": "flow.pass"})
        fire(
            "step",
            step_id=f"s{i}",
            record={"state": "succeeded", "attempt": 1, "do": "flow.pass", "outputs": {"n": 0}, "seconds": 0.0},
        )
    fire("finish")
    elapsed = time.perf_counter() - started
    store.close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200, help="steps in the plan (default: 200)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default: 3)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="corral-bench-plans-") as tmp:
        root = Path(tmp)
        (root / "recipes").mkdir()
        write_recipe(root / "recipes", args.steps)
        run_plan(root, args.steps, "warmup-plan")
        run_bare(root, args.steps, "warmup-bare")
        plan_times, bare_times = [], []
        for round_ in range(args.rounds):
            plan_times.append(run_plan(root, args.steps, f"plan-{round_}"))
            bare_times.append(run_bare(root, args.steps, f"bare-{round_}"))
    plan_s, bare_s = statistics.median(plan_times), statistics.median(bare_times)
    figures = {
        "steps": args.steps,
        "rounds": args.rounds,
        "plan_seconds": round(plan_s, 4),
        "bare_seconds": round(bare_s, 4),
        "steps_per_second": round(args.steps / plan_s, 1),
        "bare_transitions_per_second": round((2 * args.steps + 2) / bare_s, 1),
        "overhead_ms_per_step": round((plan_s - bare_s) / args.steps * 1000, 3),
        "plan_over_bare": round(plan_s / bare_s, 2),
    }
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    print(
        f"corral plan runner: {args.steps} instant steps (flow.pass), median of {args.rounds} interleaved rounds, "
        f"Python {sys.version.split()[0]}"
    )
    print(f"  plan (submit excluded)      {plan_s * 1000:9.1f} ms   {figures['steps_per_second']:8.1f} steps/s")
    print(
        f"  bare step transitions       {bare_s * 1000:9.1f} ms   "
        f"{figures['bare_transitions_per_second']:8.1f} transitions/s (2 per step)"
    )
    print(f"  runner overhead per step    {figures['overhead_ms_per_step']:9.3f} ms")
    print(f"  plan / bare transitions     {figures['plan_over_bare']:9.2f}x")


if __name__ == "__main__":
    main()
