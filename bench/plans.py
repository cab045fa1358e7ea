"""What the plan runner costs per step, and whether that cost stays flat as the plan grows.

A generated recipe of N ``flow.pass`` steps (each passing on the previous step's counter) is
submitted and run on a real SQLite file (WAL, synchronous=FULL); the operation does nothing, so what
is measured is the runner's own work: choosing the next step, resolving references, recording each
step durably. For one run of N steps (:func:`run_plan_steps`):

* wall seconds and steps per second (``bench/peers.py`` compares the 200-step figure with LangGraph);
* CPU seconds (``time.process_time``: fsync waits excluded) per step;
* bytes written per step (the process's ``wchar`` in ``/proc/self/io``: the WAL frames and checkpoints);
* commits of write transactions (``BEGIN IMMEDIATE`` ... ``COMMIT`` on the store's connection, counted
  with ``sqlite3``'s trace callback).

``flow.pass`` is pure (its catalogue entry says so): the runner commits a run of pure steps together,
64 records at most (or 50 ms), so a plan of them takes about one commit per 64 steps, and a crash
replays at most those. The same plan also runs with ``flow.pass`` declared effectful (``pure=False``:
:func:`run_plan_steps`), which is what every step that acts outside the store costs: its ``running``
record committed before it acts, its outcome with the next step's start, one commit per step.

The figures of issue 13 are ratios in one run: CPU per step at 800 steps over 200 steps (``<= 1.2x``),
bytes written per step at 800 over 200 (constant: ``<= 1.1x``), and commits per plan step (the extra
commits of the 600 extra steps, per step: ``<= 1``; about 1/64 for pure steps, and the effectful
plan's, ``1``, beside it). The scaling runs use ``/dev/shm`` when it exists
(fsync is then cheap; CPU and bytes do not depend on it), the steps/s run the system's temporary
directory. ``--root DIR`` runs another checkout's code (e.g. ``--root /work/main`` for the figures
before a change) with this same script.

    python bench/plans.py [--quick] [--json] [--root DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import WriteCommits

SCALE = (200, 800)  # the plan sizes the CPU and bytes ratios compare
RATE_STEPS = 200  # the plan size of the steps/s figure


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


def _written() -> int | None:
    """Bytes this process has passed to write(2) so far (Linux), or None where unknown."""
    try:
        for line in Path("/proc/self/io").read_text().splitlines():
            if line.startswith("wchar:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


class _Effectful:
    """The built-in operations, but ``flow.pass`` declared not pure: committed as an effectful step is."""

    def __init__(self) -> None:
        import dataclasses

        from runner.plans.ops import OPERATIONS
        from runner.service.steps import Operation

        self.operations = OPERATIONS
        real = OPERATIONS.get("flow.pass")
        assert real is not None
        self.flow_pass = Operation(dataclasses.replace(real.spec, pure=False), real.run)

    def get(self, name: str) -> Any:
        return self.flow_pass if name == "flow.pass" else self.operations.get(name)


def run_plan_steps(n: int, directory: str | Path, pure: bool = True) -> dict[str, Any]:
    """Submit and run an ``n``-step plan of instant steps in a fresh store under ``directory``.

    ``pure=False`` runs ``flow.pass`` as if it were effectful: one commit per step, before it runs.

    Returns ``steps``, ``seconds`` (wall, the run only: submit excluded), ``steps_per_second``,
    ``cpu_seconds``, ``bytes_written`` (None off Linux) and ``commits`` of the run. ``directory`` must
    exist; the function makes its own subdirectory there and leaves it behind (the caller owns it)."""
    import anyio

    from runner.definitions.library import Library
    from runner.definitions.recipes import RecipeLibrary
    from runner.plans.keeper import MemoryKeeper
    from runner.plans.ops import OPERATIONS
    from runner.service import Service
    from runner.service.inputs.plans import PlanRunInput, PlanSubmitInput
    from runner.service.plans import Plans
    from runner.sql.store_sqlite import SQLiteStore

    root = Path(tempfile.mkdtemp(prefix=f"plan-{n}-", dir=directory))
    (root / "recipes").mkdir()
    write_recipe(root / "recipes", n)
    store = SQLiteStore(root / "corral.db")
    commits = WriteCommits()
    try:
        service = Service(store, Library(cache_dir=root / "cache"), actor="bench")
        operations = OPERATIONS if pure else _Effectful()
        plans = Plans(service, RecipeLibrary([root / "recipes"]), MemoryKeeper(), operations)
        plans.submit(PlanSubmitInput({"plan": "p", "recipe": "instant", "controller": "bench"}))
        store._conn.set_trace_callback(commits)  # the bench's own counter on the adapter's connection
        written, cpu, wall = _written(), time.process_time(), time.perf_counter()
        final = anyio.run(plans.run, PlanRunInput("p"))
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        after = _written()
        store._conn.set_trace_callback(None)
        assert final.state == "succeeded", final.state
        assert len(final.data["steps"]) == n
    finally:
        store.close()
    return {
        "steps": n,
        "seconds": wall,
        "steps_per_second": n / wall,
        "cpu_seconds": cpu,
        "bytes_written": None if written is None or after is None else after - written,
        "commits": commits.count,
    }


def _median(runs: list[dict[str, Any]], key: str) -> float:
    values = [r[key] for r in runs if r[key] is not None]
    return float(statistics.median(values)) if values else float("nan")


def measure(rounds: int) -> dict[str, Any]:
    """Every figure, from ``rounds`` interleaved rounds of each plan size (medians)."""
    scratch = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    with (
        tempfile.TemporaryDirectory(prefix="corral-bench-plans-", dir=scratch) as fast,
        tempfile.TemporaryDirectory(prefix="corral-bench-plans-") as disk,
    ):
        run_plan_steps(20, fast)  # warm-up: imports, the library cache
        scale: dict[int, list[dict[str, Any]]] = {n: [] for n in SCALE}
        effectful: dict[int, list[dict[str, Any]]] = {n: [] for n in SCALE}
        rate: list[dict[str, Any]] = []
        rate_effectful: list[dict[str, Any]] = []
        for _ in range(rounds):
            for n in SCALE:
                scale[n].append(run_plan_steps(n, fast))
                effectful[n].append(run_plan_steps(n, fast, pure=False))
            rate.append(run_plan_steps(RATE_STEPS, disk))
            rate_effectful.append(run_plan_steps(RATE_STEPS, disk, pure=False))
    small, large = SCALE
    cpu = {n: _median(scale[n], "cpu_seconds") / n for n in SCALE}
    written = {n: _median(scale[n], "bytes_written") / n for n in SCALE}
    commits = {n: _median(scale[n], "commits") for n in SCALE}
    per_step_commits = (commits[large] - commits[small]) / (large - small)
    effectful_commits = {n: _median(effectful[n], "commits") for n in SCALE}
    per_effectful_step = (effectful_commits[large] - effectful_commits[small]) / (large - small)
    steps_per_second = _median(rate, "steps_per_second")
    effectful_per_second = _median(rate_effectful, "steps_per_second")
    cpu_ratio = cpu[large] / cpu[small]
    bytes_ratio = written[large] / written[small]
    where = f"on {scratch or 'the temporary directory'}, median of {rounds}"
    figures = [
        {
            "figure": "plan CPU per step at 800 steps / at 200 steps",
            "value": round(cpu_ratio, 3),
            "unit": "x",
            "target": "<= 1.2x",
            "met": cpu_ratio <= 1.2,
            "detail": f"CPU per step {cpu[small] * 1000:.3f} ms at {small} steps, {cpu[large] * 1000:.3f} ms at "
            f"{large} ({where})",
        },
        {
            "figure": "bytes written per step (800 / 200)",
            "value": round(bytes_ratio, 3),
            "unit": "x",
            "target": "constant (<= 1.1x)",
            "met": bytes_ratio <= 1.1,
            "detail": f"{written[small] / 1024:.2f} KiB per step at {small} steps, {written[large] / 1024:.2f} KiB "
            f"at {large} (write(2) bytes, {where})",
        },
        {
            "figure": "commits per plan step",
            "value": round(per_step_commits, 3),
            "unit": "commits",
            "target": "<= 1 (pure steps: 1 per 64)",
            "met": per_step_commits <= 1.0,
            "detail": f"{commits[small]:.0f} commits for {small} steps, {commits[large]:.0f} for {large}: "
            f"({commits[large]:.0f} - {commits[small]:.0f}) / {large - small} per extra step (the rest: start, "
            "finish); flow.pass is pure, so a run of 64 is one commit and a crash replays at most that run",
        },
        {
            "figure": "commits per effectful plan step",
            "value": round(per_effectful_step, 3),
            "unit": "commits",
            "target": "1",
            "met": per_effectful_step <= 1.0,
            "detail": f"the same plans with flow.pass declared not pure: {effectful_commits[small]:.0f} commits for "
            f"{small} steps, {effectful_commits[large]:.0f} for {large} (a step's outcome and the next one's start "
            "in one commit, before it acts)",
        },
        {
            "figure": "200-step plan, steps/s",
            "value": round(steps_per_second, 1),
            "unit": "steps/s",
            "target": "value only (bench/peers.py compares it with LangGraph)",
            "met": True,
            "detail": f"{RATE_STEPS} steps in {_median(rate, 'seconds') * 1000:.1f} ms wall, "
            f"{_median(rate, 'cpu_seconds') * 1000:.1f} ms CPU, synchronous=FULL on the temporary directory, "
            f"median of {rounds}; pure steps, committed 64 at a time",
        },
        {
            "figure": "200-step plan of effectful steps, steps/s",
            "value": round(effectful_per_second, 1),
            "unit": "steps/s",
            "target": "value only (one fsync per step: the disk's rate)",
            "met": True,
            "detail": f"{RATE_STEPS} steps in {_median(rate_effectful, 'seconds') * 1000:.1f} ms wall, "
            f"{_median(rate_effectful, 'cpu_seconds') * 1000:.1f} ms CPU, flow.pass declared not pure, "
            f"synchronous=FULL on the temporary directory, median of {rounds}",
        },
    ]
    runs = {"scale": scale, "rate": rate, "effectful": effectful, "rate_effectful": rate_effectful}
    return {"figures": figures, "runs": runs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default: 3; --quick: 1)")
    parser.add_argument("--quick", action="store_true", help="one round: a few seconds")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--root", type=Path, help="run the code of another checkout (e.g. main, for a before figure)")
    args = parser.parse_args()
    if args.root is not None:
        sys.path.insert(0, str(args.root.absolute()))
    import runner

    result = measure(1 if args.quick else args.rounds)
    result["code"] = str(Path(runner.__file__).parent.parent)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"corral plan runner: instant steps (flow.pass), code from {result['code']}, Python {sys.version.split()[0]}")
    for figure in result["figures"]:
        verdict = "met" if figure["met"] else "MISSED"
        print(f"  {figure['figure']:<48} {figure['value']:>9} {figure['unit']:<8} {figure['target']:<24} {verdict}")
        print(f"      {figure['detail']}")


if __name__ == "__main__":
    main()
