"""Shared fixtures: a private state home, a real SQLite store file, a controllable clock, hermetic git,
and the contract fake of ``herdr`` (for the agent host tests and the service suite over both hosts).

``tests/agents/fake_herdr.py`` is loaded here once and registered as the module ``fake_herdr``, so any
test module can ``from fake_herdr import FakeHerdr`` (the suite runs with ``--import-mode=importlib``,
which puts no test directory on ``sys.path``). It stays a file of its own: the fake ``herdr``
executable runs that very file as a script.

Two kinds of test are marked ``slow`` here, by what they use rather than one by one (``make test-fast``
leaves them out; ``make test`` and CI run them): a test that runs the real ``corral`` executable (it
asks for ``cli_env``, or starts a real server: ``serve`` of the HTTP suite, ``stdio`` / ``http`` /
``unix_http`` of the MCP suite; each start costs a cold ``corral`` of about half a second), and a test
over the fake Herdr (``fake_herdr``, or the ``herdr`` side of a host
rig's parameter: the service suite's ``host``, the host contract's ``rig``), where every host call is
a Python subprocess; its twin over the process host stays in the fast run. Likewise the PostgreSQL side
of a store parametrization (a ``postgresql`` parameter: ``store_kind``, ``race_url``, …): its SQLite twin
stays in the fast run, which then needs no PostgreSQL server at all (without ``CORRAL_TEST_POSTGRES``
each worker would initdb one); ``make test`` runs both, and the service suite again on PostgreSQL.
Other slow tests carry ``@pytest.mark.slow`` themselves.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from runner.definitions.library import Library
from runner.service import AcquireInput, Grant, Service
from runner.store import Store
from tests.support.gitrepo import GIT_ENV, GIT_REDIRECTS
from tests.support.specs import shared_library
from tests.support.stores import (  # noqa: F401 - fixtures: the session's PostgreSQL server, the suite's store kind
    _test_store_ready,
    open_test_store,
    postgres_server,
)

_spec = importlib.util.spec_from_file_location("fake_herdr", Path(__file__).parent / "agents" / "fake_herdr.py")
assert _spec is not None and _spec.loader is not None
_module = importlib.util.module_from_spec(_spec)
sys.modules["fake_herdr"] = _module
_spec.loader.exec_module(_module)

from fake_herdr import FakeHerdr  # noqa: E402 - importable only once registered just above
from hypothesis import settings  # noqa: E402 - after the fake's registration, like the import above

from tests.support.examples import FAST, FAST_DEFAULT  # noqa: E402 - likewise

# The fast run's Hypothesis profile (tests/support/examples.py): properties with no count of their own.
settings.register_profile("corral-fast", max_examples=FAST_DEFAULT)
if FAST:
    settings.load_profile("corral-fast")

pytest_plugins = ["tests.plugins.transitions"]  # transition coverage of the whole suite (see that module)
REPO = Path(__file__).resolve().parent.parent
SHA = hashlib.sha256(b"authority").hexdigest()


class FakeClock:
    """The store's clock under test control: starts at a fixed moment, moves only when told."""

    def __init__(self, start: datetime | None = None) -> None:
        self.now = start or datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh CORRAL_HOME; CORRAL_STORE and friends cleared so nothing leaks in from the shell."""
    root = tmp_path / "home"
    monkeypatch.setenv("CORRAL_HOME", str(root))
    for name in ("CORRAL_STORE", "CORRAL_CONTROLLER", "CORRAL_MACHINES", "XDG_STATE_HOME"):
        monkeypatch.delenv(name, raising=False)
    return root


@pytest.fixture
def library() -> Library:
    """The shipped machines over this process's shared spec cache (``tests.support.specs``)."""
    return shared_library()


@pytest.fixture
def store(tmp_path: Path, clock: FakeClock) -> Iterator[Store]:
    """The test's store on the suite's store kind (``CORRAL_TEST_STORE``: SQLite unless told)."""
    with open_test_store(tmp_path, clock=clock) as opened:
        yield opened


@pytest.fixture
def service(store: Store, library: Library) -> Service:
    return Service(store, library, actor="test")


@pytest.fixture
def acquire(service: Service) -> Callable[..., Grant]:
    """``acquire(controller_id="ctl", ttl=60)``: grant a lease with a fixed authority."""

    def grant(controller_id: str = "ctl", ttl: int = 60, holder: str = "tester@host") -> Grant:
        return service.controller.acquire(AcquireInput(controller_id, "TICKET-1", SHA, ttl, holder))

    return grant


@pytest.fixture
def cli_env(home: Path) -> dict[str, str]:
    """Environment for running the real ``corral`` executable in a subprocess."""
    env = dict(os.environ)
    env["CORRAL_HOME"] = str(home)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


@pytest.fixture
def hermetic_git(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """One git configuration (empty, with a fixed identity and dates) for the test's own git, GitPython
    inside the runner, and the agents it starts."""
    empty = tmp_path_factory.mktemp("gitconfig") / "config"
    empty.write_text("")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(empty))
    for name, value in GIT_ENV.items():
        monkeypatch.setenv(name, value)
    for name in GIT_REDIRECTS:
        monkeypatch.delenv(name, raising=False)


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
def fake_herdr(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeHerdr:
    """A fresh fake Herdr, its ``herdr`` first on ``PATH``; the test-only controls start unset."""
    fake = FakeHerdr(tmp_path / "fake-herdr")
    fake.install()
    monkeypatch.setenv("PATH", f"{fake.bin}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("FAKE_HERDR_STATE", str(fake.state_dir))
    for name in FAKE_CONTROLS:
        monkeypatch.delenv(name, raising=False)
    return fake


# Fixtures that start the real ``corral`` executable (tests/cli, tests/http and tests/mcp conftests) or
# the fake Herdr.
SLOW_FIXTURES = frozenset({"cli_env", "serve", "stdio", "http", "unix_http", "fake_herdr"})


def _slow_by_what_it_uses(item: pytest.Item) -> bool:
    fixtures = getattr(item, "fixturenames", ())
    callspec = getattr(item, "callspec", None)
    params = list(callspec.params.values()) if callspec is not None else []
    twin = "herdr" in params or "postgresql" in params  # a host rig's herdr side, a store's PostgreSQL side
    return not SLOW_FIXTURES.isdisjoint(fixtures) or twin


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark ``slow`` the tests that run the real executable, go through the fake Herdr or are the
    PostgreSQL twin of an SQLite test (see above)."""
    for item in items:
        if _slow_by_what_it_uses(item) and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.slow)
