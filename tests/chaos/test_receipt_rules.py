"""The chaos checker's receipt rules on hand-made histories: each rule names what it catches, and a clean
history (a relay, its collect, an ambiguous relay abandoned before the next) passes."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from chaos import receipts
from chaos.history import Op

KEY = "sqlite:receipts/rA/rev-a"
R1, R2, R3 = (f"0000000{n}-0000-4000-8000-000000000000" for n in (1, 2, 3))


def _op(ops: list[Op], op: str, start: float, end: float | None, status: str = "ok", **fields: Any) -> Op:
    args = {"rid": fields.pop("rid")} if "rid" in fields else {}
    code = fields.pop("code", None)
    made = Op(len(ops), "sqlite/A/r", 1, KEY, op, args, start, end, status, code, fields)  # type: ignore[arg-type]
    ops.append(made)
    return made


def _clean() -> list[Op]:
    ops: list[Op] = []
    _op(ops, "relay", 0, 1, rid=R1, state="pending")
    _op(ops, "relay", 1.5, 2, "refused", rid=R2, code="receipt_outstanding")
    _op(ops, "collect", 2, 3, rid=R1, state="completed", output=R1, replayed=False)
    _op(ops, "relay", 4, None, "unknown", rid=R2, code="killed")  # it may have reserved the target
    _op(ops, "receipts", 5, 6, open=[[R2, "reserved"]])
    _op(ops, "relay", 6.5, 7, "refused", rid=R3, code="receipt_reserved")
    _op(ops, "abandon", 7, 8, rid=R2, state="abandoned")
    _op(ops, "relay", 9, 10, rid=R3, state="pending")
    return ops


def test_a_clean_history_passes() -> None:
    assert receipts.check(_clean(), Counter({R1: 1, R3: 1})) == []


def test_a_prompt_delivered_twice_is_caught() -> None:
    anomalies = receipts.check(_clean(), Counter({R1: 2, R3: 1}))
    assert [(a.kind, a.op.args["rid"]) for a in anomalies] == [("delivered_twice", R1)]


def test_an_acknowledged_delivery_no_turn_printed_is_caught() -> None:
    anomalies = receipts.check(_clean(), Counter({R1: 1}))
    assert [(a.kind, a.op.args["rid"]) for a in anomalies] == [("delivery_lost", R3)]


def test_a_result_that_is_not_the_prompts_is_caught() -> None:
    ops = _clean()
    ops[2].result["output"] = R3  # later work labelled as R1's result
    assert [a.kind for a in receipts.check(ops, Counter({R1: 1, R3: 1}))] == ["wrong_result"]


def test_a_relay_accepted_while_another_receipt_is_open_is_caught() -> None:
    ops: list[Op] = []
    _op(ops, "relay", 0, 1, rid=R1, state="pending")
    _op(ops, "relay", 2, 3, rid=R2, state="pending")
    anomalies = receipts.check(ops, Counter({R1: 1, R2: 1}))
    assert [(a.kind, a.op.args["rid"], a.before[0].args["rid"]) for a in anomalies] == [("two_open_receipts", R2, R1)]


def test_a_relay_accepted_past_a_listed_reserved_receipt_is_caught_unless_it_may_have_been_abandoned() -> None:
    ops = _clean()
    del ops[6]  # no abandon: the reserved R2 still blocks the target when R3 is accepted
    assert [a.kind for a in receipts.check(ops, Counter({R1: 1, R3: 1}))] == ["two_open_receipts"]
    _op(ops, "abandon", 8.5, None, "unknown", rid=R2, code="killed")  # it may have taken effect in time
    assert receipts.check(ops, Counter({R1: 1, R3: 1})) == []


def test_deliveries_are_read_from_the_agents_turn_logs(tmp_path: Path) -> None:
    home = tmp_path / "home-A"
    (home / "agents" / "p1").mkdir(parents=True)
    (home / "agents" / "p1" / "run-1.log").write_text(f"{R1}\n")
    (home / "agents" / "p1" / "run-2.log").write_text(f"{R2}\n{R2}\n")  # one turn: one delivery
    (home / "agents" / "p1" / "run-3.log").write_text(f"{R1}\n")
    assert receipts.deliveries([home]) == Counter({R1: 2, R2: 1})
