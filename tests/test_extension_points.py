"""Every extension point, worked: the example plugin (tests/plugins/example, installed in the test
venv by ``make test``) adds a guard, an update, an effect, a step operation, an agent host and a
store through entry points, and each is used here through the real ``corral`` executable (the
guard, update and effect also through the engine), as a third party's would be.
"""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from runner.definitions.library import Library
from runner.engine import Engine, Request
from runner.errors import RefusedError
from runner.store import open_store
from tests.support.plans import steps_by_id

SHA = "0" * 64

MACHINE = """\
# yaml-language-server: $schema=../schemas/machine.schema.json
machine: ticketed
version: 1
description: Work done only under a ticket, noted outside the store (the example plugin's guard, update, effect).
initial: open
states:
  open: {description: waiting for a ticket}
  noting: {description: the note is being made, intermediate: true}
  noted: {description: done under a ticket, terminal: true}
  failed: {description: the note could not be made, terminal: true}
transitions:
  - trigger: note
    source: open
    dest: noting
    guards: [{name: example_ticket, with: {prefix: OPS}}]
    updates: [example_stamp]
    effects: [example_note]
    outcomes: {success: noted, failure: failed}
data:
  ticket: {type: string}
  note: {type: string}
"""

RECIPE = """\
recipe: echoing
version: 1
description: Uses the example plugin's step operation.
inputs: {type: object, required: [text], properties: {text: {type: string}}}
steps:
  - {id: echo, do: example.echo, with: {text: "${inputs.text}"}}
  - {id: after, do: flow.pass, with: {values: {got: "${steps.echo.echoed}"}}}
"""


@pytest.fixture(autouse=True)
def example_plugin_installed() -> None:
    try:
        metadata.distribution("corral-example-plugin")
    except metadata.PackageNotFoundError:
        pytest.fail(
            "the example plugin is not installed in this venv: "
            "pip install --no-build-isolation --no-deps -e tests/plugins/example (make test and make test-fast do it)"
        )


@pytest.fixture
def run(cli_env: dict[str, str], tmp_path: Path) -> Any:
    def corral(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(Path(sys.executable).parent / "corral"), *args],
            capture_output=True, text=True, env=cli_env, cwd=tmp_path, timeout=120, check=False,
        )  # fmt: skip

    return corral


def ok(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.returncode == 0, done.stderr or done.stdout
    return dict(json.loads(done.stdout)) if done.stdout.strip().startswith("{") else {}


def test_a_plugins_guard_update_and_effect_are_named_from_a_machine_and_run_by_the_engine(
    tmp_path: Path, run: Any
) -> None:
    machines = tmp_path / "machines"
    machines.mkdir()
    (machines / "ticketed.yaml").write_text(MACHINE)
    report = ok(run("validate", "--json", str(machines / "ticketed.yaml")))
    assert report["ok"] is True, report  # lint resolved every plugin name and its `with` arguments

    spec = Library(cache_dir=tmp_path / "cache").load(machines / "ticketed.yaml")
    with open_store(f"sqlite://{tmp_path / 'engine.db'}") as store:
        engine = Engine(store, Library(cache_dir=tmp_path / "cache"))
        with pytest.raises(RefusedError) as refused:
            engine.fire(spec, Request("ticketed/1", "note", params={"ticket": "DEV-1"}, actor="t"))
        assert refused.value.code == "ticket_missing" and store.get("ticketed/1") is None
        result = engine.fire(spec, Request("ticketed/1", "note", params={"ticket": "OPS-12"}, actor="t"))
        assert (result.instance.state, result.outcome) == ("noted", "success")
        assert result.instance.data == {"ticket": "OPS-12", "note": "noted OPS-12"}


def test_a_plugins_step_operation_runs_in_a_plan(tmp_path: Path, run: Any) -> None:
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "echoing.yaml").write_text(RECIPE)
    plan = tmp_path / "plan.yaml"
    plan.write_text("plan: echo-1\nrecipe: echoing\ncontroller: ctl\ninputs: {text: hello}\n")
    ok(run("run", str(plan)))
    shown = ok(run("plans", "show", "echo-1", "--json"))
    steps = steps_by_id(shown)
    assert (shown["plan"], shown["state"]) == ("echo-1", "succeeded"), shown
    assert steps["echo"]["outputs"] == {"echoed": "hello", "plan": "echo-1"}
    assert steps["after"]["outputs"] == {"got": "hello"}


def test_a_plugins_agent_host_runs_a_reviewer(tmp_path: Path, run: Any, cli_env: dict[str, str]) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "README.md").write_text("a project\n")
    ok(run("controller", "acquire", "--controller", "c", "--authority-ref", "r", "--authority-sha256", SHA))
    start = ["reviewer", "start", "--controller", "c", "--kind", "script", "--cwd", str(project), "--json"]
    lease = ok(run(*start, "--name", "r1", "--host", "example"))
    assert lease["lease"]["host"] == "example"
    answer = ok(run("ask", "r1", "--controller", "c", "--text", "please review", "--timeout", "60", "--json"))
    assert answer["receipt"]["state"] == "completed" and answer["output"].strip()
    assert (Path(cli_env["CORRAL_HOME"]) / "example-agents").is_dir()  # the plugin's own state directory
    refused = run(*start, "--name", "r2", "--host", "nowhere")
    assert refused.returncode == 2  # a usage error, as the fixed list of hosts was: the contract holds
    error = json.loads(refused.stdout)["error"]
    assert error["code"] == "usage" and "'nowhere'" in error["message"]
    assert "'example'" in error["message"] and "'process'" in error["message"]  # the known hosts are listed


def test_a_plugins_store_holds_leases_and_agents(tmp_path: Path, run: Any) -> None:
    url = f"example://{tmp_path / 'example.db'}"
    ok(run("--store", url, "controller", "acquire", "--controller", "c", "--authority-ref", "r",
           "--authority-sha256", SHA))  # fmt: skip
    renewed = ok(run("--store", url, "controller", "renew", "--controller", "c", "--json"))
    assert renewed["lease"]["state"] == "active"
    status = ok(run("--store", url, "status", "--json"))
    assert status["store"]["adapter"] == "example"
    # The credential is bound to the store it was granted by: the default store refuses it.
    other = run("controller", "renew", "--controller", "c", "--json")
    assert other.returncode == 3 and json.loads(other.stdout)["error"]["code"] == "credential_store_mismatch"
    # The process host keeps its agents in the plugin's store through the slot port it registers.
    project = tmp_path / "project"
    project.mkdir()
    ok(run("--store", url, "reviewer", "start", "--controller", "c", "--name", "r1", "--kind", "script",
           "--cwd", str(project)))  # fmt: skip
    agents = ok(run("--store", url, "agents", "--json"))
    assert [a["name"] for a in agents["agents"]] == ["r1"]


def test_the_example_plugin_covers_every_extension_point() -> None:
    groups = {point.group for point in metadata.distribution("corral-example-plugin").entry_points}
    assert groups == {
        "corral.guards",
        "corral.updates",
        "corral.effects",
        "corral.operations",
        "corral.agent_hosts",
        "corral.stores",
        "corral.slot_stores",
    }
