"""Plans a coordinator can trust: a plan acts only on the leases and receipts it created (by id); a
failed validation fails its step; any error inside a step ends the plan ``failed`` naming the step;
a failed plan is redriven from its failed step; an unknown input is refused; the shipped examples run.

Real SQLite, the real process host, real git repositories and the real ``corral`` executable.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import anyio
import pytest

from runner.errors import CorralError
from runner.service import AcquireInput, ReviewerStartInput, WriterStartInput
from runner.service.inputs.plans import PlanRetryInput, PlanRunInput, PlanSubmitInput
from tests.plans.test_run import AUTHORITY, GOOD_CHANGE, Rig, corral, json_lines, make_lane, recipe_dir, writer_plan
from tests.support.gitrepo import git, status_digest
from tests.support.plans import step_records, steps_by_id

pytestmark = pytest.mark.usefixtures("hermetic_git")

EXAMPLES = Path(__file__).resolve().parents[2] / "recipes" / "examples"


@pytest.fixture
def rig(tmp_path: Path) -> Any:
    made = Rig(tmp_path)
    yield made
    made.store.close()


def granted(rig: Rig) -> Any:
    grant = rig.service.controller.acquire(AcquireInput("ctl", "T-1", AUTHORITY, 900, "t@h"))
    rig.keeper.save(grant.credential)
    return grant.credential


def test_a_finally_close_leaves_a_same_named_reviewer_alone(rig: Rig) -> None:
    credential = granted(rig)
    theirs = rig.service.reviewers.start(ReviewerStartInput("ctl", credential, "reviewer", "script", str(rig.project)))
    plan = rig.run(rig.review("taken-1"))
    assert plan.state == "failed"
    assert (plan.data["failure"]["step"], plan.data["failure"]["code"]) == ("start", "agent_name_taken")
    close = plan.data["steps"]["close"]
    assert close["state"] == "skipped" and close["skipped"] == "not created by this plan", close
    (other,) = rig.store.find("reviewer")
    assert other.id == theirs.id and other.state == "active", "the pre-existing reviewer is untouched"
    logged = step_records(e.payload for e in rig.events() if e.instance_id == "plan/taken-1")
    closes = [record for step, record in logged if step == "close"]
    assert closes[-1]["skipped"] == "not created by this plan", "in the event log"


def test_a_close_by_name_acts_only_on_a_lease_this_plan_started(rig: Rig, tmp_path: Path) -> None:
    credential = granted(rig)
    theirs = rig.service.reviewers.start(ReviewerStartInput("ctl", credential, "other", "script", str(rig.project)))
    rig.recipes = type(rig.recipes)([recipe_dir(tmp_path, closer=CLOSER)])
    rig.plans.recipes = rig.recipes
    plan = rig.run(rig.plan("closer-1", "closer", name="other"))
    assert plan.state == "succeeded", plan.data.get("failure")
    assert plan.data["steps"]["close"]["skipped"] == "not created by this plan"
    assert rig.store.get(theirs.id).state == "active"  # type: ignore[union-attr]


CLOSER = """\
recipe: closer
version: 1
description: Close a reviewer by name that this plan never started.
inputs: {type: object, properties: {name: {type: string}}}
steps:
  - {id: close, do: reviewer.close, with: {name: "${inputs.name}"}}
"""


def test_writer_lane_release_leaves_another_lanes_writer_alone(rig: Rig) -> None:
    repo, mine, base = make_lane(rig.root)
    other = rig.root / "other"
    git(repo, "worktree", "add", "-q", "-b", "other", str(other))
    credential = granted(rig)
    theirs = rig.service.writers.start(
        WriterStartInput(
            "ctl", credential, "writer", "script", str(other), "other", base, base, status_digest(other),
            ("docs",), "theirs", "T-8", "T-8", AUTHORITY,
        )
    )  # fmt: skip
    plan = rig.run(writer_plan(rig, "lane-taken", mine, GOOD_CHANGE))
    assert plan.state == "failed" and plan.data["failure"]["step"] == "start"
    records = plan.data["steps"]
    assert records["release"]["state"] == "skipped" and records["release"]["skipped"] == "not created by this plan"
    lane = rig.store.get(theirs.id)
    assert lane is not None and lane.state == "active" and "checkpoint_ref" not in lane.data


def test_a_failed_validation_is_catchable(rig: Rig, tmp_path: Path) -> None:
    _, worktree, _ = make_lane(rig.root)
    base_recipes = recipe_dir(tmp_path, **{"lenient-lane": LENIENT})
    rig.recipes = type(rig.recipes)([base_recipes])
    rig.plans.recipes = rig.recipes
    doc = writer_plan(rig, "lenient-1", worktree, "write src/feature.py def feature(:")
    doc["recipe"] = "lenient-lane"
    plan = rig.run(doc)
    assert plan.state == "succeeded", plan.data.get("failure")
    verify = plan.data["steps"]["verify"]
    assert verify["state"] == "caught" and verify["error"]["code"] == "validation_failed"
    assert verify["outputs"]["passed"] is False, "the result is recorded with the step"
    assert plan.data["steps"]["release"]["state"] == "succeeded"


LENIENT = """\
recipe: lenient-lane
version: 1
description: writer-lane, going on to the release when the validation fails.
extends: writer-lane
replace:
  verify:
    id: verify
    do: writer.verify
    with: {lease: "${steps.start.lease}"}
    catch: [{errors: [validation_failed], next: checkpoint}]
"""

BROKEN_REFERENCE = """\
recipe: broken-ref
version: 1
description: A step whose reference names a field its step never gives.
steps:
  - {id: a, do: flow.pass, with: {values: {x: 1}}}
  - {id: b, do: flow.pass, with: {values: {y: "${steps.a.nope}"}}}
  - {id: c, do: flow.pass, with: {values: {z: 3}}, finally: true}
"""


def test_an_error_inside_a_step_ends_the_plan_failed_naming_the_step(rig: Rig, tmp_path: Path) -> None:
    rig.recipes = type(rig.recipes)([recipe_dir(tmp_path, **{"broken-ref": BROKEN_REFERENCE})])
    rig.plans.recipes = rig.recipes
    plan = rig.run(rig.plan("broken-1", "broken-ref"))
    assert plan.state == "failed"
    assert (plan.data["failure"]["step"], plan.data["failure"]["code"]) == ("b", "reference_unresolved")
    assert plan.data["steps"]["c"]["state"] == "succeeded", "finally steps still run"
    again = anyio.run(rig.plans.run, PlanRunInput("broken-1"), rig.progress.append)
    assert again.state == "failed", "resuming does not repeat the error: the plan ended"


def test_an_unexpected_exception_in_a_step_fails_the_plan(rig: Rig) -> None:
    from runner.definitions.operations import OPERATIONS as CATALOGUE
    from runner.plans.ops import OPERATIONS, Operation, StepOperation

    async def explode(ctx: Any, args: Any) -> Any:
        raise KeyError("boom")

    exploding = Operation(CATALOGUE["receipt.relay"], explode)

    class Exploding:
        """The built-ins, but receipt.relay raises what no operation should."""

        def get(self, name: str) -> StepOperation | None:
            return exploding if name == "receipt.relay" else OPERATIONS.get(name)

    rig.plans.operations = Exploding()
    plan = rig.run(rig.review("boom-1"))
    assert plan.state == "failed" and plan.data["failure"]["step"] == "relay"
    assert plan.data["failure"]["code"] == "internal"
    assert plan.data["steps"]["close"]["state"] == "succeeded", "the started reviewer is closed"


def test_retry_redrives_a_failed_plan_from_its_failed_step(rig: Rig, tmp_path: Path) -> None:
    rig.recipes = type(rig.recipes)([recipe_dir(tmp_path, redrive=REDRIVE)])
    rig.plans.recipes = rig.recipes
    where = tmp_path / "later"
    plan = rig.run(rig.plan("redrive-1", "redrive", worktree=str(where)))
    assert plan.state == "failed" and plan.data["failure"]["step"] == "look"
    assert plan.data["steps"]["after"]["state"] == "skipped"
    assert anyio.run(rig.plans.run, PlanRunInput("redrive-1"), rig.progress.append).state == "failed", (
        "running it again only replays"
    )
    with pytest.raises(CorralError) as caught:
        rig.plans.retry(PlanRetryInput("nope"))
    assert caught.value.code == "plan_unknown"

    where.mkdir()
    git(where, "init", "-q", "-b", "main")
    git(where, "commit", "-q", "--allow-empty", "-m", "first")
    rig.plans.retry(PlanRetryInput("redrive-1"))
    final = anyio.run(rig.plans.run, PlanRunInput("redrive-1"), rig.progress.append)
    assert final.state == "succeeded", final.data.get("failure")
    log = rig.step_log("redrive-1")
    assert log.count(("first", "succeeded", 1)) == 1, "a completed step is kept, not run again"
    assert ("first", "running", 1) not in log, "flow.pass is pure: its outcome rides on look's start"
    assert ("look", "running", 2) in log and final.data["steps"]["look"]["attempt"] == 2
    assert final.data["steps"]["after"]["state"] == "succeeded"
    assert final.data["retries"][0]["from_step"] == "look"
    assert any(e.trigger == "retry" and e.instance_id == "plan/redrive-1" for e in rig.events())
    with pytest.raises(CorralError) as refused:
        rig.plans.retry(PlanRetryInput("redrive-1"))
    assert refused.value.code == "plan_not_failed"


REDRIVE = """\
recipe: redrive
version: 1
description: Read a worktree that may not exist yet.
inputs: {type: object, required: [worktree], properties: {worktree: {type: string}}}
steps:
  - {id: first, do: flow.pass, with: {values: {x: 1}}}
  - {id: look, do: git.preflight, with: {worktree: "${inputs.worktree}"}}
  - {id: after, do: flow.pass, with: {values: {head: "${steps.look.head}"}}}
"""


def test_an_unknown_plan_input_is_refused(rig: Rig) -> None:
    with pytest.raises(CorralError) as caught:
        rig.plans.submit(PlanSubmitInput(rig.review("typo-1", timout=5)))
    assert caught.value.code == "inputs_invalid" and caught.value.details["field"] == "inputs.timout"
    assert rig.events() == [], "nothing written"


def test_plan_errors_name_the_file_and_line(tmp_path: Path, cli_env: dict[str, str]) -> None:
    good = tmp_path / "good.json"
    good.write_text(json.dumps(review_doc("files-1", tmp_path)))
    bad = tmp_path / "bad.yaml"
    doc = review_doc("files-2", tmp_path)
    bad.write_text(
        "plan: files-2\nrecipe: review\ncontroller: ctl\ninputs:\n"
        + "".join(f"  {k}: {json.dumps(v)}\n" for k, v in doc["inputs"].items())
        + "  timout: 5\n"
    )
    result = corral(cli_env, tmp_path, "run", str(good), str(bad), "--json")
    assert result.returncode == 3, result.stdout + result.stderr
    error = json.loads(result.stdout)["error"]
    assert error["code"] == "inputs_invalid" and error["details"]["file"] == str(bad)
    assert error["details"]["line"] == len(doc["inputs"]) + 5
    assert error["message"].startswith(f"{bad}:{len(doc['inputs']) + 5}: ")
    listed = json.loads(corral(cli_env, tmp_path, "plans", "list", "--all", "--json").stdout)["plans"]
    assert listed == [], "nothing starts when one of the plans is refused"


def review_doc(plan_id: str, root: Path) -> dict[str, Any]:
    project = root / "project"
    project.mkdir(exist_ok=True)
    return {
        "plan": plan_id,
        "recipe": "review",
        "controller": "ctl",
        "inputs": {
            "cwd": str(project),
            "prompt": "echo ok",
            "kind": "script",
            "authority_ref": "T-1",
            "authority_sha256": AUTHORITY,
        },
    }


def test_rerunning_a_failed_plan_points_at_plans_retry(tmp_path: Path, cli_env: dict[str, str]) -> None:
    doc = review_doc("again-1", tmp_path)
    doc["inputs"]["cwd"] = str(tmp_path / "missing")
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(doc))
    first = corral(cli_env, tmp_path, "run", str(path))
    assert first.returncode == 1, first.stdout + first.stderr
    again = corral(cli_env, tmp_path, "run", str(path))
    assert again.returncode == 1
    assert "failed at step start" in again.stderr and "corral plans retry again-1" in again.stderr
    assert "continuing it" not in again.stderr
    (tmp_path / "missing").mkdir()
    retried = corral(cli_env, tmp_path, "plans", "retry", "again-1", "--json")
    assert retried.returncode == 0, retried.stdout + retried.stderr
    summary = json_lines(retried.stdout)[-1]
    # The failed run's finally gave the controller back, so the redrive starts at acquire.
    assert summary["state"] == "succeeded" and steps_by_id(summary)["acquire"]["attempt"] == 2
    assert steps_by_id(summary)["start"]["attempt"] == 2
    assert steps_by_id(summary)["release-controller"]["state"] == "succeeded"


# --- the shipped examples ------------------------------------------------------------------------------


def example(tmp_path: Path, name: str) -> Path:
    """The example plan exactly as shipped."""
    return EXAMPLES / f"{name}.yaml"


def controller_state(cli_env: dict[str, str], cwd: Path, controller: str) -> str:
    listed = json.loads(corral(cli_env, cwd, "controller", "list", "--all", "--json").stdout)["leases"]
    return next(lease["state"] for lease in listed if lease["controller_id"] == controller)


@pytest.mark.parametrize("name", ["review", "batch-review"])
def test_the_review_examples_run_as_shipped_from_an_empty_directory(
    tmp_path: Path, cli_env: dict[str, str], name: str
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    result = corral(cli_env, empty, "run", str(example(tmp_path, name)), "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json_lines(result.stdout)[-1]
    assert summary["state"] == "succeeded"
    # The relative cwd is where corral ran, and the plan gave its controller back at the end.
    assert controller_state(cli_env, empty, "example") == "released"


def test_a_recipe_keeps_its_controller_when_told(tmp_path: Path, cli_env: dict[str, str]) -> None:
    plan = tmp_path / "keep.yaml"
    plan.write_text(
        (EXAMPLES / "review.yaml").read_text().replace("plan: review-example", "plan: keep-example")
        + "  keep_controller: true\n"
    )
    result = corral(cli_env, tmp_path, "run", str(plan), "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    assert steps_by_id(json_lines(result.stdout)[-1])["release-controller"]["state"] == "skipped"
    assert controller_state(cli_env, tmp_path, "example") == "active"


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="writer-lane validates in Bubblewrap")
def test_the_writer_lane_and_validate_examples_run_as_shipped_in_a_corral_init_directory(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    root = tmp_path / "demo"
    made = corral(cli_env, tmp_path, "init", str(root), "--json")
    assert made.returncode == 0, made.stdout + made.stderr
    result = corral(cli_env, root, "run", str(example(tmp_path, "writer-lane")), "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json_lines(result.stdout)[-1]
    assert summary["state"] == "succeeded" and steps_by_id(summary)["verify"]["outputs"]["passed"] is True
    assert controller_state(cli_env, root, "example") == "released"
    # validate needs a live lane named writer: without one it fails, naming the lane, and stops there.
    validate = corral(cli_env, root, "run", str(example(tmp_path, "validate")), "--json")
    assert validate.returncode == 1, validate.stdout + validate.stderr
    failure = json_lines(validate.stdout)[-1]["failure"]
    assert (failure["step"], failure["code"]) == ("verify", "target_unknown") and "'writer'" in failure["message"]
    assert controller_state(cli_env, root, "example") == "released", "released even though the plan failed"
    # Given its lane (started and written by hand, as a coordinator would), it passes: the retry it names.
    sha = hashlib.sha256(b"T-1").hexdigest()
    acquired = corral(cli_env, root, "controller", "acquire", "--controller", "example", "--authority-ref", "T-1",
                      "--authority-sha256", sha)  # fmt: skip
    assert acquired.returncode == 0, acquired.stdout + acquired.stderr
    facts = json.loads(corral(cli_env, root, "preflight", "lane", "--json").stdout)
    started = corral(cli_env, root, "writer", "start", "--controller", "example", "--name", "writer", "--kind",
                     "script", "--worktree", "lane", "--branch", "example-lane", "--base-commit", facts["head"],
                     "--expect-head", facts["head"], "--expect-status", facts["status_sha256"], "--own", "src",
                     "--lock", ".corral", "--purpose", "the feature", "--ticket", "T-1", "--authority-ref", "T-1",
                     "--authority-sha256", sha)  # fmt: skip
    assert started.returncode == 0, started.stdout + started.stderr
    asked = corral(cli_env, root, "ask", "writer", "--controller", "example", "--text",
                   "write src/feature.py def feature():\nappend src/feature.py     return 42")  # fmt: skip
    assert asked.returncode == 0, asked.stdout + asked.stderr
    retried = corral(cli_env, root, "plans", "retry", "validate-example", "--json")
    assert retried.returncode == 0, retried.stdout + retried.stderr
    summary = json_lines(retried.stdout)[-1]
    assert summary["state"] == "succeeded" and steps_by_id(summary)["verify"]["outputs"]["passed"] is True


def test_the_writer_lane_example_without_its_worktree_ends_failed_not_running(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    result = corral(cli_env, tmp_path, "run", str(example(tmp_path, "writer-lane")), "--json")
    assert result.returncode == 1, result.stdout + result.stderr
    summary = json_lines(result.stdout)[-1]
    assert summary["state"] == "failed" and summary["failure"]["step"] == "preflight"
    assert steps_by_id(summary)["release"]["skipped"] == "not created by this plan"
    again = corral(cli_env, tmp_path, "run", str(example(tmp_path, "writer-lane")), "--json")
    assert again.returncode == 1 and json_lines(again.stdout)[-1]["state"] == "failed"


def test_plans_run_together_share_their_controller_and_none_fences_the_other_out(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    shipped = (EXAMPLES / "review.yaml").read_text()
    paths = []
    for n in (1, 2):
        path = tmp_path / f"r{n}.yaml"
        path.write_text(shipped.replace("plan: review-example", f"plan: shared-{n}").replace(
            "reviewer: reviewer", f"reviewer: rev{n}"))  # fmt: skip
        paths.append(str(path))
    result = corral(cli_env, tmp_path, "run", *paths, "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    summaries = [line for line in json_lines(result.stdout) if line.get("event") == "summary"]
    assert [s["state"] for s in summaries] == ["succeeded", "succeeded"]
    kept = [steps_by_id(s)["release-controller"].get("outputs", {}) for s in summaries]
    assert any(k.get("kept_for") for k in kept), "the first to finish left the controller to the other"
