"""Containment of every path an HTTP request can name (issue 24), plans' documents included.

The table of path arguments (:data:`runner.mcp.paths.PATH_ARGS`) is held to the tool table and the
step catalogue: a tool argument or a step parameter that looks like a path and is in neither the
table nor :data:`runner.mcp.paths.NOT_PATH_ARGS` fails here. Then through a real ``corral serve``
with ``--workdir-root``: a memory project's ``subdir`` that leads out by a symlink, and a plan
document whose steps name paths outside the root, are refused before anything is recorded.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import anyio
import httpx

from runner.definitions import operations as catalogue
from runner.mcp.paths import NOT_PATH_ARGS, PATH_ARGS
from tests.http.conftest import SHA, Served
from tests.support.gitrepo import GIT_ENV
from tests.support.specs import shared_library

LOOKS_LIKE_A_PATH = re.compile(r"cwd|dir|path|worktree|repo|file|root|folder", re.IGNORECASE)
SAYS_PATH = re.compile(r"director|\bpath\b|absolute", re.IGNORECASE)


def _error(response: httpx.Response) -> dict[str, Any]:
    assert "Traceback" not in response.text
    return dict(response.json()["error"])


def test_every_tool_argument_that_looks_like_a_path_is_contained_or_exempt_by_name() -> None:
    from runner.mcp.tools import TOOLS

    unlisted = []
    seen = set()
    for name, tool in TOOLS.items():
        for prop, schema in (tool.input_schema.get("properties") or {}).items():
            seen.add(prop)
            if prop in PATH_ARGS or prop in NOT_PATH_ARGS:
                continue
            if LOOKS_LIKE_A_PATH.search(prop) or SAYS_PATH.search(str(schema.get("description", ""))):
                unlisted.append(f"{name}.{prop}")
    assert unlisted == [], f"path-like tool arguments neither contained (PATH_ARGS) nor exempt: {unlisted}"
    assert set(PATH_ARGS) <= seen, f"PATH_ARGS names arguments no tool takes: {set(PATH_ARGS) - seen}"


def test_every_step_parameter_that_looks_like_a_path_is_marked_path() -> None:
    unmarked = [
        f"{spec.name}.{param.name}"
        for spec in catalogue.OPERATIONS.values()
        for param in spec.params
        if not param.path
        and param.name not in NOT_PATH_ARGS
        and (LOOKS_LIKE_A_PATH.search(param.name) or SAYS_PATH.search(param.description))
    ]
    assert unmarked == [], f"path-like step parameters without path=True: {unmarked}"
    marked = {param.name for spec in catalogue.OPERATIONS.values() for param in spec.params if param.path}
    assert marked <= set(PATH_ARGS), f"step path parameters the HTTP table does not list: {marked - set(PATH_ARGS)}"


def _git_repo(path: Path) -> Path:
    path.mkdir(parents=True)
    env = {**GIT_ENV, "PATH": "/usr/bin:/bin", "HOME": str(path)}
    subprocess.run(["git", "init", "-q", str(path)], check=True, env=env)
    return path


def test_a_memory_subdir_that_leads_out_of_the_root_by_a_symlink_is_refused(serve: Any, tmp_path: Path) -> None:
    root = tmp_path / "root"
    repo = _git_repo(root / "repo")
    outside = tmp_path / "outside"
    outside.mkdir()
    (repo / "docs").symlink_to(outside)  # inside the repository by name, outside the root in fact
    served: Served = serve("--workdir-root", str(root))
    with served.client() as client:
        for path, body in (
            ("/api/memory/projects/demo/bootstrap", {"repository": str(repo), "subdir": "docs"}),
            ("/api/memory/checkpoints", {"project": "demo", "goal": "g", "agent": "a", "summary": "s",
                                         "next_steps": ["n"], "repository": str(repo), "subdir": "docs",
                                         "auto_files": True}),
        ):  # fmt: skip
            refused = client.post(path, json=body)
            assert refused.status_code == 403, refused.text
            assert _error(refused)["code"] == "path_outside_root" and _error(refused)["details"]["field"] == "subdir"
        assert client.get("/api/memory/projects/demo/readiness").json().get("project_exists") is not True
        (repo / "src").mkdir()
        inside = client.post("/api/memory/projects/demo/bootstrap", json={"repository": str(repo), "subdir": "src"})
        assert inside.status_code == 200, inside.text


def _review(plan_id: str, cwd: str) -> dict[str, Any]:
    return {
        "plan": plan_id,
        "recipe": "review",
        "controller": "ctl",
        "inputs": {"cwd": cwd, "prompt": "echo hi", "kind": "script", "timeout": 30,
                   "authority_ref": "T-1", "authority_sha256": SHA},
    }  # fmt: skip


def test_a_plan_naming_a_path_outside_the_root_is_refused_before_it_is_recorded(serve: Any, tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "inside").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "escape").symlink_to(outside)
    served: Served = serve("--workdir-root", str(root))
    with served.client() as client:
        for plan_id, cwd, status, code in (
            ("p-out", str(outside), 403, "path_outside_root"),
            ("p-link", str(root / "escape"), 403, "path_outside_root"),
            ("p-dots", f"{root}/inside/../../outside", 422, "path_traversal"),
        ):
            refused = client.post("/api/plans", json={"plan": _review(plan_id, cwd)})
            assert refused.status_code == status, refused.text
            assert _error(refused)["code"] == code and _error(refused)["details"]["field"] == "cwd"
            assert client.get(f"/api/plans/{plan_id}").status_code == 404, "a refused plan is not recorded"
        assert client.get("/api/reviewers", params={"all": "true"}).json()["reviewers"] == []
        accepted = client.post("/api/plans", json={"plan": _review("p-in", str(root / "inside"))})
        assert accepted.status_code == 202, accepted.text


def test_a_step_whose_path_only_a_run_decides_is_checked_before_it_runs(tmp_path: Path) -> None:
    """The second line: a plan recorded without confinement (e.g. by the CLI) and run where paths are
    confined fails its step with ``path_outside_root`` before the operation acts."""
    from runner.definitions.recipes import RecipeLibrary
    from runner.errors import InputError
    from runner.plans.keeper import MemoryKeeper
    from runner.plans.ops import OPERATIONS
    from runner.service import Service
    from runner.service.inputs.plans import PlanRunInput, PlanSubmitInput
    from runner.service.plans import Plans
    from tests.support.stores import open_test_store

    refused: list[tuple[str, ...]] = []

    def confine(args: dict[str, Any], names: tuple[str, ...]) -> None:
        refused.append(names)
        raise InputError(names[0], "outside the root", code="path_outside_root")

    store = open_test_store(tmp_path)
    try:
        service = Service(store, shared_library(), actor="test")
        plans = Plans(service, RecipeLibrary(), MemoryKeeper(), OPERATIONS)
        plans.submit(PlanSubmitInput(_review("p-late", str(tmp_path))))
        plans.paths = confine
        done = anyio.run(plans.run, PlanRunInput("p-late"))
        assert store.find("reviewer") == [], "no reviewer was started"
    finally:
        store.close()
    assert done.state == "failed"
    start = done.data["steps"]["start"]
    assert start["state"] == "failed" and start["error"]["code"] == "path_outside_root", start
    assert refused == [("cwd",)], "the reviewer's cwd was checked, once, and nothing else"
