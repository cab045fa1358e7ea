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
status = main(sys.argv[2:])
print(json.dumps({"status": status, "loop": sorted(m for m in ("anyio", "asyncio") if m in sys.modules),
                  "herdr": "runner.agents.herdr" in sys.modules,
                  "other_commands": sorted(m for m in ("runner.cli.agents", "runner.cli.writers", "runner.cli.plans",
                                                       "runner.cli.adopted", "runner.cli.paths") if m in sys.modules),
                  "lazy": sorted(m for m in sys.argv[1].split(",") if m in sys.modules)}))
"""

# Kept out of a cold `controller renew` for its start-up time (issue 13): none is needed to renew. The
# transition table fires from the spec and builds its ``transitions.Machine`` only when asked for it, so
# neither ``transitions`` nor the ``logging`` it imports loads; the service's inputs and views are one
# module per component, and a renew loads the controller's only.
RENEW_NEVER = (
    "logging",
    "transitions",
    "six",
    "yaml",
    "jsonschema",
    "referencing",
    "rich",
    "git",
    "graphviz",
    "socket",
    "getpass",
    "importlib.metadata",
    # The PostgreSQL driver (issue 16): only a postgresql:// store imports it.
    "psycopg",
    "psycopg_pool",
    "runner.sql.store_postgres",
    # The MCP SDK and what it brings (issue 14): only `corral mcp` imports them.
    "mcp",
    "mcp_types",
    "pydantic",
    "starlette",
    "uvicorn",
    "runner.mcp",
    "runner.documents.schema",
    "runner.definitions.lint",
    "runner.service.inventory",
    "runner.service.receipts",
    "runner.service.writers",
    "runner.service.waits",
    "runner.service.plans",
    *(f"runner.service.inputs.{m}" for m in ("leases", "reviewers", "inventory", "receipts", "waits", "writers")),
    *(f"runner.service.inputs.{m}" for m in ("adopted", "events")),
    *(f"runner.service.views.{m}" for m in ("waits", "inventory", "writers")),
)
VERSION_NEVER = (
    *RENEW_NEVER,
    "runner.service.facade",
    "runner.sql.store_sqlite",
    "sqlite3",
    "runner.service.inputs.base",
)


@pytest.mark.slow  # seconds of waiting on processes or deadlines: left out of make test-fast
def test_commands_that_do_not_wait_pay_for_no_event_loop(tmp_path: Path) -> None:
    env = {"CORRAL_HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}

    def probe(*argv: str, never: tuple[str, ...] = ()) -> dict[str, object]:
        done = subprocess.run(
            [sys.executable, "-c", PROBE, ",".join(never), *argv],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        import json

        return dict(json.loads(done.stdout.strip().splitlines()[-1]))

    sha = "0" * 64
    acquire = ["controller", "acquire", "--controller", "c", "--authority-ref", "r", "--authority-sha256", sha]
    quiet = {"status": 0, "loop": [], "herdr": False, "other_commands": [], "lazy": []}
    for argv in (acquire, ["controller", "renew", "--controller", "c"], ["controller", "list"], ["events"]):
        assert probe(*argv) == quiet, argv
    # The modules made lazy for the cold start stay out of a renew (and of --version, with more).
    assert probe("controller", "renew", "--controller", "c", never=RENEW_NEVER) == quiet
    assert probe("controller", "renew", "--controller", "c", "--json", never=RENEW_NEVER) == quiet
    assert probe("--version", never=VERSION_NEVER) == quiet
    # The probe can tell: a command that waits loads an event loop, one that validates loads jsonschema.
    assert probe("agent", "wait", "p1", "--timeout", "0.1")["loop"] != []
    assert probe("validate", never=("jsonschema",))["lazy"] == ["jsonschema"]
    # ... and a command that needs them loads the lazy inputs and views (the probe sees them).
    lazy = ("runner.service.inputs.receipts", "runner.service.views.receipts", "runner.service.inputs.controller")
    assert probe("receipts", never=lazy)["lazy"] == sorted(lazy[:2])
    # Every command but `corral mcp` leaves the MCP SDK alone; `corral mcp config` too (it writes a file).
    sdk = ("mcp", "mcp_types", "pydantic", "starlette", "uvicorn")
    for argv in (["status"], ["mcp", "config", "--client", "claude-code"]):
        assert [m for m in probe(*argv, never=sdk)["lazy"] if m in sdk] == [], argv


def test_the_default_holder_is_getpass_and_socket_spelled_cheaply(monkeypatch: pytest.MonkeyPatch) -> None:
    """``default_holder`` avoids importing getpass and socket: it must say what they would say."""
    import getpass
    import socket

    from runner.service.checks import default_holder

    assert default_holder() == f"{getpass.getuser()}@{socket.gethostname()}"
    for name in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        monkeypatch.delenv(name, raising=False)
    assert default_holder() == f"{getpass.getuser()}@{socket.gethostname()}"  # the password database's name
    monkeypatch.setenv("USER", "someone-else")
    assert default_holder().split("@")[0] == "someone-else" == getpass.getuser()


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


def test_a_lazy_logger_logs_as_the_standard_one_with_the_callers_line(caplog: pytest.LogCaptureFixture) -> None:
    import logging

    from runner.log import get_logger

    logger = get_logger("runner.test_lazy")
    with caplog.at_level(logging.DEBUG, logger="runner.test_lazy"):
        logger.debug("d %s", 1)
        logger.info("i %s", 2)
        logger.warning("w %s", 3)
        try:
            raise ValueError("boom")
        except ValueError:
            logger.exception("e %s", 4)
    assert [(r.levelname, r.getMessage(), r.name) for r in caplog.records] == [
        ("DEBUG", "d 1", "runner.test_lazy"),
        ("INFO", "i 2", "runner.test_lazy"),
        ("WARNING", "w 3", "runner.test_lazy"),
        ("ERROR", "e 4", "runner.test_lazy"),
    ]
    assert {r.filename for r in caplog.records} == {"test_layers.py"}  # the caller, not runner/log.py
    assert caplog.records[-1].exc_info is not None
