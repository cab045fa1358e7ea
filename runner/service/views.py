"""What operations return: read-only views of leases, receipts and results, never a secret.

Each has ``to_dict()``, the JSON shape the CLI prints (a contract: coordinators script against it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from runner.agents.abc import Observation
from runner.errors import RefusedError
from runner.fence import Credential

T = TypeVar("T")


class Page(list[T]):
    """One page of a listing: its rows (a ``list``, as listings returned before they paged) and the cursor.

    ``next_after`` is what to pass as the listing input's ``after`` for the next page (the last row's
    key: a lease's instance id, a controller id, a plan id, a receipt id), or None when no row
    follows. Pages are keyset by instance id, so walking them visits every instance once.
    """

    def __init__(self, rows: Iterable[T] = (), next_after: str | None = None) -> None:
        super().__init__(rows)
        self.next_after = next_after


@dataclass(frozen=True, init=False)
class LeaseView:
    """A lease as listings show it: every public field, the expiry judged by the store's clock."""

    controller_id: str
    state: str
    version: int
    expired: bool
    data: Mapping[str, Any]

    def __init__(self, controller_id: str, state: str, version: int, expired: bool, data: Mapping[str, Any]) -> None:
        # One call instead of a frozen dataclass's field-by-field object.__setattr__ (see runner.context).
        self.__dict__.update(controller_id=controller_id, state=state, version=version, expired=expired, data=data)

    def to_dict(self) -> dict[str, Any]:
        return {
            "controller_id": self.controller_id,
            "state": self.state,
            "expired": self.expired,
            "version": self.version,
            **{k: v for k, v in self.data.items() if k != "controller_id"},
        }


@dataclass(frozen=True)
class Grant:
    """A newly issued lease. ``credential`` holds the token: hand it over once, never log it."""

    lease: LeaseView
    credential: Credential = field(repr=False)
    event_seq: int


@dataclass(frozen=True)
class AgentLeaseView:
    """A reviewer (or writer) lease as listings show it."""

    id: str
    machine: str
    state: str
    version: int
    data: Mapping[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "machine": self.machine, "state": self.state, "version": self.version, **self.data}


@dataclass(frozen=True)
class ReceiptView:
    """A receipt: its state and cursors; never a prompt or an output."""

    state: str
    version: int
    data: Mapping[str, Any]

    @property
    def token(self) -> str:
        return str(self.data["token"])

    def to_dict(self) -> dict[str, Any]:
        return {"state": self.state, "version": self.version, **self.data}


@dataclass(frozen=True)
class CollectResult:
    """A collected (or replayed) result: the receipt and the output captured at its settled cursor."""

    receipt: ReceiptView
    output: str = field(repr=False)
    replayed: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"receipt": self.receipt.to_dict(), "output": self.output, "replayed": self.replayed}


@dataclass(frozen=True)
class CloseResult:
    lease: AgentLeaseView
    output: str = field(repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {"lease": self.lease.to_dict(), "output": self.output}


@dataclass(frozen=True)
class AskManyResult:
    """Mode ``all``: every result. Mode ``first``: the first result and the other receipts, still pending."""

    results: list[CollectResult]
    pending_receipts: list[ReceiptView]

    def to_dict(self) -> dict[str, Any]:
        return {
            "results": [r.to_dict() for r in self.results],
            "pending_receipts": [r.to_dict() for r in self.pending_receipts],
        }


@dataclass(frozen=True)
class Winner:
    """One settled target of a wait: its observation and its visible output (bounded)."""

    target: str
    observation: Observation
    output: str = field(repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target, "observation": self.observation.to_dict(), "output": self.output}


@dataclass(frozen=True)
class WaitAnyResult:
    """The winners of a wait: one when a wait ended it, every target already settled when some were.

    ``target``/``observation``/``output`` at the top are the first winner's (the shape before winners)."""

    winners: list[Winner]

    @property
    def target(self) -> str:
        return self.winners[0].target

    @property
    def observation(self) -> Observation:
        return self.winners[0].observation

    def to_dict(self) -> dict[str, Any]:
        return {**self.winners[0].to_dict(), "winners": [w.to_dict() for w in self.winners]}


@dataclass(frozen=True)
class Housekeeping:
    """What cleanup or reconcile did (or, for a dry run, would do) to each lease it looked at."""

    applied: bool
    actions: list[dict[str, Any]]

    def to_dict(self) -> dict[str, Any]:
        return {"applied": self.applied, "actions": self.actions}


@dataclass(frozen=True)
class VerifyResult:
    """A recorded validation; ``tails`` (output ends, when asked for) are in the reply only."""

    lease: AgentLeaseView
    verification: dict[str, Any]
    tails: dict[str, str] = field(default_factory=dict, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {"lease": self.lease.to_dict(), "verification": self.verification, "tails": self.tails}

    @property
    def failed(self) -> list[str]:
        """The names of the validations that did not pass."""
        return [str(r["name"]) for r in self.verification["results"] if not r.get("passed")]

    def check(self) -> None:
        """Raise :class:`ValidationFailedError` (with this result) unless every validation passed: a
        failed validation must never read as success to a caller that only looks at the exit status."""
        if self.verification["passed"]:
            return
        raise ValidationFailedError(
            f"lane {self.lease.data.get('name')!r}: validation failed ({', '.join(self.failed)}); "
            "the result is recorded against the lane",
            lane=self.lease.id,
            failed=self.failed,
            result=self.to_dict(),
        )


class ValidationFailedError(RefusedError):
    """A lane's validations ran and at least one failed; the result *is* recorded against the lane.

    Raised by ``corral writer verify`` and a plan's ``writer.verify`` step (catchable with ``catch``)
    from :meth:`VerifyResult.check`; ``details["result"]`` holds the recorded result (and any tails).
    Fix the lane's work and verify again.
    """

    default_code = "validation_failed"
