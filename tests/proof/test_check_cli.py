"""``corral check`` and ``corral draw --trace`` as a user runs them: the real executable, real files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from runner.data import data_dir
from runner.definitions.library import validate_file

RENEW_FENCE = "    guards:\n      - fence\n    updates:\n      - extend_lease"


@pytest.fixture
def corral(cli_env: dict[str, str], tmp_path: Path) -> Any:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(Path(sys.executable).parent / "corral"), *args],
            capture_output=True, text=True, env=cli_env, cwd=tmp_path, timeout=120, check=False,
        )  # fmt: skip

    return run


def broken_controller(tmp_path: Path) -> Path:
    text = (data_dir("machines") / "controller.yaml").read_text()
    path = tmp_path / "broken" / "controller.yaml"
    path.parent.mkdir()
    path.write_text(text.replace(RENEW_FENCE, "    updates:\n      - extend_lease"))
    return path


def test_every_shipped_machine_and_recipe_passes(corral: Any) -> None:
    done = corral("check", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads(done.stdout)
    assert (doc["ok"], doc["code"]) == (True, None)
    names = {m["machine"] for m in doc["machines"]}
    shipped = {p.stem for p in data_dir("machines").glob("*.yaml")}
    recipes = {p.stem for p in data_dir("recipes").glob("*.yaml")}
    assert names == shipped | {f"plan@{r}" for r in recipes}
    assert {r["recipe"] for r in doc["recipes"]} == recipes
    review = next(r for r in doc["recipes"] if r["recipe"] == "review")
    assert review["machines"][:2] == ["plan@review", "plan"] and "receipt" in review["machines"]
    assert all(m["faults"] == ["crash", "expiry", "pause"] and m["actors"] == 3 for m in doc["machines"])
    assert doc["states"] > 1000


def test_a_broken_machine_exits_8_with_a_trace_that_draw_highlights(corral: Any, tmp_path: Path) -> None:
    trace = tmp_path / "trace.json"
    done = corral("check", str(broken_controller(tmp_path)), "--trace-out", str(trace))
    assert done.returncode == 8, done.stdout + done.stderr
    assert "error [invariant_violated]" in done.stderr
    assert "VIOLATED one_live_holder" in done.stdout
    assert "     1. A1    fire acquire#1 absent -> active" in done.stdout
    assert "     2. A2    fire renew#1 active -> active" in done.stdout
    doc = json.loads(trace.read_text())
    assert (doc["format"], doc["machine"], doc["invariant"]) == ("corral-trace-v1", "controller", "one_live_holder")
    assert [(s["n"], s["actor"], s["trigger"]) for s in doc["steps"]] == [(1, "A1", "acquire"), (2, "A2", "renew")]

    drawn = corral("draw", "controller", "--trace", str(trace), "--format", "dot")
    assert drawn.returncode == 0, drawn.stderr
    assert "counterexample of one_live_holder" in drawn.stdout
    assert "(path 1)" in drawn.stdout and "(path 2)" in drawn.stdout
    assert '"active" [label="active"' in drawn.stdout and 'style="rounded,filled,bold"' in drawn.stdout
    mermaid = corral("draw", "controller", "--trace", str(trace))
    assert "class active current" in mermaid.stdout


def test_the_json_report_of_a_violation(corral: Any, tmp_path: Path) -> None:
    done = corral("check", str(broken_controller(tmp_path)), "--json", "--actors", "2")
    assert done.returncode == 8
    doc = json.loads(done.stdout)
    machine = doc["machines"][0]
    assert (doc["ok"], doc["code"], doc["violated"], machine["actors"]) == (False, "invariant_violated", True, 2)
    assert {v["invariant"] for v in machine["violations"]} == {"one_live_holder", "holder_only"}


def test_a_search_stopped_short_exits_9(corral: Any) -> None:
    done = corral("check", "writer", "--budget", "40")
    assert done.returncode == 9, done.stdout + done.stderr
    assert "SHORT writer" in done.stdout and "stopped short by its budget" in done.stdout
    assert "error [check_incomplete]" in done.stderr


@pytest.mark.parametrize(
    ("args", "status", "code", "names"),
    [
        (("--actors", "9"), 3, "check_limit", "--actors"),
        (("--depth", "100"), 3, "check_limit", "--depth"),
        (("--faults", "crash,meteor"), 3, "fault_unknown", "meteor"),
        (("nosuchmachine",), 3, "check_unknown", "nosuchmachine"),
        (("--actors", "many"), 2, "usage", "--actors"),
    ],
)
def test_bad_input_is_a_coded_error(corral: Any, args: tuple[str, ...], status: int, code: str, names: str) -> None:
    done = corral("check", *args, "--json")
    assert done.returncode == status, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    error = json.loads(done.stdout)["error"]
    assert error["code"] == code and names in error["message"]


def test_draw_refuses_a_file_that_is_not_a_trace(corral: Any, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"steps": 1}')
    done = corral("draw", "controller", "--trace", str(bad), "--json")
    assert (done.returncode, json.loads(done.stdout)["error"]["code"]) == (3, "trace_invalid")
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"format": "corral-trace-v1", "machine": "receipt", "steps": []}))
    done = corral("draw", "controller", "--trace", str(other), "--json")
    assert "corral draw receipt --trace" in json.loads(done.stdout)["error"]["message"]


INVARIANT_CASES = [
    ("holds: {states: [nowhere], field: lease_id}", "spec_invariant_state", "/invariants/0/holds/states/0"),
    ("holds: {states: [active], field: nothing}", "spec_invariant_field", "/invariants/0/holds/field"),
    ("fenced: [renew, launch]", "spec_invariant_trigger", "/invariants/0/fenced/1"),
    ("at_most_once: renew", "spec_invariant_trigger", "/invariants/0/at_most_once"),
    ("never_decreases: holder", "spec_invariant_field", "/invariants/0/never_decreases"),
]


@pytest.mark.parametrize(("predicate", "code", "pointer"), INVARIANT_CASES)
def test_lint_names_a_bad_invariant_with_its_line(tmp_path: Path, predicate: str, code: str, pointer: str) -> None:
    text = (data_dir("machines") / "controller.yaml").read_text()
    head = text[: text.index("invariants:")]
    path = tmp_path / "controller.yaml"
    path.write_text(head + f"invariants:\n  - name: broken\n    description: A broken one.\n    {predicate}\n")
    line = head.count("\n") + 4
    report, spec = validate_file(path)
    assert spec is None
    found = [(d.code, d.pointer, d.line) for d in report.diagnostics]
    assert found == [(code, pointer, line)]


def test_validate_prints_file_and_line_of_a_bad_invariant(corral: Any, tmp_path: Path) -> None:
    text = (data_dir("machines") / "controller.yaml").read_text()
    path = tmp_path / "controller.yaml"
    path.write_text(text.replace("fenced: [renew, resume, release]", "fenced: [renew, resum, release]"))
    done = corral("validate", str(path))
    assert done.returncode == 3
    line = text[: text.index("fenced: [renew, resume")].count("\n") + 1
    assert f"controller.yaml:{line}:" in done.stdout and "spec_invariant_trigger" in done.stdout
    assert "no trigger 'resum'" in done.stdout


def test_two_invariants_of_one_name_are_refused(tmp_path: Path) -> None:
    text = (data_dir("machines") / "controller.yaml").read_text()
    path = tmp_path / "controller.yaml"
    path.write_text(text.replace("  - name: holder_only", "  - name: one_live_holder"))
    report, _ = validate_file(path)
    assert [d.code for d in report.diagnostics] == ["spec_invariant_duplicate"]


def test_draw_shows_a_recipes_plan_and_a_trace_on_it(corral: Any, tmp_path: Path) -> None:
    """``plan@RECIPE``, the plan ``check`` explores for a recipe, is drawn by that name too."""
    trace = tmp_path / "plan.json"
    steps = [
        ("A1", "fire", "submit", "absent", "submitted"),
        ("A1", "fire", "start", "submitted", "running_0"),
        ("A2", "fire", "step:acquire", "running_0", "running_1"),
    ]
    trace.write_text(
        json.dumps(
            {
                "format": "corral-trace-v1",
                "machine": "plan@review",
                "invariant": "steps_by_the_runner",
                "steps": [
                    {"n": n, "actor": a, "action": act, "trigger": t, "source": s, "dest": d, "guards": []}
                    for n, (a, act, t, s, d) in enumerate(steps, 1)
                ],
            }
        )
    )
    drawn = corral("draw", "plan@review", "--trace", str(trace))
    assert drawn.returncode == 0, drawn.stderr
    assert "running_0 --> running_1 : step:acquire" in drawn.stdout
    assert "class running_1 current" in drawn.stdout
