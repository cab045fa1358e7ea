"""The Herdr host against the contract fake of ``herdr`` (see ``fake_herdr.py``; Herdr itself cannot be
installed here): the exact command lines, the JSON it reads, how each Herdr error maps to a corral
error, the bounded retry of a busy pane, and event-driven waits that never return a stale state."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from itertools import pairwise
from pathlib import Path

import anyio
import pytest
from fake_herdr import FakeHerdr

from runner.agents.abc import (
    AgentBusyError,
    AgentError,
    AgentGoneError,
    AgentKindError,
    Observation,
    StartOptions,
    WaitTimeoutError,
)
from runner.agents.herdr import HerdrHost
from runner.agents.kinds import BUILTIN, Kind, Kinds
from runner.errors import AuthorityMovedError, CorralError, InputError

PANE = "w1:p2"  # the fake's first new pane (w1:p1 is the caller's own)
START_SEQ = 1  # a fresh server's first change: the new agent's launch (unknown -> idle)


@pytest.fixture
def cwd(tmp_path: Path) -> str:
    work = tmp_path / "work"
    work.mkdir()
    return str(work)


@pytest.fixture
def host(fake_herdr: FakeHerdr) -> HerdrHost:
    return HerdrHost(Kinds.load([]), workspace="w1", busy_timeout=2.0)


def started(host: HerdrHost, fake: FakeHerdr, cwd: str, name: str = "rev", kind: str = "script") -> Observation:
    observation = host.start(name, kind, cwd, StartOptions())
    fake.forget_calls()
    return observation


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


# --- start ------------------------------------------------------------------------------------------


def test_start_creates_a_tab_starts_the_agent_in_its_pane_and_observes_it(
    host: HerdrHost, fake_herdr: FakeHerdr, cwd: str
) -> None:
    observation = host.start("rev", "script", cwd, StartOptions())

    assert fake_herdr.calls() == [
        ["tab", "create", "--workspace", "w1", "--cwd", cwd, "--label", "rev", "--no-focus"],
        ["agent", "start", "rev", "--kind", "script", "--pane", PANE, "--timeout", "30000"],
        ["agent", "get", PANE],
    ]
    terminal = fake_herdr.state()["panes"][PANE]["terminal_id"]
    assert observation == Observation(PANE, "rev", "script", cwd, "idle", START_SEQ, terminal_id=terminal)
    assert observation.revision is None  # Herdr's revision counts title changes, not status changes
    assert fake_herdr.agent(PANE)["args"] == []


def test_model_and_effort_are_passed_only_to_a_kind_that_declares_them(
    host: HerdrHost, fake_herdr: FakeHerdr, cwd: str
) -> None:
    host.start("big", "claude", cwd, StartOptions(model="opus", effort="high"))
    host.start("plain", "claude", cwd, StartOptions())

    starts = fake_herdr.calls("agent", "start")
    assert starts[0] == [
        *["agent", "start", "big", "--kind", "claude", "--pane", "w1:p2", "--timeout", "30000"],
        *["--", "--effort", "high", "--model", "opus"],
    ]
    assert starts[1] == ["agent", "start", "plain", "--kind", "claude", "--pane", "w1:p3", "--timeout", "30000"]
    assert fake_herdr.agent("big")["args"] == ["--effort", "high", "--model", "opus"]

    fake_herdr.forget_calls()
    with pytest.raises(InputError):
        host.start("sc", "script", cwd, StartOptions(model="o3"))
    assert fake_herdr.calls() == []  # refused before any pane was made


def test_a_kind_runs_as_its_herdr_kind_and_is_reported_by_its_corral_name(fake_herdr: FakeHerdr, cwd: str) -> None:
    kinds = Kinds({**BUILTIN, "pi-coder": Kind("pi-coder", ("pi",), herdr_kind="pi")})
    host = HerdrHost(kinds, workspace="w1")

    observation = host.start("coder", "pi-coder", cwd, StartOptions())

    assert fake_herdr.calls("agent", "start")[0][3:5] == ["--kind", "pi"]
    assert observation.kind == "pi-coder"
    assert [o.kind for o in host.list()] == ["pi-coder"]


def test_kinds_sharing_a_herdr_kind_are_refused_because_herdr_cannot_tell_them_apart(
    fake_herdr: FakeHerdr, cwd: str
) -> None:
    kinds = Kinds({**BUILTIN, "claude-fast": Kind("claude-fast", ("claude",), herdr_kind="claude")})
    host = HerdrHost(kinds, workspace="w1")

    with pytest.raises(AgentKindError) as caught:
        host.start("fast", "claude-fast", cwd, StartOptions())
    assert caught.value.code == "agent_kind_ambiguous"
    assert fake_herdr.calls() == []


def test_unknown_kind_and_bad_name_are_refused_before_herdr_is_asked(
    host: HerdrHost, fake_herdr: FakeHerdr, cwd: str
) -> None:
    with pytest.raises(AgentKindError):
        host.start("rev", "no-such-kind", cwd, StartOptions())
    with pytest.raises(InputError):
        host.start("Not A Name", "script", cwd, StartOptions())
    assert fake_herdr.calls() == []


def test_workspace_defaults_to_the_one_corral_runs_in_else_to_herdrs_choice(
    fake_herdr: FakeHerdr, cwd: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    HerdrHost(Kinds.load([])).start("one", "script", cwd, StartOptions())
    monkeypatch.setenv("HERDR_WORKSPACE_ID", "w1")
    HerdrHost(Kinds.load([])).start("two", "script", cwd, StartOptions())

    creates = fake_herdr.calls("tab", "create")
    assert creates[0] == ["tab", "create", "--cwd", cwd, "--label", "one", "--no-focus"]
    assert creates[1] == ["tab", "create", "--workspace", "w1", "--cwd", cwd, "--label", "two", "--no-focus"]


def test_a_busy_pane_is_retried_every_100_ms_until_it_takes_the_agent(
    host: HerdrHost, fake_herdr: FakeHerdr, cwd: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_HERDR_PANE_BUSY", "3")

    observation = host.start("rev", "script", cwd, StartOptions())

    assert observation.status == "idle"
    starts = [r for r in fake_herdr.records() if r["argv"][:2] == ["agent", "start"]]
    assert len(starts) == 4
    gaps = [later["t"] - earlier["t"] for earlier, later in pairwise(starts)]
    assert all(gap >= 0.1 for gap in gaps), gaps


def test_a_pane_that_stays_busy_fails_at_busy_timeout_naming_the_pane_to_close(
    fake_herdr: FakeHerdr, cwd: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_HERDR_PANE_BUSY", "1000")
    host = HerdrHost(Kinds.load([]), workspace="w1", busy_timeout=0.6)

    began = time.monotonic()
    with pytest.raises(AgentError) as caught:
        host.start("rev", "script", cwd, StartOptions())
    elapsed = time.monotonic() - began

    assert caught.value.code == "agent_pane_busy"
    assert caught.value.details["pane_id"] == PANE
    assert 0.5 <= elapsed < 2.0
    attempts = len(fake_herdr.calls("agent", "start"))
    assert attempts == caught.value.details["attempts"] and 2 <= attempts <= 7
    host.close(PANE)  # what the caller does with the pane it was given
    assert PANE not in fake_herdr.state()["panes"]


def test_a_refused_start_names_its_pane(host: HerdrHost, fake_herdr: FakeHerdr, cwd: str) -> None:
    host.start("rev", "script", cwd, StartOptions())

    with pytest.raises(AgentError) as caught:
        host.start("rev", "script", cwd, StartOptions())

    assert caught.value.code == "agent_name_taken"
    assert caught.value.details["pane_id"] == "w1:p3"
    assert caught.value.details["herdr_code"] == "agent_name_taken"


def test_a_kind_herdr_does_not_run_closes_its_pane_and_is_an_unknown_kind(fake_herdr: FakeHerdr, cwd: str) -> None:
    kinds = Kinds({**BUILTIN, "exotic": Kind("exotic", ("exotic",))})
    host = HerdrHost(kinds, workspace="w1")

    with pytest.raises(AgentKindError) as caught:
        host.start("odd", "exotic", cwd, StartOptions())

    # Herdr's client refuses a kind it does not know in plain text, with exit status 2.
    assert caught.value.code == "agent_kind_unknown"
    assert "unsupported interactive agent kind: exotic" in caught.value.message
    assert fake_herdr.calls()[-1] == ["pane", "close", PANE]
    assert PANE not in fake_herdr.state()["panes"]


# --- observing ----------------------------------------------------------------------------------------


def test_get_and_list_read_herdrs_agent_records(host: HerdrHost, fake_herdr: FakeHerdr, cwd: str) -> None:
    host.start("one", "script", cwd, StartOptions())
    host.start("two", "codex", cwd, StartOptions())
    fake_herdr.forget_calls()

    terminal = fake_herdr.state()["panes"]["w1:p3"]["terminal_id"]
    # Each launch moved the server's one counter: the second agent's seq is the second change.
    assert host.get("w1:p3") == Observation("w1:p3", "two", "codex", cwd, "idle", START_SEQ + 1, terminal_id=terminal)
    assert sorted((o.pane_id, o.name, o.kind) for o in host.list()) == [
        ("w1:p2", "one", "script"),
        ("w1:p3", "two", "codex"),
    ]
    assert fake_herdr.calls() == [["agent", "get", "w1:p3"], ["agent", "list"]]


def test_the_kind_may_be_reported_under_kind_instead_of_agent(
    host: HerdrHost, fake_herdr: FakeHerdr, cwd: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    started(host, fake_herdr, cwd)
    monkeypatch.setenv("FAKE_HERDR_KIND_FIELD", "kind")
    assert host.get(PANE).kind == "script"


def agent_json(**changes: object) -> str:
    agent: dict[str, object] = {
        "pane_id": PANE,
        "name": "rev",
        "agent": "script",
        "cwd": "/w",
        "agent_status": "idle",
        "state_change_seq": 7,
    }
    agent.update(changes)
    return json.dumps({"id": "cli:agent:get", "result": {"type": "agent_info", "agent": agent}})


def test_an_unfamiliar_status_is_unknown_and_an_unfamiliar_kind_is_kept(host: HerdrHost, fake_herdr: FakeHerdr) -> None:
    fake_herdr.inject("agent get", stdout=agent_json(agent_status="thinking", agent="gemini"))
    observation = host.get(PANE)
    assert (observation.status, observation.kind, observation.seq) == ("unknown", "gemini", 7)


@pytest.mark.parametrize(
    "answer",
    [
        {"stdout": "not json"},
        {"stdout": '{"result": {}}'},
        {"stdout": agent_json(state_change_seq="7")},
        {"stdout": agent_json(agent_status=None)},
        {"stdout": "", "stderr": "thread 'main' panicked", "exit": 101},
        {"stdout": "", "stderr": "plain words", "exit": 1},
    ],
    ids=["not-json", "no-agent", "seq-not-int", "no-status", "crash", "error-not-json"],
)
def test_an_answer_that_cannot_be_read_is_a_protocol_error(
    host: HerdrHost, fake_herdr: FakeHerdr, answer: dict[str, object]
) -> None:
    fake_herdr.inject("agent get", **answer)
    with pytest.raises(AgentError) as caught:
        host.get(PANE)
    assert caught.value.code == "herdr_protocol"


@pytest.mark.parametrize(
    ("herdr_code", "error", "code"),
    [
        ("agent_not_found", AgentGoneError, "agent_gone"),
        ("pane_not_found", AgentGoneError, "agent_gone"),
        ("unsupported_agent_kind", AgentKindError, "agent_kind_unknown"),
        ("agent_name_taken", AgentError, "agent_name_taken"),
        ("server_not_running", AgentError, "herdr_error"),
    ],
)
def test_herdr_error_codes_map_to_corral_errors(
    host: HerdrHost, fake_herdr: FakeHerdr, herdr_code: str, error: type[CorralError], code: str
) -> None:
    fake_herdr.inject("agent get", error={"code": herdr_code, "message": "as herdr says"})
    with pytest.raises(error) as caught:
        host.get(PANE)
    assert type(caught.value) is error
    assert caught.value.code == code
    assert caught.value.details["herdr_code"] == herdr_code
    assert "as herdr says" in str(caught.value)


def test_an_error_printed_on_stdout_with_exit_0_is_still_an_error(host: HerdrHost, fake_herdr: FakeHerdr) -> None:
    fake_herdr.inject("agent get", stdout='{"id": "x", "error": {"code": "agent_not_found", "message": "gone"}}\n')
    with pytest.raises(AgentGoneError):
        host.get(PANE)


def test_a_usage_error_is_herdr_usage(host: HerdrHost, fake_herdr: FakeHerdr) -> None:
    fake_herdr.inject("agent get", usage="usage: herdr agent get <target>")
    with pytest.raises(AgentError) as caught:
        host.get(PANE)
    assert caught.value.code == "herdr_usage"
    assert "usage: herdr agent get" in caught.value.message


@pytest.mark.anyio
async def test_a_missing_herdr_is_herdr_unavailable(tmp_path: Path, cwd: str, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = HerdrHost(Kinds.load([]), binary=str(tmp_path / "no-herdr-here"))
    monkeypatch.setenv("PATH", str(tmp_path))  # and none on PATH either
    for host in (missing, HerdrHost(Kinds.load([]))):
        with pytest.raises(AgentError) as caught:
            host.get(PANE)
        assert caught.value.code == "herdr_unavailable"
        with pytest.raises(AgentError) as caught:
            host.start("rev", "script", cwd, StartOptions())
        assert caught.value.code == "herdr_unavailable"
        with pytest.raises(AgentError) as caught:
            await host.wait(PANE, 0, 1.0)
        assert caught.value.code == "herdr_unavailable"


def test_a_herdr_that_hangs_is_killed_at_the_call_timeout(fake_herdr: FakeHerdr) -> None:
    host = HerdrHost(Kinds.load([]), workspace="w1", call_timeout=0.5)
    fake_herdr.inject("agent get", sleep=30, stdout=agent_json())
    began = time.monotonic()
    with pytest.raises(AgentError) as caught:
        host.get(PANE)
    assert caught.value.code == "herdr_timeout"
    assert time.monotonic() - began < 5
    hung = fake_herdr.records()[-1]["pid"]
    assert not alive(hung)


def test_a_call_cancelled_as_its_process_starts_leaves_no_child_behind_its_loop(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Each CLI verb runs its own event loop. A cancellation that lands between the spawn and the
    moment the process is handed back (a lost ``wait-any`` race, a ``--timeout``) must still kill and
    reap the child before the loop closes: otherwise asyncio reports a subprocess still running, the
    suite's warnings-as-errors turn that into a failure, and a long-lived server leaks a zombie."""
    import gc
    import random
    import warnings

    from runner.agents.herdr_cli import SubprocessRunner

    unraised: list[str] = []
    seen_hook = sys.unraisablehook
    sys.unraisablehook = lambda unraisable: unraised.append(repr(unraisable.exc_value))

    async def cancelled_call(after: float) -> None:
        with anyio.move_on_after(after):
            await SubprocessRunner().run_async(["sleep", "30"], 60)

    rng = random.Random(7)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(120):  # spawning takes about a millisecond: deadlines across it
                anyio.run(cancelled_call, rng.uniform(0, 0.004))
            gc.collect()
    finally:
        sys.unraisablehook = seen_hook
    left = [str(w.message) for w in caught if "still running" in str(w.message)]
    left += [u for u in unraised if "still running" in u]
    left += [r.getMessage() for r in caplog.records if "is closed" in r.getMessage()]  # asyncio's own log
    assert left == []


def test_read_asks_for_recent_lines_and_changes_nothing(host: HerdrHost, fake_herdr: FakeHerdr, cwd: str) -> None:
    started(host, fake_herdr, cwd)
    text = "echo first\necho second\necho third"
    working = host.prompt(PANE, text)
    done = anyio.run(host.wait, PANE, working.seq, 10.0)
    fake_herdr.forget_calls()

    assert host.read(PANE, 2) == f"third\nfake agent: handled {len(text)} characters\n"
    assert host.read(PANE, 50).startswith("first\nsecond\nthird\n")
    assert fake_herdr.calls("agent", "read") == [
        ["agent", "read", PANE, "--source", "recent", "--lines", "2"],
        ["agent", "read", PANE, "--source", "recent", "--lines", "50"],
    ]
    assert host.get(PANE) == done


def test_read_of_a_gone_pane_is_agent_gone(host: HerdrHost, fake_herdr: FakeHerdr) -> None:
    with pytest.raises(AgentGoneError):
        host.read("w1:p9", 10)


# --- prompt -------------------------------------------------------------------------------------------


def test_prompt_hands_the_text_over_as_one_argument_and_returns_working(
    host: HerdrHost, fake_herdr: FakeHerdr, cwd: str
) -> None:
    started(host, fake_herdr, cwd)
    text = '-n review this: it\'s "quoted", $(rm -rf /) `x` ; | &\nsecond line\tand a tab'

    observation = host.prompt(PANE, text)

    assert fake_herdr.calls("agent", "prompt") == [
        ["agent", "prompt", PANE, text, "--wait", "--until", "working", "--timeout", "30000"]
    ]
    assert fake_herdr.agent(PANE)["prompts"] == [text]
    assert (observation.status, observation.seq) == ("working", START_SEQ + 1)  # no other agent moved


class MovedGate:
    """A gate whose authority has moved: it refuses every call, and counts them."""

    store = None

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, tx: object = None) -> None:
        self.calls += 1
        raise AuthorityMovedError("the fence moved", code="fence_stale")


def test_the_gate_is_the_last_check_before_herdr_acts(host: HerdrHost, fake_herdr: FakeHerdr, cwd: str) -> None:
    """Herdr cannot be atomic with the store: the gate runs immediately before each command that acts,
    and a refusal means the command is never run."""
    started(host, fake_herdr, cwd)
    gate = MovedGate()
    with pytest.raises(AuthorityMovedError):
        host.prompt(PANE, "never typed", gate=gate)
    with pytest.raises(AuthorityMovedError):
        host.close(PANE, gate=gate)
    with pytest.raises(AuthorityMovedError):
        host.start("other", "script", cwd, StartOptions(), gate=gate)
    assert gate.calls == 3
    assert fake_herdr.calls("agent", "prompt") == [] and fake_herdr.calls("pane", "close") == []
    assert fake_herdr.calls("tab", "create") == []
    assert not fake_herdr.agent(PANE).get("prompts")


def test_prompt_to_a_working_or_blocked_agent_is_refused_without_typing_anything(
    host: HerdrHost, fake_herdr: FakeHerdr, cwd: str
) -> None:
    started(host, fake_herdr, cwd)
    host.prompt(PANE, "sleep 30")
    with pytest.raises(AgentBusyError) as caught:
        host.prompt(PANE, "another")
    assert caught.value.details["delivered"] is False
    assert caught.value.details["status"] == "working"

    with fake_herdr.edit() as state:
        agent = state["panes"][PANE]["agent"]
        agent.update(status="blocked", seq=agent["seq"] + 1, work_until=None)
    with pytest.raises(AgentBusyError):
        host.prompt(PANE, "another")
    assert fake_herdr.agent(PANE)["prompts"] == ["sleep 30"]
    assert len(fake_herdr.calls("agent", "prompt")) == 1


@pytest.mark.parametrize("herdr_code", ["agent_blocked", "agent_not_ready"])
def test_prompt_refused_by_herdr_is_busy_and_not_delivered(
    host: HerdrHost, fake_herdr: FakeHerdr, cwd: str, herdr_code: str
) -> None:
    started(host, fake_herdr, cwd)
    fake_herdr.inject("agent prompt", error={"code": herdr_code, "message": "no"})
    with pytest.raises(AgentBusyError) as caught:
        host.prompt(PANE, "hello")
    assert caught.value.details == {
        "pane_id": PANE,
        "herdr_code": herdr_code,
        "delivered": False,
    }


def test_a_stalled_prompt_may_have_been_delivered(host: HerdrHost, fake_herdr: FakeHerdr, cwd: str) -> None:
    started(host, fake_herdr, cwd)
    fake_herdr.inject("agent prompt", error={"code": "agent_prompt_stalled", "message": "state_change_seq remained 2"})
    with pytest.raises(AgentError) as caught:
        host.prompt(PANE, "hello")
    assert caught.value.code == "agent_prompt_stalled"
    assert caught.value.details["delivered"] is None


@pytest.mark.parametrize(
    ("answer", "error", "delivered"),
    [
        ({"error": {"code": "agent_not_found", "message": "gone"}}, AgentGoneError, False),
        ({"usage": "unknown option"}, AgentError, False),
        ({"error": {"code": "timeout", "message": "slow"}}, AgentError, None),
    ],
    ids=["gone", "usage", "other"],
)
def test_prompt_failures_say_whether_anything_was_delivered(
    host: HerdrHost,
    fake_herdr: FakeHerdr,
    cwd: str,
    answer: dict[str, object],
    error: type[CorralError],
    delivered: bool | None,
) -> None:
    started(host, fake_herdr, cwd)
    fake_herdr.inject("agent prompt", **answer)
    with pytest.raises(error) as caught:
        host.prompt(PANE, "hello")
    assert caught.value.details["delivered"] is delivered


@pytest.mark.parametrize("answer", ['{"id": "cli:agent:prompt", "result": {"type": "agent_prompted"}}', "garbage"])
def test_a_prompt_answer_without_an_agent_record_is_observed_afresh(
    host: HerdrHost, fake_herdr: FakeHerdr, cwd: str, answer: str
) -> None:
    started(host, fake_herdr, cwd)
    fake_herdr.inject("agent prompt", stdout=answer)
    fake_herdr.inject("agent get", stdout=agent_json())  # the look before the prompt
    fake_herdr.inject("agent get", stdout=agent_json(agent_status="working", state_change_seq=8))

    observation = host.prompt(PANE, "hello")

    assert (observation.status, observation.seq) == ("working", 8)
    assert [argv[:2] for argv in fake_herdr.calls()] == [["agent", "get"], ["agent", "prompt"], ["agent", "get"]]


def test_a_taken_prompt_whose_agent_cannot_be_seen_is_of_unknown_delivery(
    host: HerdrHost, fake_herdr: FakeHerdr, cwd: str
) -> None:
    started(host, fake_herdr, cwd)
    fake_herdr.inject("agent prompt", stdout="garbage")
    fake_herdr.inject("agent get", stdout=agent_json())
    fake_herdr.inject("agent get", stdout="garbage too")
    with pytest.raises(AgentError) as caught:
        host.prompt(PANE, "hello")
    assert (caught.value.code, caught.value.details["delivered"]) == ("herdr_protocol", None)


def test_a_prompt_that_cannot_be_one_argument_is_refused_before_herdr(
    host: HerdrHost, fake_herdr: FakeHerdr, cwd: str
) -> None:
    started(host, fake_herdr, cwd)
    for text in ("nul\x00byte", "x" * (128 * 1024)):
        with pytest.raises(AgentError) as caught:
            host.prompt(PANE, text)
        assert (caught.value.code, caught.value.details["delivered"]) == ("prompt_invalid", False)
    assert fake_herdr.calls() == []


# --- wait ---------------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_wait_runs_one_herdr_wait_for_every_other_status_and_returns_the_settled_state(
    host: HerdrHost, fake_herdr: FakeHerdr, cwd: str
) -> None:
    started(host, fake_herdr, cwd)
    working = host.prompt(PANE, "sleep 1")
    fake_herdr.forget_calls()

    settled = await host.wait(PANE, working.seq, 10.0)

    assert (settled.status, settled.seq) == ("done", working.seq + 1)
    waits = fake_herdr.calls("agent", "wait")
    until = ["--until", "idle", "--until", "done", "--until", "blocked", "--until", "unknown"]
    assert waits == [["agent", "wait", PANE, *until, "--timeout", "3000"]]  # one process, --until repeated
    assert len(fake_herdr.calls("agent", "get")) == 2  # before and after the wait: no polling


@pytest.mark.anyio
async def test_wait_never_returns_a_state_at_or_before_the_cursor(
    host: HerdrHost, fake_herdr: FakeHerdr, cwd: str
) -> None:
    first = started(host, fake_herdr, cwd)
    host.prompt(PANE, "echo one")
    done = await host.wait(PANE, first.seq, 10.0)  # working at seq+1 is not settled: it waits for done
    assert (done.status, done.seq) == ("done", first.seq + 2)

    waits_before = len(fake_herdr.calls("agent", "wait"))

    async def prompt_later() -> None:
        # Prompt only once the wait below runs its herdr wait (a loaded machine may start it late).
        with anyio.fail_after(20):
            while len(fake_herdr.calls("agent", "wait")) == waits_before:
                await anyio.sleep(0.05)
        await anyio.sleep(0.2)
        await anyio.to_thread.run_sync(host.prompt, PANE, "sleep 0.3")

    async with anyio.create_task_group() as tg:
        tg.start_soon(prompt_later)
        again = await host.wait(PANE, done.seq, 10.0)  # done at the cursor itself does not count

    assert (again.status, again.seq) == ("done", done.seq + 2)
    first_round = fake_herdr.calls("agent", "wait")[-2]
    assert [first_round[i + 1] for i, word in enumerate(first_round) if word == "--until"] == [
        "idle",
        "working",
        "blocked",
        "unknown",
    ]


@pytest.mark.anyio
async def test_wait_for_a_blocked_agent(host: HerdrHost, fake_herdr: FakeHerdr, cwd: str) -> None:
    started(host, fake_herdr, cwd)
    working = host.prompt(PANE, "block")
    blocked = await host.wait(PANE, working.seq, 10.0)
    assert (blocked.status, blocked.seq) == ("blocked", working.seq + 1)
    assert "CORRAL-BLOCKED" in host.read(PANE, 5)


@pytest.mark.anyio
async def test_wait_times_out_without_a_change(host: HerdrHost, fake_herdr: FakeHerdr, cwd: str) -> None:
    idle = started(host, fake_herdr, cwd)
    began = time.monotonic()
    with pytest.raises(WaitTimeoutError) as caught:
        await host.wait(PANE, idle.seq, 0.5)
    elapsed = time.monotonic() - began
    assert 0.5 <= elapsed < 2.0
    assert caught.value.details == {"pane_id": PANE, "after_seq": idle.seq, "status": "idle", "seq": idle.seq}
    assert host.get(PANE) == idle


@pytest.mark.anyio
async def test_waits_longer_than_a_slice_observe_again_between_slices(fake_herdr: FakeHerdr, cwd: str) -> None:
    host = HerdrHost(Kinds.load([]), workspace="w1", wait_slice=0.25)
    started(host, fake_herdr, cwd)
    working = host.prompt(PANE, "sleep 1.2")
    settled = await host.wait(PANE, working.seq, 10.0)
    assert (settled.status, settled.seq) == ("done", working.seq + 1)
    assert len(fake_herdr.calls("agent", "get")) >= 4


@pytest.mark.anyio
async def test_wait_on_a_pane_that_goes_away_is_agent_gone(host: HerdrHost, fake_herdr: FakeHerdr, cwd: str) -> None:
    with pytest.raises(AgentGoneError):
        await host.wait("w1:p9", 0, 5.0)

    started(host, fake_herdr, cwd)
    working = host.prompt(PANE, "sleep 30")

    async def close_later() -> None:
        await anyio.sleep(0.3)
        await anyio.to_thread.run_sync(host.close, PANE)

    async with anyio.create_task_group() as tg:
        tg.start_soon(close_later)
        with pytest.raises(AgentGoneError):
            await host.wait(PANE, working.seq, 10.0)


@pytest.mark.anyio
async def test_a_cancelled_wait_kills_its_herdr_waits(host: HerdrHost, fake_herdr: FakeHerdr, cwd: str) -> None:
    idle = started(host, fake_herdr, cwd)

    def waiting() -> bool:
        return any(r["argv"][:2] == ["agent", "wait"] for r in fake_herdr.records())

    async with anyio.create_task_group() as tg:

        async def cancel_once_herdr_waits() -> None:
            with anyio.fail_after(20):  # cancel only once the herdr wait runs (a loaded machine is slow)
                while not waiting():
                    await anyio.sleep(0.05)
            await anyio.sleep(0.2)
            tg.cancel_scope.cancel()

        tg.start_soon(cancel_once_herdr_waits)
        await host.wait(PANE, idle.seq, 30.0)
        raise AssertionError("the wait ended before it was cancelled")
    waits = [r for r in fake_herdr.records() if r["argv"][:2] == ["agent", "wait"]]
    assert len(waits) == 1
    assert not any(alive(r["pid"]) for r in waits)


# --- close --------------------------------------------------------------------------------------------


def test_close_closes_the_pane_and_a_second_close_is_fine(host: HerdrHost, fake_herdr: FakeHerdr, cwd: str) -> None:
    started(host, fake_herdr, cwd)
    host.close(PANE)
    host.close(PANE)
    assert fake_herdr.calls() == [["pane", "close", PANE], ["pane", "close", PANE]]
    with pytest.raises(AgentGoneError):
        host.get(PANE)


def test_close_reports_other_failures(host: HerdrHost, fake_herdr: FakeHerdr) -> None:
    fake_herdr.inject("pane close", error={"code": "server_not_running", "message": "no server"})
    with pytest.raises(AgentError) as caught:
        host.close(PANE)
    assert caught.value.details["herdr_code"] == "server_not_running"


# --- Herdr as its source has it (0.8.2) -----------------------------------------------------------


def test_seq_is_the_servers_one_counter_and_moves_only_when_this_agent_changes(
    host: HerdrHost, fake_herdr: FakeHerdr, cwd: str
) -> None:
    idle = started(host, fake_herdr, cwd)
    fake_herdr.add_background_agents(4, period=0.01)
    time.sleep(0.3)

    assert host.get(PANE) == idle  # others' changes move the counter, not this agent's seq
    assert fake_herdr.state()["seq"] > idle.seq + 10
    working = host.prompt(PANE, "echo hi")
    assert working.status == "working"
    assert working.seq > idle.seq + 10  # monotonic, not contiguous: it took the counter's value
    assert working.terminal_id == idle.terminal_id is not None
    assert working.revision is None


def test_a_restart_gives_new_terminal_ids_restarts_the_counter_and_loses_names(
    host: HerdrHost, fake_herdr: FakeHerdr, cwd: str
) -> None:
    idle = started(host, fake_herdr, cwd)
    host.prompt(PANE, "echo one")
    fake_herdr.restart()
    time.sleep(0.05)

    after = host.get(PANE)
    assert after.terminal_id != idle.terminal_id
    assert after.name == ""  # Herdr loses agent names on a restart
    assert after.seq <= idle.seq + 2  # the counter started again from zero
    assert host.find("rev", "script", cwd) == []  # an unnamed agent is never taken for the lease's


def test_unnamed_agents_without_kind_or_cwd_are_listed(host: HerdrHost, fake_herdr: FakeHerdr, cwd: str) -> None:
    ours = started(host, fake_herdr, cwd)
    others = fake_herdr.add_background_agents(2, kind=None, cwd=False)

    listed = {o.pane_id: o for o in host.list()}

    assert listed[ours.pane_id] == ours
    for pane_id in others:
        assert (listed[pane_id].name, listed[pane_id].kind, listed[pane_id].cwd) == ("", "unknown", "")
        assert listed[pane_id].terminal_id


def test_corral_agents_lists_an_unnamed_herdr_agent(fake_herdr: FakeHerdr, cli_env: dict[str, str]) -> None:
    fake_herdr.add_background_agents(1, kind=None, cwd=False)
    env = {
        **cli_env,
        "PATH": f"{fake_herdr.bin}{os.pathsep}{cli_env['PATH']}",
        "FAKE_HERDR_STATE": str(fake_herdr.state_dir),
    }
    env.pop("CORRAL_HERDR", None)
    corral = str(Path(sys.executable).parent / "corral")

    done = subprocess.run(
        [corral, "agents", "--host", "herdr", "--json"],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )

    assert done.returncode == 0, done.stderr
    agents = json.loads(done.stdout)["agents"]
    assert [(a["name"], a["kind"], a["cwd"]) for a in agents] == [("", "unknown", "")]


@pytest.mark.anyio
async def test_a_pane_closed_during_a_wait_any_is_gone_not_an_exception_group(
    host: HerdrHost, fake_herdr: FakeHerdr, cwd: str
) -> None:
    """Herdr answers ``agent_not_running`` to a wait whose pane closes: that is the agent gone, which a
    wait-any catches, not a host failure escaping its task group."""
    started(host, fake_herdr, cwd)
    working = host.prompt(PANE, "sleep 30")
    outcomes: list[str] = []

    async def watch() -> None:
        try:
            await host.wait(PANE, working.seq, 20.0)
        except AgentGoneError as exc:
            outcomes.append(str(exc.details.get("herdr_code")))

    async def close_soon() -> None:
        await anyio.sleep(0.3)
        await anyio.to_thread.run_sync(host.close, PANE)

    async with anyio.create_task_group() as tg:
        tg.start_soon(watch)
        tg.start_soon(close_soon)

    assert outcomes in (["agent_not_running"], ["agent_not_found"])


def test_start_waits_for_readiness_and_maps_its_failures(
    fake_herdr: FakeHerdr, cwd: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = HerdrHost(Kinds.load([]), workspace="w1", start_timeout=3.2)
    monkeypatch.setenv("FAKE_HERDR_DETECT_KIND", "claude")
    with pytest.raises(AgentError) as mismatch:
        host.start("one", "codex", cwd, StartOptions())
    assert (mismatch.value.code, mismatch.value.details["pane_id"]) == ("agent_kind_mismatch", PANE)
    assert "check the kind" in mismatch.value.message
    monkeypatch.delenv("FAKE_HERDR_DETECT_KIND")

    monkeypatch.setenv("FAKE_HERDR_LAUNCH_SECONDS", "30")
    with pytest.raises(AgentError) as slow:
        host.start("two", "codex", cwd, StartOptions())
    assert (slow.value.code, slow.value.details["pane_id"]) == ("agent_start_timeout", "w1:p3")
    assert fake_herdr.calls("agent", "start")[-1][-2:] == ["--timeout", "3200"]


@pytest.mark.parametrize(
    ("herdr_code", "code"),
    [
        ("agent_pane_not_found", "agent_pane_not_found"),
        ("agent_name_not_found", "agent_name_lost"),
        ("invalid_agent_timeout", "agent_start_timeout_invalid"),
        ("agent_not_ready", "agent_not_ready"),
    ],
)
def test_start_refusals_map_to_corral_codes_naming_the_pane(
    host: HerdrHost, fake_herdr: FakeHerdr, cwd: str, herdr_code: str, code: str
) -> None:
    fake_herdr.inject("agent start", error={"code": herdr_code, "message": "no"})
    with pytest.raises(AgentError) as caught:
        host.start("rev", "script", cwd, StartOptions())
    assert (caught.value.code, caught.value.details["herdr_code"], caught.value.details["pane_id"]) == (
        code,
        herdr_code,
        PANE,
    )
    assert "; " in caught.value.message  # a next step follows Herdr's words


@pytest.mark.parametrize(("seconds", "ok"), [(3.0, False), (3.001, True), (300.0, True), (300.001, False)])
def test_the_start_timeout_must_be_within_herdrs_bounds(fake_herdr: FakeHerdr, seconds: float, ok: bool) -> None:
    if ok:
        assert HerdrHost(Kinds.load([]), start_timeout=seconds).start_timeout_ms <= 300_000
    else:
        with pytest.raises(InputError):
            HerdrHost(Kinds.load([]), start_timeout=seconds)
    with pytest.raises(InputError):
        HerdrHost(Kinds.load([]), prompt_timeout=5.0)  # Herdr's 5 s effect gate must fit inside it


@pytest.mark.parametrize(
    ("herdr_code", "code"), [("agent_not_ready", "agent_not_ready"), ("agent_blocked", "agent_busy")]
)
def test_prompt_refusals_keep_their_meaning_and_were_not_delivered(
    host: HerdrHost, fake_herdr: FakeHerdr, cwd: str, herdr_code: str, code: str
) -> None:
    started(host, fake_herdr, cwd)
    fake_herdr.inject("agent prompt", error={"code": herdr_code, "message": "no"})
    with pytest.raises(AgentBusyError) as caught:
        host.prompt(PANE, "echo hi")
    assert (caught.value.code, caught.value.details["delivered"]) == (code, False)


def test_a_prompt_herdr_typed_without_effect_is_stalled_and_of_unknown_delivery(
    fake_herdr: FakeHerdr, cwd: str
) -> None:
    host = HerdrHost(Kinds.load([]), workspace="w1", prompt_timeout=5.5)
    started(host, fake_herdr, cwd)
    with fake_herdr.edit() as state:
        state["stall"] = True  # the agent takes the text but shows no change
    with pytest.raises(AgentError) as caught:
        host.prompt(PANE, "echo hi")
    assert (caught.value.code, caught.value.details["delivered"]) == ("agent_prompt_stalled", None)
    assert fake_herdr.agent(PANE)["prompts"] == ["echo hi"]


def test_a_close_herdr_wants_confirmed_says_what_to_do(host: HerdrHost, fake_herdr: FakeHerdr, cwd: str) -> None:
    started(host, fake_herdr, cwd)
    fake_herdr.inject("pane close", error={"code": "confirmation_required", "message": "worktree group"})
    with pytest.raises(AgentError) as caught:
        host.close(PANE)
    assert caught.value.code == "pane_close_needs_confirmation"
    assert "close it in Herdr yourself" in caught.value.message


def test_herdrs_environment_chooses_the_binary_and_is_described(
    fake_herdr: FakeHerdr, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HERDR_BIN_PATH", str(fake_herdr.executable))
    monkeypatch.setenv("HERDR_PANE_ID", "w1:p1")
    monkeypatch.setenv("HERDR_SOCKET_PATH", str(tmp_path / "herdr.sock"))
    monkeypatch.setenv("PATH", "/nonexistent")
    host = HerdrHost(Kinds.load([]))
    assert host.binary == str(fake_herdr.executable)
    assert host.list() == []
    described = host.describe()
    assert (described["own_pane_id"], described["socket_path"]) == ("w1:p1", str(tmp_path / "herdr.sock"))
    monkeypatch.setenv("CORRAL_HERDR", "/opt/herdr")
    assert HerdrHost(Kinds.load([])).binary == "/opt/herdr"  # corral's own setting wins


def test_close_is_plain_on_herdr_0_8_and_conditional_where_herdr_offers_it(
    host: HerdrHost, fake_herdr: FakeHerdr, cwd: str
) -> None:
    started(host, fake_herdr, cwd)
    host.close(PANE)
    assert fake_herdr.calls() == [["pane", "close", PANE]]  # no version probe, no precondition

    fake_herdr.set_version("9.9.0", conditional_close=True)
    conditional = HerdrHost(Kinds.load([]), workspace="w1", conditional_close=True)
    seen = started(conditional, fake_herdr, cwd, name="two")

    def the_agent_moves(tx: object = None) -> None:
        with fake_herdr.edit() as state:  # between corral's read and the close
            state["seq"] += 1
            state["panes"][seen.pane_id]["agent"]["seq"] = state["seq"]

    with pytest.raises(AgentBusyError) as caught:
        conditional.close(seen.pane_id, gate=the_agent_moves)  # type: ignore[arg-type]
    assert caught.value.code == "agent_moved"
    assert seen.pane_id in fake_herdr.state()["panes"]
    close = fake_herdr.calls("pane", "close")[-1]
    assert close == [
        "pane",
        "close",
        seen.pane_id,
        "--if-terminal-id",
        str(seen.terminal_id),
        "--if-state-change-seq",
        str(seen.seq),
    ]
    conditional.close(seen.pane_id)
    assert seen.pane_id not in fake_herdr.state()["panes"]
