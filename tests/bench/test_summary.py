"""bench/summary.py prints one table of issue 13's rows whatever the scripts behind them do."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SUMMARY = Path(__file__).resolve().parents[2] / "bench" / "summary.py"
RENEW_ROW = "runner `renew` / bare SQLite CAS, with `synchronous=OFF` on tmpfs (the CPU cost, fsync removed)"


def _script(directory: Path, name: str, body: str) -> None:
    # The summary runs only scripts whose source offers --quick, --json and a figures list.
    header = (
        "import json, sys, time\n# --quick --json figures\nassert sys.argv[1:] == ['--json', '--quick'], sys.argv\n"
    )
    (directory / name).write_text(header + textwrap.dedent(body))


def _figure(name: str, value: float, met: bool, *more: dict[str, object]) -> str:
    first = {"figure": name, "value": value, "unit": "x", "target": "<= 2.5x", "met": met, "detail": "d"}
    doc = {"figures": [first, *more]}
    return f"print(json.dumps({doc!r}))\n"


def _summary(directory: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, str(SUMMARY), "--bench-dir", str(directory), "--timeout", "5", *flags]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.slow
def test_every_row_is_shown_measured_or_with_the_reason_it_is_not(tmp_path: Path) -> None:
    _script(tmp_path, "transition.py", _figure(RENEW_ROW, 2.1, True))
    # A figure named in its own words goes to the row of its script that shares the most words.
    _script(tmp_path, "plans.py", _figure("commits per step of a plan", 1, True))
    _script(tmp_path, "peers.py", "print('not json')\n")
    _script(tmp_path, "lanes.py", "sys.stderr.write('boom\\n'); sys.exit(3)\n")
    _script(tmp_path, "coldstart.py", "time.sleep(60)\n")
    (tmp_path / "agents.py").write_text("print('no figures here')\n")
    # Issue 14's rows: bench/mcp.py's figures by their words (row 11) and by name (row 12); row 13 has none.
    wake = {"figure": "corral_wait_any wake-up over MCP, end to end", "value": 12.0, "unit": "ms", "met": False}
    _script(tmp_path, "mcp.py", _figure("MCP round trip over stdio, corral_status: overhead", 3.1, True, wake))
    done = _summary(tmp_path, "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    rows = {entry["row"]: entry for entry in doc["rows"]}
    assert sorted(rows) == list(range(1, 30))
    assert rows[5]["status"] == "met" and rows[5]["value"] == 2.1 and rows[5]["script"] == "transition.py"
    assert rows[3]["status"] == "met" and rows[3]["figure"] == "commits per step of a plan"
    assert rows[2]["status"] == "not measured" and "no figure" in rows[2]["reason"]
    assert rows[1]["status"] == "not measured" and "status 3: boom" in rows[1]["reason"]
    assert "no JSON" in rows[4]["reason"]
    assert "longer than 5 s" in rows[10]["reason"]
    assert "does not exist" in rows[6]["reason"]
    assert "has no --quick/--json figures" in rows[9]["reason"]
    assert rows[11]["status"] == "met" and rows[11]["script"] == "mcp.py" and rows[11]["value"] == 3.1
    assert rows[12]["status"] == "not met" and rows[12]["value"] == 12.0
    assert rows[13]["status"] == "not measured" and "no figure" in rows[13]["reason"]
    assert all(rows[n]["status"] == "not measured" for n in range(14, 18))  # issue 15's: no bench/http.py here
    assert all(rows[n]["status"] == "not measured" for n in range(18, 21))  # issue 17's: no bench/mesh.py here
    assert all(rows[n]["status"] == "not measured" for n in range(21, 25))  # issue 16's: no bench/postgres.py
    assert all(rows[n]["status"] == "not measured" for n in range(25, 27))  # issue 18's: no bench/memory.py here
    assert rows[27]["status"] == "not measured" and "has no --quick/--json figures" in rows[27]["reason"]  # issue 23
    assert rows[28]["status"] == "not measured" and "does not exist" in rows[28]["reason"]  # bench/check.py
    assert rows[29]["status"] == "not measured" and "does not exist" in rows[29]["reason"]  # bench/chaos_check.py
    scripts = doc["scripts"]
    assert scripts["coldstart.py"]["status"] == "timeout" and scripts["agents.py"]["status"] == "unsupported"
    assert _summary(tmp_path, "--only", "transition", "--strict").returncode == 1  # other rows not measured


@pytest.mark.slow
def test_the_text_table_says_met_and_not_met(tmp_path: Path) -> None:
    _script(tmp_path, "transition.py", _figure(RENEW_ROW, 3.9, False))
    done = _summary(tmp_path, "--only", "transition.py")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    (row,) = [line for line in lines if line.startswith(" 5 ")]
    assert "3.9x" in row and row.rstrip().endswith("NOT MET")
    assert lines[-1] == "0 met, 1 not met, 28 not measured"
