"""What waiting on an agent and one prompt round trip cost with the embedded process host.

Measured in one run, on a real SQLite store in a temporary directory (WAL, ``synchronous=FULL``):

1. Wake-up latency of a cursor-bound wait: the time from the moment the store records an agent's
   status change to the moment the waiter returns. As soon as the wait on the agent's pane has begun,
   a second process (the *writer*, this script run with ``--writer``, its own connection, as a
   supervisor would) moves the agent's slot to ``working`` and, after a random 1-6 ms (so the change
   falls at any phase of the waiter's poll), to ``done``; it reads ``time.monotonic_ns()`` just before
   and just after that COMMIT and reports both. The waiter reads the same clock (``CLOCK_MONOTONIC``
   is shared by all processes on Linux) when its wait returns. Three waiters: ``ProcessHost.wait``
   on the pane, and ``Service.wait_any`` over 1 and over 8 leased agents (one of them, chosen at
   random, changes). ``--changes`` changes each (200), reported as median and p99. Target: median
   under 10 ms (``--target-ms``).
2. Round trips with an instant agent (kind ``script``, prompt ``echo hi``): ``Service.relay`` then
   ``Service.collect``, in-process, as round trips per second and the mean split into *reserve*
   (relay minus the host's ``prompt``), *deliver* (``ProcessHost.prompt``: the slot writes and
   starting the detached supervisor), *wait* (``ProcessHost.wait`` inside collect: the agent's
   remaining run, its outcome recorded by the supervisor, and the wake-up) and *capture + transition*
   (the rest of collect: two observations, the log read, the receipt's ``collect`` transition).
   The same via the CLI, ``corral ask`` as a cold process, median over ``--cli-runs`` runs.

3. The Herdr host against the contract fake of ``herdr`` (``tests/agents/fake_herdr.py``; Herdr
   itself cannot be installed here), with four busy background agents moving the server's shared
   counter: ``HerdrHost.wait`` on 1 target, and the first of 8 waits (one per target, raced as
   ``wait_any`` does), each change a prompt of ``sleep 0.05`` to one target chosen at random. The
   wake-up is the time from the fake's recorded moment of the change (its wall clock, the agent's
   ``done``) to the wait's return; ``--herdr-changes`` changes each (30; 0 skips the section),
   median and p99. It measures the adapter's process-per-call design (every wait and observation
   is one ``herdr`` process, here a Python one), not Herdr's own latency.

4. The real drivers (issue 23): for ``claude`` and ``codex`` (each skipped, in one line, when its CLI
   under ``tests/agentcli`` or ``node`` is absent), a scripted model server in this process on
   loopback (``tests/support/anthropic_model.py``, ``responses_model.py``) answering a plain text at
   once; interleaved, ``--driver-runs`` prompts (20) of (a) the bare CLI as the supervisor runs it for a
   reviewer's first prompt (``Kind.run_argv`` of the host's ``run_spec``, ``Kind.environment``, the
   prompt on stdin), spawn to exit, and (b) ``Service.relay`` then ``Service.collect`` of the same
   prompt to a fresh reviewer of that kind. Figure: overhead = median(b) - median(a), target < 50 ms;
   p90s beside. Not met here (about 70-115 ms on a 2-CPU shared machine): a timeline of single round
   trips puts the steady part before the CLI's spawn (relay's writes; the supervisor's launcher, a
   Python start plus ``import json`` to read its job, about 8 ms of ``re``; ``import subprocess`` in
   the detached half) and after its exit (the driver's import and parse of the output, the outcome
   commit, the wake-up, capture).
   ``--only-drivers`` runs this section alone.

``--quick`` (for ``bench/summary.py``) shortens every section; ``--json`` prints a ``figures`` list
(section 4's, one per driver) with the rest.

For scale, the same run times a cold ``python -c pass`` and a cold demo agent doing ``echo hi``: a
round trip starts at least two interpreters one after the other (the supervisor's launcher, then the
agent) and the supervisor's own store write. Everything is interleaved over ``--rounds`` rounds so
that the drift of a noisy machine hits every figure alike; read the figures as ratios within a run.

Child processes (supervisors, agents, the CLI) get a private ``PYTHONPYCACHEPREFIX`` so they read
compiled bytecode, as an installed corral does, whatever ``PYTHONDONTWRITEBYTECODE`` says.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import platform
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
from common import Cold, corral_executable, percentile

from runner._version import __version__
from runner.agents import process
from runner.agents.kinds import Kinds
from runner.agents.process import ProcessHost
from runner.context import parse_time
from runner.definitions.library import Library
from runner.fence import Credential
from runner.service import (
    AcquireInput,
    CollectInput,
    RelayInput,
    ReviewerCloseInput,
    ReviewerStartInput,
    Service,
    WaitAnyInput,
)
from runner.sql.slots_sqlite import SQLiteSlots
from runner.sql.store_sqlite import SQLiteStore

CONTROLLER = "bench"
AUTHORITY_SHA = hashlib.sha256(b"bench authority").hexdigest()
TARGET_MS = 10.0
WAIT_TIMEOUT = 30.0  # seconds; a wait or round trip this slow means the benchmark is broken
WIDE = 8  # agents in the wide wait_any
PROMPT = "echo hi"
DELAY_US = (1000, 6000)  # the writer's pause between working and done, uniform
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _ms(ns: float) -> float:
    return ns / 1e6


def median(values: list[float]) -> float:
    return statistics.median(values)


# --- the writer: a second process that changes slots and says when ----------------------------------------


def writer_main(db: str) -> int:
    """Per stdin line ``PANE DELAY_US``: slot to working, pause, to done; print when its COMMIT began and
    returned (``time.monotonic_ns()``) and the new seq."""
    store = SQLiteStore(db)
    slots = SQLiteSlots(store)
    try:
        for line in sys.stdin:
            pane_id, delay_us = line.split()
            with slots.write() as tx:
                slot = tx.slot(pane_id)
                assert slot is not None
                working = tx.put_slot(
                    replace(slot, status="working", seq=slot.seq + 1, pid=None, exit_status=None), slot.seq
                )
            time.sleep(int(delay_us) / 1e6)
            with slots.write() as tx:
                done = tx.put_slot(replace(working, status="done", seq=working.seq + 1, exit_status=0), working.seq)
                issued = time.monotonic_ns()  # the COMMIT (with its fsync) is issued as the block exits
            committed = time.monotonic_ns()  # just after COMMIT returned: the change is durable and visible
            sys.stdout.write(f"{issued} {committed} {done.seq}\n")
            sys.stdout.flush()
    finally:
        store.close()
    return 0


class Writer:
    """The writer process, driven line by line."""

    def __init__(self, db: Path, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--writer", str(db)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            text=True,
            bufsize=1,
        )

    def change(self, pane_id: str, delay_us: int) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{pane_id} {delay_us}\n")
        self.proc.stdin.flush()

    def committed(self) -> tuple[int, int, int]:
        """(monotonic ns as the COMMIT was issued, just after it returned, the new seq) of the last change."""
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"the writer process died (status {self.proc.wait()})")
        issued, committed, seq = line.split()
        return int(issued), int(committed), int(seq)

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=10)


# --- the world: a store, a lease, leased agents -----------------------------------------------------------


class TimedHost(ProcessHost):
    """The process host, noting how long its last ``prompt`` and ``wait`` (or ``wait_many``) took
    (``perf_counter_ns``)."""

    last_prompt_ns = 0
    last_wait_ns = 0
    last_wait_end_wall_ns = 0
    wait_began: dict[str, int]  # pane -> time.monotonic_ns() when its latest wait began
    armed: dict[str, Callable[[], None]]  # pane -> called once when a wait on it begins

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.wait_began = {}
        self.armed = {}

    def prompt(self, pane_id: str, text: str, expect: Any = None, gate: Any = None) -> Any:
        start = time.perf_counter_ns()
        try:
            return super().prompt(pane_id, text, expect, gate)
        finally:
            self.last_prompt_ns = time.perf_counter_ns() - start

    async def wait(self, pane_id: str, after_seq: int, timeout: float) -> Any:
        self.wait_began[pane_id] = time.monotonic_ns()
        hook = self.armed.pop(pane_id, None)
        if hook is not None:
            hook()
        start = time.perf_counter_ns()
        try:
            return await super().wait(pane_id, after_seq, timeout)
        finally:
            self.last_wait_ns = time.perf_counter_ns() - start
            self.last_wait_end_wall_ns = time.time_ns()

    def _arm(self, targets: Any) -> None:
        began = time.monotonic_ns()
        for pane_id in targets:
            self.wait_began[pane_id] = began
            hook = self.armed.pop(pane_id, None)
            if hook is not None:
                hook()

    def wait_many_blocking(self, targets: Any, timeout: float, stop: Any) -> Any:
        """The service's ``wait_any`` on a single host waits here, in its worker thread: armed like
        :meth:`wait_many` (without this the writer was never told and the wait timed out)."""
        self._arm(targets)
        start = time.perf_counter_ns()
        try:
            return super().wait_many_blocking(targets, timeout, stop)
        finally:
            self.last_wait_ns = time.perf_counter_ns() - start
            self.last_wait_end_wall_ns = time.time_ns()

    async def wait_many(self, targets: Any, timeout: float) -> Any:
        """``wait_any``'s wait (issue 13: one wait over all of a host's targets): armed like :meth:`wait`."""
        began = time.monotonic_ns()
        for pane_id in targets:
            self.wait_began[pane_id] = began
            hook = self.armed.pop(pane_id, None)
            if hook is not None:
                hook()
        start = time.perf_counter_ns()
        try:
            return await super().wait_many(targets, timeout)
        finally:
            self.last_wait_ns = time.perf_counter_ns() - start
            self.last_wait_end_wall_ns = time.time_ns()


@dataclass
class World:
    store: SQLiteStore
    host: TimedHost
    service: Service
    credential: Credential
    panes: dict[str, str]  # agent name -> pane id

    @classmethod
    def open(cls, directory: Path, names: list[str]) -> World:
        store = SQLiteStore(directory / "corral.db")
        library = Library(cache_dir=directory / "cache" / "specs")
        kinds = Kinds.load([])
        host = TimedHost(store, directory / "agents", kinds)
        service = Service(store, library, actor="bench", hosts=lambda name: host, kinds=kinds)
        grant = service.controller.acquire(AcquireInput(CONTROLLER, "BENCH-1", AUTHORITY_SHA, 86400, "bench@host"))
        work = directory / "work"
        work.mkdir()
        panes = {}
        for name in names:
            lease = service.reviewers.start(ReviewerStartInput(CONTROLLER, grant.credential, name, "script", str(work)))
            panes[name] = str(lease.data["pane_id"])
        return cls(store, host, service, grant.credential, panes)

    def seq(self, name: str) -> int:
        return self.host.get(self.panes[name]).seq


# --- 1. wake-up latency -----------------------------------------------------------------------------------


@dataclass
class Latency:
    key: str
    label: str
    samples_ns: list[int] = field(default_factory=list)
    late_starts: int = 0  # changes committed before the changed pane's wait began (should stay 0)
    early: int = 0  # waits that returned before the writer's COMMIT call had returned (the writer lagged)
    commit_ns: list[int] = field(default_factory=list)  # how long each COMMIT call took in the writer

    @property
    def ms(self) -> list[float]:
        return [_ms(s) for s in self.samples_ns]

    def to_dict(self) -> dict[str, Any]:
        ms = self.ms
        return {
            "label": self.label,
            "changes": len(ms),
            "median_ms": round(median(ms), 3),
            "p99_ms": round(percentile(ms, 99), 3),
            "min_ms": round(min(ms), 3),
            "max_ms": round(max(ms), 3),
            "late_starts": self.late_starts,
            "returned_before_commit_returned": self.early,
            "writer_commit_median_ms": round(_ms(median([float(c) for c in self.commit_ns])), 3),
            "samples_ms": [round(s, 3) for s in ms],
        }


async def one_change(world: World, writer: Writer, latency: Latency, names: list[str], rng: random.Random) -> None:
    """Wait on ``names``; once the wait on the changed one has begun, the writer changes it. Note commit-to-return."""
    changed = rng.choice(names)
    pane_id, delay_us = world.panes[changed], rng.randint(*DELAY_US)
    cursors = {name: world.seq(name) for name in names}
    world.host.wait_began.clear()
    world.host.armed[pane_id] = lambda: writer.change(pane_id, delay_us)
    if latency.key == "host_wait":
        observation = await world.host.wait(pane_id, cursors[changed], WAIT_TIMEOUT)
        returned = time.monotonic_ns()
        winner = changed
    else:
        targets = tuple((name, cursors[name]) for name in names)
        result = await world.service.waits.wait_any(WaitAnyInput(CONTROLLER, world.credential, targets, WAIT_TIMEOUT))
        returned = time.monotonic_ns()
        observation, winner = result.observation, result.target
    if pane_id in world.host.armed:
        raise SystemExit(f"{latency.label}: returned without waiting on {changed}")
    issued, committed, seq = writer.committed()
    if winner != changed or observation.seq != seq or observation.status != "done":
        raise SystemExit(f"{latency.label}: woke on {winner} {observation}, expected {changed} done at seq {seq}")
    if committed < world.host.wait_began[pane_id]:
        latency.late_starts += 1  # the change was in before the pane's wait began: a flattering sample
    if returned < issued:
        raise SystemExit(f"{latency.label}: returned {issued - returned} ns before the COMMIT began: clocks differ?")
    # The change turns visible inside the writer's COMMIT call, after the fsync: a wait may return before
    # the writer reads its clock (when the writer is descheduled), so a sample may be slightly negative.
    latency.early += int(returned < committed)
    latency.commit_ns.append(committed - issued)
    latency.samples_ns.append(returned - committed)


def poll_cost_us(world: World, calls: int = 2000) -> float:
    """µs per ``ProcessHost.get``: the read a waiting target repeats every ``POLL`` seconds."""
    pane_id = world.panes["w0"]
    start = time.perf_counter_ns()
    for _ in range(calls):
        world.host.get(pane_id)
    return (time.perf_counter_ns() - start) / calls / 1000


# --- 2. round trips ---------------------------------------------------------------------------------------


@dataclass
class RoundTrips:
    """In-process relay + collect round trips and where their time went (ns per part, per round trip)."""

    total: list[int] = field(default_factory=list)
    reserve: list[int] = field(default_factory=list)
    deliver: list[int] = field(default_factory=list)
    wait: list[int] = field(default_factory=list)
    wake: list[int] = field(default_factory=list)  # of wait: the outcome transaction's start to the wait's return
    capture: list[int] = field(default_factory=list)

    def mean_ms(self, part: str) -> float:
        return _ms(statistics.fmean(getattr(self, part)))

    def to_dict(self) -> dict[str, Any]:
        seconds = sum(self.total) / 1e9
        total_ms = [_ms(t) for t in self.total]
        return {
            "round_trips": len(self.total),
            "round_trips_per_s": round(len(self.total) / seconds, 2),
            "median_ms": round(median(total_ms), 2),
            "p99_ms": round(percentile(total_ms, 99), 2),
            "mean_ms": {
                part: round(self.mean_ms(part), 2)
                for part in ("total", "reserve", "deliver", "wait", "wake", "capture")
            },
            "samples_ms": [round(t, 2) for t in total_ms],
        }


async def round_trip(world: World, trips: RoundTrips) -> None:
    service, host, credential = world.service, world.host, world.credential
    host.last_prompt_ns = host.last_wait_ns = 0
    start = time.perf_counter_ns()
    receipt = service.receipts.relay(RelayInput(CONTROLLER, credential, "rt", PROMPT))
    relayed = time.perf_counter_ns()
    (result,) = await service.receipts.collect(CollectInput(CONTROLLER, credential, (receipt.token,), WAIT_TIMEOUT))
    done = time.perf_counter_ns()
    if result.receipt.state != "completed" or result.output.strip() != "hi":
        raise SystemExit(f"round trip went wrong: {result.receipt.to_dict()} {result.output!r}")
    if host.last_prompt_ns == 0 or host.last_wait_ns == 0:
        raise SystemExit("relay or collect did not go through the host's prompt and wait")
    with SQLiteSlots(world.store).read() as reader:
        slot = reader.slot(world.panes["rt"])
    assert slot is not None and slot.updated_at is not None
    # The store clock (wall time) when the supervisor's outcome transaction began.
    recorded_wall_ns = (parse_time(slot.updated_at) - EPOCH) // timedelta(microseconds=1) * 1000
    trips.total.append(done - start)
    trips.reserve.append(relayed - start - host.last_prompt_ns)
    trips.deliver.append(host.last_prompt_ns)
    trips.wait.append(host.last_wait_ns)
    trips.wake.append(max(0, host.last_wait_end_wall_ns - recorded_wall_ns))
    trips.capture.append(done - relayed - host.last_wait_ns)


# --- cold processes: the CLI and the floors ----------------------------------------------------------------


def child_env(pycache: Path, home: Path | None = None) -> dict[str, str]:
    """The environment without CORRAL_* leaks, with compiled bytecode in a private cache."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_") and k != "XDG_STATE_HOME"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(pycache)
    if home is not None:
        env["CORRAL_HOME"] = str(home)
    return env


def cli_setup(corral: str, env: dict[str, str], work: Path) -> None:
    """A lease and one script reviewer named ``rt`` in the CLI's own state home."""
    acquire = [corral, "controller", "acquire", "--controller", CONTROLLER, "--ttl", "86400"]
    acquire += ["--authority-ref", "BENCH-1", "--authority-sha256", AUTHORITY_SHA]
    start = [corral, "reviewer", "start", "--controller", CONTROLLER, "--name", "rt", "--kind", "script"]
    start += ["--cwd", str(work)]
    for argv in (acquire, start):
        done = subprocess.run(argv, env=env, capture_output=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(argv[1:3])} failed:\n{done.stderr.decode(errors='replace')}")


# --- the run ----------------------------------------------------------------------------------------------


def split(total: int, rounds: int, index: int) -> int:
    """How many of ``total`` fall in round ``index`` of ``rounds`` (the first rounds take the remainder)."""
    return total // rounds + (1 if index < total % rounds else 0)


@contextlib.contextmanager
def bytecode_cache(pycache: Path) -> Iterator[None]:
    """This process's environment with bytecode in ``pycache``: the host starts supervisors (and they
    the agents) with it."""
    saved = {k: os.environ.get(k) for k in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")}
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ["PYTHONPYCACHEPREFIX"] = str(pycache)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


async def measure(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    pycache = tmp / "pycache"
    env = child_env(pycache)
    with bytecode_cache(pycache):
        return await _measure(args, tmp, env)


async def _measure(args: argparse.Namespace, tmp: Path, env: dict[str, str]) -> dict[str, Any]:
    pycache = tmp / "pycache"
    wide = [f"w{i}" for i in range(WIDE)]
    world = World.open(tmp, [*wide, "rt"])
    writer = Writer(world.store.path, env)
    rng = random.Random(args.seed)

    corral = corral_executable()
    home, cli_work = tmp / "home", tmp / "cli-work"
    cli_work.mkdir()
    cli_env = child_env(pycache, home)
    cli_setup(corral, cli_env, cli_work)
    ask = [corral, "ask", "rt", "--controller", CONTROLLER, "--text", PROMPT, "--json"]
    renew = [corral, "controller", "renew", "--controller", CONTROLLER, "--json"]
    agent = [sys.executable, "-m", "runner.agents.demo_agent"]
    colds = [
        Cold("python_pass", "python -c pass", [sys.executable, "-c", "pass"], env),
        Cold("demo_agent", f"demo agent, {PROMPT!r} (python -m …)", agent, env, PROMPT.encode(), b"hi"),
        Cold("cli_renew", "corral controller renew --json", renew, cli_env),
        Cold("cli_ask", f"corral ask rt --text {PROMPT!r} --json", ask, cli_env, expect=b'"completed"'),
    ]
    latencies = [
        Latency("host_wait", "ProcessHost.wait (1 pane)"),
        Latency("wait_any_1", "Service.wait_any, 1 target"),
        Latency("wait_any_8", f"Service.wait_any, {WIDE} targets"),
    ]
    targets = {"host_wait": ["w0"], "wait_any_1": ["w0"], "wait_any_8": wide}
    trips = RoundTrips()

    # Warm-up: caches, bytecode, the WAL; nothing of it is kept.
    for latency in latencies:
        for _ in range(args.warmup):
            await one_change(world, writer, Latency(latency.key, latency.label), targets[latency.key], rng)
    for _ in range(args.warmup):
        await round_trip(world, RoundTrips())
        for cold in colds:
            cold.run()

    for index in range(args.rounds):
        order = latencies if index % 2 == 0 else latencies[::-1]
        for _ in range(split(args.changes, args.rounds, index)):
            for latency in order:
                await one_change(world, writer, latency, targets[latency.key], rng)
        for _ in range(split(args.round_trips, args.rounds, index)):
            await round_trip(world, trips)
        for _ in range(split(args.cli_runs, args.rounds, index)):
            for cold in colds if index % 2 == 0 else colds[::-1]:
                cold.samples_ms.append(cold.run())
    poll_us = poll_cost_us(world)
    writer.close()
    world.store.close()
    return summarize(args, latencies, trips, colds, poll_us, tmp)


# --- 3. the Herdr host against its contract fake -----------------------------------------------------------


def _fake_herdr_module() -> Any:
    """``tests/agents/fake_herdr.py``, loaded by path (the tests are no package)."""
    import importlib.util

    path = Path(__file__).resolve().parent.parent / "tests" / "agents" / "fake_herdr.py"
    spec = importlib.util.spec_from_file_location("fake_herdr", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["fake_herdr"] = module
    spec.loader.exec_module(module)
    return module


async def herdr_measure(changes: int, tmp: Path, seed: int) -> dict[str, Any]:
    """Wake-up latency of Herdr waits (1 and 8 targets) under four busy background agents."""
    from runner.agents.herdr import HerdrHost

    fake = _fake_herdr_module().FakeHerdr(tmp / "fake-herdr")
    fake.install()
    saved = {k: os.environ.get(k) for k in ("PATH", "FAKE_HERDR_STATE", "CORRAL_HERDR", "HERDR_BIN_PATH")}
    os.environ["FAKE_HERDR_STATE"] = str(fake.state_dir)
    os.environ.pop("CORRAL_HERDR", None)
    os.environ.pop("HERDR_BIN_PATH", None)
    rng = random.Random(seed)
    work = tmp / "herdr-work"
    work.mkdir(exist_ok=True)
    try:
        host = HerdrHost(Kinds.load([]), binary=str(fake.executable), workspace="w1", wait_slice=1.0)
        panes = [host.start(f"h{i}", "script", str(work), process_options()).pane_id for i in range(WIDE)]
        fake.add_background_agents(4)
        figures: dict[str, Any] = {}
        for key, targets in (("herdr_wait_1", panes[:1]), (f"herdr_wait_{WIDE}", panes)):
            samples: list[float] = []
            for _ in range(changes):
                changed = rng.choice(targets)
                cursors = {pane: host.get(pane).seq for pane in targets}
                working = host.prompt(changed, "sleep 0.05")
                cursors[changed] = working.seq
                winner: list[str] = []

                async with anyio.create_task_group() as group:
                    for pane in targets:
                        group.start_soon(_first_wait, host, pane, cursors[pane], group, winner)
                returned = time.time()
                with fake.edit() as state:
                    history = state["panes"][changed]["agent"]["history"]
                changed_at = next(t for seq, status, t in reversed(history) if status == "done")
                samples.append((returned - changed_at) * 1000)
                assert winner[:1] == [changed], "a wait returned for an agent that did not change"
            figures[key] = {
                "label": f"HerdrHost.wait, {len(targets)} target(s), 4 background agents",
                "changes": len(samples),
                "median_ms": round(median(samples), 3),
                "p99_ms": round(percentile(samples, 99), 3),
            }
        return figures
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


async def _first_wait(host: Any, pane: str, after: int, group: anyio.abc.TaskGroup, winner: list[str]) -> None:
    """One of the raced waits: the first to return names itself and ends the others."""
    await host.wait(pane, after, WAIT_TIMEOUT)
    winner.append(pane)
    group.cancel_scope.cancel()


# --- 4. the drivers' overhead: the real agent CLIs, bare and through corral --------------------------------

AGENTCLI = Path(__file__).resolve().parent.parent / "tests" / "agentcli"
CLIS = AGENTCLI / "node_modules" / ".bin"
DRIVER_PROMPT = "answer in one line"  # no directive of the scripted models: a plain text reply, at once
DRIVER_TARGET_MS = 50.0


def _support_module(name: str) -> Any:
    """``tests/support/NAME.py``, loaded by path (the bench imports nothing of the tests otherwise)."""
    import importlib.util

    path = Path(__file__).resolve().parent.parent / "tests" / "support" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"bench_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def drivers_missing() -> dict[str, str]:
    """Why a real driver's CLI cannot run here (kind -> reason); an absent kind can."""
    import shutil

    missing = {}
    if not (CLIS / "claude").exists():
        missing["claude"] = f"the real Claude Code CLI is not installed (cd {AGENTCLI} && npm ci)"
    if not (CLIS / "codex").exists():
        missing["codex"] = f"the real Codex CLI is not installed (cd {AGENTCLI} && npm ci)"
    elif shutil.which("node") is None:
        missing["codex"] = "no node on PATH (the Codex CLI's launcher is a node script)"
    return missing


@dataclass
class DriverTrips:
    """One driver's samples: the bare CLI (a) and corral's relay + collect (b), and (b)'s parts."""

    kind: str
    bare: list[float] = field(default_factory=list)  # ms, spawn to exit
    corral: list[float] = field(default_factory=list)  # ms, relay called to collect returned
    reserve: list[float] = field(default_factory=list)
    deliver: list[float] = field(default_factory=list)
    wait: list[float] = field(default_factory=list)
    capture: list[float] = field(default_factory=list)
    argv: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        bare, corral = median(self.bare), median(self.corral)
        wait = median(self.wait)
        return {
            "kind": self.kind,
            "runs": len(self.bare),
            "argv": self.argv,
            "bare": {"median_ms": round(bare, 1), "p90_ms": round(percentile(self.bare, 90), 1)},
            "corral": {"median_ms": round(corral, 1), "p90_ms": round(percentile(self.corral, 90), 1)},
            "overhead_ms": round(corral - bare, 1),
            "overhead_p90_ms": round(percentile(self.corral, 90) - percentile(self.bare, 90), 1),
            "parts_median_ms": {
                "reserve": round(median(self.reserve), 1),
                "deliver": round(median(self.deliver), 1),
                "wait": round(wait, 1),
                "wait_minus_bare": round(wait - bare, 1),
                "capture": round(median(self.capture), 1),
            },
            "samples_ms": {"bare": [round(s, 1) for s in self.bare], "corral": [round(s, 1) for s in self.corral]},
        }


@dataclass
class DriverWorld:
    """A store, a lease and a process host whose kinds run the real CLIs against the scripted models."""

    store: SQLiteStore
    host: TimedHost
    service: Service
    credential: Credential
    work: Path
    serial: int = 0

    def reviewer(self, kind: str) -> tuple[str, str]:
        """A fresh reviewer of ``kind`` (each sample is a lease's first prompt): its name and pane."""
        self.serial += 1
        name = f"{kind}{self.serial}"
        lease = self.service.reviewers.start(
            ReviewerStartInput(CONTROLLER, self.credential, name, kind, str(self.work))
        )
        return name, str(lease.data["pane_id"])

    def close(self, name: str, pane_id: str) -> None:
        seq = self.host.get(pane_id).seq
        self.service.reviewers.close(ReviewerCloseInput(CONTROLLER, self.credential, name, seq))


def bare_run(world: DriverWorld, kind: str, trips: DriverTrips, log: Path) -> float:
    """The CLI as the supervisor runs it for a fresh reviewer's first prompt: the argv and environment the
    kind's driver builds (``Kind.run_argv`` of the host's ``run_spec``, ``Kind.environment``), in the
    agent's cwd, the prompt on stdin, output to a log; timed from spawn to exit."""
    import uuid

    name, pane_id = world.reviewer(kind)  # its slot gives the spec; it is never prompted
    with SQLiteSlots(world.store).read() as reader:
        slot = reader.slot(pane_id)
    assert slot is not None
    slot = replace(slot, options={**slot.options, "new_session_id": str(uuid.uuid4())})
    spec = world.host.run_spec(slot)
    spec_kind = world.host.kinds.get(kind)
    argv, env = spec_kind.run_argv(spec), spec_kind.environment(os.environ)
    trips.argv = argv
    with open(log, "wb") as output:
        start = time.perf_counter()
        child = subprocess.Popen(
            argv, cwd=slot.cwd, env=env, stdin=subprocess.PIPE, stdout=output, stderr=subprocess.STDOUT
        )
        assert child.stdin is not None
        child.stdin.write(DRIVER_PROMPT.encode("utf-8"))
        child.stdin.close()
        code = child.wait()
        elapsed = (time.perf_counter() - start) * 1000
    from runner.agents.drivers import driver

    result = driver(spec_kind.driver).parse(log.read_text(encoding="utf-8", errors="replace").splitlines(), spec)
    if code != 0 or result.error is not None or not result.final.startswith("turns=1"):
        raise SystemExit(f"bare {kind} run went wrong (status {code}): {result.error or result.final!r}")
    world.close(name, pane_id)
    return elapsed


async def corral_run(world: DriverWorld, kind: str, trips: DriverTrips) -> float:
    """Relay then collect of the same prompt to a fresh reviewer of ``kind``, end to end, with its parts."""
    service, host, credential = world.service, world.host, world.credential
    name, pane_id = world.reviewer(kind)
    host.last_prompt_ns = host.last_wait_ns = 0
    start = time.perf_counter_ns()
    receipt = service.receipts.relay(RelayInput(CONTROLLER, credential, name, DRIVER_PROMPT))
    relayed = time.perf_counter_ns()
    (result,) = await service.receipts.collect(CollectInput(CONTROLLER, credential, (receipt.token,), WAIT_TIMEOUT))
    done = time.perf_counter_ns()
    if result.receipt.state != "completed" or not result.output.startswith("turns=1"):
        raise SystemExit(f"{kind} round trip went wrong: {result.receipt.to_dict()} {result.output!r}")
    trips.reserve.append(_ms(relayed - start - host.last_prompt_ns))
    trips.deliver.append(_ms(host.last_prompt_ns))
    trips.wait.append(_ms(host.last_wait_ns))
    trips.capture.append(_ms(done - relayed - host.last_wait_ns))
    world.close(name, pane_id)
    return _ms(done - start)


@contextlib.contextmanager
def patched_environ(values: dict[str, str]) -> Iterator[None]:
    """This process's environment with ``values``: the host builds each agent's environment from it."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


async def drivers_measure(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """Section 4: each real driver's bare CLI and corral's round trip on the same scripted model server."""
    missing = drivers_missing()
    kinds = [kind for kind in ("claude", "codex") if kind not in missing]
    doc: dict[str, Any] = {"skipped": dict(missing), "drivers": {}}
    if not kinds:
        return doc
    anthropic, responses = _support_module("anthropic_model"), _support_module("responses_model")
    root = tmp / "drivers"
    home, scratch, work = root / "agent-home", root / "agent-tmp", root / "work"
    for directory in (home / ".codex", scratch, work):
        directory.mkdir(parents=True)
    with anthropic.anthropic_model() as claude_model, responses.responses_model() as codex_model:
        (home / ".codex" / "config.toml").write_text(responses.codex_config(codex_model.url, "CODEX_API_KEY"))
        agent_env = {
            "PATH": f"{CLIS}{os.pathsep}{os.environ.get('PATH', '')}",
            "HOME": str(home),
            "TMPDIR": str(scratch),
            "ANTHROPIC_BASE_URL": claude_model.url,
            "ANTHROPIC_API_KEY": "sk-bench-not-a-key",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "CODEX_HOME": str(home / ".codex"),
            "CODEX_API_KEY": "sk-bench-not-a-key",
        }
        with bytecode_cache(tmp / "pycache"), patched_environ(agent_env):
            store = SQLiteStore(root / "corral.db")
            library = Library(cache_dir=root / "cache" / "specs")
            loaded = Kinds.load([])
            host = TimedHost(store, root / "agents", loaded)
            service = Service(store, library, actor="bench", hosts=lambda name: host, kinds=loaded)
            grant = service.controller.acquire(AcquireInput(CONTROLLER, "BENCH-4", AUTHORITY_SHA, 86400, "bench@host"))
            world = DriverWorld(store, host, service, grant.credential, work)
            trips = {kind: DriverTrips(kind) for kind in kinds}
            log = root / "bare.log"
            try:
                for kind in kinds:  # warm-up: the CLIs' first start (their state in HOME), nothing kept
                    for _ in range(args.warmup):
                        bare_run(world, kind, DriverTrips(kind), log)
                        await corral_run(world, kind, DriverTrips(kind))
                sample = 0
                for index in range(args.rounds):
                    for kind in kinds if index % 2 == 0 else kinds[::-1]:
                        for _ in range(split(args.driver_runs, args.rounds, index)):
                            sample += 1
                            if sample % 2:
                                trips[kind].bare.append(bare_run(world, kind, trips[kind], log))
                                trips[kind].corral.append(await corral_run(world, kind, trips[kind]))
                            else:
                                trips[kind].corral.append(await corral_run(world, kind, trips[kind]))
                                trips[kind].bare.append(bare_run(world, kind, trips[kind], log))
            finally:
                store.close()
    doc["drivers"] = {kind: t.to_dict() for kind, t in trips.items()}
    return doc


def process_options() -> Any:
    from runner.agents.abc import StartOptions

    return StartOptions()


def summarize(
    args: argparse.Namespace,
    latencies: list[Latency],
    trips: RoundTrips,
    colds: list[Cold],
    poll_us: float,
    tmp: Path,
) -> dict[str, Any]:
    lat = {latency.key: latency.to_dict() for latency in latencies}
    cold = {c.key: c.to_dict() for c in colds}
    rt = trips.to_dict()
    mean = rt["mean_ms"]
    python_ms = cold["python_pass"]["median_ms"]
    host_median = lat["host_wait"]["median_ms"]
    worst = max(v["median_ms"] for v in lat.values())
    return {
        "context": {
            "corral": __version__,
            "python": platform.python_version(),
            "sqlite": sqlite3.sqlite_version,
            "directory": str(tmp),
            "journal_mode": "wal",
            "synchronous": "full",
            "poll_s": process.POLL,
            "rounds": args.rounds,
            "warmup": args.warmup,
            "seed": args.seed,
            "writer_delay_us": list(DELAY_US),
            "cpus": os.cpu_count(),
        },
        "latency": lat,
        "poll_read_us": round(poll_us, 1),
        "poll_cpu_share_per_target": round(poll_us / 1e6 / process.POLL, 4),
        "round_trips": rt,
        "cold": cold,
        "ratios": {
            "wait_any_1_over_host_wait": round(lat["wait_any_1"]["median_ms"] / host_median, 2),
            "wait_any_8_over_host_wait": round(lat["wait_any_8"]["median_ms"] / host_median, 2),
            "host_wait_median_over_poll": round(host_median / (process.POLL * 1000), 2),
            "round_trip_over_python_start": round(mean["total"] / python_ms, 2),
            "deliver_over_python_start": round(mean["deliver"] / python_ms, 2),
            "wait_over_demo_agent": round(mean["wait"] / cold["demo_agent"]["median_ms"], 2),
            "cli_ask_over_round_trip": round(cold["cli_ask"]["median_ms"] / rt["median_ms"], 2),
            "cli_ask_minus_round_trip_ms": round(cold["cli_ask"]["median_ms"] - rt["median_ms"], 1),
            "cli_ask_minus_renew_ms": round(cold["cli_ask"]["median_ms"] - cold["cli_renew"]["median_ms"], 1),
        },
        "target_ms": args.target_ms,
        "target_met": worst < args.target_ms,
    }


def render(doc: dict[str, Any]) -> str:
    ctx, lat, rt, cold, ratios = doc["context"], doc["latency"], doc["round_trips"], doc["cold"], doc["ratios"]
    mean = rt["mean_ms"]
    lines = [
        f"corral {ctx['corral']} agent benchmark: Python {ctx['python']}, SQLite {ctx['sqlite']}, WAL, "
        f"synchronous=FULL, process host (poll {ctx['poll_s'] * 1000:g} ms), {ctx['cpus']} CPUs",
        f"  {ctx['rounds']} interleaved rounds after {ctx['warmup']} warm-up runs of each, in {ctx['directory']}",
        "",
        "  1. wake-up: the writer's COMMIT returned -> the wait returns",
        f"  {'':32} {'changes':>7} {'median ms':>10} {'p99 ms':>7} {'min ms':>7} {'max ms':>7}"
        f" {'COMMIT ms':>10} {'early':>6}",
    ]
    for row in lat.values():
        lines.append(
            f"  {row['label']:32} {row['changes']:7} {row['median_ms']:10.2f} {row['p99_ms']:7.2f}"
            f" {row['min_ms']:7.2f} {row['max_ms']:7.2f} {row['writer_commit_median_ms']:10.2f}"
            f" {row['returned_before_commit_returned']:6}"
        )
    late = sum(row["late_starts"] for row in lat.values())
    lines += [
        "  (COMMIT ms: the writer's COMMIT call, median; early: waits that returned before it had returned)",
        f"  one poll's read (ProcessHost.get): {doc['poll_read_us']:.0f} µs, so a waiting target keeps "
        f"{doc['poll_cpu_share_per_target']:.1%} of a core busy; changes in before their wait began: {late}",
    ]
    lines += [
        "",
        f"  2. relay + collect round trips, in-process, prompt {PROMPT!r} to a script agent",
        f"  {rt['round_trips']} round trips: {rt['round_trips_per_s']:.1f}/s, median {rt['median_ms']:.1f} ms, "
        f"p99 {rt['p99_ms']:.1f} ms",
        f"  {'mean per round trip':40} {'ms':>8} {'share':>7}",
    ]
    parts = [
        ("reserve", "relay: reserve (relay - prompt)"),
        ("deliver", "relay: deliver (ProcessHost.prompt)"),
        ("wait", "collect: wait for the agent"),
        ("wake", "  of which outcome txn -> wait returns"),
        ("capture", "collect: capture + transition"),
        ("total", "total"),
    ]
    for part, label in parts:
        lines.append(f"  {label:40} {mean[part]:8.1f} {mean[part] / mean['total']:7.0%}")
    lines += [
        "",
        f"  cold processes, {len(next(iter(cold.values()))['samples_ms'])} runs each, interleaved",
        f"  {'':40} {'median ms':>10} {'p90 ms':>8}",
    ]
    for row in cold.values():
        lines.append(f"  {row['label']:40} {row['median_ms']:10.1f} {row['p90_ms']:8.1f}")
    met = "met" if doc["target_met"] else "NOT met"
    lines += [
        "",
        f"  wait_any 1 / host.wait:          {ratios['wait_any_1_over_host_wait']:6.2f}x",
        f"  wait_any {WIDE} / host.wait:          {ratios['wait_any_8_over_host_wait']:6.2f}x",
        f"  host.wait median / poll period:  {ratios['host_wait_median_over_poll']:6.2f}x",
        f"  round trip / python start:       {ratios['round_trip_over_python_start']:6.2f}x",
        f"  deliver / python start:          {ratios['deliver_over_python_start']:6.2f}x",
        f"  wait / cold demo agent:          {ratios['wait_over_demo_agent']:6.2f}x",
        f"  corral ask / in-process trip:    {ratios['cli_ask_over_round_trip']:6.2f}x "
        f"(+{ratios['cli_ask_minus_round_trip_ms']:.0f} ms)",
        f"  corral ask - corral renew:       {ratios['cli_ask_minus_renew_ms']:6.1f} ms",
        f"  slowest wake-up median vs target < {doc['target_ms']:g} ms: {met}",
    ]
    if doc.get("herdr"):
        lines += ["", "  3. Herdr host on its contract fake: the change recorded -> the wait returns"]
        for figure in doc["herdr"].values():
            lines.append(
                f"  {figure['label']:52} {figure['changes']:>4} median {figure['median_ms']:8.2f} ms"
                f"  p99 {figure['p99_ms']:8.2f} ms"
            )
    return "\n".join(lines)


def drivers_figures(section: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``figures`` of section 4 (bench/summary.py): one per real driver, skipped where its CLI is absent."""
    out: list[dict[str, Any]] = []
    target = f"< {DRIVER_TARGET_MS:g} ms median"
    for kind in ("claude", "codex"):
        figure = f"agent driver overhead per prompt over the bare CLI ({kind})"
        row = section["drivers"].get(kind)
        if row is None:
            why = section["skipped"].get(kind, "not measured")
            out.append({"figure": figure, "value": None, "unit": "ms", "target": target, "met": False,
                        "skipped": True, "detail": why})  # fmt: skip
            continue
        parts = row["parts_median_ms"]
        out.append(
            {
                "figure": figure,
                "value": row["overhead_ms"],
                "unit": "ms",
                "target": target,
                "met": row["overhead_ms"] < DRIVER_TARGET_MS,
                "detail": f"relay + collect median {row['corral']['median_ms']} ms (p90 {row['corral']['p90_ms']}), "
                f"bare CLI median {row['bare']['median_ms']} ms (p90 {row['bare']['p90_ms']}), {row['runs']} prompts "
                f"each; outside the wait: reserve {parts['reserve']} + deliver {parts['deliver']} + capture "
                f"{parts['capture']} ms; the wait minus the bare CLI {parts['wait_minus_bare']} ms",
            }
        )
    return out


def render_drivers(section: dict[str, Any]) -> str:
    lines = ["  4. the real agent CLIs on a scripted model server: bare, and one corral round trip (relay + collect)"]
    for kind, why in section["skipped"].items():
        lines.append(f"  {kind}: skipped: {why}")
    if section["drivers"]:
        lines.append(
            f"  {'':8} {'runs':>4} {'bare ms':>8} {'p90':>7} {'corral ms':>10} {'p90':>7} {'overhead':>9}"
            f" {'reserve':>8} {'deliver':>8} {'wait-bare':>10} {'capture':>8}"
        )
    for kind, row in section["drivers"].items():
        bare, corral, parts = row["bare"], row["corral"], row["parts_median_ms"]
        met = "met" if row["overhead_ms"] < DRIVER_TARGET_MS else "NOT met"
        lines.append(
            f"  {kind:8} {row['runs']:4} {bare['median_ms']:8.1f} {bare['p90_ms']:7.1f} {corral['median_ms']:10.1f}"
            f" {corral['p90_ms']:7.1f} {row['overhead_ms']:9.1f} {parts['reserve']:8.1f} {parts['deliver']:8.1f}"
            f" {parts['wait_minus_bare']:10.1f} {parts['capture']:8.1f}  {met}"
        )
    if section["drivers"]:
        lines += [
            "  (medians in ms; overhead = median(corral) - median(bare), target < "
            f"{DRIVER_TARGET_MS:g} ms; the parts are corral's, wait-bare = its wait minus the bare CLI's median)"
        ]
    return "\n".join(lines)


QUICK = {
    "changes": 30,
    "round_trips": 10,
    "cli_runs": 3,
    "rounds": 2,
    "warmup": 1,
    "herdr_changes": 5,
    "driver_runs": 6,
}
FULL = {
    "changes": 200,
    "round_trips": 60,
    "cli_runs": 20,
    "rounds": 4,
    "warmup": 3,
    "herdr_changes": 30,
    "driver_runs": 20,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--changes", type=int, help="status changes per waiter (default: 200; --quick: 30)")
    parser.add_argument("--round-trips", type=int, help="in-process round trips (default: 60; --quick: 10)")
    parser.add_argument("--cli-runs", type=int, help="cold runs of each process (default: 20; --quick: 3)")
    parser.add_argument("--rounds", type=int, help="interleaved rounds (default: 4; --quick: 2)")
    parser.add_argument("--warmup", type=int, help="untimed runs of each first (default: 3; --quick: 1)")
    parser.add_argument("--target-ms", type=float, default=TARGET_MS, help="wake-up median target (default: 10)")
    parser.add_argument("--herdr-changes", type=int, help="changes per Herdr waiter (default: 30; --quick: 5; 0: skip)")
    parser.add_argument(
        "--driver-runs",
        type=int,
        help="prompts per real driver, bare and through corral (default: 20; --quick: 6; 0: skip)",
    )
    parser.add_argument("--only-drivers", action="store_true", help="run section 4 (the real drivers) only")
    parser.add_argument("--quick", action="store_true", help="a short run (about a minute) for bench/summary.py")
    parser.add_argument("--seed", type=int, default=1, help="seed for the writer's pauses and targets (default: 1)")
    parser.add_argument("--dir", type=Path, help="where to put the store and state home (default: a new temp dir)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--writer", metavar="DB", help=argparse.SUPPRESS)  # internal: run as the writer process
    args = parser.parse_args(argv)
    if args.writer:
        return writer_main(args.writer)
    for key, value in (QUICK if args.quick else FULL).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if min(args.changes, args.round_trips, args.cli_runs, args.rounds, args.warmup) < 1:
        parser.error("--changes, --round-trips, --cli-runs, --rounds and --warmup must be >= 1")
    with tempfile.TemporaryDirectory(prefix="corral-bench-agents-", dir=args.dir) as tmp:
        doc: dict[str, Any] = {}
        if not args.only_drivers:
            doc = anyio.run(measure, args, Path(tmp))
            if args.herdr_changes > 0:
                doc["herdr"] = anyio.run(herdr_measure, args.herdr_changes, Path(tmp), args.seed)
        section = {"skipped": {}, "drivers": {}}
        if args.driver_runs > 0:
            section = anyio.run(drivers_measure, args, Path(tmp))
        doc = {"figures": drivers_figures(section) if args.driver_runs > 0 else [], **doc, "real_drivers": section}
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        shown = [] if args.only_drivers else [render(doc)]
        print("\n\n".join([*shown, render_drivers(section)] if args.driver_runs > 0 else shown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
