"""The agent effects (:mod:`runner.effects.agents`), run as the engine's second phase runs them: the
intent's data, the secrets, and the real process host in ``resources["agents"]`` over a real SQLite store
(the scripted agent, kind ``script``, really runs). Faults are injected at the host's boundary only."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from runner.agents.abc import AgentBusyError, AgentError, Expect, Observation, StartOptions
from runner.agents.kinds import Kinds
from runner.agents.process import ProcessHost
from runner.context import format_time
from runner.sql.store_sqlite import SQLiteStore
from tests.conftest import FakeClock
from tests.support.contexts import Contexts


class Host(ProcessHost):
    """The process host, with faults switched on by the test."""

    start_fault: str | None = None  # "no_pane", "pane_left", "pane_left_unclosable", "renamed"
    close_fault = False
    prompt_fault: str | None = None  # "busy", "undelivered", "unconfirmed", "idle_after"

    def start(
        self, name: str, kind: str, cwd: str, options: StartOptions, gate: Any = None, nonce: Any = None
    ) -> Observation:
        if self.start_fault == "no_pane":
            raise AgentError("the kind's binary is missing", code="agent_start_failed")
        started = super().start(name, kind, cwd, options, gate, nonce)
        if self.start_fault in ("pane_left", "pane_left_unclosable"):
            self.close_fault = self.start_fault == "pane_left_unclosable"
            raise AgentError("the agent never came up", code="agent_start_failed", pane_id=started.pane_id)
        if self.start_fault == "renamed":
            return dataclasses.replace(started, name="someone-else")
        return started

    def close(self, pane_id: str, gate: Any = None) -> None:
        if self.close_fault:
            raise AgentError("the pane would not close", code="pane_close_failed")
        super().close(pane_id, gate)

    def prompt(self, pane_id: str, text: str, expect: Expect | None = None, gate: Any = None) -> Observation:
        if self.prompt_fault == "busy":
            raise AgentBusyError("the agent is working", code="agent_busy")
        if self.prompt_fault == "undelivered":
            raise AgentError("the prompt never left", code="agent_error", delivered=False)
        if self.prompt_fault == "unconfirmed":
            raise AgentError("the host went quiet mid-delivery", code="agent_error")
        after = super().prompt(pane_id, text, expect, gate)
        if self.prompt_fault == "idle_after":
            return dataclasses.replace(after, status="idle")
        return after


@pytest.fixture
def contexts(store: SQLiteStore) -> Contexts:
    return Contexts(store)


@pytest.fixture
def host(store: SQLiteStore, tmp_path: Path) -> Iterator[Host]:
    started = Host(store, tmp_path / "agents", Kinds.load([]))
    yield started
    for agent in started.list():
        started.close(agent.pane_id)


def lease_data(tmp_path: Path, name: str = "rev") -> dict[str, Any]:
    cwd = tmp_path / "project"
    cwd.mkdir(exist_ok=True)
    return {"name": name, "kind": "script", "cwd": str(cwd), "options": {}, "start_nonce": "nonce-1"}


def test_start_agent_starts_the_leased_agent_and_records_its_pane(
    contexts: Contexts, host: Host, tmp_path: Path, clock: FakeClock
) -> None:
    intent = contexts.put("reviewer/r1", "provisioning", lease_data(tmp_path))
    result = contexts.effect("start_agent", intent, resources={"agents": host})
    assert result.outcome == "success", result.message
    (agent,) = host.list()
    assert (agent.name, agent.kind, agent.cwd, agent.status) == ("rev", "script", str(tmp_path / "project"), "idle")
    assert result.data == {
        "pane_id": agent.pane_id,
        "started_seq": agent.seq,
        "terminal_id": None,
        "started_at": format_time(clock.now),
    }


@pytest.mark.parametrize(
    ("fault", "outcome", "panes_left"),
    [
        ("no_pane", "failure", 0),  # certain: nothing was created
        ("pane_left", "failure", 0),  # the pane it got was closed again
        ("pane_left_unclosable", "ambiguous", 1),  # a pane may be left: reconcile decides
        ("renamed", "ambiguous", 1),  # the host started something else than asked
    ],
)
def test_a_failed_start_is_failure_only_when_nothing_is_left(
    contexts: Contexts, host: Host, tmp_path: Path, fault: str, outcome: str, panes_left: int
) -> None:
    host.start_fault = fault
    intent = contexts.put("reviewer/r1", "provisioning", lease_data(tmp_path))
    result = contexts.effect("start_agent", intent, resources={"agents": host})
    assert result.outcome == outcome, result.message
    host.close_fault = False
    assert len(host.list()) == panes_left
    if panes_left:
        assert result.data["pane_id"] == host.list()[0].pane_id, "the pane is recorded for reconcile"


def test_close_agent_closes_the_pane_or_fails_leaving_it(contexts: Contexts, host: Host, tmp_path: Path) -> None:
    agent = host.start("rev", "script", str(tmp_path), StartOptions())
    lease = contexts.put("reviewer/r1", "closing", {"pane_id": agent.pane_id})
    host.close_fault = True
    failed = contexts.effect("close_agent", lease, resources={"agents": host})
    assert (failed.outcome, failed.data) == ("failure", {"failure": "the pane would not close"})
    assert [a.pane_id for a in host.list()] == [agent.pane_id]
    host.close_fault = False
    assert contexts.effect("close_agent", lease, resources={"agents": host}).outcome == "success"
    assert host.list() == []


def _receipt(contexts: Contexts, host: Host, tmp_path: Path) -> tuple[Any, Observation]:
    agent = host.start("rev", "script", str(tmp_path), StartOptions())
    data = {
        "pane_id": agent.pane_id,
        "name": "rev",
        "kind": "script",
        "cwd": str(tmp_path),
        "before_seq": agent.seq,
        "before_revision": agent.revision,
        "terminal_id": None,
    }
    return contexts.put("receipt/x", "reserved", data), agent


def test_deliver_prompt_is_success_when_this_agent_is_seen_working_past_the_cursor(
    contexts: Contexts, host: Host, tmp_path: Path
) -> None:
    receipt, agent = _receipt(contexts, host, tmp_path)
    result = contexts.effect(
        "deliver_prompt", receipt, secrets={"prompt": "echo delivered"}, resources={"agents": host}
    )
    assert result.outcome == "success", result.message
    assert result.data["after_seq"] > agent.seq
    done = anyio.run(host.wait, agent.pane_id, result.data["after_seq"], 30.0)
    assert done.status == "done" and "delivered" in host.read(agent.pane_id, 20)


@pytest.mark.parametrize(
    ("fault", "outcome"),
    [("busy", "failure"), ("undelivered", "failure"), ("unconfirmed", "ambiguous"), ("idle_after", "ambiguous")],
)
def test_deliver_prompt_fails_only_when_certain_nothing_was_delivered(
    contexts: Contexts, host: Host, tmp_path: Path, fault: str, outcome: str
) -> None:
    receipt, _ = _receipt(contexts, host, tmp_path)
    host.prompt_fault = fault
    result = contexts.effect("deliver_prompt", receipt, secrets={"prompt": "echo x"}, resources={"agents": host})
    assert result.outcome == outcome, result.message
    if outcome == "failure":
        assert result.data["reason"] == "delivery_failed" and result.message.startswith("not delivered")
    else:
        assert result.message.startswith("delivery unconfirmed")


def test_an_effect_without_an_agent_host_is_a_bug(contexts: Contexts, tmp_path: Path) -> None:
    lease = contexts.put("reviewer/r1", "closing", {"pane_id": "p1"})
    with pytest.raises(TypeError, match=r"needs an agent host in resources\['agents'\]"):
        contexts.effect("close_agent", lease)
