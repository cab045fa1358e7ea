"""The wheel carries machines/, recipes/ and schemas/, and an installed corral finds them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_wheel_ships_definitions_and_works_outside_the_checkout(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist), str(REPO)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = dist.glob("corral-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for expected in ("runner/machines/controller.yaml", "runner/schemas/machine.schema.json", "runner/py.typed"):
        assert expected in names
    assert any(n.startswith("runner/recipes/") for n in names)
    # The dashboard corral serve shows at / (no build step: the files themselves ship).
    for page in (
        "index.html",
        "dashboard.css",
        "dashboard.js",
        "api.js",
        "stream.js",
        "machine.js",
        "dom.js",
        "filters.js",
        "views.js",
        "search.js",
        "vlist.js",
    ):
        assert f"runner/http/static/{page}" in names

    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    # Run from a directory with no checkout in sight; the installed copy must not see the repo.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
    env.update(PYTHONPATH=str(target), CORRAL_HOME=str(tmp_path / "home"), PYTHONSAFEPATH="1")
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import runner, runner.data as d; print(runner.__file__); print(d.data_dir('machines'))",
        ],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    module_file, machines_dir = probe.stdout.splitlines()
    assert module_file.startswith(str(target)) and machines_dir == str(target / "runner" / "machines")
    run = subprocess.run(
        [sys.executable, "-m", "runner.cli", "machines", "--json"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    names = [m["name"] for m in json.loads(run.stdout)["machines"]]
    assert names == ["adopted", "controller", "pane", "plan", "receipt", "reviewer", "wake", "writer"]
    valid = subprocess.run(
        [sys.executable, "-m", "runner.cli", "validate"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert valid.returncode == 0, valid.stdout + valid.stderr
