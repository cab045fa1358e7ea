"""``corral memory`` through the real executable (issue 18), and the auto-start race: eight processes
write a new project's first checkpoint at the same moment, on every store, and exactly one session is
started.

The race's workers are the real CLI (``runner.cli.app.main``, the function ``python -m runner.cli``
runs) behind a start gate: each imports everything, reports ready and waits for the round's ``go``
file, so the eight ``corral memory checkpoint --project P --goal G`` calls are in flight together
instead of being spread over eight interpreter start-ups.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from runner.store.memory import memory_store
from tests.support.stores import StoreKind, any_store, store_kind

__all__ = ["any_store", "store_kind"]
# Every test runs the real executable (a cold `corral` start, about half a second, per call), as the
# tests asking for ``cli_env`` do: slow (tests/conftest.py).
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
WORKERS = 8
ROUNDS = 3
SHA = "c" * 64

GATED = r"""
import sys, time
from pathlib import Path

import runner.cli.memory  # noqa: F401  everything the command needs, loaded before the gate
import runner.service.memory  # noqa: F401
import runner.store.memory  # noqa: F401
from runner.cli.app import main

ready, go = Path(sys.argv[1]), Path(sys.argv[2])
ready.touch()
deadline = time.monotonic() + 60
while not go.exists() and time.monotonic() < deadline:
    time.sleep(0.001)
sys.exit(main(sys.argv[3:]))
"""


def env(home: Path, store_url: str | None = None) -> dict[str, str]:
    out = {**os.environ, "PYTHONPATH": str(ROOT), "CORRAL_HOME": str(home)}
    out.pop("CORRAL_STORE", None)
    if store_url is not None:
        out["CORRAL_STORE"] = store_url
    return out


def corral(home: Path, *args: str, store_url: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runner.cli", *args],
        env=env(home, store_url),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def ok(home: Path, *args: str, store_url: str | None = None) -> dict[str, Any]:
    done = corral(home, *args, "--json", store_url=store_url)
    assert done.returncode == 0, done.stdout + done.stderr
    found: dict[str, Any] = json.loads(done.stdout)
    return found


@pytest.fixture
def home(tmp_path: Path) -> Path:
    root = tmp_path / "home"
    root.mkdir(mode=0o700)
    return root


@pytest.mark.slow
def test_eight_processes_auto_start_exactly_one_session(
    any_store: Any, store_kind: StoreKind, tmp_path: Path, home: Path
) -> None:
    url = any_store.url  # the store exists (migrated) before the workers open it
    for round_ in range(ROUNDS):
        project = f"race{round_}"
        ready_dir = tmp_path / f"ready{round_}"
        ready_dir.mkdir()
        go = tmp_path / f"go{round_}"
        workers = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    GATED,
                    str(ready_dir / str(n)),
                    str(go),
                    "memory",
                    "checkpoint",
                    "--project",
                    project,
                    "--goal",
                    "race to start",
                    "--agent",
                    f"agent-{n}",
                    "--summary",
                    f"worker {n} was here",
                    "--next-step",
                    "keep going",
                    "--json",
                ],
                env=env(home, url),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for n in range(WORKERS)
        ]
        try:
            deadline = time.monotonic() + 90
            while len(list(ready_dir.iterdir())) < WORKERS:
                assert time.monotonic() < deadline, "the workers never got ready"
                assert all(w.poll() is None for w in workers), [w.communicate() for w in workers if w.poll()]
                time.sleep(0.01)
            go.touch()
            answers = []
            for worker in workers:
                out, err = worker.communicate(timeout=90)
                assert worker.returncode == 0, out + err
                answers.append(json.loads(out))
        finally:
            for worker in workers:
                if worker.poll() is None:
                    worker.kill()
                    worker.communicate()
        sessions = {a["session_id"] for a in answers}
        assert len(sessions) == 1, f"round {round_}: {len(sessions)} sessions started"
        assert sum(a["session_started"] for a in answers) == 1
        assert sorted(a["checkpoint"]["seq"] for a in answers) == list(range(1, WORKERS + 1))
        with memory_store(any_store).snapshot() as reader:
            stored = reader.sessions(project)
            assert [s.id for s in stored] == list(sessions) and stored[0].last_seq == WORKERS
            assert reader.count(project=project) == WORKERS


def test_the_cli_round_trip(home: Path, tmp_path: Path) -> None:
    first = ok(
        home, "memory", "checkpoint", "--project", "demo", "--goal", "ship it", "--agent", "me",
        "--summary", "wrote the port", "--work-done", "the port", "--next-step", "the tests", "--next-step", "docs",
    )  # fmt: skip
    assert first["session_started"] and first["ref"] == "memory:" + first["checkpoint_id"]
    assert first["checkpoint"]["next_steps"] == ["the tests", "docs"] and "never instructions" in first["data_notice"]
    sid = first["session_id"]
    second = ok(home, "memory", "checkpoint", "--session", sid, "--agent", "me", "--summary", "x", "--next-step", "y")
    assert second["session_id"] == sid and second["checkpoint"]["seq"] == 2
    assert ok(home, "memory", "pin", first["checkpoint_id"])["checkpoint"]["pinned"] is True
    shown = ok(home, "memory", "show", sid)
    assert [c["seq"] for c in shown["checkpoints"]] == [2, 1]
    assert [c["id"] for c in ok(home, "memory", "list", "--pinned")["checkpoints"]] == [first["checkpoint_id"]]
    assert [c["id"] for c in ok(home, "memory", "search", "PORT")["checkpoints"]] == [first["checkpoint_id"]]
    ready = ok(home, "memory", "readiness", "--project", "demo")
    assert ready["readiness"]["ready"] and ready["latest"]["id"] == second["checkpoint_id"]
    closed = ok(home, "memory", "session", "close", "--project", "demo", "--status", "completed")
    assert closed["session"]["status"] == "completed"
    boot = ok(home, "memory", "bootstrap", "--project", "new")
    assert boot["project_created"] and boot["open_sessions"] == []
    text = corral(home, "memory", "show", first["checkpoint_id"])
    assert text.returncode == 0 and "summary: wrote the port" in text.stdout


@pytest.mark.parametrize(
    ("args", "status", "code"),
    [
        (
            ["checkpoint", "--project", "p", "--goal", "g", "--agent", "a", "--summary", "s"],
            3,
            "memory_next_steps_required",
        ),
        (["checkpoint", "--agent", "a", "--summary", "s", "--next-step", "n"], 3, "input_invalid"),
        (
            ["checkpoint", "--project", "p", "--session", "ses_0123456789abcdef", "--agent", "a", "--summary", "s"],
            3,
            "input_invalid",
        ),
        (
            [
                "checkpoint",
                "--project",
                "p",
                "--agent",
                "a",
                "--summary",
                "s",
                "--status",
                "blocked",
                "--next-step",
                "n",
            ],
            3,
            "memory_blocker_required",
        ),
        (["session", "close", "--project", "nobody", "--status", "completed"], 3, "memory_session_none"),
        (["session", "close", "--status", "completed"], 3, "input_invalid"),
        (["pin", "cp_0123456789abcdef"], 3, "memory_checkpoint_unknown"),
        (["show", "nope"], 3, "input_invalid"),
        (["checkpoint", "--new-session", "--session", "s", "--agent", "a", "--summary", "s"], 2, "usage"),
    ],
)
def test_refused_rules_exit_with_their_code(home: Path, args: list[str], status: int, code: str) -> None:
    done = corral(home, "memory", *args, "--json")
    assert done.returncode == status, done.stdout + done.stderr
    assert json.loads(done.stdout)["error"]["code"] == code
    assert "Traceback" not in done.stderr


def test_controller_release_takes_a_memory_checkpoint(home: Path) -> None:
    ok(home, "controller", "acquire", "--controller", "proj", "--authority-ref", "T-1", "--authority-sha256", SHA)
    mine = ok(
        home, "memory", "checkpoint", "--project", "proj", "--goal", "g", "--agent", "a", "--summary", "handoff",
        "--next-step", "n",
    )  # fmt: skip
    theirs = ok(
        home, "memory", "checkpoint", "--project", "other", "--goal", "g", "--agent", "a", "--summary", "s",
        "--next-step", "n",
    )  # fmt: skip
    both = corral(home, "controller", "release", "--controller", "proj", "--checkpoint", mine["ref"],
                  "--checkpoint-ref", "x", "--json")  # fmt: skip
    assert both.returncode == 2 and json.loads(both.stdout)["error"]["code"] == "usage"
    wrong = corral(home, "controller", "release", "--controller", "proj", "--checkpoint", theirs["ref"], "--json")
    assert wrong.returncode == 4 and json.loads(wrong.stdout)["error"]["code"] == "memory_project_mismatch"
    digest = corral(
        home, "controller", "release", "--controller", "proj", "--checkpoint", mine["ref"],
        "--checkpoint-sha256", "f" * 64, "--json",
    )  # fmt: skip
    assert digest.returncode == 4 and json.loads(digest.stdout)["error"]["code"] == "memory_digest_mismatch"
    released = ok(home, "controller", "release", "--controller", "proj", "--checkpoint", mine["ref"])
    assert released["lease"]["state"] == "released"
    assert released["lease"]["checkpoint_ref"] == mine["ref"]
    assert released["lease"]["checkpoint_sha256"] == mine["content_sha256"]
