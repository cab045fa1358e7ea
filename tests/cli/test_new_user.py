"""What a new user trips on, each fixed: a typo'd memory project is noticed, one broken recipe never
hides the others, an error says its code once, a listing says what it hides, help lists every
subcommand, and every command that answers takes ``--json``.

Real components: the ``corral`` executable and its click command tree.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click

from runner.cli.app import cli

SERVERS = {"serve", "mcp"}
"""The commands that run until stopped (and so print no JSON document)."""


def corral(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [str(Path(sys.executable).parent / "corral"), *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, cwd=cwd, timeout=120, check=False)


def test_a_typo_in_a_memory_project_is_noticed(tmp_path: Path, cli_env: dict[str, str]) -> None:
    assert corral(cli_env, tmp_path, "memory", "bootstrap", "--project", "payments").returncode == 0
    typo = corral(cli_env, tmp_path, "memory", "bootstrap", "--project", "paymnets")
    assert typo.returncode == 0, typo.stderr
    assert "created project paymnets" in typo.stdout and "did you mean payments?" in typo.stdout
    again = json.loads(corral(cli_env, tmp_path, "memory", "bootstrap", "--project", "paymentz", "--json").stdout)
    assert again["project_created"] is True and again["similar_projects"][0] == "payments"
    known = json.loads(corral(cli_env, tmp_path, "memory", "bootstrap", "--project", "payments", "--json").stdout)
    assert known["project_created"] is False and known["similar_projects"] == []


def test_one_broken_recipe_is_reported_and_the_others_listed(tmp_path: Path, cli_env: dict[str, str]) -> None:
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "bad.yaml").write_text("recipe: bad\nversion: 1\nsteps: 3\n")
    listed = corral(cli_env, tmp_path, "recipe", "list")
    assert listed.returncode == 0, listed.stderr
    assert "review" in listed.stdout and "writer-lane" in listed.stdout
    assert "warning: recipe bad (recipes/bad.yaml) does not validate" in listed.stderr
    doc = json.loads(corral(cli_env, tmp_path, "recipe", "list", "--json").stdout)
    assert {r["recipe"] for r in doc["recipes"]} >= {"review", "validate"}
    (bad,) = doc["invalid"]
    assert bad["recipe"] == "bad" and bad["diagnostics"][0]["line"] == 1


def test_an_error_line_says_its_code_once(tmp_path: Path, cli_env: dict[str, str]) -> None:
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "bad.yaml").write_text("recipe: bad\nversion: 1\nsteps: 3\n")
    shown = corral(cli_env, tmp_path, "recipe", "show", "bad")
    assert shown.returncode == 3
    first = shown.stderr.splitlines()[0]
    assert first.startswith("error [spec_invalid]: recipes/bad.yaml:1:1: ") and first.count("spec_invalid") == 1, first


def test_plans_list_says_that_ended_plans_are_hidden(tmp_path: Path, cli_env: dict[str, str]) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text("plan: p1\nrecipe: review\ncontroller: c\ninputs:\n  cwd: .\n  prompt: hi\n  kind: script\n"
                    "  authority_ref: t\n  authority_sha256: '" + "0" * 64 + "'\n")  # fmt: skip
    empty = corral(cli_env, tmp_path, "plans", "list")
    assert "--all" not in empty.stderr, "nothing ended yet: nothing to hint"
    assert corral(cli_env, tmp_path, "run", str(plan)).returncode == 0
    listed = corral(cli_env, tmp_path, "plans", "list")
    assert "p1" not in listed.stdout and "corral plans list --all" in listed.stderr
    assert "p1" in corral(cli_env, tmp_path, "plans", "list", "--all").stdout


def _leaves(group: click.Group, path: tuple[str, ...] = ()) -> list[tuple[str, click.Command]]:
    ctx = click.Context(group)
    found: list[tuple[str, click.Command]] = []
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None
        if isinstance(command, click.Group):
            found += _leaves(command, (*path, name))
        else:
            found.append((" ".join((*path, name)), command))
    return found


def test_every_command_that_answers_takes_json() -> None:
    missing = [
        name
        for name, command in _leaves(cli)
        if name not in SERVERS and "--json" not in {o for p in command.params for o in p.opts}
    ]
    assert missing == [], f"commands without --json: {missing}"


def test_a_group_help_names_every_subcommand() -> None:
    ctx = click.Context(cli)
    plans = cli.get_command(ctx, "plans")
    assert isinstance(plans, click.Group) and plans.help is not None
    first = plans.help.splitlines()[0]
    for name in plans.list_commands(ctx):
        assert name in first, f"plans --help does not name {name}: {first}"
