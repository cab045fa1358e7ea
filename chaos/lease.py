"""The controller lease's sequential model, and the check of a recorded lease history against it.

The model's state is what the fence is made of: ``(state, lease_id, generation, token)`` with
``state`` one of ``absent`` (never granted), ``active``, ``released``, and ``token`` the digest of the
current grant's token (the clients propose every grant's lease id and token themselves, as the CLI's
credential files do, so even a grant whose client died is known by what it would have granted).

What the model does not know is time: expiry is judged by the store's clock, which is each client
process's own clock (both adapters' ``now`` is the caller's wall clock) and the nemesis jumps those
clocks. So wherever expiry decides (renew refused ``lease_expired``; takeover granted or refused
``lease_not_expired``) both answers are allowed, and what must hold is the fence:

- a grant (acquire, resume, takeover) issues generation current + 1, never one already issued;
- acquire is granted only when no lease is active (absent or released), else ``lease_held``;
- renew, resume and release succeed only with the current credential (lease id, generation and
  token of the active grant); any other is ``fence_stale`` (``controller_unknown`` before the first);
- takeover is granted only against the active lease it names;
- a read sees exactly the current state, lease id and generation.

An anomaly names its kind (``two_holders``, ``stale_fence_accepted``, ``generation_skipped``,
``wrong_refusal``, ``stale_read``), the operation no linearization can place, the model state there,
and the operations placed just before it.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any, cast

from chaos import linearizable
from chaos.history import Op

State = tuple[str, str | None, int, str | None]  # (state, lease_id, generation, token digest)
INITIAL: State = ("absent", None, 0, None)
GRANTS = ("acquire", "resume", "takeover")


def _holds(state: State, args: dict[str, Any]) -> bool:
    """Whether the credential in ``args`` is the current grant's."""
    st, lease, generation, token = state
    return (
        st == "active" and args.get("lease") == lease and args.get("gen") == generation and args.get("token") == token
    )


def _granted(state: State, op: Op) -> tuple[State | None, str | None]:
    """The state after ``op`` granted (the new lease it proposed, the next generation)."""
    _, _, generation, _ = state
    if op.status == "ok":
        got = op.result.get("gen")
        if got != generation + 1:
            kind = "two_holders" if isinstance(got, int) and got <= generation else "generation_skipped"
            return None, f"{kind}: {op.op} granted generation {got}, but generation {generation} was the last issued"
        if op.result.get("lease") != op.args["new_lease"]:
            return None, f"two_holders: {op.op} answered lease {op.result.get('lease')}, not the one it proposed"
    return ("active", op.args["new_lease"], generation + 1, op.args["new_token"]), None


def _refusal(state: State, op: Op) -> tuple[State | None, str | None]:
    """A refusal is no effect; it is possible only in the states where the guard that gave it says no."""
    st, lease, generation, _ = state
    code = op.code
    possible: bool
    if code == "controller_unknown":
        possible = st == "absent"
    elif code == "lease_held":
        possible = st == "active"
    elif code == "fence_stale":
        possible = st != "absent" and not _holds(state, op.args)
    elif code == "lease_expired":
        possible = op.op == "renew" and _holds(state, op.args)
    elif code == "lease_not_expired":
        possible = st == "active"
    elif code == "lease_mismatch":
        possible = st == "active" and op.args.get("expect") != lease
    elif code == "lease_not_held":
        possible = st == "released"
    else:
        possible = True  # a code the model does not judge (counted apart, as unexpected, by the report)
    if possible:
        return state, None
    return (
        None,
        f"wrong_refusal: {op.op} refused {code} while the lease is {st} (lease {lease}, generation {generation})",
    )


def step(state: Hashable, op: Op) -> tuple[Hashable | None, str | None]:
    """The model: the state after ``op`` with its recorded outcome, or None and why it is impossible."""
    current = cast("State", state)
    st, lease, generation, _ = current
    if op.status == "refused":
        return _refusal(current, op)
    unknown = op.status == "unknown"
    name = op.op
    if name == "acquire":
        if st == "active":
            return None, f"two_holders: acquire granted while lease {lease} (generation {generation}) is active"
        return _granted(current, op)
    if name in ("resume", "renew", "release") and not _holds(current, op.args):
        if unknown:
            return None, "a stale credential has no effect"
        if st != "active":
            why = f"the lease is {st}"
        elif (op.args.get("lease"), op.args.get("gen")) == (lease, generation):
            why = "its token is not that grant's"
        else:
            why = f"the current grant is {lease} generation {generation}"
        return None, (
            f"stale_fence_accepted: {name} accepted with the credential of lease {op.args['lease']} "
            f"generation {op.args['gen']}, but {why}"
        )
    if name == "resume":
        return _granted(current, op)
    if name == "takeover":
        if st != "active" or op.args["expect"] != lease:
            return None, f"two_holders: takeover of lease {op.args['expect']} granted while the lease is {st} ({lease})"
        return _granted(current, op)
    if name == "renew":
        if unknown:
            return None, "a renew changes nothing the model holds"
        if op.result.get("gen") not in (None, generation):
            return None, f"stale_read: renew answered generation {op.result.get('gen')}, current {generation}"
        return current, None
    if name == "release":
        return ("released", lease, generation, current[3]), None
    if name == "read":
        if unknown:
            return None, "a read changes nothing"
        seen = (op.result.get("state"), op.result.get("lease"), op.result.get("gen"))
        if seen != (st, lease, generation):
            return None, f"stale_read: read {seen}, but the lease is {(st, lease, generation)}"
        return current, None
    raise ValueError(f"the lease model knows no operation {name!r}")


def applies(op: Op) -> Hashable | None:
    """The key of the states an unknown ``op`` may take effect in (None: it changes nothing the model holds)."""
    a = op.args
    if op.op == "acquire":
        return ("free",)
    if op.op in ("resume", "release"):
        return ("holds", a.get("lease"), a.get("gen"), a.get("token"))
    if op.op == "takeover":
        return ("lease", a.get("expect"))
    return None  # a renew or a read


def keys(state: Hashable) -> tuple[Hashable, ...]:
    """The keys of ``state``: which unknown operations could take effect in it."""
    st, lease, generation, token = cast("State", state)
    if st != "active":
        return (("free",),)
    return (("holds", lease, generation, token), ("lease", lease))


@dataclass
class Anomaly:
    """A history (one store's controller id) that no order of its operations explains."""

    kind: str
    key: str
    message: str
    op: Op
    before: list[Op] = field(default_factory=list)
    state: Any = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "key": self.key,
            "message": self.message,
            "op": self.op.to_dict(),
            "before": [o.to_dict() for o in self.before],
            "state": list(self.state) if self.state is not None else None,
        }

    def describe(self) -> str:
        lines = [f"{self.kind} on {self.key}: {self.message}", f"  cannot place {self.op.describe()}"]
        if self.before:
            lines.append("  after:")
            lines += [f"    {o.describe()}" for o in self.before]
        return "\n".join(lines)


@dataclass
class Report:
    """The lease check of a whole history: per partition, and the anomalies found."""

    operations: int
    partitions: int
    steps: int
    seconds: float
    anomalies: list[Anomaly]
    unexpected_codes: dict[str, int]

    def to_dict(self) -> dict[str, Any]:
        return {
            "operations": self.operations,
            "partitions": self.partitions,
            "steps": self.steps,
            "seconds": round(self.seconds, 4),
            "anomalies": [a.to_dict() for a in self.anomalies],
            "unexpected_codes": self.unexpected_codes,
        }


def early_takeovers(
    ops: Iterable[Op], skewed: dict[str, list[tuple[float, float]]], ttl: float, margin: float = 0.25
) -> list[Anomaly]:
    """Takeovers granted while the lease was certainly live by every clock involved (``early_takeover``).

    The model leaves expiry out, because the nemesis jumps clocks. Where it did not, expiry must hold:
    a renew or grant of lease L that succeeded set L's expiry to at least its invocation + ``ttl`` (by
    its client's clock), so a takeover of L that succeeded and ended before that, by a client whose
    clock was right too, took over a live lease. ``skewed``: by client, the windows its clock was
    jumped (the nemesis's record); an operation within ``margin`` s of one is not judged.
    """

    def sane(op: Op) -> bool:
        end = op.complete if op.complete is not None else float("inf")
        windows = skewed.get(op.process, [])
        return not any(start - margin < end and op.invoke < stop + margin for start, stop in windows)

    ops = list(ops)
    setters: dict[tuple[str, str], list[Op]] = defaultdict(list)  # (partition, lease id): who set its expiry
    for op in ops:
        if op.status != "ok":
            continue
        if op.op in GRANTS:
            setters[(op.key, op.args["new_lease"])].append(op)
        elif op.op == "renew":
            setters[(op.key, op.args["lease"])].append(op)
    found: list[Anomaly] = []
    for taken in ops:
        if taken.op != "takeover" or taken.status != "ok" or taken.complete is None or not sane(taken):
            continue
        live = [s for s in setters[(taken.key, taken.args["expect"])] if s is not taken and sane(s)]
        live = [s for s in live if taken.complete < s.invoke + ttl - margin]
        if live:
            setter = max(live, key=lambda s: s.invoke)  # the latest: the strongest evidence
            message = (
                f"takeover of lease {taken.args['expect']} granted at most {taken.complete - setter.invoke:.2f} s "
                f"after #{setter.id} ({setter.op}) set it to expire {ttl:g} s later, no clock jumped"
            )
            found.append(Anomaly("early_takeover", taken.key, message, taken, [setter]))
    return found


KNOWN_CODES = frozenset(
    {
        "controller_unknown",
        "lease_held",
        "fence_stale",
        "lease_expired",
        "lease_not_expired",
        "lease_mismatch",
        "lease_not_held",
    }
)


def check(ops: Iterable[Op]) -> Report:
    """Check every partition (store and controller id) of ``ops`` against the lease model."""
    started = time.perf_counter()
    parts: dict[str, list[Op]] = defaultdict(list)
    unexpected: dict[str, int] = defaultdict(int)
    total = 0
    for op in ops:
        total += 1
        parts[op.key].append(op)
        if op.status == "refused" and op.code not in KNOWN_CODES:
            unexpected[str(op.code)] += 1
    anomalies: list[Anomaly] = []
    steps = 0
    for key in sorted(parts):
        verdict = linearizable.check(parts[key], INITIAL, step, applies, keys)
        steps += verdict.steps
        if not verdict.ok:
            assert verdict.blocked is not None and verdict.reason is not None
            kind, _, message = verdict.reason.partition(": ")
            if not message:
                kind, message = "not_linearizable", verdict.reason
            anomalies.append(Anomaly(kind, key, message, verdict.blocked, verdict.before, verdict.state))
    return Report(total, len(parts), steps, time.perf_counter() - started, anomalies, dict(unexpected))
