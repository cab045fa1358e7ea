"""What one durable transition costs: the runner's guarded ``renew`` against a bare SQLite CAS and a bare machine.

Measured in one process and one run, on real SQLite files in a temporary directory with the store's
pragmas (WAL, ``synchronous=FULL``), so that the figures can be read as ratios:

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

Target: the runner's transition costs at most 2x the bare store transaction (``--target``).
The benchmarks run interleaved in ``--rounds`` rounds so that drift of a noisy machine hits them alike.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import sqlite3
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
from runner.store.sqlite import SQLiteStore

CONTROLLER = "bench"
AUTHORITY_SHA = hashlib.sha256(b"bench authority").hexdigest()
TARGET_RATIO = 2.0

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
    round_rates: list[float] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.ops / self.seconds

    @property
    def us_per_op(self) -> float:
        return self.seconds / self.ops * 1e6

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "ops": self.ops,
            "seconds": round(self.seconds, 6),
            "ops_per_s": round(self.rate, 1),
            "us_per_op": round(self.us_per_op, 3),
            "round_ops_per_s": [round(r, 1) for r in self.round_rates],
        }


def run_for(bench: Bench, seconds: float) -> tuple[int, float]:
    """Run ``bench.step`` in batches until ``seconds`` have passed; return (ops, elapsed)."""
    step, batch = bench.step, bench.batch
    ops = 0
    start = time.perf_counter()
    deadline = start + seconds
    while True:
        for _ in range(batch):
            step()
        ops += batch
        now = time.perf_counter()
        if now >= deadline:
            return ops, now - start


def warm_up(bench: Bench, seconds: float) -> None:
    """Run for ``seconds`` (caches, page cache, WAL growth) and size the batch to about 5 ms."""
    ops, elapsed = run_for(bench, seconds)
    bench.batch = max(1, int(ops / elapsed * 0.005))


# --- (a) bare store -------------------------------------------------------------------------------


def bare_store(path: Path, data: str, payload: str) -> Step:
    """A hand-written CAS transaction on the store's schema, on a connection of our own."""
    SQLiteStore(path).close()  # creates the schema (and WAL mode, which is persistent)
    conn = sqlite3.connect(str(path), isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
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
    def open(cls, directory: Path) -> Runner:
        store = SQLiteStore(directory / "runner.db")
        library = Library(cache_dir=directory / "cache" / "specs")
        service = Service(store, library, actor="bench")
        grant = service.acquire(AcquireInput(CONTROLLER, "BENCH-1", AUTHORITY_SHA, 86400, "bench@host"))
        return cls(store, library, service, RenewInput(CONTROLLER, grant.credential))

    def renew(self) -> Step:
        service, inp = self.service, self.renew_input

        def step() -> None:
            service.renew(inp)

        return step

    def encoded_row(self) -> tuple[str, str]:
        """The lease's data and its latest event payload as stored, for (a) to write the same bytes."""
        self.service.renew(self.renew_input)
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


# --- report ---------------------------------------------------------------------------------------


def measure(directory: Path, seconds: float, rounds: int, warmup: float) -> tuple[list[Bench], dict[str, Any]]:
    runner = Runner.open(directory)
    data, payload = runner.encoded_row()
    benches = [
        Bench("bare_store", "(a) bare store CAS transaction", bare_store(directory / "bare.db", data, payload)),
        Bench("runner", "(b) runner renew (Service.renew)", runner.renew()),
        Bench("bare_machine", "(c) bare transitions trigger", bare_machine()),
        Bench("adapter", "store adapter txn: get + put + append", runner.adapter(), main=False),
        Bench("spec_lookup", "Library.builtin('controller'), 2 per renew", runner.spec_lookup(), main=False),
        Bench("table_fire", "TransitionTable.fire('renew') + read snapshot", runner.table_fire(), main=False),
    ]
    for bench in benches:
        warm_up(bench, warmup)
    for index in range(rounds):
        # Alternate the order so that neither end of a round is always the same benchmark.
        for bench in benches if index % 2 == 0 else benches[::-1]:
            ops, elapsed = run_for(bench, seconds / rounds)
            bench.ops += ops
            bench.seconds += elapsed
            bench.round_rates.append(ops / elapsed)
    runner.check()
    runner.store.close()
    context = {
        "corral": __version__,
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "directory": str(directory),
        "journal_mode": "wal",
        "synchronous": "full",
        "seconds_per_benchmark": seconds,
        "rounds": rounds,
        "warmup_seconds": warmup,
        "data_bytes": len(data),
        "payload_bytes": len(payload),
    }
    return benches, context


def ratios(by_key: dict[str, Bench], target: float) -> dict[str, Any]:
    runner_vs_store = by_key["runner"].us_per_op / by_key["bare_store"].us_per_op
    store_vs_machine = by_key["bare_store"].us_per_op / by_key["bare_machine"].us_per_op
    engine_overhead = by_key["runner"].us_per_op - by_key["adapter"].us_per_op
    return {
        "runner_over_bare_store": round(runner_vs_store, 3),
        "bare_store_over_bare_machine": round(store_vs_machine, 1),
        "runner_minus_adapter_us": round(engine_overhead, 1),
        "target_runner_over_bare_store": target,
        "target_met": runner_vs_store <= target,
    }


def render(benches: list[Bench], context: dict[str, Any], summary: dict[str, Any]) -> str:
    lines = [
        f"corral {context['corral']} transition benchmark: Python {context['python']}, SQLite {context['sqlite']}, "
        "WAL, synchronous=FULL",
        f"  {context['rounds']} interleaved rounds, {context['seconds_per_benchmark']:g} s per benchmark, "
        f"in {context['directory']} (data {context['data_bytes']} B, event payload {context['payload_bytes']} B)",
        "",
        f"  {'':52} {'ops/s':>11} {'µs/op':>10}",
    ]
    for bench in benches:
        if bench.main:
            lines.append(f"  {bench.label:52} {bench.rate:11,.0f} {bench.us_per_op:10.1f}")
    lines += ["", "  pieces of (b), to see where its time goes:"]
    for bench in benches:
        if not bench.main:
            lines.append(f"    {bench.label:50} {bench.rate:11,.0f} {bench.us_per_op:10.1f}")
    met = "met" if summary["target_met"] else "NOT met"
    lines += [
        "",
        f"  runner / bare store:       {summary['runner_over_bare_store']:7.2f}x   "
        f"(target <= {summary['target_runner_over_bare_store']:g}x: {met})",
        f"  bare store / bare machine: {summary['bare_store_over_bare_machine']:7.1f}x",
        f"  runner - store adapter:    {summary['runner_minus_adapter_us']:7.1f} µs per renew outside the store",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="measured time per benchmark (default: 2)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds the time is split into (default: 3)")
    parser.add_argument("--warmup", type=float, default=0.5, help="warm-up time per benchmark (default: 0.5)")
    parser.add_argument("--target", type=float, default=TARGET_RATIO, help="runner/bare-store target (default: 2)")
    parser.add_argument("--dir", type=Path, help="where to put the SQLite files (default: a new temp directory)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    if args.seconds <= 0 or args.rounds < 1 or args.warmup < 0:
        parser.error("--seconds must be > 0, --rounds >= 1 and --warmup >= 0")
    with tempfile.TemporaryDirectory(prefix="corral-bench-", dir=args.dir) as tmp:
        benches, context = measure(Path(tmp), args.seconds, args.rounds, args.warmup)
    by_key = {bench.key: bench for bench in benches}
    summary = ratios(by_key, args.target)
    if args.json:
        doc = {"context": context, "results": {b.key: b.to_dict() for b in benches}, "ratios": summary}
        print(json.dumps(doc, indent=2))
    else:
        print(render(benches, context, summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
