"""What cleanup and reconcile return."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Housekeeping:
    """What cleanup or reconcile did (or, for a dry run, would do) to each lease it looked at."""

    applied: bool
    actions: list[dict[str, Any]]

    def to_dict(self) -> dict[str, Any]:
        return {"applied": self.applied, "actions": self.actions}
