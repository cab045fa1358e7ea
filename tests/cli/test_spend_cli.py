"""Spend against budget and live progress through the real ``corral`` executable (issue 23):
``status`` and ``agent read`` while a driven agent (a real subprocess printing Claude's stream-json)
works and after; ``--json`` gains ``spend`` beside the fields it had."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

from tests.support import stream_agent

SHA = "e" * 64


def ok(proc: subprocess.CompletedProcess[str]) -> Any:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout) if proc.stdout.startswith("{") else proc.stdout


def test_status_shows_spend_against_budget_and_agent_read_shows_progress(
    corral: Any, project: Path, home: Path
) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "agents.yaml").write_text(stream_agent.kind_yaml())
    ok(corral("controller", "acquire", "--controller", "ctl", "--authority-ref", "T", "--authority-sha256", SHA))
    lease = ok(
        corral(
            "reviewer", "start", "--controller", "ctl", "--name", "rev", "--kind", "streamer", "--cwd", str(project),
            "--budget-usd", "1", "--budget-tokens", "1000", "--max-turns", "5", "--json",
        )
    )["lease"]  # fmt: skip
    go = project / "go"
    relayed = ok(corral("relay", "rev", "--controller", "ctl", "--json", stdin=f"read lib.py\nwait {go}\nreviewed"))
    deadline = time.monotonic() + 30
    while "tool Read lib.py" not in (read := ok(corral("agent", "read", lease["pane_id"]))):
        assert time.monotonic() < deadline, read
        time.sleep(0.05)
    assert stream_agent.SECRET not in read
    go.write_text("")
    ok(corral("collect", "--receipt", relayed["receipt"]["token"], "--controller", "ctl", "--json"))
    report = ok(corral("status", "--json"))
    assert {"version", "store", "counts", "locks", "needs_attention"} <= set(report)  # what it had stays
    (row,) = report["spend"]
    assert (row["name"], row["machine"], row["lease"]) == ("rev", "reviewer", lease["id"])
    assert row["spend"] == {"tokens": 120, "cost_usd": 0.25, "turns": 1, "runs": 1}
    assert row["budget"] == {"budget_usd": 1, "budget_tokens": 1000, "max_turns": 5}
    assert row["left"] == {"budget_usd": 0.75, "budget_tokens": 880, "max_turns": 4}
    text = ok(corral("status"))
    assert f"reviewer rev: session {row['session_id']}; 120 tokens of 1000, $0.25 of $1, 1 turn of 5 (1 run)" in text


def test_plans_show_prints_what_the_plan_leases_spent(corral: Any, project: Path, home: Path, tmp_path: Path) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "agents.yaml").write_text(stream_agent.kind_yaml())
    inputs = {
        "cwd": str(project), "prompt": "read lib.py\nreviewed", "kind": "streamer", "timeout": 60,
        "verdict_schema": None, "authority_ref": "T-1", "authority_sha256": SHA,
    }  # fmt: skip
    plan = tmp_path / "plan.yaml"
    plan.write_text(json.dumps({"plan": "rev-1", "recipe": "review", "controller": "ctl", "inputs": inputs}))
    ran = corral("run", str(plan), "--json")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    shown = ok(corral("plans", "show", "rev-1", "--json"))
    assert {"plan", "state", "live", "collected"} <= set(shown)  # what it had stays
    (row,) = shown["spend"]["leases"]
    assert row["name"] == "reviewer" and row["state"] == "closed"
    assert shown["spend"]["total"] == {"tokens": 120, "cost_usd": 0.25, "turns": 1, "runs": 1}
    text = ok(corral("plans", "show", "rev-1"))
    assert f"reviewer reviewer (closed): session {row['session_id']}; 120 tokens, $0.25, 1 turn (1 run)" in text


def test_a_spend_line_says_each_limit_set_and_the_one_reached() -> None:
    from runner.cli.render import spend_line

    assert spend_line({"spend": {}}) == "0 tokens, $0, 0 turns"
    row = {
        "spend": {"tokens": 2000, "cost_usd": 1.5, "turns": 2, "runs": 2},
        "budget": {"budget_usd": 1.0},
        "exhausted": {"limit": "budget_usd", "budget": 1.0, "spent": 1.5},
    }
    assert spend_line(row) == "2000 tokens, $1.5 of $1, 2 turns (2 runs); budget exhausted (budget_usd)"
