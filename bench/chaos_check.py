"""The chaos checker's time per 10,000 operations (issue 27's target: < 1 s).

``make chaos`` checks its lease history with :mod:`chaos.lease` (a WGL linearizability search,
partitioned per store and controller id). This script times that check on histories of a correct
lease made up by :mod:`chaos.synthetic`: clients doing one operation at a time over a controller id
each operation taking effect at one moment inside its interval, 3% of the outcomes lost (as a killed
client's are), every history linearizable. Two shapes: the chaos run's (four partitions of four
clients: two stores x two controller ids) and one partition holding every operation (the search's
worst shape here). The figure is the median, over ``--runs`` histories of ``--ops`` operations (a
different seed each), of the seconds per 10,000 operations in the run's shape; the one-partition
median is in the detail. ``--history FILE`` times a recorded history too (``make chaos``'s
``history.jsonl``, kept with ``--keep DIR``).

Run from a checkout: ``python bench/chaos_check.py [--quick] [--json] [--ops N] [--runs N] [--history FILE]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from chaos import history, lease, synthetic  # noqa: E402 - the checkout is put on sys.path just above

FIGURE = "chaos checker time per 10,000 operations"
TARGET_S = 1.0


def per_10k(ops: list[history.Op]) -> tuple[float, int]:
    """Seconds per 10,000 operations to check ``ops``, and the anomalies found (0 on these histories)."""
    started = time.perf_counter()
    report = lease.check(ops)
    return (time.perf_counter() - started) / len(ops) * 10_000, len(report.anomalies)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--quick", action="store_true", help="a run of a few seconds")
    parser.add_argument("--ops", type=int, default=None, help="operations per history (default 50,000; 10,000 quick)")
    parser.add_argument("--runs", type=int, default=None, help="histories per shape (default 5, 3 with --quick)")
    parser.add_argument("--history", type=Path, help="a recorded history to time as well")
    args = parser.parse_args()
    count = args.ops or (10_000 if args.quick else 50_000)
    runs = args.runs or (3 if args.quick else 5)
    shaped, single, found = [], [], 0
    for seed in range(runs):
        seconds, anomalies = per_10k(synthetic.history(count, seed=seed, partitions=4, clients=4))
        shaped.append(seconds)
        found += anomalies
        seconds, anomalies = per_10k(synthetic.history(count, seed=seed, partitions=1, clients=4))
        single.append(seconds)
        found += anomalies
    value = statistics.median(shaped)
    detail = (
        f"{runs} histories of {count} operations (3% outcomes lost): 4 partitions x 4 clients median "
        f"{value:.3f} s per 10k (max {max(shaped):.3f}); one partition median {statistics.median(single):.3f} s "
        f"(max {max(single):.3f}); anomalies found {found} (0 expected)"
    )
    recorded = None
    if args.history is not None:
        ops = list(history.read(args.history))
        seconds, anomalies = per_10k(ops)
        recorded = {"operations": len(ops), "seconds_per_10k": round(seconds, 4), "anomalies": anomalies}
        detail += f"; {args.history.name}: {len(ops)} operations, {seconds:.3f} s per 10k"
    figure = {
        "figure": FIGURE,
        "value": round(value, 4),
        "unit": "s",
        "target": f"< {TARGET_S:g} s",
        "met": value < TARGET_S and found == 0,
        "detail": detail,
    }
    if args.json:
        print(json.dumps({"figures": [figure], "shaped_s": shaped, "single_s": single, "recorded": recorded}, indent=2))
        return
    print(f"{FIGURE}: {figure['value']} s (target {figure['target']}: {'met' if figure['met'] else 'MISSED'})")
    print(f"  {detail}")


if __name__ == "__main__":
    main()
