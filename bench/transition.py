"""What one durable transition costs: the runner's guarded ``renew`` against a bare SQLite CAS and a bare machine.

Measured in one process and one run, on real SQLite files with the store's pragmas (WAL), so that
the figures can be read as ratios:

(a) bare store: a compare-and-set written by hand with :mod:`sqlite3` on a schema created by
    ``SQLiteStore`` (``BEGIN IMMEDIATE``; ``UPDATE instances … WHERE id = ? AND version = ?``; check the
    row count; ``INSERT INTO events``; ``COMMIT``), writing pre-encoded data and payload of the same size
    as a controller lease's, so it does the same I/O as (b) and nothing else;
(b) runner: ``Service.renew`` with a held credential, in-process: spec lookup, the transition table,
    the fence guard, the ``extend_lease`` update, the data check, the CAS and the event, then the view;
(c) bare machine: a ``transitions.Machine`` self-transition fired on a model bound once.

Then, to say where (b)'s time goes, the pieces of (b) on their own: the store adapter's transaction
(``SQLiteStore.write`` with ``get``/``put``/``append``, no engine), ``Library.builtin`` (the service calls
it twice per renew) and ``TransitionTable.fire`` for ``renew`` (fence guard included) in a read snapshot.

Two durability modes, each its own set of files (``--synchronous``, default both):

* ``off``: ``synchronous=OFF`` on every connection and the files on tmpfs (``/dev/shm``): no fsync,
  so what is left is the CPU cost. Issue 13's row: runner / bare store **<= 2.5x** (``--target-off``),
  judged on CPU time (``time.thread_time``), which a noisy shared machine disturbs least.
* ``full``: the store's own ``synchronous=FULL`` in ``--dir`` (a temporary directory): every commit
  fsynced, the disk decides. Kept as detail (the older target, ``--target``, 2x).

``--compare ROOT`` runs (a) and (b) a second time with the corral found in ROOT (``/work/main``, say) in a
worker process, interleaved round by round with this one's, so a change's before and after come
from the same run. ``--quick`` is a run of a few seconds; ``--json`` prints the figures (a
``figures`` list, as ``bench/summary.py`` reads them).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from transitions import Machine

from runner import fence
from runner._version import __version__
from runner.context import Context, Instance
from runner.definitions.library import Library
from runner.service import AcquireInput, RenewInput, Service
from runner.sql.store_sqlite import SQLiteStore

CONTROLLER = "bench"
AUTHORITY_SHA = hashlib.sha256(b"bench authority").hexdigest()
TARGET_RATIO = 2.0  # synchronous=FULL, the older target
TARGET_OFF = 2.5  # synchronous=OFF on tmpfs: issue 13's row
FIGURE_OFF = "runner `renew` / bare SQLite CAS, with `synchronous=OFF` on tmpfs (the CPU cost, fsync removed)"
TMPFS = Path("/dev/shm")

Step = Callable[[], None]


@dataclass
class Bench:
    """One measured operation and what it accumulated over the rounds."""

    key: str
    label: str
    step: Step
    main: bool = True  # False: one of the pieces of (b), shown to explain it
    batch: int = 1  # steps between clock reads, sized in the warm-up so reading the clock costs nothing
    ops: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0  # this thread's CPU time over the same batches
    round_rates: list[float] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.ops / self.seconds

    @property
    def us_per_op(self) -> float:
        return self.seconds / self.ops * 1e6

    @property
    def cpu_us_per_op(self) -> float:
        return self.cpu_seconds / self.ops * 1e6

    def add(self, ops: int, elapsed: float, cpu: float) -> None:
        self.ops += ops
        self.seconds += elapsed
        self.cpu_seconds += cpu
        self.round_rates.append(ops / elapsed)

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "ops": self.ops,
            "seconds": round(self.seconds, 6),
            "ops_per_s": round(self.rate, 1),
            "us_per_op": round(self.us_per_op, 3),
            "cpu_us_per_op": round(self.cpu_us_per_op, 3),
            "round_ops_per_s": [round(r, 1) for r in self.round_rates],
        }


def run_for(bench: Bench, seconds: float) -> tuple[int, float, float]:
    """Run ``bench.step`` in batches until ``seconds`` have passed; return (ops, elapsed, CPU seconds)."""
    step, batch = bench.step, bench.batch
    ops = 0
    cpu = time.thread_time()
    start = time.perf_counter()
    deadline = start + seconds
    while True:
        for _ in range(batch):
            step()
        ops += batch
        now = time.perf_counter()
        if now >= deadline:
            return ops, now - start, time.thread_time() - cpu


def warm_up(bench: Bench, seconds: float) -> None:
    """Run for ``seconds`` (caches, page cache, WAL growth) and size the batch to about 5 ms."""
    ops, elapsed, _ = run_for(bench, seconds)
    bench.batch = max(1, int(ops / elapsed * 0.005))


# --- (a) bare store -------------------------------------------------------------------------------


def bare_store(path: Path, data: str, payload: str, synchronous: str = "full") -> Step:
    """A hand-written CAS transaction on the store's schema, on a connection of our own."""
    SQLiteStore(path).close()  # creates the schema (and WAL mode, which is persistent)
    conn = sqlite3.connect(str(path), isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {synchronous.upper()}")
    conn.execute("PRAGMA busy_timeout = 20")
    stamp = "2026-01-01T00:00:00.000000Z"
    conn.execute(
        "INSERT INTO instances (id, machine, state, version, data, created_at, updated_at)"
        " VALUES (?, 'controller', 'active', 1, ?, ?, ?)",
        ("controller/bare", data, stamp, stamp),
    )
    version = 1

    def step() -> None:
        nonlocal version
        conn.execute("BEGIN IMMEDIATE")
        cursor = conn.execute(
            "UPDATE instances SET state = ?, version = version + 1, data = ?, updated_at = ?"
            " WHERE id = ? AND version = ?",
            ("active", data, stamp, "controller/bare", version),
        )
        if cursor.rowcount != 1:
            conn.execute("ROLLBACK")
            raise RuntimeError("bare CAS lost its row: the benchmark is broken")
        version += 1
        conn.execute(
            "INSERT INTO events (instance_id, machine, trigger, from_state, to_state, version, actor, payload, at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            ("controller/bare", "controller", "renew", "active", "active", version, "bench", payload, stamp),
        )
        conn.execute("COMMIT")

    return step


# --- (b) the runner and its pieces ----------------------------------------------------------------


@dataclass
class Runner:
    """A service over its own SQLite file, holding a lease on ``CONTROLLER``."""

    store: SQLiteStore
    library: Library
    service: Service
    renew_input: RenewInput

    @classmethod
    def open(cls, directory: Path, synchronous: str = "full") -> Runner:
        store = SQLiteStore(directory / "runner.db")
        if synchronous != "full":
            # The store sets FULL on its connection when it opens; a benchmark of the CPU cost lowers it.
            store._conn.execute(f"PRAGMA synchronous = {synchronous.upper()}")
        library = Library(cache_dir=directory / "cache" / "specs")
        service = Service(store, library, actor="bench")
        grant = service.controller.acquire(AcquireInput(CONTROLLER, "BENCH-1", AUTHORITY_SHA, 86400, "bench@host"))
        return cls(store, library, service, RenewInput(CONTROLLER, grant.credential))

    def renew(self) -> Step:
        service, inp = self.service, self.renew_input

        def step() -> None:
            service.controller.renew(inp)

        return step

    def encoded_row(self) -> tuple[str, str]:
        """The lease's data and its latest event payload as stored, for (a) to write the same bytes."""
        self.service.controller.renew(self.renew_input)
        with self.store.read() as reader:
            lease = reader.get(fence.instance_id(CONTROLLER))
        assert lease is not None
        (event,) = self.store.events(instance_id=lease.id, since=0)[-1:]
        encode = json.JSONEncoder(sort_keys=True, separators=(",", ":")).encode
        return encode(dict(lease.data)), encode(dict(event.payload))

    def adapter(self) -> Step:
        """The store adapter's CAS with the same data, without the engine: get, put, append."""
        store, instance_id = self.store, fence.instance_id(CONTROLLER)
        payload = {"params": {"controller_id": CONTROLLER}, "changed": {}}

        def step() -> None:
            with store.write() as tx:
                before = tx.get(instance_id)
                assert before is not None
                after = tx.put(before, before.state, before.data)
                tx.append(after, "renew", before.state, "bench", payload)

        return step

    def spec_lookup(self) -> Step:
        library = self.library

        def step() -> None:
            library.builtin("controller")

        return step

    def table_fire(self) -> Step:
        """``TransitionTable.fire('renew')`` as the engine calls it, guards included, in a read snapshot."""
        spec = self.library.builtin("controller")
        table = self.library.table(spec)
        credential = self.renew_input.credential
        params = {
            "controller_id": CONTROLLER,
            "lease_id": credential.lease_id,
            "generation": credential.generation,
        }
        instance_id = fence.instance_id(CONTROLLER)
        store = self.store

        def step() -> None:
            with store.read() as reader:
                lease = reader.get(instance_id)
                assert lease is not None
                ctx = Context(
                    instance=lease,
                    trigger="renew",
                    params=params,
                    secrets={"token": credential.token},
                    observations={},
                    now=datetime.now(UTC),
                    view=reader,
                    actor="bench",
                    data=lease.data,
                )
                if table.fire("renew", lease.state, ctx).chosen is None:
                    raise RuntimeError("the fence guard refused the benchmark's own credential")

        return step

    def check(self) -> Instance:
        with self.store.read() as reader:
            lease = reader.get(fence.instance_id(CONTROLLER))
        assert lease is not None and lease.state == "active"
        return lease


# --- (c) bare machine -----------------------------------------------------------------------------


class _Model:
    state: str


def bare_machine() -> Step:
    """A three-state machine and one model; ``tick`` is an active -> active self-transition."""
    model = _Model()
    Machine(
        model=model,
        states=["absent", "active", "released"],
        transitions=[
            {"trigger": "acquire", "source": "absent", "dest": "active"},
            {"trigger": "tick", "source": "active", "dest": "active"},
            {"trigger": "release", "source": "active", "dest": "released"},
        ],
        initial="active",
        auto_transitions=False,
    )
    trigger: Callable[[], bool] = model.tick  # type: ignore[attr-defined]  # added by transitions

    def step() -> None:
        trigger()

    return step


# --- the same benchmarks with another checkout's corral, in a worker process ---------------------


class Remote:
    """(a) and (b) run by a worker process that imports corral from ``root``, one round at a time.

    The worker is this script with ``--worker``; only the modules it imports come from ``root``. It
    runs when told, between this process's own benchmarks, so both see the same machine.
    """

    def __init__(self, root: Path, synchronous: str, directory: Path, warmup: float) -> None:
        env = {**os.environ, "PYTHONPATH": str(root.resolve())}
        argv = [sys.executable, __file__, "--worker", "--synchronous", synchronous, "--dir", str(directory)]
        argv += ["--warmup", str(warmup)]
        self.root = root
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True)
        hello = self._read()
        self.corral = str(hello["corral"])
        self.benches = {
            "bare_store": Bench("bare_store", f"(a) bare store CAS [{root}]", _nothing),
            "runner": Bench("runner", f"(b) runner renew [{root}, corral {self.corral}]", _nothing),
        }

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"the worker for {self.root} exited with status {self.proc.wait()}")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def round(self, seconds: float, reverse: bool) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"seconds": seconds, "reverse": reverse}) + "\n")
        self.proc.stdin.flush()
        for key, (ops, elapsed, cpu) in self._read().items():
            self.benches[key].add(ops, elapsed, cpu)

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def _nothing() -> None:
    raise AssertionError("a remote benchmark runs in its worker")


def worker(directory: Path, synchronous: str, warmup: float) -> int:
    """The ``--worker`` loop: (a) and (b) on files of its own, one round per request on stdin."""
    runner = Runner.open(directory, synchronous)
    data, payload = runner.encoded_row()
    benches = [
        Bench("bare_store", "bare", bare_store(directory / "bare.db", data, payload, synchronous)),
        Bench("runner", "runner", runner.renew()),
    ]
    for bench in benches:
        warm_up(bench, warmup)
    print(json.dumps({"corral": __version__}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        answer = {}
        for bench in benches[::-1] if request["reverse"] else benches:
            answer[bench.key] = run_for(bench, request["seconds"])
        print(json.dumps(answer), flush=True)
    runner.check()
    runner.store.close()
    return 0


# --- report ---------------------------------------------------------------------------------------


@dataclass
class Mode:
    """One durability mode's run: its benchmarks, where its files were, and the other checkout's."""

    synchronous: str
    directory: str
    benches: list[Bench]
    data_bytes: int
    payload_bytes: int
    remote: Remote | None = None

    @property
    def by_key(self) -> dict[str, Bench]:
        return {bench.key: bench for bench in self.benches}


def measure(
    directory: Path,
    synchronous: str,
    seconds: float,
    rounds: int,
    warmup: float,
    pieces: bool = True,
    compare: Path | None = None,
) -> Mode:
    runner = Runner.open(directory, synchronous)
    data, payload = runner.encoded_row()
    benches = [
        Bench(
            "bare_store",
            "(a) bare store CAS transaction",
            bare_store(directory / "bare.db", data, payload, synchronous),
        ),
        Bench("runner", "(b) runner renew (Service.renew)", runner.renew()),
        Bench("bare_machine", "(c) bare transitions trigger", bare_machine()),
    ]
    if pieces:
        benches += [
            Bench("adapter", "store adapter txn: get + put + append", runner.adapter(), main=False),
            Bench("spec_lookup", "Library.builtin('controller'), 2 per renew", runner.spec_lookup(), main=False),
            Bench("table_fire", "TransitionTable.fire('renew') + read snapshot", runner.table_fire(), main=False),
        ]
    remote = None
    if compare is not None:
        (directory / "compare").mkdir()
        remote = Remote(compare, synchronous, directory / "compare", warmup)
    for bench in benches:
        warm_up(bench, warmup)
    per = seconds / rounds
    for index in range(rounds):
        # Alternate the order so that neither end of a round is always the same benchmark.
        for bench in benches if index % 2 == 0 else benches[::-1]:
            bench.add(*run_for(bench, per))
        if remote is not None:
            remote.round(per, reverse=index % 2 == 1)
    runner.check()
    runner.store.close()
    if remote is not None:
        remote.close()
    return Mode(synchronous, str(directory), benches, len(data), len(payload), remote)


def ratios(mode: Mode, target: float) -> dict[str, Any]:
    by_key = mode.by_key
    runner, bare = by_key["runner"], by_key["bare_store"]
    out: dict[str, Any] = {
        "runner_over_bare_store": round(runner.us_per_op / bare.us_per_op, 3),
        "runner_over_bare_store_cpu": round(runner.cpu_us_per_op / bare.cpu_us_per_op, 3),
        "bare_store_over_bare_machine": round(bare.us_per_op / by_key["bare_machine"].us_per_op, 1),
        "target_runner_over_bare_store": target,
    }
    judged = out["runner_over_bare_store_cpu" if mode.synchronous == "off" else "runner_over_bare_store"]
    out["target_met"] = judged <= target
    if "adapter" in by_key:
        out["runner_minus_adapter_us"] = round(runner.us_per_op - by_key["adapter"].us_per_op, 1)
        out["runner_minus_adapter_cpu_us"] = round(runner.cpu_us_per_op - by_key["adapter"].cpu_us_per_op, 1)
    if mode.remote is not None:
        other = mode.remote.benches
        out["compare_root"] = str(mode.remote.root)
        out["compare_runner_over_bare_store"] = round(other["runner"].us_per_op / other["bare_store"].us_per_op, 3)
        out["compare_runner_over_bare_store_cpu"] = round(
            other["runner"].cpu_us_per_op / other["bare_store"].cpu_us_per_op, 3
        )
        out["runner_cpu_us_here_over_compare"] = round(runner.cpu_us_per_op / other["runner"].cpu_us_per_op, 3)
    return out


def figures(modes: dict[str, Mode], summaries: dict[str, dict[str, Any]], target_off: float) -> list[dict[str, Any]]:
    """Issue 13's row (synchronous=OFF on tmpfs, CPU time), with the FULL figures as its detail."""
    if "off" not in summaries:
        return []
    off, bench = summaries["off"], modes["off"].by_key
    detail = (
        f"renew {bench['runner'].cpu_us_per_op:.1f} µs CPU / bare CAS {bench['bare_store'].cpu_us_per_op:.1f} µs CPU "
        f"(wall {bench['runner'].us_per_op:.1f} / {bench['bare_store'].us_per_op:.1f} µs = "
        f"{off['runner_over_bare_store']:.2f}x) in {modes['off'].directory}"
    )
    if "compare_root" in off:
        detail += (
            f"; {off['compare_root']} in the same run: {off['compare_runner_over_bare_store_cpu']:.2f}x CPU "
            f"({off['compare_runner_over_bare_store']:.2f}x wall), renew CPU here / there "
            f"{off['runner_cpu_us_here_over_compare']:.2f}"
        )
    if "full" in summaries:
        full, fb = summaries["full"], modes["full"].by_key
        detail += (
            f"; synchronous=FULL in {modes['full'].directory}: renew {fb['runner'].us_per_op:.0f} µs / bare "
            f"{fb['bare_store'].us_per_op:.0f} µs = {full['runner_over_bare_store']:.2f}x "
            f"(target <= {full['target_runner_over_bare_store']:g}x)"
        )
        if "compare_root" in full:
            detail += f", {full['compare_root']}: {full['compare_runner_over_bare_store']:.2f}x"
    value = off["runner_over_bare_store_cpu"]
    return [
        {
            "figure": FIGURE_OFF,
            "value": value,
            "unit": "x",
            "target": f"<= {target_off:g}x",
            "met": value <= target_off,
            "detail": detail,
        }
    ]


def render(mode: Mode, context: dict[str, Any], summary: dict[str, Any]) -> str:
    journal = f"WAL, synchronous={mode.synchronous.upper()}"
    lines = [
        f"corral {context['corral']} transition benchmark: Python {context['python']}, SQLite {context['sqlite']}, "
        f"{journal}",
        f"  {context['rounds']} interleaved rounds, {context['seconds_per_benchmark']:g} s per benchmark, "
        f"in {mode.directory} (data {mode.data_bytes} B, event payload {mode.payload_bytes} B)",
        "",
        f"  {'':52} {'ops/s':>11} {'µs/op':>10} {'CPU µs/op':>10}",
    ]
    rows = [(b, "  ", 52) for b in mode.benches if b.main]
    if mode.remote is not None:
        rows += [(b, "  ", 52) for b in mode.remote.benches.values()]
    for bench, indent, width in rows:
        lines.append(
            f"{indent}{bench.label:{width}} {bench.rate:11,.0f} {bench.us_per_op:10.1f} {bench.cpu_us_per_op:10.1f}"
        )
    pieces = [b for b in mode.benches if not b.main]
    if pieces:
        lines += ["", "  pieces of (b), to see where its time goes:"]
        for bench in pieces:
            lines.append(
                f"    {bench.label:50} {bench.rate:11,.0f} {bench.us_per_op:10.1f} {bench.cpu_us_per_op:10.1f}"
            )
    met = "met" if summary["target_met"] else "NOT met"
    judged = "CPU" if mode.synchronous == "off" else "wall"
    lines += [
        "",
        f"  runner / bare store:       {summary['runner_over_bare_store']:7.2f}x wall, "
        f"{summary['runner_over_bare_store_cpu']:.2f}x CPU   "
        f"(target <= {summary['target_runner_over_bare_store']:g}x, {judged}: {met})",
        f"  bare store / bare machine: {summary['bare_store_over_bare_machine']:7.1f}x",
    ]
    if "runner_minus_adapter_us" in summary:
        lines.append(
            f"  runner - store adapter:    {summary['runner_minus_adapter_us']:7.1f} µs per renew outside the store "
            f"({summary['runner_minus_adapter_cpu_us']:.1f} µs CPU)"
        )
    if "compare_root" in summary:
        lines.append(
            f"  {summary['compare_root']}: runner / bare store {summary['compare_runner_over_bare_store']:.2f}x wall, "
            f"{summary['compare_runner_over_bare_store_cpu']:.2f}x CPU; renew CPU here / there "
            f"{summary['runner_cpu_us_here_over_compare']:.2f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="measured time per benchmark (default: 2)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds the time is split into (default: 3)")
    parser.add_argument("--warmup", type=float, default=0.5, help="warm-up time per benchmark (default: 0.5)")
    parser.add_argument("--target", type=float, default=TARGET_RATIO, help="FULL runner/bare-store target (default: 2)")
    parser.add_argument(
        "--target-off", type=float, default=TARGET_OFF, help="OFF (tmpfs) runner/bare-store CPU target (default: 2.5)"
    )
    parser.add_argument(
        "--synchronous",
        choices=["off", "full", "both"],
        default="both",
        help="off: synchronous=OFF on tmpfs (the CPU cost); full: the store's FULL in --dir (default: both)",
    )
    parser.add_argument("--dir", type=Path, help="where the FULL files go (default: a new temp directory)")
    parser.add_argument("--tmpfs", type=Path, default=TMPFS, help="where the OFF files go (default: /dev/shm)")
    parser.add_argument("--compare", type=Path, metavar="ROOT", help="also run (a) and (b) with the corral in ROOT")
    parser.add_argument("--quick", action="store_true", help="a run of a few seconds (fewer rounds, no pieces)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args.dir, args.synchronous, args.warmup)
    if args.quick:
        args.seconds, args.rounds, args.warmup = 0.6, 3, 0.15
    if args.seconds <= 0 or args.rounds < 1 or args.warmup < 0:
        parser.error("--seconds must be > 0, --rounds >= 1 and --warmup >= 0")
    wanted = ["off", "full"] if args.synchronous == "both" else [args.synchronous]
    modes: dict[str, Mode] = {}
    summaries: dict[str, dict[str, Any]] = {}
    notes: list[str] = []
    for synchronous in wanted:
        base = args.dir
        if synchronous == "off":
            base = args.tmpfs if args.tmpfs.is_dir() else args.dir
            if not args.tmpfs.is_dir():
                notes.append(f"{args.tmpfs} is not a directory: the OFF files are on the default temp filesystem")
        # The pieces explain the row (OFF); FULL keeps only the three main benchmarks when quick.
        pieces = not args.quick or synchronous == "off"
        with tempfile.TemporaryDirectory(prefix="corral-bench-", dir=base) as tmp:
            modes[synchronous] = measure(
                Path(tmp), synchronous, args.seconds, args.rounds, args.warmup, pieces, args.compare
            )
        target = args.target_off if synchronous == "off" else args.target
        summaries[synchronous] = ratios(modes[synchronous], target)
    context = {
        "corral": __version__,
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "journal_mode": "wal",
        "seconds_per_benchmark": args.seconds,
        "rounds": args.rounds,
        "warmup_seconds": args.warmup,
        "quick": args.quick,
        "notes": notes,
    }
    figs = figures(modes, summaries, args.target_off)
    if args.json:
        doc = {
            "context": context,
            "modes": {
                name: {
                    "synchronous": name,
                    "directory": mode.directory,
                    "data_bytes": mode.data_bytes,
                    "payload_bytes": mode.payload_bytes,
                    "results": {b.key: b.to_dict() for b in mode.benches},
                    "compare": {k: b.to_dict() for k, b in mode.remote.benches.items()} if mode.remote else None,
                    "ratios": summaries[name],
                }
                for name, mode in modes.items()
            },
            "figures": figs,
        }
        print(json.dumps(doc, indent=2))
    else:
        blocks = [render(mode, context, summaries[name]) for name, mode in modes.items()]
        print("\n\n".join(blocks + notes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
