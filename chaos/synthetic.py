"""Histories of a correct controller lease, made up: what the checker's benchmark and property test feed it.

:class:`TrueLease` is a controller lease written apart from the checker's model (the oracle: what a
correct corral answers). :func:`history` simulates clients over it: each client does one operation at
a time, each operation takes effect at one moment inside its interval, in the order of those
moments, and some outcomes are lost (as a killed client's are). Every such history is linearizable.
"""

from __future__ import annotations

import hashlib
import heapq
import random
from typing import Any, cast

from chaos.history import Op, Status

OPS = ("acquire", "renew", "resume", "takeover", "release", "read")


class TrueLease:
    """A correct controller lease: the answers corral must give (expiry decided by the caller)."""

    def __init__(self) -> None:
        self.state, self.lease, self.gen, self.token = "absent", None, 0, None

    def holds(self, args: dict[str, Any]) -> bool:
        current = (self.lease, self.gen, self.token)
        return self.state == "active" and (args.get("lease"), args.get("gen"), args.get("token")) == current

    def apply(self, op: str, args: dict[str, Any], expired: bool) -> tuple[str, str | None, dict[str, Any]]:
        """(status, code, result) of ``op`` now; ``expired``: whether the lease has expired by the store's clock."""

        def grant() -> tuple[str, None, dict[str, Any]]:
            self.state, self.lease, self.gen, self.token = "active", args["new_lease"], self.gen + 1, args["new_token"]
            return "ok", None, {"lease": self.lease, "gen": self.gen}

        if op == "read":
            if self.state == "absent":
                return "refused", "controller_unknown", {}
            return "ok", None, {"state": self.state, "lease": self.lease, "gen": self.gen}
        if op == "acquire":
            return ("refused", "lease_held", {}) if self.state == "active" else grant()
        if op == "takeover":
            if self.state == "absent":
                return "refused", "controller_unknown", {}
            if self.state == "released":
                return "refused", "lease_not_held", {}
            if not expired:
                return "refused", "lease_not_expired", {}
            return grant() if args["expect"] == self.lease else ("refused", "lease_mismatch", {})
        if self.state == "absent":
            return "refused", "controller_unknown", {}
        if not self.holds(args):
            return "refused", "fence_stale", {}
        if op == "renew":
            return ("refused", "lease_expired", {}) if expired else ("ok", None, {"gen": self.gen})
        if op == "resume":
            return grant()
        self.state = "released"
        return "ok", None, {}


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def history(count: int, seed: int = 0, partitions: int = 4, clients: int = 4, lost: float = 0.03) -> list[Op]:
    """``count`` operations of ``clients`` clients per partition, a correct lease per partition."""
    rng = random.Random(seed)
    leases = [TrueLease() for _ in range(partitions)]
    held: dict[tuple[int, int], list[tuple[str, int, str]]] = {}
    seen: dict[tuple[int, int], str] = {}
    # Each client's next operation: (its effect moment, start, end, partition, client); one at a time each.
    pending: list[tuple[float, float, float, int, int]] = []

    def schedule(start: float, part: int, client: int) -> None:
        length = rng.uniform(0.001, 0.03)
        heapq.heappush(pending, (start + rng.random() * length, start, start + length, part, client))

    for part in range(partitions):
        for client in range(clients):
            schedule(rng.uniform(0, 0.05), part, client)
    ops: list[Op] = []
    while len(ops) < count:
        _, start, end, part, client = heapq.heappop(pending)
        true, mine = leases[part], held.setdefault((part, client), [])
        op = rng.choice(OPS)
        if op in ("renew", "resume", "release") and not mine:
            op = "acquire"
        if op == "takeover" and (part, client) not in seen:
            op = "read"
        args: dict[str, Any] = {}
        if op in ("renew", "resume", "release"):
            lease, gen, token = mine[-1] if rng.random() < 0.8 else rng.choice(mine)
            args.update(lease=lease, gen=gen, token=token if rng.random() > 0.05 else digest(f"forged{len(ops)}"))
        if op == "takeover":
            args["expect"] = seen[(part, client)]
        if op in ("acquire", "resume", "takeover"):
            args.update(new_lease=f"L{len(ops)}", new_token=digest(f"t{len(ops)}"))
        status, code, result = true.apply(op, args, rng.random() < 0.3)
        if status == "ok" and op in ("acquire", "resume", "takeover"):
            mine.append((args["new_lease"], result["gen"], args["new_token"]))
            seen[(part, client)] = args["new_lease"]
        if status == "ok" and op == "read":
            seen[(part, client)] = result["lease"]
        del mine[:-6]
        complete: float | None = end
        if rng.random() < lost:
            status, code, result, complete = "unknown", "killed", {}, None
        ops.append(
            Op(
                len(ops),
                f"p{part}.{client}",
                1,
                f"s:controller/c{part}",
                op,
                args,
                start,
                complete,
                cast("Status", status),
                code,
                result,
            )
        )
        schedule(end + rng.uniform(0, 0.05), part, client)
    return ops
