"""In-process counts for ``corral serve``'s ``/metrics``: the seam the core reports to.

What only the process that does it can see (a guard's refusal, a wait, a busy store, an SSE
subscriber) is reported here as it happens. :data:`SINK` is None in every process but a ``corral
serve`` (which sets it to its Prometheus sink, :mod:`runner.observe.metrics`), so a call site costs one
global read: ``if meter.SINK is not None: meter.SINK.refused(code)``. This module imports nothing.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's: the engine imports this module on the cold path of every command
if TYPE_CHECKING:
    from typing import Protocol

    class Sink(Protocol):
        """What the core reports (labels are stable codes and names, never an id, a path or a token)."""

        def transition(self, machine: str, trigger: str) -> None: ...

        def refused(self, code: str) -> None: ...

        def step(self, state: str) -> None: ...

        def waited(self, tool: str, outcome: str, seconds: float) -> None: ...

        def store_busy(self, outcome: str) -> None: ...

        def subscribers(self, delta: int) -> None: ...


SINK: Sink | None = None
"""The process's sink, or None: nothing is counted."""
