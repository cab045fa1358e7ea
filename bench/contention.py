"""Renew latency and fairness when N processes write one SQLite file at once.

Each worker is a real process with its own connection (``SQLiteStore``, the store's pragmas: WAL,
``synchronous=FULL``) and its own controller lease, and calls ``Service.renew`` (the whole guarded
durable transition) back to back for a fixed window. The leases are distinct rows, so the only
thing the workers share is the store's write lock: the figures are about how the wait for it is
served. For each N in {1, 8} the run reports per-renew latency (p50, p99, max), throughput, and
fairness over the window, two ways:

- *min/max share*: the fewest renews any worker completed divided by the most (1.0 = equal shares;
  issue 13's 0.65 was this figure);
- *Jain's index*: (sum x)^2 / (N * sum x^2) over the per-worker counts (1.0 = equal, 1/N = one
  worker got everything).

Before and after in one run: workers are started against two source trees, ``--root`` (this
checkout, the default) and ``--baseline-root`` (default ``/work/main`` if it exists, i.e. the code
before the fair write lock; ``--baseline-root ''`` skips it), each on its own store file, by
putting the tree first on ``PYTHONPATH``; each tree's workers are forked from one process that
imported its code (no store connection crosses the fork). They stay alive across windows (idle
workers block on their command pipe), and the windows of both trees are interleaved over ``--rounds``
rounds so that drift hits both alike; latencies are pooled over the rounds.

Figures (issue 13): "renew p99 with 8 processes / with 1 process" (target <= 5x) and "fairness with
8 processes" (min/max share; target >= 0.9), both for ``--root``; with ``--json`` the baseline's
are in ``baseline_figures`` and quoted in each figure's ``detail``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import percentile

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
BASELINE = Path("/work/main")
PYCACHE = Path(tempfile.gettempdir()) / "corral-bench-pycache"  # mirrors each tree's path inside
COUNTS = (1, 8)
P99_TARGET = 5.0
FAIRNESS_TARGET = 0.9

# One "zygote" process per tree imports the tree's code once, creates the store file and fills the
# spec cache, closes them, then forks the workers (no connection crosses the fork): sixteen cold
# imports cost more than the measurement on a loaded 2-CPU machine. Each worker has its own
# connection, lease and command pipe; it writes its latencies to a file and says "done" in one
# short write (atomic on a pipe).
ZYGOTE = r"""
import hashlib, json, os, sys, time
from pathlib import Path

import runner
from runner.definitions.library import Library
from runner.service import AcquireInput, RenewInput, Service
from runner.store.sqlite import SQLiteStore

db, cache, outdir, workers = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4])
Library(cache_dir=cache).builtin("controller")
SQLiteStore(db).close()
sha = hashlib.sha256(b"contention").hexdigest()


def say(text):
    os.write(1, (text + "\n").encode())


def work(i, commands):
    name = f"w{i}"
    service = Service(SQLiteStore(db), Library(cache_dir=cache), actor=name)
    cred = service.acquire(AcquireInput(name, "BENCH-1", sha, 86400, name)).credential
    for _ in range(5):  # warm: statement cache, page cache
        service.renew(RenewInput(name, cred))
    say(json.dumps({"ready": runner.__file__, "worker": i}))
    for line in commands:
        words = line.split()
        if words[0] == "quit":
            break
        start, stop, run = float(words[1]), float(words[2]), words[3]
        while time.time() < start:
            time.sleep(max(0.0, min(0.01, start - time.time())))
        latencies = []
        clock = time.perf_counter_ns
        while True:
            began = clock()
            service.renew(RenewInput(name, cred))
            latencies.append((clock() - began) / 1000)
            if time.time() >= stop:
                break
        (outdir / f"{run}-{i}.json").write_text(json.dumps(latencies))
        say(json.dumps({"done": i}))
    service.store.close()


pipes, pids = [], []
for i in range(workers):
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(write)
        for other in pipes:
            os.close(other)
        try:
            work(i, os.fdopen(read))
        finally:
            os._exit(0)
    os.close(read)
    pipes.append(write)
    pids.append(pid)
for line in sys.stdin:
    words = line.split()
    targets = pipes if words[0] == "quit" else pipes[: int(words[1])]
    command = (" ".join(words[:1] + words[2:]) + "\n").encode()
    for fd in targets:
        os.write(fd, command)
    if words[0] == "quit":
        break
status = 0
for pid in pids:
    status |= os.waitpid(pid, 0)[1]
sys.exit(1 if status else 0)
"""


class Tree:
    """The worker processes running one source tree's code on one store file."""

    def __init__(self, label: str, root: Path, tmp: Path, workers: int) -> None:
        self.label = label
        self.root = root
        self.directory = tmp / label
        self.directory.mkdir()
        self.workers = workers
        self.runs = 0
        env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
        env["PYTHONPATH"] = str(root)
        env["PYTHONPYCACHEPREFIX"] = str(PYCACHE)
        db, cache = self.directory / "corral.db", self.directory / "spec-cache"
        argv = [sys.executable, "-c", ZYGOTE, str(db), str(cache), str(self.directory), str(workers)]
        self.proc = subprocess.Popen(
            argv, cwd=root, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
        )
        for _ in range(workers):
            loaded = Path(json.loads(self._line())["ready"]).resolve()
            if not loaded.is_relative_to(self.root.resolve()):
                raise SystemExit(f"{self.label}: the worker imported runner from {loaded}, not from {self.root}")

    def _line(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"{self.label}: the workers exited early with status {self.proc.wait()}")
        return line

    def window(self, n: int, seconds: float) -> list[list[float]]:
        """Latencies (µs) of each of ``n`` workers renewing for ``seconds``, all starting at once."""
        self.runs += 1
        start = time.time() + 0.2
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"run {n} {start} {start + seconds} r{self.runs}\n")
        for _ in range(n):
            json.loads(self._line())
        return [json.loads((self.directory / f"r{self.runs}-{i}.json").read_text()) for i in range(n)]

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.write("quit\n")
            self.proc.stdin.close()
        if self.proc.wait(timeout=60) != 0:
            raise SystemExit(f"{self.label}: a worker failed (status {self.proc.returncode})")


def summarize(per_worker: list[list[list[float]]], seconds: float) -> dict[str, Any]:
    """Pooled latencies and fairness of one (tree, N) over its rounds; fairness is averaged per round."""
    pooled = [v for round_ in per_worker for worker in round_ for v in worker]
    shares, jains = [], []
    for round_ in per_worker:
        counts = [len(worker) for worker in round_]
        shares.append(min(counts) / max(counts))
        jains.append(sum(counts) ** 2 / (len(counts) * sum(c * c for c in counts)))
    return {
        "workers": len(per_worker[0]),
        "renews": len(pooled),
        "p50_ms": round(percentile(pooled, 50) / 1000, 3),
        "p99_ms": round(percentile(pooled, 99) / 1000, 3),
        "max_ms": round(max(pooled) / 1000, 3),
        "throughput_per_s": round(len(pooled) / (seconds * len(per_worker)), 1),
        "fairness_min_max": round(min(shares), 3),
        "fairness_min_max_mean": round(sum(shares) / len(shares), 3),
        "fairness_jain": round(min(jains), 4),
        "counts_per_round": [[len(worker) for worker in round_] for round_ in per_worker],
    }


def measure(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    trees = [("after", args.root)]
    if args.baseline_root:
        trees.insert(0, ("before", args.baseline_root))
    started = {label: Tree(label, root, tmp, max(COUNTS)) for label, root in trees}
    samples: dict[tuple[str, int], list[list[list[float]]]] = {(t, n): [] for t, _ in trees for n in COUNTS}
    try:
        for _ in range(args.rounds):
            for n in COUNTS:
                for label, _root in trees:
                    samples[label, n].append(started[label].window(n, args.seconds))
    finally:
        for tree in started.values():
            tree.close()
    results = {f"{t}/{n}": summarize(samples[t, n], args.seconds) for t, _ in trees for n in COUNTS}
    by_tree: dict[str, list[dict[str, Any]]] = {}
    for label, root in trees:
        one, eight = results[f"{label}/1"], results[f"{label}/8"]
        ratio = eight["p99_ms"] / one["p99_ms"]
        fair = eight["fairness_min_max"]
        by_tree[label] = [
            {
                "figure": "renew p99 with 8 processes / with 1 process",
                "value": round(ratio, 2),
                "unit": "x",
                "target": f"<= {P99_TARGET:g}x",
                "met": ratio <= P99_TARGET,
                "detail": (
                    f"{root}: p99 {eight['p99_ms']} ms (p50 {eight['p50_ms']}, max {eight['max_ms']}) with 8 / "
                    f"p99 {one['p99_ms']} ms (p50 {one['p50_ms']}, max {one['max_ms']}) with 1; throughput "
                    f"{eight['throughput_per_s']} vs {one['throughput_per_s']} renews/s"
                ),
            },
            {
                "figure": "fairness with 8 processes",
                "value": fair,
                "unit": "min/max share",
                "target": f">= {FAIRNESS_TARGET:g}",
                "met": fair >= FAIRNESS_TARGET,
                "detail": (
                    f"{root}: min/max of per-process renews in a {args.seconds:g} s window, worst of "
                    f"{args.rounds} rounds (mean {eight['fairness_min_max_mean']}); Jain's index "
                    f"{eight['fairness_jain']}; counts {eight['counts_per_round']}"
                ),
            },
        ]
    figures = by_tree["after"]
    if "before" in by_tree:  # the same run's figures of the baseline tree, in each figure's detail
        for figure, before in zip(figures, by_tree["before"], strict=True):
            figure["detail"] += f"; before (same run) {before['value']} {before['unit']}: {before['detail']}"
    return {
        "figures": figures,
        "baseline_figures": by_tree.get("before", []),
        "results": results,
        "seconds": args.seconds,
        "rounds": args.rounds,
        "machine": {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count()},
    }


def report(result: dict[str, Any]) -> None:
    print(f"renew under contention: {result['rounds']} rounds of {result['seconds']:g} s windows per N")
    heads = ("renews", "p50 ms", "p99 ms", "max ms", "per s")
    print(f"{'tree/N':<10} " + " ".join(f"{h:>8}" for h in heads) + f" {'min/max':>8} {'Jain':>7}")
    for key, r in result["results"].items():
        print(
            f"{key:<10} {r['renews']:>7} {r['p50_ms']:>8} {r['p99_ms']:>8} {r['max_ms']:>8} "
            f"{r['throughput_per_s']:>8} {r['fairness_min_max']:>8} {r['fairness_jain']:>7}"
        )
    for f in result["figures"] + [{**f, "figure": f"{f['figure']} (baseline)"} for f in result["baseline_figures"]]:
        mark = "met" if f["met"] else "MISSED"
        print(f"{f['figure']}: {f['value']} {f['unit']} (target {f['target']}, {mark})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="window per N and round (default: 3)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default: 3)")
    parser.add_argument("--quick", action="store_true", help="one round of 1 s windows (a few seconds in all)")
    parser.add_argument("--root", type=Path, default=ROOT, help="the source tree measured (default: this checkout)")
    parser.add_argument(
        "--baseline-root",
        type=lambda s: Path(s) if s else None,
        default=BASELINE if BASELINE.is_dir() and BASELINE.resolve() != ROOT else None,
        help="the tree to compare with in the same run ('' skips it; default: /work/main if present)",
    )
    parser.add_argument("--dir", type=Path, help="where to put the store files (default: a new temp dir)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.rounds = 1.0, 1
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="corral-contention-") as tmp:
        result = measure(args, Path(tmp))
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        report(result)


if __name__ == "__main__":
    main()
