"""Model checking: ``corral check`` explores machines for their invariants, under faults (no I/O)."""

from __future__ import annotations

from runner.proof.check import CheckOptions, check_machine, render_trace, result_document, trace_document
from runner.proof.explorer import FAULTS, Explorer, Result

__all__ = [
    "FAULTS",
    "CheckOptions",
    "Explorer",
    "Result",
    "check_machine",
    "render_trace",
    "result_document",
    "trace_document",
]
