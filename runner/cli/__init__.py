"""The ``corral`` command-line surface."""

from __future__ import annotations

from runner.cli.app import cli, main, run

__all__ = ["cli", "main", "run"]
