"""The supervisor records a run's outcome even when the store is busy or its server away for a while
(``make chaos`` found outcomes dropped: both errors are ConflictErrors, which the supervisor read as
"someone else moved the slot"), and still leaves a slot someone else moved alone."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from runner.agents import supervisor
from runner.errors import ConflictError, StoreBusyError, StoreUnavailableError


@dataclass(frozen=True)
class Slot:
    pane_id: str
    seq: int
    status: str = "working"
    closed: bool = False
    exit_status: int | None = None
    pid: int | None = 7
    options: Any = None


class Slots:
    """A slot port whose writes fail with ``failures`` (in order) before they work."""

    def __init__(self, failures: list[Exception]) -> None:
        self.failures = failures
        self.current = Slot("p1", 1, options={})
        self.attempts = 0

    @contextlib.contextmanager
    def write(self) -> Iterator[Slots]:
        self.attempts += 1
        if self.failures:
            raise self.failures.pop(0)
        yield self

    def slot(self, pane_id: str) -> Slot:
        return self.current

    def put_slot(self, slot: Slot, expected_seq: int) -> None:
        assert expected_seq == self.current.seq
        self.current = slot


@pytest.fixture
def slots(monkeypatch: pytest.MonkeyPatch) -> Any:
    def install(failures: list[Exception]) -> Slots:
        port = Slots(failures)
        monkeypatch.setattr("runner.agents.slots.slot_store", lambda store: port)
        monkeypatch.setattr("runner.store.open_store", lambda url: contextlib.nullcontext(None))
        monkeypatch.setattr("time.sleep", lambda seconds: None)
        return port

    return install


JOB = {"store": "sqlite:///nowhere", "pane_id": "p1", "run": 1, "blocked_exit_codes": [], "log": "/dev/null"}


def test_a_busy_store_and_an_absent_server_are_waited_out(slots: Any) -> None:
    port = slots([StoreBusyError("locked"), StoreUnavailableError("gone"), StoreBusyError("locked")])
    supervisor.record(JOB, 0, None)
    assert port.attempts == 4
    assert (port.current.status, port.current.seq, port.current.exit_status) == ("done", 2, 0)


def test_patience_runs_out(slots: Any) -> None:
    slots([StoreBusyError("locked")] * 100)
    with pytest.raises(StoreBusyError):
        supervisor.record(JOB, 0, None, patience=0.0)


def test_a_slot_someone_else_moved_is_left_alone(slots: Any) -> None:
    port = slots([ConflictError("moved")])
    supervisor.record(JOB, 0, None)
    assert port.attempts == 1 and port.current.seq == 1


class ClocklessStore:
    """A store whose clock cannot be read (PostgreSQL's is its server's, and the server is away)."""

    def now(self) -> Any:
        raise StoreUnavailableError("gone")


def test_a_working_agent_is_observed_working_when_the_store_clock_cannot_be_read() -> None:
    """A prompt handed over while the server went away leaves a working slot without its pid: observing
    it must not raise (the effect that delivered the prompt would then be recorded failed)."""
    from runner.agents.process import ProcessHost
    from runner.agents.slots import AgentSlot

    host = object.__new__(ProcessHost)
    host.store = ClocklessStore()  # type: ignore[assignment]
    host.machine = "here"
    slot = AgentSlot("p1", "rev", "script", "/", "working", 1, run=1, updated_at="2026-01-01T00:00:00Z")
    assert host._observe(slot).status == "working"
