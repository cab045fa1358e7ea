"""Drawings of an instance's path, a recipe's steps and a plan's progress: structure, CLI, and Mermaid 11 rendering.

The paths drawn come from real instances driven through the real :class:`~runner.service.Service` on a
real SQLite store; the plan is a real plan run by the real executor.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from itertools import pairwise
from pathlib import Path
from typing import Any

import anyio
import pytest

from runner.cli.app import main
from runner.context import Instance
from runner.definitions.operations import OPERATIONS
from runner.definitions.recipes import RecipeLibrary
from runner.engine import Request
from runner.errors import InputError, NotFoundError
from runner.plans.ops import OPERATIONS as STEP_OPERATIONS
from runner.presentation.draw import (
    STEP_COLOURS,
    PlanStatus,
    dot,
    mermaid,
    recipe_dot,
    recipe_mermaid,
    render,
    render_recipe,
    trail,
)
from runner.service import Grant, ReleaseInput, RenewInput, Service
from runner.service.inputs.plans import PlanRunInput, PlanSubmitInput
from runner.service.plans import Plans
from runner.sql.store_sqlite import SQLiteStore

REPO = Path(__file__).resolve().parents[2]
MERMAID_JS = Path(os.environ.get("CORRAL_MERMAID_JS", REPO / ".cache/mermaid/node_modules/mermaid/dist/mermaid.min.js"))
SHA = "0" * 64
LEASE_HISTORY = [("acquire", "absent", "active"), ("renew", "active", "active"), ("release", "active", "released")]

# A recipe with every feature a drawing shows: a catch to a later step, a when, a failure, a finally.
PROBE_RECIPE = """\
recipe: drawprobe
version: 1
description: Exercises every feature of a recipe drawing.
inputs:
  type: object
  properties:
    mode: {type: string, default: first}
steps:
  - id: prepare
    do: flow.pass
    with: {values: {n: 1}}
  - id: risky
    do: flow.fail
    with: {code: boom}
    catch:
      - errors: [boom, "*"]
        next: recover
  - id: bypassed
    do: flow.pass
  - id: recover
    do: flow.pass
    when: {left: "${inputs.mode}", op: "<=", right: "second"}
  - id: end
    do: flow.fail
    with: {code: "bad<&>\\"#"}
  - id: after
    do: flow.pass
  - id: cleanup
    do: recipe.call
    with: {recipe: tiny}
    finally: true
"""
TINY_RECIPE = """\
recipe: tiny
version: 1
description: One step.
steps:
  - id: only
    do: flow.pass
"""
PROBE_STATES = {
    "prepare": "succeeded",
    "risky": "caught",
    "bypassed": "pending",
    "recover": "succeeded",
    "end": "failed",
    "after": "skipped",
    "cleanup": "succeeded",
}


# --- helpers ------------------------------------------------------------------------------------------

_ATTR = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|[^,\s\]]+)')
_EDGE = re.compile(r'^\s*"((?:[^"\\]|\\.)*)" -> "((?:[^"\\]|\\.)*)"(?: \[(.*)\])?;$')
_NODE = re.compile(r'^\s*"((?:[^"\\]|\\.)*)" \[(.*)\];$')


def _attrs(text: str | None) -> dict[str, str]:
    out = {}
    for key, value in _ATTR.findall(text or ""):
        out[key] = value[1:-1].replace('\\"', '"').replace("\\n", "\n") if value.startswith('"') else value
    if "label" in out:
        out["label"] = unwrap(out["label"])
    return out


def unwrap(label: str) -> str:
    """A drawn edge label with one line per transition: wrapped lines (indented, '\\l'-ended) joined back."""
    lines: list[str] = []
    for line in label.replace("\\l", "\n").removesuffix("\n").split("\n"):
        if line.startswith("  ") and lines:
            lines[-1] += " " + line.strip()
        else:
            lines.append(line)
    return "\n".join(lines)


def _labels(text: str) -> str:
    """Every edge label of a DOT text, unwrapped, one per line."""
    return "\n".join(a.get("label", "") for _, _, a in parse_dot(text)[1])


def parse_dot(text: str) -> tuple[dict[str, dict[str, str]], list[tuple[str, str, dict[str, str]]]]:
    """Nodes (name -> attributes) and edges (source, dest, attributes) of our one-statement-a-line DOT."""
    nodes: dict[str, dict[str, str]] = {}
    edges: list[tuple[str, str, dict[str, str]]] = []
    for line in text.splitlines():
        if m := _EDGE.match(line):
            edges.append((m.group(1), m.group(2), _attrs(m.group(3))))
        elif m := _NODE.match(line):
            nodes[m.group(1)] = _attrs(m.group(2))
    return nodes, edges


def _mermaid_classes(text: str) -> dict[str, set[str]]:
    """Class name -> the ids a ``class a, b NAME`` (or ``class a,b NAME``) line gives it."""
    out: dict[str, set[str]] = {}
    for line in text.splitlines():
        if m := re.match(r"^\s*class (.+) (\S+)$", line):
            out.setdefault(m.group(2), set()).update(x.strip() for x in m.group(1).split(","))
    return out


def _drive_lease(service: Service, acquire: Callable[..., Grant]) -> Instance:
    grant = acquire("ctl")
    acquire("other")  # another instance's events must not leak into ctl's path
    service.controller.renew(RenewInput("ctl", grant.credential))
    service.controller.release(ReleaseInput("ctl", grant.credential, "done", SHA))
    found = service.store.get("controller/ctl")
    assert found is not None
    return found


class _NoKeeper:
    """The probe recipe never acquires a controller: nothing to keep."""

    def load(self, controller_id: str) -> None:
        return None

    def save(self, credential: Any) -> None:
        raise AssertionError("the probe recipe holds no credential")

    def remove(self, controller_id: str) -> None:
        return None


@pytest.fixture
def recipes(tmp_path: Path) -> RecipeLibrary:
    directory = tmp_path / "recipes"
    directory.mkdir()
    (directory / "drawprobe.yaml").write_text(PROBE_RECIPE)
    (directory / "tiny.yaml").write_text(TINY_RECIPE)
    return RecipeLibrary([directory])


def _run_probe(service: Service, recipes: RecipeLibrary, plan_id: str = "p1", mode: str = "first") -> Instance:
    plans = Plans(service, recipes, _NoKeeper(), STEP_OPERATIONS)
    plans.submit(
        PlanSubmitInput({"plan": plan_id, "recipe": "drawprobe", "controller": "ctl", "inputs": {"mode": mode}})
    )
    return anyio.run(plans.run, PlanRunInput(plan_id))


def _crash_in_step(
    service: Service, recipes: RecipeLibrary, plan_id: str, step: str, recipe: str = "drawprobe"
) -> Instance:
    """Run until ``step`` has started, then die as a runner would (its start is recorded, its end never)."""

    class Crash(BaseException):
        pass

    def progress(event: dict[str, Any]) -> None:
        if event["event"] == "step_started" and event["step"] == step:
            raise Crash

    plans = Plans(service, recipes, _NoKeeper(), STEP_OPERATIONS)
    plans.submit(PlanSubmitInput({"plan": plan_id, "recipe": recipe, "controller": "ctl"}))
    with pytest.raises(Crash):
        anyio.run(plans.run, PlanRunInput(plan_id), progress)
    return plans.plan(plan_id)  # with its step records (parts of the plan instance)


# --- an instance's path -------------------------------------------------------------------------------


def test_trail_is_the_event_history_of_a_real_lease(service: Service, acquire: Callable[..., Grant]) -> None:
    instance = _drive_lease(service, acquire)
    events = service.store.events(instance_id="controller/ctl")
    assert [(e.trigger, e.from_state, e.to_state) for e in events] == LEASE_HISTORY
    spec = service.library.builtin("controller")
    path = trail(spec, "controller/ctl", instance, service.store.events())  # the whole log: filtered by id
    assert [(v.trigger, v.source, v.dest) for v in path.visits] == LEASE_HISTORY
    assert [v.seq for v in path.visits] == [e.seq for e in events]
    assert path.current == "released"
    assert path.path == ["absent", "active", "active", "released"]
    assert path.visited == ["absent", "active"]


def test_mermaid_highlights_the_path(service: Service, acquire: Callable[..., Grant]) -> None:
    instance = _drive_lease(service, acquire)
    spec = service.library.builtin("controller")
    events = service.store.events(instance_id="controller/ctl")
    text = mermaid(spec, trail(spec, "controller/ctl", instance, events))
    comment = next(line for line in text.splitlines() if "path of controller/ctl" in line)
    assert comment.strip().startswith("%%")
    assert "absent -acquire-> active -renew-> active -release-> released" in comment
    assert f"events {', '.join(str(e.seq) for e in events)}" in comment
    classes = _mermaid_classes(text)
    assert classes["current"] == {"released"}
    assert classes["visited"] == {"absent", "active"}
    assert re.search(r"classDef current fill:#[0-9a-f]{6}", text)
    edges = {  # wrapped at spaces: lines joined by spaces give each transition's text back
        line.split(" : ")[0].strip(): line.split(" : ")[1].replace("<br/>", " ")
        for line in text.splitlines()
        if " : " in line
    }
    assert "acquire / record_authority, issue_lease (path 1)" in edges["absent --> active"]
    assert "renew [fence] / extend_lease (path 2)" in edges["active --> active"]
    assert "resume [fence(allow_expired=true)] / issue_lease takeover" in edges["active --> active"]  # not taken
    assert "(path 3)" in edges["active --> released"]
    assert "(path" not in edges["released --> active"]
    plain = mermaid(spec)
    assert "(path" not in plain and "classDef current" not in plain and "path of" not in plain


def test_dot_fills_the_current_state_and_bolds_the_edges_taken(service: Service, acquire: Callable[..., Grant]) -> None:
    instance = _drive_lease(service, acquire)
    spec = service.library.builtin("controller")
    path = trail(spec, "controller/ctl", instance, service.store.events(instance_id="controller/ctl"))
    nodes, edges = parse_dot(dot(spec, path))
    assert "filled" in nodes["released"]["style"] and nodes["released"]["fontcolor"] == "white"
    assert "filled" in nodes["absent"]["style"] and "filled" in nodes["active"]["style"]
    assert nodes["absent"]["fillcolor"] != nodes["released"]["fillcolor"]
    bold = {(s, d): a for s, d, a in edges if "bold" in a.get("style", "")}
    taken = {(src, dst) for _, src, dst in LEASE_HISTORY} | {("__start", "absent")}
    assert set(bold) == taken
    numbers = {
        (s, d): re.findall(r"(\w+) [^\n]*\(path ([\d, ]+)\)", a["label"])
        for (s, d), a in bold.items()
        if s != "__start"
    }
    assert numbers == {
        ("absent", "active"): [("acquire", "1")],
        ("active", "active"): [("renew", "2")],
        ("active", "released"): [("release", "3")],
    }
    events = service.store.events(instance_id="controller/ctl")
    assert bold[("active", "released")]["tooltip"] == f"events {events[2].seq}"
    assert "filled" not in parse_dot(dot(spec))[0]["released"].get("style", "")


def test_a_repeated_transition_carries_every_position(service: Service, acquire: Callable[..., Grant]) -> None:
    grant = acquire("ctl")
    for _ in range(2):
        service.controller.renew(RenewInput("ctl", grant.credential))
    spec = service.library.builtin("controller")
    instance = service.store.get("controller/ctl")
    path = trail(spec, "controller/ctl", instance, service.store.events(instance_id="controller/ctl"))
    assert path.current == "active" and path.visited == ["absent"]
    assert "renew [fence] / extend_lease (path 2, 3)" in _labels(dot(spec, path))
    assert _mermaid_classes(mermaid(spec, path)) == {"visited": {"absent"}, "current": {"active"}}


def test_two_phase_outcome_edges_are_highlighted(tmp_path: Path, service: Service) -> None:
    from runner.context import EffectResult
    from runner.effects import EFFECTS

    if EFFECTS.get("draw_extras_probe") is None:
        EFFECTS.add("draw_extras_probe", lambda ctx: EffectResult("success"))
    machine = tmp_path / "job.yaml"
    machine.write_text(
        "machine: job\nversion: 1\ndescription: d\ninitial: idle\n"
        "states:\n  idle: {description: i}\n  running: {description: r, intermediate: true}\n"
        "  done: {description: d, terminal: true}\n  failed: {description: f, terminal: true}\n"
        "transitions:\n  - {trigger: run, source: idle, dest: running, effects: [draw_extras_probe],"
        " outcomes: {success: done, failure: failed}}\n"
    )
    spec = service.library.load(machine)
    service.engine.fire(spec, Request("job/1", "run", actor="test"))
    events = service.store.events(instance_id="job/1")
    assert [(e.trigger, e.from_state, e.to_state) for e in events] == [
        ("run", "idle", "running"),
        ("run:success", "running", "done"),
    ]
    path = trail(spec, "job/1", service.store.get("job/1"), events)
    _, edges = parse_dot(dot(spec, path))
    styles = {(s, d): a.get("style", "") for s, d, a in edges}
    assert styles[("running", "done")] == "dashed,bold"
    assert styles[("running", "failed")] == "dashed"
    assert "run: success (path 2)" in _labels(dot(spec, path))
    assert _mermaid_classes(mermaid(spec, path))["visited"] == {"idle", "running"}


def test_unknown_instance_and_other_machine_are_clear_errors(service: Service, acquire: Callable[..., Grant]) -> None:
    acquire("ctl")
    receipt = service.library.builtin("receipt")
    with pytest.raises(NotFoundError) as unknown:
        trail(receipt, "receipt/nope", service.store.get("receipt/nope"), [])
    assert unknown.value.code == "instance_unknown"
    with pytest.raises(InputError) as mismatch:
        trail(receipt, "controller/ctl", service.store.get("controller/ctl"), [])
    assert mismatch.value.code == "instance_machine_mismatch"
    assert mismatch.value.details["machine"] == "controller"
    assert "corral draw controller --instance controller/ctl" in mismatch.value.message


# --- recipes and plans ----------------------------------------------------------------------------------


def _mermaid_nodes(text: str) -> dict[str, tuple[str, str]]:
    """Node id -> (shape opening, label) of a recipe flowchart's step nodes."""
    return {
        m.group(1): (m.group(2), m.group(3)) for m in re.finditer(r'^\s*(s\d+)(\[\[?)"(.*)"\]\]?$', text, re.MULTILINE)
    }


@pytest.mark.parametrize("name", ["review", "writer-lane", "batch-review", "validate", "drawprobe"])
def test_recipe_flowchart_lists_the_steps_in_order(recipes: RecipeLibrary, name: str) -> None:
    recipe = recipes.get(name)
    text = recipe_mermaid(recipe)
    lines = text.splitlines()
    assert lines[:3] == ["---", f'title: "recipe {name} v{recipe.version}"', "---"]
    assert lines[3] == "flowchart TD"
    nodes = _mermaid_nodes(text)
    assert len(nodes) == len(recipe.steps)
    for index, step in enumerate(recipe.steps):
        shape, text_label = nodes[f"s{index}"]
        parts = text_label.split("<br/>")
        assert parts[0] == step.id
        machine = OPERATIONS[step.do].machine
        assert parts[1] == (f"{step.do} → {machine}" if machine else step.do)
        assert (shape == "[[") == step.final
        assert ("finally" in parts) == step.final
    chain = re.findall(r"^\s*(\w+) --> (\w+)$", text, re.MULTILINE)
    expected = ["begin", *(f"s{i}" for i in range(len(recipe.steps))), "finish"]
    assert chain == list(pairwise(expected))
    nodes_dot, edges_dot = parse_dot(recipe_dot(recipe))
    steps_dot = [n for n in nodes_dot if n.startswith("step:")]
    assert steps_dot == [f"step:{s.id}" for s in recipe.steps]
    for step in recipe.steps:
        attrs = nodes_dot[f"step:{step.id}"]
        assert attrs["label"].split("\n")[1].startswith(step.do)
        assert (attrs.get("peripheries") == "2") == step.final
    solid = [(s, d) for s, d, a in edges_dot if "style" not in a]
    assert solid == list(zip(["__start", *steps_dot], [*steps_dot, "__end"], strict=False))


def test_catch_and_when_are_drawn(recipes: RecipeLibrary) -> None:
    recipe = recipes.get("drawprobe")
    text = recipe_mermaid(recipe)
    assert re.search(r'^\s*s1 -\.->\|"catch boom, \*"\| s3$', text, re.MULTILINE), text
    label = _mermaid_nodes(text)["s3"][1]
    assert "when ${inputs.mode} #lt;= second" in label  # '<' as a Mermaid entity, not HTML
    assert "cleanup<br/>recipe.call → plan<br/>finally" in _mermaid_nodes(text)["s6"][1]
    _, edges = parse_dot(recipe_dot(recipe))
    catches = [(s, d, a) for s, d, a in edges if a.get("style") == "dashed"]
    assert catches == [("step:risky", "step:recover", {"label": "catch boom, *", "style": "dashed"})]


def test_plan_steps_are_coloured_by_their_recorded_state(service: Service, recipes: RecipeLibrary) -> None:
    plan = _run_probe(service, recipes, mode="first")
    assert plan.state == "failed"
    recorded = {sid: rec["state"] for sid, rec in plan.data["steps"].items()}
    assert recorded == {k: v for k, v in PROBE_STATES.items() if v != "pending"}  # the real run, as expected
    recipe = recipes.get("drawprobe")
    status = PlanStatus.of(plan)
    text = recipe_mermaid(recipe, status)
    assert 'title: "plan p1 (recipe drawprobe v1): failed"' in text
    classes = _mermaid_classes(text)
    index = {s.id: f"s{i}" for i, s in enumerate(recipe.steps)}
    for step, state in PROBE_STATES.items():
        assert index[step] in classes[f"step_{state}"], (step, state)
        assert f"[{state}]" in _mermaid_nodes(text)[index[step]][1]
    for state, members in classes.items():
        fill = STEP_COLOURS[state.removeprefix("step_")][0]
        assert re.search(rf"classDef {state} fill:{fill},", text)
        assert members <= set(index.values())
    nodes, _ = parse_dot(recipe_dot(recipe, status))
    for step, state in PROBE_STATES.items():
        assert nodes[f"step:{step}"]["fillcolor"] == STEP_COLOURS[state][0], step
    assert "failed" in recipe_dot(recipe, status).splitlines()[2]


# An effectful step (a nested plan) between two pure ones: only an effectful step has a running record
# (a pure step's outcome is committed with its start, see runner/service/plan_run.py).
INFLIGHT_RECIPE = """\
recipe: inflight
version: 1
description: A nested plan between two pure steps.
steps:
  - id: first
    do: flow.pass
  - id: nested
    do: recipe.call
    with: {recipe: tiny}
  - id: last
    do: flow.pass
"""


def test_a_step_in_flight_is_running(service: Service, recipes: RecipeLibrary, tmp_path: Path) -> None:
    (tmp_path / "recipes" / "inflight.yaml").write_text(INFLIGHT_RECIPE)
    library = RecipeLibrary([tmp_path / "recipes"])
    plan = _crash_in_step(service, library, "p2", "nested", recipe="inflight")
    assert plan.state == "running"
    status = PlanStatus.of(plan)
    assert [status.of_step(s) for s in ("first", "nested", "last")] == ["succeeded", "running", "pending"]
    nodes, _ = parse_dot(recipe_dot(library.get("inflight"), status))
    assert nodes["step:nested"]["fillcolor"] == STEP_COLOURS["running"][0]
    assert nodes["step:last"]["fillcolor"] == STEP_COLOURS["pending"][0]
    assert "): running" in recipe_mermaid(library.get("inflight"), status).splitlines()[1]


def test_a_pure_step_has_no_running_record(service: Service, recipes: RecipeLibrary) -> None:
    """A pure step's progress events are heard after the commit that holds its outcome (with the next
    effectful step's start): a crash heard at its start finds it succeeded, and the only running step
    is the effectful one whose start was committed with it."""
    plan = _crash_in_step(service, recipes, "p3", "recover")
    status = PlanStatus.of(plan)
    assert status.of_step("recover") == "succeeded"
    assert [s for s in PROBE_STATES if status.of_step(s) == "running"] == ["cleanup"]


@pytest.mark.slow
@pytest.mark.usefixtures("hermetic_git", "home")
@pytest.mark.skipif(shutil.which("bwrap") is None and not os.environ.get("CI"), reason="verify needs Bubblewrap")
def test_a_validation_that_did_not_pass_is_drawn_failed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A real writer-lane plan whose sandboxed validation fails: its verify step is red, never green."""
    from tests.plans.test_run import GOOD_CHANGE, Rig, make_lane, writer_plan

    rigs = {}
    for passed, prompt in ((True, GOOD_CHANGE), (False, "write src/feature.py def feature(:")):
        root = tmp_path / str(passed)
        root.mkdir()
        rig = rigs[passed] = Rig(root)
        _, worktree, _ = make_lane(root)
        plan = rig.run(writer_plan(rig, "lane", worktree, prompt))
        record = plan.data["steps"]["verify"]
        assert record["do"] == "writer.verify"
        if record["state"] == "succeeded":  # recorded, not raised: the outputs say whether it passed
            assert record["outputs"]["passed"] is passed
        else:  # a failed validation fails the step (validation_failed)
            assert not passed and record["state"] == "failed"
        status = PlanStatus.of(plan)
        shown = "succeeded" if passed else "failed"
        assert status.of_step("verify") == shown
        assert status.of_step("release") == plan.data["steps"]["release"]["state"]
        recipe = rig.recipes.get("writer-lane")
        nodes, _ = parse_dot(recipe_dot(recipe, status))
        assert nodes["step:verify"]["fillcolor"] == STEP_COLOURS[shown][0]
        assert nodes["step:verify"]["color"] == STEP_COLOURS[shown][1]
        index = {step.id: f"s{i}" for i, step in enumerate(recipe.steps)}
        text = recipe_mermaid(recipe, status)
        assert index["verify"] in _mermaid_classes(text)[f"step_{shown}"]
        assert f"[{shown}]" in _mermaid_nodes(text)[index["verify"]][1]
        assert ("validation did not pass" in _mermaid_nodes(text)[index["verify"]][1]) is (
            record["state"] == "succeeded" and not passed
        )
        rig.store.close()
    # The command shows the same: the step's state in --json, the colour in the drawing.
    url = rigs[False].store.url
    status_code, out, _ = _corral(capsys, "--store", url, "draw", "--plan", "lane", "--json")
    assert status_code == 0 and json.loads(out)["steps"]["verify"] == "failed"
    status_code, out, _ = _corral(capsys, "--store", url, "draw", "--plan", "lane", "--format", "dot")
    assert status_code == 0 and parse_dot(out)[0]["step:verify"]["fillcolor"] == STEP_COLOURS["failed"][0]


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz is not installed (CI installs it)")
def test_recipe_and_path_render_to_svg(service: Service, acquire: Callable[..., Grant], recipes: RecipeLibrary) -> None:
    instance = _drive_lease(service, acquire)
    spec = service.library.builtin("controller")
    svg = render(
        spec, "svg", trail(spec, "controller/ctl", instance, service.store.events(instance_id="controller/ctl"))
    )
    assert isinstance(svg, str) and "(path 3)" in svg
    svg = render_recipe(recipes.get("drawprobe"), "svg")
    assert isinstance(svg, str) and "catch boom, *" in svg and "recipe.call → plan" in svg


# --- the command ------------------------------------------------------------------------------------------


def _corral(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    status = main(list(args))
    out, err = capsys.readouterr()
    return status, out, err


@pytest.fixture
def url(store: SQLiteStore, home: Path) -> str:
    """The test store's URL, for the CLI (which opens the same SQLite file)."""
    return store.url


def test_cli_instance(
    capsys: pytest.CaptureFixture[str], service: Service, acquire: Callable[..., Grant], url: str
) -> None:
    _drive_lease(service, acquire)
    status, out, _ = _corral(capsys, "--store", url, "draw", "controller", "--instance", "controller/ctl", "--json")
    assert status == 0
    doc = json.loads(out)
    assert doc["instance"] == "controller/ctl" and doc["state"] == "released"
    assert doc["path"] == ["absent", "active", "active", "released"]
    assert _mermaid_classes(doc["drawing"])["current"] == {"released"}
    status, out, _ = _corral(
        capsys, "--store", url, "draw", "controller", "--instance", "controller/ctl", "--format", "dot"
    )
    assert status == 0 and parse_dot(out)[0]["released"]["fontcolor"] == "white"
    status, out, _ = _corral(capsys, "--store", url, "draw", "receipt", "--instance", "controller/ctl", "--json")
    assert status == 3 and json.loads(out)["error"]["code"] == "instance_machine_mismatch"
    status, _, err = _corral(capsys, "--store", url, "draw", "controller", "--instance", "controller/nobody")
    assert status == 3 and "error [instance_unknown]" in err


def test_cli_recipe_and_plan(
    capsys: pytest.CaptureFixture[str],
    service: Service,
    recipes: RecipeLibrary,
    url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CORRAL_RECIPES", str(tmp_path / "recipes"))
    _run_probe(service, recipes)
    status, out, _ = _corral(capsys, "--store", url, "draw", "--recipe", "drawprobe")
    assert status == 0 and out == recipe_mermaid(recipes.get("drawprobe"))
    status, out, _ = _corral(capsys, "--store", url, "draw", "--plan", "p1", "--json")
    assert status == 0
    doc = json.loads(out)
    assert (doc["plan"], doc["recipe"], doc["state"]) == ("p1", "drawprobe", "failed")
    assert doc["steps"] == PROBE_STATES
    target = tmp_path / "plan.dot"
    status, _, err = _corral(capsys, "--store", url, "draw", "--plan", "p1", "--format", "dot", "--out", str(target))
    assert status == 0 and "plan p1 (failed)" in err
    assert parse_dot(target.read_text())[0]["step:end"]["fillcolor"] == STEP_COLOURS["failed"][0]
    status, out, _ = _corral(capsys, "--store", url, "draw", "--plan", "nope", "--json")
    assert status == 3 and json.loads(out)["error"]["code"] == "plan_unknown"


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["controller", "--recipe", "review"],
        ["--recipe", "review", "--plan", "p1"],
        ["controller", "--plan", "p1"],
        ["--recipe", "review", "--instance", "controller/ctl"],
    ],
)
def test_cli_takes_exactly_one_subject(capsys: pytest.CaptureFixture[str], home: Path, args: list[str]) -> None:
    status, out, _ = _corral(capsys, "draw", *args, "--json")
    assert status == 2
    assert json.loads(out)["error"]["code"] == "usage"


# --- Mermaid 11 in a real browser ---------------------------------------------------------------------------


def _browser() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def render_in_browser(tmp_path: Path, diagrams: list[str]) -> list[dict[str, Any]]:
    """Render each diagram with Mermaid 11 in headless Chromium; per diagram: its nodes and edge labels.

    A node is ``{"classes", "text", "fill"}`` (``fill``: the computed fill of its shape).
    """
    browser = _browser()
    if browser is None or not MERMAID_JS.is_file():
        if os.environ.get("CI"):
            pytest.fail("CI must provide chromium and mermaid (.ci/run installs both)")
        pytest.skip("needs chromium and mermaid.min.js (.ci/run installs both)")
    blocks = "".join(f"<pre class='mermaid'>{html.escape(text, quote=False)}</pre>" for text in diagrams)
    page = tmp_path / "page.html"
    page.write_text(
        "<html><body>" + blocks + "<script>" + MERMAID_JS.read_text() + "</script><script>"
        "mermaid.initialize({startOnLoad: false});"
        "mermaid.run().then(() => { const out = Array.from(document.querySelectorAll('pre.mermaid')).map(pre => {"
        " const svg = pre.querySelector('svg'); if (!svg) return null;"
        " const nodes = Array.from(svg.querySelectorAll('g.node')).map(g => {"
        "  const shape = g.querySelector('rect, path, polygon, circle');"
        "  return {classes: (g.getAttribute('class') || '').split(/\\s+/), text: g.textContent,"
        "          fill: shape ? getComputedStyle(shape).fill : null}; });"
        " const labels = Array.from(svg.querySelectorAll('.edgeLabel')).map(e => e.textContent);"
        " const title = Array.from(svg.querySelectorAll('.flowchartTitleText, text.titleText'))"
        "  .map(e => e.textContent);"
        " return {nodes, labels, title}; });"
        " document.title = 'OK ' + JSON.stringify(out); })"
        ".catch(e => { document.title = 'ERROR ' + (e.message || e); });</script></body></html>"
    )
    dom = subprocess.run(
        [
            browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--proxy-server=127.0.0.1:9",
            f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=15000", "--dump-dom", page.as_uri(),
        ],
        capture_output=True, text=True, timeout=90, check=True,
    ).stdout  # fmt: skip
    title = dom.split("<title>", 1)[1].split("</title>", 1)[0] if "<title>" in dom else ""
    assert title.startswith("OK "), title or dom[-2000:]
    rendered: list[dict[str, Any]] = json.loads(html.unescape(title[3:]))
    assert all(r is not None for r in rendered), "a diagram did not render"
    return rendered


def _rgb(hex_colour: str) -> str:
    r, g, b = (int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgb({r}, {g}, {b})"


@pytest.mark.slow
def test_instance_drawing_renders_in_a_browser(tmp_path: Path, service: Service, acquire: Callable[..., Grant]) -> None:
    instance = _drive_lease(service, acquire)
    spec = service.library.builtin("controller")
    text = mermaid(spec, trail(spec, "controller/ctl", instance, service.store.events(instance_id="controller/ctl")))
    (result,) = render_in_browser(tmp_path, [text])
    by_text = {n["text"]: n for n in result["nodes"] if n["text"]}
    assert "current" in by_text["released"]["classes"]
    assert by_text["released"]["fill"] == _rgb("#1565c0")
    assert "visited" in by_text["absent"]["classes"] and "visited" in by_text["active"]["classes"]
    assert by_text["absent"]["fill"] == _rgb("#e3f2fd")
    labels = " ".join(result["labels"])
    for n, trigger in enumerate(["acquire", "renew", "release"], 1):
        assert re.search(rf"{trigger}\b[^()]*(\([^)]*\)[^()]*)*\(path {n}\)", labels), (trigger, labels)


@pytest.mark.slow
def test_recipe_and_plan_drawings_render_in_a_browser(tmp_path: Path, service: Service, recipes: RecipeLibrary) -> None:
    plan = _run_probe(service, recipes)
    names = ["review", "writer-lane", "batch-review", "validate", "drawprobe"]
    diagrams = [recipe_mermaid(recipes.get(n)) for n in names]
    diagrams.append(recipe_mermaid(recipes.get("drawprobe"), PlanStatus.of(plan)))
    results = render_in_browser(tmp_path, diagrams)
    for name, result in zip([*names, "drawprobe"], results, strict=True):
        recipe = recipes.get(name)
        texts = [n["text"] for n in result["nodes"]]
        assert texts[0] == "start" and texts[-1] == "end", texts
        for step, shown in zip(recipe.steps, texts[1:-1], strict=True):
            assert shown.startswith(step.id + step.do), (step.id, shown)
    assert "catch boom, *" in results[4]["labels"]
    assert any("#lt;" not in t and "<= second" in t for t in (n["text"] for n in results[4]["nodes"]))
    coloured = results[5]
    assert coloured["title"] == ["plan p1 (recipe drawprobe v1): failed"]
    for step, node in zip(recipes.get("drawprobe").steps, coloured["nodes"][1:-1], strict=True):
        state = PROBE_STATES[step.id]
        assert f"step_{state}" in node["classes"], (step.id, node)
        assert node["fill"] == _rgb(STEP_COLOURS[state][0]), (step.id, node)
