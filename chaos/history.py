"""One recorded client operation, and a history of them as JSON lines.

Times are seconds from one monotonic source (the harness's ``time.monotonic``, which every client
thread reads on the same machine): ``invoke`` just before the request is written to the client
process, ``complete`` just after its answer is read. An operation whose client was killed, or that
did not answer within its deadline, or that failed in a way that does not say whether it took effect
(the store unreachable or busy, an internal error), is ``unknown``: it may or may not have taken
effect, at any moment after its invocation, and its ``complete`` is None.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

Status = Literal["ok", "refused", "unknown"]

# The codes after which corral cannot say whether the operation took effect: the store's server went
# away or stayed locked mid-transaction, or something unexpected happened. Every other refusal is a
# guard's answer, given before anything was written.
INDETERMINATE_CODES = frozenset({"store_unavailable", "store_busy", "internal", "killed", "timeout", "lost"})


@dataclass
class Op:
    """One client operation: who, what, when it was invoked and when (if ever) it completed."""

    id: int
    process: str  # the client's name: store/home/client (stable across its restarts)
    pid: int  # the OS process that ran it
    key: str  # the object it acts on: "<store>:controller/<id>" (the checker's partition)
    op: str  # acquire, renew, resume, takeover, release, read
    args: dict[str, Any]
    invoke: float
    complete: float | None = None
    status: Status = "unknown"
    code: str | None = None  # the error code of a refusal or of an unknown outcome
    result: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> Op:
        return cls(**doc)

    def describe(self) -> str:
        """One line for a report: ``#12 sqlite/A/c1 renew(lease …, gen 3) [1.204-1.230] ok gen 3``."""
        args = ", ".join(f"{k}={_short(v)}" for k, v in self.args.items())
        end = f"{self.complete:.3f}" if self.complete is not None else "?"
        outcome = self.status if self.code is None else f"{self.status} {self.code}"
        result = ", ".join(f"{k}={_short(v)}" for k, v in self.result.items())
        return f"#{self.id} {self.process} {self.op}({args}) [{self.invoke:.3f}-{end}] {outcome}" + (
            f" {result}" if result else ""
        )


def _short(value: Any) -> str:
    text = str(value)
    return text[:8] if len(text) == 36 and text.count("-") == 4 else text  # a lease id by its first 8 digits


def write(path: Path, ops: Iterable[Op]) -> None:
    """The history as JSON lines, one operation a line."""
    with path.open("w", encoding="utf-8") as out:
        for op in ops:
            out.write(json.dumps(op.to_dict(), sort_keys=True) + "\n")


def read(path: Path) -> Iterator[Op]:
    """The operations of a history written by :func:`write`."""
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            if line.strip():
                yield Op.from_dict(json.loads(line))
