"""``python -m runner.cli``: the same as the ``corral`` console script."""

from __future__ import annotations

from runner.cli.app import run

run()
