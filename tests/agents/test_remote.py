"""Agents of the process host live on one machine (issue 16): each slot records its host
(``options.host``); a process host on another machine sharing the store observes them (list, get,
wait) but refuses to prompt, close or read them with ``agent_remote`` (exit 4, naming the host), and
never judges their supervisor by a pid of its own machine.

Two process hosts on one store (the suite's store kind: SQLite, or PostgreSQL under
``CORRAL_TEST_STORE``), told they run on machines ``alpha`` and ``beta``; the scripted agent.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import anyio
import pytest

from runner.agents.abc import StartOptions
from runner.agents.kinds import Kinds
from runner.agents.process import AgentRemoteError, ProcessHost, this_machine
from runner.store import Store
from tests.support.stores import open_test_store


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with open_test_store(tmp_path) as opened:
        yield opened


def _hosts(store: Store, tmp_path: Path) -> tuple[ProcessHost, ProcessHost]:
    kinds = Kinds.load([])
    return (
        ProcessHost(store, tmp_path / "alpha", kinds, machine="alpha"),
        ProcessHost(store, tmp_path / "beta", kinds, machine="beta"),
    )


def test_an_agent_of_another_machine_is_observed_but_never_prompted_closed_or_read(
    store: Store, tmp_path: Path
) -> None:
    alpha, beta = _hosts(store, tmp_path)
    started = alpha.start("rev", "script", str(tmp_path), StartOptions())
    slot = alpha._slot(started.pane_id)
    assert slot.options["host"] == "alpha"
    assert [o.pane_id for o in beta.list()] == [started.pane_id], "observable from the other machine"
    assert beta.get(started.pane_id) == alpha.get(started.pane_id)
    for call, doing in (
        (lambda: beta.prompt(started.pane_id, "echo hi"), "prompting"),
        (lambda: beta.close(started.pane_id), "closing"),
        (lambda: beta.read(started.pane_id, 10), "reading"),
    ):
        with pytest.raises(AgentRemoteError) as caught:
            call()
        error = caught.value
        assert (error.code, error.status.exit) == ("agent_remote", 4)
        assert (error.details["host"], error.details["machine"], error.details["delivered"]) == ("alpha", "beta", False)
        assert f"{doing} it runs there" in error.message
    after = alpha.get(started.pane_id)
    assert (after.status, after.seq) == ("idle", 0), "nothing was done to the agent"
    assert not list((tmp_path / "alpha" / started.pane_id).glob("run-*.log")), "no prompt ran"
    alpha.prompt(started.pane_id, "echo from alpha")  # its own machine prompts it
    done = anyio.run(alpha.wait, started.pane_id, 0, 30)
    assert done.status == "done"
    assert anyio.run(beta.wait, started.pane_id, 0, 30).seq == done.seq, "the other machine waits on it too"
    alpha.close(started.pane_id)
    assert beta.list() == []


def test_a_working_agent_elsewhere_is_not_judged_by_a_pid_of_this_machine(store: Store, tmp_path: Path) -> None:
    alpha, beta = _hosts(store, tmp_path)
    started = alpha.start("rev", "script", str(tmp_path), StartOptions())
    dead_here = 2**22 + 12345  # above any pid this machine hands out (pid_max is at most 2**22)
    with alpha.slots.write() as tx:
        slot = tx.slot(started.pane_id)
        assert slot is not None
        tx.put_slot(replace(slot, status="working", seq=1, run=1, pid=dead_here), 0)
    assert alpha.get(started.pane_id).status == "unknown", "on its own machine: its supervisor is gone"
    assert beta.get(started.pane_id).status == "working", "elsewhere: that pid means nothing here"


def test_a_slot_recorded_before_hosts_were_named_is_this_machines(store: Store, tmp_path: Path) -> None:
    alpha, beta = _hosts(store, tmp_path)
    started = alpha.start("rev", "script", str(tmp_path), StartOptions())
    with alpha.slots.write() as tx:
        slot = tx.slot(started.pane_id)
        assert slot is not None
        options = {k: v for k, v in slot.options.items() if k != "host"}
        tx.put_slot(replace(slot, options=options), slot.seq)
    assert not beta.remote(alpha._slot(started.pane_id))
    assert ProcessHost(store, tmp_path / "x", Kinds.load([])).machine == this_machine()
