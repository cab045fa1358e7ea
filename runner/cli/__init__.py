"""The ``corral`` command-line surface."""

from __future__ import annotations

from runner.cli import adopted as _adopted  # noqa: F401  (registers the adopt commands on cli)
from runner.cli import agents as _agents  # noqa: F401  (registers the agent commands on cli)
from runner.cli import paths as _paths  # noqa: F401
from runner.cli import plans as _plans  # noqa: F401  (registers the plan and recipe commands on cli)
from runner.cli import writers as _writers  # noqa: F401  (registers the writer commands on cli)
from runner.cli.app import cli, main, run

__all__ = ["cli", "main", "run"]
