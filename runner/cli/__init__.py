"""The ``corral`` command-line surface.

Commands are registered on :data:`runner.cli.app.cli` by their modules (``agents``, ``writers``,
``plans``, ``adopted``, ``paths``), each imported only when one of its commands runs
(:class:`runner.cli.app.LazyGroup`).
"""

from __future__ import annotations

from runner.cli.app import cli, main, run

__all__ = ["cli", "main", "run"]
