"""Group commit: 64 coordinators renewing at once on one SQLite store, against one commit per transaction.

Measured in one process and one run, on real SQLite files in ``--dir`` (default: a temporary
directory on the working disk, not tmpfs) with ``synchronous=FULL``, so every commit is fsynced and
the disk's flush rate decides:

(a) bare: a plain :mod:`sqlite3` loop from ``--writers`` threads (64), each its own transaction and
    its own commit (``BEGIN IMMEDIATE``; ``UPDATE instances … WHERE id = ? AND version = ?``;
    ``INSERT INTO events``; ``COMMIT``) on a schema made by ``SQLiteStore``. The threads share one
    connection under a lock, so what serializes them is the commit (one fsync per transaction) and
    nothing else: the floor of one commit per transaction.
(b) corral: ``--writers`` threads of one process, each a coordinator with its own controller lease,
    calling ``Service.controller.renew`` (the whole guarded transition: fence guard, compare-and-set,
    event) on one ``SQLiteStore``; their transactions join groups (``runner.sql.store_sqlite_group``)
    and each call returns after the commit that holds it.

Figure (issue 28): "group commit: 64 concurrent renews on one store, transactions/s / the bare
one-commit-per-transaction rate, synchronous=FULL" (target >= 5x). The detail has both rates, the
commits counted on the store's write connection (``COMMIT`` statements) and the transactions per
commit. ``--quick`` is a run of a few seconds; ``--json`` prints the ``figures`` list
(``bench/README.md``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sqlite3
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from runner.definitions.library import Library
from runner.service import AcquireInput, RenewInput, Service
from runner.sql.store_sqlite import SQLiteStore

FIGURE = (
    "group commit: 64 concurrent renews on one store, transactions/s / the bare one-commit-per-transaction"
    " rate, synchronous=FULL"
)
TARGET = 5.0
AUTHORITY_SHA = hashlib.sha256(b"bench authority").hexdigest()
DATA = '{"bench":"' + "x" * 300 + '"}'  # about a controller lease's data
PAYLOAD = '{"changed":{},"params":{"controller_id":"bench"}}'


def run_threads(writers: int, seconds: float, step_of: Any) -> tuple[int, float, list[int]]:
    """``writers`` threads, each calling its own step until the window ends; (ops, elapsed, per thread)."""
    counts = [0] * writers
    errors: list[str] = []
    start = threading.Barrier(writers + 1)
    stop = threading.Event()

    def work(i: int) -> None:
        step = step_of(i)
        start.wait()
        try:
            n = 0
            while not stop.is_set():
                step()
                n += 1
            counts[i] = n
        except Exception as exc:  # noqa: BLE001 - reason: reported below, a broken benchmark prints no figure
            errors.append(repr(exc))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(writers)]
    for thread in threads:
        thread.start()
    start.wait()
    began = time.perf_counter()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    if errors:
        raise RuntimeError(f"{len(errors)} writers failed: {errors[:3]}")
    return sum(counts), elapsed, counts


def bare(path: Path, writers: int, seconds: float) -> dict[str, Any]:
    SQLiteStore(path).close()  # the schema, WAL mode
    conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    stamp = "2026-01-01T00:00:00.000000Z"
    for i in range(writers):
        conn.execute(
            "INSERT INTO instances (id, machine, state, version, data, created_at, updated_at)"
            " VALUES (?, 'controller', 'active', 1, ?, ?, ?)",
            (f"controller/bare-{i}", DATA, stamp, stamp),
        )
    lock = threading.Lock()

    def step_of(i: int) -> Any:
        row = f"controller/bare-{i}"
        version = [1]

        def step() -> None:
            with lock:
                conn.execute("BEGIN IMMEDIATE")
                cursor = conn.execute(
                    "UPDATE instances SET version = version + 1, data = ?, updated_at = ? WHERE id = ? AND version = ?",
                    (DATA, stamp, row, version[0]),
                )
                if cursor.rowcount != 1:
                    conn.execute("ROLLBACK")
                    raise RuntimeError("bare CAS lost its row: the benchmark is broken")
                version[0] += 1
                conn.execute(
                    "INSERT INTO events (instance_id, machine, trigger, from_state, to_state, version, actor,"
                    " payload, at) VALUES (?, 'controller', 'renew', 'active', 'active', ?, 'bench', ?, ?)",
                    (row, version[0], PAYLOAD, stamp),
                )
                conn.execute("COMMIT")

        return step

    ops, elapsed, _ = run_threads(writers, seconds, step_of)
    conn.close()
    return {"ops": ops, "seconds": round(elapsed, 3), "tx_per_s": round(ops / elapsed, 1), "commits": ops}


def corral(directory: Path, writers: int, seconds: float) -> dict[str, Any]:
    store = SQLiteStore(directory / "corral.db")
    library = Library(cache_dir=directory / "cache" / "specs")
    service = Service(store, library, actor="bench")
    inputs = []
    for i in range(writers):
        name = f"bench-{i}"
        grant = service.controller.acquire(AcquireInput(name, f"BENCH-{i}", AUTHORITY_SHA, 86400, "bench@host"))
        inputs.append(RenewInput(name, grant.credential))
    commits = [0]

    def trace(statement: str) -> None:
        if statement.startswith("COMMIT"):
            commits[0] += 1

    def step_of(i: int) -> Any:
        renew, inp = service.controller.renew, inputs[i]
        return lambda: renew(inp)

    store._conn.set_trace_callback(trace)  # the bench's own counter on the store's write connection
    try:
        ops, elapsed, counts = run_threads(writers, seconds, step_of)
    finally:
        store._conn.set_trace_callback(None)
    # Every acknowledged renew is in the log: one event each, on top of the acquisitions.
    with store.read() as reader:
        leases = [reader.get(f"controller/{f'bench-{i}'}") for i in range(writers)]
    renewed = sum((lease.version - 1) for lease in leases if lease is not None)
    store.close()
    if renewed < ops:
        raise RuntimeError(f"{ops} renews acknowledged but the leases show {renewed}: the benchmark is broken")
    return {
        "ops": ops,
        "seconds": round(elapsed, 3),
        "tx_per_s": round(ops / elapsed, 1),
        "commits": commits[0],
        "tx_per_commit": round(ops / max(1, commits[0]), 1),
        "min_max_share": round(min(counts) / max(1, *counts), 2),
    }


def measure(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    base = bare(tmp / "bare.db", args.writers, args.seconds)
    ours = corral(tmp, args.writers, args.seconds)
    ratio = ours["tx_per_s"] / base["tx_per_s"]
    figure = {
        "figure": FIGURE,
        "value": round(ratio, 2),
        "unit": "x",
        "target": f">= {TARGET:g}x",
        "met": ratio >= TARGET,
        "detail": {"writers": args.writers, "dir": str(tmp), "bare": base, "corral": ours},
    }
    return {"figures": [figure], "python": sys.version.split()[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--writers", type=int, default=64, help="concurrent writers (default: 64)")
    parser.add_argument("--seconds", type=float, default=5.0, help="window of each side (default: 5)")
    parser.add_argument("--quick", action="store_true", help="2 s windows")
    parser.add_argument("--dir", type=Path, help="where to put the store files (default: a new temp dir)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    if args.quick:
        args.seconds = 2.0
    if args.dir is not None:
        args.dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="corral-groupcommit-", dir=args.dir) as tmp:
        result = measure(args, Path(tmp))
    if args.json:
        print(json.dumps(result, indent=2))
        return
    (figure,) = result["figures"]
    detail = figure["detail"]
    print(f"bare, one commit per transaction: {detail['bare']['tx_per_s']:>9.1f} tx/s")
    print(
        f"corral renew, {detail['writers']} writers:      {detail['corral']['tx_per_s']:>9.1f} tx/s"
        f" ({detail['corral']['tx_per_commit']} per commit)"
    )
    print(
        f"{figure['figure']}: {figure['value']}x (target {figure['target']}, {'met' if figure['met'] else 'NOT MET'})"
    )


if __name__ == "__main__":
    main()
