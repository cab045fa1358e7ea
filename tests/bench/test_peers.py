"""bench/peers.py without the bench extra: it says what it skipped and exits 0 with skipped figures.

bench/summary.py (and so ``make bench``, which installs the extra) fails on a skipped figure; this script
itself still runs what it can: corral's plan against the bare one-commit-per-step floor, fsyncs counted.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"

# Run the script with the bench extra's modules made unimportable, as on an install without the extra.
WITHOUT_EXTRA = f"""
import runpy, sys
for name in ("langgraph", "statemachine", "dbos", "aiosqlite"):
    sys.modules[name] = None
sys.path.insert(0, {str(BENCH)!r})
sys.argv = ["peers.py", "--quick", "--json", "--steps", "4", "--rounds", "1", "--no-tmpfs"]
runpy.run_path({str(BENCH / "peers.py")!r}, run_name="__main__")
"""


@pytest.mark.slow
def test_without_the_bench_extra_the_peer_figures_are_skipped_and_the_rest_runs(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_EXTRA], capture_output=True, text=True, timeout=300, check=False, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    figures = {figure["figure"].rsplit(": ", 1)[1]: figure for figure in doc["figures"]}
    assert set(figures) == {
        "corral / LangGraph SqliteSaver (sync)",
        "corral / LangGraph AsyncSqliteSaver (async)",
        "corral / DBOS (SQLite WAL)",
        "corral / the bare one-commit-per-step floor",
    }
    for name in ("corral / LangGraph SqliteSaver (sync)", "corral / LangGraph AsyncSqliteSaver (async)"):
        assert figures[name]["skipped"] is True and figures[name]["value"] is None and figures[name]["met"] is False
        assert "pip install -e '.[bench]'" in figures[name]["detail"]
    assert "dbos not installed" in figures["corral / DBOS (SQLite WAL)"]["detail"]
    floor = figures["corral / the bare one-commit-per-step floor"]
    assert "skipped" not in floor and floor["value"] > 0 and floor["target"] == ">= 0.9x"
    assert set(doc["plan"]["peers"]) == {"corral", "corral_effectful", "bare"}
    assert set(doc["context"]["missing"]) == {
        "langgraph",
        "langgraph.checkpoint.sqlite",
        "aiosqlite",
        "dbos",
        "statemachine",
    }
    fsyncs = doc["plan"]["fsyncs"]
    if fsyncs["available"]:
        assert set(fsyncs["peers"]) == {"corral", "corral_effectful", "bare"}
        assert fsyncs["peers"]["bare"]["fsyncs_per_step"] >= 1  # one fsynced COMMIT (WAL, FULL) per step at least
        assert fsyncs["peers"]["corral_effectful"]["fsyncs_per_step"] >= 1  # a commit before each effectful step
        assert fsyncs["peers"]["corral"]["fsyncs_per_step"] < 0.5  # pure steps: one commit per run of 64
        assert "fsyncs/step" in floor["detail"]
    else:
        assert fsyncs["reason"] and "fsyncs: unavailable" in floor["detail"]
    # transitions is corral's own dependency: the lease machine is still measured against it.
    assert set(doc["lease_machine"]["memory"]) == {"transitions", "corral TransitionTable.fire (fence guard, no store)"}
    assert doc["lease_machine"]["durable"]["corral Service.renew"]["ops_per_s"] > 0


def test_strace_counts_are_read_from_its_calls_column() -> None:
    sys.path.insert(0, str(BENCH))
    try:
        import peers
    finally:
        sys.path.remove(str(BENCH))
        sys.modules.pop("peers", None)
    summary = """% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 97.10    0.412345        2061       200           fsync
  2.90    0.012345         123        10         1 fdatasync
------ ----------- ----------- --------- --------- ----------------
100.00    0.424690        2023       210         1 total
"""
    assert peers.parse_strace_counts(summary) == 210
    assert peers.parse_strace_counts("") == 0
