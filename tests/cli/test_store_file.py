"""``--store-file FILE`` (``$CORRAL_STORE_FILE``): the store URL read from a private file, so a
PostgreSQL password never appears in argv or ``ps``; the real ``corral`` of this checkout runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.stores import PostgresKind, kind_for

REPO = Path(__file__).resolve().parents[2]
# Every test runs the real executable (a cold `corral` start, about half a second, per call), as the
# tests asking for ``cli_env`` do: slow (tests/conftest.py).
pytestmark = pytest.mark.slow


def corral(tmp_path: Path, *args: str, **env: str) -> tuple[int, Any]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
    environ.update(PYTHONPATH=str(REPO), CORRAL_HOME=str(tmp_path / "home"), **env)
    done = subprocess.run(
        [sys.executable, "-m", "runner.cli", *args, "--json"],
        capture_output=True,
        text=True,
        env=environ,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    return done.returncode, json.loads(done.stdout) if done.stdout.strip() else done.stderr


def private(path: Path, text: str, mode: int = 0o600) -> Path:
    path.write_text(text)
    path.chmod(mode)
    return path


def test_the_store_url_comes_from_a_private_file(tmp_path: Path) -> None:
    url_file = private(tmp_path / "store.url", f"\n  sqlite://{tmp_path / 'chosen.db'}  \n")
    code, out = corral(tmp_path, "--store-file", str(url_file), "status")
    assert code == 0, out
    assert out["store"]["path"] == str(tmp_path / "chosen.db")
    code, out = corral(tmp_path, "status", CORRAL_STORE_FILE=str(url_file), CORRAL_STORE="sqlite:///elsewhere.db")
    assert code == 0 and out["store"]["path"] == str(tmp_path / "chosen.db"), "the file over $CORRAL_STORE"
    other = f"sqlite://{tmp_path / 'flag.db'}"
    code, out = corral(tmp_path, "--store", other, "status", CORRAL_STORE_FILE=str(url_file))
    assert code == 0 and out["store"]["path"] == str(tmp_path / "flag.db"), "--store over $CORRAL_STORE_FILE"


@pytest.mark.parametrize(
    ("mode", "text", "why"),
    [
        (0o644, "sqlite:///x.db", "only its owner can read"),
        (0o640, "sqlite:///x.db", "only its owner"),
        (0o600, "\n\n", "holds no"),
    ],
)
def test_a_store_file_others_can_read_or_an_empty_one_is_refused(
    tmp_path: Path, mode: int, text: str, why: str
) -> None:
    url_file = private(tmp_path / "store.url", text, mode)
    code, out = corral(tmp_path, "--store-file", str(url_file), "status")
    assert code == 3
    assert out["error"]["code"] == "store_url_invalid" and why in out["error"]["message"]
    assert not (tmp_path / "x.db").exists()


def test_store_and_store_file_together_are_a_usage_error(tmp_path: Path) -> None:
    url_file = private(tmp_path / "store.url", "sqlite:///x.db")
    code, out = corral(tmp_path, "--store", "sqlite:///y.db", "--store-file", str(url_file), "status")
    assert code == 2 and out["error"]["code"] == "usage"
    code, out = corral(tmp_path, "--store-file", str(tmp_path / "missing"), "status")
    assert code == 3 and out["error"]["code"] == "store_url_invalid"


def test_a_postgresql_store_from_a_file_runs_the_cli(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    kind = kind_for("postgresql", request)
    assert isinstance(kind, PostgresKind)
    url = kind.url(tmp_path)
    url_file = private(tmp_path / "store.url", url.replace("postgres@", "postgres:s3cret@", 1) + "\n")
    sha = "ab" * 32
    code, out = corral(
        tmp_path, "--store-file", str(url_file), "controller", "acquire", "--controller", "c1",
        "--authority-ref", "T", "--authority-sha256", sha,
    )  # fmt: skip
    assert code == 0, out
    code, out = corral(tmp_path, "--store-file", str(url_file), "controller", "renew", "--controller", "c1")
    assert code == 0, out
    code, out = corral(tmp_path, "--store-file", str(url_file), "status")
    assert code == 0 and out["store"]["adapter"] == "postgresql"
    assert "s3cret" not in json.dumps(out)
    assert out["store"]["schema"] == url.rsplit("schema=", 1)[1]
