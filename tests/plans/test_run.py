"""Plans end to end: every built-in recipe with the scripted agent, in real directories and real linked
git worktrees, through the in-process plans component (credentials in a ``MemoryKeeper``) and through
the real ``corral run``; idempotency by plan id; ``when``, ``retry``, ``catch``, ``finally``; cancel.

Expected git facts are computed here with git in a subprocess, never through the code under test.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import anyio
import pytest

from runner.agents.kinds import Kinds
from runner.agents.process import ProcessHost
from runner.cli.plans import _print_summary
from runner.context import Instance
from runner.definitions.operations import OPERATIONS as CATALOGUE
from runner.definitions.recipes import RecipeLibrary
from runner.errors import CorralError, RefusedError, StoreUnavailableError
from runner.plans.keeper import MemoryKeeper
from runner.plans.ops import OPERATIONS, OpContext, Operation, Outputs
from runner.service import AcquireInput, Service, WriterStartInput
from runner.service.inputs.memory import CheckpointInput, ShowInput
from runner.service.inputs.plans import PlanCancelInput, PlanListInput, PlanRunInput, PlanSubmitInput
from runner.service.plans import PlanConflictError, Plans
from runner.service.steps import RUN, Resume
from runner.sql.store_sqlite import SQLiteStore
from tests.support.gitrepo import git, status_digest
from tests.support.plans import step_records, steps_by_id
from tests.support.specs import shared_library

AUTHORITY = hashlib.sha256(b"the plan's authority").hexdigest()
VALIDATE = """\
validations:
  - name: compiles
    argv:
      - python3
      - -c
      - "import pathlib; [compile(p.read_text(), str(p), 'exec') for p in pathlib.Path('.').rglob('*.py')]"
  - name: feature
    argv: [python3, -c, "import sys; sys.path.insert(0, 'src'); import feature; assert feature.feature() == 42"]
"""
GOOD_CHANGE = "write src/feature.py def feature():\nappend src/feature.py     return 42"

pytestmark = pytest.mark.usefixtures("hermetic_git")


def make_lane(root: Path, branch: str = "lane") -> tuple[Path, Path, str]:
    """A repository whose base commit carries ``.corral/validate.yaml``, and a linked worktree on ``branch``."""
    repo = root / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    for name, text in {
        "README.md": "hello\n",
        "src/app.py": "print('app')\n",
        ".corral/validate.yaml": VALIDATE,
    }.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    worktree = root / "lane"
    git(repo, "worktree", "add", "-q", "-b", branch, str(worktree))
    return repo, worktree, git(worktree, "rev-parse", "HEAD")


class Rig:
    """A real SQLite store (wall clock), the real process host, a service and an in-process executor."""

    def __init__(self, root: Path, recipe_dirs: list[Path] | None = None) -> None:
        self.root = root
        self.store = SQLiteStore(root / "corral.db")
        self.kinds = Kinds.load([])
        self.host = ProcessHost(self.store, root / "agents", self.kinds)
        self.service = Service(
            self.store, shared_library(), actor="test", hosts=lambda name: self.host, kinds=self.kinds
        )
        self.keeper = MemoryKeeper()
        self.progress: list[dict[str, Any]] = []
        self.recipes = RecipeLibrary(recipe_dirs or [])
        (root / "scratch").mkdir()
        self.plans = Plans(self.service, self.recipes, self.keeper, OPERATIONS, scratch=root / "scratch")
        self.project = root / "project"
        self.project.mkdir()
        (self.project / "main.py").write_text("print('hi')\n")

    def plan(self, plan_id: str, recipe: str, controller: str = "ctl", **inputs: Any) -> dict[str, Any]:
        return {"plan": plan_id, "recipe": recipe, "controller": controller, "inputs": inputs}

    def review(self, plan_id: str = "rev-1", **inputs: Any) -> dict[str, Any]:
        fields = {
            "cwd": str(self.project),
            "prompt": "Review this project.\necho reviewed",
            "kind": "script",
            "timeout": 60,
            "authority_ref": "T-1",
            "authority_sha256": AUTHORITY,
            **inputs,
        }
        return self.plan(plan_id, "review", **fields)

    def run(self, doc: dict[str, Any]) -> Instance:
        self.plans.submit(PlanSubmitInput(doc))
        return anyio.run(self.plans.run, PlanRunInput(str(doc["plan"])), self.progress.append)

    def events(self) -> list[Any]:
        return self.store.events()

    def step_log(self, plan_id: str) -> list[tuple[str, str, int | None]]:
        """(step, record state, attempt) for every ``step`` event of the plan, in order."""
        return [
            (step, record["state"], record.get("attempt"))
            for step, record in step_records(e.payload for e in self.events() if e.instance_id == f"plan/{plan_id}")
        ]

    def run_logs(self) -> list[str]:
        return sorted(str(p.relative_to(self.root / "agents")) for p in (self.root / "agents").glob("*/run-*.log"))

    def kinds_of(self, event: str) -> list[dict[str, Any]]:
        return [p for p in self.progress if p["event"] == event]


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    made = Rig(tmp_path)
    yield made
    made.store.close()


def recipe_dir(tmp_path: Path, **recipes: str) -> Path:
    directory = tmp_path / "my-recipes"
    directory.mkdir(exist_ok=True)
    for name, text in recipes.items():
        (directory / f"{name}.yaml").write_text(textwrap.dedent(text))
    return directory


def ran(records: list[tuple[str, str, int | None]], state: str) -> list[str]:
    return [step for step, s, _ in records if s == state]


def started(rig: Rig) -> list[str]:
    """Every step attempt the runner started, in order (a pure step has no ``running`` record to count)."""
    return [p["step"] for p in rig.kinds_of("step_started")]


# --- review -----------------------------------------------------------------------------------------------


def test_review_plan_runs_every_step_once_and_keeps_output_out_of_the_log(rig: Rig) -> None:
    plan = rig.run(rig.review())
    assert plan.state == "succeeded", plan.data.get("failure")
    steps = ["acquire", "start", "relay", "collect", "close", "release-controller"]
    assert rig.step_log("rev-1") == [(s, state, 1) for s in steps for state in ("running", "succeeded")]
    records = plan.data["steps"]
    assert records["relay"]["outputs"]["token"] == records["collect"]["outputs"]["token"]
    assert records["collect"]["outputs"]["settled_seq"] == 2 and records["collect"]["outputs"]["status"] == "done"
    assert records["close"]["outputs"]["state"] == "closed"
    assert plan.data["inputs"]["reviewer"] == "reviewer" and plan.data["inputs"]["ttl_seconds"] == 900, "defaults"

    (receipt,) = rig.store.find("receipt")
    assert receipt.state == "completed" and receipt.data["token"] == records["relay"]["outputs"]["token"]
    (reviewer,) = rig.store.find("reviewer")
    assert reviewer.state == "closed" and reviewer.id == records["start"]["outputs"]["lease"]
    assert resumed_outputs(rig, "rev-1", "close", "reviewer.close", "reviewer") == records["close"]["outputs"]

    output = plan.data["private"]["collect"]["output"]
    verdict = json.loads(output)  # the review recipe asks for a verdict (its verdict_schema)
    assert verdict["verdict"] == "approve" and "reviewed" in verdict["summary"], output
    assert plan.data["private"]["collect"]["verdict"] == verdict == receipt.data["verdict"]
    assert "verdict" not in records["collect"]["outputs"], "the agent's words are a private output"
    assert records["collect"]["outputs"]["denials"] == [] and records["collect"]["outputs"]["denied"] is False
    assert rig.run_logs() == ["p1/run-1.log"], "one prompt, one delivery"
    assert (rig.root / "agents" / "p1" / "run-1.log").read_text() == output
    assert receipt.data["output_sha256"] == hashlib.sha256(output.encode()).hexdigest()

    logged = json.dumps([e.to_dict() for e in rig.events()])
    assert "Review this project" not in logged and "main.py: 1 lines" not in logged
    assert [p["event"] for p in rig.progress][:2] == ["plan_started", "step_started"]
    assert rig.progress[-1] == {"plan": "rev-1", "event": "plan_succeeded"}


def resumed_outputs(rig: Rig, plan_id: str, step: str, do: str, name: str) -> dict[str, Any]:
    """What the plan would record for ``step`` had the runner died after the operation acted: the
    operation's resolution of a step found in flight."""
    ctx = OpContext(rig.plans, plan_id, step, 1, "ctl", None)
    operation = OPERATIONS.get(do)
    assert operation is not None
    found = operation.resume(ctx, {"name": name})
    assert found.kind == "done" and found.outputs is not None, found
    return found.outputs.public


async def handoff_again(rig: Rig, plan_id: str, worktree: Path) -> dict[str, Any]:
    """The writer lane's handoff step (memory.checkpoint) run once more for ``plan_id``."""
    operation = OPERATIONS.get("memory.checkpoint")
    assert operation is not None
    args = {"agent": "writer", "summary": "run again", "repository": str(worktree), "goal": "g", "next_steps": ["n"]}
    found = await operation.run(OpContext(rig.plans, plan_id, "handoff", 1, "ctl", None), args)
    return found.public


def corral_bin() -> str:
    return str(Path(sys.executable).parent / "corral")


def corral(env: dict[str, str], cwd: Path, *args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [corral_bin(), *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout, check=False
    )


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def event_count(db: Path) -> int:
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        return int(conn.execute("SELECT count(*) FROM events").fetchone()[0])


def plan_yaml(path: Path, plan_id: str, cwd: Path, prompt: str, **extra: Any) -> Path:
    doc = {
        "plan": plan_id,
        "recipe": "review",
        "controller": "ctl",
        "inputs": {
            "cwd": str(cwd),
            "prompt": prompt,
            "kind": "script",
            "timeout": 60,
            "authority_ref": "T-1",
            "authority_sha256": AUTHORITY,
            **extra,
        },
    }
    path.write_text(json.dumps(doc))  # JSON is YAML
    return path


def live_table(events: list[dict[str, Any]]) -> str:
    """What ``corral run`` shows a person at the end of these events: its live table, as text."""
    from rich.console import Console

    from runner.cli.plans import Progress

    progress = Progress(as_json=False)
    for event in events:
        progress(event)
    console = Console(file=io.StringIO(), width=200, color_system=None)
    console.print(progress._table())
    progress.close()
    return console.file.getvalue()  # type: ignore[attr-defined]


@pytest.fixture
def cli(tmp_path: Path, cli_env: dict[str, str]) -> dict[str, Any]:
    state = tmp_path / "state"
    state.mkdir()
    project = tmp_path / "project"
    project.mkdir()
    (project / "main.py").write_text("print('hi')\n")
    env = {**cli_env, "CORRAL_STORE": f"sqlite://{state / 'corral.db'}"}
    return {"env": env, "db": state / "corral.db", "project": project, "home": Path(cli_env["CORRAL_HOME"])}


def test_review_through_corral_run_is_idempotent_by_plan_id(tmp_path: Path, cli: dict[str, Any]) -> None:
    env, db = cli["env"], cli["db"]
    plan = plan_yaml(tmp_path / "plan.yaml", "cli-1", cli["project"], "Review it.\necho from the cli")
    first = corral(env, tmp_path, "run", str(plan), "--json")
    assert first.returncode == 0, first.stdout + first.stderr
    lines = json_lines(first.stdout)
    summary = lines[-1]
    assert summary["event"] == "summary" and summary["state"] == "succeeded"
    assert [line["event"] for line in lines].count("step_succeeded") == 6
    assert "from the cli" not in first.stdout, "no output text in the progress or summary"
    assert not (cli["home"] / "corral.db").exists(), "CORRAL_STORE is honoured"
    logs = sorted(p.name for p in (cli["home"] / "agents").glob("*/run-*.log"))
    assert logs == ["run-1.log"]
    events = event_count(db)

    progress = live_table([line for line in lines if line["event"] != "summary"])
    assert "cli-1 (succeeded)" in progress
    assert re.search(r"relay\s+succeeded\s+[\d.]+\s+receipt pending", progress), progress
    assert re.search(r"collect\s+succeeded\s+[\d.]+\s+receipt completed", progress), progress
    assert re.search(r"close\s+succeeded\s+[\d.]+\s+closed", progress), progress

    again = corral(env, tmp_path, "run", str(plan), "--json")
    assert again.returncode == 0, again.stdout + again.stderr
    assert json_lines(again.stdout)[-1]["state"] == "succeeded"
    assert event_count(db) == events, "the same plan again runs no step"
    human = corral(env, tmp_path, "run", str(plan))
    assert human.returncode == 0 and "plan cli-1 exists (succeeded): nothing to run" in human.stderr
    assert "succeeded" in human.stdout
    assert event_count(db) == events

    changed = plan_yaml(tmp_path / "changed.yaml", "cli-1", cli["project"], "Another question.")
    conflict = corral(env, tmp_path, "run", str(changed), "--json")
    assert conflict.returncode == 5, conflict.stdout + conflict.stderr
    assert json.loads(conflict.stdout)["error"]["code"] == "plan_conflict"
    assert event_count(db) == events, "a conflicting plan writes nothing"
    assert sorted(p.name for p in (cli["home"] / "agents").glob("*/run-*.log")) == ["run-1.log"]

    listed = json.loads(corral(env, tmp_path, "plans", "list", "--all", "--json").stdout)["plans"]
    assert [(p["plan"], p["state"], p["steps"]) for p in listed] == [("cli-1", "succeeded", 6)]
    shown = json.loads(corral(env, tmp_path, "plans", "show", "cli-1", "--json").stdout)
    assert shown["state"] == "succeeded" and set(steps_by_id(shown)) == {
        "acquire",
        "start",
        "relay",
        "collect",
        "close",
        "release-controller",
    }
    # Issue 24: the runner's lease, ended with the plan; host, pid and expiry only, never a credential.
    assert shown["runner"]["status"] == "expired" and set(shown["runner"]) == {"status", "host", "pid", "expires_at"}
    assert isinstance(shown["runner"]["pid"], int) and shown["runner"]["expires_at"]
    text = corral(env, tmp_path, "plans", "show", "cli-1")
    assert f"runner: expired, pid {shown['runner']['pid']} on {shown['runner']['host']}" in text.stdout
    assert "from the cli" not in json.dumps(shown["steps"]), "agent output is never shown"
    unknown = corral(env, tmp_path, "plans", "show", "nope", "--json")
    assert unknown.returncode == 3 and json.loads(unknown.stdout)["error"]["code"] == "plan_unknown"


def test_plans_show_does_not_print_the_prompt(tmp_path: Path, cli: dict[str, Any]) -> None:
    # The agent's output is shown (the review's collected text); the prompt itself never is, so this
    # prompt is one the scripted agent does not echo (it reviews the directory and names the prompt's digest).
    plan = plan_yaml(tmp_path / "plan.yaml", "secret-1", cli["project"], "review a-secret-prompt-text")
    assert corral(cli["env"], tmp_path, "run", str(plan), "--json").returncode == 0
    shown = corral(cli["env"], tmp_path, "plans", "show", "secret-1", "--json")
    assert shown.returncode == 0
    assert "a-secret-prompt-text" not in shown.stdout
    assert "files reviewed" in json.dumps(json.loads(shown.stdout)["collected"]), "the collected review is shown"


def test_same_plan_id_same_content_is_the_same_plan_other_content_conflicts(rig: Rig) -> None:
    doc = rig.review("same-1")
    first = rig.plans.submit(PlanSubmitInput(doc))
    assert first.created and first.plan.state == "submitted"
    explicit = rig.review("same-1", reviewer="reviewer", ttl_seconds=900)  # the defaults, spelled out
    assert not rig.plans.submit(PlanSubmitInput(explicit)).created, (
        "defaults are filled in before the content is compared"
    )
    final = anyio.run(rig.plans.run, PlanRunInput("same-1"), rig.progress.append)
    assert final.state == "succeeded"
    count = len(rig.events())
    again = rig.plans.submit(PlanSubmitInput(doc))
    assert not again.created and again.plan.state == "succeeded"
    assert anyio.run(rig.plans.run, PlanRunInput("same-1"), rig.progress.append).state == "succeeded"
    assert len(rig.events()) == count, "no step re-ran"
    assert rig.run_logs() == ["p1/run-1.log"]

    for other in (
        rig.review("same-1", prompt="another prompt"),
        rig.review("same-1", timeout=61),
        {**doc, "controller": "other"},
    ):
        with pytest.raises(PlanConflictError) as caught:
            rig.plans.submit(PlanSubmitInput(other))
        assert caught.value.code == "plan_conflict" and caught.value.status.exit == 5
    assert len(rig.events()) == count


def test_an_invalid_plan_is_refused_before_anything_is_written(rig: Rig) -> None:
    for doc, code in (
        ({"plan": "x", "recipe": "review"}, "plan_invalid"),
        (rig.review("bad-1", timeout=-1), "inputs_invalid"),
        ({**rig.review("bad-2"), "recipe": "nope"}, "recipe_unknown"),
    ):
        with pytest.raises(CorralError) as caught:
            rig.plans.submit(PlanSubmitInput(doc))
        assert caught.value.code == code
    assert rig.events() == []


# --- writer lane, validate ---------------------------------------------------------------------------------


def writer_plan(rig: Rig, plan_id: str, worktree: Path, prompt: str) -> dict[str, Any]:
    return rig.plan(
        plan_id,
        "writer-lane",
        worktree=str(worktree),
        branch="lane",
        owned_scopes=["src"],
        locked_scopes=[".corral"],
        prompt=prompt,
        kind="script",
        purpose="add a feature",
        ticket_ref="T-9",
        authority_ref="T-9",
        authority_sha256=AUTHORITY,
        timeout=60,
    )


def test_a_writer_lane_whose_handoff_memory_refuses_is_still_released(rig: Rig) -> None:
    """The lane's project has two open sessions, so the handoff cannot choose one (memory_session_ambiguous):
    the handoff step says so in its outputs and the release still runs, pointing at the checkpoint_ref
    input and the status digest (a lane is never left held because its handoff failed)."""
    repo, worktree, base = make_lane(rig.root)
    memory = rig.service.memory
    for new_session in (False, True):
        memory.checkpoint(
            CheckpointInput(
                "someone", "an open session", project=repo.name, goal="g", next_steps=("n",), repository=str(repo)
            ),
            new_session=new_session,
        )
    plan = rig.run(writer_plan(rig, "lane-refused", worktree, GOOD_CHANGE))
    assert plan.state == "succeeded", plan.data.get("failure")
    records = plan.data["steps"]
    handoff = records["handoff"]["outputs"]
    assert handoff["written"] is False and handoff["error"]["code"] == "memory_session_ambiguous"
    digest = status_digest(worktree)
    assert (handoff["ref"], handoff["sha256"]) == ("uncommitted work in the lane's worktree", digest)
    (lane,) = rig.store.find("writer")
    assert lane.state == "released" and records["release"]["state"] == "succeeded"
    assert (lane.data["checkpoint_ref"], lane.data["checkpoint_sha256"]) == (handoff["ref"], digest)
    assert lane.data["release_head"] == base
    with memory.port.snapshot() as reader:
        assert reader.count(project=repo.name) == 2, "the refused handoff wrote nothing"


LANE_STEPS = ["acquire", "preflight", "start", "relay", "collect", "checkpoint", "handoff", "release"]
LANE_STEPS.append("release-controller")


@pytest.mark.parametrize(
    ("prompt", "passed"), [(GOOD_CHANGE, True), ("write src/feature.py def feature(:", False)], ids=["good", "broken"]
)
def test_writer_lane_in_a_linked_worktree(
    rig: Rig, prompt: str, passed: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    repo, worktree, base = make_lane(rig.root)
    main_head = git(repo, "rev-parse", "HEAD")
    plan = rig.run(writer_plan(rig, f"lane-{passed}", worktree, prompt))
    # A failed validation fails the step (validation_failed) and the plan; the result is still recorded,
    # and the finally steps still checkpoint and release the lane.
    records = plan.data["steps"]
    if passed:
        assert plan.state == "succeeded", plan.data.get("failure")
    else:
        assert plan.state == "failed"
        assert (plan.data["failure"]["step"], plan.data["failure"]["code"]) == ("verify", "validation_failed")
        assert records["verify"]["error"]["code"] == "validation_failed"
    assert {s: r["state"] for s, r in records.items()} == {
        **dict.fromkeys(LANE_STEPS, "succeeded"),
        "verify": "succeeded" if passed else "failed",
    }
    preflight = records["preflight"]["outputs"]
    assert (preflight["head"], preflight["branch"], preflight["linked"]) == (base, "lane", True)

    assert git(worktree, "rev-parse", "HEAD") == base, "nothing was committed"
    assert git(worktree, "symbolic-ref", "--short", "HEAD") == "lane"
    assert git(repo, "rev-parse", "HEAD") == main_head and git(worktree, "stash", "list") == ""
    assert git(worktree, "status", "--porcelain", "--untracked-files=all") == "?? src/feature.py"
    digest = status_digest(worktree)

    verify = records["verify"]["outputs"]
    assert verify["passed"] is passed and verify["head"] == base and verify["status_sha256"] == digest
    assert [(r["name"], r["passed"]) for r in verify["results"]] == [("compiles", passed), ("feature", passed)]
    assert records["checkpoint"]["outputs"]["status_sha256"] == digest
    release = records["release"]["outputs"]
    assert (release["state"], release["release_head"], release["release_status_sha256"]) == ("released", base, digest)

    (lane,) = rig.store.find("writer")
    assert lane.state == "released" and lane.data["verification"]["passed"] is passed
    # issue 18: the release points at the handoff checkpoint the plan wrote, its digest from its content,
    # and that checkpoint lists the file git shows changed in the lane (auto_files).
    handoff = records["handoff"]["outputs"]
    assert lane.data["checkpoint_ref"] == handoff["ref"] == f"memory:{handoff['checkpoint_id']}"
    assert lane.data["checkpoint_sha256"] == handoff["sha256"]
    shown = rig.service.memory.show(ShowInput(handoff["checkpoint_id"]))["checkpoint"]
    assert shown["files"] == ["src/feature.py"] and shown["project"] == repo.name and shown["next_steps"]
    assert handoff["written"] is True and handoff["replayed"] is False
    # The handoff step run again (a runner that died after its commit) finds the checkpoint it wrote.
    again = anyio.run(handoff_again, rig, f"lane-{passed}", worktree)
    assert (again["written"], again["replayed"], again["checkpoint_id"]) == (True, True, handoff["checkpoint_id"])
    resumed = resumed_outputs(rig, f"lane-{passed}", "release", "writer.release", lane.data["name"])
    assert resumed == release, "a release found done after a crash gives what the release gave"
    assert lane.data["base_commit"] == base and lane.data["owned_scopes"] == ["src"]
    assert rig.run_logs() == ["p1/run-1.log"]

    shown = live_table(rig.progress)
    if passed:
        assert re.search(r"\bverify\s+succeeded\s+[\d.]+\s+verified: passed\s", shown), shown
    else:
        assert re.search(r"\bverify\s+failed\s+[\d.]+\s+validation_failed: ", shown), shown
    assert re.search(r"\brelease\s+succeeded\s+[\d.]+\s+released\s", shown), shown
    _print_summary(rig.plans.summary(plan))
    summary = capsys.readouterr().out
    if passed:
        assert re.search(r"\bverify\s+succeeded\s+1\s+[\d.]+\s+.*passed=True", summary), summary
    else:
        assert re.search(r"\bverify\s+failed\s+1\s+[\d.]+\s+.*validation_failed", summary), summary
    assert "receipts:" not in summary, "a verification's results are not receipts"


def test_writer_lane_refuses_the_main_checkout_and_still_runs_its_finally_steps(rig: Rig) -> None:
    repo, _, _ = make_lane(rig.root)
    plan = rig.run(writer_plan(rig, "lane-main", repo, GOOD_CHANGE))
    assert plan.state == "failed"
    records = plan.data["steps"]
    assert records["start"]["state"] == "failed" and plan.data["failure"]["step"] == "start"
    assert [records[s]["state"] for s in ("relay", "collect", "verify")] == ["skipped"] * 3
    assert records["checkpoint"]["state"] == "skipped", "no lane of this plan to checkpoint"
    assert records["release"]["state"] == "skipped", "there is no lane of this plan to release"
    assert records["release"]["skipped"] == "not created by this plan"
    assert rig.store.find("writer", ["active"]) == [] and rig.run_logs() == []
    assert not (repo / "src" / "feature.py").exists()


def test_validate_recipe_on_a_live_lane(rig: Rig) -> None:
    _, worktree, base = make_lane(rig.root)
    grant = rig.service.controller.acquire(AcquireInput("ctl", "T-9", AUTHORITY, 900, "t@h"))
    rig.keeper.save(grant.credential)
    (worktree / "src" / "feature.py").write_text("def feature():\n    return 42\n")
    lane = rig.service.writers.start(
        WriterStartInput(
            "ctl",
            grant.credential,
            "writer",
            "script",
            str(worktree),
            "lane",
            base,
            base,
            status_digest(worktree),
            ("src",),
            "validate me",
            "T-9",
            "T-9",
            AUTHORITY,
        )
    )
    plan = rig.run(rig.plan("val-1", "validate", lane="writer", authority_ref="T-9", authority_sha256=AUTHORITY))
    assert plan.state == "succeeded", plan.data.get("failure")
    verify = plan.data["steps"]["verify"]["outputs"]
    assert verify["passed"] is True and verify["head"] == base and verify["status_sha256"] == status_digest(worktree)
    assert plan.data["steps"]["acquire"]["outputs"]["generation"] == 1, "the live credential is shared, not resumed"
    (live,) = rig.store.find("writer")
    assert live.id == lane.id and live.state == "active", "validation leaves the lane running"
    assert (
        live.data["verification"]["passed"] is True
        and live.data["verification"]["status_sha256"] == verify["status_sha256"]
    )

    missing = rig.run(rig.plan("val-2", "validate", lane="ghost", authority_ref="T-9", authority_sha256=AUTHORITY))
    assert missing.state == "failed" and missing.data["failure"]["code"] == "target_unknown"
    assert rig.step_log("val-2").count(("verify", "running", 1)) == 1
    assert ("verify", "running", 2) not in rig.step_log("val-2"), "a refusal is not retried"


# --- batch review ----------------------------------------------------------------------------------------


def batch(rig: Rig, plan_id: str, mode: str, slow: str = "sleep 1.5\necho slow") -> dict[str, Any]:
    return rig.plan(
        plan_id,
        "batch-review",
        cwd=str(rig.project),
        prompt_a="echo fast",
        prompt_b=slow,
        kind="script",
        mode=mode,
        timeout=60,
        authority_ref="T-2",
        authority_sha256=AUTHORITY,
    )


def test_batch_review_mode_all_collects_both(rig: Rig) -> None:
    plan = rig.run(batch(rig, "batch-all", "all", "sleep 0.3\necho slow"))
    assert plan.state == "succeeded", plan.data.get("failure")
    ask = plan.data["steps"]["ask"]["outputs"]
    assert [(r["target"], r["state"]) for r in ask["results"]] == [
        ("reviewer-a", "completed"),
        ("reviewer-b", "completed"),
    ]
    assert ask["pending_receipts"] == []
    assert plan.data["private"]["ask"]["outputs"] == {"reviewer-a": "fast\n", "reviewer-b": "slow\n"}
    assert sorted(r.state for r in rig.store.find("receipt")) == ["completed", "completed"]
    assert sorted(r.state for r in rig.store.find("reviewer")) == ["closed", "closed"]
    assert rig.run_logs() == ["p1/run-1.log", "p2/run-1.log"]


@pytest.mark.slow  # seconds of waiting on processes or deadlines: left out of make test-fast
def test_batch_review_mode_first_returns_the_first_and_collects_the_other_before_closing(rig: Rig) -> None:
    plan = rig.run(batch(rig, "batch-first", "first"))
    ask = plan.data["steps"]["ask"]
    assert ask["state"] == "succeeded"
    (result,) = ask["outputs"]["results"]
    assert (result["target"], result["state"], ask["outputs"]["first"]) == ("reviewer-a", "completed", "reviewer-a")
    assert plan.data["private"]["ask"]["outputs"] == {"reviewer-a": "fast\n"}
    (pending,) = ask["outputs"]["pending_receipts"]
    # The step after ask collects what it left pending, so both reviewers can be closed.
    (rest,) = plan.data["steps"]["rest"]["outputs"]["results"]
    assert (rest["token"], rest["target"], rest["state"]) == (pending, "reviewer-b", "completed")
    receipts = {r.data["token"]: r for r in rig.store.find("receipt")}
    assert receipts[pending].state == "completed" and receipts[pending].data["name"] == "reviewer-b"
    assert plan.data["steps"]["close-a"]["state"] == "succeeded"
    assert plan.data["steps"]["close-b"]["state"] == "succeeded"
    assert plan.state == "succeeded"
    assert rig.run_logs() == ["p1/run-1.log", "p2/run-1.log"]
    shown = live_table(rig.progress)
    assert re.search(r"\bask\s+succeeded\s+[\d.]+\s+receipts: reviewer-a completed; 1 pending", shown), shown
    assert re.search(r"\brest\s+succeeded\s+[\d.]+\s+receipts: reviewer-b completed\s", shown), shown


@pytest.mark.slow  # seconds of waiting on processes or deadlines: left out of make test-fast
def test_batch_review_mode_first_plan_succeeds(rig: Rig) -> None:
    plan = rig.run(batch(rig, "batch-first-ok", "first"))
    assert plan.state == "succeeded", plan.data.get("failure")


# --- when, retry, catch, finally ---------------------------------------------------------------------------

FLOWS = {
    "choose": """\
        recipe: choose
        version: 1
        description: when
        inputs:
          type: object
          properties:
            mode: {type: string, default: go}
            limit: {type: integer, default: 5}
        steps:
          - {id: count, do: flow.pass, with: {values: {n: 3, tags: [a, b]}}}
          - id: big
            do: flow.pass
            when: {left: "${steps.count.n}", op: ">", right: "${inputs.limit}"}
          - id: go
            do: flow.pass
            when: {left: "${inputs.mode}", op: "==", right: go}
            with: {values: {went: true}}
          - id: tagged
            do: flow.pass
            when: {left: b, op: in, right: "${steps.count.tags}"}
            with: {values: {mode: "${inputs.mode}"}}
          - id: stop
            do: flow.fail
            when: {left: "${inputs.mode}", op: "==", right: stop}
            with: {code: stopped}
        """,
    "flaky": """\
        recipe: flaky
        version: 1
        description: retry
        steps:
          - {id: before, do: flow.pass}
          - id: flaky
            do: flow.fail
            with: {code: flaky, message: always fails}
            retry: {max_attempts: 3, interval: 0.01, backoff_rate: 1}
          - {id: after, do: flow.pass}
          - {id: cleanup, do: flow.pass, finally: true}
        """,
    "rescue": """\
        recipe: rescue
        version: 1
        description: catch
        inputs:
          type: object
          properties:
            code: {type: string, default: boom}
        steps:
          - {id: first, do: flow.pass}
          - id: risky
            do: flow.fail
            with: {code: "${inputs.code}"}
            retry: {max_attempts: 2, interval: 0.01}
            catch: [{errors: [boom, bang], next: recover}]
          - {id: jumped-over, do: flow.pass}
          - {id: also-jumped-over, do: flow.fail, with: {code: never}}
          - {id: recover, do: flow.pass, with: {values: {ok: true}}}
          - {id: last, do: flow.pass}
        """,
    "cleanup": """\
        recipe: cleanup
        version: 1
        description: finally
        steps:
          - {id: one, do: flow.pass}
          - {id: boom, do: flow.fail, with: {code: boom, message: first failure}}
          - {id: skipped, do: flow.pass}
          - {id: cleanup-1, do: flow.pass, finally: true}
          - {id: also-skipped, do: flow.pass}
          - {id: cleanup-2, do: flow.fail, with: {code: second}, finally: true}
          - {id: cleanup-3, do: flow.pass, finally: true}
        """,
}


@pytest.fixture
def flows(tmp_path: Path) -> Iterator[Rig]:
    made = Rig(tmp_path, [recipe_dir(tmp_path, **FLOWS)])
    yield made
    made.store.close()


def test_when_skips_a_step_whose_comparison_is_false(flows: Rig) -> None:
    plan = flows.run(flows.plan("when-1", "choose"))
    assert plan.state == "succeeded"
    records = plan.data["steps"]
    assert {s: r["state"] for s, r in records.items()} == {
        "count": "succeeded",
        "big": "skipped",
        "go": "succeeded",
        "tagged": "succeeded",
        "stop": "skipped",
    }
    assert records["big"]["reason"] == "when is false" and "attempt" not in records["big"]
    assert records["go"]["outputs"] == {"went": True} and records["tagged"]["outputs"] == {"mode": "go"}
    assert started(flows) == ["count", "go", "tagged"], "a skipped step never starts"
    assert ran(flows.step_log("when-1"), "running") == [], "flow.pass is pure: no running record"
    assert [p["step"] for p in flows.kinds_of("step_skipped")] == ["big", "stop"]

    other = flows.run(flows.plan("when-2", "choose", mode="stop", limit=2))
    assert other.state == "failed" and other.data["failure"]["code"] == "stopped"
    assert {s: r["state"] for s, r in other.data["steps"].items()} == {
        "count": "succeeded",
        "big": "succeeded",
        "go": "skipped",
        "tagged": "succeeded",
        "stop": "failed",
    }


def test_retry_runs_a_failing_safe_step_up_to_max_attempts(flows: Rig) -> None:
    plan = flows.run(flows.plan("retry-1", "flaky"))
    assert plan.state == "failed"
    assert plan.data["failure"] == {"step": "flaky", "code": "flaky", "message": "always fails"}
    # Every step is pure, but a step with a retry policy is recorded as an effectful one: each
    # attempt's running record (the first committed with the pure step before it), its outcome
    # committed before a later step runs (with the skip after it), the clean-up's with the fail.
    assert flows.step_log("retry-1") == [
        ("before", "succeeded", 1),
        ("flaky", "running", 1),
        ("flaky", "running", 2),
        ("flaky", "running", 3),
        ("flaky", "failed", 3),
        ("after", "skipped", None),
        ("cleanup", "succeeded", 1),
    ]
    assert [e.trigger for e in flows.events() if e.instance_id == "plan/retry-1"] == [
        "submit",
        "start",
        "step",
        "step",
        "step",
        "step",
        "fail",
    ]
    assert [(p["step"], p["attempt"]) for p in flows.kinds_of("step_started")] == [
        ("before", 1),
        ("flaky", 1),
        ("flaky", 2),
        ("flaky", 3),
        ("cleanup", 1),
    ]
    heard = [(p["event"], p.get("step")) for p in flows.progress if p["event"].startswith("step_")]
    assert heard[2:7] == [
        ("step_started", "flaky"),
        ("step_retrying", "flaky"),
        ("step_started", "flaky"),
        ("step_retrying", "flaky"),
        ("step_started", "flaky"),
    ], "a batch's progress is heard in the order it happened"
    retries = flows.kinds_of("step_retrying")
    assert [(r["step"], r["attempt"]) for r in retries] == [("flaky", 1), ("flaky", 2)]
    assert all(0 <= r["delay"] <= 0.01 for r in retries)


def test_the_json_listing_counts_each_plans_records_as_the_full_listing_has_them(flows: Rig) -> None:
    """``list_rows`` (what ``plans list --json``, MCP and HTTP print) counts step records in the store;
    its rows are the summaries the full listing gives, ``steps`` the number of records each holds."""
    flows.run(flows.plan("rows-1", "flaky"))  # failed: some steps recorded, one skipped
    flows.plans.submit(PlanSubmitInput(flows.plan("rows-2", "flaky")))  # submitted: no record yet
    full = flows.plans.list(PlanListInput(include_ended=True))
    expected = [flows.plans.summary(p) | {"steps": len(p.data.get("steps") or {})} for p in full]
    rows = flows.plans.list_rows(PlanListInput(include_ended=True))
    assert [r["steps"] for r in rows] == [4, 0]
    assert list(rows) == expected and rows.next_after is None
    first = flows.plans.list_rows(PlanListInput(include_ended=True, limit=1))
    assert [r["plan"] for r in first] == ["rows-1"] and first.next_after == "rows-1"


class Outage:
    """The built-in operations, but ``flow.fail`` loses the store's server while ``down``, as an operation
    whose write met an immediate restart of PostgreSQL does; once the server is back it succeeds."""

    def __init__(self) -> None:
        self.down = True

    def get(self, name: str) -> Any:
        if name != "flow.fail":
            return OPERATIONS.get(name)

        async def run(ctx: OpContext, args: dict[str, Any]) -> Outputs:
            self.check()
            return Outputs({"back": True})

        def resume(ctx: OpContext, args: dict[str, Any]) -> Resume:
            self.check()  # asking what the operation did needs the store too
            return RUN

        # Not pure: this stand-in reaches the store's server, so it may have acted when it fails.
        return Operation(dataclasses.replace(CATALOGUE["flow.fail"], pure=False), run, resume)

    def check(self) -> None:
        if self.down:
            raise StoreUnavailableError("cannot reach the store: the database system is starting up")


def test_a_step_whose_store_went_away_is_not_failed_and_the_next_run_finishes_it(flows: Rig) -> None:
    """``store_unavailable`` inside a step: its operation may have acted (a commit whose answer was lost),
    so it is no outcome of the step. The run stops with it (not retried, not recorded, even though the
    store answers again by the time a record would be written) and the next run resumes the step."""
    outage = Outage()
    flows.plans.operations = outage
    with pytest.raises(StoreUnavailableError):
        flows.run(flows.plan("outage-1", "flaky"))
    assert flows.step_log("outage-1") == [("before", "succeeded", 1), ("flaky", "running", 1)]
    assert flows.kinds_of("step_retrying") == [], "the store's outage is no failure of the step to retry"
    with pytest.raises(StoreUnavailableError):  # still down when the next run asks the operation (resume)
        flows.run(flows.plan("outage-1", "flaky"))
    assert flows.step_log("outage-1")[-1] == ("flaky", "running", 1)
    outage.down = False
    plan = flows.run(flows.plan("outage-1", "flaky"))
    assert plan.state == "succeeded", plan.data.get("failure")
    assert plan.data["steps"]["flaky"]["state"] == "succeeded"
    assert plan.data["steps"]["flaky"]["attempt"] == 1
    assert ran(flows.step_log("outage-1"), "running") == ["flaky"], "the pure steps around it have none"
    assert ran(flows.step_log("outage-1"), "succeeded") == ["before", "flaky", "after", "cleanup"]


@pytest.mark.slow  # a collect that must time out at least once on an agent working 1 s
def test_retry_of_a_collect_that_times_out_waits_again_for_the_same_receipt(flows: Rig, tmp_path: Path) -> None:
    recipe_dir(
        tmp_path,
        **{
            "impatient": """\
            recipe: impatient
            version: 1
            description: review with a short collect, retried
            extends: review
            replace:
              collect:
                id: collect
                do: receipt.collect
                with: {receipt: "${steps.relay.token}", timeout: 0.4}
                retry: {max_attempts: 10, interval: 0.01, backoff_rate: 1}
            """
        },
    )
    review = flows.review("slow-1", prompt="sleep 1\necho finally", verdict_schema=None)  # plain text
    plan = flows.run({**review, "recipe": "impatient"})
    assert plan.state == "succeeded", plan.data.get("failure")
    attempts = [a for step, state, a in flows.step_log("slow-1") if step == "collect" and state == "running"]
    assert len(attempts) >= 2 and attempts == list(range(1, len(attempts) + 1))
    assert {r["error"]["code"] for r in flows.kinds_of("step_retrying")} == {"wait_timeout"}
    assert plan.data["private"]["collect"]["output"] == "finally\n"
    (receipt,) = flows.store.find("receipt")
    assert receipt.state == "completed", "retries collect the same receipt; nothing is sent again"
    assert flows.run_logs() == ["p1/run-1.log"]


def test_catch_jumps_forward_to_its_step(flows: Rig) -> None:
    plan = flows.run(flows.plan("catch-1", "rescue"))
    assert plan.state == "succeeded", plan.data.get("failure")
    records = plan.data["steps"]
    assert sorted(records) == ["first", "last", "recover", "risky"], "the steps caught over get no record"
    assert started(flows) == ["first", "risky", "risky", "recover", "last"]
    assert records["risky"]["state"] == "caught" and records["risky"]["next"] == "recover"
    assert records["risky"]["attempt"] == 2, "retries come before the catch"
    assert records["risky"]["error"]["code"] == "boom"
    assert [p["next"] for p in flows.kinds_of("step_caught")] == ["recover"]

    uncaught = flows.run(flows.plan("catch-2", "rescue", code="other"))
    assert uncaught.state == "failed" and uncaught.data["failure"]["code"] == "other"
    assert {s: r["state"] for s, r in uncaught.data["steps"].items()} == {
        "first": "succeeded",
        "risky": "failed",
        "jumped-over": "skipped",
        "also-jumped-over": "skipped",
        "recover": "skipped",
        "last": "skipped",
    }


def test_finally_steps_run_after_a_failure_and_other_steps_are_skipped(flows: Rig) -> None:
    plan = flows.run(flows.plan("fin-1", "cleanup"))
    assert plan.state == "failed"
    assert plan.data["failure"] == {"step": "boom", "code": "boom", "message": "first failure"}, "the first failure"
    assert {s: r["state"] for s, r in plan.data["steps"].items()} == {
        "one": "succeeded",
        "boom": "failed",
        "skipped": "skipped",
        "cleanup-1": "succeeded",
        "also-skipped": "skipped",
        "cleanup-2": "failed",
        "cleanup-3": "succeeded",
    }
    assert plan.data["steps"]["skipped"]["reason"] == "an earlier step failed"
    assert started(flows) == ["one", "boom", "cleanup-1", "cleanup-2", "cleanup-3"]
    assert flows.progress[-1]["event"] == "plan_failed"
    (last,) = [e for e in flows.events() if e.instance_id == "plan/fin-1"][-1:]
    assert (last.trigger, last.from_state, last.to_state) == ("fail", "running", "failed")


# --- cancel ------------------------------------------------------------------------------------------------


def test_a_cancelled_plan_runs_no_step(rig: Rig) -> None:
    rig.plans.submit(PlanSubmitInput(rig.review("cancel-1")))
    assert rig.plans.cancel(PlanCancelInput("cancel-1")).state == "cancelled"
    count = len(rig.events())
    assert anyio.run(rig.plans.run, PlanRunInput("cancel-1"), rig.progress.append).state == "cancelled"
    assert len(rig.events()) == count and rig.store.find("reviewer") == []
    with pytest.raises(RefusedError):
        rig.plans.cancel(PlanCancelInput("cancel-1"))


def wait_for(predicate: Any, timeout: float = 30, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def plan_steps(db: Path, plan_id: str) -> list[tuple[str, str]]:
    if not db.exists():
        return []
    try:
        with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
            rows = conn.execute(
                "SELECT payload FROM events WHERE instance_id = ? ORDER BY seq",
                (f"plan/{plan_id}",),
            ).fetchall()
    except sqlite3.OperationalError:
        return []
    return [(step, record["state"]) for step, record in step_records(json.loads(r[0]) for r in rows)]


class Held:
    """A ``corral run`` in the background whose review waits in its collect until ``release()``."""

    def __init__(self, tmp_path: Path, cli: dict[str, Any], plan_id: str) -> None:
        self.tmp_path, self.cli, self.plan_id = tmp_path, cli, plan_id
        self.plan = plan_yaml(tmp_path / "plan.yaml", plan_id, cli["project"], "wait-file go\necho released")
        self.out_path = tmp_path / "runner.out"

    def __enter__(self) -> Held:
        self.out = self.out_path.open("w")
        self.runner = subprocess.Popen(
            [corral_bin(), "run", str(self.plan), "--json"],
            stdout=self.out,
            stderr=subprocess.STDOUT,
            env=self.cli["env"],
            cwd=self.tmp_path,
        )
        wait_for(lambda: ("collect", "running") in plan_steps(self.cli["db"], self.plan_id), what="the collect")
        return self

    def release(self) -> int:
        (self.cli["project"] / "go").touch()
        return self.runner.wait(timeout=30)

    def __exit__(self, *exc: object) -> None:
        if self.runner.poll() is None:
            (self.cli["project"] / "go").touch()
            try:
                self.runner.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.kill(self.runner.pid, signal.SIGKILL)
                self.runner.wait()
        self.out.close()


def test_plans_cancel_stops_a_running_plan_after_its_step(tmp_path: Path, cli: dict[str, Any]) -> None:
    env, db = cli["env"], cli["db"]
    with Held(tmp_path, cli, "cancel-2") as held:
        plan = held.plan
        busy = corral(env, tmp_path, "plans", "resume", "cancel-2", "--json")
        assert busy.returncode == 4 and json.loads(busy.stdout)["error"]["code"] == "plan_busy", busy.stdout
        cancelled = corral(env, tmp_path, "plans", "cancel", "cancel-2", "--json")
        assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr
        assert json.loads(cancelled.stdout)["state"] == "cancelled"
        assert held.release() == 0
    summary = json_lines((tmp_path / "runner.out").read_text())[-1]
    assert summary["state"] == "cancelled"
    steps = plan_steps(db, "cancel-2")
    assert steps[-1] == ("collect", "running"), "the step in flight finished, but nothing more was recorded"
    assert ("close", "running") not in steps
    count = event_count(db)
    for args in (("run", str(plan), "--json"), ("plans", "resume", "cancel-2", "--json")):
        again = corral(env, tmp_path, *args)
        assert again.returncode == 0 and json_lines(again.stdout)[-1]["state"] == "cancelled"
    assert event_count(db) == count
    listed = json.loads(corral(env, tmp_path, "plans", "list", "--all", "--json").stdout)["plans"]
    assert [(p["plan"], p["state"]) for p in listed] == [("cancel-2", "cancelled")]


def test_corral_run_of_a_plan_that_is_running_elsewhere_is_refused_plan_busy(
    tmp_path: Path, cli: dict[str, Any]
) -> None:
    with Held(tmp_path, cli, "busy-1") as held:
        busy = corral(cli["env"], tmp_path, "run", str(held.plan), "--json")
        held.release()
    assert busy.returncode == 4, busy.stdout
    assert json.loads(busy.stdout)["error"]["code"] == "plan_busy"
