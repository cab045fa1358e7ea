"""What the benchmarks share: statistics, the ``corral`` executable, and a command timed cold.

The benchmark scripts run as ``python bench/NAME.py``, so this directory is on ``sys.path`` and they
import this module as ``common``.
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def percentile(values: list[float], q: int) -> float:
    """The q-th percentile (inclusive method); the single value when there is one."""
    if len(values) < 2:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def corral_executable() -> str:
    """The console script next to this interpreter (the venv's), else the one on PATH."""
    beside = Path(sys.executable).parent / "corral"
    if beside.is_file():
        return str(beside)
    found = shutil.which("corral")
    if found is None:
        raise SystemExit("no corral executable beside this Python or on PATH: run `make` (pip install -e .) first")
    return found


@dataclass
class Cold:
    """A command line timed in its own fresh process; it must exit 0 (and print ``expect``, if given)."""

    key: str
    label: str
    argv: list[str]
    env: dict[str, str]
    stdin: bytes | None = None
    expect: bytes | None = None  # must appear in stdout
    samples_ms: list[float] = field(default_factory=list)

    def run(self) -> float:
        start = time.perf_counter()
        done = subprocess.run(self.argv, input=self.stdin, env=self.env, capture_output=True, check=False)
        elapsed = (time.perf_counter() - start) * 1000
        if done.returncode != 0 or (self.expect is not None and self.expect not in done.stdout):
            raise SystemExit(
                f"{self.label} exited with status {done.returncode}:\n{done.stdout.decode(errors='replace')}"
                f"{done.stderr.decode(errors='replace')}"
            )
        return elapsed

    @property
    def median(self) -> float:
        return statistics.median(self.samples_ms)

    @property
    def p90(self) -> float:
        return percentile(self.samples_ms, 90)

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "argv": self.argv,
            "runs": len(self.samples_ms),
            "median_ms": round(self.median, 2),
            "p90_ms": round(self.p90, 2),
            "min_ms": round(min(self.samples_ms), 2),
            "max_ms": round(max(self.samples_ms), 2),
            "samples_ms": [round(s, 2) for s in self.samples_ms],
        }


class WriteCommits:
    """A trace callback (``sqlite3.Connection.set_trace_callback``) counting the write transactions a
    connection commits: ``BEGIN IMMEDIATE`` ... ``COMMIT`` (a read snapshot's BEGIN/COMMIT is not
    one, nor a rolled back write). ``count`` is the number so far."""

    def __init__(self) -> None:
        self.count = 0
        self._writing = False

    def __call__(self, statement: str) -> None:
        verb = statement.lstrip().upper()
        if verb.startswith("BEGIN IMMEDIATE"):
            self._writing = True
        elif verb.startswith(("COMMIT", "ROLLBACK")):
            self.count += self._writing and verb.startswith("COMMIT")
            self._writing = False


def print_figures(figures: list[dict[str, Any]], as_json: bool) -> None:
    """A script's figures: ``{"figures": [...]}`` with ``--json`` (what ``bench/summary.py`` reads),
    else each as a line (value, unit, target, whether met) and its detail beneath."""
    if as_json:
        print(json.dumps({"figures": figures}, indent=2))
        return
    for figure in figures:
        verdict = "met" if figure["met"] else "NOT met"
        print(f"{figure['figure']}: {figure['value']} {figure['unit']} (target {figure['target']}, {verdict})")
        detail = figure["detail"]
        print(f"    {detail if isinstance(detail, str) else json.dumps(detail)}")
