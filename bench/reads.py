"""Peak memory of reading the event log: ``corral events --json`` and ``corral events --follow``.

A store with ``--events`` events (1M; ``--quick``: 100k) is built fast: the schema by the code
measured (``corral status`` through it), then the rows inserted with ``sqlite3`` directly, of the size
and shape of a lease renew's event. Then each command runs in a child process whose peak RSS comes
from ``os.wait4``: ``events --json > /dev/null`` to the end, and ``events --follow --json`` killed once
it has printed the whole backlog. ``--root DIR`` measures another checkout's code on the same file
(``--baseline DIR``, default ``/work/main`` when it exists and is not this checkout, runs first: a
baseline whose schema is older must meet the file before this code migrates it).

Also measured, with this code only: ``corral events prune --keep 1000`` over the whole log, timed,
while another connection commits a small write in a loop; the longest of those writes shows how long
the prune held the write lock at a stretch (the target is no stretch of seconds).

Target: peak RSS < 60 MB for both commands.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TARGET_MB = 60.0
PAYLOAD = json.dumps(
    {
        "changed": {"expires_at": "2026-12-01T14:58:30.342880Z", "renewed_at": "2026-12-01T14:43:30.342880Z"},
        "params": {"controller_id": "bench", "generation": 1, "lease_id": "e86e07f4-42fd-486f-88fa-ac5acec57b93"},
    },
    sort_keys=True,
    separators=(",", ":"),
)


def env_for(root: Path, home: Path, store: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
    env.update(PYTHONPATH=str(root), CORRAL_HOME=str(home), CORRAL_STORE=f"sqlite://{store}")
    return env


def corral(*args: str) -> list[str]:
    """A ``corral`` command line run by the code ``PYTHONPATH`` names (see :func:`env_for`)."""
    return [sys.executable, "-m", "runner.cli", *args]


def build(root: Path, home: Path, store: Path, count: int) -> float:
    """The store's schema made by ``root``'s code, then ``count`` events inserted raw; seconds taken."""
    started = time.perf_counter()
    subprocess.run(corral("status", "--json"), env=env_for(root, home, store), check=True,
                   capture_output=True)  # fmt: skip
    conn = sqlite3.connect(store, isolation_level=None)
    conn.execute("PRAGMA synchronous = OFF")
    conn.execute("BEGIN")
    stamp = "2026-12-01T14:43:30.342880Z"
    rows = (
        (f"controller/c{i % 100}", "controller", "renew", "active", "active", i + 1, "cli:bench@host:1", PAYLOAD, stamp)
        for i in range(count)
    )
    conn.executemany(
        "INSERT INTO events (instance_id, machine, trigger, from_state, to_state, version, actor, payload, at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        rows,
    )
    conn.execute("COMMIT")
    conn.close()
    return time.perf_counter() - started


def measure(argv: list[str], env: dict[str, str], stop_after: int | None) -> dict[str, Any]:
    """Run ``argv``; its peak RSS (MB) and wall time. ``stop_after``: read that many lines, then kill it."""
    started = time.perf_counter()
    if stop_after is None:
        with open(os.devnull, "wb") as sink:
            proc = subprocess.Popen(argv, env=env, stdout=sink, stderr=subprocess.PIPE)
            _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.read().decode()}")  # type: ignore[union-attr]
        lines = None
    else:
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert proc.stdout is not None
        lines = 0
        for _ in proc.stdout:
            lines += 1
            if lines >= stop_after:
                break
        proc.send_signal(signal.SIGKILL)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if lines < stop_after:
            raise SystemExit(f"{' '.join(argv)} printed {lines} of {stop_after} events and stopped")
    return {
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),  # kilobytes on Linux
        "seconds": round(time.perf_counter() - started, 2),
        **({"lines": lines} if lines is not None else {}),
    }


def run_reads(root: Path, home: Path, store: Path, count: int) -> dict[str, Any]:
    env = env_for(root, home, store)
    return {
        "events_json": measure(corral("events", "--json"), env, None),
        "follow": measure(corral("events", "--follow", "--json"), env, count),
    }


def prune_probe(root: Path, store: Path, count: int) -> dict[str, Any]:
    """Prune all but 1000 events in-process with ``root``'s code while another connection writes."""
    sys.path.insert(0, str(root))
    import runner
    from runner.sql.store_sqlite import SQLiteStore

    assert Path(runner.__file__).resolve().is_relative_to(root), f"runner imported from {runner.__file__}"

    stop = threading.Event()
    waits: list[float] = []

    def writer() -> None:
        with SQLiteStore(store, busy_deadline=60) as other:
            while not stop.is_set():
                began = time.perf_counter()
                with other.write() as tx:
                    tx.next_number("bench-probe")
                waits.append(time.perf_counter() - began)
                time.sleep(0.005)

    with SQLiteStore(store, busy_deadline=60) as main:
        probe = threading.Thread(target=writer)
        probe.start()
        began = time.perf_counter()
        pruned = main.prune_events(keep=1000)
        seconds = time.perf_counter() - began
        stop.set()
        probe.join()
        floor = main.retention_floor()
    return {
        "events_deleted": pruned.events,
        "batches": pruned.batches,
        "floor": floor,
        "seconds": round(seconds, 2),
        "probe_writes": len(waits),
        "probe_write_max_ms": round(max(waits) * 1000, 1) if waits else None,
        "expected_deleted": count - 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000, help="events in the store (default: 1M)")
    parser.add_argument("--quick", action="store_true", help="100k events (a run of seconds)")
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout whose code is measured")
    parser.add_argument(
        "--baseline", type=Path, help="a checkout measured first on the same file (default: /work/main)"
    )
    parser.add_argument("--no-baseline", action="store_true", help="measure --root only")
    parser.add_argument("--dir", type=Path, help="where the temporary store goes")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    count = 100_000 if args.quick else args.events
    root = args.root.resolve()
    baseline = args.baseline
    if baseline is None and not args.no_baseline and Path("/work/main").is_dir():
        baseline = Path("/work/main")
    if baseline is not None and (args.no_baseline or baseline.resolve() == root):
        baseline = None
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="corral-bench-reads-") as tmp:
        home, store = Path(tmp) / "home", Path(tmp) / "events.db"
        home.mkdir(mode=0o700)
        built = build(baseline or root, home, store, count)
        before = run_reads(baseline.resolve(), home, store, count) if baseline is not None else None
        after = run_reads(root, home, store, count)
        prune = prune_probe(root, store, count)
    figures = []
    for key, name in (
        ("events_json", "peak RSS of corral events --json over 1M events"),
        ("follow", "peak RSS of corral events --follow"),
    ):
        value = after[key]["peak_rss_mb"]
        was = f"; before ({baseline}): {before[key]['peak_rss_mb']} MB in {before[key]['seconds']} s" if before else ""
        figures.append(
            {
                "figure": name,
                "value": value,
                "unit": "MB",
                "target": f"< {TARGET_MB:.0f} MB",
                "met": value < TARGET_MB,
                "detail": f"{count} events; after: {value} MB in {after[key]['seconds']} s{was}",
            }
        )
    doc = {
        "figures": figures,
        "events": count,
        "build_seconds": round(built, 2),
        "before": before,
        "after": after,
        "prune": prune,
        "root": str(root),
        "baseline": str(baseline) if baseline else None,
    }
    if args.json:
        print(json.dumps(doc, indent=2))
        return
    for figure in figures:
        print(f"{figure['figure']}: {figure['value']} {figure['unit']} (target {figure['target']}, "
              f"{'met' if figure['met'] else 'MISSED'}); {figure['detail']}")  # fmt: skip
    print(
        f"prune --keep 1000: {prune['events_deleted']} events in {prune['batches']} batches, {prune['seconds']} s; "
        f"longest concurrent write {prune['probe_write_max_ms']} ms over {prune['probe_writes']} writes"
    )


if __name__ == "__main__":
    main()
