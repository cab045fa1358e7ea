"""The agent commands through the real ``corral`` executable, each a separate process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

SHA = "e" * 64


def ok(proc: subprocess.CompletedProcess[str]) -> Any:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout) if proc.stdout.startswith("{") else proc.stdout


def error(proc: subprocess.CompletedProcess[str], status: int, code: str) -> dict[str, Any]:
    assert proc.returncode == status, proc.stdout + proc.stderr
    doc: dict[str, Any] = json.loads(proc.stdout)["error"]
    assert doc["code"] == code, doc
    return doc


def start(corral: Any, project: Path, name: str) -> dict[str, Any]:
    return dict(
        ok(
            corral(
                "reviewer",
                "start",
                "--controller",
                "ctl",
                "--name",
                name,
                "--kind",
                "script",
                "--cwd",
                str(project),
                "--json",
            )
        )["lease"]
    )


def test_agent_commands_end_to_end(corral: Any, project: Path) -> None:
    ok(corral("controller", "acquire", "--controller", "ctl", "--authority-ref", "T", "--authority-sha256", SHA))
    lease = start(corral, project, "rev")
    assert (lease["state"], lease["kind"], lease["pane_id"]) == ("active", "script", "p1")
    start(corral, project, "other")

    asked = ok(corral("ask", "rev", "--controller", "ctl", "--text", "review please", "--json"))
    assert asked["receipt"]["state"] == "completed" and "lib.py: 2 lines" in asked["output"]

    relayed = ok(corral("relay", "other", "--controller", "ctl", "--json", stdin="sleep 0.3\necho from stdin"))
    token = relayed["receipt"]["token"]
    assert relayed["receipt"]["state"] == "pending"
    error(corral("relay", "other", "--controller", "ctl", "--text", "no", "--json"), 4, "receipt_outstanding")
    pending = ok(corral("receipts", "--state", "pending", "--json"))["receipts"]
    assert [r["token"] for r in pending] == [token]

    waited = ok(corral("wait-any", "--controller", "ctl", "--target", "other:1", "--target", "rev:2", "--json"))
    assert waited["target"] == "other" and waited["observation"]["seq"] == 2
    assert waited["output"].strip() == "from stdin" and [w["target"] for w in waited["winners"]] == ["other"]
    collected = ok(corral("collect", "--controller", "ctl", "--receipt", token, "--json"))
    assert collected["results"][0]["output"].strip() == "from stdin"

    many = ok(
        corral(
            "ask-many",
            "--controller",
            "ctl",
            "--request",
            "rev=echo one",
            "--request",
            "other=echo two",
            "--mode",
            "all",
            "--json",
        )
    )
    assert sorted(r["output"].strip() for r in many["results"]) == ["one", "two"]

    agents = ok(corral("agents", "--json"))["agents"]
    assert [(a["name"], a["status"], a["seq"], a["lease_state"]) for a in agents] == [
        ("rev", "done", 4, "active"),
        ("other", "done", 4, "active"),
    ]
    error(
        corral("reviewer", "close", "rev", "--controller", "ctl", "--expect-seq", "3", "--json"), 4, "cursor_mismatch"
    )
    closed = ok(corral("reviewer", "close", "rev", "--controller", "ctl", "--expect-seq", "4", "--json"))
    assert closed["lease"]["state"] == "closed" and closed["output"].strip() == "one"

    dry = ok(corral("reviewer", "cleanup", "--controller", "ctl", "--json"))
    assert (dry["applied"], [(a["name"], a["action"]) for a in dry["actions"]]) == (False, [("other", "would_close")])
    applied = ok(corral("reviewer", "cleanup", "--controller", "ctl", "--apply", "--json"))
    assert [(a["name"], a["action"]) for a in applied["actions"]] == [("other", "closed")]
    assert ok(corral("reviewer", "list", "--json"))["reviewers"] == []
    assert len(ok(corral("reviewer", "list", "--all", "--json"))["reviewers"]) == 2

    status = ok(corral("status", "--json"))
    assert status["counts"]["reviewer"] == {"closed": 2}
    assert status["counts"]["receipt"] == {"completed": 4}
    assert status["needs_attention"] == []
    assert "nothing needs attention" in ok(corral("status"))


def test_agent_command_errors(corral: Any, project: Path) -> None:
    ok(corral("controller", "acquire", "--controller", "ctl", "--authority-ref", "T", "--authority-sha256", SHA))
    error(
        corral(
            "reviewer", "start", "--controller", "ctl", "--name", "r", "--kind", "nope", "--cwd", str(project), "--json"
        ),
        4,
        "agent_kind_unknown",
    )
    error(
        corral(
            "reviewer",
            "start",
            "--controller",
            "ctl",
            "--name",
            "R!",
            "--kind",
            "script",
            "--cwd",
            str(project),
            "--json",
        ),
        3,
        "input_invalid",
    )
    error(corral("relay", "ghost", "--controller", "ctl", "--text", "x", "--json"), 3, "target_unknown")
    error(corral("collect", "--controller", "ctl", "--receipt", "not-a-token", "--json"), 3, "input_invalid")
    error(
        corral(
            "collect",
            "--controller",
            "ctl",
            "--receipt",
            "corral-receipt-v1.00000000-0000-0000-0000-000000000000",
            "--json",
        ),
        3,
        "receipt_unknown",
    )
    error(corral("ask-many", "--controller", "ctl", "--request", "no-equals-sign", "--json"), 3, "input_invalid")
    error(corral("wait-any", "--controller", "ctl", "--target", "x:abc", "--json"), 3, "input_invalid")
    start(corral, project, "rev")
    error(
        corral("wait-any", "--controller", "ctl", "--target", "rev", "--fresh", "--timeout", "0.2", "--json"),
        5,
        "wait_timeout",
    )
    settled = ok(corral("wait-any", "--controller", "ctl", "--target", "rev", "--timeout", "0.2", "--json"))
    assert settled["target"] == "rev" and settled["observation"]["status"] == "idle", "an idle agent wins at once"
    error(corral("relay", "rev", "--controller", "ctl", "--text", "   ", "--json"), 3, "input_invalid")


def test_agent_get_read_wait_are_read_only_and_need_no_controller(corral: Any, project: Path) -> None:
    """Issue 10: `corral agent get|read|wait PANE` for any agent on the host, without a credential."""
    ok(corral("controller", "acquire", "--controller", "ctl", "--authority-ref", "T", "--authority-sha256", SHA))
    pane = start(corral, project, "rev")["pane_id"]
    ok(corral("controller", "release", "--controller", "ctl", "--checkpoint-ref", "c", "--checkpoint-sha256", SHA))
    # No credential from here on: every command below is read-only.
    got = ok(corral("agent", "get", pane, "--json"))
    assert set(got) == {"observation"}
    assert (got["observation"]["pane_id"], got["observation"]["status"], got["observation"]["seq"]) == (pane, "idle", 0)
    timed_out = error(corral("agent", "wait", pane, "--timeout", "0.3", "--json"), 5, "wait_timeout")
    assert timed_out["details"]["observation"]["status"] == "idle", "the last observation comes with the timeout"
    read = ok(corral("agent", "read", pane, "--lines", "5", "--json"))
    assert set(read) == {"output", "observation"} and read["observation"]["seq"] == 0
    text = corral("agent", "get", pane)
    assert text.returncode == 0 and f"{pane} rev (script)" in text.stdout and "idle at seq 0" in text.stdout
    error(corral("agent", "get", "p999", "--json"), 3, "agent_gone")
    error(corral("agent", "read", "p999", "--json"), 3, "agent_gone")
    error(corral("agent", "wait", "p999", "--timeout", "0.2", "--json"), 3, "agent_gone")
    error(corral("agent", "wait", pane, "--until", "gone", "--json"), 2, "usage")
    error(corral("agent", "get", "../x", "--json"), 3, "input_invalid")


def test_agent_wait_sees_work_start_and_end(corral: Any, project: Path) -> None:
    ok(corral("controller", "acquire", "--controller", "ctl", "--authority-ref", "T", "--authority-sha256", SHA))
    pane = start(corral, project, "rev")["pane_id"]
    ok(corral("relay", "rev", "--controller", "ctl", "--text", "wait-file go\necho finished", "--json"))
    working = ok(corral("agent", "wait", pane, "--after-seq", "0", "--until", "working", "--json"))
    assert (working["observation"]["status"], working["observation"]["seq"]) == ("working", 1)
    (project / "go").write_text("")  # let the agent finish only now: the wait saw it working
    done = ok(corral("agent", "wait", pane, "--after-seq", "1", "--timeout", "30", "--json"))
    assert (done["observation"]["status"], done["observation"]["seq"]) == ("done", 2)
    read = ok(corral("agent", "read", pane, "--json"))
    assert read["output"].strip() == "finished" and read["observation"]["seq"] == 2


def test_status_judges_every_lock_and_prints_no_pid_lock_id_or_token(
    corral: Any, project: Path, cli_env: dict[str, str], home: Path
) -> None:
    """Issue 10: hosts, and controller leases, agent leases and plan runner locks as absent / active /
    stale / indeterminate; a runner elsewhere is indeterminate. No pid, lease id or token in the output."""
    import os
    import time

    from runner import lockstatus
    from runner.context import Instance
    from runner.sql.store_sqlite import SQLiteStore

    ok(corral("controller", "acquire", "--controller", "ctl", "--authority-ref", "T", "--authority-sha256", SHA))
    ok(corral("controller", "acquire", "--controller", "old", "--authority-ref", "T", "--authority-sha256", SHA,
              "--ttl", "5"))  # fmt: skip
    acquired_at = time.monotonic()
    credentials = [json.loads((home / "credentials" / f"{c}.json").read_text()) for c in ("ctl", "old")]
    start(corral, project, "rev")
    crashed = subprocess.run(
        [str(Path(sys.executable).parent / "corral"), "reviewer", "start", "--controller", "ctl", "--name", "dead",
         "--kind", "script", "--cwd", str(project), "--json"],
        env={**cli_env, "CORRAL_TEST_FAULTS": "1", "CORRAL_FAULT": "after:reviewer.start:intent"},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert crashed.returncode == -9
    store_path = ok(corral("status", "--json"))["store"]["path"]
    pids = {os.getpid(), 4242, 2**22 + 7}
    with SQLiteStore(Path(store_path)) as store, store.write() as tx:
        me = lockstatus.current()
        holders = {
            "plan/here": me,
            "plan/elsewhere": {**me, "host": "elsewhere.invalid", "pid": 4242},
            "plan/gone": {**me, "pid": 2**22 + 7},
        }
        for plan_id, runner in holders.items():
            tx.put(Instance(plan_id, "plan", "absent", 0, {}), "running", {"runner": runner, "recipe": "x"})
        for lease in tx.find("reviewer"):
            pids.add(int(lease.data["starter"]["pid"]))
    time.sleep(max(0.0, 5.2 - (time.monotonic() - acquired_at)))

    done = corral("status", "--json")
    report = ok(done)
    hosts = report["agent_hosts"]
    assert [h["name"] for h in hosts] == ["process"] and hosts[0]["root"]
    locks = report["locks"]
    assert {c["controller_id"]: c["lock"] for c in locks["controllers"]} == {"ctl": "active", "old": "stale"}
    assert sorted((lease["name"], lease["state"], lease["lock"]) for lease in locks["leases"]) == [
        ("dead", "provisioning", "stale"),
        ("rev", "active", "active"),
    ]
    assert {r["id"]: r["lock"] for r in locks["plan_runners"]} == {
        "plan/here": "active",
        "plan/elsewhere": "indeterminate",
        "plan/gone": "stale",
    }
    for credential in credentials:
        assert credential["token"] not in done.stdout and credential["lease_id"] not in done.stdout
    import re

    printed = done.stdout.replace(str(home.parent), "")  # the test's own paths may hold any digits
    for pid in pids:
        assert not re.search(rf"(?<![0-9]){pid}(?![0-9])", printed), f"pid {pid} printed"
    text = corral("status")
    assert text.returncode == 0 and "plan plan/elsewhere runner: indeterminate" in text.stdout
    assert "controller old: stale" in text.stdout
