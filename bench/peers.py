"""corral against its peers, side by side in one run: LangGraph's SQLite checkpointers, DBOS, a bare loop.

Needs the ``bench`` extra (``pip install -e '.[bench]'``, which ``make bench`` installs): LangGraph with
``langgraph-checkpoint-sqlite`` and ``aiosqlite``, DBOS, and ``python-statemachine``. Without it this
script says so and exits 0 with those figures marked skipped (``bench/summary.py``, and so ``make
bench``, fails on a skipped figure); ``transitions`` is one of corral's own dependencies.

**1. A 200-step durable plan** (``--steps``), steps per second, on real SQLite files in one temporary
directory (``--dir``; the filesystem decides the fsync cost), every one ``synchronous=FULL``, in
interleaved rounds after a warm-up:

* corral: a recipe of N ``flow.pass`` steps, each passing on the previous step's value, submitted and
  run by the plan runner on a store with its own pragmas (WAL, ``synchronous=FULL``). ``flow.pass`` is
  pure (no effect outside the plan's record, outputs from its arguments), so the runner commits a run
  of up to 64 of them in one transaction (or 50 ms' worth) instead of one commit per step: a crash
  replays at most those steps, which changes nothing; any step that acts outside the store still
  runs only after everything before it is committed. Run by ``run_plan_steps`` from
  ``bench/plans.py`` (submit excluded from the time).
* corral, effectful: the same plan with ``flow.pass`` declared not pure, what a step that acts outside
  the store costs: its ``running`` record committed before it acts (with the last one's outcome), one
  commit per step. Shown for comparison, no target.
* LangGraph, sync: a linear ``StateGraph`` of N nodes, each adding 1 to a counter (trivial work, as
  ``flow.pass``), compiled with ``SqliteSaver`` on a file of its own (WAL, ``synchronous=FULL`` set
  explicitly, SQLite's default) and invoked with ``durability="sync"``: each super-step's checkpoint
  is written before the next step starts.
* LangGraph, async: the same graph with ``AsyncSqliteSaver`` (``langgraph.checkpoint.sqlite.aio``, on
  aiosqlite), ``ainvoke(..., durability="sync")`` under ``asyncio.run``.
* DBOS: a ``@DBOS.workflow()`` calling N ``@DBOS.step()`` functions, each adding 1, run once; DBOS
  checkpoints every step's output in its system database before the next. The system database is a
  SQLite file given as ``system_database_engine``, an engine whose connections set WAL and
  ``synchronous=FULL`` (DBOS's own SQLite engine keeps the rollback journal) besides what DBOS's sets.
* the floor: a hand-written loop, one ``BEGIN IMMEDIATE; UPDATE; INSERT event; COMMIT`` per step on a
  WAL ``synchronous=FULL`` file: what one durable commit per step costs on this disk, at the least.

Figures (issue 28): corral steps/s over each peer's, targets **>= 2x** LangGraph sync, LangGraph async
and DBOS, and **>= 0.9x** the bare floor. The same plans also run on tmpfs (``/dev/shm``, where fsync
is all but free; ``--no-tmpfs`` skips it), shown beside: there the CPU per step decides.

**Fsyncs per step**: each peer runs again in a child process under ``strace -f -c -e
trace=fsync,fdatasync``, once with N steps and once with N/2; (calls at N - calls at N/2) / (N/2) is
its fsyncs per step, set-up and shutdown cancelling out. Where strace is missing or ptrace is not
permitted the figures say "fsyncs: unavailable" and why.

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
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FIGURE_PLAN = "200-step plan"  # "200-step plan: corral / PEER": short enough for the summary's table
TARGET_PEER = 2.0  # corral / LangGraph (sync, async), corral / DBOS: issue 28
TARGET_FLOOR = 0.9  # corral / the bare one-commit-per-step loop: issue 28
TMPFS = Path("/dev/shm")
STRACE = "/usr/bin/strace"
BENCH_EXTRA = ("langgraph", "langgraph.checkpoint.sqlite", "aiosqlite", "dbos", "statemachine")


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


def _fresh(directory: Path, prefix: str, steps: int) -> Path:
    return Path(tempfile.mkdtemp(prefix=f"{prefix}-{steps}-", dir=directory))


def _timed(steps: int, run: Callable[[], Any]) -> dict[str, Any]:
    cpu = time.process_time()
    started = time.perf_counter()
    result = run()
    seconds = time.perf_counter() - started
    return {
        "steps": steps,
        "seconds": seconds,
        "steps_per_second": steps / seconds,
        "cpu_seconds": time.process_time() - cpu,
        "result": result,
    }


def corral_plan(steps: int, directory: Path) -> dict[str, Any]:
    """One N-step corral plan in a fresh store under ``directory``: ``steps``, ``seconds``, ``steps_per_second``."""
    import plans  # bench/plans.py, beside this script

    result: dict[str, Any] = plans.run_plan_steps(steps, directory)
    return result


def corral_effectful_plan(steps: int, directory: Path) -> dict[str, Any]:
    """The same plan with ``flow.pass`` declared not pure: one commit per step, before it runs."""
    import plans  # bench/plans.py, beside this script

    result: dict[str, Any] = plans.run_plan_steps(steps, directory, pure=False)
    return result


def _linear_graph(steps: int) -> Any:
    """A linear ``StateGraph`` of N nodes, each adding 1 to a counter (trivial work, as ``flow.pass``)."""
    from typing import TypedDict

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
    return graph


def _graph_config(steps: int) -> Any:
    return {"configurable": {"thread_id": "bench"}, "recursion_limit": steps + 10}


def _checked(name: str, ran: int, steps: int) -> None:
    if ran != steps:
        raise SystemExit(f"{name} ran {ran} of {steps} steps: the benchmark is broken")


def langgraph_sync_plan(steps: int, directory: Path) -> dict[str, Any]:
    """One N-node linear LangGraph run with ``SqliteSaver`` and ``durability="sync"``."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    graph = _linear_graph(steps)
    path = _fresh(directory, "langgraph", steps) / "checkpoints.sqlite"
    conn = sqlite3.connect(str(path), check_same_thread=False)
    try:
        saver = SqliteSaver(conn)
        saver.setup()  # WAL, the tables
        conn.execute("PRAGMA synchronous = FULL")  # SQLite's default, stated: every commit fsynced
        app = graph.compile(checkpointer=saver)
        out = _timed(steps, lambda: app.invoke({"n": 0}, _graph_config(steps), durability="sync"))
        _checked("LangGraph", out.pop("result")["n"], steps)
        (out["checkpoints"],) = conn.execute("SELECT count(*) FROM checkpoints WHERE thread_id = 'bench'").fetchone()
    finally:
        conn.close()
    return out


def langgraph_async_plan(steps: int, directory: Path) -> dict[str, Any]:
    """The same graph with ``AsyncSqliteSaver`` (aiosqlite), ``ainvoke`` with ``durability="sync"`` under asyncio."""
    import asyncio

    import aiosqlite
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    graph = _linear_graph(steps)
    path = _fresh(directory, "langgraph-async", steps) / "checkpoints.sqlite"

    async def run() -> dict[str, Any]:
        async with aiosqlite.connect(str(path)) as conn:
            saver = AsyncSqliteSaver(conn)
            await saver.setup()  # WAL, the tables
            await conn.execute("PRAGMA synchronous = FULL")
            app = graph.compile(checkpointer=saver)
            cpu = time.process_time()
            started = time.perf_counter()
            final = await app.ainvoke({"n": 0}, _graph_config(steps), durability="sync")
            seconds = time.perf_counter() - started
            cpu_seconds = time.process_time() - cpu
            _checked("LangGraph (async)", final["n"], steps)
            async with conn.execute("SELECT count(*) FROM checkpoints WHERE thread_id = 'bench'") as cursor:
                row = await cursor.fetchone()
        return {
            "steps": steps,
            "seconds": seconds,
            "steps_per_second": steps / seconds,
            "cpu_seconds": cpu_seconds,
            "checkpoints": row[0] if row else None,
        }

    return asyncio.run(run())


_DBOS_WORKFLOW: dict[str, Any] = {}  # DBOS registers a workflow once per process: made on first use


def _dbos_workflow() -> Any:
    """The DBOS workflow of N ``@DBOS.step()`` steps, each adding 1."""
    if not _DBOS_WORKFLOW:
        from dbos import DBOS

        @DBOS.step()
        def add_one(n: int) -> int:
            return n + 1

        @DBOS.workflow()
        def dbos_plan(steps: int) -> int:
            n = 0
            for _ in range(steps):
                n = add_one(n)
            return n

        _DBOS_WORKFLOW["plan"] = dbos_plan
    return _DBOS_WORKFLOW["plan"]


def dbos_plan(steps: int, directory: Path) -> dict[str, Any]:
    """One DBOS workflow of N steps on a SQLite system database of its own, WAL and ``synchronous=FULL``.

    DBOS opens SQLite in its default rollback journal; its config takes an engine of our own
    (``system_database_engine``), whose connections get what DBOS's own engine sets (IMMEDIATE
    transactions, busy timeout, foreign keys) and WAL with ``synchronous=FULL``. Every step's output is
    checkpointed (``operation_outputs``) before the next starts. Launch and shutdown are outside the time."""
    import logging

    import sqlalchemy as sa
    from dbos import DBOS
    from sqlalchemy import event

    workflow = _dbos_workflow()
    path = _fresh(directory, "dbos", steps) / "dbos.sqlite"
    engine = sa.create_engine(f"sqlite:///{path}")

    @event.listens_for(engine, "connect")
    def pragmas(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = "IMMEDIATE"
        dbapi_conn.execute("PRAGMA journal_mode = WAL")
        dbapi_conn.execute("PRAGMA synchronous = FULL")
        dbapi_conn.execute("PRAGMA busy_timeout = 30000")
        dbapi_conn.execute("PRAGMA foreign_keys = ON")

    DBOS(config={"name": "corral-bench", "system_database_engine": engine, "log_level": "WARNING"})
    DBOS.launch()
    try:
        out = _timed(steps, lambda: workflow(steps))
        _checked("DBOS", out.pop("result"), steps)
    finally:
        DBOS.destroy()
        logging.getLogger("dbos").handlers.clear()
        engine.dispose()
    check = sqlite3.connect(str(path))
    try:
        (out["journal_mode"],) = check.execute("PRAGMA journal_mode").fetchone()
        (out["checkpoints"],) = check.execute("SELECT count(*) FROM operation_outputs").fetchone()
    finally:
        check.close()
    return out


def bare_plan(steps: int, directory: Path) -> dict[str, Any]:
    """The floor: one ``BEGIN IMMEDIATE; UPDATE; INSERT event; COMMIT`` per step, WAL, ``synchronous=FULL``."""
    path = _fresh(directory, "bare", steps) / "bare.sqlite"
    conn = sqlite3.connect(str(path), isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("CREATE TABLE plan (id INTEGER PRIMARY KEY, step INTEGER NOT NULL, value INTEGER NOT NULL)")
        conn.execute("CREATE TABLE events (id INTEGER PRIMARY KEY, plan INTEGER NOT NULL, step INTEGER, body TEXT)")
        conn.execute("INSERT INTO plan VALUES (1, 0, 0)")

        def run() -> int:
            for step in range(1, steps + 1):
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("UPDATE plan SET step = ?, value = value + 1 WHERE id = 1", (step,))
                conn.execute("INSERT INTO events (plan, step, body) VALUES (1, ?, ?)", (step, '{"outcome":"passed"}'))
                conn.execute("COMMIT")
            (value,) = conn.execute("SELECT value FROM plan WHERE id = 1").fetchone()
            return int(value)

        out = _timed(steps, run)
        _checked("the bare loop", out.pop("result"), steps)
    finally:
        conn.close()
    return out


@dataclass(frozen=True)
class Peer:
    key: str
    label: str
    run: Callable[[int, Path], dict[str, Any]]
    needs: tuple[str, ...]  # the bench extra's modules it imports
    target: float | None  # corral / this peer, at least (None: corral itself)
    figure: str = ""


PEERS = (
    Peer("corral", "corral plan runner (pure steps)", corral_plan, (), None),
    Peer("corral_effectful", "corral, the steps declared effectful", corral_effectful_plan, (), None),
    Peer(
        "langgraph_sync",
        "LangGraph SqliteSaver, durability=sync",
        langgraph_sync_plan,
        ("langgraph", "langgraph.checkpoint.sqlite"),
        TARGET_PEER,
        "corral / LangGraph SqliteSaver (sync)",
    ),
    Peer(
        "langgraph_async",
        "LangGraph AsyncSqliteSaver, durability=sync",
        langgraph_async_plan,
        ("langgraph", "langgraph.checkpoint.sqlite", "aiosqlite"),
        TARGET_PEER,
        "corral / LangGraph AsyncSqliteSaver (async)",
    ),
    Peer("dbos", "DBOS workflow, SQLite WAL", dbos_plan, ("dbos",), TARGET_PEER, "corral / DBOS (SQLite WAL)"),
    Peer(
        "bare",
        "bare loop, one commit per step (floor)",
        bare_plan,
        (),
        TARGET_FLOOR,
        "corral / the bare one-commit-per-step floor",
    ),
)


def compare_plans(steps: int, rounds: int, directory: Path, peers: tuple[Peer, ...]) -> dict[str, Any]:
    """Each peer's N-step plan, ``rounds`` interleaved rounds after a warm-up; medians."""
    warm = max(2, steps // 20)
    for peer in peers:
        peer.run(warm, directory)
    runs: dict[str, list[dict[str, Any]]] = {peer.key: [] for peer in peers}
    for index in range(rounds):
        for peer in peers if index % 2 == 0 else peers[::-1]:
            runs[peer.key].append(peer.run(steps, directory))
    out: dict[str, Any] = {"steps": steps, "rounds": rounds, "peers": {}}
    for peer in peers:
        mine = runs[peer.key]
        rate_ = statistics.median(r["steps_per_second"] for r in mine)
        row: dict[str, Any] = {
            "label": peer.label,
            "steps_per_second": round(rate_, 1),
            "steps_per_second_range": [
                round(min(r["steps_per_second"] for r in mine), 1),
                round(max(r["steps_per_second"] for r in mine), 1),
            ],
            "cpu_ms_per_step": round(statistics.median(r["cpu_seconds"] for r in mine) / steps * 1e3, 3),
        }
        for key in ("commits", "checkpoints", "journal_mode"):
            if mine[-1].get(key) is not None:
                row[key] = mine[-1][key]
        out["peers"][peer.key] = row
    corral = out["peers"]["corral"]["steps_per_second"]
    for key, row in out["peers"].items():
        if key != "corral":
            row["corral_over"] = round(corral / row["steps_per_second"], 3)
    out["runs"] = runs
    return out


# --- fsyncs per step, counted by strace -------------------------------------------------------------


def strace_unavailable() -> str | None:
    """Why ``strace -f -c`` cannot count this machine's fsyncs (no strace, ptrace refused), or None."""
    if not Path(STRACE).is_file():
        return f"{STRACE} is not installed"
    with tempfile.NamedTemporaryFile("r", prefix="corral-bench-strace-", suffix=".txt") as out:
        try:
            done = subprocess.run(
                [STRACE, "-f", "-c", "-e", "trace=fsync,fdatasync", "-o", out.name, "true"],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            return f"{STRACE} did not run: {error}"
        if done.returncode != 0:
            tail = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
            return f"{STRACE} cannot trace here (ptrace not permitted?): {tail[:200]}"
    return None


def parse_strace_counts(text: str) -> int:
    """The fsync and fdatasync calls in a ``strace -c`` summary (its ``calls`` column)."""
    total = 0
    for line in text.splitlines():
        words = line.split()
        if len(words) >= 5 and words[-1] in ("fsync", "fdatasync") and words[3].isdigit():
            total += int(words[3])
    return total


def count_fsyncs(peer: Peer, steps: int, directory: Path) -> int:
    """The fsync and fdatasync calls of one child process running ``peer`` once with ``steps`` steps."""
    with tempfile.NamedTemporaryFile("r", prefix="corral-bench-strace-", suffix=".txt", dir=directory) as out:
        argv = [sys.executable, str(Path(__file__).resolve()), "--child", peer.key, "--steps", str(steps)]
        argv += ["--dir", str(directory)]
        done = subprocess.run(
            [STRACE, "-f", "-c", "-e", "trace=fsync,fdatasync", "-o", out.name, *argv],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        if done.returncode != 0:
            tail = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
            raise SystemExit(f"the {peer.key} child under strace failed: {tail[:300]}")
        return parse_strace_counts(Path(out.name).read_text())


def fsyncs_per_step(steps: int, directory: Path, peers: tuple[Peer, ...]) -> dict[str, Any]:
    """Each peer's fsyncs per step: a child with N steps less one with N/2, over N/2 (set-up cancels out)."""
    why = strace_unavailable()
    if why is not None:
        return {"available": False, "reason": why}
    half = max(1, steps // 2)
    out: dict[str, Any] = {
        "available": True,
        "method": f"strace -f -c, ({steps}-step run - {half}-step run) / {steps - half}",
        "peers": {},
    }
    for peer in peers:
        full, part = count_fsyncs(peer, steps, directory), count_fsyncs(peer, half, directory)
        out["peers"][peer.key] = {
            "fsyncs_per_step": round((full - part) / (steps - half), 2),
            f"fsyncs_{steps}_steps": full,
            f"fsyncs_{half}_steps": part,
        }
    return out


def child(key: str, steps: int, directory: Path) -> int:
    """``--child``: run one peer once (for strace) and print its figures."""
    (peer,) = [p for p in PEERS if p.key == key]
    with tempfile.TemporaryDirectory(prefix="corral-bench-child-", dir=directory) as tmp:
        result = peer.run(steps, Path(tmp))
    print(json.dumps({k: v for k, v in result.items() if isinstance(v, int | float | str)}))
    return 0


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


def _fsyncs_text(fsyncs: dict[str, Any], key: str) -> str:
    if not fsyncs.get("available"):
        return "fsyncs: unavailable"
    return f"{fsyncs['peers'][key]['fsyncs_per_step']:g} fsyncs/step"


def _spread(row: dict[str, Any]) -> str:
    low, high = row["steps_per_second_range"]
    return f"rounds {low:.0f}-{high:.0f}"


def plan_figures(
    plan: dict[str, Any], fsyncs: dict[str, Any], missing: dict[str, list[str]], where: Path
) -> list[dict[str, Any]]:
    """One figure per peer: corral's steps/s over the peer's, measured or skipped with the reason."""
    figures = []
    corral = plan["peers"]["corral"]
    for peer in PEERS:
        if peer.target is None:
            continue
        base: dict[str, Any] = {
            "figure": f"{FIGURE_PLAN}: {peer.figure}",
            "unit": "x",
            "target": f">= {peer.target:g}x",
        }
        if peer.key in missing:
            why = f"{', '.join(missing[peer.key])} not installed: install the bench extra (`pip install -e '.[bench]'`)"
            figures.append(base | {"value": None, "met": False, "skipped": True, "detail": f"skipped: {why}"})
            continue
        row = plan["peers"][peer.key]
        value = row["corral_over"]
        figures.append(
            base
            | {
                "value": value,
                "met": value >= peer.target,
                "detail": (
                    f"corral {corral['steps_per_second']:.1f} steps/s ({_spread(corral)}, "
                    f"{corral['cpu_ms_per_step']:.2f} ms CPU/step, {_fsyncs_text(fsyncs, 'corral')}) vs {peer.label} "
                    f"{row['steps_per_second']:.1f} steps/s ({_spread(row)}, {row['cpu_ms_per_step']:.2f} ms CPU/step, "
                    f"{_fsyncs_text(fsyncs, peer.key)}); "
                    f"{plan['steps']} steps, median of {plan['rounds']} interleaved rounds, synchronous=FULL in {where}"
                ),
            }
        )
    return figures


def render(context: dict[str, Any], plan: dict[str, Any], fsyncs: dict[str, Any], leases: dict[str, Any] | None) -> str:
    lines = [f"corral {context['corral']} against its peers: Python {context['python']}, SQLite {context['sqlite']}"]
    lines += [f"  {note}" for note in context["notes"]]
    shm = plan.get("tmpfs")
    lines += [
        "",
        f"  1. a {plan['steps']}-step durable plan, median of {plan['rounds']} interleaved rounds "
        f"(synchronous=FULL, same directory)",
        f"     {'':44} {'steps/s':>9} {'CPU ms/step':>12} {'fsyncs/step':>12} {'corral/it':>10} {'target':>14}"
        + (f" {'tmpfs corral/it':>16}" if shm else ""),
    ]
    for peer in PEERS:
        row = plan["peers"].get(peer.key)
        if row is None:
            lines.append(f"     {peer.label:44} {'skipped: ' + ', '.join(context['missing_peers'][peer.key])}")
            continue
        if fsyncs.get("available"):
            per_step = f"{fsyncs['peers'][peer.key]['fsyncs_per_step']:12.2f}"
        else:
            per_step = f"{'unavailable':>12}"
        ratio = f"{row['corral_over']:9.3f}x" if "corral_over" in row else f"{'':10}"
        target = ""
        if peer.target is not None:
            target = f">= {peer.target:g}x" + (" met" if row["corral_over"] >= peer.target else " NOT met")
        on_shm = ""
        if shm and peer.key in shm["peers"] and "corral_over" in shm["peers"][peer.key]:
            on_shm = f" {shm['peers'][peer.key]['corral_over']:15.3f}x"
        lines.append(
            f"     {peer.label:44} {row['steps_per_second']:9.1f} {row['cpu_ms_per_step']:12.2f} {per_step} "
            f"{ratio} {target:>14}{on_shm}"
        )
    if not fsyncs.get("available"):
        lines.append(f"     fsyncs: unavailable ({fsyncs.get('reason')})")
    else:
        lines.append(f"     fsyncs counted by {fsyncs['method']}")
    if shm:
        lines.append(f"     tmpfs: the same on {TMPFS}, where fsync is all but free (CPU decides)")
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
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a shorter run (about a minute): the lease benchmarks cut to 0.3 s; the plans keep --rounds",
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--no-tmpfs", action="store_true", help="skip the same plans on tmpfs")
    parser.add_argument("--child", choices=[p.key for p in PEERS], help=argparse.SUPPRESS)  # one run, for strace
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds = 0.3  # the plans keep their rounds: one round of each is too noisy to read
    if args.steps < 2 or args.rounds < 1 or args.seconds <= 0:
        parser.error("--steps must be >= 2, --rounds >= 1 and --seconds > 0")
    if args.child:
        return child(args.child, args.steps, args.dir or Path(tempfile.gettempdir()))
    missing = missing_extra()
    missing_peers = {p.key: sorted(set(p.needs) & set(missing)) for p in PEERS if set(p.needs) & set(missing)}
    peers = tuple(p for p in PEERS if p.key not in missing_peers)
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
        "missing_peers": missing_peers,
        "notes": notes,
    }
    with tempfile.TemporaryDirectory(prefix="corral-bench-peers-", dir=args.dir) as tmp:
        directory = Path(tmp)
        (directory / "plans").mkdir()
        plan = compare_plans(args.steps, args.rounds, directory / "plans", peers)
        if TMPFS.is_dir() and not args.no_tmpfs:
            with tempfile.TemporaryDirectory(prefix="corral-bench-peers-", dir=TMPFS) as shm:
                tmpfs = compare_plans(args.steps, args.rounds, Path(shm), peers)
            plan["tmpfs"] = {k: v for k, v in tmpfs.items() if k != "runs"}
        (directory / "fsyncs").mkdir()
        fsyncs = fsyncs_per_step(args.steps, directory / "fsyncs", peers)
        plan["fsyncs"] = fsyncs
        figures = plan_figures(plan, fsyncs, missing_peers, args.dir or Path(tempfile.gettempdir()))
        (directory / "leases").mkdir()
        leases = compare_leases(
            directory / "leases", args.synchronous, args.seconds, max(2, args.rounds), "statemachine" not in missing
        )
    if args.json:
        plan = {k: v for k, v in plan.items() if k != "runs"} | {"runs": plan["runs"]}
        print(json.dumps({"context": context, "plan": plan, "lease_machine": leases, "figures": figures}, indent=2))
    else:
        print(render(context, plan, fsyncs, leases))
    return 0


def _version() -> str:
    from runner._version import __version__

    return __version__


if __name__ == "__main__":
    sys.exit(main())
