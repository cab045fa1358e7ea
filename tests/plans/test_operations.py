"""Step operations are registered objects tied to the catalogue, and other distributions add their own
through the ``corral.operations`` entry point group (found by recipe checks and run by plans)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from runner.definitions import operations as catalogue
from runner.definitions.operations import OPERATIONS as CATALOGUE
from runner.plans.ops import OPERATIONS, Operation, Outputs, StepOperation
from runner.service.steps import OperationRegistry


def test_every_catalogue_entry_has_an_implementation_and_every_implementation_an_entry() -> None:
    assert OPERATIONS.builtins() == sorted(CATALOGUE)
    for name, spec in CATALOGUE.items():
        implementation = OPERATIONS.get(name)
        assert isinstance(implementation, StepOperation), name
        assert implementation.spec is spec, f"{name} runs with another entry than recipes are checked against"


def test_an_operation_without_a_catalogue_entry_or_under_a_taken_name_is_refused() -> None:
    registry = OperationRegistry()

    async def run(ctx: Any, args: dict[str, Any]) -> Outputs:
        return Outputs()

    with pytest.raises(ValueError, match="no catalogue entry"):
        registry.operation("flow.nothing")(run)
    registry.operation("flow.pass")(run)
    assert registry.builtins() == ["flow.pass"]
    with pytest.raises(ValueError, match="already registered"):
        registry.operation("flow.pass")(run)
    stray = catalogue.OperationSpec("flow.pass", "a look-alike entry")
    with pytest.raises(ValueError, match="already registered"):
        registry.add(Operation(stray, run))
    with pytest.raises(ValueError, match="not the catalogue's"):
        OperationRegistry().add(Operation(stray, run))


def make_plugin(root: Path) -> None:
    package = root / "corral_ops_demo"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        textwrap.dedent(
            '''
            from runner.definitions.operations import OperationSpec, Param
            from runner.service.steps import RUN, Outputs


            class Shout:
                """A plugin's step operation: its catalogue entry, run and resume."""

                spec = OperationSpec(
                    "demo.shout",
                    "Give the text back in capitals.",
                    (Param("text", "string", True),),
                    ("shouted",),
                    safe_to_retry=True,
                )

                async def run(self, ctx, args):
                    return Outputs({"shouted": str(args["text"]).upper(), "plan": ctx.plan_id})

                def resume(self, ctx, args):
                    return RUN


            SHOUT = Shout()


            class Shadow(Shout):
                """A plugin trying to replace the built-in flow.pass."""

                spec = OperationSpec("flow.pass", "not the built-in")


            SHADOW = Shadow()
            '''
        )
    )
    dist = root / "corral_ops_demo-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: corral-ops-demo\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[corral.operations]\ndemo.shout = corral_ops_demo:SHOUT\nflow.pass = corral_ops_demo:SHADOW\n"
    )


RECIPE = """\
recipe: shouting
version: 1
description: Uses a plugin's step operation.
inputs: {type: object, required: [text], properties: {text: {type: string}}}
steps:
  - {id: shout, do: demo.shout, with: {text: "${inputs.text}"}}
  - {id: after, do: flow.pass, with: {values: {got: "${steps.shout.shouted}"}}}
"""

SCRIPT = """
import json, sys
from pathlib import Path

import anyio

from runner.definitions.library import Library
from runner.definitions.recipes import RecipeLibrary
from runner.errors import CorralError
from runner.plans.keeper import MemoryKeeper
from runner.plans.ops import OPERATIONS
from runner.service import Service
from runner.service.inputs.plans import PlanRunInput, PlanSubmitInput
from runner.service.plans import Plans
from runner.sql.store_sqlite import SQLiteStore

root = Path(sys.argv[1])
recipes = RecipeLibrary([root / "recipes"])
try:
    recipes.get("shouting")
except CorralError as exc:
    print(json.dumps({"refused": exc.code, "diagnostics": [d["code"] for d in exc.details.get("diagnostics", [])]}))
    sys.exit(0)
service = Service(SQLiteStore(root / "s.db"), Library(cache_dir=root / "cache"), actor="test")
plans = Plans(service, recipes, MemoryKeeper(), OPERATIONS)
plans.submit(PlanSubmitInput({"plan": "p1", "recipe": "shouting", "controller": "ctl", "inputs": {"text": "hi"}}))
final = anyio.run(plans.run, PlanRunInput("p1"))
print(json.dumps({
    "state": final.state,
    "outputs": {k: v.get("outputs") for k, v in final.data["steps"].items()},
    "flow_pass": type(OPERATIONS.get("flow.pass")).__module__,
    "names": [n for n in OPERATIONS.names() if n.startswith("demo.")],
}))
"""


def _run(tmp_path: Path, with_plugin: bool) -> tuple[dict[str, Any], str]:
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "shouting.yaml").write_text(RECIPE)
    env = {**os.environ, "CORRAL_HOME": str(tmp_path / "home")}
    if with_plugin:
        make_plugin(tmp_path / "site")
        env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "site"), env.get("PYTHONPATH", "")])
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)], env=env, capture_output=True, text=True, check=True, timeout=60
    )
    return json.loads(run.stdout), run.stderr


def test_a_plugins_operation_is_found_through_its_entry_point_and_runs_in_a_plan(tmp_path: Path) -> None:
    result, stderr = _run(tmp_path, with_plugin=True)
    assert result == {
        "state": "succeeded",
        "outputs": {"shout": {"shouted": "HI", "plan": "p1"}, "after": {"got": "HI"}},
        "flow_pass": "runner.service.steps",
        "names": ["demo.shout"],
    }
    assert "operation 'flow.pass' from corral_ops_demo:SHADOW ignored: a built-in has that name" in stderr


def test_without_the_plugin_a_recipe_using_its_operation_is_refused(tmp_path: Path) -> None:
    result, _ = _run(tmp_path, with_plugin=False)
    assert result == {"refused": "recipe_unknown_operation", "diagnostics": ["recipe_unknown_operation"]}
