"""bench/mcp.py drives a real ``corral mcp`` with the SDK's client and prints issue 14's figures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "mcp.py"
KEYS = {"figure", "value", "unit", "target", "met", "detail"}


@pytest.mark.slow
def test_a_short_run_prints_every_figure_with_its_samples(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")} | {"PYTHONPATH": str(ROOT)}
    argv = [sys.executable, str(SCRIPT), "--quick", "--json", "--calls", "3", "--wakes", "1", "--cold-runs", "1"]
    done = subprocess.run(
        [*argv, "--dir", str(tmp_path)], capture_output=True, text=True, timeout=110, check=False, env=env, cwd=tmp_path
    )
    # Run as a script, bench/ comes first on sys.path: had bench/mcp.py shadowed the SDK, this run fails.
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    figures = doc["figures"]
    assert [f["figure"] for f in figures] == [
        "MCP round trip over stdio, corral_status: overhead over the in-process call",
        "MCP round trip over stdio, corral_controller_renew: overhead over the in-process call",
        "corral_wait_any wake-up over MCP, end to end",
        "cold `corral mcp` to `initialize` answered / cold `python -c pass`",
    ]
    for figure in figures:
        assert set(figure) == KEYS, figure
        assert isinstance(figure["value"], float) and isinstance(figure["met"], bool)
    for tool in ("corral_status", "corral_controller_renew"):
        trip = doc["round_trips"][tool]
        counts = {way: len(s) for way, s in trip["samples_ms"].items()}
        assert counts == {"stdio": 3, "raw": 3, "dispatch": 3, "direct": 3}
        assert all(s > 0 for s in trip["samples_ms"]["stdio"])
    wake = doc["wake_up"]
    assert wake["mcp"]["n"] == wake["in_process"]["n"] == 1
    assert wake["mcp"]["early"] == 0 and wake["mcp"]["samples_ms"][0] > 0  # returned after the settle was stamped
    assert doc["cold_start"]["corral_mcp_initialize"]["n"] == 1 and doc["cold_start"]["ratio"] > 1
    assert list(tmp_path.iterdir()) == []  # the state home and its agents are gone
