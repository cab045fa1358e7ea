"""corral against its peers, side by side in one run: LangGraph's SQLite checkpointer, python-statemachine, transitions.

Needs the ``bench`` extra (``pip install -e '.[bench]'``, which ``make bench`` installs): LangGraph with
``langgraph-checkpoint-sqlite``, and ``python-statemachine``. Without it this script says so and
exits 0 with its figures marked skipped; ``transitions`` is one of corral's own dependencies.

**1. A 200-step plan** (``--steps``), steps per second, on real SQLite files in one temporary
directory (``--dir``; the filesystem decides the fsync cost), in interleaved rounds:

* corral: a recipe of N ``flow.pass`` steps, each passing on the previous step's value, submitted and
  run by the plan runner on a store with its own pragmas (WAL, ``synchronous=FULL``): every step's
  outcome is durable before the next step starts. Run by ``run_plan_steps`` from ``bench/plans.py``
  when that exists, otherwise as ``bench/plans.py`` runs a plan (submit excluded from the time).
* LangGraph: a linear ``StateGraph`` of N nodes, each adding 1 to a counter (trivial work, as
  ``flow.pass``), compiled with ``SqliteSaver`` on a file of its own (WAL, ``synchronous=FULL`` set
  explicitly, SQLite's default) and invoked with ``durability="sync"``: each super-step's checkpoint
  is written before the next step starts.

Figure: corral steps/s / LangGraph steps/s, target **>= 1.2x** (issue 13). Both make each step durable
with one fsynced commit at least, so on a disk whose fsync is slow the disk decides; the same pair is
also run on tmpfs (``/dev/shm``, where fsync is all but free) and shown in the detail: there the CPU
per step decides.

**2. A lease machine** (absent -> active, ``renew`` active -> active, release), per trigger:

* in memory: ``transitions.Machine`` and python-statemachine firing ``renew`` on a model bound once;
  beside them corral's decision without a store, ``TransitionTable.fire('renew')`` with the fence guard
  (the table is a ``transitions.Machine``; corral has no in-memory instances, so this is the nearest).
* durable: each peer's trigger followed by the same hand-written SQLite compare-and-set that
  ``bench/transition.py`` calls the bare store (``BEGIN IMMEDIATE``, ``UPDATE … WHERE version = ?``,
  ``INSERT`` an event, ``COMMIT``): the peers have no store, so this is what they would need at the
  least; against corral's ``Service.renew`` (fence guard, update, data check, CAS and event, view).
  On ``--synchronous`` (default ``full``, the store's) files in the same directory.

Ratios are what to read: absolute figures move with the machine and its load.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

FIGURE_PLAN = (
    "200-step plan, steps/s, vs LangGraph with its SQLite checkpointer (sync, durable per step) in the same run"
)
TARGET_PLAN = 1.2
TMPFS = Path("/dev/shm")
BENCH_EXTRA = ("langgraph", "langgraph.checkpoint.sqlite", "statemachine")


def missing_extra() -> list[str]:
    """The bench extra's modules this interpreter cannot import."""
    missing = []
    for name in BENCH_EXTRA:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ModuleNotFoundError, ValueError):  # a parent package is missing, or blocked in sys.modules
            found = False
        if not found:
            missing.append(name)
    return missing


# --- 1. the plan ----------------------------------------------------------------------------------


def corral_plan(steps: int, directory: Path) -> dict[str, Any]:
    """One N-step corral plan in a fresh store under ``directory``: ``steps``, ``seconds``, ``steps_per_second``."""
    import plans  # bench/plans.py, beside this script

    run_plan_steps: Callable[[int, Path], dict[str, Any]] | None = getattr(plans, "run_plan_steps", None)
    if run_plan_steps is not None:
        return run_plan_steps(steps, directory)
    # Before bench/plans.py had run_plan_steps: the same recipe and run as its own benchmark.
    root = Path(tempfile.mkdtemp(prefix=f"plan-{steps}-", dir=directory))
    (root / "recipes").mkdir()
    plans.write_recipe(root / "recipes", steps)
    cpu = time.process_time()
    seconds = plans.run_plan(root, steps, "peers")
    return {
        "steps": steps,
        "seconds": seconds,
        "steps_per_second": steps / seconds,
        "cpu_seconds": time.process_time() - cpu,
    }


def langgraph_plan(steps: int, directory: Path) -> dict[str, Any]:
    """One N-node linear LangGraph run with ``SqliteSaver`` and ``durability="sync"``."""
    from typing import TypedDict

    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import END, START, StateGraph

    class Counter(TypedDict):
        n: int

    def node(state: Counter) -> dict[str, int]:
        return {"n": state["n"] + 1}

    graph = StateGraph(Counter)
    names = [f"s{i}" for i in range(steps)]
    for name in names:
        graph.add_node(name, node)
    graph.add_edge(START, names[0])
    for before, after in itertools.pairwise(names):
        graph.add_edge(before, after)
    graph.add_edge(names[-1], END)
    path = Path(tempfile.mkdtemp(prefix=f"langgraph-{steps}-", dir=directory)) / "checkpoints.sqlite"
    conn = sqlite3.connect(str(path), check_same_thread=False)
    try:
        saver = SqliteSaver(conn)
        saver.setup()  # WAL, the tables
        conn.execute("PRAGMA synchronous = FULL")  # SQLite's default, stated: every commit fsynced
        app = graph.compile(checkpointer=saver)
        config: Any = {"configurable": {"thread_id": "bench"}, "recursion_limit": steps + 10}
        cpu = time.process_time()
        started = time.perf_counter()
        final = app.invoke({"n": 0}, config, durability="sync")
        seconds = time.perf_counter() - started
        cpu_seconds = time.process_time() - cpu
        if final["n"] != steps:
            raise SystemExit(f"LangGraph ran {final['n']} of {steps} nodes: the benchmark is broken")
        (checkpoints,) = conn.execute("SELECT count(*) FROM checkpoints WHERE thread_id = 'bench'").fetchone()
    finally:
        conn.close()
    return {
        "steps": steps,
        "seconds": seconds,
        "steps_per_second": steps / seconds,
        "cpu_seconds": cpu_seconds,
        "checkpoints": checkpoints,
    }


def compare_plans(steps: int, rounds: int, directory: Path) -> dict[str, Any]:
    warm = max(2, steps // 20)
    corral_plan(warm, directory)
    langgraph_plan(warm, directory)
    runs: dict[str, list[dict[str, Any]]] = {"corral": [], "langgraph": []}
    for index in range(rounds):
        order = [("corral", corral_plan), ("langgraph", langgraph_plan)]
        for name, run in order if index % 2 == 0 else order[::-1]:
            runs[name].append(run(steps, directory))
    corral_rate = statistics.median(r["steps_per_second"] for r in runs["corral"])
    langgraph_rate = statistics.median(r["steps_per_second"] for r in runs["langgraph"])
    return {
        "steps": steps,
        "rounds": rounds,
        "corral_steps_per_second": round(corral_rate, 1),
        "langgraph_steps_per_second": round(langgraph_rate, 1),
        "corral_over_langgraph": round(corral_rate / langgraph_rate, 3),
        "corral_cpu_ms_per_step": round(statistics.median(r["cpu_seconds"] for r in runs["corral"]) / steps * 1e3, 3),
        "langgraph_cpu_ms_per_step": round(
            statistics.median(r["cpu_seconds"] for r in runs["langgraph"]) / steps * 1e3, 3
        ),
        "corral_commits": runs["corral"][-1].get("commits"),
        "langgraph_checkpoints": runs["langgraph"][-1]["checkpoints"],
        "runs": runs,
    }


# --- 2. the lease machine -------------------------------------------------------------------------


def transitions_trigger() -> Callable[[], Any]:
    """The lease machine's self-transition on a bound ``transitions`` model: bench/transition.py's (c)."""
    import transition  # bench/transition.py, beside this script

    return transition.bare_machine()


def statemachine_trigger() -> Callable[[], Any]:
    from statemachine import State, StateMachine

    class Lease(StateMachine):  # type: ignore[misc]  # untyped library
        absent = State(initial=True)
        active = State()
        released = State(final=True)
        acquire = absent.to(active)
        renew = active.to.itself()
        release = active.to(released)

    lease = Lease()
    lease.acquire()
    trigger: Callable[[], Any] = lease.renew
    return trigger


def decision(runner: Any) -> Callable[[], None]:
    """corral's choice of ``renew`` with its fence guard on a lease read once: the table, no store."""
    from datetime import UTC, datetime

    from runner import fence
    from runner.context import Context

    spec = runner.library.builtin("controller")
    table = runner.library.table(spec)
    credential = runner.renew_input.credential
    lease = runner.check()
    params = {"controller_id": credential.controller_id, "lease_id": credential.lease_id}
    params["generation"] = credential.generation
    assert lease.id == fence.instance_id(credential.controller_id)

    def step() -> None:
        ctx = Context(
            instance=lease,
            trigger="renew",
            params=params,
            secrets={"token": credential.token},
            observations={},
            now=datetime.now(UTC),
            view=None,  # type: ignore[arg-type]  # the fence guard reads the lease it is given
            actor="bench",
            data=dict(lease.data),
        )
        if table.fire("renew", lease.state, ctx).chosen is None:
            raise SystemExit("the fence guard refused the benchmark's own credential")

    return step


def durable(trigger: Callable[[], Any], cas: Callable[[], None]) -> Callable[[], None]:
    def step() -> None:
        trigger()
        cas()

    return step


def rate(step: Callable[[], Any], seconds: float) -> tuple[int, float]:
    """Run ``step`` for about ``seconds`` in batches; (ops, elapsed)."""
    ops, batch = 0, 1
    started = time.perf_counter()
    while True:
        for _ in range(batch):
            step()
        ops += batch
        elapsed = time.perf_counter() - started
        if elapsed >= seconds:
            return ops, elapsed
        batch = min(batch * 2, 4096)


def compare_leases(directory: Path, synchronous: str, seconds: float, rounds: int, peers: bool) -> dict[str, Any]:
    import transition  # bench/transition.py: the bare CAS and the runner's renew, shared

    runner = transition.Runner.open(directory, synchronous)
    data, payload = runner.encoded_row()
    table_fire = decision(runner)
    memory: dict[str, Callable[[], Any]] = {"transitions": transitions_trigger()}
    if peers:
        memory["python-statemachine"] = statemachine_trigger()
    memory["corral TransitionTable.fire (fence guard, no store)"] = table_fire
    durables: dict[str, Callable[[], Any]] = {}
    for name, trigger in memory.items():
        if name.startswith("corral"):
            continue
        cas = transition.bare_store(directory / f"cas-{len(durables)}.db", data, payload, synchronous)
        durables[f"{name} + bare SQLite CAS"] = durable(trigger, cas)
    durables["corral Service.renew"] = runner.renew()
    benches = {("memory", k): v for k, v in memory.items()} | {("durable", k): v for k, v in durables.items()}
    totals = {key: [0, 0.0] for key in benches}
    for step in benches.values():
        rate(step, min(0.2, seconds / 4))
    for index in range(rounds):
        keys = list(benches) if index % 2 == 0 else list(benches)[::-1]
        for key in keys:
            ops, elapsed = rate(benches[key], seconds / rounds)
            totals[key][0] += ops
            totals[key][1] += elapsed
    runner.check()
    runner.store.close()
    out: dict[str, Any] = {"synchronous": synchronous, "memory": {}, "durable": {}}
    for (kind, name), (ops, elapsed) in totals.items():
        out[kind][name] = {"ops_per_s": round(ops / elapsed, 1), "us_per_op": round(elapsed / ops * 1e6, 2)}
    return out


# --- report ---------------------------------------------------------------------------------------


def skipped_figure(why: str) -> dict[str, Any]:
    return {
        "figure": FIGURE_PLAN,
        "value": None,
        "unit": "x",
        "target": f">= {TARGET_PLAN:g}x",
        "met": False,
        "skipped": True,
        "detail": f"skipped: {why}",
    }


def plan_figure(plan: dict[str, Any], directory: Path, tmpfs: dict[str, Any] | None) -> dict[str, Any]:
    value = plan["corral_over_langgraph"]
    on_tmpfs = ""
    if tmpfs is not None:
        on_tmpfs = (
            f"; the same on tmpfs ({TMPFS}, fsync all but free, so CPU decides): corral "
            f"{tmpfs['corral_steps_per_second']:.1f} vs LangGraph {tmpfs['langgraph_steps_per_second']:.1f} steps/s "
            f"= {tmpfs['corral_over_langgraph']:.2f}x"
        )
    return {
        "figure": FIGURE_PLAN,
        "value": value,
        "unit": "x",
        "target": f">= {TARGET_PLAN:g}x",
        "met": value >= TARGET_PLAN,
        "detail": (
            f"corral {plan['corral_steps_per_second']:.1f} steps/s ({plan['corral_cpu_ms_per_step']:.2f} ms CPU/step"
            f"{', ' + str(plan['corral_commits']) + ' commits' if plan['corral_commits'] is not None else ''}) vs "
            f"LangGraph SqliteSaver durability=sync {plan['langgraph_steps_per_second']:.1f} steps/s "
            f"({plan['langgraph_cpu_ms_per_step']:.2f} ms CPU/step, {plan['langgraph_checkpoints']} checkpoints); "
            f"{plan['steps']} steps, median of {plan['rounds']} interleaved rounds, WAL + synchronous=FULL "
            f"in {directory}{on_tmpfs}"
        ),
    }


def render(context: dict[str, Any], plan: dict[str, Any] | None, leases: dict[str, Any] | None) -> str:
    lines = [f"corral {context['corral']} against its peers: Python {context['python']}, SQLite {context['sqlite']}"]
    lines += [f"  {note}" for note in context["notes"]]
    if plan is not None:
        lines += [
            "",
            f"  1. a {plan['steps']}-step plan, median of {plan['rounds']} interleaved rounds (WAL, synchronous=FULL)",
            f"     {'':44} {'steps/s':>9} {'CPU ms/step':>12}",
            f"     {'corral plan runner':44} {plan['corral_steps_per_second']:9.1f} "
            f"{plan['corral_cpu_ms_per_step']:12.2f}",
            f"     {'LangGraph + SqliteSaver, durability=sync':44} {plan['langgraph_steps_per_second']:9.1f} "
            f"{plan['langgraph_cpu_ms_per_step']:12.2f}",
            f"     corral / LangGraph: {plan['corral_over_langgraph']:.2f}x "
            f"(target >= {TARGET_PLAN:g}x: {'met' if plan['corral_over_langgraph'] >= TARGET_PLAN else 'NOT met'})",
        ]
        if "tmpfs" in plan:
            shm = plan["tmpfs"]
            lines.append(
                f"     on tmpfs ({TMPFS}, fsync all but free): corral {shm['corral_steps_per_second']:.1f}, "
                f"LangGraph {shm['langgraph_steps_per_second']:.1f} steps/s = {shm['corral_over_langgraph']:.2f}x"
            )
    else:
        lines += ["", "  1. the plan against LangGraph: skipped (LangGraph is not installed)"]
    if leases is not None:
        lines += ["", f"  2. a lease machine's renew (durable: WAL, synchronous={leases['synchronous'].upper()})"]
        for kind in ("memory", "durable"):
            lines.append(f"     {'in memory' if kind == 'memory' else 'durable'}:")
            for name, row in leases[kind].items():
                lines.append(f"       {name:50} {row['ops_per_s']:11,.0f}/s {row['us_per_op']:10.1f} µs")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=200, help="steps in the plan (default: 200)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default: 3)")
    parser.add_argument("--seconds", type=float, default=2.0, help="measured time per lease benchmark (default: 2)")
    parser.add_argument("--synchronous", choices=["off", "full"], default="full", help="the lease machine's files")
    parser.add_argument("--dir", type=Path, help="where the SQLite files go (default: a new temp directory)")
    parser.add_argument("--quick", action="store_true", help="a run of a few seconds")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.seconds = 1, 0.3
    if args.steps < 2 or args.rounds < 1 or args.seconds <= 0:
        parser.error("--steps must be >= 2, --rounds >= 1 and --seconds > 0")
    missing = missing_extra()
    notes = []
    if missing:
        notes.append(
            f"skipped the peers that are not installed ({', '.join(missing)}): install the bench extra with "
            "`pip install -e '.[bench]'` (or run `make bench`)"
        )
    context = {
        "corral": _version(),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "quick": args.quick,
        "missing": missing,
        "notes": notes,
    }
    plan = leases = None
    with tempfile.TemporaryDirectory(prefix="corral-bench-peers-", dir=args.dir) as tmp:
        directory = Path(tmp)
        if not {"langgraph", "langgraph.checkpoint.sqlite"} & set(missing):
            plan = compare_plans(args.steps, args.rounds, directory)
            tmpfs = None
            if TMPFS.is_dir():
                with tempfile.TemporaryDirectory(prefix="corral-bench-peers-", dir=TMPFS) as shm:
                    tmpfs = compare_plans(args.steps, args.rounds, Path(shm))
                plan["tmpfs"] = {k: v for k, v in tmpfs.items() if k != "runs"}
            figure = plan_figure(plan, args.dir or Path(tempfile.gettempdir()), tmpfs)
        else:
            figure = skipped_figure("LangGraph (the bench extra) is not installed: `pip install -e '.[bench]'`")
        (directory / "leases").mkdir()
        leases = compare_leases(
            directory / "leases", args.synchronous, args.seconds, max(2, args.rounds), "statemachine" not in missing
        )
    if args.json:
        if plan is not None:
            plan = {k: v for k, v in plan.items() if k != "runs"} | {"runs": plan["runs"]}
        print(json.dumps({"context": context, "plan": plan, "lease_machine": leases, "figures": [figure]}, indent=2))
    else:
        print(render(context, plan, leases))
    return 0


def _version() -> str:
    from runner._version import __version__

    return __version__


if __name__ == "__main__":
    sys.exit(main())
