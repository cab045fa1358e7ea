"""The agent host a service test runs on: ``host`` is parametrized over every host corral ships.

``process``: the embedded host (supervised subprocesses over the test's own SQLite store, the
bundled scripted agent). ``herdr``: the Herdr host driving the contract fake of ``herdr``
(``tests/agents/fake_herdr.py``, registered by ``tests/conftest.py``) with
:data:`BACKGROUND_AGENTS` busy agents corral did not start, changing state all the time, so that
Herdr's one server-wide ``state_change_seq`` moves under every test (docs/hosts.md).

Only the suites that ask for ``host`` run twice; the others keep their own process-host worlds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from fake_herdr import FakeHerdr

from runner.agents.abc import AgentHost
from runner.agents.herdr import HerdrHost
from runner.agents.kinds import Kinds
from runner.agents.process import ProcessHost
from runner.sql.store_sqlite import SQLiteStore
from tests.service.agents_world import World

BACKGROUND_AGENTS = 4  # on Herdr: busy agents corral did not start, moving the shared counter
# The fake's default work time (0.05 s) can end before its own ``agent prompt --wait --until
# working`` loop sees ``working`` on a loaded machine; a longer run keeps the test about corral.
FAKE_WORK_SECONDS = "0.25"


@dataclass
class HostRig:
    """One agent host to build a world on, and what only that host can tell a test."""

    name: str
    root: Path
    fake: FakeHerdr | None = None
    background: frozenset[str] = field(default_factory=frozenset)

    def build(self, store: SQLiteStore, kinds: Kinds) -> AgentHost:
        """The host itself: the process host keeps its slots in ``store``; Herdr keeps its own state."""
        if self.name == "process":
            return ProcessHost(store, self.root / "agents", kinds)
        return HerdrHost(kinds, workspace="w1")

    def prompts(self, pane_id: str) -> int:
        """How many prompts ever reached the agent in ``pane_id``, read from the host's own records
        (never through corral): the process host's run logs, the fake Herdr's typed prompts."""
        if self.fake is None:
            return len(list((self.root / "agents" / pane_id).glob("run-*.log")))
        return len(self.fake.agent(pane_id)["prompts"])


@pytest.fixture(params=["process", "herdr"])
def host(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[HostRig]:
    if request.param == "process":
        yield HostRig("process", tmp_path)
        return
    fake: FakeHerdr = request.getfixturevalue("fake_herdr")
    monkeypatch.setenv("FAKE_HERDR_WORK_SECONDS", FAKE_WORK_SECONDS)
    background = frozenset(fake.add_background_agents(BACKGROUND_AGENTS))
    yield HostRig("herdr", tmp_path, fake, background)
    assert background <= set(fake.state()["panes"]), "the background agents ran throughout"


@pytest.fixture
def make_world(tmp_path: Path) -> Iterator[Callable[..., World]]:
    """A reviewer world on a host of the test's own (``make_world(host_factory)``), its store closed
    at the end whatever the test did: a PostgreSQL store's connection is never left to the garbage
    collector (which warns, failing whatever test runs then)."""
    made: list[World] = []

    def make(host_factory: Callable[[Any, Path], Any] | None = None) -> World:
        made.append(World(tmp_path, host_factory))
        return made[-1]

    yield make
    for w in made:
        w.store.close()


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    """The reviewer world (:class:`tests.service.agents_world.World`); suites with a world of their own
    (hosts, writers, adopted panes) define their own ``world`` fixture, which overrides this one."""
    w = World(tmp_path)
    yield w
    w.store.close()
