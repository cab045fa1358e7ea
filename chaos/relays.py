"""The receipt workload: a client per state home that relays prompts to its own reviewer and collects them.

Each :class:`ReceiptClient` holds a controller lease of its own (``r<home>``, a long TTL: the lease
workload is the other clients') and one reviewer, ``rev-<home>``, of the scripted kind (``demo_agent``) on
the process host, started before the run. It then draws relays (``echo <receipt id>``, the receipt
id its own proposal, so a relay whose client died is known by id; now and then the last id again, as
a retry), collects, abandons and listings of its open receipts. The nemesis kills, pauses and jumps
it like any client. What the history must show is checked by :mod:`chaos.receipts`.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chaos.clients import Client, Recorder
from chaos.history import Op

RECEIPT_WEIGHTS = {"relay": 4.0, "collect": 4.0, "abandon": 0.7, "receipts": 1.3}
CONTROLLER_TTL = 900  # longer than any pause or clock jump: this lease is not what is under test here


@dataclass(frozen=True)
class ReceiptDraws:
    """One receipt operation's draws from its client's seeded stream."""

    op: str
    rid: str  # a new relay's receipt id
    retry: bool  # relay the last receipt id again
    kill_after: float
    think: float


class ReceiptClient(Client):
    """A coordinator relaying to its own reviewer; what it knows: the receipts it may have open."""

    WORKLOAD = "receipts"
    SUFFIX = "r"  # its name: <store>/<home>/r

    def __init__(self, name: str, store: str, url: str, home: Path, directory: Path, recorder: Recorder, seed: int):
        cid = "r" + name.split("/")[1]
        super().__init__(name, store, url, home, directory, [cid], recorder, seed, CONTROLLER_TTL)
        self.cid = cid
        self.target = f"rev-{cid[1:].lower()}"  # agent names are unique in a store, across controllers
        self.worktree = directory / f"wt-{cid}"
        self.credential: dict[str, Any] = {}
        self.open: list[str] = []  # receipt ids that may be unresolved, oldest first
        self.last: str | None = None

    def setup(self) -> None:
        """The client's controller lease and its reviewer, before the run."""
        self.worktree.mkdir(exist_ok=True)
        (self.worktree / "notes.txt").write_text("chaos\n", encoding="utf-8")
        proposal = {"new_lease": str(uuid.UUID(int=self.rng.getrandbits(128), version=4))}
        proposal["new_token"] = self.rng.randbytes(16).hex()
        got = self.call({"op": "acquire", "cid": self.cid, "args": proposal, "ttl": CONTROLLER_TTL})
        if got["status"] != "ok":
            raise RuntimeError(f"{self.name}: acquire for the receipt workload failed: {got}")
        self.credential = {"lease": proposal["new_lease"], "gen": got["result"]["gen"], "token": proposal["new_token"]}
        args = {**self.credential, "name": self.target, "cwd": str(self.worktree)}
        got = self.call({"op": "start_reviewer", "cid": self.cid, "args": args})
        if got["status"] != "ok":
            raise RuntimeError(f"{self.name}: the reviewer did not start: {got}")

    def draw(self) -> ReceiptDraws:
        ops = list(RECEIPT_WEIGHTS)
        return ReceiptDraws(
            op=self.rng.choices(ops, [RECEIPT_WEIGHTS[o] for o in ops])[0],
            rid=str(uuid.UUID(int=self.rng.getrandbits(128), version=4)),
            retry=self.rng.random() < 0.1,
            kill_after=self.rng.uniform(0.0, 0.02),
            think=self.rng.uniform(0.0, 0.2),
        )

    def key(self, op: str, cid: str) -> str:
        return f"{self.store}:receipts/{cid}/{self.target}"

    def request(self, draws: Any) -> tuple[str, str, dict[str, Any], dict[str, Any]]:
        op = draws.op
        if op in ("collect", "abandon") and not self.open:
            op = "receipts"
        args: dict[str, Any] = dict(self.credential)
        shown: dict[str, Any] = {}
        if op == "relay":
            rid = self.last if draws.retry and self.last else draws.rid
            self.last = rid
            args.update(target=self.target, rid=rid, text=f"echo {rid}")
            shown["rid"] = rid
        elif op == "collect":
            args.update(rid=self.open[-1], timeout=10)
            shown["rid"] = self.open[-1]
        elif op == "abandon":
            args["rid"] = shown["rid"] = self.open[0]
        return op, self.cid, args, shown

    def learn(self, record: Op, cid: str, args: dict[str, Any], draws: Any) -> None:
        rid = str(args.get("rid"))
        if record.op == "relay" and record.status in ("ok", "unknown") and rid not in self.open:
            self.open.append(rid)
        elif record.op in ("collect", "abandon") and record.status in ("ok", "refused") and rid in self.open:
            self.open.remove(rid)  # resolved, or not open (any more): a listing will say if it still is
        elif record.op == "receipts" and record.status == "ok":
            self.open = [r for r, _ in record.result.get("open", [])]
        del self.open[:-8]
