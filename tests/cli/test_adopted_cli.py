"""``corral adopt`` and ``corral adopted …`` through the real executable, each a separate process, over an
agent made outside corral (a process-host slot started directly by another process, with no lease)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

SHA = "a" * 64
OUTSIDE = """
import sys
from runner.agents.abc import StartOptions
from runner.agents.kinds import Kinds
from runner.agents.process import ProcessHost
from runner.home import Home
from runner.store import open_store

home = Home.locate(None)
host = ProcessHost(open_store(home.default_store_url), home.ensure("agents"), Kinds.load([]))
if sys.argv[1] == "start":
    print(host.start(sys.argv[2], "script", sys.argv[3], StartOptions()).pane_id)
else:
    host.close(sys.argv[2])
"""


@pytest.fixture
def corral(cli_env: dict[str, str], tmp_path: Path) -> Any:
    def run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(Path(sys.executable).parent / "corral"), *args],
            capture_output=True, text=True, env={**cli_env, **env}, cwd=tmp_path, timeout=60, check=False,
        )  # fmt: skip

    return run


@pytest.fixture
def host(cli_env: dict[str, str], tmp_path: Path) -> Any:
    """Start (``host("start", name, cwd)``) or close (``host("close", pane)``) a pane behind corral's back."""

    def run(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-c", OUTSIDE, *args],
            capture_output=True, text=True, env=cli_env, cwd=tmp_path, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    return run


def ok(proc: subprocess.CompletedProcess[str]) -> Any:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout) if proc.stdout.startswith("{") else proc.stdout


def error(proc: subprocess.CompletedProcess[str], status: int, code: str) -> dict[str, Any]:
    assert proc.returncode == status, proc.stdout + proc.stderr
    doc: dict[str, Any] = json.loads(proc.stdout)["error"]
    assert doc["code"] == code, doc
    return doc


def test_adopt_list_refuse_prompts_release_and_close(corral: Any, host: Any, tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    ok(corral("controller", "acquire", "--controller", "ctl", "--authority-ref", "T", "--authority-sha256", SHA))
    pane = host("start", "stray", str(project))

    def adopt(seq: str = "0", name: str = "stray", **env: str) -> subprocess.CompletedProcess[str]:
        return corral(
            "adopt", pane, "--controller", "ctl", "--expect-name", name, "--expect-kind", "script",
            "--expect-cwd", str(project), "--expect-seq", seq, "--json", **env,
        )  # fmt: skip

    error(adopt(seq="3"), 4, "cursor_mismatch")
    error(adopt(name="other"), 4, "identity_changed")
    error(adopt(name="Not A Name"), 3, "input_invalid")
    error(adopt(CORRAL_PROTECTED_PANES=f"w1:p9,{pane}"), 4, "pane_protected")
    error(adopt(CORRAL_PROTECTED_PANES="p1 p2"), 3, "config_invalid")
    lease = ok(adopt(HERDR_PANE_ID=pane))["lease"]  # a Herdr pane id does not protect a process-host slot
    assert (lease["machine"], lease["state"], lease["pane_id"], lease["adopted_seq"]) == ("adopted", "active", pane, 0)

    assert [a["id"] for a in ok(corral("adopted", "list", "--json"))["adopted"]] == [lease["id"]]
    assert ok(corral("adopted", "list", "--controller", "else", "--json"))["adopted"] == []
    (listed,) = ok(corral("agents", "--json"))["agents"]
    assert (listed["lease"], listed["controller_id"]) == (lease["id"], "ctl")

    # Adoption grants no prompting and its name is not a reviewer's.
    error(corral("relay", "stray", "--controller", "ctl", "--text", "hi", "--json"), 4, "lease_adopted")
    error(corral("ask", "stray", "--controller", "ctl", "--text", "hi", "--json"), 4, "lease_adopted")
    error(corral("ask-many", "--controller", "ctl", "--request", "stray=hi", "--json"), 4, "lease_adopted")
    error(corral("wait-any", "--controller", "ctl", "--target", "stray", "--json"), 4, "lease_adopted")
    start = ("reviewer", "start", "--controller", "ctl", "--name", "stray", "--kind", "script", "--cwd", str(project))
    error(corral(*start, "--json"), 4, "agent_name_taken")
    assert ok(corral("receipts", "--json"))["receipts"] == []
    close = ("agent", "close", pane, "--controller", "ctl", "--expect-name", "stray", "--expect-kind", "script")
    error(corral(*close, "--expect-cwd", str(project), "--expect-seq", "0", "--json"), 4, "pane_leased")

    released = ok(corral("adopted", "release", "stray", "--controller", "ctl", "--json"))["lease"]
    assert released["state"] == "released"
    assert [a["pane_id"] for a in ok(corral("agents", "--json"))["agents"]] == [pane], "left running"
    error(corral("adopted", "release", "stray", "--controller", "ctl", "--json"), 3, "target_unknown")

    ok(adopt())
    error(corral("adopted", "close", pane, "--controller", "ctl", "--expect-seq", "1", "--json"), 4, "cursor_mismatch")
    closed = ok(corral("adopted", "close", pane, "--controller", "ctl", "--expect-seq", "0", "--json"))
    assert (closed["lease"]["state"], closed["lease"]["closing_seq"], closed["output"]) == ("closed", 0, "")
    assert ok(corral("agents", "--json"))["agents"] == []
    states = [a["state"] for a in ok(corral("adopted", "list", "--all", "--json"))["adopted"]]
    assert sorted(states) == ["closed", "released"]
    text = corral("adopted", "list", "--all")
    assert text.returncode == 0 and "released" in text.stdout and "closed" in text.stdout


def test_reconcile_is_a_dry_run_unless_applied(corral: Any, host: Any, tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    ok(corral("controller", "acquire", "--controller", "ctl", "--authority-ref", "T", "--authority-sha256", SHA))
    pane = host("start", "stray", str(project))
    adopt = ("adopt", pane, "--controller", "ctl", "--expect-name", "stray", "--expect-kind", "script")
    lease = ok(corral(*adopt, "--expect-cwd", str(project), "--expect-seq", "0", "--json"))["lease"]
    assert ok(corral("adopted", "reconcile", "--controller", "ctl", "--json")) == {"applied": False, "actions": []}
    host("close", pane)  # closed outside corral
    dry = ok(corral("adopted", "reconcile", "--controller", "ctl", "--json"))
    assert dry["applied"] is False
    assert [(a["lease"], a["action"], a["pane_exists"]) for a in dry["actions"]] == [
        (lease["id"], "would_reconcile", False)
    ]
    text = corral("adopted", "reconcile", "--controller", "ctl")
    assert text.returncode == 0 and "dry run" in text.stdout
    assert ok(corral("adopted", "list", "--json"))["adopted"][0]["state"] == "active", "nothing changed"
    applied = ok(corral("adopted", "reconcile", "--controller", "ctl", "--apply", "--json"))
    assert [(a["action"], a["to"]) for a in applied["actions"]] == [("reconciled", "closed")]
    assert ok(corral("status", "--json"))["needs_attention"] == []
