"""bench/summary.py prints one table of the issues' rows whatever the scripts behind them do, and fails
(exit 1) when a script crashes or a row is not measured (issue 28)."""

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
    assert done.returncode == 1, done.stderr  # the table is printed all the same, and says why
    assert "bench/summary.py: bench/lanes.py did not run cleanly (failed)" in done.stderr
    assert "bench/summary.py: row 2 is not measured" in done.stderr
    doc = json.loads(done.stdout)
    rows = {entry["row"]: entry for entry in doc["rows"]}
    assert sorted(rows) == list(range(1, 35))
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
    assert all(rows[n]["status"] == "not measured" for n in range(14, 18))  # issue 15's: no bench/http_api.py here
    assert all(rows[n]["status"] == "not measured" for n in range(18, 21))  # issue 17's: no bench/mesh.py here
    assert all(rows[n]["status"] == "not measured" for n in range(21, 25))  # issue 16's: no bench/postgres.py
    assert all(rows[n]["status"] == "not measured" for n in range(25, 27))  # issue 18's: no bench/memory.py here
    assert rows[27]["status"] == "not measured" and "has no --quick/--json figures" in rows[27]["reason"]  # issue 23
    assert rows[28]["status"] == "not measured" and "does not exist" in rows[28]["reason"]  # bench/check.py
    assert rows[29]["status"] == "not measured" and "does not exist" in rows[29]["reason"]  # bench/chaos_check.py
    assert (
        rows[30]["status"] == "not measured" and "longer than 5 s" in rows[30]["reason"]
    )  # coldstart.py's second figure
    assert "does not exist" in rows[31]["reason"]  # bench/groupcommit.py
    assert all("does not exist" in rows[n]["reason"] for n in (32, 33))  # issue 29's: bench/dashboard.py
    assert rows[34]["status"] == "not measured"  # issue 28's finer-lock ceiling: no bench/postgres.py here
    scripts = doc["scripts"]
    assert scripts["coldstart.py"]["status"] == "timeout" and scripts["agents.py"]["status"] == "unsupported"
    # With --only, the rows of the scripts left out do not count: row 5 is met, so even --strict passes.
    assert _summary(tmp_path, "--only", "transition", "--strict").returncode == 0


@pytest.mark.slow
def test_the_text_table_says_met_and_not_met(tmp_path: Path) -> None:
    _script(tmp_path, "transition.py", _figure(RENEW_ROW, 3.9, False))
    done = _summary(tmp_path, "--only", "transition.py")
    assert done.returncode == 0, done.stderr  # measured but not met: reported, and only --strict fails on it
    lines = done.stdout.splitlines()
    (row,) = [line for line in lines if line.startswith(" 5 ")]
    assert "3.9x" in row and row.rstrip().endswith("NOT MET")
    assert lines[-1] == "0 met, 1 not met, 33 not measured"
    strict = _summary(tmp_path, "--only", "transition.py", "--strict")
    assert strict.returncode == 1 and "row 5 is not met (--strict)" in strict.stderr


@pytest.mark.slow
def test_a_crashing_script_or_a_missing_or_skipped_figure_fails_the_summary(tmp_path: Path) -> None:
    crashing, missing, skipped, good = (tmp_path / name for name in ("crashing", "missing", "skipped", "good"))
    for directory in (crashing, missing, skipped, good):
        directory.mkdir()
    _script(crashing, "transition.py", "raise KeyError('http')\n")
    # bench/plans.py owns rows 2 and 3: a figure for row 3 only leaves row 2 not measured.
    plans_row_3 = "commits per plan step"
    _script(missing, "plans.py", _figure(plans_row_3, 1, True))
    # A peer of the bench extra not installed: bench/peers.py marks its figure skipped and exits 0.
    peer: dict[str, object] = {
        "figure": "corral / DBOS",
        "value": None,
        "unit": "x",
        "met": False,
        "skipped": True,
        "detail": "no dbos",
    }
    _script(skipped, "peers.py", _figure("corral / LangGraph SqliteSaver (sync)", 2.5, True, peer))
    _script(good, "transition.py", _figure(RENEW_ROW, 3.9, False))

    done = _summary(crashing, "--only", "transition")
    assert done.returncode == 1
    assert "bench/transition.py did not run cleanly (failed): bench/transition.py exited with status 1" in done.stderr
    assert "row 5 is not measured" in done.stderr
    assert "KeyError: 'http'" in done.stdout  # the table says why too

    done = _summary(missing, "--only", "plans")
    assert done.returncode == 1 and "row 2 is not measured: no figure for this row from bench/plans.py" in done.stderr
    assert "row 3" not in done.stderr

    done = _summary(skipped, "--only", "peers", "--json")
    assert done.returncode == 1 and "row 4 is not measured: no dbos" in done.stderr
    statuses = [entry["status"] for entry in json.loads(done.stdout)["rows"] if entry["row"] == 4]
    assert statuses == ["met", "not measured"]

    done = _summary(good, "--only", "transition")  # measured, not met: exit 0, NOT MET in the table
    assert done.returncode == 0 and "bench/summary.py:" not in done.stderr
