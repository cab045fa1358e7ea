"""The process host's own guarantees beyond the host contract: a closed slot stays closed.

A close can land while a prompt is being handed over in another process. Real SQLite, real
supervisors; the close is made to land at the two points where the prompter holds a stale copy of
the slot: before it marks the slot ``working``, and after it started the supervisor but before it
recorded the supervisor's pid.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import pytest

from runner.agents import process
from runner.agents.abc import AgentBusyError, AgentError, AgentGoneError, StartOptions
from runner.agents.kinds import Kinds
from runner.agents.process import ProcessHost
from runner.errors import ConflictError
from runner.sql.store_sqlite import SQLiteStore


@pytest.fixture
def host(tmp_path: Path) -> Iterator[ProcessHost]:
    with SQLiteStore(tmp_path / "s.db") as store:
        yield ProcessHost(store, tmp_path / "agents", Kinds.load([]))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_closed_slot_is_never_written_again(host: ProcessHost, tmp_path: Path) -> None:
    pane = host.start("rev", "script", str(tmp_path), StartOptions()).pane_id
    with host.slots.read() as reader:
        stale = reader.slot(pane)
    assert stale is not None and not stale.closed
    host.close(pane)
    with pytest.raises(ConflictError) as caught, host.slots.write() as tx:
        tx.put_slot(replace(stale, status="working", seq=1, run=1), stale.seq)  # the seq still matches
    assert caught.value.details["closed"] is True
    with host.slots.read() as reader:
        after = reader.slot(pane)
    assert after is not None and after.closed and after.status == "idle" and after.seq == 0


def test_a_close_before_the_prompt_marks_working_wins(
    host: ProcessHost, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pane = host.start("rev", "script", str(tmp_path), StartOptions()).pane_id
    real_observe = host._observe

    def observe_then_close(slot: Any) -> Any:
        observed = real_observe(slot)
        monkeypatch.setattr(host, "_observe", real_observe)
        host.close(pane)  # another process closes the pane right after the prompter read the slot
        return observed

    monkeypatch.setattr(host, "_observe", observe_then_close)
    with pytest.raises(AgentBusyError) as caught:
        host.prompt(pane, "echo hi")
    assert caught.value.details["delivered"] is False
    with pytest.raises(AgentGoneError):
        host.get(pane)
    assert not list((tmp_path / "agents" / pane).glob("run-*.log")), "no run was started"


@pytest.mark.slow  # seconds of waiting on processes or deadlines: left out of make test-fast
def test_a_close_while_the_supervisor_starts_stops_it(
    host: ProcessHost, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pane = host.start("rev", "script", str(tmp_path), StartOptions()).pane_id
    real_run = subprocess.run
    launched: list[int] = []

    def run_then_close(*args: Any, **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
        done = real_run(*args, **kwargs)
        launched.append(int(done.stdout.decode().strip()))
        host.close(pane)  # no pid recorded yet: this close cannot stop the supervisor itself
        return done

    monkeypatch.setattr(process.subprocess, "run", run_then_close)
    with pytest.raises(AgentError) as caught:
        host.prompt(pane, "sleep 30")
    assert caught.value.code == "agent_prompt_failed"
    assert caught.value.details.get("delivered") is None, "the run may have begun: delivery is unknown"
    (pid,) = launched
    deadline = time.monotonic() + 5
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    stopped = not _alive(pid)
    if not stopped:
        os.killpg(pid, signal.SIGKILL)  # leave nothing running behind a failed test
    assert stopped, "the supervisor of a closed pane was stopped"
    with host.slots.read() as reader:
        slot = reader.slot(pane)
    assert slot is not None and slot.closed, "the close was not undone by the prompt"
    with pytest.raises(AgentGoneError):
        host.get(pane)


# A supervisor stand-in: leads its own process group, starts a member that ignores SIGTERM (as bwrap
# does while it sets up its namespaces), prints the member's pid, then waits to be stopped.
_STUBBORN_GROUP = """
import os, signal, subprocess, sys, time
os.setsid()
member = subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(60)"],
    stdout=subprocess.PIPE)
member.stdout.readline()
print(member.pid, flush=True)
time.sleep(60)
"""


def test_a_member_of_the_run_that_ignores_sigterm_is_killed_once_its_supervisor_is_gone(
    host: ProcessHost,
) -> None:
    import sys

    leader = subprocess.Popen([sys.executable, "-c", _STUBBORN_GROUP], stdout=subprocess.PIPE)
    assert leader.stdout is not None
    member = int(leader.stdout.readline())
    try:
        host._stop(leader.pid)
        leader.wait(5)  # the supervisor went on SIGTERM (reaped here, its parent)
        deadline = time.monotonic() + 5
        while process._alive(member) and time.monotonic() < deadline:  # (a zombie has stopped)
            time.sleep(0.01)
        assert not process._alive(member), "a member that ignored SIGTERM outlived the stop"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(member, signal.SIGKILL)
        leader.kill()
        leader.wait()
        leader.stdout.close()


def test_a_wait_never_blocks_the_event_loop_on_the_store(host: ProcessHost, tmp_path: Path) -> None:
    """The store is synchronous: while it is held (here: another thread's write transaction on the same
    store object), the wait's slot reads run in a worker thread and the loop keeps turning."""
    pane = host.start("rev", "script", str(tmp_path), StartOptions()).pane_id
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        with host.store.write():
            holding.set()
            release.wait(5)

    holder = threading.Thread(target=hold)
    holder.start()
    assert holding.wait(5)
    ticks: list[float] = []

    async def main() -> None:
        async def tick() -> None:
            while True:
                ticks.append(time.monotonic())
                await anyio.sleep(0.01)

        async def let_go() -> None:
            await anyio.sleep(0.5)
            release.set()  # a worker thread cannot be cancelled: it returns once the store is free

        async with anyio.create_task_group() as group:
            group.start_soon(tick)
            group.start_soon(let_go)
            with anyio.move_on_after(0.6):
                await host.wait(pane, 0, timeout=30)  # an idle agent at seq 0: it never settles past 0
            group.cancel_scope.cancel()

    try:
        anyio.run(main)
    finally:
        release.set()
        holder.join()
    assert len([t for t in ticks if t < ticks[0] + 0.45]) > 20, (
        f"the event loop stalled while the store was held: {len(ticks)} ticks"
    )


def test_an_exited_process_not_yet_reaped_counts_as_stopped() -> None:
    """A zombie has stopped: a close must not wait out its grace for an init that reaps late."""
    import os
    import subprocess
    import time

    from runner.agents.process import _alive

    child = subprocess.Popen(["true"])  # exits at once; not reaped until wait() below
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with open(f"/proc/{child.pid}/stat", "rb") as handle:
            if handle.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                break
        time.sleep(0.01)
    try:
        assert not _alive(child.pid)
        assert _alive(os.getpid())
    finally:
        child.wait()
    assert not _alive(child.pid)
