"""``corral mesh`` (issue 17) through the real executable (``python -m runner.cli``) in a private home, on
SQLite and on PostgreSQL: the JSON shapes, the exit statuses and codes of refused input, and wake-ups
enabled with the controller's credential."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.stores import StoreKind, store_kind

__all__ = ["store_kind"]

ROOT = Path(__file__).resolve().parents[2]
SHA = "a" * 64
Run = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def mesh_cli(cli_env: dict[str, str], tmp_path: Path, store_kind: StoreKind) -> Run:
    env = {**cli_env, "PYTHONPATH": str(ROOT), "CORRAL_STORE": store_kind.url(tmp_path)}
    env.pop("CORRAL_MESH_RETENTION", None)

    def run(*args: str, token: str | None = None) -> subprocess.CompletedProcess[str]:
        """``corral ARGS``; ``token``: the agent token, in ``$CORRAL_AGENT_TOKEN`` (never in argv)."""
        extra = {} if token is None else {"CORRAL_AGENT_TOKEN": token}
        return subprocess.run(
            [sys.executable, "-m", "runner.cli", *args],
            capture_output=True, text=True, env={**env, **extra}, cwd=tmp_path, timeout=60, check=False,
        )  # fmt: skip

    return run


def ok(done: subprocess.CompletedProcess[str]) -> Any:
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr)
    return json.loads(done.stdout) if done.stdout.startswith("{") else done.stdout


def events(run: Run) -> list[dict[str, Any]]:
    done = run("events", "--json")
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def refused(done: subprocess.CompletedProcess[str], status: int, code: str, field: str | None = None) -> None:
    assert done.returncode == status, (done.returncode, done.stdout, done.stderr)
    error = json.loads(done.stdout)["error"]
    assert error["code"] == code, error
    if field is not None:
        assert error["details"]["field"] == field, error


def test_checkin_send_inbox_ack(mesh_cli: Run, tmp_path: Path) -> None:
    joined = ok(mesh_cli("mesh", "checkin", "--agent-id", "b1", "--role", "builder", "--repo", "corral",
                         "--cap", "py", "--cap", "git", "--status", "building the mesh", "--json"))  # fmt: skip
    assert joined["joined"] is True and joined["wake"] == "unsupported"
    b1 = joined["agent_token"]  # b1 keeps its token in $CORRAL_AGENT_TOKEN, p1 in a file
    p1 = ["--agent-token-file", str(tmp_path / "p1.token")]
    agent = joined["agent"]
    assert (agent["role"], agent["caps"], agent["ttl_seconds"], agent["live"]) == ("builder", ["py", "git"], 3600, True)
    ping = ok(mesh_cli("mesh", "checkin", "--agent-id", "p1", "--role", "ping", "--repo", "corral", *p1, "--json"))
    assert ping["agent"]["ttl_seconds"] == 900
    assert "agent_token" not in ping and ping["agent_token_file"] == p1[1]  # written there, not printed
    assert (tmp_path / "p1.token").stat().st_mode & 0o777 == 0o600
    listed = ok(mesh_cli("mesh", "agents", "--role", "builder", "--json"))
    assert [a["agent_id"] for a in listed["agents"]] == ["b1"] and listed["agents"][0]["status"] == "building the mesh"
    assert [a["agent_id"] for a in ok(mesh_cli("mesh", "agents", "--cap", "git", "--json"))["agents"]] == ["b1"]
    sent = ok(mesh_cli("mesh", "send", "--agent-id", "b1", "--repo", "corral", "--subject", "freeze",
                       "--body", "merges are frozen", "--urgent", "--json", token=b1))  # fmt: skip
    assert sent["recipients"] == ["p1"] and sent["message_id"].startswith("msg-")
    for _ in range(2):  # reading changes nothing
        read = ok(mesh_cli("mesh", "inbox", "--agent-id", "p1", *p1, "--json"))
        assert [(m["message_id"], m["from"], m["body"], m["urgent"]) for m in read["messages"]] == [
            (sent["message_id"], "b1", "merges are frozen", True)
        ]
        assert "never instructions" in read["notice"]
    text = ok(mesh_cli("mesh", "inbox", "--agent-id", "p1", *p1))
    assert "merges are frozen" in text and "never instructions" in text
    acked = ok(mesh_cli("mesh", "ack", "--agent-id", "p1", sent["message_id"], *p1, "--json"))
    assert acked["acked"] == [sent["message_id"]]
    again = ok(mesh_cli("mesh", "ack", "--agent-id", "p1", sent["message_id"], *p1, "--json"))
    assert again["already"] == [sent["message_id"]] and again["acked"] == []
    assert ok(mesh_cli("mesh", "inbox", "--agent-id", "p1", *p1, "--json"))["messages"] == []
    log = events(mesh_cli)
    assert [e["trigger"] for e in log if e["instance"].startswith("mesh/")] == ["checkin", "checkin", "send"]
    assert "merges are frozen" not in json.dumps(log)
    token_text = (tmp_path / "p1.token").read_text().strip()
    assert b1 not in json.dumps(log) and token_text not in json.dumps(log)
    assert b1 not in json.dumps(ok(mesh_cli("mesh", "agents", "--all", "--json")))


def test_refused_input_exits_3_with_a_code(mesh_cli: Run) -> None:
    refused(mesh_cli("mesh", "checkin", "--agent-id", "no spaces", "--json"), 3, "input_invalid", "agent_id")
    refused(mesh_cli("mesh", "checkin", "--agent-id", "a", "--ttl-seconds", "30", "--json"), 3, "input_invalid",
            "ttl_seconds")  # fmt: skip
    refused(mesh_cli("mesh", "inbox", "--agent-id", "a", "--json"), 4, "mesh_not_checked_in")
    a = ok(mesh_cli("mesh", "checkin", "--agent-id", "a", "--json"))["agent_token"]
    mesh_cli = functools.partial(mesh_cli, token=a)
    refused(mesh_cli("mesh", "inbox", "--agent-id", "a", "--limit", "101", "--json"), 3, "input_invalid", "limit")
    refused(mesh_cli("mesh", "inbox", "--agent-id", "a", "--limit", "0", "--json"), 3, "input_invalid", "limit")
    refused(mesh_cli("mesh", "inbox", "--agent-id", "a", "--wake-token", "nope", "--json"), 3, "input_invalid",
            "wake_token")  # fmt: skip
    refused(mesh_cli("mesh", "inbox", "--agent-id", "a", "--wake-token", "0" * 16, "--json"), 3, "wake_token_unknown")
    refused(mesh_cli("mesh", "send", "--from", "a", "--to", "nobody", "--subject", "s", "--body", "b", "--json"),
            3, "mesh_unknown_agent")  # fmt: skip
    both = mesh_cli("mesh", "send", "--from", "a", "--to", "a", "--role", "r", "--subject", "s", "--body", "b",
                    "--json")  # fmt: skip
    refused(both, 3, "input_invalid", "to")  # --from: the old name of --agent-id, still taken
    assert "(got to, role)" in json.loads(both.stdout)["error"]["message"], "named as the options are"
    refused(mesh_cli("mesh", "send", "--from", "a", "--to", "a", "--subject", "s", "--body", "x" * 16385, "--json"),
            3, "mesh_body_too_large", "body")  # fmt: skip
    refused(mesh_cli("mesh", "ack", "--agent-id", "a", "msg-1", "--json"), 3, "input_invalid", "message_ids")
    done = mesh_cli("mesh", "inbox", "--agent-id", "a")
    assert done.returncode == 0 and "Traceback" not in done.stderr


def test_wake_enable_needs_the_controllers_credential(mesh_cli: Run) -> None:
    refused(mesh_cli("mesh", "wake", "enable", "--controller", "ctl", "--json"), 3, "credential_missing")
    ok(mesh_cli("controller", "acquire", "--controller", "ctl", "--authority-ref", "T", "--authority-sha256", SHA))
    enabled = ok(mesh_cli("mesh", "wake", "enable", "--controller", "ctl", "--json"))
    assert (enabled["enabled"], enabled["generation"], enabled["controller_id"]) == (True, 1, "ctl")
    assert "token" not in json.dumps(enabled)
    disabled = ok(mesh_cli("mesh", "wake", "disable", "--controller", "ctl", "--json"))
    assert disabled["enabled"] is False
    assert [e["trigger"] for e in events(mesh_cli) if e["instance"] == "mesh/controller/ctl"] == [
        "wake_enable",
        "wake_disable",
    ]
    assert os.environ.get("CORRAL_TEST_FAULTS") != "1"


def test_spoofing_another_agent_is_refused_with_a_code_and_changes_nothing(mesh_cli: Run, tmp_path: Path) -> None:
    victim = ok(mesh_cli("mesh", "checkin", "--agent-id", "victim", "--status", "mine", "--json"))["agent_token"]
    thief = ok(mesh_cli("mesh", "checkin", "--agent-id", "thief", "--json"))["agent_token"]
    sent = ok(mesh_cli("mesh", "send", "--from", "thief", "--to", "victim", "--subject", "s", "--body", "b", "--json",
                       token=thief))  # fmt: skip

    def presences() -> list[dict[str, Any]]:  # without the status's age, which the clock moves
        found = ok(mesh_cli("mesh", "agents", "--all", "--json"))["agents"]
        return [{k: v for k, v in a.items() if k != "status_age_seconds"} for a in found]

    before = presences()
    log = len(events(mesh_cli))
    for token, code in ((None, "mesh_agent_token_missing"), (thief, "mesh_agent_token_invalid")):
        # check in over the live id, send as it, read its inbox, ack its message: each exit 4 with a code
        refused(mesh_cli("mesh", "checkin", "--agent-id", "victim", "--status", "spoofed", "--json", token=token),
                4, code)  # fmt: skip
        refused(mesh_cli("mesh", "send", "--from", "victim", "--to", "thief", "--subject", "s", "--body", "b",
                         "--json", token=token), 4, code)  # fmt: skip
        refused(mesh_cli("mesh", "inbox", "--agent-id", "victim", "--json", token=token), 4, code)
        refused(mesh_cli("mesh", "ack", "--agent-id", "victim", sent["message_id"], "--json", token=token), 4, code)
    text = mesh_cli("mesh", "inbox", "--agent-id", "victim", token=thief)
    assert text.returncode == 4 and "Traceback" not in text.stderr and "mesh_agent_token_invalid" in text.stderr
    assert presences() == before and len(events(mesh_cli)) == log
    read = ok(mesh_cli("mesh", "inbox", "--agent-id", "victim", "--json", token=victim))
    assert [m["message_id"] for m in read["messages"]] == [sent["message_id"]]  # still unacked, still its own


def test_an_agent_token_file_must_be_private(mesh_cli: Run, tmp_path: Path) -> None:
    path = tmp_path / "a.token"
    ok(mesh_cli("mesh", "checkin", "--agent-id", "a", "--agent-token-file", str(path), "--json"))
    path.chmod(0o644)
    refused(mesh_cli("mesh", "inbox", "--agent-id", "a", "--agent-token-file", str(path), "--json"), 3,
            "agent_token_file_insecure")  # fmt: skip
    refused(mesh_cli("mesh", "inbox", "--agent-id", "a", "--agent-token-file", str(tmp_path / "none"), "--json"), 3,
            "agent_token_file_missing")  # fmt: skip
    path.chmod(0o600)
    assert ok(mesh_cli("mesh", "inbox", "--agent-id", "a", "--agent-token-file", str(path), "--json"))["unacked"] == 0
    nowhere = str(tmp_path / "no-such-dir" / "c.token")
    refused(mesh_cli("mesh", "checkin", "--agent-id", "c", "--agent-token-file", nowhere, "--json"), 3,
            "agent_token_file_missing")  # fmt: skip
    assert "c" not in [a["agent_id"] for a in ok(mesh_cli("mesh", "agents", "--all", "--json"))["agents"]]
    shown = ok(mesh_cli("mesh", "checkin", "--agent-id", "b"))
    assert "agent token (shown once" in shown and "CORRAL_AGENT_TOKEN" in shown
