"""Receipts end to end (component ``service.receipts``): relay, collect, ask, batches, abandon; real processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from runner.agents.kinds import Kinds
from runner.agents.process import ProcessHost
from runner.errors import RefusedError
from runner.fence import Credential
from runner.service import (
    AbandonInput,
    AskManyInput,
    ReceiptsInput,
    ResumeInput,
)
from tests.service.agents_world import LostReplyHost, World, refused


def test_second_prompt_is_refused_while_a_receipt_is_unresolved(world: World) -> None:
    world.start()
    first = world.relay("wait-file go\necho first")  # held until released: still open at the refusal
    error = refused("receipt_outstanding", lambda: world.relay("echo second"))
    assert error.details["receipt"] == first.token
    assert world.observe().seq == 1, "nothing was delivered"
    (world.worktree / "go").write_text("")
    (result,) = world.collect(first.token)
    assert result.output.strip() == "first"
    assert world.relay("echo second").state == "pending"


def test_prompt_with_a_fence_resumed_elsewhere_is_refused(world: World) -> None:
    world.start()
    resumed = world.service.controller.resume(ResumeInput("ctl", world.credential))
    refused("fence_stale", lambda: world.relay("echo stale"))
    assert world.observe().seq == 0, "nothing was delivered"
    assert world.service.receipts(ReceiptsInput("ctl")) == []
    assert world.relay("echo fresh", credential=resumed.credential).state == "pending"


def test_agent_moving_during_capture_fails_collect_and_never_mislabels(world: World) -> None:
    world.start()
    receipt = world.relay("echo mine")
    outsider = ProcessHost(world.store, world.root / "agents", world.kinds)
    real_read = world.host.read

    def read_then_move(pane_id: str, lines: int) -> str:
        output = real_read(pane_id, lines)
        outsider.prompt(pane_id, "sleep 0.2\necho not yours")  # someone drives the agent outside corral
        return output

    world.host.read = read_then_move  # type: ignore[method-assign]
    error = refused("cursor_superseded", lambda: world.collect(receipt.token))
    stored = world.service.receipts(ReceiptsInput("ctl", include_ended=True))[0]
    assert (stored.state, stored.data["reason"]) == ("failed", "cursor_superseded")
    assert stored.data.get("output_sha256") is None and "collected" not in error.details


def test_batch_first_returns_one_result_and_pending_receipts_that_collect_later(world: World) -> None:
    world.start("fast")
    world.start("slow")
    result = anyio.run(
        world.service.receipts.ask_many,
        AskManyInput(
            "ctl",
            world.credential,
            (("fast", "echo quick"), ("slow", "wait-file go\necho late")),
            "first",
            30,
        ),
    )
    ((first,), (pending,)) = (result.results, result.pending_receipts)
    assert (first.receipt.data["name"], first.output.strip()) == ("fast", "quick")
    assert (pending.data["name"], pending.state) == ("slow", "pending")
    assert first.receipt.data["batch_id"] == pending.data["batch_id"]
    refused("receipt_outstanding", lambda: world.relay("echo again", target="slow"))
    (world.worktree / "go").write_text("")
    (later,) = world.collect(pending.token)
    assert later.output.strip() == "late"


def test_batch_all_collects_every_result(world: World) -> None:
    world.start("a")
    world.start("b")
    result = anyio.run(
        world.service.receipts.ask_many,
        AskManyInput(
            "ctl",
            world.credential,
            (("a", "echo A"), ("b", "sleep 0.2\necho B")),
            "all",
            30,
        ),
    )
    assert [(r.receipt.data["name"], r.output.strip()) for r in result.results] == [("a", "A"), ("b", "B")]
    assert result.pending_receipts == []


def test_ambiguous_delivery_stays_reserved_and_blocks_until_abandoned(make_world: Callable[..., World]) -> None:
    world = make_world(lambda store, agents: LostReplyHost(store, agents, Kinds.load([])))
    world.start()
    error = refused("delivery_ambiguous", lambda: world.relay("wait-file go\necho maybe"))  # held until released
    token = error.details["receipt"]["token"]
    assert error.details["receipt"]["state"] == "reserved"
    refused("receipt_outstanding", lambda: world.relay("echo other"))
    refused("receipt_reserved", lambda: world.collect(token))
    refused("agent_not_settled", lambda: world.service.receipts.abandon(AbandonInput("ctl", world.credential, token)))
    (world.worktree / "go").write_text("")
    anyio.run(world.host.wait, "p1", 1, 10)
    abandoned = world.service.receipts.abandon(AbandonInput("ctl", world.credential, token, "operator saw it finish"))
    assert (abandoned.state, abandoned.data["reason"], abandoned.data["observed_seq"]) == ("abandoned", "abandoned", 2)
    assert world.relay("echo next").state == "pending"
    status = world.service.inventory.status()
    assert status["counts"]["receipt"] == {"abandoned": 1, "pending": 1}


@pytest.mark.slow  # seconds of waiting on processes or deadlines: left out of make test-fast
def test_collect_after_the_coordinator_is_killed(world: World, tmp_path: Path) -> None:
    """kill -9 the collecting process mid-wait, and again right after completion: a new collect
    completes, then replays the same result while the agent sits at the settled cursor."""
    world.start()
    home = tmp_path / "clihome"
    credential_file = home / "credentials" / "ctl.json"
    from runner import credentials

    credentials.save(credential_file, world.credential, world.store.url)
    env = {**os.environ, "CORRAL_HOME": str(home), "CORRAL_STORE": world.store.url}
    receipt = world.relay("sleep 1.0\necho survived")
    cli = [sys.executable, "-m", "runner.cli", "collect", "--controller", "ctl", "--receipt", receipt.token, "--json"]
    victim = subprocess.Popen(cli, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait()
    assert world.service.receipts(ReceiptsInput("ctl"))[0].state == "pending"
    (result,) = world.collect(receipt.token)
    assert result.output.strip() == "survived" and not result.replayed
    again = subprocess.run(cli, env=env, capture_output=True, text=True, check=True)
    (replayed,) = json.loads(again.stdout)["results"]
    assert replayed["replayed"] is True and replayed["output"] == result.output
    assert replayed["receipt"]["output_sha256"] == result.receipt.data["output_sha256"]
    world.collect(world.relay("echo moved on").token)
    refused("cursor_superseded", lambda: world.collect(receipt.token))


@pytest.mark.slow  # the real corral executable (a cold start, half a second)
def test_agents_outlive_the_prompting_process(world: World, tmp_path: Path) -> None:
    world.start()
    home = tmp_path / "clihome"
    from runner import credentials

    credentials.save(home / "credentials" / "ctl.json", world.credential, world.store.url)
    env = {**os.environ, "CORRAL_HOME": str(home), "CORRAL_STORE": world.store.url}
    relayed = subprocess.run(
        [sys.executable, "-m", "runner.cli", "relay", "rev", "--controller", "ctl", "--json"],
        input="sleep 0.3\necho after the relay exited",
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert relayed.returncode == 0, relayed.stdout + relayed.stderr
    token = json.loads(relayed.stdout)["receipt"]["token"]
    (result,) = world.collect(token)
    assert result.output.strip() == "after the relay exited"


def test_receipts_hold_hashes_and_cursors_only(world: World) -> None:
    world.start()
    (result,) = world.collect(world.relay("echo SECRET-ish text").token)
    stored = world.store.get(f"receipt/{result.receipt.token.split('.', 1)[1]}")
    assert stored is not None
    assert "SECRET-ish" not in json.dumps(dict(stored.data))
    assert set(stored.data) >= {"prompt_sha256", "output_sha256", "before_seq", "after_seq", "settled_seq"}


def test_refusal_codes_reach_the_caller_as_refusals(world: World) -> None:
    world.start()
    with pytest.raises(RefusedError):
        world.relay("echo x", target="rev", credential=Credential("ctl", "x", 99, "0" * 32))
    refused("target_unknown", lambda: world.relay("echo x", target="nobody"))
