"""Reading a plan's step records out of its events: each plan event carries the records it committed.

A ``step`` event records the outcome of one step (or of a run of pure steps) and the start of the next
(``params.records``, in order); ``finish``, ``fail`` and ``pause`` carry the last outcome the same way.
An event fired in the single form (``params.step_id`` and ``params.record``) carries one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def records_of(payload: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(step id, record) for each record one plan event's payload committed, in order."""
    params = payload.get("params") or {}
    if "records" in params:
        return [(str(r["step_id"]), dict(r["record"])) for r in params["records"]]
    if "step_id" in params and "record" in params:
        return [(str(params["step_id"]), dict(params["record"]))]
    return []


def step_records(payloads: Iterable[Mapping[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """Every record the events committed, in the order they were committed."""
    return [found for payload in payloads for found in records_of(payload)]


def steps_by_id(summary: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """A plan summary's ``steps`` (a list in run order, as every surface shows it) keyed by step id."""
    return {str(step["id"]): dict(step) for step in summary["steps"]}
