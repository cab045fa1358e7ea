"""The engine: executes one trigger on one instance (guards, updates, effects, compare-and-set)."""

from __future__ import annotations

from runner.engine.engine import Engine, Plan, Request, Result

__all__ = ["Engine", "Plan", "Request", "Result"]
