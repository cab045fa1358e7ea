"""Recipes: extension blocks resolve as documented, and every refusal names its code, file and line.

Recipes are written into a temporary directory and loaded with ``RecipeLibrary([dir])`` (the
built-ins stay on the search path in front of it); the CLI is the real ``corral`` executable, with
``$CORRAL_RECIPES`` or ``./recipes`` pointing at the same files.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from runner.data import data_dir
from runner.definitions.recipes import RecipeLibrary
from runner.errors import Diagnostic, SpecError

BASE = """\
recipe: base
version: 1
description: three passes
inputs:
  type: object
  required: [x]
  properties:
    x: {type: string}
    y: {type: integer, default: 1}
steps:
  - id: a
    do: flow.pass
    with: {values: {x: "${inputs.x}"}}
  - id: b
    do: flow.pass
    with: {values: {from_a: "${steps.a.x}"}}
  - id: c
    do: flow.pass
    finally: true
"""


def write(directory: Path, name: str, text: str) -> Path:
    path = directory / f"{name}.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def line_of(path: Path, needle: str) -> int:
    """The 1-based line of the first line of ``path`` containing ``needle``."""
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if needle in line:
            return number
    raise AssertionError(f"{needle!r} is not in {path}")


def ids(library: RecipeLibrary, name: str) -> list[str]:
    return [s.id for s in library.get(name).steps]


def refusal(library: RecipeLibrary, name: str) -> list[Diagnostic]:
    with pytest.raises(SpecError) as caught:
        library.get(name)
    return caught.value.diagnostics


def same_file(shown: str, path: Path) -> bool:
    return Path(shown).resolve() == path.resolve()


@pytest.fixture
def recipes(tmp_path: Path) -> Path:
    directory = tmp_path / "lib"
    directory.mkdir()
    write(directory, "base", BASE)
    return directory


# --- extension kinds ---------------------------------------------------------------------------------


def test_a_base_recipe_resolves_to_its_own_steps(recipes: Path) -> None:
    library = RecipeLibrary([recipes])
    recipe = library.get("base")
    assert [s.id for s in recipe.steps] == ["a", "b", "c"]
    assert recipe.extends == ()
    base = recipes / "base.yaml"
    assert [(Path(s.origin).name, s.line) for s in recipe.steps] == [
        ("base.yaml", line_of(base, "id: a")),
        ("base.yaml", line_of(base, "id: b")),
        ("base.yaml", line_of(base, "id: c")),
    ]
    assert recipe.step("c").final and not recipe.step("a").final


def test_insert_before_puts_the_steps_in_front_of_the_anchor_in_order(recipes: Path) -> None:
    ext = write(
        recipes,
        "ext",
        """\
        recipe: ext
        version: 1
        description: before b
        extends: base
        insert_before:
          b:
            - {id: x1, do: flow.pass}
            - {id: x2, do: flow.pass, with: {values: {seen: "${steps.x1.values}"}}}
          a:
            - {id: first, do: flow.pass}
        """,
    )
    library = RecipeLibrary([recipes])
    assert ids(library, "ext") == ["first", "a", "x1", "x2", "b", "c"]
    recipe = library.get("ext")
    assert recipe.extends == ("base",)
    assert same_file(recipe.step("x2").origin, ext) and recipe.step("x2").line == line_of(ext, "id: x2")
    assert same_file(recipe.step("b").origin, recipes / "base.yaml"), "base steps keep their own file"


def test_insert_after_puts_the_steps_behind_the_anchor_in_order(recipes: Path) -> None:
    write(
        recipes,
        "ext",
        """\
        recipe: ext
        version: 1
        description: after b and c
        extends: base
        insert_after:
          b:
            - {id: y1, do: flow.pass}
            - {id: y2, do: flow.pass}
          c:
            - {id: last, do: flow.pass, finally: true}
        """,
    )
    assert ids(RecipeLibrary([recipes]), "ext") == ["a", "b", "y1", "y2", "c", "last"]


def test_replace_swaps_the_step_in_place(recipes: Path) -> None:
    ext = write(
        recipes,
        "ext",
        """\
        recipe: ext
        version: 1
        description: b replaced
        extends: base
        replace:
          b: {id: b, do: flow.fail, with: {code: replaced}, catch: [{errors: ["*"], next: c}]}
        """,
    )
    recipe = RecipeLibrary([recipes]).get("ext")
    assert [s.id for s in recipe.steps] == ["a", "b", "c"]
    b = recipe.step("b")
    assert (b.do, b.args, b.catch[0].next) == ("flow.fail", {"code": "replaced"}, "c")
    assert same_file(b.origin, ext) and b.line == line_of(ext, "b: {id: b")


def test_replace_may_rename_the_step(recipes: Path) -> None:
    write(
        recipes,
        "ext",
        """\
        recipe: ext
        version: 1
        description: c renamed
        extends: base
        replace:
          c: {id: cleanup, do: flow.pass, finally: true}
        """,
    )
    assert ids(RecipeLibrary([recipes]), "ext") == ["a", "b", "cleanup"]


def test_remove_leaves_the_steps_out(recipes: Path) -> None:
    write(
        recipes,
        "ext",
        """\
        recipe: ext
        version: 1
        description: without b and c
        extends: base
        remove: [c, b]
        """,
    )
    assert ids(RecipeLibrary([recipes]), "ext") == ["a"]


def test_blocks_combine_remove_then_replace_then_inserts(recipes: Path) -> None:
    write(
        recipes,
        "ext",
        """\
        recipe: ext
        version: 1
        description: every block at once
        extends: base
        remove: [a]
        replace:
          b: {id: b2, do: flow.pass}
        insert_before:
          b2: [{id: pre, do: flow.pass}]
        insert_after:
          b2: [{id: post, do: flow.pass}]
        """,
    )
    assert ids(RecipeLibrary([recipes]), "ext") == ["pre", "b2", "post", "c"]


def test_inputs_are_merged_properties_added_or_replaced_and_required_joined(recipes: Path) -> None:
    write(
        recipes,
        "ext",
        """\
        recipe: ext
        version: 1
        description: more inputs
        extends: base
        inputs:
          required: [z]
          properties:
            y: {type: integer, default: 7}
            z: {type: string}
        insert_after:
          a: [{id: uses-z, do: flow.pass, with: {values: {z: "${inputs.z}", y: "${inputs.y}"}}}]
        """,
    )
    library = RecipeLibrary([recipes])
    inputs = library.get("ext").inputs
    assert inputs["type"] == "object"
    assert set(inputs["properties"]) == {"x", "y", "z"}
    assert inputs["properties"]["y"] == {"type": "integer", "default": 7}, "the extension's property wins"
    assert inputs["properties"]["x"] == {"type": "string"}
    assert inputs["required"] == ["x", "z"]
    assert library.get("base").inputs["properties"]["y"]["default"] == 1, "the base is not changed"


def test_an_extension_without_inputs_keeps_the_base_inputs(recipes: Path) -> None:
    write(recipes, "ext", "recipe: ext\nversion: 1\ndescription: same inputs\nextends: base\nremove: [c]\n")
    library = RecipeLibrary([recipes])
    assert library.get("ext").inputs == library.get("base").inputs


def test_a_chain_of_extends_applies_every_level(recipes: Path) -> None:
    write(
        recipes,
        "mid",
        """\
        recipe: mid
        version: 2
        description: level two
        extends: base
        inputs:
          properties:
            m: {type: string, default: mid}
        insert_after:
          a: [{id: m1, do: flow.pass, with: {values: {m: "${inputs.m}"}}}]
        """,
    )
    write(
        recipes,
        "top",
        """\
        recipe: top
        version: 3
        description: level three
        extends: mid
        inputs:
          properties:
            t: {type: string, default: top}
        replace:
          m1: {id: m1, do: flow.pass, with: {values: {m: "${inputs.m}", t: "${inputs.t}"}}}
        insert_before:
          a: [{id: t0, do: flow.pass}]
        remove: [b]
        """,
    )
    library = RecipeLibrary([recipes])
    top = library.get("top")
    assert [s.id for s in top.steps] == ["t0", "a", "m1", "c"]
    assert top.extends == ("mid", "base")
    assert top.version == 3
    assert set(top.inputs["properties"]) == {"x", "y", "m", "t"}
    assert top.step("m1").args == {"values": {"m": "${inputs.m}", "t": "${inputs.t}"}}
    assert ids(library, "mid") == ["a", "m1", "b", "c"], "a middle level resolves on its own too"
    assert len({library.get(n).sha256 for n in ("base", "mid", "top")}) == 3


def test_a_local_recipe_extends_a_builtin_found_on_the_search_path(recipes: Path) -> None:
    write(
        recipes,
        "careful-review",
        """\
        recipe: careful-review
        version: 1
        description: review with a follow-up question
        extends: review
        inputs:
          properties:
            follow_up: {type: string, default: "Anything else?"}
        insert_after:
          collect:
            - id: follow-up
              do: receipt.ask
              with: {target: "${inputs.reviewer}", text: "${inputs.follow_up}"}
        """,
    )
    library = RecipeLibrary([recipes])
    builtin = library.get("review")
    recipe = library.get("careful-review")
    ids = ["acquire", "start", "relay", "collect", "follow-up", "close", "release-controller"]
    assert [s.id for s in recipe.steps] == ids
    assert recipe.extends == ("review",)
    assert library.is_builtin("review") and not library.is_builtin("careful-review")
    assert same_file(recipe.step("relay").origin, data_dir("recipes") / "review.yaml")
    assert recipe.step("relay") == builtin.step("relay")


def test_every_builtin_recipe_resolves_and_lints_clean() -> None:
    library = RecipeLibrary([])
    assert library.names() == ["batch-review", "review", "validate", "writer-lane"]
    for name in library.names():
        assert library.get(name).steps


# --- the CLI ------------------------------------------------------------------------------------------


def corral(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(Path(sys.executable).parent / "corral"), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=60,
        check=False,
    )


def test_recipe_show_resolved_prints_the_flat_list(recipes: Path, tmp_path: Path, cli_env: dict[str, str]) -> None:
    write(
        recipes,
        "ext",
        """\
        recipe: ext
        version: 1
        description: flat
        extends: base
        insert_after:
          a: [{id: inserted, do: flow.pass}]
        remove: [c]
        """,
    )
    env = {**cli_env, "CORRAL_RECIPES": str(recipes)}
    shown = corral(env, tmp_path, "recipe", "show", "ext", "--resolved")
    assert shown.returncode == 0, shown.stderr
    doc = yaml.safe_load(shown.stdout)
    assert [s["id"] for s in doc["steps"]] == ["a", "inserted", "b"]
    assert "extends" not in doc and "insert_after" not in doc and "remove" not in doc
    as_json = corral(env, tmp_path, "recipe", "show", "ext", "--resolved", "--json")
    assert json.loads(as_json.stdout) == RecipeLibrary([recipes]).get("ext").to_json() == doc

    written = corral(env, tmp_path, "recipe", "show", "ext")
    assert written.returncode == 0 and "insert_after:" in written.stdout, "without --resolved: the file as written"

    listed = {r["recipe"]: r for r in json.loads(corral(env, tmp_path, "recipe", "list", "--json").stdout)["recipes"]}
    assert listed["ext"]["extends"] == ["base"] and listed["ext"]["steps"] == 3 and not listed["ext"]["builtin"]
    assert listed["review"]["builtin"]

    (tmp_path / "recipes").mkdir()  # ./recipes is on the search path too
    write(tmp_path / "recipes", "local", "recipe: local\nversion: 1\ndescription: here\nextends: ext\nremove: [b]\n")
    local = corral(env, tmp_path, "recipe", "show", "local", "--resolved", "--json")
    assert [s["id"] for s in json.loads(local.stdout)["steps"]] == ["a", "inserted"]


# --- refusals ------------------------------------------------------------------------------------------

REFUSALS: dict[str, tuple[dict[str, str], str, str, str, str, str]] = {
    # case: ({file: text}, recipe to load, code, file with the finding, text on its line, message fragment)
    "unknown base": (
        {"ext": "recipe: ext\nversion: 1\ndescription: d\nextends: nowhere\nremove: [a]\n"},
        "ext",
        "recipe_unknown",
        "ext",
        "extends: nowhere",
        "unknown recipe 'nowhere'",
    ),
    "extends cycle": (
        {
            "one": "recipe: one\nversion: 1\ndescription: d\nextends: two\nremove: [a]\n",
            "two": "recipe: two\nversion: 1\ndescription: d\nextends: one\nremove: [a]\n",
        },
        "one",
        "recipe_cycle",
        "one",
        "extends: two",
        "one -> two -> one",
    ),
    "extends itself": (
        {"ext": "recipe: ext\nversion: 1\ndescription: d\nextends: ext\nremove: [a]\n"},
        "ext",
        "recipe_cycle",
        "ext",
        "extends: ext",
        "ext -> ext",
    ),
    "dangling insert anchor": (
        {
            "ext": "recipe: ext\nversion: 1\ndescription: d\n"
            "extends: base\ninsert_before: {nope: [{id: n, do: flow.pass}]}\n"
        },
        "ext",
        "recipe_dangling_reference",
        "ext",
        "nope:",
        "no step 'nope'",
    ),
    "dangling insert_after anchor": (
        {
            "ext": "recipe: ext\nversion: 1\ndescription: d\n"
            "extends: base\ninsert_after: {nope: [{id: n, do: flow.pass}]}\n"
        },
        "ext",
        "recipe_dangling_reference",
        "ext",
        "nope:",
        "no step 'nope'",
    ),
    "dangling replace anchor": (
        {"ext": "recipe: ext\nversion: 1\ndescription: d\nextends: base\nreplace: {nope: {id: n, do: flow.pass}}\n"},
        "ext",
        "recipe_dangling_reference",
        "ext",
        "nope:",
        "no step 'nope'",
    ),
    "dangling remove": (
        {"ext": "recipe: ext\nversion: 1\ndescription: d\nextends: base\nremove: [nope]\n"},
        "ext",
        "recipe_dangling_reference",
        "ext",
        "remove: [nope]",
        "no step 'nope'",
    ),
    "reference to a later step": (
        {
            "r": "recipe: r\nversion: 1\ndescription: d\nsteps:\n"
            "  - {id: early, do: flow.pass, with: {values: {v: '${steps.late.values}'}}}\n"
            "  - {id: late, do: flow.pass}\n"
        },
        "r",
        "recipe_dangling_reference",
        "r",
        "id: early",
        "refers to a later step",
    ),
    "reference to an unknown step": (
        {
            "r": "recipe: r\nversion: 1\ndescription: d\nsteps:\n"
            "  - {id: one, do: flow.pass}\n"
            "  - {id: two, do: flow.pass, with: {values: {v: '${steps.ghost.values}'}}}\n"
        },
        "r",
        "recipe_dangling_reference",
        "r",
        "id: two",
        "refers to no step",
    ),
    "reference to a step the extension removed": (
        {"ext": "recipe: ext\nversion: 1\ndescription: d\nextends: base\nremove: [a]\n"},
        "ext",
        "recipe_dangling_reference",
        "base",
        "id: b",
        "${steps.a.x} refers to no step",
    ),
    "reference in when to a later step": (
        {
            "r": "recipe: r\nversion: 1\ndescription: d\nsteps:\n"
            "  - {id: one, do: flow.pass, when: {left: '${steps.two.v}', op: '==', right: 1}}\n"
            "  - {id: two, do: flow.pass}\n"
        },
        "r",
        "recipe_dangling_reference",
        "r",
        "id: one",
        "refers to a later step",
    ),
    "undeclared input": (
        {
            "r": "recipe: r\nversion: 1\ndescription: d\ninputs: {properties: {known: {type: string}}}\nsteps:\n"
            "  - {id: one, do: flow.pass, with: {values: {v: '${inputs.unknown}'}}}\n"
        },
        "r",
        "recipe_dangling_reference",
        "r",
        "id: one",
        "undeclared input",
    ),
    "an inputs schema that is not JSON Schema": (
        {
            "r": "recipe: r\nversion: 1\ndescription: d\ninputs:\n  properties:\n    name: {type: strin}\nsteps:\n"
            "  - {id: one, do: flow.pass}\n"
        },
        "r",
        "recipe_inputs_invalid",
        "r",
        "type: strin",
        "'strin' is not valid",
    ),
    "not a reference": (
        {
            "r": "recipe: r\nversion: 1\ndescription: d\nsteps:\n"
            "  - {id: one, do: flow.pass, with: {values: {v: '${env.HOME}'}}}\n"
        },
        "r",
        "recipe_bad_reference",
        "r",
        "id: one",
        "${env.HOME}",
    ),
    "unknown operation": (
        {"r": "recipe: r\nversion: 1\ndescription: d\nsteps:\n  - id: one\n    do: flow.jump\n"},
        "r",
        "recipe_unknown_operation",
        "r",
        "id: one",
        "no operation 'flow.jump'",
    ),
    "argument the operation does not take": (
        {
            "r": "recipe: r\nversion: 1\ndescription: d\nsteps:\n"
            "  - id: one\n    do: receipt.relay\n    with: {target: t, text: x, urgent: true}\n"
        },
        "r",
        "recipe_bad_arguments",
        "r",
        "id: one",
        "takes no argument 'urgent'",
    ),
    "missing required argument": (
        {
            "r": "recipe: r\nversion: 1\ndescription: d\n"
            "steps:\n  - id: one\n    do: receipt.relay\n    with: {target: t}\n"
        },
        "r",
        "recipe_bad_arguments",
        "r",
        "id: one",
        "needs the argument 'text'",
    ),
    "retry on an unsafe operation": (
        {
            "r": "recipe: r\nversion: 1\ndescription: d\nsteps:\n  - {id: ok, do: flow.pass}\n"
            "  - id: send\n    do: receipt.relay\n    with: {target: t, text: x}\n    retry: {max_attempts: 2}\n"
        },
        "r",
        "recipe_retry_unsafe",
        "r",
        "id: send",
        "receipt.relay is not safe to retry",
    ),
    "retry on an unsafe operation added by an extension": (
        {
            "ext": "recipe: ext\nversion: 1\ndescription: d\nextends: review\nreplace:\n"
            "  start:\n    id: start\n    do: reviewer.start\n"
            "    with: {name: '${inputs.reviewer}', kind: '${inputs.kind}', cwd: '${inputs.cwd}'}\n"
            "    retry: {max_attempts: 3}\n"
        },
        "ext",
        "recipe_retry_unsafe",
        "ext",
        "id: start",
        "reviewer.start is not safe to retry",
    ),
    "recipe.call cycle": (
        {
            "one": "recipe: one\nversion: 1\ndescription: d\n"
            "steps:\n  - {id: call, do: recipe.call, with: {recipe: two}}\n",
            "two": "recipe: two\nversion: 1\ndescription: d\nsteps:\n"
            "  - {id: p, do: flow.pass}\n  - {id: back, do: recipe.call, with: {recipe: one}}\n",
        },
        "one",
        "recipe_cycle",
        "one",
        "id: call",
        "one -> two -> one",
    ),
    "recipe.call of itself": (
        {
            "one": "recipe: one\nversion: 1\ndescription: d\n"
            "steps:\n  - {id: me, do: recipe.call, with: {recipe: one}}\n"
        },
        "one",
        "recipe_cycle",
        "one",
        "id: me",
        "one -> one",
    ),
    "recipe.call of an unknown recipe": (
        {
            "one": "recipe: one\nversion: 1\ndescription: d\n"
            "steps:\n  - {id: c, do: recipe.call, with: {recipe: ghost}}\n"
        },
        "one",
        "recipe_unknown",
        "one",
        "id: c",
        "'ghost'",
    ),
    "duplicate step ids": (
        {
            "r": "recipe: r\nversion: 1\ndescription: d\n"
            "steps:\n  - {id: twice, do: flow.pass}\n  - id: twice\n    do: flow.pass\n"
        },
        "r",
        "recipe_duplicate_step",
        "r",
        "  - id: twice",
        "used by an earlier step",
    ),
    "duplicate step id brought in by an extension": (
        {
            "ext": "recipe: ext\nversion: 1\ndescription: d\n"
            "extends: base\ninsert_after:\n  c:\n    - {id: a, do: flow.pass}\n"
        },
        "ext",
        "recipe_duplicate_step",
        "ext",
        "{id: a,",
        "used by an earlier step",
    ),
    "catch to an earlier step": (
        {
            "r": "recipe: r\nversion: 1\ndescription: d\nsteps:\n  - {id: one, do: flow.pass}\n"
            "  - {id: two, do: flow.fail, with: {code: x}, catch: [{errors: [x], next: one}]}\n"
        },
        "r",
        "recipe_dangling_reference",
        "r",
        "id: two",
        "not a later step",
    ),
    "file named unlike its recipe": (
        {"r": "recipe: other\nversion: 1\ndescription: d\nsteps:\n  - {id: one, do: flow.pass}\n"},
        "r",
        "recipe_name_mismatch",
        "r",
        "recipe: other",
        "r.yaml",
    ),
}


@pytest.mark.parametrize("case", list(REFUSALS), ids=list(REFUSALS))
def test_refusals_name_the_code_file_and_line(recipes: Path, case: str) -> None:
    files, name, code, where, needle, fragment = REFUSALS[case]
    for stem, text in files.items():
        write(recipes, stem, text)
    diagnostics = refusal(RecipeLibrary([recipes]), name)
    found = [d for d in diagnostics if d.code == code]
    assert found, [d.render() for d in diagnostics]
    diagnostic = found[0]
    path = data_dir("recipes") / f"{where}.yaml" if where == "review" else recipes / f"{where}.yaml"
    assert same_file(diagnostic.path, path), diagnostic.render()
    assert diagnostic.line == line_of(path, needle), diagnostic.render()
    assert fragment in diagnostic.message, diagnostic.render()
    assert diagnostic.severity == "error"


def test_every_finding_is_reported_not_only_the_first(recipes: Path) -> None:
    bad = write(
        recipes,
        "bad",
        """\
        recipe: bad
        version: 1
        description: three mistakes
        steps:
          - {id: one, do: flow.pass, with: {values: {v: "${inputs.nope}"}}}
          - {id: two, do: receipt.relay, with: {target: t, text: x}, retry: {max_attempts: 2}}
          - {id: two, do: flow.pass}
        """,
    )
    diagnostics = refusal(RecipeLibrary([recipes]), "bad")
    assert [(d.code, d.line) for d in diagnostics] == [
        ("recipe_dangling_reference", line_of(bad, "id: one")),
        ("recipe_retry_unsafe", line_of(bad, "id: two, do: receipt")),
        ("recipe_duplicate_step", line_of(bad, "id: two, do: flow")),
    ]


def test_a_schema_violation_is_refused_with_its_line(recipes: Path) -> None:
    bad = write(
        recipes, "bad", "recipe: bad\nversion: 1\ndescription: d\nsteps:\n  - {id: one, do: flow.pass, oops: 1}\n"
    )
    (diagnostic, *_) = refusal(RecipeLibrary([recipes]), "bad")
    assert same_file(diagnostic.path, bad) and diagnostic.line == line_of(bad, "oops")


def test_validate_reports_recipe_findings_with_file_and_line(
    recipes: Path, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    bad = write(
        recipes,
        "bad",
        "recipe: bad\nversion: 1\ndescription: d\nsteps:\n  - {id: one, do: receipt.relay, with: {target: t}}\n",
    )
    env = {**cli_env, "CORRAL_RECIPES": str(recipes)}
    run = corral(env, tmp_path, "validate", str(bad), str(recipes / "base.yaml"), "--json")
    assert run.returncode == 3, run.stdout + run.stderr
    files = {Path(f["path"]).name: f for f in json.loads(run.stdout)["files"]}
    assert files["base.yaml"]["ok"] and files["base.yaml"]["kind"] == "recipe"
    (diagnostic,) = files["bad.yaml"]["diagnostics"]
    assert (diagnostic["code"], diagnostic["line"]) == ("recipe_bad_arguments", line_of(bad, "id: one"))
    text = corral(env, tmp_path, "validate", str(bad))
    assert f"bad.yaml:{line_of(bad, 'id: one')}: error recipe_bad_arguments" in text.stdout


def test_a_local_recipe_may_not_shadow_a_builtin(tmp_path: Path, cli_env: dict[str, str]) -> None:
    local = tmp_path / "recipes"
    local.mkdir()
    shadow = write(
        local, "review", "recipe: review\nversion: 9\ndescription: mine\nsteps:\n  - {id: one, do: flow.pass}\n"
    )
    run = corral(cli_env, tmp_path, "validate", str(shadow), "--json")
    assert run.returncode == 3, run.stdout + run.stderr
    (report,) = json.loads(run.stdout)["files"]
    (diagnostic,) = report["diagnostics"]
    assert diagnostic["code"] == "spec_shadows_builtin"
    assert diagnostic["line"] == line_of(shadow, "recipe: review")
    everything = corral(cli_env, tmp_path, "validate", "--json")
    assert everything.returncode == 3
    flagged = [f for f in json.loads(everything.stdout)["files"] if not f["ok"]]
    assert [((tmp_path / f["path"]).resolve(), f["diagnostics"][0]["code"]) for f in flagged] == [
        (shadow.resolve(), "spec_shadows_builtin")
    ], "the default validation covers ./recipes too"
    library = RecipeLibrary([local])
    assert library.get("review").version == 1, "the built-in wins on the search path"


def test_plan_files_are_validated_against_their_recipe(tmp_path: Path, cli_env: dict[str, str]) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text("plan: p\nrecipe: review\ncontroller: ctl\ninputs: {cwd: /tmp}\n")
    run = corral(cli_env, tmp_path, "validate", str(plan), "--json")
    assert run.returncode == 3
    (report,) = json.loads(run.stdout)["files"]
    assert report["kind"] == "plan" and report["diagnostics"][0]["code"] == "inputs_invalid"
    examples = corral(cli_env, tmp_path, "validate", str(data_dir("recipes") / "examples"), "--json")
    assert examples.returncode == 0, examples.stdout
    assert {Path(f["path"]).name for f in json.loads(examples.stdout)["files"]} == {
        "batch-review.yaml",
        "review.yaml",
        "validate.yaml",
        "writer-lane.yaml",
    }
