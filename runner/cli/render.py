"""Rendering results for people (aligned text, rich tables) and for programs (``--json``).

rich costs ~0.1 s to import, so the commands on a coordinator's hot path (renew, acquire…) print
plain lines; only listings import it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from runner.context import parse_time
from runner.errors import CorralError


def emit_json(doc: Any) -> None:
    """One JSON document (or one JSON line) on stdout."""
    sys.stdout.write(json.dumps(doc, sort_keys=True, default=str) + "\n")
    sys.stdout.flush()


def emit_error(error: CorralError, as_json: bool) -> None:
    """An error as ``{"error": {...}}`` on stdout for programs, or one readable line on stderr."""
    if as_json:
        emit_json({"error": error.to_dict()})
        return
    sys.stderr.write(f"error [{error.code}]: {error.message}\n")
    for diagnostic in error.details.get("diagnostics", [])[1:]:
        sys.stderr.write(f"  {_diagnostic_line(diagnostic)}\n")


def _diagnostic_line(d: dict[str, Any]) -> str:
    where = d["path"] + (f":{d['line']}" if d.get("line") else "") + (f":{d['column']}" if d.get("column") else "")
    pointer = f" {d['pointer']}" if d.get("pointer") else ""
    return f"{where}: {d['severity']} {d['code']}{pointer}: {d['message']}"


def relative_time(moment: str | None, now: datetime) -> str:
    """``in 14m 59s`` / ``3s ago`` beside a timestamp, for people."""
    if not moment:
        return "-"
    delta = (parse_time(moment) - now).total_seconds()
    span = _span(abs(delta))
    return f"in {span}" if delta >= 0 else f"{span} ago"


def _span(duration: float) -> str:
    seconds = round(duration)
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m {seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h {minutes:02d}m"
    return f"{hours // 24}d {hours % 24}h"


def table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """A table on stdout (rich when it is a terminal; rich degrades to plain text when piped)."""
    from rich.console import Console
    from rich.table import Table

    grid = Table(title=title, box=None, header_style="bold", pad_edge=False)
    for column in columns:
        grid.add_column(column, overflow="fold")
    for row in rows:
        grid.add_row(*("-" if cell is None else str(cell) for cell in row))
    # Piped output gets no terminal width; ids and timestamps read better unfolded than at 80 columns.
    console = Console(soft_wrap=False, width=None if sys.stdout.isatty() else 200)
    console.print(grid)
