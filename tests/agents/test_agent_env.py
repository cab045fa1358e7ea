"""Agents cannot act as their controller: their environment carries nothing of corral's.

A real agent (a script kind that prints its whole environment) runs under the real process host and
supervisor while the coordinator's environment holds ``CORRAL_HOME``, ``CORRAL_STORE`` and friends.
"""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from runner.agents.abc import StartOptions
from runner.agents.herdr_cli import herdr_environment
from runner.agents.kinds import Kinds
from runner.agents.process import ProcessHost
from runner.errors import InputError
from runner.sql.store_sqlite import SQLiteStore

DUMP = "import json, os; print(json.dumps(dict(os.environ)))"


def agents_yaml(tmp_path: Path, env_allow: list[str]) -> Path:
    path = tmp_path / "agents.yaml"
    path.write_text(
        "kinds:\n"
        "  envdump:\n"
        f"    argv: ['{{python}}', '-c', {json.dumps(DUMP)}]\n"
        f"    env_allow: {json.dumps(env_allow)}\n"
    )
    return path


def test_an_agent_sees_no_corral_variable_and_no_credential_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    credentials = home / "credentials"
    monkeypatch.setenv("CORRAL_HOME", str(home))
    monkeypatch.setenv("CORRAL_STORE", f"sqlite:///{home / 'corral.db'}")
    monkeypatch.setenv("CORRAL_CONTROLLER", "ctl")
    monkeypatch.setenv("CORRAL_CREDENTIAL_HINT", str(credentials / "ctl.json"))
    monkeypatch.setenv("MY_TOOL_TOKEN", "allowed-by-agents-yaml")
    monkeypatch.setenv("UNLISTED_VARIABLE", "not-allowed")
    monkeypatch.setenv("LC_TIME", "C")
    kinds = Kinds.load([agents_yaml(tmp_path, ["MY_TOOL_TOKEN"])])
    with SQLiteStore(tmp_path / "s.db") as store:
        host = ProcessHost(store, tmp_path / "agents", kinds)
        pane = host.start("dump", "envdump", str(tmp_path), StartOptions()).pane_id
        host.prompt(pane, "go")
        settled = anyio.run(host.wait, pane, 1, 30.0)
        assert settled.status == "done" and settled.exit_status == 0
        env = json.loads(host.read(pane, 5).strip().splitlines()[-1])
    assert not [name for name in env if name.upper().startswith("CORRAL")], env
    assert not [name for name, value in env.items() if str(credentials) in value or str(home) in value]
    assert env["MY_TOOL_TOKEN"] == "allowed-by-agents-yaml"
    assert env["LC_TIME"] == "C", "LC_* is a default prefix"
    assert "PATH" in env
    assert "UNLISTED_VARIABLE" not in env


@pytest.mark.parametrize("entry", ["CORRAL_HOME", "corral_store", "CORR*", "C*", "CORRAL_*"])
def test_agents_yaml_may_not_allow_corral_variables(tmp_path: Path, entry: str) -> None:
    path = agents_yaml(tmp_path, [entry])
    with pytest.raises(InputError) as caught:
        Kinds.load([path])
    assert caught.value.code == "config_invalid"
    assert str(path) in caught.value.message
    assert caught.value.details["path"] == str(path)


def test_builtin_kinds_get_their_own_keys_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "a")
    monkeypatch.setenv("OPENAI_API_KEY", "o")
    monkeypatch.setenv("CODEX_HOME", "/c")
    monkeypatch.setenv("CORRAL_HOME", "/h")
    kinds = Kinds.load([])
    import os

    claude, codex = kinds.get("claude").environment(os.environ), kinds.get("codex").environment(os.environ)
    assert claude.get("ANTHROPIC_API_KEY") == "a" and "OPENAI_API_KEY" not in claude
    assert codex.get("OPENAI_API_KEY") == "o" and codex.get("CODEX_HOME") == "/c" and "ANTHROPIC_API_KEY" not in codex
    assert "CORRAL_HOME" not in claude and "CORRAL_HOME" not in codex


def test_herdr_is_called_without_corral_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CORRAL_HOME", "/h")
    monkeypatch.setenv("HERDR_WORKSPACE_ID", "w")
    env = herdr_environment()
    assert "CORRAL_HOME" not in env and env["HERDR_WORKSPACE_ID"] == "w"
