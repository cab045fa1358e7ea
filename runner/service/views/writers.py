"""What a writer lane's verify returns, and the error a failed validation raises."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from runner.errors import RefusedError
from runner.service.views.leases import AgentLeaseView


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
        """The names of the bootstrap steps and validations that did not pass."""
        records = [*self.verification.get("bootstrap", []), *self.verification["results"]]
        return [str(r["name"]) for r in records if not r.get("passed")]

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
