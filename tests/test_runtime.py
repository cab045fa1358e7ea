"""The runtime assembles corral from configuration, opening each piece only when it is used."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.errors import CredentialError, InputError
from runner.runtime import Config, Runtime
from runner.service import AcquireInput, RenewInput
from runner.service.inputs.plans import PlanListInput

SHA = "0" * 64


def test_configuration_is_explicit_then_environment_then_default(tmp_path: Path) -> None:
    env = {"CORRAL_HOME": str(tmp_path / "env-home"), "CORRAL_STORE": f"sqlite://{tmp_path / 'env.db'}"}
    from_env = Config.load(environ=env)
    assert (from_env.home.root, from_env.store_url) == (tmp_path / "env-home", env["CORRAL_STORE"])
    explicit = Config.load(store=f"sqlite://{tmp_path / 'x.db'}", home=tmp_path / "h", environ=env)
    assert (explicit.home.root, explicit.store_url) == (tmp_path / "h", f"sqlite://{tmp_path / 'x.db'}")
    default = Config.load(home=tmp_path / "h", environ={})
    assert default.store_url == f"sqlite:///{tmp_path / 'h' / 'corral.db'}"
    assert Config.load(home=tmp_path, environ={}, surface="mcp").acting_as.startswith("mcp:")
    assert Config.load(home=tmp_path, environ={}, actor="me").acting_as == "me"


def test_nothing_is_opened_until_it_is_used(tmp_path: Path) -> None:
    runtime = Runtime.open(Config.load(home=tmp_path / "home", environ={}))
    assert runtime.library.get("controller").name == "controller"  # definitions only
    assert not (tmp_path / "home" / "corral.db").exists(), "reading definitions opened the store"
    runtime.service.controller.acquire(AcquireInput("c", "ref", SHA, 60, "t@h"))
    assert (tmp_path / "home" / "corral.db").exists()
    assert runtime._hosts == {}  # a lease needs no agent host
    runtime.close()
    runtime.close()  # closing twice is fine


def test_hosts_come_from_the_registry_once_per_runtime(tmp_path: Path) -> None:
    with Runtime.open(Config.load(home=tmp_path / "home", environ={})) as runtime:
        host = runtime.host("process")
        assert runtime.host("process") is host and host.name == "process"
        assert (tmp_path / "home" / "agents").is_dir()
        with pytest.raises(InputError) as caught:
            runtime.host("nowhere")
        assert "process" in caught.value.message and "herdr" in caught.value.message


def test_the_service_acts_with_credential_files_and_runs_plans(tmp_path: Path) -> None:
    with Runtime.open(Config.load(home=tmp_path / "home", environ={})) as runtime:
        files = runtime.credentials
        path = files.path("c")
        assert path == tmp_path / "home" / "credentials" / "c.json"
        with pytest.raises(CredentialError) as missing:
            files.load("c")
        assert missing.value.code == "credential_missing"
        grant = files.grant("c", path, lambda proposal: runtime.service.controller.acquire(
            AcquireInput("c", "ref", SHA, 60, "t@h", proposal=proposal)))  # fmt: skip
        held = files.load("c")
        assert held == grant.credential
        assert runtime.service.controller.renew(RenewInput("c", held)).state == "active"
        assert runtime.service.plans.list(PlanListInput()) == []  # the plans component is assembled
        assert files.keeper().load("c") == held  # plans keep the same files


def test_a_given_environment_is_the_only_one_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CORRAL_HOME", str(tmp_path / "process-env"))
    config = Config.load(environ={"XDG_STATE_HOME": str(tmp_path / "state")})
    assert config.home.root == tmp_path / "state" / "corral"
