"""What the receipts' operations return: a receipt, a collected result, a batch's results."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runner.service.views.records import Record


class ReceiptView(Record):
    """A receipt: its state and cursors; never a prompt or an output."""

    _fields = ("state", "version", "data")
    state: str
    version: int
    data: Mapping[str, Any]

    def __init__(self, state: str, version: int, data: Mapping[str, Any]) -> None:
        self._set(state=state, version=version, data=data)

    @property
    def token(self) -> str:
        return str(self.data["token"])

    def to_dict(self) -> dict[str, Any]:
        return {"state": self.state, "version": self.version, **self.data}


class CollectResult(Record):
    """A collected (or replayed) result: the receipt and the output captured at its settled cursor."""

    _fields = ("receipt", "output", "replayed")
    _hidden = ("output",)
    receipt: ReceiptView
    output: str
    replayed: bool

    def __init__(self, receipt: ReceiptView, output: str, replayed: bool = False) -> None:
        self._set(receipt=receipt, output=output, replayed=replayed)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"receipt": self.receipt.to_dict(), "output": self.output, "replayed": self.replayed}
        data = self.receipt.data
        if "denials" in data:  # a driven run (claude, codex): what it did and what was refused
            out["denials"] = list(data.get("denials") or [])
            out["run"] = {
                k: data.get(k)
                for k in ("session_id", "usage", "cost_usd", "turns", "duration_ms", "tool_calls", "file_changes")
                if k in data
            }
        if "verdict" in data:
            out["verdict"] = data["verdict"]
        return out


class AskManyResult(Record):
    """Mode ``all``: every result. Mode ``first``: the first result and the other receipts, still pending."""

    _fields = ("results", "pending_receipts")
    results: list[CollectResult]
    pending_receipts: list[ReceiptView]

    def __init__(self, results: list[CollectResult], pending_receipts: list[ReceiptView]) -> None:
        self._set(results=results, pending_receipts=pending_receipts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "results": [r.to_dict() for r in self.results],
            "pending_receipts": [r.to_dict() for r in self.pending_receipts],
        }
