"""The annotations are truthful: what each tool declares it does is what calling it does.

- ``readOnlyHint``: every read-only tool is called with valid arguments in a home with state (a lease,
  a settled reviewer, a completed receipt, a recorded plan, a worktree); the store (every table of the
  SQLite file) and ``corral events --json`` are the same before and after.
- ``idempotentHint``: calling twice leaves the state the first call left (renew, collect, cleanup,
  reconcile, plan submit and cancel): MCP's "no additional effect", so a second call may be refused
  (a second cancel is ``transition_not_allowed``) as long as it changes nothing.
- ``destructiveHint`` false: such a call ends nothing that existed before it (no instance moves to an
  ended state).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runner.mcp.tools import TOOLS
from tests.mcp.conftest import SHA, InProcess, corral_cli, make_lane, server_env, writer_start_args

pytestmark = pytest.mark.slow

ENDED = {"released", "closed", "cancelled", "abandoned", "failed", "completed", "succeeded", "taken_over"}


def store_rows(home: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table of the store, in a stable order."""
    with sqlite3.connect(f"file:{home / 'corral.db'}?mode=ro", uri=True) as db:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        rows = {t: sorted(db.execute(f'SELECT * FROM "{t}"').fetchall(), key=repr) for t in tables}
    db.close()
    return rows


def states(home: Path) -> dict[str, str]:
    with sqlite3.connect(f"file:{home / 'corral.db'}?mode=ro", uri=True) as db:
        found = dict(db.execute("SELECT id, state FROM instances").fetchall())
    db.close()
    return found


def max_event_seq(home: Path) -> int:
    done = corral_cli(server_env(home), "events", "--json")
    assert done.returncode == 0, done.stderr
    seqs = [json.loads(line)["seq"] for line in done.stdout.splitlines() if line.strip()]
    assert seqs, "the log is empty: the comparison would prove nothing"
    return max(seqs)


@pytest.fixture
def world(mcp_home: Path, tmp_path: Path, project: Path, hermetic_git: None) -> Iterator[dict[str, Any]]:
    """A home with state, and the server (in process) over it."""
    lane = make_lane(tmp_path / "git")
    with InProcess(mcp_home) as server:
        server.ok("corral_controller_acquire", {"controller": "ctl", "authority_ref": "T-1", "authority_sha256": SHA})
        server.ok("corral_reviewer_start", {"controller": "ctl", "name": "rev", "kind": "script", "cwd": str(project)})
        receipt = server.ok("corral_relay", {"controller": "ctl", "target": "rev", "text": "echo hi"})["receipt"]
        done = server.ok("corral_collect", {"controller": "ctl", "receipts": [receipt["token"]], "timeout": 60})
        plan = {
            "plan": "p-1", "recipe": "review", "controller": "planctl",
            "inputs": {"cwd": str(project), "prompt": "echo p", "kind": "script", "authority_ref": "P",
                       "authority_sha256": SHA},
        }  # fmt: skip
        server.ok("corral_run", {"plan": plan, "run": False})
        facts = server.ok("corral_preflight", {"worktree": str(lane)})
        server.ok("corral_writer_start", writer_start_args(facts, lane))
        memory = server.ok(
            "corral_memory_checkpoint",
            {"project": "demo", "goal": "g", "agent": "a", "summary": "handoff", "next_steps": ["n"]},
        )
        yield {
            "server": server,
            "home": mcp_home,
            "lane": lane,
            "project": project,
            "receipt": done["results"][0]["receipt"],
            "plan": plan,
            "memory": memory,
        }


def read_only_calls(w: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Valid arguments for every read-only tool in ``world``."""
    receipt = w["receipt"]
    pane, seq = receipt["pane_id"], receipt["settled_seq"]
    return {
        "corral_controller_list": {"all": True},
        "corral_reviewer_list": {"controller": "ctl", "all": True},
        "corral_receipts": {"all": True},
        "corral_wait_any": {"controller": "ctl", "targets": [{"name": "rev", "after_seq": seq - 1}], "timeout": 30},
        "corral_agent_get": {"target": pane},
        "corral_agent_read": {"target": pane, "lines": 50},
        "corral_agent_wait": {"target": pane, "until": ["done"], "after_seq": seq - 1, "timeout": 30},
        "corral_agents": {},
        "corral_writer_list": {"all": True},
        "corral_preflight": {"worktree": str(w["lane"])},
        "corral_writer_audit": {"controller": "ctl", "name": "writer1"},
        "corral_scopes_check": {"own": ["src"], "lock": ["docs"], "worktree": str(w["lane"])},
        "corral_adopted_list": {"all": True},
        "corral_status": {},
        "corral_events": {"since": 0},
        "corral_machines": {},
        "corral_draw": {"machine": "reviewer", "instance": receipt["target"]},
        "corral_recipe_list": {},
        "corral_check": {"names": ["controller", "review"]},
        "corral_recipe_show": {"name": "review", "resolved": False},
        "corral_plans_show": {"plan_id": "p-1"},
        "corral_plans_list": {"all": True},
        "corral_mesh_agents": {"all": True},
        "corral_memory_readiness": {"project": "demo"},
        "corral_memory_show": {"item_id": w["memory"]["checkpoint_id"]},
        "corral_memory_list": {"project": "demo"},
        "corral_memory_search": {"query": "handoff"},
    }


def test_read_only_tools_change_nothing(world: dict[str, Any]) -> None:
    server, home = world["server"], world["home"]
    calls = read_only_calls(world)
    declared = {name for name, tool in TOOLS.items() if tool.hints.read_only}
    assert set(calls) == declared, "a read-only tool without a call here (or a call of one that is not)"
    for name in calls:
        tool = TOOLS[name]
        assert tool.hints.destructive is False and tool.hints.idempotent is True, name
    before_rows, before_seq = store_rows(home), max_event_seq(home)
    for name, arguments in calls.items():
        server.ok(name, arguments)
        server.ok(name, arguments)
        assert store_rows(home) == before_rows, f"{name} declares readOnlyHint but changed the store"
    assert max_event_seq(home) == before_seq


def test_idempotent_tools_twice_are_once(world: dict[str, Any]) -> None:
    server, home = world["server"], world["home"]
    for name in ("corral_controller_renew", "corral_collect", "corral_reviewer_cleanup", "corral_run"):
        assert TOOLS[name].hints.idempotent, name
    first = server.ok("corral_controller_renew", {"controller": "ctl", "ttl_seconds": 600})["lease"]
    second = server.ok("corral_controller_renew", {"controller": "ctl", "ttl_seconds": 600})["lease"]
    for key in ("state", "generation", "lease_id", "ttl_seconds", "holder"):
        assert first[key] == second[key], key
    token = world["receipt"]["token"]
    once = server.ok("corral_collect", {"controller": "ctl", "receipts": [token], "timeout": 30})["results"][0]
    twice = server.ok("corral_collect", {"controller": "ctl", "receipts": [token], "timeout": 30})["results"][0]
    assert once["output"] == twice["output"] == "hi\n" and once["receipt"] == twice["receipt"]
    cleaned = server.ok("corral_reviewer_cleanup", {"controller": "ctl", "apply": True})
    assert cleaned["applied"] is True and cleaned["actions"], "nothing to clean up: the test proves nothing"
    rows = store_rows(home)
    server.ok("corral_reviewer_cleanup", {"controller": "ctl", "apply": True})
    assert store_rows(home) == rows, "a second cleanup changed what the first left"
    for name in (
        "corral_agent_reconcile",
        "corral_reviewer_reconcile",
        "corral_writer_reconcile",
        "corral_adopted_reconcile",
    ):
        assert TOOLS[name].hints.idempotent, name
        server.ok(name, {"controller": "ctl", "apply": True})
        rows = store_rows(home)
        server.ok(name, {"controller": "ctl", "apply": True})
        assert store_rows(home) == rows, name
    for name, arguments in (
        ("corral_memory_pin", {"checkpoint_id": world["memory"]["checkpoint_id"]}),
        ("corral_memory_bootstrap", {"project": "demo"}),
    ):
        assert TOOLS[name].hints.idempotent, name
        server.ok(name, arguments)
        rows = store_rows(home)
        server.ok(name, arguments)
        assert store_rows(home) == rows, name
    rows = store_rows(home)
    submitted = server.ok("corral_run", {"plan": world["plan"], "run": False})
    assert submitted["created"] is False
    server.ok("corral_run", {"plan": world["plan"], "run": False})
    assert store_rows(home) == rows
    assert TOOLS["corral_plans_cancel"].hints.idempotent
    cancelled = server.ok("corral_plans_cancel", {"plan_id": "p-1"})
    assert cancelled["state"] == "cancelled"
    rows = store_rows(home)
    again = server.call("corral_plans_cancel", {"plan_id": "p-1"})  # refused (already cancelled): no effect
    assert not again.is_error or again.structured_content["error"]["code"] != "internal"
    assert store_rows(home) == rows


def test_non_destructive_tools_end_nothing(world: dict[str, Any]) -> None:
    server, home, project = world["server"], world["home"], world["project"]
    calls: list[tuple[str, dict[str, Any]]] = [
        ("corral_controller_renew", {"controller": "ctl"}),
        ("corral_reviewer_start", {"controller": "ctl", "name": "rev2", "kind": "script", "cwd": str(project)}),
        ("corral_relay", {"controller": "ctl", "target": "rev2", "text": "echo x"}),
        ("corral_ask", {"controller": "ctl", "target": "rev", "text": "echo y", "timeout": 60}),
        ("corral_controller_resume", {"controller": "ctl"}),
        ("corral_memory_checkpoint", {"project": "demo", "agent": "a", "summary": "more", "next_steps": ["n"]}),
    ]
    for name, arguments in calls:
        assert TOOLS[name].hints.destructive is False, name
        before = states(home)
        server.ok(name, arguments)
        after = states(home)
        ended = {i: (before[i], after[i]) for i in before if after[i] != before[i] and after[i] in ENDED}
        assert not ended, f"{name} declares destructiveHint false but ended {ended}"
