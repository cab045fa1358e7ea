"""No effect starts after the authority it was granted under has moved (issue 9, DESIGN.md step 4).

Each test holds a two-phase transition *between* the engine's last check and the host's hand-over (a
host whose ``start``/``prompt``/``close`` first runs a hook), moves the authority there (the
controller resumed elsewhere, the receipt abandoned), then lets the transition go on. On the process
host the check and the hand-over are one store transaction, so the effect must not happen; the
caller is told what did happen, never a bare version conflict. Real store file, real process host,
real scripted agents.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from runner.agents.abc import Expect, Observation, StartOptions
from runner.agents.kinds import Kinds
from runner.agents.process import ProcessHost
from runner.errors import AuthorityMovedError, CorralError
from runner.fence import Credential
from runner.service import (
    AbandonInput,
    AcquireInput,
    RelayInput,
    ResumeInput,
    ReviewerCloseInput,
    ReviewerListInput,
    ReviewerStartInput,
    Service,
)
from tests.support.specs import shared_library
from tests.support.stores import open_test_store

SHA = "e" * 64


class HeldHost(ProcessHost):
    """The process host, with a hook run after the engine's checks and before each hand-over."""

    hook: Callable[[str], None] | None = None

    def _hold(self, what: str) -> None:
        if self.hook is not None:
            hook, self.hook = self.hook, None
            hook(what)

    def start(
        self, name: str, kind: str, cwd: str, options: StartOptions, gate: Any = None, nonce: Any = None
    ) -> Observation:
        self._hold("start")
        return super().start(name, kind, cwd, options, gate, nonce)

    def prompt(self, pane_id: str, text: str, expect: Expect | None = None, gate: Any = None) -> Observation:
        self._hold("prompt")
        return super().prompt(pane_id, text, expect, gate)

    def close(self, pane_id: str, gate: Any = None) -> None:
        self._hold("close")
        super().close(pane_id, gate)


class Side:
    """One coordinator process's view: its own store connection, process host and service."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.store = open_test_store(root)
        self.kinds = Kinds.load([])
        self.host = HeldHost(self.store, root / "agents", self.kinds)
        self.service = Service(
            self.store, shared_library(), actor="test", hosts=lambda name: self.host, kinds=self.kinds
        )

    def pane(self, name: str = "rev") -> str:
        (lease,) = [x for x in self.service.reviewers(ReviewerListInput("ctl")) if x.data["name"] == name]
        return str(lease.data["pane_id"])


@pytest.fixture
def side(tmp_path: Path) -> Iterator[Side]:
    (tmp_path / "wt").mkdir()
    opened = Side(tmp_path)
    yield opened
    opened.store.close()


def acquire(side: Side) -> Credential:
    return side.service.controller.acquire(AcquireInput("ctl", "T-9", SHA, 900, "t@h")).credential


def resume(side: Side, credential: Credential) -> Credential:
    return side.service.controller.resume(ResumeInput("ctl", credential, 900)).credential


def start(side: Side, credential: Credential, name: str = "rev") -> Any:
    return side.service.reviewers.start(ReviewerStartInput("ctl", credential, name, "script", str(side.root / "wt")))


def test_a_stale_controllers_relay_delivers_nothing(side: Side) -> None:
    old = acquire(side)
    start(side, old)
    pane = side.pane()
    fresh: list[Credential] = []
    side.host.hook = lambda _: fresh.append(resume(side, old))  # generation + 1 while the relay is held
    with pytest.raises(AuthorityMovedError) as caught:
        side.service.receipts.relay(RelayInput("ctl", old, "rev", "echo from the stale controller"))
    assert caught.value.code == "fence_stale" and caught.value.status.exit == 4
    assert caught.value.details["delivered"] is False
    observed = side.host.get(pane)
    assert (observed.status, observed.seq) == ("idle", 0), "the prompt never reached the agent"
    assert not list((side.root / "agents" / pane).glob("run-*.log"))
    receipt = caught.value.details["receipt"]
    assert (receipt["state"], receipt["reason"]) == ("failed", "fence_stale"), (
        "certainly not delivered: it blocks nothing"
    )
    triggers = [e.trigger for e in side.store.events() if e.machine == "receipt"]
    assert triggers == ["relay", "relay:failure"], "no relay:success recorded after the resume"
    # The new holder relays at once: nothing was left blocking the target.
    assert side.service.receipts.relay(RelayInput("ctl", fresh[0], "rev", "echo new holder")).state == "pending"


def test_an_abandoned_receipts_prompt_never_runs_under_its_successor(tmp_path: Path) -> None:
    """R1 held while reserved; R1 abandoned (the agent is idle); R2 reserved and held; R1 released: R1 must
    not deliver (it answers that it was abandoned, not a conflict), and R2 then delivers normally."""
    (tmp_path / "wt").mkdir()
    main = Side(tmp_path)
    credential = acquire(main)
    start(main, credential)
    pane = main.pane()
    r1_held, go_r1, r2_held, go_r2 = (threading.Event() for _ in range(4))
    results: dict[str, Any] = {}

    def relay(key: str, held: threading.Event, go: threading.Event) -> None:
        side = Side(tmp_path)  # its own connection, as another process would have

        def hold(_: str) -> None:
            held.set()
            assert go.wait(30)

        side.host.hook = hold
        try:
            results[key] = side.service.receipts.relay(RelayInput("ctl", credential, "rev", f"echo prompt {key}"))
        except CorralError as exc:
            results[key] = exc
        finally:
            side.store.close()

    first = threading.Thread(target=relay, args=("r1", r1_held, go_r1))
    first.start()
    assert r1_held.wait(30)
    reserved = main.store.find("receipt", ["reserved"])
    assert len(reserved) == 1
    main.service.receipts.abandon(AbandonInput("ctl", credential, str(reserved[0].data["token"]), "operator: idle"))
    second = threading.Thread(target=relay, args=("r2", r2_held, go_r2))
    second.start()
    assert r2_held.wait(30)
    go_r1.set()
    first.join(30)
    error = results["r1"]
    assert isinstance(error, AuthorityMovedError), error
    assert error.code == "instance_moved" and error.details["delivered"] is False
    assert error.details["state"] == "abandoned"
    go_r2.set()
    second.join(30)
    assert getattr(results["r2"], "state", results["r2"]) == "pending"
    anyio.run(main.host.wait, pane, 1, 30)
    logs = sorted((tmp_path / "agents" / pane).glob("run-*.log"))
    assert len(logs) == 1, "exactly one prompt ran"
    assert main.host.get(pane).seq == 2
    main.store.close()


def test_a_start_held_past_a_resume_creates_no_pane(side: Side) -> None:
    old = acquire(side)
    side.host.hook = lambda _: resume(side, old)
    with pytest.raises(AuthorityMovedError) as caught:
        start(side, old)
    assert caught.value.code == "fence_stale"
    assert side.host.list() == [], "no pane was created under the moved fence"
    (lease,) = side.service.reviewers(ReviewerListInput("ctl", include_ended=True))
    assert lease.state == "failed_closed" and "not started" in lease.data["failure"]


def test_a_close_held_past_a_resume_leaves_the_pane(side: Side) -> None:
    old = acquire(side)
    start(side, old)
    pane = side.pane()
    fresh: list[Credential] = []
    side.host.hook = lambda _: fresh.append(resume(side, old))
    with pytest.raises(AuthorityMovedError) as caught:
        side.service.reviewers.close(ReviewerCloseInput("ctl", old, "rev", 0))
    assert caught.value.code == "fence_stale"
    assert side.host.get(pane).status == "idle", "the pane is still open"
    (lease,) = side.service.reviewers(ReviewerListInput("ctl"))
    assert lease.state == "close_failed"
    closed = side.service.reviewers.close(ReviewerCloseInput("ctl", fresh[0], "rev", 0))
    assert closed.lease.state == "closed", "the new holder closes it"
