"""A Hypothesis state machine over the handoff memory (issue 18): checkpoints (by project, by session, in
a new session, pinned or not, of every status), pins, session closes, and the pruning every write and
close runs, with small limits so the window slides all the time.

Invariants, checked against the store after every step:

- no pinned checkpoint is ever pruned;
- the newest checkpoint of every session that is not completed is never pruned;
- per session and in total, the countable checkpoints (unpinned, not an open session's newest) never
  exceed the limits: the totals exceed them by at most the exempt rows;
- every checkpoint that went was countable (pruning takes the oldest first, never an exempt one), and
  sequence numbers within a session only grow.

Run on SQLite (many examples) and on PostgreSQL (fewer: every example is a fresh schema).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from runner.errors import CorralError
from runner.service import Service
from runner.service.inputs.memory import CheckpointInput, PinInput, SessionCloseInput
from runner.service.memory import Memory, MemoryLimits
from runner.store.memory import OPEN_STATUSES, memory_store
from tests.support.specs import shared_library
from tests.support.stores import StoreKind, store_kind

__all__ = ["store_kind"]

pytestmark = pytest.mark.slow

PER_SESSION = 3
TOTAL = 6
PROJECTS = ("p", "q")
STATUSES = st.sampled_from(["active", "active", "paused", "blocked", "completed"])


def fields_for(status: str) -> dict[str, Any]:
    if status == "completed":
        return {"status": status}
    out: dict[str, Any] = {"status": status, "next_steps": ("go on",)}
    if status == "blocked":
        out["blockers"] = ("the server is down",)
    return out


def machine_for(kind: StoreKind, root: Path) -> type[RuleBasedStateMachine]:
    class MemoryMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            directory = Path(tempfile.mkdtemp(dir=root))
            self.store = kind.open(kind.url(directory))
            self.service = Service(self.store, shared_library(), actor="hypothesis")
            self.memory = Memory(self.service.core, MemoryLimits(PER_SESSION, TOTAL))
            self.written: dict[str, tuple[str, int]] = {}  # checkpoint id -> (session, seq)
            self.pinned: set[str] = set()
            self.newest: dict[str, str] = {}  # session -> its newest checkpoint id
            # Insertion-ordered (ids are random): a replay draws the same session by position.
            self.status: dict[str, str] = {}  # session -> status, as the model expects it
            self.gone: set[str] = set()

        def teardown(self) -> None:
            self.store.close()

        def _record(self, result: dict[str, Any]) -> None:
            sid, cid = result["session_id"], result["checkpoint_id"]
            self.written[cid] = (sid, result["checkpoint"]["seq"])
            if result["checkpoint"]["pinned"]:
                self.pinned.add(cid)
            previous = self.newest.get(sid)
            if previous is not None:
                assert self.written[previous][1] < result["checkpoint"]["seq"], "seq grows within a session"
            self.newest[sid] = cid
            self.status[sid] = result["session"]["status"]

        @rule(project=st.sampled_from(PROJECTS), status=STATUSES, pinned=st.booleans(), new=st.booleans())
        def checkpoint_by_project(self, project: str, status: str, pinned: bool, new: bool) -> None:
            inp = CheckpointInput("a", "s", project=project, goal="g", pinned=pinned, **fields_for(status))
            try:
                result = self.memory.checkpoint(inp, new_session=new)
            except CorralError as exc:
                assert exc.code == "memory_session_ambiguous" and not new
                return
            self._record(result)

        @precondition(lambda self: any(s in OPEN_STATUSES for s in self.status.values()))
        @rule(data=st.data(), status=STATUSES, pinned=st.booleans())
        def checkpoint_by_session(self, data: st.DataObject, status: str, pinned: bool) -> None:
            sid = data.draw(st.sampled_from([s for s, x in self.status.items() if x in OPEN_STATUSES]))
            result = self.memory.checkpoint(
                CheckpointInput("a", "s", session_id=sid, pinned=pinned, **fields_for(status))
            )
            self._record(result)

        @precondition(lambda self: bool(self.written))
        @rule(data=st.data())
        def pin(self, data: st.DataObject) -> None:
            cid = data.draw(st.sampled_from(list(self.written)))
            try:
                self.memory.pin(PinInput(cid))
            except CorralError as exc:
                assert exc.code == "memory_checkpoint_unknown" and cid in self.gone
                return
            self.pinned.add(cid)

        @precondition(lambda self: any(s in OPEN_STATUSES for s in self.status.values()))
        @rule(data=st.data(), blocked=st.booleans())
        def close(self, data: st.DataObject, blocked: bool) -> None:
            sid = data.draw(st.sampled_from([s for s, x in self.status.items() if x in OPEN_STATUSES]))
            try:
                result = self.memory.close(SessionCloseInput("blocked" if blocked else "completed", session_id=sid))
            except CorralError as exc:
                assert exc.code in ("memory_blocker_required", "memory_completed_open")
                return
            self.status[sid] = result["session"]["status"]

        @invariant()
        def nothing_exempt_is_pruned_and_the_window_holds(self) -> None:
            with memory_store(self.store).snapshot() as reader:
                present = {c.id: c for c in reader.checkpoints()}
                sessions = {s.id: s for s in reader.sessions()}
            for cid in self.written:
                if cid not in present:
                    self.gone.add(cid)
            assert not (self.gone & self.pinned), "a pinned checkpoint was pruned"
            open_newest = {self.newest[s] for s, x in self.status.items() if x != "completed" and s in self.newest}
            assert not (self.gone & open_newest), "the newest checkpoint of an open session was pruned"
            assert {s: x.status for s, x in sessions.items()} == self.status
            exempt = {c for c in present if present[c].pinned} | (open_newest & set(present))
            countable = [c for c in present.values() if c.id not in exempt]
            assert len(countable) <= TOTAL, (len(countable), len(present))
            for sid in sessions:
                assert sum(1 for c in countable if c.session_id == sid) <= PER_SESSION
            for cid in self.gone:
                assert cid not in self.pinned

    return MemoryMachine


@pytest.mark.parametrize("examples", [60])
def test_memory_state_machine(store_kind: StoreKind, tmp_path: Path, examples: int) -> None:
    if store_kind.scheme == "postgresql":
        examples = 12
    run_state_machine_as_test(
        machine_for(store_kind, tmp_path),
        settings=settings(
            max_examples=examples,
            stateful_step_count=30,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        ),
    )
