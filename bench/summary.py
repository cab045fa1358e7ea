"""One table of issue 13's to 28's target figures: every bench script run with ``--quick --json``, collected.

Each bench script that owns a row of the issue's target table prints, with ``--json``, a top-level
``figures`` list of ``{"figure", "value", "unit", "target", "met", "detail"}``. This script runs every
one of them (``--quick``, or the full runs with ``--full``), one after the other so none disturbs
another, and prints one table: each row with its figures, their targets, and whether they are met.
A script that is missing, fails, times out, prints no JSON or has no figure for a row shows that row
as *not measured*, with the reason; so does a figure its script marks skipped (a peer of the bench
extra not installed). The table is always printed.

Exit status (issue 28): **1** when a row is not measured or a script did not run cleanly (missing,
failed, timed out, no JSON): ``make bench`` fails on a crash or a figure that is not there, not
quietly. A figure that is measured but misses its target is reported as NOT MET in the table and
counted in the last line, and exits 0: quick figures on a shared machine move, and a missed target
is a finding to read, not a broken bench. ``--strict`` makes a missed target exit 1 too. With
``--only``, only the rows of the scripts that ran count.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Row:
    """One row of an issue's target table (13 to 28) and the scripts that measure it."""

    name: str
    target: str
    scripts: tuple[str, ...]


ROWS = (
    Row(
        "lane-conflict check, 100 lanes × 500 owned + 500 locked scopes",
        "< 50 ms, and no write transaction holds the lock longer than 50 ms for it",
        ("lanes.py",),
    ),
    Row("plan CPU per step at 800 steps / at 200 steps", "<= 1.2x; bytes written per step constant", ("plans.py",)),
    Row(
        "commits per plan step",
        "1 (outcome of one step and start of the next in one transaction, or an equivalent proof of durability)",
        ("plans.py",),
    ),
    # Issue 28 raised issue 13's ">= 1.2x LangGraph's SQLite checkpointer (sync)" to this row's targets.
    Row(
        "200-step durable plan, steps/s, synchronous=FULL on the same disk: corral / LangGraph SqliteSaver (sync)"
        " and AsyncSqliteSaver (async), / DBOS (SQLite WAL), / the bare one-commit-per-step floor; fsyncs/step",
        ">= 2x each peer (issue 28; issue 13's was >= 1.2x LangGraph sync), >= 0.9x the bare floor",
        ("peers.py",),
    ),
    Row(
        "runner `renew` / bare SQLite CAS, with `synchronous=OFF` on tmpfs (the CPU cost, fsync removed)",
        "<= 2.5x",
        ("transition.py",),
    ),
    Row("peak RSS of `corral events --json` over 1M events, and of `--follow`", "< 60 MB, streaming", ("reads.py",)),
    Row(
        "`status`, `controller list` (text and JSON) at 30k instances (most finished) / at 1 instance",
        "<= 2x",
        ("reads_scale.py",),
    ),
    Row(
        "renew p99 with 8 processes on one SQLite file / with 1 process",
        "<= 5x, no starvation (fairness >= 0.9)",
        ("contention.py",),
    ),
    Row("`wait-any` over 64 targets: idle CPU, set-up time", "< 5% of a core, < 5 ms", ("waitany.py", "agents.py")),
    Row(
        "cold `corral controller renew` / cold `python -c pass`",
        "<= 6x; every verb's ratio in a table",
        ("coldstart.py",),
    ),
    # Issue 14: the MCP server.
    Row(
        "MCP round trip over stdio (`corral_status`, `corral_controller_renew`), overhead over the in-process call",
        "< 5 ms median",
        ("mcp.py",),
    ),
    Row("corral_wait_any wake-up over MCP, end to end", "< 10 ms median", ("mcp.py",)),
    Row("cold `corral mcp` to `initialize` answered / cold `python -c pass`", "value only", ("mcp.py",)),
    # Issue 15: the HTTP API.
    Row("GET /api/status over HTTP, median (in process beside it)", "value only", ("http_api.py",)),
    Row("POST renew over HTTP, median (in process beside it)", "value only", ("http_api.py",)),
    Row("SSE fan-out, 1000 events/s to 50 subscribers: delivery p99", "< 50 ms", ("http_api.py",)),
    Row("corral serve RSS after the fan-out", "value only", ("http_api.py",)),
    # Issue 17: the agent mesh (PostgreSQL's figures join their rows when a server is given).
    Row("mesh send-to-inbox latency, median (sqlite)", "< 10 ms", ("mesh.py",)),
    Row("mesh inbox read with 10k unacked, median (sqlite)", "< 20 ms", ("mesh.py",)),
    Row(
        "mesh 100 agents checking in every second: check-in p99 (sqlite)",
        "< 50 ms, and every second's 100 check-ins done within it",
        ("mesh.py",),
    ),
    # Issue 16: PostgreSQL beside SQLite, in one run.
    Row("renew median, PostgreSQL / SQLite", "value only", ("postgres.py",)),
    Row("200-step plan, PostgreSQL / SQLite", "value only", ("postgres.py",)),
    Row("writer throughput with 8 processes, PostgreSQL / SQLite", ">= 1.5x", ("postgres.py",)),
    Row("notified wait wake-up (PostgreSQL), median", "< 10 ms median", ("postgres.py",)),
    # Issue 18: handoff memory.
    Row("memory checkpoint write latency, p50", "< 20 ms", ("memory.py",)),
    Row("memory search over 100k checkpoints, p50", "< 50 ms", ("memory.py",)),
    # Issue 23: the real agent drivers.
    Row(
        "agent driver overhead per prompt over the bare CLI on the same scripted server (claude, codex)",
        "< 50 ms median",
        ("agents.py",),
    ),
    # The model checker.
    Row(
        "`corral check` of all shipped machines, 3 actors, every fault: time; states explored",
        "< 60 s",
        ("check.py",),
    ),
    # Issue 27: proof (make chaos's checker).
    Row("chaos checker time per 10,000 operations", "< 1 s", ("chaos_check.py",)),
    # Issue 28: every verb, not only renew.
    Row(
        "slowest cold `corral` verb / cold `python -c pass`",
        "<= 10x, the slowest three with their imports",
        ("coldstart.py",),
    ),
    # Issue 28: group commit across the writers of one process.
    Row(
        "group commit: 64 concurrent renews on one store, transactions/s / the bare one-commit-per-transaction"
        " rate, synchronous=FULL",
        ">= 5x, every acknowledged write durable (the SIGKILL test of tests/store/test_group_commit.py)",
        ("groupcommit.py",),
    ),
    # Issue 29: the dashboard at scale, in Chromium.
    Row(
        "dashboard first render, a plan of 10,000 events and 1,000 instances (Chromium)",
        "< 1000 ms",
        ("dashboard.py",),
    ),
    Row("dashboard filter, a plan of 10,000 events and 1,000 instances (Chromium)", "< 100 ms", ("dashboard.py",)),
    # Issue 28: what finer PostgreSQL locks could buy, measured without corral.
    Row(
        "what finer locks could buy: row locks / one lock, 8 processes, without corral",
        "value only",
        ("postgres.py",),
    ),
)


@dataclass
class Run:
    """What one bench script did: its figures, or why there are none."""

    script: str
    status: str  # ok | missing | unsupported | failed | timeout | no_json
    seconds: float = 0.0
    reason: str = ""
    figures: list[dict[str, Any]] = field(default_factory=list)


def supports_summary(path: Path) -> bool:
    """Whether a script offers ``--quick`` and a ``figures`` list (read from its source, not run)."""
    text = path.read_text(encoding="utf-8", errors="replace")
    return "--quick" in text and "--json" in text and "figures" in text


def run_script(path: Path, full: bool, timeout: float, python: str) -> Run:
    name = path.name
    if not path.is_file():
        return Run(name, "missing", reason=f"bench/{name} does not exist (yet)")
    if not supports_summary(path):
        return Run(name, "unsupported", reason=f"bench/{name} has no --quick/--json figures")
    argv = [python, str(path), "--json"] + ([] if full else ["--quick"])
    started = time.perf_counter()
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False, env=os.environ.copy())
    except subprocess.TimeoutExpired:
        return Run(name, "timeout", time.perf_counter() - started, f"bench/{name} ran longer than {timeout:g} s")
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or done.stdout.strip().splitlines() or ["no output"])[-1]
        return Run(name, "failed", seconds, f"bench/{name} exited with status {done.returncode}: {tail[:200]}")
    try:
        doc = json.loads(done.stdout)
    except ValueError:
        return Run(name, "no_json", seconds, f"bench/{name} printed no JSON document on stdout")
    figures = doc.get("figures") if isinstance(doc, dict) else None
    if not isinstance(figures, list):
        return Run(name, "no_json", seconds, f"bench/{name}'s JSON has no 'figures' list")
    good = [f for f in figures if isinstance(f, dict) and isinstance(f.get("figure"), str)]
    return Run(name, "ok", seconds, figures=good)


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def assign(rows: tuple[Row, ...], runs: dict[str, Run]) -> dict[str, list[dict[str, Any]]]:
    """Each figure to the row it names: the exact name first, else the row of its script sharing the most words."""
    by_row: dict[str, list[dict[str, Any]]] = {row.name: [] for row in rows}
    exact = {row.name: row for row in rows}
    for run in runs.values():
        own = [row for row in rows if run.script in row.scripts]
        for figure in run.figures:
            row = exact.get(figure["figure"])
            if row is None and own:
                row = max(own, key=lambda r: len(_words(r.name) & _words(figure["figure"])))
            if row is not None:
                by_row[row.name].append(figure | {"script": run.script})
    return by_row


def _value(figure: dict[str, Any]) -> str:
    value = figure.get("value")
    unit = figure.get("unit") or ""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "—"
    text = f"{value:.3g}" if isinstance(value, float) else str(value)
    return f"{text} {unit}".strip() if unit not in ("x", "%") else f"{text}{unit}"


def table(rows: tuple[Row, ...], runs: dict[str, Run]) -> list[dict[str, Any]]:
    """The summary's rows: one entry per figure measured, one *not measured* entry for a row with none."""
    by_row = assign(rows, runs)
    out: list[dict[str, Any]] = []
    for number, row in enumerate(rows, 1):
        figures = by_row[row.name]
        if not figures or all(f.get("skipped") for f in figures):
            reasons = [runs[s].reason for s in row.scripts if s in runs and runs[s].reason]
            if figures:
                reasons = [str(f.get("detail", "skipped")) for f in figures]
            if not reasons:
                reasons = [f"no figure for this row from {', '.join('bench/' + s for s in row.scripts)}"]
            out.append(
                {
                    "row": number,
                    "name": row.name,
                    "target": row.target,
                    "figure": None,
                    "value": None,
                    "unit": None,
                    "met": None,
                    "status": "not measured",
                    "reason": "; ".join(reasons),
                    "script": None,
                }
            )
            continue
        for figure in figures:
            skipped = bool(figure.get("skipped"))
            out.append(
                {
                    "row": number,
                    "name": row.name,
                    "target": figure.get("target") or row.target,
                    "figure": figure["figure"],
                    "value": figure.get("value"),
                    "unit": figure.get("unit"),
                    "met": None if skipped else bool(figure.get("met")),
                    "status": "not measured" if skipped else ("met" if figure.get("met") else "not met"),
                    "reason": str(figure.get("detail", "")),
                    "script": figure["script"],
                }
            )
    return out


def render(entries: list[dict[str, Any]], runs: dict[str, Run], full: bool) -> str:
    lines = [
        f"issue 13 to 28 targets ({'full' if full else '--quick'} runs; ratios within one run are what to read)",
        "",
    ]
    width = 60
    lines.append(f"{'#':>2}  {'figure':{width}}  {'value':>12}  {'target':28}  status")
    for entry in entries:
        name = entry["figure"] or entry["name"]
        shown = name if len(name) <= width else name[: width - 1] + "…"
        value = _value(entry) if entry["value"] is not None else "—"
        target = entry["target"] if len(entry["target"]) <= 28 else entry["target"][:27] + "…"
        status = entry["status"].upper() if entry["status"] == "not met" else entry["status"]
        lines.append(f"{entry['row']:>2}  {shown:{width}}  {value:>12}  {target:28}  {status}")
        if entry["status"] == "not measured":
            lines.append(f"    {'':{width}}  why: {entry['reason']}")
    lines += ["", "details:"]
    for entry in entries:
        if entry["figure"] is not None and entry["reason"]:
            lines.append(f"  {entry['row']:>2} [{entry['script']}] {entry['figure']}: {entry['reason']}")
    lines += ["", "scripts:"]
    for run in runs.values():
        lines.append(f"  bench/{run.script:16} {run.status:12} {run.seconds:6.1f} s  {run.reason}".rstrip())
    counts = {s: sum(1 for e in entries if e["status"] == s) for s in ("met", "not met", "not measured")}
    lines += ["", f"{counts['met']} met, {counts['not met']} not met, {counts['not measured']} not measured"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--full", action="store_true", help="the full runs instead of --quick")
    parser.add_argument("--json", action="store_true", help="print the table as JSON")
    parser.add_argument("--timeout", type=float, help="seconds allowed per script (default: 300, --full: 1200)")
    parser.add_argument("--bench-dir", type=Path, default=HERE, help="where the bench scripts are (default: here)")
    parser.add_argument(
        "--only",
        help="comma-separated script names to run (the other rows: not measured, and not counted in the exit status)",
    )
    parser.add_argument("--strict", action="store_true", help="exit 1 on a row not met too (not only not measured)")
    args = parser.parse_args(argv)
    timeout = args.timeout or (1200.0 if args.full else 300.0)
    scripts = list(dict.fromkeys(s for row in ROWS for s in row.scripts))
    if args.only:
        wanted = {s.strip() if s.strip().endswith(".py") else s.strip() + ".py" for s in args.only.split(",")}
        scripts = [s for s in scripts if s in wanted]
    runs: dict[str, Run] = {}
    for script in scripts:
        if not args.json:
            print(f"running bench/{script} ...", file=sys.stderr, flush=True)
        runs[script] = run_script(args.bench_dir / script, args.full, timeout, sys.executable)
    entries = table(ROWS, runs)
    if args.json:
        doc = {
            "mode": "full" if args.full else "quick",
            "rows": entries,
            "scripts": {
                r.script: {"status": r.status, "seconds": round(r.seconds, 2), "reason": r.reason}
                for r in runs.values()
            },
        }
        print(json.dumps(doc, indent=2, ensure_ascii=False))
    else:
        print(render(entries, runs, args.full))
    failures = failed(entries, runs, args.strict)
    for failure in failures:
        print(f"bench/summary.py: {failure}", file=sys.stderr)
    return 1 if failures else 0


def failed(entries: list[dict[str, Any]], runs: dict[str, Run], strict: bool) -> list[str]:
    """Why this summary fails: scripts that did not run cleanly, rows not measured (and, ``strict``, not met).

    Only the rows of the scripts that ran count (all of them, unless ``--only`` chose some)."""
    out = [
        f"bench/{run.script} did not run cleanly ({run.status}): {run.reason}"
        for run in runs.values()
        if run.status != "ok"
    ]
    for entry in entries:
        if not set(ROWS[entry["row"] - 1].scripts) & set(runs):
            continue
        if entry["status"] == "not measured":
            out.append(f"row {entry['row']} is not measured: {entry['reason'][:300]}")
        elif strict and entry["status"] != "met":
            out.append(f"row {entry['row']} is not met (--strict): {entry['figure']}")
    return out


if __name__ == "__main__":
    sys.exit(main())
