"""Rendering results for people (aligned, streamed text tables) and for programs (``--json``).

Tables are plain aligned columns written as their rows come (:func:`table`): no layout engine, so a
listing of 30 000 rows is linear and cheap, and nothing here imports rich (the plan runner's live
progress does, ``runner/cli/plans.py``).
"""

from __future__ import annotations

import itertools
import json
import sys
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any

from runner.context import parse_time
from runner.errors import CorralError


def emit_json(doc: Any) -> None:
    """One JSON document (or one JSON line) on stdout."""
    sys.stdout.write(json.dumps(doc, sort_keys=True, default=str) + "\n")
    sys.stdout.flush()


def emit_result(command: str, value: Any) -> None:
    """The result of ``command``'s operation as its document (the one envelope every surface answers)."""
    from runner.service.operations import by_command

    emit_json(by_command(command).document(value))


def listing(
    command: str,
    rows: Any,
    as_json: bool,
    columns: Sequence[str],
    row: Callable[[Any], Sequence[Any]],
    title: str | None = None,
) -> None:
    """A page of a listing: with ``--json`` its operation's document, else an aligned table of
    ``row(each)`` and, on stderr, where the next page starts."""
    if as_json:
        emit_result(command, rows)
        return
    table(title, columns, (row(each) for each in rows))
    page_hint(rows.next_after)


def emit_error(error: CorralError, as_json: bool) -> None:
    """An error as ``{"error": {...}}`` on stdout for programs, or one readable line on stderr."""
    if as_json:
        emit_json({"error": error.to_dict()})
        return
    message = error.message
    diagnostics = list(error.details.get("diagnostics") or [])
    first = next((d for d in diagnostics if d.get("severity") == "error"), diagnostics[0] if diagnostics else None)
    if first is not None and message.startswith(_diagnostic_line(first)):
        # The code is said once, in brackets: not again inside the first diagnostic's line.
        message = _diagnostic_line(first, bare=True) + message[len(_diagnostic_line(first)) :]
    sys.stderr.write(f"error [{error.code}]: {message}\n")
    for diagnostic in diagnostics:
        if diagnostic is not first:
            sys.stderr.write(f"  {_diagnostic_line(diagnostic)}\n")


def _diagnostic_line(d: dict[str, Any], bare: bool = False) -> str:
    """``file:line:col: severity code pointer: message`` (``bare``: without severity and code)."""
    where = d["path"] + (f":{d['line']}" if d.get("line") else "") + (f":{d['column']}" if d.get("column") else "")
    said = "" if bare else f" {d['severity']} {d['code']}"
    pointer = f" {d['pointer']}" if d.get("pointer") else ""
    return f"{where}:{said}{pointer}: {d['message']}" if said or pointer else f"{where}: {d['message']}"


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


SAMPLE_ROWS = 200
"""Rows a table measures its column widths on; later rows are printed as they come, at those widths."""


def table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """Aligned columns on stdout, streamed: widths are measured on the header and the first
    :data:`SAMPLE_ROWS` rows, then every row is written as it comes (a wider cell later pushes only its
    own line), so 30 000 rows cost what writing them costs, never a layout of them all. Cells are
    never folded or cut (ids and timestamps stay whole); None prints as ``-``; the last column is
    not padded. The header is bold on a terminal."""
    out = sys.stdout
    cells = (tuple("-" if cell is None else str(cell) for cell in row) for row in rows)
    sample = list(itertools.islice(cells, SAMPLE_ROWS))
    widths = [len(c) for c in columns]
    for row in sample:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    if title:
        out.write(title + "\n")
    header = _line(widths, columns)
    out.write(f"\x1b[1m{header}\x1b[0m\n" if out.isatty() else header + "\n")
    for row in itertools.chain(sample, cells):
        out.write(_line(widths, row) + "\n")
    out.flush()


def _line(widths: Sequence[int], cells: Sequence[str]) -> str:
    last = len(cells) - 1
    return "  ".join(cell if i == last else cell.ljust(widths[i]) for i, cell in enumerate(cells)).rstrip()


def page_hint(next_after: str | None) -> None:
    """After a text listing cut at ``--limit``: how to get the next page (on stderr, so stdout stays rows)."""
    if next_after is not None:
        sys.stderr.write(f"more: repeat with --after {next_after}\n")


def spend_line(row: dict[str, Any]) -> str:
    """What a lease's runs spent against its budget, as ``status`` and ``plans show`` print it:
    ``session S; 120 tokens of 1000, $0.25 of $1, 1 turn of 5 (1 run)`` (no budget: the spend alone)."""
    spent = row.get("spend") or {}
    budget = row.get("budget") or {}
    tokens = f"{spent.get('tokens', 0)} tokens" + (
        f" of {budget['budget_tokens']}" if "budget_tokens" in budget else ""
    )
    cost = f"${float(spent.get('cost_usd') or 0):.4g}" + (
        f" of ${float(budget['budget_usd']):g}" if "budget_usd" in budget else ""
    )
    turns = spent.get("turns", 0)
    turned = f"{turns} turn{'s' if turns != 1 else ''}" + (
        f" of {budget['max_turns']}" if "max_turns" in budget else ""
    )
    runs = spent.get("runs")
    text = f"{tokens}, {cost}, {turned}" + (f" ({runs} run{'s' if runs != 1 else ''})" if runs is not None else "")
    if row.get("session_id"):
        text = f"session {row['session_id']}; {text}"
    if row.get("exhausted"):
        reached = row["exhausted"]
        text += f"; budget exhausted ({reached['limit']})"
    return text
