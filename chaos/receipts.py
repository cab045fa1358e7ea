"""The history rules for receipts: each prompt delivered at most once, no acknowledged one lost, one open
receipt per target, and a completed result that is this prompt's.

The evidence is the history of the receipt clients (:mod:`chaos.relays`) and what the agents did:
the process host keeps each turn's output in ``<home>/agents/<pane>/run-<n>.log``, and each prompt is
``echo <receipt id>``, so a receipt id's lines in those logs are its deliveries. Rules:

- ``delivered_twice``: a receipt id in more than one turn's output (a retry, a lost answer or a
  restarted client delivered it again);
- ``delivery_lost``: a relay answered ``pending`` (or a collect ``completed``) whose receipt id no
  turn printed;
- ``wrong_result``: a collect answered ``completed`` with output that is not its prompt's (later or
  other work labelled as this result);
- ``two_open_receipts``: a relay accepted while another receipt of the same target was certainly
  unresolved: that one's relay answered ``pending`` before this relay began, and nothing that could
  resolve it (a collect or an abandon of it) began before this relay ended.

An ambiguous relay (its client killed, ``delivery_ambiguous``) may have reserved its target; the rules
allow both, and the clients list their open receipts and abandon them, as an operator would.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable
from pathlib import Path

from chaos.history import Op
from chaos.lease import Anomaly

RID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def deliveries(homes: Iterable[Path]) -> Counter[str]:
    """How many turns printed each receipt id, over the agents of ``homes``."""
    seen: Counter[str] = Counter()
    for home in homes:
        for log in sorted(home.glob("agents/*/run-*.log")):
            seen.update(set(RID.findall(log.read_text(encoding="utf-8", errors="replace"))))
    return seen


def check(ops: Iterable[Op], delivered: Counter[str]) -> list[Anomaly]:
    """The anomalies of the receipt operations in ``ops`` (those with a ``receipts/`` key)."""
    by_target: dict[str, list[Op]] = defaultdict(list)
    for op in ops:
        if ":receipts/" in op.key:
            by_target[op.key].append(op)
    anomalies: list[Anomaly] = []
    for key, mine in sorted(by_target.items()):
        relays: dict[str, list[Op]] = defaultdict(list)
        for op in mine:
            if op.op == "relay":
                relays[op.args["rid"]].append(op)
        for rid, tried in relays.items():
            if delivered[rid] > 1:
                anomalies.append(
                    Anomaly(
                        "delivered_twice", key, f"receipt {rid} was delivered {delivered[rid]} times", tried[0], tried
                    )
                )
        for op in mine:
            if op.status != "ok" or op.args.get("rid") is None:
                continue
            rid = str(op.args["rid"])
            acknowledged = (op.op == "relay" and op.result.get("state") == "pending") or (
                op.op == "collect" and op.result.get("state") == "completed"
            )
            if acknowledged and delivered[rid] == 0:
                message = f"{op.op} answered {op.result.get('state')}, but no turn of the agent printed {rid}"
                anomalies.append(Anomaly("delivery_lost", key, message, op))
            if op.op == "collect" and op.result.get("state") == "completed" and rid not in op.result.get("output", ""):
                message = f"collected as completed with output {op.result.get('output')!r}, not this prompt's"
                anomalies.append(Anomaly("wrong_result", key, message, op))
        anomalies += _open_twice(key, mine)
    return anomalies


def _open_twice(key: str, ops: list[Op]) -> list[Anomaly]:
    """Relays accepted while another receipt of the target was certainly unresolved.

    Certainly: a witness saw it open (its relay answered pending, or a listing showed it reserved or
    pending) and ended before the relay began, and no collect or abandon of it could have taken effect
    between the two (none began before the relay ended and ended, if it did, after the witness began)."""
    found: list[Anomaly] = []
    accepted = [o for o in ops if o.op == "relay" and o.status == "ok" and o.result.get("state") == "pending"]
    witnesses: list[tuple[str, Op]] = [(o.args["rid"], o) for o in accepted]
    for op in ops:
        if op.op == "receipts" and op.status == "ok":
            witnesses += [(rid, op) for rid, _ in op.result.get("open", [])]
    resolving: dict[str, list[Op]] = defaultdict(list)
    for op in ops:
        if op.op in ("collect", "abandon") and "rid" in op.args:
            resolving[op.args["rid"]].append(op)
    for later in accepted:
        assert later.complete is not None
        for rid, witness in witnesses:
            if rid == later.args["rid"] or witness.complete is None or witness.complete >= later.invoke:
                continue
            if any(
                r.invoke < later.complete and (r.complete is None or r.complete > witness.invoke)
                for r in resolving[rid]
            ):
                continue
            message = (
                f"relay of {later.args['rid']} accepted while receipt {rid} (seen open by #{witness.id}) was unresolved"
            )
            found.append(Anomaly("two_open_receipts", key, message, later, [witness]))
            break
    return found
