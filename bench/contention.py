"""Renew latency and fairness when N processes write one SQLite file at once.

Each worker is a real process with its own connection (``SQLiteStore``, the store's pragmas: WAL,
``synchronous=FULL``) and its own controller lease, and calls ``Service.renew`` (the whole guarded
durable transition). The leases are distinct rows, so the only thing the workers share is the
store's write lock: the figures are about how the wait for it is served. For each N in {1, 8} the
run measures two loads:

- *saturated*: every worker renews back to back for the window (issue 13's workload: "throughput
  flat" is a saturated store). Reported: per-renew latency (p50, p99, max), throughput, fairness
  as the *min/max share* (the fewest renews any worker completed divided by the most; issue 13's
  0.65 was this figure) and *Jain's index* ((sum x)^2 / (N * sum x^2) over the per-worker counts).
  Under saturation a serialized store's latency with N writers is N times its latency with one by
  Little's law (mean latency = N / throughput, and throughput is flat), whatever the lock does: the
  p99 ratio of this load measures queueing, not the cost of contention, so it is in the detail.
- *paced* (the figure "renew p99 with 8 processes / with 1 process"): the same total offered load
  for both N, half (``--load``, 0.5) of the saturated throughput this round measured (the lower of
  N = 1 and N = 8: a load the store carries with either), as Poisson arrivals spread over N workers
  (each at 1/N of the rate; N = 1: one worker at the whole rate); latency is the renew call's. With
  one process nobody else holds the lock; with eight, a renew waits only for the others' renews that
  arrived just before it, so the ratio is what sharing the store between processes costs (the lock's
  hand-over and its waits), at a load the store can carry.

Before and after in one run: workers are started against two source trees, ``--root`` (this
checkout, the default) and ``--baseline-root`` (default ``/work/main`` if it exists; skipped when it
is absent, ``''``, or the same code as ``--root``: the same directory or the same ``runner/`` files),
each on its own store file, by putting the tree first on ``PYTHONPATH``; each tree's workers are
forked from one process that imported its code (no store connection crosses the fork). A baseline
whose workers fail to start is reported as skipped (``baseline_skipped``, with the reason), never as
this run's failure. Workers stay alive across windows (idle workers block on their command pipe),
and the windows of both trees are interleaved over ``--rounds`` rounds so that drift hits both alike;
latencies are pooled over the rounds.

Figures (issue 13): "renew p99 with 8 processes / with 1 process" (target <= 5x; paced, the
saturated ratio in the detail) and "fairness with 8 processes" (min/max share, saturated; target
>= 0.9), both for ``--root``; with ``--json`` the baseline's are in ``baseline_figures`` and quoted
in each figure's ``detail``.
"""

from __future__ import annotations

import argparse
import hashlib
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
LOAD = 0.5  # the paced load: this share of the saturated throughput (the lower of N=1, N=8), over all workers

# One "zygote" process per tree imports the tree's code once, creates the store file and fills the
# spec cache, closes them, then forks the workers (no connection crosses the fork): sixteen cold
# imports cost more than the measurement on a loaded 2-CPU machine. Each worker has its own
# connection, lease and command pipe; it writes its latencies to a file and says "done" in one
# short write (atomic on a pipe).
ZYGOTE = r"""
import hashlib, json, os, random, sys, time
from pathlib import Path

import runner
from runner.definitions.library import Library
from runner.service import AcquireInput, RenewInput, Service
from runner.sql.store_sqlite import SQLiteStore

db, cache, outdir, workers = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4])
Library(cache_dir=cache).builtin("controller")
SQLiteStore(db).close()
sha = hashlib.sha256(b"contention").hexdigest()


def say(text):
    os.write(1, (text + "\n").encode())


def work(i, commands):
    name = f"w{i}"
    service = Service(SQLiteStore(db), Library(cache_dir=cache), actor=name)
    cred = service.controller.acquire(AcquireInput(name, "BENCH-1", sha, 86400, name)).credential
    for _ in range(5):  # warm: statement cache, page cache
        service.controller.renew(RenewInput(name, cred))
    say(json.dumps({"ready": runner.__file__, "worker": i}))
    for line in commands:
        words = line.split()
        if words[0] == "quit":
            break
        start, stop, run, rate = float(words[1]), float(words[2]), words[3], float(words[4])
        while time.time() < start:
            time.sleep(max(0.0, min(0.01, start - time.time())))
        latencies = []
        clock = time.perf_counter_ns
        if rate > 0:  # paced: Poisson arrivals at `rate` per second; a late one starts at once
            arrivals = random.Random(f"{run}-{i}")
            due = start + arrivals.expovariate(rate)
            while due < stop:
                wait = due - time.time()
                if wait > 0:
                    time.sleep(wait)
                began = clock()
                service.controller.renew(RenewInput(name, cred))
                latencies.append((clock() - began) / 1000)
                due += arrivals.expovariate(rate)
        else:  # saturated: back to back
            while True:
                began = clock()
                service.controller.renew(RenewInput(name, cred))
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

    def window(self, n: int, seconds: float, rate: float = 0.0) -> list[list[float]]:
        """Latencies (µs) of each of ``n`` workers renewing for ``seconds``, all starting at once: back
        to back, or (``rate`` > 0) each at Poisson arrivals of ``rate`` per second."""
        self.runs += 1
        start = time.time() + 0.2
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"run {n} {start} {start + seconds} r{self.runs} {rate!r}\n")
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
        "mean_ms": round(sum(pooled) / len(pooled) / 1000, 3),
        "p50_ms": round(percentile(pooled, 50) / 1000, 3),
        "p99_ms": round(percentile(pooled, 99) / 1000, 3),
        "max_ms": round(max(pooled) / 1000, 3),
        "throughput_per_s": round(len(pooled) / (seconds * len(per_worker)), 1),
        "fairness_min_max": round(min(shares), 3),
        "fairness_min_max_mean": round(sum(shares) / len(shares), 3),
        "fairness_jain": round(min(jains), 4),
        "counts_per_round": [[len(worker) for worker in round_] for round_ in per_worker],
    }


def same_code(a: Path, b: Path) -> bool:
    """Whether two trees would measure the same code: one directory, or byte-equal ``runner/`` sources."""
    if a.resolve() == b.resolve():
        return True

    def digest(root: Path) -> str:
        sha = hashlib.sha256()
        for path in sorted((root / "runner").rglob("*")):
            if path.is_file() and path.suffix in (".py", ".yaml", ".yml", ".json", ".sql"):
                sha.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
        return sha.hexdigest()

    return (a / "runner").is_dir() and (b / "runner").is_dir() and digest(a) == digest(b)


def baseline_of(args: argparse.Namespace) -> tuple[Path | None, str]:
    """The baseline tree to measure beside ``--root``, or None and why it is skipped."""
    baseline = args.baseline_root
    if baseline is None:
        return None, "no baseline asked for (--baseline-root '')"
    if not (baseline / "runner").is_dir():
        return None, f"{baseline} is not a checkout of corral (no runner/)"
    if same_code(baseline, args.root):
        return None, f"{baseline} holds the same code as {args.root}"
    return baseline, ""


def spread(r: dict[str, Any]) -> str:
    return f"p99 {r['p99_ms']} ms (p50 {r['p50_ms']}, max {r['max_ms']})"


def figures_of(label: str, root: Path, results: dict[str, Any], args: argparse.Namespace) -> list[dict[str, Any]]:
    one, eight = results[f"{label}/1"], results[f"{label}/8"]
    p_one, p_eight = results[f"{label}/paced/1"], results[f"{label}/paced/8"]
    ratio = p_eight["p99_ms"] / p_one["p99_ms"]
    saturated = eight["p99_ms"] / one["p99_ms"]
    little = eight["workers"] * one["throughput_per_s"] / eight["throughput_per_s"]
    fair = eight["fairness_min_max"]
    return [
        {
            "figure": "renew p99 with 8 processes / with 1 process",
            "value": round(ratio, 2),
            "unit": "x",
            "target": f"<= {P99_TARGET:g}x",
            "met": ratio <= P99_TARGET,
            "detail": (
                f"{root}: paced at {p_one['offered_per_s']:g} renews/s in all ({args.load:g} of the saturated "
                f"throughput, the lower of 1 and 8 processes'): {spread(p_eight)} with 8 / {spread(p_one)} with 1; "
                f"saturated (back to back): {saturated:.2f}x, {spread(eight)} with 8 / {spread(one)} with 1, "
                f"throughput {eight['throughput_per_s']} vs {one['throughput_per_s']} renews/s, mean latency "
                f"{eight['mean_ms']} vs {one['mean_ms']} ms ({eight['mean_ms'] / one['mean_ms']:.2f}x; Little's law "
                f"at that throughput: {little:.2f}x)"
            ),
        },
        {
            "figure": "fairness with 8 processes",
            "value": fair,
            "unit": "min/max share",
            "target": f">= {FAIRNESS_TARGET:g}",
            "met": fair >= FAIRNESS_TARGET,
            "detail": (
                f"{root}: saturated, min/max of per-process renews in a {args.seconds:g} s window, worst of "
                f"{args.rounds} rounds (mean {eight['fairness_min_max_mean']}); Jain's index "
                f"{eight['fairness_jain']}; counts {eight['counts_per_round']}"
            ),
        },
    ]


def measure(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    baseline, skipped = baseline_of(args)
    started = {"after": Tree("after", args.root, tmp, max(COUNTS))}
    if baseline is not None:
        try:
            started["before"] = Tree("before", baseline, tmp, max(COUNTS))
        except SystemExit as exc:  # its code cannot run this bench (too old, broken): measure ours alone
            baseline, skipped = None, f"{baseline}: {exc}"
    trees = [(label, tree.root) for label, tree in sorted(started.items(), reverse=True)]  # before first
    keys = [(t, kind, n) for t, _ in trees for kind in ("saturated", "paced") for n in COUNTS]
    samples: dict[tuple[str, str, int], list[list[list[float]]]] = {key: [] for key in keys}
    offered: dict[str, list[float]] = {t: [] for t, _ in trees}
    try:
        for _ in range(args.rounds):
            for n in COUNTS:
                for label, _root in trees:
                    samples[label, "saturated", n].append(started[label].window(n, args.seconds))
            for label, _root in trees:  # the paced load: a share of what this round's store carried
                carried = min(sum(len(w) for w in samples[label, "saturated", n][-1]) for n in COUNTS)
                offered[label].append(args.load * carried / args.seconds)
            for n in COUNTS:
                for label, _root in trees:
                    rate = offered[label][-1] / n
                    samples[label, "paced", n].append(started[label].window(n, args.seconds, rate))
    finally:
        for tree in started.values():
            tree.close()
    results: dict[str, Any] = {}
    for label, kind, n in keys:
        key = f"{label}/{n}" if kind == "saturated" else f"{label}/paced/{n}"
        results[key] = summarize(samples[label, kind, n], args.seconds)
        if kind == "paced":
            results[key]["offered_per_s"] = round(sum(offered[label]) / len(offered[label]), 1)
    by_tree = {label: figures_of(label, root, results, args) for label, root in trees}
    figures = by_tree["after"]
    if "before" in by_tree:  # the same run's figures of the baseline tree, in each figure's detail
        for figure, before in zip(figures, by_tree["before"], strict=True):
            figure["detail"] += f"; before (same run) {before['value']} {before['unit']}: {before['detail']}"
    return {
        "figures": figures,
        "baseline_figures": by_tree.get("before", []),
        "baseline_skipped": skipped or None,
        "results": results,
        "seconds": args.seconds,
        "rounds": args.rounds,
        "load": args.load,
        "machine": {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count()},
    }


def report(result: dict[str, Any]) -> None:
    print(f"renew under contention: {result['rounds']} rounds of {result['seconds']:g} s windows per N and load")
    if result["baseline_skipped"]:
        print(f"baseline skipped: {result['baseline_skipped']}")
    heads = ("renews", "p50 ms", "p99 ms", "max ms", "per s")
    print(f"{'tree/N':<15} " + " ".join(f"{h:>8}" for h in heads) + f" {'min/max':>8} {'Jain':>7}")
    for key, r in result["results"].items():
        # Fairness is judged saturated: paced workers' counts differ by their Poisson arrivals only.
        fair = ("-", "-") if "paced" in key else (r["fairness_min_max"], r["fairness_jain"])
        print(
            f"{key:<15} {r['renews']:>8} {r['p50_ms']:>8} {r['p99_ms']:>8} {r['max_ms']:>8} "
            f"{r['throughput_per_s']:>8} {fair[0]:>8} {fair[1]:>7}"
        )
    for f in result["figures"] + [{**f, "figure": f"{f['figure']} (baseline)"} for f in result["baseline_figures"]]:
        mark = "met" if f["met"] else "MISSED"
        print(f"{f['figure']}: {f['value']} {f['unit']} (target {f['target']}, {mark})")
        print(f"  {f['detail']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="window per N and round (default: 3)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default: 3)")
    parser.add_argument("--quick", action="store_true", help="one round of 1 s windows (a few seconds in all)")
    parser.add_argument("--root", type=Path, default=ROOT, help="the source tree measured (default: this checkout)")
    parser.add_argument(
        "--baseline-root",
        type=lambda s: Path(s) if s else None,
        default=BASELINE if BASELINE.is_dir() else None,
        help="the tree to compare with in the same run ('' skips it; default: /work/main if present; "
        "skipped when it holds the same code as --root)",
    )
    parser.add_argument(
        "--load",
        type=float,
        default=LOAD,
        help=f"the paced load, a share of the saturated throughput (the lower of 1 and 8 processes; default: {LOAD:g})",
    )
    parser.add_argument("--dir", type=Path, help="where to put the store files (default: a new temp dir)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    if not 0 < args.load < 1:
        parser.error("--load must lie between 0 and 1 (a share of the saturated throughput)")
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
