"""What the waits return: the settled targets of a wait-any."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from runner.agents.abc import Observation


@dataclass(frozen=True)
class Winner:
    """One settled target of a wait: its observation and its visible output (bounded)."""

    target: str
    observation: Observation
    output: str = field(repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target, "observation": self.observation.to_dict(), "output": self.output}


@dataclass(frozen=True)
class WaitAnyResult:
    """The winners of a wait: one when a wait ended it, every target already settled when some were.

    ``target``/``observation``/``output`` at the top are the first winner's (the shape before winners)."""

    winners: list[Winner]

    @property
    def target(self) -> str:
        return self.winners[0].target

    @property
    def observation(self) -> Observation:
        return self.winners[0].observation

    def to_dict(self) -> dict[str, Any]:
        return {**self.winners[0].to_dict(), "winners": [w.to_dict() for w in self.winners]}
