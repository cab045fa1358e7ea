"""``corral validate`` and ``corral recipe list`` take parses and passing schema verdicts from the content
cache (``runner.documents.checked``): the same verdicts, without PyYAML or jsonschema once warm; a
failing file is checked afresh every time; a damaged entry is ignored, rebuilt and counted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Runs the CLI in a fresh process and says, on stderr, which heavy modules it imported.
SCRIPT = (
    "import sys\n"
    "from runner.cli.app import main\n"
    "status = main(sys.argv[1:])\n"
    "print('HEAVY', sorted(m for m in ('yaml', 'jsonschema') if m in sys.modules), file=sys.stderr)\n"
    "sys.exit(status)\n"
)


def corral(home: Path, cwd: Path, *args: str) -> tuple[int, str, list[str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
    env |= {"CORRAL_HOME": str(home), "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, *args], env=env, cwd=cwd, capture_output=True, text=True, check=False
    )
    heavy = [line for line in done.stderr.splitlines() if line.startswith("HEAVY ")]
    assert heavy, done.stderr
    return done.returncode, done.stdout, json.loads(heavy[-1].removeprefix("HEAVY ").replace("'", '"'))


def test_a_warm_validate_gives_the_same_verdicts_without_yaml_or_jsonschema(tmp_path: Path) -> None:
    home = tmp_path / "home"
    first = corral(home, tmp_path, "validate", "--json")
    assert first[0] == 0 and first[2] == ["jsonschema", "yaml"], first
    second = corral(home, tmp_path, "validate", "--json")
    assert second[0] == 0, second
    assert json.loads(second[1]) == json.loads(first[1])
    assert second[2] == []
    listed = corral(home, tmp_path, "recipe", "list", "--json")
    assert listed[0] == 0 and listed[2] == [] and json.loads(listed[1])["recipes"], listed


def test_a_failing_file_is_checked_afresh_each_time(tmp_path: Path) -> None:
    home = tmp_path / "home"
    bad = tmp_path / "bad.yaml"
    text = (ROOT / "machines" / "reviewer.yaml").read_text(encoding="utf-8")
    bad.write_text(text.replace("version: ", "version_typo: ", 1), encoding="utf-8")
    runs = [corral(home, tmp_path, "validate", str(bad), "--json") for _ in range(2)]
    for status, out, heavy in runs:
        assert status == 3, out
        assert "jsonschema" in heavy  # no verdict was kept for a file that failed
    codes = [[d["code"] for f in json.loads(out)["files"] for d in f["diagnostics"]] for _, out, _ in runs]
    assert codes[0] == codes[1] and "spec_invalid" in codes[0]


def test_a_damaged_entry_is_rebuilt_and_counted(tmp_path: Path) -> None:
    home = tmp_path / "home"
    good = ROOT / "machines" / "reviewer.yaml"
    first = corral(home, tmp_path, "validate", str(good), "--json")
    entries = sorted((home / "cache" / "checked").glob("*.json"))
    assert len(entries) == 2, entries  # the parse and the schema verdict
    for entry in entries:
        head, _, body = entry.read_bytes().partition(b"\n")
        entry.write_bytes(head + b"\n" + body.replace(b"}", b', "x": 1}', 1))  # the digest no longer matches
    again = corral(home, tmp_path, "validate", str(good), "--json")
    assert again[0] == 0 and json.loads(again[1]) == json.loads(first[1])
    assert again[2] == ["jsonschema", "yaml"]  # checked afresh, not trusted
    ledger = (home / "cache" / "rebuilds.log").read_text(encoding="utf-8").splitlines()
    assert len(ledger) == 2 and all(json.loads(line)["cache"] == "checked" for line in ledger)
    assert corral(home, tmp_path, "validate", str(good), "--json")[2] == []  # rewritten


RECIPE = """\
recipe: twostep
version: 1
description: Two pure steps.
inputs: {type: object}
steps:
  - {id: one, do: flow.pass}
  - {id: two, do: flow.pass}
"""


def test_the_plans_component_keeps_its_recipes_parses_and_verdicts_too(tmp_path: Path) -> None:
    """A command that reads a plan loads its recipe through the same cache: after the first, showing
    the plan imports neither PyYAML nor jsonschema (a recipe of 10,000 steps costs seconds to parse and
    check), and answers the same."""
    home = tmp_path / "home"
    recipes = tmp_path / "recipes"  # ./recipes: the local recipes of the directory corral runs in
    recipes.mkdir()
    (recipes / "twostep.yaml").write_text(RECIPE, encoding="utf-8")
    plan = tmp_path / "plan.yaml"
    plan.write_text("plan: p-1\nrecipe: twostep\ncontroller: ctl\ninputs: {}\n", encoding="utf-8")
    ran = corral(home, tmp_path, "run", str(plan), "--json")
    assert ran[0] == 0, ran
    shows = [corral(home, tmp_path, "plans", "show", "p-1", "--json") for _ in range(2)]
    for status, out, _ in shows:
        assert status == 0 and [s["state"] for s in json.loads(out)["steps"]] == ["succeeded", "succeeded"], out
    assert json.loads(shows[0][1])["steps"] == json.loads(shows[1][1])["steps"]
    assert shows[1][2] == [], "the recipe's parse and schema verdict came from the cache"
