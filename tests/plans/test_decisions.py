"""A plan that meets a blocked agent pauses on it, and a person decides (issue 11): through the real
executable, the shipped review recipe and a scripted agent that blocks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.plans.test_run import corral, json_lines
from tests.support.plans import steps_by_id

SHA = "0" * 64


def blocked_review(tmp_path: Path, plan_id: str) -> Path:
    project = tmp_path / "project"
    project.mkdir(exist_ok=True)
    path = tmp_path / f"{plan_id}.json"
    path.write_text(
        json.dumps(
            {
                "plan": plan_id,
                "recipe": "review",
                "controller": "ctl",
                "inputs": {
                    "cwd": str(project),
                    "prompt": "echo I need a person\nblock",
                    "kind": "script",
                    "reviewer": plan_id,
                    "timeout": 60,
                    "authority_ref": "decisions test",
                    "authority_sha256": SHA,
                },
            }
        )
    )
    return path


def show(env: dict[str, str], cwd: Path, plan_id: str) -> Any:
    shown = corral(env, cwd, "plans", "show", plan_id, "--json")
    assert shown.returncode == 0, shown.stdout + shown.stderr
    return json.loads(shown.stdout)


@pytest.mark.parametrize("verdict", ["--approve", "--reject"])
def test_a_blocked_agent_pauses_the_plan_until_a_person_decides(
    tmp_path: Path, cli_env: dict[str, str], verdict: str
) -> None:
    plan_id = f"decide-{verdict[2:]}"
    ran = corral(cli_env, tmp_path, "run", str(blocked_review(tmp_path, plan_id)), "--json")
    assert json_lines(ran.stdout)[-1]["state"] == "paused", ran.stdout + ran.stderr
    shown = show(cli_env, tmp_path, plan_id)
    waiting = shown["waiting_on"]
    assert (waiting["kind"], waiting["step"], waiting["target"]) == ("agent_blocked", "collect", plan_id)
    assert waiting["since"]
    assert steps_by_id(shown)["collect"]["state"] == "waiting"
    assert "I need a person" in json.dumps(shown["collected"]), "plans show hands out the collected text"
    status = json.loads(corral(cli_env, tmp_path, "status", "--json").stdout)
    (paused,) = [item for item in status["needs_attention"] if item["kind"] == "plan_paused"]
    assert paused["plan"] == plan_id and f"corral plans decide {plan_id} --step collect" in paused["next"]
    refused = corral(cli_env, tmp_path, "plans", "decide", plan_id, "--step", "relay", "--approve", "--reason", "x")
    assert refused.returncode == 4 and "plan_not_waiting" in refused.stderr + refused.stdout

    decided = corral(
        cli_env, tmp_path, "plans", "decide", plan_id, "--step", "collect", verdict, "--reason", "seen by ops", "--json"
    )
    final = json_lines(decided.stdout)[-1]
    steps = steps_by_id(final)
    if verdict == "--approve":
        assert final["state"] == "succeeded", decided.stdout + decided.stderr
        assert steps["collect"]["state"] == "succeeded" and steps["collect"]["decision"]["approve"] is True
    else:
        assert final["state"] == "failed"
        assert (final["failure"]["step"], final["failure"]["code"]) == ("collect", "decision_rejected")
    assert steps["close"]["state"] == "succeeded", "the clean-up closed the blocked agent on the recorded decision"
    events = corral(cli_env, tmp_path, "events", "--json").stdout
    decide = [json.loads(line) for line in events.splitlines() if '"trigger": "decide"' in line or '"decide"' in line]
    assert any(e["trigger"] == "decide" and e["actor"].startswith("cli:") for e in decide)
    reviewers = json.loads(corral(cli_env, tmp_path, "reviewer", "list", "--all", "--json").stdout)["reviewers"]
    (lease,) = [r for r in reviewers if r["name"] == plan_id]
    assert lease["state"] == "closed" and "seen by ops" in lease["decision"]["reason"]
