"""The state home and its credentials/ directory are never used unless private to this user.

Loose modes on our own directories are tightened to 0700; a symlink, a non-directory or another
user's directory is refused (``home_insecure``, exit 3) with the path and mode. Through the real
``corral`` executable where the CLI can reach the case.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from runner.errors import HomeInsecureError
from runner.home import Home

SHA = hashlib.sha256(b"authority").hexdigest()
NOBODY = 65534


def corral(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(Path(sys.executable).parent / "corral"), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def acquire(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return corral(
        env, "controller", "acquire", "--controller", "ctl", "--authority-ref", "T-1", "--authority-sha256", SHA,
        "--json",
    )  # fmt: skip


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_loose_home_and_credentials_are_tightened(cli_env: dict[str, str], home: Path) -> None:
    home.mkdir()
    home.chmod(0o755)
    assert acquire(cli_env).returncode == 0
    assert mode(home) == 0o700
    (home / "credentials").chmod(0o777)
    home.chmod(0o775)
    renewed = corral(cli_env, "controller", "renew", "--controller", "ctl", "--json")
    assert renewed.returncode == 0, renewed.stdout + renewed.stderr
    assert mode(home) == 0o700
    assert mode(home / "credentials") == 0o700


def test_loose_credentials_dir_is_tightened_before_a_credential_is_written(cli_env: dict[str, str], home: Path) -> None:
    (home / "credentials").mkdir(parents=True)
    home.chmod(0o700)
    (home / "credentials").chmod(0o755)
    assert acquire(cli_env).returncode == 0
    assert mode(home / "credentials") == 0o700


def refused(proc: subprocess.CompletedProcess[str], path: Path) -> dict[str, object]:
    assert proc.returncode == 3, proc.stdout + proc.stderr
    error = json.loads(proc.stdout)["error"]
    assert error["code"] == "home_insecure"
    assert error["details"]["path"] == str(path)
    assert str(path) in error["message"]
    return dict(error["details"])


def test_a_symlinked_home_is_refused(cli_env: dict[str, str], home: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    home.symlink_to(elsewhere)
    refused(acquire(cli_env), home)
    assert list(elsewhere.iterdir()) == [], "nothing was written through the symlink"


def test_a_symlinked_credentials_dir_is_refused(cli_env: dict[str, str], home: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o755)
    home.mkdir(mode=0o700)
    (home / "credentials").symlink_to(elsewhere)
    refused(acquire(cli_env), home / "credentials")
    assert list(elsewhere.iterdir()) == [] and mode(elsewhere) == 0o755


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory to another user needs root")
@pytest.mark.parametrize("which", ["home", "credentials"])
def test_another_users_directory_is_refused_untouched(cli_env: dict[str, str], home: Path, which: str) -> None:
    (home / "credentials").mkdir(parents=True)
    home.chmod(0o755)
    (home / "credentials").chmod(0o755)
    target = home if which == "home" else home / "credentials"
    os.chown(target, NOBODY, NOBODY)
    if which == "credentials":
        home.chmod(0o700)
    details = refused(acquire(cli_env), target)
    assert details["owner"] == NOBODY and details["mode"] == "755"
    assert mode(target) == 0o755, "another user's directory was changed"
    assert not (home / "credentials" / "ctl.json").exists()


def test_a_home_that_is_a_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "home"
    path.write_text("")
    with pytest.raises(HomeInsecureError) as caught:
        Home(path).ensure()
    assert caught.value.code == "home_insecure" and caught.value.details["path"] == str(path)
    assert "not a directory" in caught.value.message


def test_a_new_home_is_private(tmp_path: Path) -> None:
    home = Home(tmp_path / "a" / "home")
    credentials = home.ensure("credentials")
    assert mode(home.root) == 0o700 and mode(credentials) == 0o700
