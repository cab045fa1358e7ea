"""Fixtures for the agent host tests: the contract fake of ``herdr`` on ``PATH``, and anyio's backend.

``fake_herdr.py`` is loaded here once and registered as the module ``fake_herdr``, so the test
modules can ``from fake_herdr import FakeHerdr`` (the suite runs with ``--import-mode=importlib``,
which puts no test directory on ``sys.path``).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("fake_herdr", Path(__file__).with_name("fake_herdr.py"))
assert _spec is not None and _spec.loader is not None
_module = importlib.util.module_from_spec(_spec)
sys.modules["fake_herdr"] = _module
_spec.loader.exec_module(_module)

from fake_herdr import FakeHerdr  # noqa: E402 - importable only once registered just above

FAKE_CONTROLS = (
    "FAKE_HERDR_WORK_SECONDS",
    "FAKE_HERDR_PANE_BUSY",
    "FAKE_HERDR_LAUNCH_SECONDS",
    "FAKE_HERDR_REACT_SECONDS",
    "FAKE_HERDR_DETECT_KIND",
    # Herdr's own environment (set inside its panes) and corral's choice of binary: unset, so that a
    # test run inside Herdr still talks to the fake.
    "HERDR_WORKSPACE_ID",
    "HERDR_PANE_ID",
    "HERDR_SOCKET_PATH",
    "HERDR_BIN_PATH",
    "CORRAL_HERDR",
)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def fake_herdr(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeHerdr:
    """A fresh fake Herdr, its ``herdr`` first on ``PATH``; the test-only controls start unset."""
    fake = FakeHerdr(tmp_path / "fake-herdr")
    fake.install()
    monkeypatch.setenv("PATH", f"{fake.bin}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("FAKE_HERDR_STATE", str(fake.state_dir))
    for name in FAKE_CONTROLS:
        monkeypatch.delenv(name, raising=False)
    return fake
