"""The agent host contract, run against every host.

``process``: supervised subprocesses over a real SQLite store, agents of the ``script`` kind (the
bundled demo agent). ``herdr``: the Herdr host driving the contract fake of ``herdr`` (Herdr itself
cannot be installed here). Prompts use the demo agent's directives (``echo``, ``sleep``, ``block``),
which the fake obeys the same way, so one test means the same thing on both hosts.

On Herdr four busy background agents (not started by corral, unnamed) change state all the time,
so the shared ``state_change_seq`` counter moves under every test: cursors are monotonic, not
contiguous. :func:`assert_next` states what both hosts promise about one change of one agent.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest

from runner.agents.abc import (
    PROMPTABLE,
    AgentBusyError,
    AgentGoneError,
    AgentHost,
    AgentKindError,
    Expect,
    Observation,
    StartOptions,
    WaitTimeoutError,
)
from runner.agents.herdr import HerdrHost
from runner.agents.kinds import Kinds
from runner.agents.process import ProcessHost
from runner.sql.store_sqlite import SQLiteStore


def assert_next(before: Observation, after: Observation) -> None:
    """``after`` is a later change of the same agent: its seq is past ``before``'s (by any amount: the
    counter may be shared), and where the host counts the agent's own changes, by exactly one."""
    assert after.seq > before.seq
    if before.revision is not None and after.revision is not None:
        assert after.revision == before.revision + 1
    assert after.identity == before.identity
    assert after.terminal_id == before.terminal_id


@dataclass
class Rig:
    host: AgentHost
    cwd: str
    background: frozenset[str] | set[str] = frozenset()

    def ours(self) -> list[Observation]:
        """The live agents, less the host's background agents (which corral did not start)."""
        return [o for o in self.host.list() if o.pane_id not in self.background]

    def start(self, name: str = "rev") -> Observation:
        return self.host.start(name, "script", self.cwd, StartOptions())


BACKGROUND_AGENTS = 4  # on Herdr: busy agents corral did not start, moving the shared counter


@pytest.fixture(params=["process", "herdr"])
def rig(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Rig]:
    work = tmp_path / "work"
    work.mkdir()
    if request.param == "process":
        with SQLiteStore(tmp_path / "s.db") as store:
            host = ProcessHost(store, tmp_path / "agents", Kinds.load([]))
            yield Rig(host, str(work))
            for observation in host.list():  # stop any supervisor a test left working
                host.close(observation.pane_id)
    else:
        fake = request.getfixturevalue("fake_herdr")
        background = set(fake.add_background_agents(BACKGROUND_AGENTS))
        yield Rig(HerdrHost(Kinds.load([]), workspace="w1"), str(work), background)


def test_start_observes_an_idle_agent_with_its_identity(rig: Rig) -> None:
    started = rig.start()
    assert (started.name, started.kind, started.cwd, started.status) == ("rev", "script", rig.cwd, "idle")
    assert started.settled and started.status in PROMPTABLE
    assert rig.host.get(started.pane_id) == started
    assert [o.pane_id for o in rig.ours()] == [started.pane_id]


def test_prompt_observes_working_exactly_one_past_the_cursor(rig: Rig) -> None:
    started = rig.start()
    working = rig.host.prompt(started.pane_id, "sleep 0.5")
    assert working.status == "working"
    assert_next(started, working)


@pytest.mark.anyio
async def test_wait_returns_a_settled_state_strictly_after_the_cursor(rig: Rig) -> None:
    started = rig.start()
    working = rig.host.prompt(started.pane_id, "sleep 0.3\necho finished")

    for after in (started.seq, working.seq):  # the cursor before the prompt, and the working one
        settled = await rig.host.wait(started.pane_id, after, 20.0)
        assert settled.settled and settled.status == "done"
        assert settled.seq > after
        assert_next(working, settled)


@pytest.mark.anyio
async def test_wait_is_never_satisfied_by_the_state_at_its_cursor(rig: Rig) -> None:
    started = rig.start()
    with pytest.raises(WaitTimeoutError):
        await rig.host.wait(started.pane_id, started.seq, 0.3)

    working = rig.host.prompt(started.pane_id, "echo one")
    done = await rig.host.wait(started.pane_id, working.seq, 20.0)
    began = time.monotonic()
    with pytest.raises(WaitTimeoutError) as caught:
        await rig.host.wait(started.pane_id, done.seq, 0.4)
    assert time.monotonic() - began >= 0.4
    assert caught.value.code == "wait_timeout"
    assert (caught.value.details["status"], caught.value.details["seq"]) == ("done", done.seq)


@pytest.mark.anyio
async def test_read_returns_the_output_and_changes_neither_status_nor_seq(rig: Rig) -> None:
    started = rig.start()
    working = rig.host.prompt(started.pane_id, "echo hello-contract\necho second-line")
    done = await rig.host.wait(started.pane_id, working.seq, 20.0)

    text = rig.host.read(started.pane_id, 50)

    assert "hello-contract\nsecond-line\n" in text
    assert len(rig.host.read(started.pane_id, 1).splitlines()) == 1
    assert rig.host.get(started.pane_id) == done


@pytest.mark.anyio
async def test_a_blocked_agent_settles_blocked_and_takes_no_prompt(rig: Rig) -> None:
    started = rig.start()
    working = rig.host.prompt(started.pane_id, "block")
    blocked = await rig.host.wait(started.pane_id, working.seq, 20.0)
    assert blocked.status == "blocked"
    assert_next(working, blocked)
    with pytest.raises(AgentBusyError) as caught:
        rig.host.prompt(started.pane_id, "echo more")
    assert caught.value.details["delivered"] is False
    assert rig.host.get(started.pane_id) == blocked


def test_prompt_while_working_is_busy_and_changes_nothing(rig: Rig) -> None:
    started = rig.start()
    working = rig.host.prompt(started.pane_id, "sleep 5")
    with pytest.raises(AgentBusyError) as caught:
        rig.host.prompt(started.pane_id, "echo too soon")
    assert caught.value.details["delivered"] is False
    assert rig.host.get(started.pane_id).seq == working.seq
    rig.host.close(started.pane_id)


@pytest.mark.anyio
async def test_a_prompt_meant_for_another_cursor_or_agent_is_not_delivered(rig: Rig) -> None:
    started = rig.start()
    first = rig.host.prompt(started.pane_id, "echo one", Expect(started.identity, started.seq))
    assert first.status == "working"
    assert_next(started, first)
    done = await rig.host.wait(started.pane_id, first.seq, 10)
    stale = [
        Expect(started.identity, started.seq),  # the cursor before the first run
        Expect((started.pane_id, "someone-else", started.kind, started.cwd), done.seq),
    ]
    for expect in stale:
        with pytest.raises(AgentBusyError) as caught:
            rig.host.prompt(started.pane_id, "echo two", expect)
        assert caught.value.details["delivered"] is False
        assert (rig.host.get(started.pane_id).status, rig.host.get(started.pane_id).seq) == (done.status, done.seq)
    second = rig.host.prompt(started.pane_id, "echo two", Expect(done.identity, done.seq))
    assert second.status == "working"
    assert_next(done, second)
    rig.host.close(started.pane_id)


@pytest.mark.anyio
async def test_a_done_agent_takes_the_next_prompt_at_the_next_cursor(rig: Rig) -> None:
    started = rig.start()
    first = rig.host.prompt(started.pane_id, "echo one")
    done = await rig.host.wait(started.pane_id, first.seq, 20.0)
    second = rig.host.prompt(started.pane_id, "echo two")
    assert second.status == "working"
    assert_next(done, second)
    again = await rig.host.wait(started.pane_id, done.seq, 20.0)
    assert again.status == "done"
    assert_next(second, again)
    assert "two" in rig.host.read(started.pane_id, 10)


@pytest.mark.anyio
async def test_close_makes_the_agent_gone_and_closing_again_is_fine(rig: Rig) -> None:
    started = rig.start()
    other = rig.start("other")
    rig.host.prompt(started.pane_id, "sleep 30")

    rig.host.close(started.pane_id)
    rig.host.close(started.pane_id)

    with pytest.raises(AgentGoneError):
        rig.host.get(started.pane_id)
    with pytest.raises(AgentGoneError):
        rig.host.prompt(started.pane_id, "echo hello")
    with pytest.raises(AgentGoneError):
        rig.host.read(started.pane_id, 10)
    with pytest.raises(AgentGoneError):
        await rig.host.wait(started.pane_id, started.seq, 1.0)
    assert [o.pane_id for o in rig.ours()] == [other.pane_id]
    assert rig.host.get(other.pane_id) == other


@pytest.mark.anyio
async def test_a_wait_ends_when_its_agent_is_closed(rig: Rig) -> None:
    started = rig.start()
    working = rig.host.prompt(started.pane_id, "sleep 30")

    async def close_soon() -> None:
        await anyio.sleep(0.3)
        await anyio.to_thread.run_sync(rig.host.close, started.pane_id)

    async with anyio.create_task_group() as tg:
        tg.start_soon(close_soon)
        with pytest.raises(AgentGoneError):
            await rig.host.wait(started.pane_id, working.seq, 20.0)


def test_an_unknown_kind_is_refused(rig: Rig) -> None:
    with pytest.raises(AgentKindError):
        rig.host.start("rev", "no-such-kind", rig.cwd, StartOptions())
    assert rig.ours() == []


def test_every_pane_is_new(rig: Rig) -> None:
    first = rig.start("one")
    rig.host.close(first.pane_id)
    second = rig.start("two")
    assert second.pane_id != first.pane_id


@pytest.mark.anyio
async def test_wait_many_returns_the_one_that_settled_past_its_cursor_and_get_many_observes(rig: Rig) -> None:
    """Issue 13: every host waits on many panes at once (the process host in one query per tick; the
    abc's default, which Herdr uses, races one wait per pane) and observes many in one call
    (``get_many``; ``cursors`` reduced to seq and settled)."""
    quiet, busy = rig.start("quiet"), rig.start("busy")
    assert rig.host.get_many([quiet.pane_id, busy.pane_id, "gone-pane"]) == {
        quiet.pane_id: rig.host.get(quiet.pane_id),
        busy.pane_id: rig.host.get(busy.pane_id),
    }
    with pytest.raises(WaitTimeoutError):
        await rig.host.wait_many({quiet.pane_id: quiet.seq, busy.pane_id: busy.seq}, 0.3)  # settled at the cursor
    working = rig.host.prompt(busy.pane_id, "echo many")
    cursors = rig.host.cursors([quiet.pane_id, busy.pane_id, "gone-pane"])
    assert cursors[quiet.pane_id] == (quiet.seq, True), "cursors: where each is, as get_many would say"
    assert set(cursors) == {quiet.pane_id, busy.pane_id} and cursors[busy.pane_id].seq >= working.seq
    found = await rig.host.wait_many({quiet.pane_id: quiet.seq, busy.pane_id: working.seq}, 20.0)
    assert list(found) == [busy.pane_id]
    settled = found[busy.pane_id]
    assert settled is not None and settled.status == "done" and settled.seq > working.seq
    assert_next(working, settled)
