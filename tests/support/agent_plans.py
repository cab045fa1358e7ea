"""A service over a real SQLite file and the process host, with a plans component running the given
recipes and the stream agent as its agent kind: what the tests of agent runs inside plans stand on."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from pathlib import Path

from runner.agents.kinds import Kinds
from runner.agents.process import ProcessHost
from runner.definitions.recipes import RecipeLibrary
from runner.plans.keeper import MemoryKeeper
from runner.plans.ops import OPERATIONS
from runner.service import Service
from runner.service.plans import Plans
from runner.sql.store_sqlite import SQLiteStore
from tests.support import stream_agent
from tests.support.specs import shared_library


class AgentPlans:
    """Under ``root``: ``recipes/`` (each of ``recipes``, dedented), ``corral.db``, the agents' files,
    ``scratch/``, and ``project/`` (one file) for the agents to work in; the keeper holds credentials
    in memory (``keeper``). Close ``store`` at the end."""

    def __init__(self, root: Path, recipes: Mapping[str, str]) -> None:
        config = root / "agents.yaml"
        config.write_text(stream_agent.kind_yaml())
        directory = root / "recipes"
        directory.mkdir()
        for name, text in recipes.items():
            (directory / f"{name}.yaml").write_text(textwrap.dedent(text))
        self.store = SQLiteStore(root / "corral.db")
        kinds = Kinds.load([config])
        host = ProcessHost(self.store, root / "agents", kinds)
        self.service = Service(
            self.store,
            shared_library(),
            actor="test",
            hosts=lambda name: host,
            kinds=kinds,
            plans=lambda service: self.plans,  # (built below; asked for only later, by service.board)
        )
        (root / "scratch").mkdir()
        self.keeper = MemoryKeeper()
        self.plans = Plans(self.service, RecipeLibrary([directory]), self.keeper, OPERATIONS, scratch=root / "scratch")
        self.project = root / "project"
        self.project.mkdir()
        (self.project / "main.py").write_text("print('hi')\n")
