"""``corral check`` of every shipped machine and recipe: 3 actors, every fault; time and states explored.

Runs the real executable (``corral check --json``) in a fresh process, so the time is what an author
waits for: start-up, loading every definition, and the exploration. Target: < 60 s on this machine.
``--quick`` runs it once, a full run three times (the median is reported).

Run from a checkout: ``python bench/check.py [--quick] [--json] [--actors N]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from common import corral_executable, print_figures

TARGET_S = 60.0


def run_once(actors: int, home: Path) -> tuple[float, dict[str, Any]]:
    argv = [corral_executable(), "check", "--actors", str(actors), "--faults", "crash,expiry,pause", "--json"]
    env = {**os.environ, "CORRAL_HOME": str(home)}
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=home, check=False)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"corral check exited with status {done.returncode}:\n{done.stdout[-2000:]}{done.stderr}")
    return seconds, json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="one run instead of three")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--actors", type=int, default=3)
    args = parser.parse_args()
    times: list[float] = []
    with tempfile.TemporaryDirectory(prefix="corral-bench-check-") as tmp:
        for _ in range(1 if args.quick else 3):
            seconds, report = run_once(args.actors, Path(tmp))
            times.append(seconds)
    median = statistics.median(times)
    machines = report["machines"]
    per = ", ".join(f"{m['machine']} {m['states']}" for m in machines)
    figures = [
        {
            "figure": f"`corral check` of every shipped machine and recipe, {args.actors} actors, every fault",
            "value": round(median, 2),
            "unit": "s",
            "target": f"< {TARGET_S:g} s",
            "met": median < TARGET_S,
            "detail": f"{report['states']} states, {report['transitions']} transitions explored over "
            f"{len(machines)} machines and {len(report['recipes'])} recipes ({report['seconds']} s exploring; "
            f"states per machine: {per}); runs {', '.join(f'{t:.2f}' for t in times)} s",
        },
        {
            "figure": "states explored by `corral check` (every shipped machine)",
            "value": report["states"],
            "unit": "states",
            "target": "value only",
            "met": True,
            "detail": per,
        },
    ]
    print_figures(figures, args.json)


if __name__ == "__main__":
    main()
