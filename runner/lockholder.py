"""A lock holder's record compared: whether two records name the same process. Pure: it reads neither
``/proc`` nor the hostname, so a guard can use it (judging whether a holder is alive is
:mod:`runner.lockstatus`, which does both)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def same(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> bool:
    """Whether two records name the same process."""
    keys = ("pid", "host", "boot_id", "start_time")
    return bool(a) and bool(b) and all(a.get(k) == b.get(k) for k in keys)  # type: ignore[union-attr]
