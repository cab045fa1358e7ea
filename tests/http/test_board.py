"""The dashboard's read-only views (``/api/dashboard/...``) against a real ``corral serve`` on loopback.

Plans are run by the real CLI in the server's state home: one that pauses on a person's approval,
one whose step fails and is retried. The views must list the approval with the command that settles
it, draw the retried step's attempts, search the event log by every filter, and refuse bad input
with a stable code; nothing secret may appear in any answer.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from runner.http.routes import VIEWS
from tests.http.conftest import SHA, Served, acquire, server_env
from tests.http.recipes import FLAKY, GATE

pytestmark = pytest.mark.slow  # the real executable


def run_plan(home: Path, tmp_path: Path, plan_id: str, recipe: str) -> int:
    plan = tmp_path / f"{plan_id}.yaml"
    plan.write_text(f"plan: {plan_id}\nrecipe: {recipe}\ncontroller: ctl-{plan_id}\ninputs: {{}}\n")
    env = server_env(home, CORRAL_RECIPES=str(home / "recipes"))
    done = subprocess.run(
        [sys.executable, "-m", "runner.cli", "run", str(plan), "--json"],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    return done.returncode


@pytest.fixture
def plans(state_home: Path, tmp_path: Path) -> Path:
    recipes = state_home / "recipes"  # the server's ./recipes (it runs in its state home)
    recipes.mkdir()
    (recipes / "gate.yaml").write_text(GATE)
    (recipes / "flaky.yaml").write_text(FLAKY)
    assert run_plan(state_home, tmp_path, "p-gate", "gate") == 5  # paused: a person decides
    assert run_plan(state_home, tmp_path, "p-flaky", "flaky") == 1  # failed after three attempts
    return state_home


def get(served: Served, path: str, **params: Any) -> Any:
    with served.client() as client:
        return client.get(path, params=params)


def test_attention_lists_a_waiting_approval_with_its_command_and_decision_id(plans: Path, serve: Any) -> None:
    served = serve()
    answer = get(served, "/api/dashboard/attention")
    assert answer.status_code == 200, answer.text
    doc = answer.json()
    [item] = [i for i in doc["items"] if i["kind"] == "decision"]
    assert item["id"] == "plan:p-gate:approve"
    assert item["decision"] == "plan:p-gate:approve"  # POST /api/decisions/{id} takes it now
    assert item["command"].startswith("corral plans decide p-gate --step approve")
    assert "Ship release 1.2?" in item["title"]
    assert item["subject"] == {"plan": "p-gate", "step": "approve"}
    assert doc["counts"]["decision"] == 1
    # A failed plan needs nobody: it is not listed.
    assert not [i for i in doc["items"] if i["subject"].get("plan") == "p-flaky"]


def test_a_live_controller_needs_nobody(serve: Any) -> None:
    served = serve()
    with served.client() as client:
        acquire(client, "ctl-short", ttl=600)
    doc = get(served, "/api/dashboard/attention").json()
    assert doc["items"] == []
    assert set(doc["counts"]) == {
        "decision", "agent_blocked", "receipt_ambiguous", "controller_expired", "runner_stale", "plan_paused",
    }  # fmt: skip


def test_the_timeline_draws_each_attempt_of_a_retried_step(plans: Path, serve: Any) -> None:
    served = serve()
    doc = get(served, "/api/dashboard/plans/p-flaky/timeline").json()
    assert doc["plan"] == "p-flaky"
    assert doc["state"] == "failed"
    steps = {s["id"]: s for s in doc["steps"]}
    assert list(steps) == ["before", "flaky"]
    flaky = steps["flaky"]
    assert [a["attempt"] for a in flaky["attempts"]] == [1, 2, 3]
    assert flaky["retries"] == 2
    assert [a["state"] for a in flaky["attempts"]][-1] == "failed"
    assert flaky["attempts"][-1]["error"] == "flaky"
    for a in flaky["attempts"]:
        assert a["started_at"] <= a["ended_at"]
    # The attempts follow one another and the step after the one before it.
    starts = [a["started_at"] for a in flaky["attempts"]]
    assert starts == sorted(starts) and steps["before"]["attempts"][0]["ended_at"] <= starts[0]
    assert doc["started_at"] == steps["before"]["attempts"][0]["started_at"]
    assert doc["ended_at"] is not None
    # No agent ran: what it spent is unknown, never a made-up zero.
    assert (flaky["tokens"], flaky["cost_usd"], doc["tokens"]) == (None, None, None)

    gate = get(served, "/api/dashboard/plans/p-gate/timeline").json()
    approve = {s["id"]: s for s in gate["steps"]}["approve"]
    [waiting] = approve["attempts"]
    assert waiting["state"] == "waiting" and waiting["ended_at"] is None
    assert waiting["wait"]["kind"] == "approval" and waiting["wait"]["until"] is None
    assert {s["id"]: s for s in gate["steps"]}["after"]["attempts"] == []  # not run yet
    assert gate["ended_at"] is None


def test_the_event_search_filters_by_plan_trigger_actor_time_and_text(plans: Path, serve: Any) -> None:
    served = serve()
    every = get(served, "/api/dashboard/events", limit=10000).json()
    assert every["next_since"] is None and every["floor"] == 0
    assert {e["instance"] for e in every["events"]} == {"plan/p-gate", "plan/p-flaky"}
    of_gate = get(served, "/api/dashboard/events", plan="p-gate").json()["events"]
    assert of_gate and {e["instance"] for e in of_gate} == {"plan/p-gate"}
    steps = get(served, "/api/dashboard/events", plan="p-flaky", trigger="step").json()["events"]
    assert steps and {e["trigger"] for e in steps} == {"step"}
    assert get(served, "/api/dashboard/events", actor="nobody-like-this").json()["events"] == []
    middle = every["events"][len(every["events"]) // 2]
    later = get(served, "/api/dashboard/events", after=middle["at"]).json()["events"]
    assert later and min(e["at"] for e in later) >= middle["at"]
    assert all(
        e["at"] < middle["at"] for e in get(served, "/api/dashboard/events", before=middle["at"]).json()["events"]
    )
    found = get(served, "/api/dashboard/events", q="FLAKY").json()["events"]
    assert found and {e["instance"] for e in found} == {"plan/p-flaky"}
    # A page: at most `limit`, and next_since continues after the last one read.
    first = get(served, "/api/dashboard/events", limit=2).json()
    assert [e["seq"] for e in first["events"]] == [e["seq"] for e in every["events"][:2]]
    rest = get(served, "/api/dashboard/events", since=first["next_since"], limit=10000).json()
    assert [e["seq"] for e in first["events"] + rest["events"]] == [e["seq"] for e in every["events"]]


@pytest.mark.parametrize(
    ("path", "params", "status", "code"),
    [
        ("/api/dashboard/events", {"bogus": "1"}, 422, "input_invalid"),
        ("/api/dashboard/events", {"limit": "0"}, 422, "input_invalid"),
        ("/api/dashboard/events", {"limit": "many"}, 422, "input_invalid"),
        ("/api/dashboard/events", {"after": "yesterday"}, 422, "input_invalid"),
        ("/api/dashboard/events", {"plan": "no-such-plan"}, 404, "plan_unknown"),
        ("/api/dashboard/plans/no-such-plan/timeline", {}, 404, "plan_unknown"),
        ("/api/dashboard/attention", {"all": "1"}, 422, "input_invalid"),
    ],
)
def test_bad_input_is_refused_with_a_stable_code(
    serve: Any, path: str, params: dict[str, str], status: int, code: str
) -> None:
    answer = get(serve(), path, **params)
    assert (answer.status_code, answer.json()["error"]["code"]) == (status, code), answer.text


def test_the_views_need_the_bearer_token_and_show_no_credential(serve: Any, tmp_path: Path) -> None:
    token = "board-views-token-0123456789abcdef"
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    served = serve("--auth-token-file", str(token_file), token=token)
    with served.client(token=token) as client:
        granted = acquire(client, "ctl-secret")
        credential = granted["credential"]
        for view in VIEWS:
            path = view.path.replace("{plan_id}", "nope")
            with served.client(token="") as anonymous:
                assert anonymous.get(path).status_code == 401
            answer = client.get(path)
            assert credential not in answer.text
            assert credential.rsplit(".", 1)[1] not in answer.text  # nor its token part
            assert token not in answer.text


STUCK = """\
recipe: stuck
version: 1
description: one prompt that waits until a file exists
inputs: {type: object, properties: {cwd: {type: string}, text: {type: string}}}
steps:
  - id: acquire
    do: controller.acquire
    with: {authority_ref: T-29, authority_sha256: "SHA"}
  - id: start
    do: reviewer.start
    with: {name: rev, kind: streamer, cwd: "${inputs.cwd}"}
  - id: ask
    do: receipt.ask
    with: {target: rev, text: "${inputs.text}", timeout: 120}
""".replace("SHA", SHA)


def test_a_plan_whose_runner_died_is_listed_as_a_stale_runner(state_home: Path, serve: Any, tmp_path: Path) -> None:
    from tests.support import stream_agent

    (state_home / "agents.yaml").write_text(stream_agent.kind_yaml())
    (state_home / "recipes").mkdir()
    (state_home / "recipes" / "stuck.yaml").write_text(STUCK)
    project = tmp_path / "project"
    project.mkdir()
    go = project / "go"
    plan = tmp_path / "dead.yaml"
    plan.write_text(
        f"plan: p-dead\nrecipe: stuck\ncontroller: ctl-dead\ninputs: {{cwd: {project}, text: 'wait {go}'}}\n"
    )
    env = server_env(state_home, CORRAL_RECIPES=str(state_home / "recipes"))
    runner = subprocess.Popen(
        [sys.executable, "-m", "runner.cli", "run", str(plan), "--json"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    served = serve()
    try:
        give_up = time.monotonic() + 60
        while True:  # until the plan waits in its ask step (the agent waits for the file)
            shown = get(served, "/api/plans/p-dead")
            steps = {s["id"]: s for s in shown.json().get("steps", [])} if shown.status_code == 200 else {}
            if steps.get("ask", {}).get("state") == "running":
                break
            assert time.monotonic() < give_up, shown.text
            time.sleep(0.1)
        assert get(served, "/api/dashboard/attention").json()["counts"]["runner_stale"] == 0  # alive: nothing
        runner.send_signal(signal.SIGKILL)
        runner.wait(timeout=30)
        doc = get(served, "/api/dashboard/attention").json()
        [item] = [i for i in doc["items"] if i["kind"] == "runner_stale"]
        assert item["subject"] == {"plan": "p-dead"}
        assert item["command"] == "corral plans resume p-dead"
        assert f"pid {runner.pid}" in item["title"]
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait(timeout=30)
        go.write_text("")  # the agent ends its run
