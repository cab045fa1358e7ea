"""The process host's Bubblewrap confinement, attacked: agents trying to write outside their scopes.

Real supervisors, real bwrap, a real git repository with a linked worktree. The attacker is a kind
whose fixed argv runs a small Python program (below) that tries every route named on its prompt and
prints, per route, whether the write landed; the filesystem is then compared with what it was, so a
write that landed fails the test whatever the agent printed. The same attacker run ``unconfined``
shows the routes are real (its writes land).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runner.agents.abc import AgentError, StartOptions
from runner.agents.kinds import BUILTIN, Kind, Kinds
from runner.agents.process import ProcessHost
from runner.sandbox import confine
from runner.sql.store_sqlite import SQLiteStore
from tests.support.gitrepo import git

pytestmark = pytest.mark.usefixtures("hermetic_git")

ATTACKER = r"""
import os, subprocess, sys

HOST, WT, COMMON = sys.argv[1], os.getcwd(), sys.argv[2]

def put(path, text="x"):
    with open(path, "w") as handle:
        handle.write(text)

def route(name):
    own, out = os.path.join(WT, "own"), os.path.join(WT, "outside")
    if name == "in-scope":
        put(os.path.join(own, "ok.txt"), "ok")
    elif name == "plain":
        put(os.path.join(out, "new.txt"))
    elif name == "existing":
        put(os.path.join(WT, "top.txt"), "changed")
    elif name == "host":
        put(os.path.join(HOST, "victim.txt"), "changed")
    elif name == "locked":
        put(os.path.join(own, "lockme", "x.txt"))
    elif name == "rename-out":
        put(os.path.join(own, "moving.txt"))
        os.rename(os.path.join(own, "moving.txt"), os.path.join(out, "moved.txt"))
    elif name == "rename-in":
        os.rename(os.path.join(WT, "top.txt"), os.path.join(own, "stolen.txt"))
    elif name == "hardlink":
        os.link(os.path.join(WT, "top.txt"), os.path.join(own, "hard.txt"))
        put(os.path.join(own, "hard.txt"), "changed")
    elif name == "symlink-swap":
        os.rename(own, os.path.join(WT, "own-moved"))
    elif name == "symlink-plant":
        os.symlink(out, os.path.join(own, "door"))
        put(os.path.join(own, "door", "through.txt"))
    elif name == "proc-cwd":
        put("/proc/self/cwd/own/../escape.txt")
    elif name == "child":
        subprocess.run([sys.executable, "-c", f"open({os.path.join(HOST, 'child.txt')!r}, 'w')"], check=True)
    elif name == "update-ref":
        subprocess.run(["git", "update-ref", "refs/heads/other", "HEAD"], check=True, capture_output=True)
    elif name == "branch-f":
        subprocess.run(["git", "branch", "-f", "other", "HEAD"], check=True, capture_output=True)
    elif name == "hooks":
        put(os.path.join(COMMON, "hooks", "pre-commit"), "#!/bin/sh\n")
    elif name == "tmp":
        put("/tmp/corral-confinement-marker")
    else:
        raise SystemExit(f"unknown route {name}")

refused = 0
for line in sys.stdin.read().split():
    try:
        route(line)
    except (OSError, subprocess.CalledProcessError) as exc:
        refused += 1
        print(f"{line}: refused ({type(exc).__name__})")
    else:
        print(f"{line}: landed")
sys.exit(1 if refused else 0)
"""

ESCAPES = (
    "plain",
    "existing",
    "host",
    "locked",
    "rename-out",
    "rename-in",
    "hardlink",
    "symlink-swap",
    "symlink-plant",
    "proc-cwd",
    "child",
    "update-ref",
    "branch-f",
    "hooks",
)


@pytest.fixture
def world(tmp_path: Path) -> dict[str, Path]:
    """A repository, its linked worktree on branch ``lane`` (another branch ``other``), and a host file."""
    repo, wt, host = tmp_path / "repo", tmp_path / "wt", tmp_path / "host"
    repo.mkdir()
    host.mkdir()
    (host / "victim.txt").write_text("victim\n")
    git(repo, "init", "-q", "-b", "main")
    (repo / "top.txt").write_text("top\n")
    (repo / "own").mkdir()
    (repo / "own" / "kept.txt").write_text("kept\n")
    (repo / "own" / "lockme").mkdir()
    (repo / "own" / "lockme" / "l.txt").write_text("locked\n")
    (repo / "outside").mkdir()
    (repo / "outside" / "o.txt").write_text("outside\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    git(repo, "branch", "other")
    git(repo, "worktree", "add", "-q", "-b", "lane", str(wt))
    script = tmp_path / "attacker.py"
    script.write_text(ATTACKER)
    return {"repo": repo, "wt": wt, "host": host, "script": script, "tmp": tmp_path}


@pytest.fixture
def host(world: dict[str, Path]) -> Iterator[ProcessHost]:
    attacker = Kind("attacker", ("{python}", str(world["script"]), str(world["host"]), str(world["repo"] / ".git")))
    with SQLiteStore(world["tmp"] / "s.db") as store:
        yield ProcessHost(store, world["tmp"] / "agents", Kinds({**BUILTIN, "attacker": attacker}))


def fingerprint(root: Path) -> dict[str, str]:
    """Every path under ``root`` (but the host's own state) and what it is: content digest or link target."""
    seen: dict[str, str] = {}
    for top, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not (top == str(root) and d == "agents")]
        for name in [*dirs, *files]:
            path = os.path.join(top, name)
            rel = os.path.relpath(path, root)
            if rel.startswith("s.db"):
                continue
            if os.path.islink(path):
                seen[rel] = "-> " + os.readlink(path)
            elif os.path.isdir(path):
                seen[rel] = "dir"
            else:
                with open(path, "rb") as handle:
                    seen[rel] = hashlib.sha256(handle.read()).hexdigest()
    return seen


def run(host: ProcessHost, pane: str, text: str) -> tuple[int | None, str]:
    working = host.prompt(pane, text)
    done = host.wait_many_blocking({pane: working.seq}, 60, threading.Event())[pane]
    assert done is not None
    return done.exit_status, host.read(pane, 500)


def said(output: str) -> dict[str, str]:
    """What the attacker printed per route (a child's traceback lines are not routes)."""
    routes = {*ESCAPES, "in-scope", "tmp"}
    pairs = [line.split(": ", 1) for line in output.splitlines() if ": " in line]
    return {pair[0]: pair[1] for pair in pairs if pair[0] in routes}


def writer(host: ProcessHost, world: dict[str, Path], **extra: Any) -> str:
    options = StartOptions(role="writer", owned=("own",), locked=("own/lockme",), **extra)
    return host.start("w", "attacker", str(world["wt"]), options).pane_id


def test_a_confined_writer_writes_its_scope_and_nothing_else(host: ProcessHost, world: dict[str, Path]) -> None:
    before = fingerprint(world["tmp"])
    refs = git(world["repo"], "for-each-ref", "--format=%(refname) %(objectname)")
    status, output = run(host, writer(host, world), "\n".join(["in-scope", *ESCAPES, "tmp"]))
    lines = said(output)
    assert lines["in-scope"] == "landed"
    assert lines["tmp"] == "landed", "a private /tmp is writable"
    assert {name: lines[name].split(" ")[0] for name in ESCAPES} == dict.fromkeys(ESCAPES, "refused"), output
    assert status == 1, "the run reports that its writes failed"
    after = fingerprint(world["tmp"])
    changed = {k for k, v in after.items() if before.get(k) != v}
    # What the routes made inside the owned scope (the planted link points out: writes through it failed).
    assert changed == {"wt/own/ok.txt", "wt/own/moving.txt", "wt/own/door"}
    assert set(before) - set(after) == set()
    assert git(world["repo"], "for-each-ref", "--format=%(refname) %(objectname)") == refs
    assert not os.path.exists("/tmp/corral-confinement-marker"), "the agent's /tmp is its own"


def test_the_same_routes_land_unconfined(host: ProcessHost, world: dict[str, Path]) -> None:
    """The attacker is real: run with the operator's recorded override, its writes land."""
    pane = writer(host, world, unconfined_reason="test: prove the routes")
    before = fingerprint(world["tmp"])
    status, output = run(host, pane, "plain\nhost\nhooks\nupdate-ref")
    assert "corral: unconfined" not in output, "the output is the agent's own"
    (notes,) = host.root.glob("**/run-*.notes")
    assert "corral: unconfined: test: prove the routes" in notes.read_text()
    assert status == 0, output
    after = fingerprint(world["tmp"])
    assert {"wt/outside/new.txt", "repo/.git/hooks/pre-commit"} <= set(after) - set(before)
    assert after["host/victim.txt"] != before["host/victim.txt"]


def test_a_reviewer_writes_nowhere_in_the_worktree(host: ProcessHost, world: dict[str, Path]) -> None:
    pane = host.start("r", "attacker", str(world["wt"]), StartOptions(role="reviewer")).pane_id
    before = fingerprint(world["tmp"])
    status, output = run(host, pane, "in-scope\nplain\nexisting\nhost\nchild\nupdate-ref\ntmp")
    assert status == 1
    lines = said(output)
    assert lines.pop("tmp") == "landed"
    assert {v.split(" ")[0] for v in lines.values()} == {"refused"}, output
    assert fingerprint(world["tmp"]) == before


def test_a_scripted_reviewer_cannot_write(tmp_path: Path) -> None:
    """The bundled script kind's own ``write`` directive, as a reviewer: refused by the mount, not by it."""
    (tmp_path / "wt").mkdir()
    with SQLiteStore(tmp_path / "s.db") as store:
        host = ProcessHost(store, tmp_path / "agents", Kinds.load([]))
        pane = host.start("r", "script", str(tmp_path / "wt"), StartOptions(role="reviewer")).pane_id
        status, output = run(host, pane, "write notes.txt hello")
    assert status != 0 and "Read-only file system" in output
    assert not (tmp_path / "wt" / "notes.txt").exists()


def test_a_missing_scope_may_be_created_but_nothing_beside_it_changed(
    host: ProcessHost, world: dict[str, Path]
) -> None:
    """A new file's scope opens its directory for new names only: what is there stays read-only."""
    options = StartOptions(role="writer", owned=("outside/new.txt",))
    pane = host.start("w", "attacker", str(world["wt"]), options).pane_id
    status, output = run(host, pane, "plain\nexisting")
    assert "plain: landed" in output and "existing: refused" in output
    assert status == 1
    assert (world["wt"] / "outside" / "o.txt").read_text() == "outside\n"


def test_a_symlinked_scope_is_not_writable(host: ProcessHost, world: dict[str, Path]) -> None:
    os.symlink(world["host"], world["wt"] / "own" / "link")
    options = StartOptions(role="writer", owned=("own/link",))
    pane = host.start("w", "attacker", str(world["wt"]), options).pane_id
    status, output = run(host, pane, "host")
    (notes,) = host.root.glob("**/run-*.notes")  # said beside the run's output
    assert "owned scope own/link passes through a symlink: not writable" in notes.read_text()
    assert "host: refused" in output and status == 1
    assert (world["host"] / "victim.txt").read_text() == "victim\n"


def test_without_bubblewrap_a_prompt_is_refused_and_nothing_runs(
    host: ProcessHost, world: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(confine.BWRAP_ENV, str(world["tmp"] / "no-such-bwrap"))
    pane = writer(host, world)
    with pytest.raises(AgentError) as caught:
        host.prompt(pane, "plain")
    assert caught.value.code == "sandbox_unavailable" and caught.value.details["delivered"] is False
    assert host.get(pane).status == "idle"


def test_network_false_cuts_the_network(tmp_path: Path) -> None:
    """``network: false``: a network namespace of its own (loopback only, no route out)."""
    binary = confine.probe(network=False)
    rules = confine.Confinement(role="reviewer", cwd=str(tmp_path), network=False)
    argv, _ = confine.wrap(binary, rules, ["cat", "/proc/net/route"])
    shut = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    rules = confine.Confinement(role="reviewer", cwd=str(tmp_path), network=True)
    argv, _ = confine.wrap(binary, rules, ["cat", "/proc/net/dev"])
    opened = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    assert len(shut.splitlines()) == 1, "no route at all"
    assert len(opened.splitlines()) > 3 or "eth" in opened or "ens" in opened
