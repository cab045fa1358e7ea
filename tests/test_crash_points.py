"""The crash-point harness (issue 9): ``kill -9`` at every named point of every two-phase transition of
every built-in machine, then prove that reconcile (or, for a receipt, an abandon on fresh evidence)
reaches a settled state with nothing orphaned and nothing delivered twice.

Each case runs the real ``corral`` executable with ``CORRAL_TEST_FAULTS=1`` and
``CORRAL_FAULT=after:<machine>.<trigger>:<intent|effect>`` (see :mod:`runner.faults`): the process
kills itself (SIGKILL) right after the intent is committed, or right after the effect and before its
outcome is recorded. The list of cases is checked against the built-in machines, so a new two-phase
transition without a crash case fails here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fake_herdr import FakeHerdr

from runner.definitions.library import Library
from tests.support.gitrepo import git

pytestmark = pytest.mark.slow

SHA = "c" * 64
POINTS = ("intent", "effect")


class Cli:
    """The real executable in one state home; ``fault`` arms a crash point for one call."""

    def __init__(self, env: dict[str, str], root: Path) -> None:
        self.env = env
        self.root = root
        self.home = Path(env["CORRAL_HOME"])
        self.project = root / "project"
        self.project.mkdir()

    def run(self, *args: str, fault: str | None = None, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        env = dict(self.env)
        if fault is not None:
            env.update(CORRAL_TEST_FAULTS="1", CORRAL_FAULT=f"after:{fault}")
        return subprocess.run(
            [str(Path(sys.executable).parent / "corral"), *args],
            input=stdin, capture_output=True, text=True, env=env, cwd=self.root, timeout=60, check=False,
        )  # fmt: skip

    def ok(self, *args: str) -> Any:
        done = self.run(*args, "--json")
        assert done.returncode == 0, done.stdout + done.stderr
        return json.loads(done.stdout) if done.stdout.strip() else None

    def crash(self, fault: str, *args: str) -> None:
        done = self.run(*args, "--json", fault=fault)
        assert done.returncode == -9, f"{fault}: expected a kill, got {done.returncode}: {done.stdout}{done.stderr}"

    def acquire(self) -> None:
        self.ok("controller", "acquire", "--controller", "ctl", "--authority-ref", "T", "--authority-sha256", SHA)

    def start(self, name: str = "rev", fault: str | None = None) -> Any:
        args = (
            "reviewer",
            "start",
            "--controller",
            "ctl",
            "--name",
            name,
            "--kind",
            "script",
            "--cwd",
            str(self.project),
        )
        if fault is not None:
            return self.crash(fault, *args)
        return self.ok(*args)["lease"]

    def reconcile(self, machine: str = "reviewer", fault: str | None = None) -> Any:
        group = "agent" if machine == "pane" else machine
        args: tuple[str, ...] = (group, "reconcile", "--controller", "ctl", "--apply")
        if fault is not None:
            return self.crash(fault, *args)
        return self.ok(*args)["actions"]

    def panes(self) -> list[dict[str, Any]]:
        return list(self.ok("agents")["agents"])

    def runs(self) -> int:
        """How many prompts any agent ever ran (one run log per prompt handed over)."""
        return len(list((self.home / "agents").glob("*/run-*.log")))

    def settled(self) -> None:
        """Nothing orphaned: no instance waits on reconcile, every live pane belongs to a live lease."""
        status = self.ok("status")
        assert status["needs_attention"] == [], status["needs_attention"]
        loose = [p for p in self.panes() if p["lease"] is None]
        assert loose == [], f"panes no lease holds: {loose}"

    def wait_settled(self, name: str = "rev") -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            pane = next(p for p in self.panes() if p["name"] == name)
            if pane["status"] in ("idle", "done", "blocked"):
                return
            time.sleep(0.05)
        raise AssertionError(f"{name} never settled")


@pytest.fixture
def cli(cli_env: dict[str, str], tmp_path: Path, hermetic_git: None) -> Cli:
    harness = Cli(cli_env, tmp_path)
    harness.acquire()
    return harness


# --- the cases ----------------------------------------------------------------------------------------


def reviewer_start(cli: Cli, point: str) -> None:
    cli.start(fault=f"reviewer.start:{point}")
    assert [a["to"] for a in cli.reconcile()] == ["failed_closed"]
    cli.settled()
    assert cli.start()["state"] == "active", "the name and directory are free again"


def reviewer_close(cli: Cli, point: str) -> None:
    cli.start()
    cli.crash(f"reviewer.close:{point}", "reviewer", "close", "rev", "--controller", "ctl", "--expect-seq", "0")
    assert [a["to"] for a in cli.reconcile()] == ["closed"]
    cli.settled()
    assert cli.panes() == []


def reviewer_reconcile(cli: Cli, point: str) -> None:
    cli.start(fault="reviewer.start:effect")  # a pane no lease recorded
    assert len(cli.panes()) == 1
    cli.reconcile(fault=f"reviewer.reconcile:{point}")
    assert [a["to"] for a in cli.reconcile()] == ["failed_closed"]
    cli.settled()
    assert cli.panes() == []


def receipt_relay(cli: Cli, point: str) -> None:
    cli.start()
    cli.crash(f"receipt.relay:{point}", "relay", "rev", "--controller", "ctl", "--text", "echo once")
    (receipt,) = cli.ok("receipts")["receipts"]
    assert receipt["state"] == "reserved", "an undecided delivery keeps blocking its target"
    refused = cli.run("relay", "rev", "--controller", "ctl", "--text", "echo twice", "--json")
    assert refused.returncode == 4 and json.loads(refused.stdout)["error"]["code"] == "receipt_outstanding"
    cli.wait_settled()
    cli.ok("abandon", "--controller", "ctl", "--receipt", receipt["token"], "--message", "seen settled")
    assert cli.runs() == (1 if point == "effect" else 0), "never delivered twice"
    cli.settled()


def pane_close(cli: Cli, point: str) -> None:
    pane = unleased_pane(cli)
    cli.crash(f"pane.close:{point}", *close_args(cli, pane))
    assert [a["to"] for a in cli.reconcile("pane")] == ["closed"]
    assert [a["to"] for a in cli.reconcile()] == ["failed_closed"]
    cli.settled()
    assert cli.panes() == []


def pane_reconcile(cli: Cli, point: str) -> None:
    pane = unleased_pane(cli)
    cli.crash("pane.close:intent", *close_args(cli, pane))
    cli.reconcile("pane", fault=f"pane.reconcile:{point}")
    assert [a["to"] for a in cli.reconcile("pane")] == ["closed"]
    assert [a["to"] for a in cli.reconcile()] == ["failed_closed"]
    cli.settled()


def unleased_pane(cli: Cli) -> str:
    cli.start(fault="reviewer.start:effect")
    (found,) = cli.panes()
    return str(found["pane_id"])


def close_args(cli: Cli, pane: str) -> tuple[str, ...]:
    return (
        "agent", "close", pane, "--controller", "ctl", "--expect-name", "rev", "--expect-kind", "script",
        "--expect-cwd", str(cli.project.resolve()), "--expect-seq", "0",
    )  # fmt: skip


OUTSIDE = """
import sys
from runner.agents.abc import StartOptions
from runner.agents.kinds import Kinds
from runner.agents.process import ProcessHost
from runner.home import Home
from runner.store import open_store

home = Home.locate(None)
host = ProcessHost(open_store(home.default_store_url), home.ensure("agents"), Kinds.load([]))
print(host.start(sys.argv[1], "script", sys.argv[2], StartOptions()).pane_id)
"""


def outside_pane(cli: Cli, name: str = "stray") -> str:
    """An agent made outside corral: a process-host slot started directly, in another process, no lease."""
    done = subprocess.run(
        [sys.executable, "-c", OUTSIDE, name, str(cli.project.resolve())],
        capture_output=True, text=True, env=cli.env, cwd=cli.root, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def adopt_args(cli: Cli, pane: str) -> tuple[str, ...]:
    return (
        "adopt", pane, "--controller", "ctl", "--expect-name", "stray", "--expect-kind", "script",
        "--expect-cwd", str(cli.project.resolve()), "--expect-seq", "0",
    )  # fmt: skip


def adopted_close(cli: Cli, point: str) -> None:
    pane = outside_pane(cli)
    cli.ok(*adopt_args(cli, pane))
    cli.crash(f"adopted.close:{point}", "adopted", "close", "stray", "--controller", "ctl", "--expect-seq", "0")
    assert [a["to"] for a in cli.reconcile("adopted")] == ["closed"]
    cli.settled()
    assert cli.panes() == []


def adopted_reconcile(cli: Cli, point: str) -> None:
    pane = outside_pane(cli)
    cli.ok(*adopt_args(cli, pane))
    cli.crash("adopted.close:intent", "adopted", "close", pane, "--controller", "ctl", "--expect-seq", "0")
    cli.reconcile("adopted", fault=f"adopted.reconcile:{point}")
    assert [a["to"] for a in cli.reconcile("adopted")] == ["closed"]
    cli.settled()
    assert cli.panes() == []


def lane(cli: Cli, name: str = "alpha") -> tuple[Path, dict[str, Any]]:
    repo = cli.root / "repo"
    if not repo.exists():
        repo.mkdir()
        git(repo, "init", "-q", "-b", "main")
        (repo / "src").mkdir()
        (repo / "src" / "app.py").write_text("print('app')\n")
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", "base")
        git(repo, "worktree", "add", "-q", "-b", "feat", str(cli.root / "wt"))
    worktree = cli.root / "wt"
    return worktree, cli.ok("preflight", str(worktree))


def writer_start_args(cli: Cli, name: str = "alpha") -> tuple[str, ...]:
    worktree, facts = lane(cli)
    return (
        "writer", "start", "--controller", "ctl", "--name", name, "--kind", "script", "--worktree", str(worktree),
        "--branch", facts["branch"], "--base-commit", facts["head"], "--expect-head", facts["head"],
        "--expect-status", facts["status_sha256"], "--own", "src", "--purpose", "crash points", "--ticket", "T",
        "--authority-ref", "plan.md", "--authority-sha256", SHA,
    )  # fmt: skip


def writer_start(cli: Cli, point: str) -> None:
    cli.crash(f"writer.start:{point}", *writer_start_args(cli))
    assert [a["to"] for a in cli.reconcile("writer")] == ["failed_closed"]
    cli.settled()
    assert cli.ok(*writer_start_args(cli, "beta"))["lease"]["state"] == "active", "the worktree is free again"


def writer_start_pane(cli: Cli, point: str) -> None:
    """Issue 24: killed inside the host's start, the pane created and no lease recording it yet."""
    cli.crash(point, *writer_start_args(cli))
    assert [a["to"] for a in cli.reconcile("writer")] == ["failed_closed"]
    cli.settled()
    assert cli.panes() == [], "the pane the killed start created is closed"
    assert cli.ok(*writer_start_args(cli, "beta"))["lease"]["state"] == "active", "the worktree is free again"


def reviewer_start_pane(cli: Cli, point: str) -> None:
    cli.start(fault=point)
    assert [a["to"] for a in cli.reconcile()] == ["failed_closed"]
    cli.settled()
    assert cli.panes() == [], "the pane the killed start created is closed"
    assert cli.start()["state"] == "active", "the name and directory are free again"


@pytest.mark.parametrize("point", ["agent.start:pane"])
@pytest.mark.parametrize("case", [writer_start_pane, reviewer_start_pane], ids=["writer", "reviewer"])
def test_a_kill_after_the_pane_is_created_before_the_lease_records_it_is_settled(
    cli: Cli, case: Callable[[Cli, str], None], point: str
) -> None:
    case(cli, point)


@pytest.mark.parametrize("point", ["agent.start:pane", "agent.start:agent"])
@pytest.mark.parametrize("case", [writer_start_pane, reviewer_start_pane], ids=["writer", "reviewer"])
def test_on_herdr_a_kill_after_the_pane_is_created_before_the_lease_records_it_is_settled(
    cli: Cli, fake_herdr: FakeHerdr, case: Callable[[Cli, str], None], point: str
) -> None:
    cli.env["PATH"] = f"{fake_herdr.bin}{os.pathsep}{cli.env['PATH']}"
    cli.env["FAKE_HERDR_STATE"] = os.environ["FAKE_HERDR_STATE"]
    cli.env["CORRAL_AGENT_HOST"] = "herdr"
    own = set(fake_herdr.state()["panes"])  # the coordinator's own pane
    real_panes = cli.panes

    def panes() -> list[dict[str, Any]]:
        return [p for p in real_panes() if p["pane_id"] not in own]

    cli.panes = panes  # type: ignore[method-assign]
    case(cli, point)
    assert len(fake_herdr.calls("tab", "create")) == 2, "both starts went through Herdr"
    (live,) = cli.panes()
    assert set(fake_herdr.state()["panes"]) - own == {live["pane_id"]}, "only the second start's pane is open"


def writer_release(cli: Cli, point: str) -> None:
    cli.ok(*writer_start_args(cli))
    worktree, facts = lane(cli)
    cli.crash(
        f"writer.release:{point}",
        "writer", "release", "alpha", "--controller", "ctl", "--expect-seq", "0", "--expect-head", facts["head"],
        "--expect-status", facts["status_sha256"], "--checkpoint-ref", "ck/alpha", "--checkpoint-sha256", SHA,
    )  # fmt: skip
    assert [a["to"] for a in cli.reconcile("writer")] == ["released"]
    cli.settled()
    assert (worktree / "src" / "app.py").read_text() == "print('app')\n", "the worktree is untouched"


def writer_reconcile(cli: Cli, point: str) -> None:
    cli.crash("writer.start:effect", *writer_start_args(cli))
    cli.reconcile("writer", fault=f"writer.reconcile:{point}")
    assert [a["to"] for a in cli.reconcile("writer")] == ["failed_closed"]
    cli.settled()
    assert cli.panes() == []


def wake_wake(cli: Cli, point: str) -> None:
    """A sender killed inside a mesh wake-up (issue 17): the message is recorded (it committed before the
    wake), the wake stays ``delivering`` (it may have been delivered), never delivered twice: it blocks
    every other wake of the agent until its token is used or its window passes, which status says
    (there is nothing to reconcile)."""
    cli.start()
    (pane,) = cli.panes()
    cli.ok("mesh", "wake", "enable", "--controller", "ctl")
    rev = ("--agent-token-file", str(cli.root / "rev-agent.token"))  # each agent's token (issue 24)
    boss = ("--agent-token-file", str(cli.root / "boss.token"))
    cli.ok("mesh", "checkin", "--agent-id", "rev-agent", "--pane", str(pane["pane_id"]), *rev)
    cli.ok("mesh", "checkin", "--agent-id", "boss", *boss)
    send = ("mesh", "send", "--from", "boss", "--to", "rev-agent", "--subject", "s", *boss)
    cli.crash(f"wake.wake:{point}", *send, "--body", "first")
    read = cli.ok("mesh", "inbox", "--agent-id", "rev-agent", *rev)
    assert [m["body"] for m in read["messages"]] == ["first"], "the message outlives its sender"
    (wake,) = [n for n in cli.ok("status")["needs_attention"] if n["machine"] == "wake"]
    assert wake["state"] == "delivering" and "expires at" in wake["next"]
    again = cli.ok(*send, "--body", "second")
    assert [w["code"] for w in again["wakes"]] == ["wake_outstanding"]
    assert cli.runs() == (1 if point == "effect" else 0), "never delivered twice"


CASES: dict[str, Callable[[Cli, str], None]] = {
    "reviewer.start": reviewer_start,
    "reviewer.close": reviewer_close,
    "reviewer.reconcile": reviewer_reconcile,
    "writer.start": writer_start,
    "writer.release": writer_release,
    "writer.reconcile": writer_reconcile,
    "receipt.relay": receipt_relay,
    "pane.close": pane_close,
    "pane.reconcile": pane_reconcile,
    "adopted.close": adopted_close,
    "adopted.reconcile": adopted_reconcile,
    "wake.wake": wake_wake,
}


def test_every_two_phase_transition_of_every_builtin_machine_has_a_crash_case() -> None:
    library = Library()
    two_phase = {
        f"{spec.name}.{t.trigger}"
        for spec in (library.builtin(path.stem) for path in library.builtin_paths())
        for t in spec.transitions
        if t.two_phase
    }
    assert two_phase == set(CASES), "add a crash case for each new two-phase transition"


@pytest.mark.parametrize("point", POINTS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_kill_at_each_point_is_settled_by_reconcile(cli: Cli, case: str, point: str) -> None:
    CASES[case](cli, point)


def test_the_harness_is_inert_without_the_test_variable(cli: Cli) -> None:
    env_fault = cli.run(
        "reviewer", "start", "--controller", "ctl", "--name", "rev", "--kind", "script", "--cwd",
        str(cli.project), "--json",
    )  # fmt: skip
    assert env_fault.returncode == 0
    cli.env["CORRAL_FAULT"] = "after:reviewer.close:intent"  # armed, but CORRAL_TEST_FAULTS is not set
    closed = cli.run("reviewer", "close", "rev", "--controller", "ctl", "--expect-seq", "0", "--json")
    assert closed.returncode == 0, closed.stdout + closed.stderr


def test_reconcile_through_the_executable_is_a_dry_run_unless_applied(cli: Cli) -> None:
    """Issue 10: `reviewer reconcile` plans (exit 0, nothing changed); `--apply --lease ID` acts."""
    cli.start(fault="reviewer.start:effect")
    before = cli.run("events", "--json").stdout
    dry = cli.ok("reviewer", "reconcile", "--controller", "ctl")
    (plan,) = dry["actions"]
    assert dry["applied"] is False and plan["action"] == "would_reconcile" and plan["to"] == "failed_closed"
    assert cli.run("events", "--json").stdout == before, "the dry run recorded nothing"
    assert cli.ok("status")["needs_attention"] != []
    text = cli.run("reviewer", "reconcile", "--controller", "ctl")
    assert text.returncode == 0 and "dry run" in text.stdout and "would_reconcile" in text.stdout
    done = cli.ok("reviewer", "reconcile", "--controller", "ctl", "--apply", "--lease", plan["lease"])
    assert [a["to"] for a in done["actions"]] == ["failed_closed"]
    cli.settled()


def test_writer_release_through_the_executable_can_require_the_reviewed_content(cli: Cli) -> None:
    """Issue 10: `corral preflight` prints content_sha256; `writer release --expect-content` refuses
    (exit 4, git_content_mismatch, expected and actual) a dirty file edited again since."""
    cli.ok(*writer_start_args(cli))
    worktree = cli.root / "wt"
    (worktree / "src" / "app.py").write_text("print('reviewed')\n")
    _, reviewed = lane(cli)
    (worktree / "src" / "app.py").write_text("print('edited again')\n")
    _, now = lane(cli)
    assert now["status_sha256"] == reviewed["status_sha256"] and now["content_sha256"] != reviewed["content_sha256"]
    args = (
        "writer", "release", "alpha", "--controller", "ctl", "--expect-seq", "0", "--expect-head", now["head"],
        "--expect-status", now["status_sha256"], "--checkpoint-ref", "ck/alpha", "--checkpoint-sha256", SHA,
    )  # fmt: skip
    done = cli.run(*args, "--expect-content", reviewed["content_sha256"], "--json")
    assert done.returncode == 4, done.stdout + done.stderr
    error = json.loads(done.stdout)["error"]
    assert error["code"] == "git_content_mismatch"
    assert (error["details"]["expected"], error["details"]["actual"]) == (
        reviewed["content_sha256"],
        now["content_sha256"],
    )
    released = cli.ok(*args, "--expect-content", now["content_sha256"])
    assert released["lease"]["state"] == "released"
    assert (worktree / "src" / "app.py").read_text() == "print('edited again')\n"


def test_writer_audit_and_a_release_over_a_scope_violation_through_the_executable(cli: Cli) -> None:
    """`writer audit` lists a write outside the owned scopes (exit 4); `writer release` refuses it (exit 4,
    scope_violation, the paths in details) until `--accept-violation --reason R` (alone: a usage error)."""
    cli.ok(*writer_start_args(cli))
    worktree = cli.root / "wt"
    (worktree / "outside.txt").write_text("not the lane's\n")
    (worktree / "src" / "mine.py").write_text("x = 1\n")
    done = cli.run("writer", "audit", "alpha", "--controller", "ctl", "--json")
    assert done.returncode == 4, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["clean"] is False and report["counts"]["violations"] == 1
    assert [(c["path"], c["scope"]) for c in report["changes"]] == [
        ("outside.txt", "outside"),
        ("src/mine.py", "owned"),
    ]
    text = cli.run("writer", "audit", "alpha", "--controller", "ctl")
    assert text.returncode == 4 and "outside  added" in text.stdout and "1 violation(s)" in text.stdout
    _, now = lane(cli)
    args = (
        "writer", "release", "alpha", "--controller", "ctl", "--expect-seq", "0", "--expect-head", now["head"],
        "--expect-status", now["status_sha256"], "--checkpoint-ref", "ck/alpha", "--checkpoint-sha256", SHA,
    )  # fmt: skip
    done = cli.run(*args, "--json")
    assert done.returncode == 4, done.stdout + done.stderr
    error = json.loads(done.stdout)["error"]
    assert error["code"] == "scope_violation"
    assert [(v["path"], v["scope"]) for v in error["details"]["violations"]] == [("outside.txt", "outside")]
    assert cli.run(*args, "--accept-violation").returncode == 2, "a usage error: no reason"
    released = cli.ok(*args, "--accept-violation", "--reason", "asked for by the ticket")
    assert released["lease"]["state"] == "released"
    assert released["lease"]["violation_acceptance"]["reason"] == "asked for by the ticket"


def test_on_herdr_the_dry_run_names_the_journalled_pane_and_closes_nothing(cli: Cli, fake_herdr: FakeHerdr) -> None:
    cli.env["PATH"] = f"{fake_herdr.bin}{os.pathsep}{cli.env['PATH']}"
    cli.env["FAKE_HERDR_STATE"] = os.environ["FAKE_HERDR_STATE"]
    cli.env["CORRAL_AGENT_HOST"] = "herdr"
    own = set(fake_herdr.state()["panes"])
    cli.start(fault="agent.start:pane")
    (left,) = set(fake_herdr.state()["panes"]) - own
    planned = cli.ok("reviewer", "reconcile", "--controller", "ctl")["actions"]
    assert [(a["to"], a.get("would_close_pane")) for a in planned] == [("failed_closed", left)], planned
    assert left in fake_herdr.state()["panes"], "a dry run closes nothing"
    applied = cli.reconcile()
    assert [(a["to"], a.get("closed_pane")) for a in applied] == [("failed_closed", left)], applied
    assert set(fake_herdr.state()["panes"]) == own
