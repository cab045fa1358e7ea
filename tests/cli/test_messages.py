"""Error messages users met that needed mending (issue 11), through the real executable."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.cli.test_agents_cli import error, ok

SHA = "e" * 64
ACQUIRE = ("controller", "acquire", "--controller", "ctl", "--authority-ref", "T", "--authority-sha256", SHA)


def test_a_second_release_says_already_released(corral: Any) -> None:
    ok(corral(*ACQUIRE))
    release = ("controller", "release", "--controller", "ctl", "--checkpoint-ref", "ck", "--checkpoint-sha256", SHA)
    ok(corral(*release))
    doc = error(corral(*release, "--json"), 4, "lease_released")
    assert "already released" in doc["message"] and "acquire first" not in doc["message"]


def test_a_takeover_naming_the_wrong_lease_says_so_and_shows_the_current_one(
    acquire: Any, service: Any, clock: Any
) -> None:
    from runner.errors import RefusedError
    from runner.service import TakeoverInput

    current = acquire(ttl=60).credential.lease_id
    clock.advance(61)
    wrong = "00000000-0000-4000-8000-000000000000"
    try:
        service.controller.takeover(TakeoverInput("ctl", wrong))
    except RefusedError as exc:
        assert exc.code == "lease_mismatch"
        assert "re-granted" not in exc.message and current in exc.message and wrong in exc.message
    else:
        raise AssertionError("a takeover naming another lease went through")


def test_collect_after_close_says_the_agent_is_gone(corral: Any, project: Path) -> None:
    ok(corral(*ACQUIRE))
    ok(corral("reviewer", "start", "--controller", "ctl", "--name", "rev", "--kind", "script", "--cwd", str(project)))
    asked = ok(corral("ask", "rev", "--controller", "ctl", "--text", "echo hi", "--json"))
    token = asked["receipt"]["token"]
    ok(corral("reviewer", "close", "rev", "--controller", "ctl", "--expect-seq", "2"))
    doc = error(corral("collect", "--controller", "ctl", "--receipt", token, "--json"), 4, "cursor_superseded")
    assert "gone" in doc["message"] and "seq None" not in doc["message"]


def test_ask_timeout_names_the_reviewer(corral: Any, project: Path) -> None:
    ok(corral(*ACQUIRE))
    ok(corral("reviewer", "start", "--controller", "ctl", "--name", "rev", "--kind", "script", "--cwd", str(project)))
    doc = error(
        corral("ask", "rev", "--controller", "ctl", "--text", "sleep 5", "--timeout", "0.3", "--json"),
        5,
        "wait_timeout",
    )
    assert "'rev'" in doc["message"] and "p1" not in doc["message"].split("(")[0]
    assert doc["details"]["receipt"]["state"] == "pending"


def test_a_relative_cwd_is_resolved_against_the_current_directory(corral: Any, project: Path) -> None:
    ok(corral(*ACQUIRE))
    lease = ok(
        corral(
            "reviewer",
            "start",
            "--controller",
            "ctl",
            "--name",
            "rev",
            "--kind",
            "script",
            "--cwd",
            "project",
            "--json",
        )
    )["lease"]
    assert lease["cwd"] == str(project.resolve())


def test_draw_into_a_missing_directory_is_a_clear_error(corral: Any, tmp_path: Path) -> None:
    proc = corral("draw", "controller", "--out", str(tmp_path / "nowhere" / "c.mmd"), "--json")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)["error"]
    assert doc["code"] == "input_invalid" and "does not exist" in doc["message"]


def test_blocked_without_a_reason_is_a_usage_error_before_anything_is_read(corral: Any) -> None:
    proc = corral("reviewer", "close", "rev", "--controller", "nobody", "--expect-seq", "0", "--blocked")
    assert proc.returncode == 2 and "--reason" in proc.stderr, proc.stdout + proc.stderr
    proc = corral(
        "writer", "release", "w", "--controller", "nobody", "--expect-seq", "0", "--expect-head", "a" * 40,
        "--expect-status", "b" * 64, "--checkpoint-ref", "r", "--checkpoint-sha256", "c" * 64, "--reason", "x",
    )  # fmt: skip
    assert proc.returncode == 2 and "--blocked" in proc.stderr, proc.stdout + proc.stderr
