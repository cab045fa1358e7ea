"""bench/peers.py without the bench extra: it says what it skipped and exits 0 with a skipped figure."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"

# Run the script with LangGraph and python-statemachine made unimportable, as on an install without the extra.
WITHOUT_EXTRA = f"""
import runpy, sys
for name in ("langgraph", "statemachine"):
    sys.modules[name] = None
sys.path.insert(0, {str(BENCH)!r})
sys.argv = ["peers.py", "--quick", "--json", "--steps", "4"]
runpy.run_path({str(BENCH / "peers.py")!r}, run_name="__main__")
"""


@pytest.mark.slow
def test_without_the_bench_extra_the_plan_figure_is_skipped_and_the_rest_runs(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_EXTRA], capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    (figure,) = doc["figures"]
    assert figure["skipped"] is True and figure["value"] is None and figure["met"] is False
    assert "pip install -e '.[bench]'" in figure["detail"]
    assert doc["plan"] is None
    assert set(doc["context"]["missing"]) == {"langgraph", "langgraph.checkpoint.sqlite", "statemachine"}
    # transitions is corral's own dependency: the lease machine is still measured against it.
    assert set(doc["lease_machine"]["memory"]) == {"transitions", "corral TransitionTable.fire (fence guard, no store)"}
    assert doc["lease_machine"]["durable"]["corral Service.renew"]["ops_per_s"] > 0
