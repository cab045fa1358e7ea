"""A driven run's live progress: its tool calls and file changes, read from its log as it grows.

The seam between a structured driver's parser (:meth:`runner.agents.drivers.Driver.progress_step`)
and the surfaces that show a run while it streams: ``agent read``, the MCP waits' progress
notifications, the SSE stream's ``agent.progress`` events and the dashboard. What it yields is names
and paths only (``tool Read src/a.py``, ``file src/a.py``, ``tool shell``), never contents, commands or
any other argument of a tool.

A :class:`ProgressReader` follows one run's log: each :meth:`~ProgressReader.poll` reads only the bytes
appended since the last, hands the complete lines to the driver together with what the earlier lines
taught it (a Claude ``tool_use`` id's tool and path, so its result can name the file it changed), and
keeps a partial last line for the next poll. Progress is derived, not recorded: the log on disk is the
source, so any process can read it again from the start (a restarted server, a reconnecting client).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from runner.agents.drivers import Driver, RunSpec

MAX_LINES = 2000
"""The progress lines one run keeps (a longer run's later lines are counted in ``total``, not kept)."""
READ_BYTES = 1 << 20
"""What one read of a log takes at most (a poll reads until the end, a chunk at a time)."""
LINE_CHARS = 500
"""A progress line's length at most (a path is the model's to choose: longer ones end in ``…``)."""
READERS_KEPT = 128
"""Runs a host follows at once (the least recently polled reader is dropped, and rebuilt if asked again)."""


def progress_item(line: str) -> dict[str, str]:
    """One progress line as a structured item: ``{"type": "tool", "tool", "path"}`` or ``{"type": "file",
    "path"}`` (``path`` empty when the tool names none)."""
    kind, _, rest = line.partition(" ")
    if kind == "file":
        return {"type": "file", "path": rest}
    name, _, path = rest.partition(" ")
    return {"type": "tool", "tool": name, "path": path}


@dataclass(frozen=True)
class RunProgress:
    """Where one run of an agent is: its progress lines from index ``start`` on, and whether it still runs.

    Invariant: ``lines`` are the run's progress lines ``start .. start + len(lines)``, in the order the
    CLI printed them; ``total`` counts every line so far (also those past :data:`MAX_LINES`, not kept).
    """

    pane_id: str
    run: int
    running: bool
    lines: tuple[str, ...] = ()
    start: int = 0
    total: int = 0

    @property
    def items(self) -> list[dict[str, str]]:
        return [progress_item(line) for line in self.lines]

    def to_dict(self) -> dict[str, Any]:
        return {
            "pane_id": self.pane_id,
            "run": self.run,
            "running": self.running,
            "start": self.start,
            "total": self.total,
            "lines": list(self.lines),
            "items": self.items,
        }


@dataclass
class ProgressReader:
    """Follows one run's log, incrementally, through its driver (one reader per run)."""

    log: Path
    driver: Driver
    spec: RunSpec
    offset: int = 0
    partial: bytes = b""
    memo: dict[str, Any] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)
    total: int = 0

    def poll(self, final: bool = False) -> None:
        """Read what the log gained since the last poll; ``final`` (the run ended): its last line too."""
        try:
            with self.log.open("rb") as handle:
                handle.seek(self.offset)
                while chunk := handle.read(READ_BYTES):
                    self.offset += len(chunk)
                    self._feed(self.partial + chunk)
        except FileNotFoundError:
            return
        if final and self.partial:
            self._take([self.partial])
            self.partial = b""

    def _feed(self, data: bytes) -> None:
        *complete, self.partial = data.split(b"\n")
        if complete:
            self._take(complete)

    def _take(self, raw: list[bytes]) -> None:
        shown = self.driver.progress_step([r.decode("utf-8", "replace") for r in raw], self.spec, self.memo)
        shown = [line if len(line) <= LINE_CHARS else line[: LINE_CHARS - 1] + "…" for line in shown]
        self.total += len(shown)
        room = MAX_LINES - len(self.lines)
        if room > 0:
            self.lines.extend(shown[:room])

    def progress(self, pane_id: str, run: int, running: bool, after: int = 0) -> RunProgress:
        """The lines from index ``after`` on (those kept)."""
        start = max(0, min(after, len(self.lines)))
        return RunProgress(pane_id, run, running, tuple(self.lines[start:]), start, self.total)


class ProgressReaders:
    """A host's readers, one per run it was asked about, the least recently used dropped first; safe
    to share between threads (the MCP and HTTP servers poll from worker threads)."""

    def __init__(self, kept: int = READERS_KEPT) -> None:
        self.kept = kept
        self._readers: OrderedDict[Hashable, ProgressReader] = OrderedDict()
        self._lock = threading.Lock()

    def read(self, key: Hashable, make: Any, pane_id: str, run: int, running: bool, after: int = 0) -> RunProgress:
        """Poll the reader of ``key`` (built by ``make()`` on first use) and return its progress."""
        with self._lock:
            reader = self._readers.get(key)
            if reader is None:
                reader = make()
                assert isinstance(reader, ProgressReader)
                self._readers[key] = reader
                while len(self._readers) > self.kept:
                    self._readers.popitem(last=False)
            self._readers.move_to_end(key)
            reader.poll(final=not running)
            return reader.progress(pane_id, run, running, after)
