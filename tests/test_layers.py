"""The layering holds: the import contracts pass and no import circle joins two packages of corral.

Imports inside functions count (grimp reads every import statement), so a circle cannot hide in a
deferred import made for cold-start speed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[1]


def package_of(module: str) -> str:
    return ".".join(module.split(".")[:2])


def package_graph() -> dict[str, set[str]]:
    graph = grimp.build_graph("runner")
    edges: dict[str, set[str]] = {}
    for module in graph.modules:
        for imported in graph.find_modules_directly_imported_by(module):
            a, b = package_of(module), package_of(imported)
            if a != b and "runner" not in (a, b):
                edges.setdefault(a, set()).add(b)
    return edges


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one package (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in edges.get(node, ()):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                other = stack.pop()
                component.append(other)
                if other == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in list(edges):
        if node not in index:
            visit(node)
    return found


def test_no_import_circle_joins_two_packages() -> None:
    edges = package_graph()
    assert "runner.cli" in edges and "runner.service" in edges["runner.cli"]  # the graph is really read
    assert circles(edges) == []


def test_the_circle_finder_finds_a_circle() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_import_contracts_pass() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run([str(lint)], cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout[-4000:]
    assert " BROKEN" not in done.stdout
    assert done.stdout.count(" KEPT") >= 4  # every contract of pyproject.toml was checked


PROBE = """
import json, sys
from runner.cli.app import main
status = main(sys.argv[1:])
print(json.dumps({"status": status, "loop": sorted(m for m in ("anyio", "asyncio") if m in sys.modules),
                  "herdr": "runner.agents.herdr" in sys.modules,
                  "other_commands": sorted(m for m in ("runner.cli.agents", "runner.cli.writers", "runner.cli.plans",
                                                       "runner.cli.adopted", "runner.cli.paths") if m in sys.modules)}))
"""


@pytest.mark.slow  # seconds of waiting on processes or deadlines: left out of make test-fast
def test_commands_that_do_not_wait_pay_for_no_event_loop(tmp_path: Path) -> None:
    env = {"CORRAL_HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}

    def probe(*argv: str) -> dict[str, object]:
        done = subprocess.run(
            [sys.executable, "-c", PROBE, *argv], cwd=tmp_path, env=env, capture_output=True, text=True, check=False
        )
        import json

        return dict(json.loads(done.stdout.strip().splitlines()[-1]))

    sha = "0" * 64
    acquire = ["controller", "acquire", "--controller", "c", "--authority-ref", "r", "--authority-sha256", sha]
    for argv in (acquire, ["controller", "renew", "--controller", "c"], ["controller", "list"], ["events"]):
        assert probe(*argv) == {"status": 0, "loop": [], "herdr": False, "other_commands": []}, argv
    # A command that waits does load one: the probe can tell.
    assert probe("agent", "wait", "p1", "--timeout", "0.1")["loop"] != []


def test_every_lazily_loaded_command_is_where_the_table_says() -> None:
    """``COMMAND_MODULES`` names each top-level command's module; a command added to a module but not to
    the table would be missing from ``corral`` (and one in the table but not registered, broken)."""
    import importlib

    import click

    from runner.cli.app import COMMAND_MODULES, cli

    for module in sorted(set(COMMAND_MODULES.values())):
        importlib.import_module(module)
    registered = {
        name: command.callback.__module__
        for name, command in cli.commands.items()
        if command.callback is not None and command.callback.__module__ != "runner.cli.app"
    }
    assert registered == COMMAND_MODULES
    listed = cli.list_commands(click.Context(cli))
    assert set(COMMAND_MODULES) <= set(listed) and "controller" in listed
