"""The chaos checker's lease model: real lease histories pass, impossible ones are named.

Hand-made histories of one controller id (times in seconds; the harness records the real ones), and a
Hypothesis property: any history produced by a correct lease, each operation taking effect at one
moment inside its interval (some of them with their outcome lost), is linearizable.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chaos import lease, linearizable
from chaos.history import Op
from chaos.synthetic import TrueLease
from tests.support.examples import examples

KEY = "sqlite:controller/c0"


class Writer:
    """Builds one history, an operation at a time."""

    def __init__(self) -> None:
        self.ops: list[Op] = []

    def add(
        self,
        op: str,
        start: float,
        end: float | None,
        status: str = "ok",
        code: str | None = None,
        process: str = "p1",
        **fields: Any,
    ) -> Op:
        args = {k: v for k, v in fields.items() if k in ("lease", "gen", "token", "new_lease", "new_token", "expect")}
        result = {k.removeprefix("r_"): v for k, v in fields.items() if k.startswith("r_")}
        done = Op(len(self.ops), process, 1, KEY, op, args, start, end, status, code, result)  # type: ignore[arg-type]
        self.ops.append(done)
        return done


def test_an_acquire_renew_takeover_release_history_is_linearizable() -> None:
    h = Writer()
    h.add("acquire", 0, 1, new_lease="L1", new_token="t1", r_lease="L1", r_gen=1)
    h.add("renew", 2, 3, lease="L1", gen=1, token="t1", r_gen=1)
    h.add("acquire", 2.5, 3.5, "refused", "lease_held", process="p2", new_lease="L9", new_token="t9")
    h.add("takeover", 4, 5, process="p2", expect="L1", new_lease="L2", new_token="t2", r_lease="L2", r_gen=2)
    h.add("renew", 4.5, 6, "refused", "fence_stale", lease="L1", gen=1, token="t1")
    h.add("release", 7, 8, process="p2", lease="L2", gen=2, token="t2")
    h.add("read", 9, 10, r_state="released", r_lease="L2", r_gen=2)
    h.add("acquire", 11, 12, new_lease="L3", new_token="t3", r_lease="L3", r_gen=3)
    report = lease.check(h.ops)
    assert report.anomalies == []
    assert report.operations == 8


def test_concurrent_operations_may_take_effect_in_either_order() -> None:
    h = Writer()
    h.add("acquire", 0, 1, new_lease="L1", new_token="t1", r_lease="L1", r_gen=1)
    # The renew completes after the takeover began: it took effect first, so it is accepted.
    h.add("takeover", 2, 5, process="p2", expect="L1", new_lease="L2", new_token="t2", r_lease="L2", r_gen=2)
    h.add("renew", 3, 6, lease="L1", gen=1, token="t1", r_gen=1)
    assert lease.check(h.ops).anomalies == []


def test_an_unknown_grant_may_or_may_not_have_taken_effect() -> None:
    for later in (2, 3):  # without the lost resume, and with it
        h = Writer()
        h.add("acquire", 0, 1, new_lease="L1", new_token="t1", r_lease="L1", r_gen=1)
        h.add("resume", 2, None, "unknown", "killed", lease="L1", gen=1, token="t1", new_lease="L2", new_token="t2")
        if later == 3:
            h.add("renew", 3, 4, lease="L2", gen=2, token="t2", r_gen=2)
            expect = "L2"
        else:
            h.add("renew", 3, 4, lease="L1", gen=1, token="t1", r_gen=1)
            expect = "L1"
        h.add(
            "takeover",
            5,
            6,
            process="p2",
            expect=expect,
            new_lease="L3",
            new_token="t3",
            r_lease="L3",
            r_gen=later,
        )
        assert lease.check(h.ops).anomalies == [], later


def test_expiry_is_not_judged_a_renew_may_be_refused_lease_expired_and_a_takeover_may_fail() -> None:
    h = Writer()
    h.add("acquire", 0, 1, new_lease="L1", new_token="t1", r_lease="L1", r_gen=1)
    h.add("renew", 2, 3, "refused", "lease_expired", lease="L1", gen=1, token="t1")
    h.add("takeover", 4, 5, "refused", "lease_not_expired", process="p2", expect="L1", new_lease="L2", new_token="t2")
    h.add("resume", 6, 7, lease="L1", gen=1, token="t1", new_lease="L3", new_token="t3", r_lease="L3", r_gen=2)
    assert lease.check(h.ops).anomalies == []


def test_two_holders_granted_the_same_generation_are_caught() -> None:
    h = Writer()
    h.add("acquire", 0, 1, new_lease="L1", new_token="t1", r_lease="L1", r_gen=1)
    h.add("acquire", 2, 3, process="p2", new_lease="L2", new_token="t2", r_lease="L2", r_gen=1)
    report = lease.check(h.ops)
    assert [a.kind for a in report.anomalies] == ["two_holders"]
    anomaly = report.anomalies[0]
    assert anomaly.op.id == 1 and [o.id for o in anomaly.before] == [0]
    assert "two_holders on sqlite:controller/c0" in anomaly.describe()


def test_a_takeover_that_reissues_a_generation_is_two_holders() -> None:
    h = Writer()
    h.add("acquire", 0, 1, new_lease="L1", new_token="t1", r_lease="L1", r_gen=1)
    h.add("resume", 2, 3, lease="L1", gen=1, token="t1", new_lease="L2", new_token="t2", r_lease="L2", r_gen=2)
    h.add("takeover", 4, 5, process="p2", expect="L2", new_lease="L3", new_token="t3", r_lease="L3", r_gen=2)
    kinds = [a.kind for a in lease.check(h.ops).anomalies]
    assert kinds == ["two_holders"]


def test_a_renew_accepted_under_a_superseded_token_is_caught() -> None:
    h = Writer()
    h.add("acquire", 0, 1, new_lease="L1", new_token="t1", r_lease="L1", r_gen=1)
    h.add("takeover", 2, 3, process="p2", expect="L1", new_lease="L2", new_token="t2", r_lease="L2", r_gen=2)
    h.add("renew", 4, 5, lease="L1", gen=1, token="t1", r_gen=1)  # strictly after the takeover: stale
    report = lease.check(h.ops)
    assert [a.kind for a in report.anomalies] == ["stale_fence_accepted"]
    assert report.anomalies[0].op.id == 2
    assert "generation 1" in report.anomalies[0].message


def test_a_wrong_token_for_the_right_grant_is_stale() -> None:
    h = Writer()
    h.add("acquire", 0, 1, new_lease="L1", new_token="t1", r_lease="L1", r_gen=1)
    h.add("renew", 2, 3, "refused", "fence_stale", lease="L1", gen=1, token="forged")
    h.add("release", 4, 5, lease="L1", gen=1, token="forged")
    assert [a.kind for a in lease.check(h.ops).anomalies] == ["stale_fence_accepted"]


def test_a_refusal_the_state_cannot_give_is_caught() -> None:
    h = Writer()
    h.add("acquire", 0, 1, new_lease="L1", new_token="t1", r_lease="L1", r_gen=1)
    h.add("renew", 2, 3, "refused", "fence_stale", lease="L1", gen=1, token="t1")
    assert [a.kind for a in lease.check(h.ops).anomalies] == ["wrong_refusal"]


def test_a_read_of_a_superseded_generation_is_caught() -> None:
    h = Writer()
    h.add("acquire", 0, 1, new_lease="L1", new_token="t1", r_lease="L1", r_gen=1)
    h.add("resume", 2, 3, lease="L1", gen=1, token="t1", new_lease="L2", new_token="t2", r_lease="L2", r_gen=2)
    h.add("read", 4, 5, r_state="active", r_lease="L1", r_gen=1)
    assert [a.kind for a in lease.check(h.ops).anomalies] == ["stale_read"]


def test_partitions_are_checked_apart() -> None:
    h = Writer()
    h.add("acquire", 0, 1, new_lease="L1", new_token="t1", r_lease="L1", r_gen=1)
    other = Writer()
    other.add("acquire", 0.5, 1.5, new_lease="M1", new_token="u1", r_lease="M1", r_gen=1)
    other.ops[0].key = "postgresql:controller/c0"
    report = lease.check([*h.ops, *other.ops])
    assert report.partitions == 2 and report.anomalies == []


# --- the property: a correct lease's histories always pass ---------------------------------------------------
# (TrueLease, in chaos.synthetic, is a lease written apart from the model: the oracle.)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@st.composite
def histories(draw: st.DrawFn) -> list[Op]:
    """A correct lease's history: operations with overlapping intervals, each taking effect at one moment
    inside its interval (in the order of those moments), some of their outcomes lost."""
    true = TrueLease()
    count = draw(st.integers(1, 40))
    known: list[tuple[str, int, str]] = []  # credentials some client was given (or proposed)
    leases: list[str] = []
    plans = []
    for n in range(count):
        start = draw(st.floats(0, 100, allow_nan=False))
        length = draw(st.floats(0.01, 10, allow_nan=False))
        point = draw(st.floats(0, 1, allow_nan=False))
        plans.append((start + point * length, start, start + length, n))
    plans.sort()  # the moments the operations take effect
    ops: list[Op] = []
    for _, start, end, n in plans:
        op = draw(st.sampled_from(["acquire", "renew", "resume", "takeover", "release", "read"]))
        args: dict[str, Any] = {}
        if op in ("renew", "resume", "release"):
            if known and draw(st.booleans()):
                lease_id, gen, token = draw(st.sampled_from(known))
            else:
                lease_id, gen, token = true.lease or "none", true.gen, true.token or "none"
            if draw(st.integers(0, 9)) == 0:
                token = _digest(f"forged{n}")
            args.update(lease=lease_id, gen=gen, token=token)
        if op == "takeover":
            args["expect"] = draw(st.sampled_from(leases)) if leases and draw(st.booleans()) else (true.lease or "x")
        if op in lease.GRANTS:
            args.update(new_lease=f"L{n}", new_token=_digest(f"t{n}"))
            known.append((f"L{n}", true.gen + 1, _digest(f"t{n}")))  # what a grant here would give
            leases.append(f"L{n}")
        status, code, result = true.apply(op, args, draw(st.booleans()))
        lost = draw(st.integers(0, 7)) == 0
        if lost:
            status, code, result, end_time = "unknown", "killed", {}, None
        else:
            end_time = end
        ops.append(Op(n, f"p{n % 4}", 1, KEY, op, args, start, end_time, status, code, result))  # type: ignore[arg-type]
    ops.sort(key=lambda o: o.id)
    return ops


@pytest.mark.slow
@settings(max_examples=examples(300), deadline=None)
@given(histories())
def test_every_history_of_a_correct_lease_is_linearizable(ops: list[Op]) -> None:
    report = lease.check(ops)
    assert report.anomalies == [], "\n".join(a.describe() for a in report.anomalies)


@pytest.mark.slow
@settings(max_examples=examples(200), deadline=None)
@given(histories(), st.data())
def test_a_grant_reporting_a_reused_generation_is_never_linearizable(ops: list[Op], data: st.DataObject) -> None:
    # With every outcome known, each generation is issued by exactly one grant, so a second one is impossible
    # (a lost grant could make a reported generation the right one, so such histories are left out).
    granted = [o for o in ops if o.status == "ok" and o.op in lease.GRANTS and o.result["gen"] > 1]
    if not granted or any(o.status == "unknown" for o in ops):
        return
    victim = data.draw(st.sampled_from(granted))
    victim.result["gen"] = data.draw(st.integers(1, victim.result["gen"] - 1))
    report = lease.check(ops)
    assert report.anomalies, "a reused generation passed"


@pytest.mark.slow
@settings(max_examples=examples(200), deadline=None)
@given(histories(), st.data())
def test_the_keyed_search_for_unknown_outcomes_agrees_with_the_plain_one(ops: list[Op], data: st.DataObject) -> None:
    if data.draw(st.booleans()) and ops:  # an impossible history half of the time
        victim = data.draw(st.sampled_from(ops))
        victim.status, victim.code = ("ok", None) if victim.status == "refused" else ("refused", "fence_stale")
    keyed = linearizable.check(ops, lease.INITIAL, lease.step, lease.applies, lease.keys)
    plain = linearizable.check(ops, lease.INITIAL, lease.step)
    assert keyed.ok == plain.ok


def test_a_takeover_of_a_lease_live_by_every_clock_is_caught_unless_a_clock_was_jumped() -> None:
    h = Writer()
    h.add("acquire", 0, 0.1, new_lease="L1", new_token="t1", r_lease="L1", r_gen=1)
    h.add("renew", 1, 1.1, lease="L1", gen=1, token="t1", r_gen=1)
    h.add("takeover", 3, 3.2, process="p2", expect="L1", new_lease="L2", new_token="t2", r_lease="L2", r_gen=2)
    assert lease.check(h.ops).anomalies == []  # the model leaves expiry out
    (early,) = lease.early_takeovers(h.ops, {}, ttl=5)
    assert early.kind == "early_takeover" and early.op.id == 2 and early.before[0].id == 1
    assert lease.early_takeovers(h.ops, {"p2": [(2.5, 4.0)]}, ttl=5) == []  # the taker's clock ran ahead
    assert lease.early_takeovers(h.ops, {"p1": [(0.5, 1.05)]}, ttl=5) != []  # the acquire still counts
    assert lease.early_takeovers(h.ops, {"p1": [(-1, 2)]}, ttl=5) == []  # both setters' clocks jumped
    h.ops[2].invoke, h.ops[2].complete = 6.5, 6.6  # after the expiry: a takeover is what should happen
    assert lease.early_takeovers(h.ops, {}, ttl=5) == []


def test_postgresql_clients_are_never_skewed_so_early_takeover_judges_them_whatever_the_jumps() -> None:
    """PostgreSQL judges expiry by its server's clock (its workers get no jumping clock): the nemesis's
    jumps of their clock files leave no window, and an early takeover there is caught."""
    from chaos.run import _skewed

    def jump(store: str, target: str) -> dict[str, object]:
        return {"kind": "clock_jump", "store": store, "target": target, "at": 2.5, "until": 4.0}

    faults = [
        jump("sqlite", "sqlite/A/1"),
        jump("postgresql", "postgresql/A/1"),
        {**jump("sqlite", "x"), "until": None},
    ]
    assert _skewed(faults) == {"sqlite/A/1": [(2.5, 4.0)], "x": [(2.5, float("inf"))]}
    h = Writer()
    h.add("acquire", 0, 0.1, new_lease="L1", new_token="t1", r_lease="L1", r_gen=1)
    h.add("takeover", 3, 3.2, process="postgresql/A/1", expect="L1", new_lease="L2", new_token="t2", r_gen=2)
    assert [a.kind for a in lease.early_takeovers(h.ops, _skewed(faults), ttl=5)] == ["early_takeover"]
