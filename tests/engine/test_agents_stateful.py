"""Reviewer leases and handoff receipts, driven by Hypothesis through the real Service on a real SQLite file.

The agents live in a simulated host (``simhost.py``) that changes nothing unless the state machine
says so: it starts reviewers, relays prompts, finishes, blocks, pokes (a human or the agent moving
outside corral), swaps or vanishes agents, arms ambiguous deliveries and failing starts and closes,
collects, abandons, closes at the observed or a stale cursor, waits on several agents, reconciles,
and resumes or takes over the controller elsewhere while sometimes going on with the old credential.
Every call's outcome (the result, or the exact refusal code) is predicted by a model. After every
step the store, the event log and the host's own record of prompts and runs are checked:

- never two receipts for one target reserved or pending at once, and every prompt the host got was
  handed over while exactly one receipt for that agent was open: the one just reserved for it, with
  the SHA-256 of exactly that text;
- a completed receipt's output (what collect returned, and ``output_sha256``) comes from the run that
  started at its ``after_seq`` on its own prompt, and ``settled_seq == after_seq + 1``;
- no event and no instance holds a prompt's or an output's text (nor a fence token);
- a receipt left reserved by an ambiguous delivery blocks its target until it is abandoned (the
  model predicts ``receipt_outstanding`` for relays and closes meanwhile);
- every cursor corral records for an agent only grows, and never runs ahead of the agent;
- event seqs strictly increase, each instance's versions count its events, refusals write nothing.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import importlib.util
import json
import os
import shutil
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from runner.agents.abc import SETTLED
from runner.definitions.library import Library
from runner.errors import CorralError
from runner.fence import Credential
from runner.service import (
    AbandonInput,
    AcquireInput,
    CollectInput,
    CollectResult,
    ControllerInput,
    EventsInput,
    ReceiptsInput,
    RelayInput,
    ResumeInput,
    ReviewerCloseInput,
    ReviewerStartInput,
    Service,
    TakeoverInput,
    WaitAnyInput,
)
from runner.sql.store_sqlite import SQLiteStore

pytestmark = pytest.mark.slow  # a Hypothesis state machine over real processes


def _load_simhost() -> ModuleType:
    """``simhost.py`` beside this file (``--import-mode=importlib`` puts no test directory on sys.path)."""
    name = "corral_test_simhost"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("simhost.py"))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up while the class is built
        spec.loader.exec_module(module)
    return sys.modules[name]


simhost = _load_simhost()
SimHost = simhost.SimHost

CONTROLLER = "ctl"
NAMES = ("ana", "bob", "cyd", "dee")
KIND = "script"
TTL = 600
AUTH_SHA = hashlib.sha256(b"authority").hexdigest()
OPEN = ("reserved", "pending")
LIVE = ("provisioning", "active", "closing", "orphaned", "close_failed")
CURSOR_KEYS = ("started_seq", "before_seq", "after_seq", "settled_seq", "observed_seq", "closing_seq")
COLLECT_TIMEOUT = 0.001  # the simulated host answers at once; nothing real is waited for
# wait_any also bounds the whole race with a cancel scope; a deadline this short could cancel the
# race before a satisfied wait is even scheduled. The host still answers at once.
WAIT_ANY_TIMEOUT = 30.0
# Hypothesis favours the ends of a list (and shrinks to its start): well-answered prompts sit there.
ANSWERS = (
    None,
    None,
    "late",
    None,
    "lost_delivered",
    None,
    None,
    "lost_undelivered",
    None,
    "refused",
    None,
    "busy",
    None,
)
START_ANSWERS = (None, "fail", None, "fail_nopane", None, "orphan", None, None)
PROMPT_ALPHABET = "abcdefghijklmnopqrstuvwxyz ,.?!ÄéΩ"


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@functools.cache
def shared_library() -> Library:
    """One library for every run: validating the built-in machines anew each time would dominate."""
    cache_dir = tempfile.mkdtemp(prefix="corral-agents-specs-")
    atexit.register(shutil.rmtree, cache_dir, ignore_errors=True)
    return Library(cache_dir=Path(cache_dir))


class ManualClock:
    """The store's clock (conftest's ``FakeClock``; a state machine builds its own store, without fixtures)."""

    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


@dataclass
class LeaseModel:
    id: str
    name: str
    state: str
    pane: str | None


@dataclass
class ReceiptModel:
    token: str
    id: str
    lease_id: str
    pane: str
    prompt: str
    state: str
    before_seq: int
    after_seq: int | None = None
    settled_seq: int | None = None
    output: str | None = None  # what collect returned when it completed the receipt
    reason: str | None = None


# One call's outcome for one receipt: ("ok", output, replayed) or ("err", code).
Outcome = tuple[Any, ...]


class AgentsMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        # On tmpfs where there is one: durability is not what this test is about, and fsyncs would
        # dominate every step (the store is the real SQLite store all the same).
        shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
        self.dir = Path(os.path.realpath(tempfile.mkdtemp(prefix="corral-agents-", dir=shm)))
        self.cwd = str(self.dir / "work")
        os.mkdir(self.cwd)
        self.clock = ManualClock()
        self.store = SQLiteStore(self.dir / "corral.db", clock=self.clock)
        self.last_seq = 0  # the newest event seq the model has accounted for
        self.sim = SimHost(stamp=self.latest_seq)
        self.service = Service(self.store, shared_library(), actor="stateful", hosts=self.host)
        self.leases: dict[str, LeaseModel] = {}
        self.receipts: dict[str, ReceiptModel] = {}
        self.order: list[str] = []  # receipt tokens in creation order (tokens are random; draws must not be)
        self.cred: Credential | None = None
        self.stale: list[Credential] = []
        self.expires_at = self.clock.now
        self.secrets: set[str] = set()  # prompt texts and fence tokens: never in the store
        self.prompts = 0
        self.checked: tuple[int, ...] = ()  # what the invariants were last checked on

    def host(self, name: str) -> Any:
        assert name == "process", f"the service asked for the host {name!r}"
        return self.sim

    def teardown(self) -> None:
        event(f"events: {len(self.store.events()) // 10 * 10}+")
        try:
            self.store.close()  # the last connection checkpoints the WAL into the main file
            raw = b"".join(p.read_bytes() for p in self.dir.glob("corral.db*"))
            for text in self.secrets | self.outputs():
                for form in (text, json.dumps(text)[1:-1]):  # as is, or JSON-escaped (ensure_ascii)
                    assert form.encode("utf-8") not in raw, f"{text!r} is stored in the database"
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    # --- helpers ------------------------------------------------------------------------------------

    def latest_seq(self) -> int:
        events = self.store.events(self.last_seq)
        return events[-1].seq if events else self.last_seq

    def take_events(self) -> list[tuple[str, str]]:
        events = self.service.events(EventsInput(since=self.last_seq))
        if events:
            self.last_seq = events[-1].seq
        return [(e.instance_id, e.trigger) for e in events]

    def expect_events(self, expected: list[tuple[str, str]]) -> None:
        got = self.take_events()
        assert Counter(got) == Counter(expected), f"events: expected {expected}, got {got}"

    def refused(self, op: str, exc: CorralError, codes: set[str]) -> None:
        assert exc.code in codes, f"{op}: expected {sorted(codes)}, got {exc.code}: {exc.message}"
        self.expect_events([])  # a refusal writes nothing
        event(f"{op}: {exc.code}")

    def outputs(self) -> set[str]:
        return {run.output.strip() for agent in self.sim.agents.values() for run in agent.runs}

    def expired(self) -> bool:
        return self.clock.now >= self.expires_at

    def pick_cred(self, data: st.DataObject) -> tuple[Credential, bool]:
        """The current credential, or now and then one from before a resume or a takeover. A holder
        whose lease expired mostly notices and resumes it first."""
        assert self.cred is not None
        if self.expired() and data.draw(st.sampled_from(["resume", "go on", "resume"]), label="expired") == "resume":
            self.resume(self.cred)
        if self.stale and data.draw(st.sampled_from(["current", "current", "stale", "current"]), label="cred") != (
            "current"
        ):
            return data.draw(st.sampled_from(self.stale), label="stale credential"), False
        return self.cred, True

    @staticmethod
    def draw_name(data: st.DataObject, preferred: list[str]) -> str:
        """Mostly a name the operation can act on; sometimes any name at all."""
        if preferred and data.draw(st.sampled_from(["preferred", "any", "preferred", "preferred"]), label="which") == (
            "preferred"
        ):
            return data.draw(st.sampled_from(preferred), label="name")
        return data.draw(st.sampled_from(NAMES), label="name")

    def fence_code(self, current: bool) -> str | None:
        if not current:
            return "fence_stale"
        return "lease_expired" if self.expired() else None

    def lease_named(self, name: str, states: tuple[str, ...]) -> LeaseModel | None:
        found = [lease for lease in self.leases.values() if lease.name == name and lease.state in states]
        assert len(found) <= 1
        return found[0] if found else None

    def open_receipt(self, lease_id: str) -> ReceiptModel | None:
        found = [r for r in self.receipts.values() if r.lease_id == lease_id and r.state in OPEN]
        assert len(found) <= 1
        return found[0] if found else None

    def agent(self, pane: str) -> Any:
        return self.sim.agents[pane]

    def same_identity(self, agent: Any, name: str) -> bool:
        return (agent.name, agent.kind, agent.cwd) == (name, KIND, self.cwd)

    def lease_code(self, current: bool, agent: Any, name: str) -> str | None:
        """What every operation on a leased agent checks first: the fence, the pane, the identity."""
        code = self.fence_code(current)
        if code is None and agent.closed:
            return "agent_gone"
        if code is None and not self.same_identity(agent, name):
            return "identity_changed"
        return code

    @staticmethod
    def current_output(agent: Any) -> str:
        return agent.runs[-1].output if agent.runs else ""

    def healthy(self, states: tuple[str, ...] = ("active",)) -> list[str]:
        """Names of leases (in these states) whose agent is still the leased one, in its pane."""
        return [
            lease.name
            for lease in self.leases.values()
            if lease.state in states
            and lease.pane is not None
            and not self.agent(lease.pane).closed
            and self.same_identity(self.agent(lease.pane), lease.name)
        ]

    def live_panes(self, statuses: tuple[str, ...] | None = None) -> list[str]:
        return [
            pane
            for pane, agent in self.sim.agents.items()
            if not agent.closed and (statuses is None or agent.status in statuses)
        ]

    def grant(self, cred: Credential) -> None:
        if self.cred is not None:
            self.stale.append(self.cred)
        self.cred = cred
        self.secrets.add(cred.token)
        self.expires_at = self.clock.now + timedelta(seconds=TTL)

    # --- the controller -------------------------------------------------------------------------------

    @initialize(names=st.lists(st.sampled_from(NAMES), min_size=1, max_size=2, unique=True))
    def acquire(self, names: list[str]) -> None:
        """Every run starts with the lease held and a reviewer or two, so relays have somewhere to go."""
        grant = self.service.controller.acquire(AcquireInput(CONTROLLER, "TICKET-1", AUTH_SHA, TTL, "me@host"))
        self.grant(grant.credential)
        self.expect_events([("controller/ctl", "acquire")])
        assert self.cred is not None
        for name in names:
            view = self.service.reviewers.start(ReviewerStartInput(CONTROLLER, self.cred, name, KIND, self.cwd))
            self.leases[view.id] = LeaseModel(view.id, name, "active", view.data["pane_id"])
            self.expect_events([(view.id, "start"), (view.id, "start:success")])

    @rule(data=st.data())
    def controller_moves(self, data: st.DataObject) -> None:
        """The controller is resumed elsewhere (whoever kept the old credential is now stale), or its
        lease expires; an expired lease is resumed, or taken over by another holder."""
        if self.expired():
            how = data.draw(st.sampled_from(["resume", "take over"]), label="how")
        else:
            how = data.draw(st.sampled_from(["resume", "resume", "expire", "resume"]), label="how")
        if how == "expire":
            self.clock.now = self.expires_at + timedelta(seconds=1)
            event("controller: expired")
            return
        if how == "take over":
            assert self.cred is not None
            grant = self.service.controller.takeover(TakeoverInput(CONTROLLER, self.cred.lease_id, TTL, "other@host"))
            self.grant(grant.credential)
            self.expect_events([("controller/ctl", "takeover")])
            event("controller: taken over")
            return
        cred, current = self.pick_cred(data)
        self.resume(cred, current)

    def resume(self, cred: Credential, current: bool = True) -> None:
        try:
            grant = self.service.controller.resume(ResumeInput(CONTROLLER, cred))
        except CorralError as exc:
            assert not current
            self.refused("resume", exc, {"fence_stale"})
            return
        assert current, "a stale credential resumed the lease"
        self.grant(grant.credential)
        self.expect_events([("controller/ctl", "resume")])
        event("resume: ok")

    # --- the agents, moved by the test ----------------------------------------------------------------

    def _move_agent(self, data: st.DataObject) -> None:
        """An agent moves: its work ends or blocks, or it moves by itself (see ``SimHost.poke``)."""
        working = self.live_panes(("working",))
        pane = data.draw(st.sampled_from(working or self.live_panes()), label="pane")
        status = self.agent(pane).status
        if status == "working":
            move = data.draw(st.sampled_from(["finish", "block", "finish", "poke", "finish"]), label="move")
        elif status == "done":
            move = data.draw(st.sampled_from(["poke", "look"]), label="move")
        else:
            move = "poke"
        getattr(self.sim, move)(pane)
        event(f"agent: {move}")

    def stranded(self) -> list[str]:
        """Live panes of leases left orphaned or close_failed."""
        return [
            lease.pane
            for lease in self.leases.values()
            if lease.state in ("orphaned", "close_failed") and lease.pane and not self.agent(lease.pane).closed
        ]

    def disturbable(self) -> list[str]:
        """Panes a failed start or close left behind (closing them lets reconcile settle their leases),
        then any live pane as long as another leased agent stays usable (a swapped agent's lease can
        never be closed)."""
        return [*self.stranded(), *(self.live_panes() if len(self.healthy()) >= 2 else [])]

    @precondition(lambda self: self.disturbable())
    @rule(data=st.data(), move=st.sampled_from(["vanish", "swap"]))
    def disturb_agent(self, data: st.DataObject, move: str) -> None:
        """An agent's pane is closed outside corral, or another agent now lives in it."""
        getattr(self.sim, move)(data.draw(st.sampled_from(self.disturbable()), label="pane"))
        event(f"agent: {move}")

    @precondition(lambda self: self.live_panes())
    @rule(data=st.data())
    def move_agent(self, data: st.DataObject) -> None:
        self._move_agent(data)

    @precondition(lambda self: self.live_panes())
    @rule(data=st.data())
    def move_agent_again(self, data: st.DataObject) -> None:
        """The same rule twice: agents move about as often as corral acts on them."""
        self._move_agent(data)

    def in_window(self) -> list[str]:
        """Receipts whose agent is still inside their window: working at a pending receipt's after_seq,
        or sitting at a completed one's settled_seq (whose result can still be replayed)."""
        return [
            t
            for t in self.order
            if not self.agent(self.receipts[t].pane).closed
            and (
                (
                    self.receipts[t].state == "pending"
                    and self.agent(self.receipts[t].pane).seq == self.receipts[t].after_seq
                )
                or (
                    self.receipts[t].state == "completed"
                    and self.agent(self.receipts[t].pane).seq == self.receipts[t].settled_seq
                )
            )
        ]

    @precondition(lambda self: self.in_window())
    @rule(
        data=st.data(),
        how=st.sampled_from(["new work", "new work, finished", "looked at"]),
        then_collect=st.booleans(),
    )
    def window_passes(self, data: st.DataObject, how: str, then_collect: bool) -> None:
        """Before corral collects (or replays) a result, the agent finishes and moves past it: someone
        types new work into its pane (which may finish too), or looks at it (done -> idle, the same
        output at a new cursor). Either way the result can no longer be attributed to the receipt."""
        rec = self.receipts[data.draw(st.sampled_from(self.in_window()), label="receipt")]
        if self.agent(rec.pane).status == "working":
            self.sim.finish(rec.pane)
        if how == "looked at" and self.agent(rec.pane).status == "done":
            self.sim.look(rec.pane)
        else:
            self.sim.poke(rec.pane)  # blocked: resumes the same run (same output); idle or done: new work
            if how == "new work, finished":
                self.sim.finish(rec.pane)
        if then_collect:
            self._collect(data, rec)

    def maybe_moves_on_read(self, data: st.DataObject, pane: str | None) -> None:
        """Now and then the agent about to be captured moves while its output is read."""
        if pane is not None and data.draw(st.sampled_from(["still", "still", "moves", "still"]), label="read") == (
            "moves"
        ):
            self.sim.moves_on_read = pane

    # --- reviewers ------------------------------------------------------------------------------------

    @rule(data=st.data())
    def start(self, data: st.DataObject) -> None:
        name = self.draw_name(data, [n for n in NAMES if not self.lease_named(n, LIVE)])
        cred, current = self.pick_cred(data)
        if self.sim.next_start is None:  # how the host will answer: mostly well, else failing
            self.sim.next_start = data.draw(st.sampled_from(START_ANSWERS), label="host starts")
        mode = self.sim.next_start
        close_fails = mode == "orphan" or self.sim.next_close == "fail"  # closing the failed start's pane
        code = self.fence_code(current)
        if code is None and self.lease_named(name, LIVE):
            code = "agent_name_taken"
        try:
            view = self.service.reviewers.start(ReviewerStartInput(CONTROLLER, cred, name, KIND, self.cwd))
        except CorralError as exc:
            if code is not None:
                self.refused("start", exc, {code})
                return
            assert mode is not None, f"start failed unprompted: {exc.code}: {exc.message}"
            assert exc.code == "agent_start_failed", exc.code
            lease = exc.details["lease"]
            state = "orphaned" if close_fails and mode != "fail_nopane" else "failed_closed"
            assert lease["state"] == state
            pane = lease.get("pane_id")
            assert (pane is None) == (mode == "fail_nopane")
            if pane is not None:
                assert self.agent(pane).closed == (state == "failed_closed"), "a failed start's pane was not closed"
            self.leases[lease["id"]] = LeaseModel(lease["id"], name, state, pane)
            outcome = "ambiguous" if state == "orphaned" else "failure"
            self.expect_events([(lease["id"], "start"), (lease["id"], f"start:{outcome}")])
            event(f"start: {state}")
            return
        assert code is None, f"start succeeded where the model expected {code}"
        assert mode is None
        pane = view.data["pane_id"]
        agent = self.agent(pane)
        assert (view.state, view.data["name"], view.data["cwd"]) == ("active", name, self.cwd)
        assert view.data["started_seq"] == 0
        assert self.same_identity(agent, name) and agent.seq == 0
        self.leases[view.id] = LeaseModel(view.id, name, "active", pane)
        self.expect_events([(view.id, "start"), (view.id, "start:success")])
        event("start: ok")

    @rule(delta=st.sampled_from([0, 0, -1, 1]), data=st.data())
    def close(self, delta: int, data: st.DataObject) -> None:
        """Close at the cursor just observed (delta 0), or at a stale or future one."""
        # Mostly a healthy lease, and more often one whose receipt is open while the agent sits settled.
        blocked = [
            lease.name
            for lease in self.leases.values()
            if lease.pane
            and self.open_receipt(lease.id)
            and self.agent(lease.pane).status in ("idle", "done")
            and not self.agent(lease.pane).closed
        ]
        name = self.draw_name(data, [*blocked, *self.healthy(("active", "close_failed")), *blocked])
        cred, current = self.pick_cred(data)
        lease = self.lease_named(name, ("active", "close_failed"))
        agent = self.agent(lease.pane) if lease is not None and lease.pane is not None else None
        self.maybe_moves_on_read(data, lease.pane if lease is not None else None)
        expected_seq = max(0, agent.seq + delta) if agent is not None else 0
        code: str | None = "target_unknown"
        if lease is not None and agent is not None:
            code = self.lease_code(current, agent, name)
            if code is not None:
                pass
            elif agent.status not in ("idle", "done"):
                code = "agent_not_settled"
            elif agent.seq != expected_seq:
                code = "cursor_mismatch"
            elif self.sim.moves_on_read == lease.pane:
                code = "cursor_superseded"  # capture_stable: it moved while its output was read
            elif self.open_receipt(lease.id):
                code = "receipt_outstanding"
        if self.sim.next_close is None and data.draw(
            st.sampled_from(["ok", "ok", "fails", "ok"]), label="host closes"
        ) == ("fails"):
            self.sim.next_close = "fail"  # the next close the host is asked for fails (this one, if it gets there)
        fails = self.sim.next_close == "fail"
        output = self.current_output(agent) if agent is not None else ""
        seq = agent.seq if agent is not None else None
        try:
            closed = self.service.reviewers.close(ReviewerCloseInput(CONTROLLER, cred, name, expected_seq))
        except CorralError as exc:
            if code is not None:
                self.refused("close", exc, {code})
                return
            assert lease is not None and fails, f"close failed unprompted: {exc.code}: {exc.message}"
            assert exc.code == "agent_close_failed" and exc.details["lease"]["state"] == "close_failed"
            assert not self.agent(lease.pane).closed
            lease.state = "close_failed"
            self.expect_events([(lease.id, "close"), (lease.id, "close:failure")])
            event("close: close_failed")
            return
        assert code is None, f"close succeeded where the model expected {code}"
        assert lease is not None and agent is not None and not fails
        assert closed.output == output
        assert closed.lease.state == "closed"
        assert closed.lease.data["capture_sha256"] == sha(output)
        assert closed.lease.data["closing_seq"] == seq
        assert agent.closed
        lease.state = "closed"
        self.expect_events([(lease.id, "close"), (lease.id, "close:success")])
        event("close: ok")

    @rule(data=st.data())
    def reconcile(self, data: st.DataObject) -> None:
        cred, current = self.pick_cred(data)
        code = self.fence_code(current)
        # Reconcile closes a live orphaned pane itself; a close fault left armed by a refused close
        # would make that outcome depend on the order leases are visited: the host behaves here.
        self.sim.next_close = None
        stranded = {  # reconcile closes these; an orphaned pane holding another agent now is only reported
            lease.id
            for lease in self.leases.values()
            if lease.state == "orphaned"
            and lease.pane is not None
            and not self.agent(lease.pane).closed
            and self.same_identity(self.agent(lease.pane), lease.name)
        }
        try:
            done = self.service.inventory.reviewer_reconcile(ControllerInput(CONTROLLER, cred, apply=True))
        except CorralError as exc:
            assert code is not None, f"reconcile refused: {exc.code}: {exc.message}"
            self.refused("reconcile", exc, {code})
            return
        assert code is None, f"reconcile succeeded where the model expected {code}"
        expected = {}
        for lease in self.leases.values():
            if lease.state in ("orphaned", "close_failed", "active"):
                gone = lease.id not in stranded and (lease.pane is None or self.agent(lease.pane).closed)
                to = {"orphaned": "failed_closed", "close_failed": "closed", "active": "closed"}[lease.state]
                if gone:
                    expected[lease.id] = ("reconciled", to)
                elif lease.id in stranded:  # its pane is closed by reconcile, fenced
                    expected[lease.id] = ("reconciled", "failed_closed")
                elif lease.state != "active":  # a live active lease is not even reported
                    expected[lease.id] = ("skip", None)
                elif lease.pane is not None and not self.same_identity(self.agent(lease.pane), lease.name):
                    expected[lease.id] = ("skip", None)  # its pane holds another agent: reported, untouched
        got = {a["lease"]: (a["action"], a.get("to")) for a in done.actions}
        assert got == expected
        events = []
        for lease_id, (action, to) in expected.items():
            if action == "reconciled":
                lease = self.leases[lease_id]
                closes = lease_id in stranded
                lease.state = to
                events.append((lease_id, "reconcile"))
                if closes:
                    assert lease.pane is not None and self.agent(lease.pane).closed
                    events.append((lease_id, "reconcile:success"))
                event(f"reconcile: {to}")
        self.expect_events(events)

    # --- receipts -------------------------------------------------------------------------------------

    @rule(text=st.text(PROMPT_ALPHABET, min_size=1, max_size=12), data=st.data())
    def relay(self, text: str, data: st.DataObject) -> None:
        self._relay(text, data)

    @rule(text=st.text(PROMPT_ALPHABET, min_size=1, max_size=12), data=st.data())
    def relay_again(self, text: str, data: st.DataObject) -> None:
        """The same rule twice: relays are what the receipts are about."""
        self._relay(text, data)

    def _relay(self, text: str, data: st.DataObject) -> None:
        # Mostly a healthy lease; now and then an active one whose agent vanished or was swapped.
        active = [lease.name for lease in self.leases.values() if lease.state == "active"]
        name = self.draw_name(data, [*self.healthy(), *active, *self.healthy()])
        cred, current = self.pick_cred(data)
        self.prompts += 1
        prompt = f"PROMPT-{self.prompts:04d}: {text}"
        self.secrets.add(prompt)
        lease = self.lease_named(name, ("active",))
        if self.sim.next_prompt is None:
            # How the host will answer this prompt: mostly well; else ambiguously, or refusing it.
            self.sim.next_prompt = data.draw(st.sampled_from(ANSWERS), label="host answers")
        mode = self.sim.next_prompt
        code: str | None = "target_unknown"
        before_seq = -1
        if lease is not None:
            assert lease.pane is not None
            agent = self.agent(lease.pane)
            before_seq = agent.seq
            code = self.lease_code(current, agent, name)
            if code is not None:
                pass
            elif self.open_receipt(lease.id):
                code = "receipt_outstanding"
            elif agent.status not in ("idle", "done"):
                code = "agent_not_settled"
        try:
            view = self.service.receipts.relay(RelayInput(CONTROLLER, cred, name, prompt))
            receipt = view.to_dict()
        except CorralError as exc:
            if code is not None:
                self.refused("relay", exc, {code})
                return
            assert mode is not None, f"relay failed unprompted: {exc.code}: {exc.message}"
            failed = mode in ("refused", "busy")
            assert exc.code == ("delivery_failed" if failed else "delivery_ambiguous"), exc.code
            receipt = exc.details["receipt"]
            assert receipt["state"] == ("failed" if failed else "reserved")
        else:
            assert code is None, f"relay succeeded where the model expected {code}"
            assert mode is None and receipt["state"] == "pending"
        assert lease is not None
        token = receipt["token"]
        rec = ReceiptModel(
            token, f"receipt/{token.split('.', 1)[1]}", lease.id, str(lease.pane), prompt, receipt["state"], before_seq
        )
        assert (receipt["target"], receipt["pane_id"], receipt["name"]) == (lease.id, lease.pane, name)
        assert (receipt["prompt_sha256"], receipt["before_seq"]) == (sha(prompt), before_seq)
        if rec.state == "pending":
            rec.after_seq = receipt["after_seq"]
            assert rec.after_seq == before_seq + 1
        elif rec.state == "failed":
            rec.reason = "delivery_failed"
            assert receipt["reason"] == "delivery_failed"
        outcome = {"pending": "success", "reserved": "ambiguous", "failed": "failure"}[rec.state]
        self.receipts[token] = rec
        self.order.append(token)
        self.expect_events([(rec.id, "relay"), (rec.id, f"relay:{outcome}")])
        event(f"relay: {rec.state}" + (f" ({mode})" if mode else ""))

    def expect_collect(self, rec: ReceiptModel) -> Outcome:
        """What collecting ``rec`` with the current credential answers."""
        agent = self.agent(rec.pane)
        alive = not agent.closed
        name = self.leases[rec.lease_id].name
        moves = alive and self.sim.moves_on_read == rec.pane  # it will move while its output is read
        if rec.state == "completed":
            stable = (
                not moves
                and alive
                and self.same_identity(agent, name)
                and agent.seq == rec.settled_seq
                and self.current_output(agent) == rec.output
            )
            return ("ok", rec.output, True) if stable else ("err", "cursor_superseded")
        if rec.state == "reserved":
            return ("err", "receipt_reserved")
        if rec.state in ("failed", "abandoned"):
            return ("err", "receipt_ended")
        assert rec.after_seq is not None
        # The service looks at the pane before it waits: a pane that no longer holds the receipt's
        # agent (gone, or another agent) can only fail, so it is not waited on (Receipts._not_the_receipts).
        if not alive or not self.same_identity(agent, name):
            return ("err", "identity_changed")
        if not (agent.seq > rec.after_seq and agent.status in SETTLED):
            return ("err", "wait_timeout")
        if moves:
            return ("err", "cursor_superseded")  # capture_stable, then the cursor_superseded transition
        if agent.seq == rec.after_seq + 1:
            return ("ok", self.current_output(agent), False)
        return ("err", "cursor_superseded")

    def choose_receipt(self, data: st.DataObject) -> ReceiptModel:
        """Mostly a receipt with something to decide: one whose agent has settled since (or that can be
        replayed), or an unresolved one; sometimes any at all."""

        def ready(r: ReceiptModel) -> bool:
            agent = self.agent(r.pane)
            if r.state == "completed":
                return True
            return r.state == "pending" and (
                agent.closed or (agent.seq > (r.after_seq or 0) and agent.status in SETTLED)
            )

        pools = {
            "ready": [t for t in self.order if ready(self.receipts[t])],
            "open": [t for t in self.order if self.receipts[t].state in OPEN],
            "any": self.order,
        }
        which = data.draw(st.sampled_from(["ready", "open", "any", "ready"]), label="which receipt")
        pool = pools[which] or self.order
        return self.receipts[data.draw(st.sampled_from(pool), label="receipt")]

    @precondition(lambda self: self.order)
    @rule(data=st.data())
    def collect(self, data: st.DataObject) -> None:
        self._collect(data)

    def working_on_receipt(self) -> list[str]:
        """Tokens of pending receipts whose agent still works on their prompt."""
        return [
            t
            for t in self.order
            if self.receipts[t].state == "pending"
            and not self.agent(self.receipts[t].pane).closed
            and self.agent(self.receipts[t].pane).seq == self.receipts[t].after_seq
        ]

    @precondition(lambda self: self.working_on_receipt())
    @rule(data=st.data(), how=st.sampled_from(["finish", "block", "finish"]))
    def settle_then_collect(self, data: st.DataObject, how: str) -> None:
        """The agent finishes (or stops on a question) and corral collects its result."""
        rec = self.receipts[data.draw(st.sampled_from(self.working_on_receipt()), label="receipt")]
        getattr(self.sim, how)(rec.pane)
        self._collect(data, rec)

    def _collect(self, data: st.DataObject, first: ReceiptModel | None = None) -> None:
        first = first or self.choose_receipt(data)
        # A second receipt on another agent: the collects run concurrently, in an order not given.
        others = [t for t in self.order if self.receipts[t].pane != first.pane]
        tokens = [first.token]
        if others and data.draw(st.booleans(), label="two receipts"):
            tokens.append(data.draw(st.sampled_from(others), label="second receipt"))
        cred, current = self.pick_cred(data)
        self.maybe_moves_on_read(data, first.pane)
        fence = self.fence_code(current)
        if fence is not None:
            # The fence is judged before anything else, replays included (whose output is only for the
            # current holder): nothing is waited for, read or written.
            with pytest.raises(CorralError) as caught:
                anyio.run(self.service.receipts.collect, CollectInput(CONTROLLER, cred, tuple(tokens), COLLECT_TIMEOUT))
            self.refused("collect", caught.value, {fence})
            return
        expected = {t: self.expect_collect(self.receipts[t]) for t in tokens}
        outputs_before = {t: self.current_output(self.agent(self.receipts[t].pane)) for t in tokens}
        actual: dict[str, Outcome | None] = {}  # None: failed, but hidden behind another token's error
        try:
            results = anyio.run(
                self.service.receipts.collect, CollectInput(CONTROLLER, cred, tuple(tokens), COLLECT_TIMEOUT)
            )
        except CorralError as exc:
            raised = exc.details.get("receipt_token")
            collected = {c["receipt"]["token"]: c for c in exc.details.get("collected", [])}
            for t in tokens:
                if t in collected:
                    actual[t] = ("ok", collected[t]["output"], collected[t]["replayed"])
                elif t == raised:
                    actual[t] = ("err", exc.code)
                else:
                    actual[t] = None
            # The error raised is that of the first token (in the order given) that failed.
            assert raised == next(t for t in tokens if t not in collected), (raised, tokens, list(collected))
        else:
            assert [r.receipt.token for r in results] == tokens
            for t, result in zip(tokens, results, strict=True):
                assert isinstance(result, CollectResult)
                actual[t] = ("ok", result.output, result.replayed)
                assert result.receipt.state == "completed"
        transitions = []
        for t in tokens:
            rec, got = self.receipts[t], actual[t]
            if got is None:  # its error was hidden behind the one raised: its state tells what it was
                got = expected[t]
                assert got[0] == "err", f"collect of {rec.state} receipt {t} failed where the model expected {got}"
            else:
                assert got == expected[t], f"collect of {rec.state} receipt: expected {expected[t]}, got {got}"
            event(f"collect {rec.state}: {got[0]} {got[1] if got[0] == 'err' else ('replay' if got[2] else 'new')}")
            if rec.state != "pending":
                continue
            if got[0] == "ok":
                rec.state, rec.output = "completed", got[1]
                rec.settled_seq = self.agent(rec.pane).seq
                assert got[1] == outputs_before[t]
                transitions.append((rec.id, "collect"))
            elif got[1] in ("identity_changed", "cursor_superseded"):
                rec.state, rec.reason = "failed", got[1]
                transitions.append((rec.id, "collect"))
        self.expect_events(transitions)

    @precondition(lambda self: self.order)
    @rule(data=st.data(), message=st.sampled_from([None, "seen idle by the operator"]))
    def abandon(self, data: st.DataObject, message: str | None) -> None:
        rec = self.choose_receipt(data)
        cred, current = self.pick_cred(data)
        agent = self.agent(rec.pane)
        code = "transition_not_allowed" if rec.state not in OPEN else self.fence_code(current)
        if code is None and not agent.closed:
            if not self.same_identity(agent, self.leases[rec.lease_id].name):
                code = "identity_changed"
            elif agent.status not in SETTLED:
                code = "agent_not_settled"
        try:
            view = self.service.receipts.abandon(AbandonInput(CONTROLLER, cred, rec.token, message))
        except CorralError as exc:
            assert code is not None, f"abandon refused: {exc.code}: {exc.message}"
            self.refused(f"abandon {rec.state}", exc, {code})
            return
        assert code is None, f"abandon succeeded where the model expected {code}"
        assert (view.state, view.data["reason"], view.data.get("message")) == ("abandoned", "abandoned", message)
        assert view.data["observed_seq"] == (None if agent.closed else agent.seq)
        event(f"abandon {rec.state}: ok")
        rec.state, rec.reason = "abandoned", "abandoned"
        self.expect_events([(rec.id, "abandon")])

    @rule(data=st.data())
    def wait_any(self, data: st.DataObject) -> None:
        names = sorted(
            {self.draw_name(data, self.healthy()) for _ in range(data.draw(st.integers(1, 3), label="how many"))}
        )
        cred, current = self.pick_cred(data)
        targets: list[tuple[str, int | None]] = []
        for name in names:
            lease = self.lease_named(name, ("active",))
            seq = self.agent(lease.pane).seq if lease is not None and lease.pane is not None else 1
            after = data.draw(st.sampled_from([None, 0, max(0, seq - 1), seq]), label=f"after {name}")
            targets.append((name, after))
        code = self.fence_code(current)
        # wait-any reads each winner's output; the "moves while its output is read" fault models a
        # capture (collect, close), so it is disarmed here rather than predicted.
        self.sim.moves_on_read = None
        acceptable: set[Outcome] = set()
        if code is None:
            for name, after in targets:
                lease = self.lease_named(name, ("active",))
                if lease is None:
                    code = "target_unknown"
                    break
                assert lease.pane is not None
                if after is None and self.agent(lease.pane).closed:
                    code = "agent_gone"
                    break
        if code is None:
            for name, after in targets:
                lease = self.lease_named(name, ("active",))
                assert lease is not None and lease.pane is not None
                agent = self.agent(lease.pane)
                if after is None:
                    if agent.status in SETTLED:
                        acceptable.add(("ok", name, agent.observe()))  # already settled: wins at once
                    continue  # otherwise: the cursor observed now, nothing has settled after it yet
                if agent.closed:
                    acceptable.add(("err", "agent_gone"))
                elif agent.seq > after and agent.status in SETTLED:
                    acceptable.add(("ok", name, agent.observe()))
            if not acceptable:
                code = "wait_timeout"
        try:
            won = anyio.run(
                self.service.waits.wait_any, WaitAnyInput(CONTROLLER, cred, tuple(targets), timeout=WAIT_ANY_TIMEOUT)
            )
        except CorralError as exc:
            if code is not None:
                self.refused("wait_any", exc, {code})
                return
            assert ("err", exc.code) in acceptable, f"wait_any: expected {acceptable}, got {exc.code}: {exc.message}"
            self.expect_events([])
            event(f"wait_any: {exc.code}")
            return
        assert code is None, f"wait_any returned where the model expected {code}"
        assert ("ok", won.target, won.observation) in acceptable, f"wait_any: expected {acceptable}, got {won}"
        self.expect_events([])
        event("wait_any: ok")

    # --- invariants -----------------------------------------------------------------------------------

    @invariant()
    def invariants_hold(self) -> None:
        """Every check below, on one read of the store; skipped when nothing was written or handed over
        since the last check (they only look at the store, the prompts and the runs, and agents' cursors
        only grow)."""
        assert self.store.events(self.last_seq) == [], "an event the model did not account for"
        key = (self.last_seq, len(self.sim.prompts), sum(len(a.runs) for a in self.sim.agents.values()))
        if key == self.checked:
            return
        self.checked = key
        events = self.store.events()
        found = {m: {i.id: i for i in self.store.find(m)} for m in ("controller", "reviewer", "receipt")}
        self.store_agrees_with_model(found)
        self.one_open_receipt_per_target(found["receipt"])
        self.prompts_only_under_their_own_receipt(events, found["receipt"])
        self.completed_output_comes_from_its_own_run(found["receipt"])
        self.no_text_in_the_store(events, found)
        self.cursors_only_grow_and_events_are_ordered(events, found)

    def store_agrees_with_model(self, found: dict[str, dict[str, Any]]) -> None:
        assert set(found["reviewer"]) == set(self.leases)
        for lease in self.leases.values():
            stored = found["reviewer"][lease.id]
            assert (stored.state, stored.data.get("pane_id"), stored.data["name"]) == (
                lease.state,
                lease.pane,
                lease.name,
            )
        assert set(found["receipt"]) == {r.id for r in self.receipts.values()}
        for rec in self.receipts.values():
            stored = found["receipt"][rec.id]
            data = stored.data
            # Among others: a receipt left reserved by an ambiguous delivery stays so until abandoned.
            assert stored.state == rec.state, f"receipt {rec.token}: store {stored.state}, model {rec.state}"
            assert (data["target"], data["pane_id"], data["before_seq"]) == (rec.lease_id, rec.pane, rec.before_seq)
            assert (data.get("after_seq"), data.get("settled_seq"), data.get("reason")) == (
                rec.after_seq,
                rec.settled_seq,
                rec.reason,
            )

    @staticmethod
    def one_open_receipt_per_target(receipts: dict[str, Any]) -> None:
        targets = Counter(r.data["target"] for r in receipts.values() if r.state in OPEN)
        assert all(n == 1 for n in targets.values()), f"two unresolved receipts for one target: {targets}"

    def prompts_only_under_their_own_receipt(self, events: list[Any], receipts: dict[str, Any]) -> None:
        """Every prompt the host got was handed over while exactly one receipt for the agent was open:
        the one reserved just before it, for exactly that text. And every receipt handed over one."""
        spans: dict[str, list[int | None]] = {}  # receipt id -> [reserved at, resolved at]
        for e in events:
            if e.machine != "receipt":
                continue
            if e.trigger == "relay":
                spans[e.instance_id] = [e.seq, None]
            elif e.to_state not in OPEN and spans[e.instance_id][1] is None:
                spans[e.instance_id][1] = e.seq
        calls = Counter((c.pane_id, c.stamp) for c in self.sim.prompts)
        for call in self.sim.prompts:
            open_then = [
                rid
                for rid, (start, end) in spans.items()
                if receipts[rid].data["pane_id"] == call.pane_id
                and start is not None
                and start <= call.stamp
                and (end is None or call.stamp < end)
            ]
            assert len(open_then) == 1, f"a prompt reached {call.pane_id} while receipts {open_then} were open"
            (rid,) = open_then
            assert spans[rid][0] == call.stamp, "a prompt was handed over under an older receipt"
            assert receipts[rid].data["prompt_sha256"] == sha(call.text), "the receipt is for another text"
        for rid, (start, _) in spans.items():
            assert calls[receipts[rid].data["pane_id"], start] == 1, f"receipt {rid} handed over no prompt, or two"

    def completed_output_comes_from_its_own_run(self, receipts: dict[str, Any]) -> None:
        by_id = {r.id: r for r in self.receipts.values()}
        for stored in receipts.values():
            if stored.state != "completed":
                continue
            data = stored.data
            run = self.sim.run_at(data["pane_id"], data["after_seq"])
            assert run is not None and not run.external, "the receipt is bound to no run corral started"
            assert sha(run.text) == data["prompt_sha256"], "the bound run worked on another prompt"
            assert data["settled_seq"] == data["after_seq"] + 1
            assert data["output_sha256"] == sha(run.output), "the recorded output is another run's"
            assert by_id[stored.id].output == run.output, "collect returned another run's output"

    def no_text_in_the_store(self, events: list[Any], found: dict[str, dict[str, Any]]) -> None:
        blob = json.dumps(
            [e.to_dict() for e in events]
            + [{"id": i.id, "data": dict(i.data)} for instances in found.values() for i in instances.values()],
            ensure_ascii=False,
        )
        for text in self.secrets | self.outputs():
            assert text not in blob, f"{text!r} is recorded in the store"

    def cursors_only_grow_and_events_are_ordered(self, events: list[Any], found: dict[str, dict[str, Any]]) -> None:
        seqs = [e.seq for e in events]
        assert seqs == sorted(set(seqs)), "event seq is not strictly increasing"
        assert seqs[-1] == self.last_seq
        by_instance: dict[str, list[Any]] = {}
        for e in events:
            by_instance.setdefault(e.instance_id, []).append(e)
        pane_of: dict[str, str] = {}
        for instances in found.values():
            for stored in instances.values():
                mine = by_instance[stored.id]
                assert [e.version for e in mine] == list(range(1, stored.version + 1)), "versions skip or repeat"
                assert mine[-1].to_state == stored.state
                if stored.data.get("pane_id"):
                    pane_of[stored.id] = stored.data["pane_id"]
        last: dict[str, int] = {}
        for e in events:
            pane = pane_of.get(e.instance_id)
            changed = e.payload.get("changed", {})
            for key in CURSOR_KEYS:
                value = changed.get(key)
                if pane is None or not isinstance(value, int):
                    continue
                assert value >= last.get(pane, 0), f"{key} {value} of {pane} went back (was {last.get(pane)})"
                assert value <= self.agent(pane).seq, f"{key} {value} is ahead of {pane}"
                last[pane] = value
        for agent in self.sim.agents.values():
            assert [seq for seq, _ in agent.history] == list(range(agent.seq + 1))


AgentsMachine.TestCase.settings = settings(
    max_examples=200,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    # One failure is enough to shrink: shrinking every distinct one would outlast the per-test timeout.
    report_multiple_bugs=False,
)
TestAgentsMachine = AgentsMachine.TestCase


# --- scripted histories -------------------------------------------------------------------------------


@pytest.fixture
def sim() -> Any:
    return SimHost()


@pytest.fixture
def agents(store: SQLiteStore, library: Library, sim: Any) -> Service:
    return Service(store, library, actor="test", hosts=lambda name: sim)


def _collect(service: Service, cred: Credential, *tokens: str) -> list[CollectResult]:
    return anyio.run(service.receipts.collect, CollectInput(CONTROLLER, cred, tokens, COLLECT_TIMEOUT))


def _code(call: Callable[[], object]) -> str:
    with pytest.raises(CorralError) as caught:
        call()
    return caught.value.code


def test_each_code_is_reachable(agents: Service, sim: Any, clock: Any, tmp_path: Path) -> None:
    """One scripted history through the simulated host that meets every outcome the machine predicts."""
    cwd = os.path.realpath(tmp_path)
    cred = agents.controller.acquire(AcquireInput(CONTROLLER, "TICKET-1", AUTH_SHA, TTL, "me@host")).credential
    ana = agents.reviewers.start(ReviewerStartInput(CONTROLLER, cred, "ana", KIND, cwd)).data["pane_id"]
    bob = agents.reviewers.start(ReviewerStartInput(CONTROLLER, cred, "bob", KIND, cwd)).data["pane_id"]
    codes: list[str] = []

    def relay(name: str, text: str) -> str:
        return agents.receipts.relay(RelayInput(CONTROLLER, cred, name, text)).token

    codes.append(_code(lambda: agents.reviewers.start(ReviewerStartInput(CONTROLLER, cred, "ana", KIND, cwd))))
    codes.append(_code(lambda: relay("cyd", "hello")))
    first = relay("ana", "first question")
    codes.append(_code(lambda: relay("ana", "second question")))
    codes.append(_code(lambda: _collect(agents, cred, first)))  # still working
    codes.append(_code(lambda: agents.reviewers.close(ReviewerCloseInput(CONTROLLER, cred, "ana", 1))))
    codes.append(_code(lambda: agents.receipts.abandon(AbandonInput(CONTROLLER, cred, first))))
    sim.finish(ana)
    codes.append(_code(lambda: agents.reviewers.close(ReviewerCloseInput(CONTROLLER, cred, "ana", 1))))
    (result,) = _collect(agents, cred, first)
    assert result.output == simhost.run_output(ana, 1, "first question")
    assert (result.receipt.data["settled_seq"], result.replayed) == (2, False)
    assert _collect(agents, cred, first)[0].replayed
    sim.poke(ana)  # someone types into the pane: the result can no longer be replayed
    codes.append(_code(lambda: _collect(agents, cred, first)))

    second = relay("bob", "will be overtaken")
    sim.finish(bob)
    sim.poke(bob)
    sim.finish(bob)
    codes.append(_code(lambda: _collect(agents, cred, second)))  # cursor_superseded: later work
    sim.moves_on_read = bob
    codes.append(_code(lambda: agents.reviewers.close(ReviewerCloseInput(CONTROLLER, cred, "bob", 4))))
    sim.finish(bob)  # the work that started while bob was being closed
    sim.next_prompt = "lost_undelivered"
    codes.append(_code(lambda: relay("bob", "lost")))
    (lost,) = [r.token for r in agents.receipts(ReceiptsInput(states=("reserved",)))]
    codes.append(_code(lambda: relay("bob", "blocked by the reserved receipt")))
    codes.append(_code(lambda: _collect(agents, cred, lost)))
    assert agents.receipts.abandon(AbandonInput(CONTROLLER, cred, lost)).state == "abandoned"
    codes.append(_code(lambda: _collect(agents, cred, lost)))
    codes.append(_code(lambda: agents.receipts.abandon(AbandonInput(CONTROLLER, cred, lost))))
    sim.next_prompt = "refused"
    codes.append(_code(lambda: relay("bob", "refused")))

    # ana still works on what was typed into it
    codes.append(_code(lambda: relay("ana", "while it works")))
    sim.finish(ana)
    third = relay("ana", "then it is swapped")
    sim.swap(ana)
    codes.append(_code(lambda: relay("ana", "to another agent")))
    sim.finish(ana)
    codes.append(_code(lambda: _collect(agents, cred, third)))  # identity_changed
    sim.vanish(bob)
    codes.append(_code(lambda: relay("bob", "to nobody")))

    new = agents.controller.resume(ResumeInput(CONTROLLER, cred)).credential
    codes.append(_code(lambda: agents.reviewers.start(ReviewerStartInput(CONTROLLER, cred, "cyd", KIND, cwd))))
    clock.advance(TTL)
    codes.append(_code(lambda: agents.reviewers.start(ReviewerStartInput(CONTROLLER, new, "cyd", KIND, cwd))))
    assert codes == [
        "agent_name_taken",
        "target_unknown",
        "receipt_outstanding",
        "wait_timeout",
        "agent_not_settled",
        "agent_not_settled",
        "cursor_mismatch",
        "cursor_superseded",
        "cursor_superseded",
        "cursor_superseded",
        "delivery_ambiguous",
        "receipt_outstanding",
        "receipt_reserved",
        "receipt_ended",
        "transition_not_allowed",
        "delivery_failed",
        "agent_not_settled",
        "identity_changed",
        "identity_changed",
        "agent_gone",
        "fence_stale",
        "lease_expired",
    ]


@pytest.mark.parametrize("which", ["stale", "forged"])
def test_replay_with_a_stale_credential_is_refused(agents: Service, sim: Any, tmp_path: Path, which: str) -> None:
    """A completed receipt's output is only for the controller's current holder.

    Before commit 0838faf a replay checked no fence at all: a stale or forged credential got the output.
    """
    cred = agents.controller.acquire(AcquireInput(CONTROLLER, "TICKET-1", AUTH_SHA, TTL, "me@host")).credential
    pane = agents.reviewers.start(ReviewerStartInput(CONTROLLER, cred, "ana", KIND, os.path.realpath(tmp_path)))
    token = agents.receipts.relay(RelayInput(CONTROLLER, cred, "ana", "a confidential review")).token
    sim.finish(pane.data["pane_id"])
    assert _collect(agents, cred, token)[0].receipt.state == "completed"
    agents.controller.resume(ResumeInput(CONTROLLER, cred))  # the lease moved on: ``cred`` is dead
    presented = cred if which == "stale" else Credential(CONTROLLER, cred.lease_id, cred.generation, "0" * 32)
    with pytest.raises(CorralError) as caught:
        _collect(agents, presented, token)
    assert caught.value.code == "fence_stale"
