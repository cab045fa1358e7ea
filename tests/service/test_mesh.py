"""The mesh component (issue 17) over the real service, engine and process host, on every store:
wake-ups delivered once to an idle leased agent, never while a receipt is open, refused for a working
agent or once the enabling lease moved on (also at the moment of the prompt), single-use tokens,
``wake: "unsupported"`` without a pane, and two coordinators on one store.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from runner import faults
from runner.agents.kinds import Kinds
from runner.agents.process import ProcessHost
from runner.errors import CorralError
from runner.service import AcquireInput, CollectInput, RelayInput, ResumeInput, ReviewerStartInput, Service
from runner.service.inputs.mesh import AckInput, AgentsInput, CheckinInput, InboxInput, SendInput, WakeGrantInput
from runner.service.mesh import WAKE_INTERVAL_SECONDS, WAKE_WINDOW_SECONDS, wake_prompt
from runner.store import Store
from tests.support.specs import shared_library
from tests.support.stores import StoreKind, store_kind

__all__ = ["store_kind"]  # the fixture: every registered store

SHA = "d" * 64


class OffsetClock:
    """The wall clock, moved forward on demand (the agents run in real time; expiry is judged here)."""

    def __init__(self) -> None:
        self.offset = timedelta()

    def __call__(self) -> datetime:
        return datetime.now(UTC) + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += timedelta(seconds=seconds)


class RecordingHost(ProcessHost):
    """The process host, keeping every text handed to ``prompt`` (the host's boundary, not corral's)."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.texts: list[str] = []

    def prompt(self, pane_id: str, text: str, expect: Any = None, gate: Any = None) -> Any:
        self.texts.append(text)
        return super().prompt(pane_id, text, expect, gate)


class MeshWorld:
    """A store of one kind, the process host, a service, a controller ``ctl`` leasing reviewer ``rev``
    (mesh agent ``rev-agent``, checked in with its pane) and a mesh agent ``boss`` that sends."""

    def __init__(self, kind: StoreKind, root: Path) -> None:
        self.root = root
        self.clock = OffsetClock()
        self.store: Store = kind.open(kind.url(root), clock=self.clock)
        self.kinds = Kinds.load([])
        self.host = RecordingHost(self.store, root / "agents", self.kinds)
        self.service = self.new_service()
        self.credential = self.service.controller.acquire(AcquireInput("ctl", "T-3", SHA, 900, "t@h")).credential
        self.worktree = root / "wt"
        self.worktree.mkdir()
        lease = self.service.reviewers.start(
            ReviewerStartInput("ctl", self.credential, "rev", "script", str(self.worktree))
        )
        self.pane = str(lease.data["pane_id"])
        self.mesh = self.service.mesh
        self.tokens: dict[str, str] = {}
        """Each agent's token, as its first check-in answered it."""
        self.checked_in = self.join(self.mesh, CheckinInput("rev-agent", role="reviewer", pane=self.pane))
        self.join(self.mesh, CheckinInput("boss", role="builder"))

    def join(self, mesh: Any, inp: CheckinInput) -> dict[str, Any]:
        """A first check-in, keeping the token it answers."""
        done: dict[str, Any] = mesh.checkin(inp)
        self.tokens[inp.agent_id] = done["agent_token"]
        return done

    def new_service(self) -> Service:
        return Service(
            self.store,
            shared_library(),
            actor="test",
            hosts=lambda name: self.host,
            kinds=self.kinds,
        )

    def enable(self, enabled: bool = True) -> dict[str, Any]:
        return self.mesh.wake_grant(WakeGrantInput("ctl", self.credential, enabled))

    def send(self, to: str = "rev-agent", body: str = "PR 12 needs a review") -> dict[str, Any]:
        return self.mesh.send(SendInput("boss", "review", body, to=to, agent_token=self.tokens["boss"]))

    def prompts(self) -> list[str]:
        """What reached the agent, read from the host's own run logs (never through corral)."""
        return sorted(p.name for p in (self.root / "agents" / self.pane).glob("run-*.log"))

    def settle(self) -> None:
        """Wait until the agent is settled again (it ran whatever it was handed)."""
        import anyio

        seq = self.host.get(self.pane).seq

        async def wait() -> None:
            await self.host.wait(self.pane, seq - 1, 30)

        observed = self.host.get(self.pane)
        if observed.status == "working":
            anyio.run(wait)
        for _ in range(300):
            if self.host.get(self.pane).status in ("idle", "done"):
                return
            import time

            time.sleep(0.05)
        raise AssertionError(f"the agent never settled: {self.host.get(self.pane)}")


@pytest.fixture
def world(store_kind: StoreKind, tmp_path: Path) -> Iterator[MeshWorld]:
    w = MeshWorld(store_kind, tmp_path)
    yield w
    w.store.close()


def only_wake(sent: dict[str, Any]) -> dict[str, Any]:
    (wake,) = sent["wakes"]
    assert wake["agent_id"] == "rev-agent"
    return wake


def token_of(world: MeshWorld) -> str:
    """The token the last prompt carried (as the host was handed it)."""
    text = world.host.texts[-1]
    marker = "wake_token "
    assert marker in text, text
    return text.split(marker, 1)[1][:16]


def test_no_pane_means_wake_unsupported(world: MeshWorld) -> None:
    boss = world.mesh.checkin(CheckinInput("boss", agent_token=world.tokens["boss"]))
    assert boss["wake"] == "unsupported" and boss["joined"] is False
    assert world.checked_in["wake"] == "disabled"  # its controller has not enabled wake-ups yet
    world.enable()
    assert world.mesh.checkin(CheckinInput("rev-agent", agent_token=world.tokens["rev-agent"]))["wake"] == "enabled"


def test_a_host_that_cannot_prompt_answers_unsupported(world: MeshWorld, monkeypatch: pytest.MonkeyPatch) -> None:
    world.enable()
    monkeypatch.setattr(type(world.host), "can_prompt", False)
    assert world.mesh.checkin(CheckinInput("rev-agent", agent_token=world.tokens["rev-agent"]))["wake"] == "unsupported"
    wake = only_wake(world.send())
    assert (wake["wake"], wake["code"]) == ("skipped", "wake_unsupported")
    assert world.prompts() == []


def test_no_wake_until_the_controller_enables_them(world: MeshWorld) -> None:
    wake = only_wake(world.send())
    assert (wake["wake"], wake["code"]) == ("skipped", "mesh_wake_disabled")
    world.enable()
    world.enable(False)
    assert only_wake(world.send())["code"] == "mesh_wake_disabled"
    assert world.prompts() == []


def test_a_wake_is_delivered_once_to_an_idle_leased_agent(world: MeshWorld) -> None:
    world.enable()
    first = only_wake(world.send(body="one"))
    assert first["wake"] == "delivered" and first["messages"] == 1
    assert len(world.prompts()) == 1
    again = only_wake(world.send(body="two"))
    assert (again["wake"], again["code"]) == ("skipped", "wake_rate_limited")
    world.settle()
    world.clock.advance(WAKE_INTERVAL_SECONDS)
    outstanding = only_wake(world.send(body="three"))
    assert (outstanding["wake"], outstanding["code"]) == ("skipped", "wake_outstanding")
    assert len(world.prompts()) == 1  # at most one outstanding wake per agent
    token = token_of(world)
    assert world.host.texts == [wake_prompt(1, token)]  # the fixed prompt only, never the message's text
    # the token's inbox: that wake's messages (the one it announced), and the turn is marked
    read = world.mesh.inbox(InboxInput("rev-agent", 50, token, agent_token=world.tokens["rev-agent"]))
    assert [m["body"] for m in read["messages"]] == ["one"]
    assert read["wake"]["state"] == "used"
    with pytest.raises(CorralError) as spent:
        world.mesh.inbox(InboxInput("rev-agent", 50, token, agent_token=world.tokens["rev-agent"]))
    assert spent.value.code == "wake_token_used"
    with pytest.raises(CorralError) as foreign:
        world.mesh.inbox(InboxInput("boss", 50, token, agent_token=world.tokens["boss"]))
    assert foreign.value.code == "wake_token_unknown"
    assert [
        m["body"] for m in world.mesh.inbox(InboxInput("rev-agent", agent_token=world.tokens["rev-agent"]))["messages"]
    ] == ["one", "two", "three"]
    # a new wake may follow once the token was used (and the rate limit passed)
    world.clock.advance(WAKE_INTERVAL_SECONDS)
    assert only_wake(world.send(body="four"))["wake"] == "delivered"
    assert len(world.prompts()) == 2


def test_an_unused_wake_expires_after_its_window(world: MeshWorld) -> None:
    world.enable()
    assert only_wake(world.send())["wake"] == "delivered"
    token = token_of(world)
    world.settle()
    world.clock.advance(WAKE_WINDOW_SECONDS)
    assert only_wake(world.send())["wake"] == "delivered"  # the stale one expired first
    with pytest.raises(CorralError) as expired:
        world.mesh.inbox(InboxInput("rev-agent", 50, token, agent_token=world.tokens["rev-agent"]))
    assert expired.value.code == "wake_token_used" and expired.value.details["state"] == "expired"


def test_never_a_wake_while_a_receipt_is_open(world: MeshWorld) -> None:
    world.enable()
    receipt = world.service.receipts.relay(RelayInput("ctl", world.credential, "rev", "echo hi"))
    world.settle()  # the agent is settled, but the receipt is still pending (not collected)
    wake = only_wake(world.send())
    assert (wake["wake"], wake["code"]) == ("skipped", "receipt_outstanding")
    assert len(world.prompts()) == 1  # only the relay's prompt
    import anyio

    anyio.run(world.service.receipts.collect, CollectInput("ctl", world.credential, (receipt.token,), 30))
    world.clock.advance(WAKE_INTERVAL_SECONDS)
    assert only_wake(world.send())["wake"] == "delivered"
    assert len(world.prompts()) == 2


def test_a_working_agent_is_not_woken(world: MeshWorld) -> None:
    world.enable()
    world.host.prompt(world.pane, "sleep 3")  # working on something corral did not relay
    wake = only_wake(world.send())
    assert (wake["wake"], wake["code"]) == ("skipped", "agent_not_settled")
    assert len(world.prompts()) == 1


def test_a_wake_is_refused_once_the_lease_moved_on(world: MeshWorld) -> None:
    world.enable()
    world.credential = world.service.controller.resume(ResumeInput("ctl", world.credential, 900)).credential
    wake = only_wake(world.send())
    assert (wake["wake"], wake["code"]) == ("skipped", "fence_stale")
    assert world.prompts() == []
    world.enable()  # enabled again under the new grant
    assert only_wake(world.send())["wake"] == "delivered"


def test_the_wake_fence_is_checked_at_the_moment_of_the_prompt(
    world: MeshWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    world.enable()
    original = faults.point

    def resume_in_the_window(name: str) -> None:
        if name == "wake.wake:intent":  # the wake is admitted and recorded; the prompt not handed over
            world.credential = world.service.controller.resume(ResumeInput("ctl", world.credential, 900)).credential
        original(name)

    monkeypatch.setattr(faults, "point", resume_in_the_window)
    wake = only_wake(world.send())
    assert (wake["wake"], wake["code"]) == ("failed", "fence_stale")
    assert world.prompts() == []  # nothing reached the agent
    (failed,) = world.store.find("wake", ["failed"])
    assert failed.data["agent_id"] == "rev-agent"


def test_two_coordinators_on_one_store(world: MeshWorld) -> None:
    """A second service (another coordinator) on the same store sees the first one's agents and messages,
    and its sends wake under the same recorded grant, never twice."""
    world.enable()
    other = world.new_service().mesh
    world.join(other, CheckinInput("other", role="builder"))
    assert {a["agent_id"] for a in other.agents(AgentsInput())["agents"]} == {"boss", "other", "rev-agent"}
    first = only_wake(world.send(body="from one"))
    second = other.send(SendInput("other", "s", "from two", to="rev-agent", agent_token=world.tokens["other"]))
    assert first["wake"] == "delivered" and only_wake(second)["wake"] == "skipped"
    read = other.inbox(InboxInput("rev-agent", agent_token=world.tokens["rev-agent"]))
    assert [m["body"] for m in read["messages"]] == ["from one", "from two"]
    world.mesh.ack(AckInput("rev-agent", tuple(m["message_id"] for m in read["messages"]), world.tokens["rev-agent"]))
    assert other.inbox(InboxInput("rev-agent", agent_token=world.tokens["rev-agent"]))["messages"] == []
    assert len(world.prompts()) == 1


def test_an_unconfirmed_wake_counts_as_outstanding_until_used_or_expired(
    world: MeshWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A prompt whose confirmation was lost leaves the wake ``delivering`` (it may have been delivered):
    it blocks another wake like an outstanding one, its token still works, and it expires."""
    from runner.agents.abc import AgentError

    world.enable()
    handed = RecordingHost.prompt

    def lost_reply(self: RecordingHost, pane_id: str, text: str, expect: Any = None, gate: Any = None) -> Any:
        handed(self, pane_id, text, expect, gate)
        raise AgentError("the reply from the host was lost", code="agent_prompt_unconfirmed", delivered=None)

    monkeypatch.setattr(RecordingHost, "prompt", lost_reply)
    assert only_wake(world.send(body="one"))["wake"] == "unconfirmed"
    first = token_of(world)
    world.settle()
    world.clock.advance(WAKE_INTERVAL_SECONDS)
    assert only_wake(world.send(body="two"))["code"] == "wake_outstanding"
    read = world.mesh.inbox(
        InboxInput("rev-agent", 50, first, agent_token=world.tokens["rev-agent"])
    )  # used straight from delivering
    assert read["wake"]["state"] == "used" and [m["body"] for m in read["messages"]] == ["one"]
    world.clock.advance(WAKE_INTERVAL_SECONDS)
    assert only_wake(world.send(body="three"))["wake"] == "unconfirmed"
    second = token_of(world)
    world.settle()
    world.clock.advance(WAKE_WINDOW_SECONDS)
    assert only_wake(world.send(body="four"))["wake"] == "unconfirmed"  # the stale one expired from delivering
    with pytest.raises(CorralError) as expired:
        world.mesh.inbox(InboxInput("rev-agent", 50, second, agent_token=world.tokens["rev-agent"]))
    assert expired.value.details["state"] == "expired"
    assert len(world.host.texts) == 3


def test_a_wake_the_host_refuses_fails_and_blocks_nothing(world: MeshWorld, monkeypatch: pytest.MonkeyPatch) -> None:
    """The agent turned busy just before the hand-over (the host says so): the wake fails, certainly not
    delivered, and the next one (after the rate limit) may go ahead."""
    from runner.agents.abc import AgentBusyError

    world.enable()
    handed = RecordingHost.prompt

    def busy(self: RecordingHost, pane_id: str, text: str, expect: Any = None, gate: Any = None) -> Any:
        raise AgentBusyError("the agent started working meanwhile", code="agent_not_settled")

    monkeypatch.setattr(RecordingHost, "prompt", busy)
    wake = only_wake(world.send())
    assert wake["wake"] == "failed"
    (failed,) = world.store.find("wake", ["failed"])
    assert failed.data["reason"] == "delivery_failed"
    monkeypatch.setattr(RecordingHost, "prompt", handed)
    assert only_wake(world.send())["code"] == "wake_rate_limited"
    world.clock.advance(WAKE_INTERVAL_SECONDS)
    assert only_wake(world.send())["wake"] == "delivered"
    assert len(world.host.texts) == 1


def test_status_says_an_unconfirmed_wake_settles_itself(world: MeshWorld, monkeypatch: pytest.MonkeyPatch) -> None:
    from runner.agents.abc import AgentError

    world.enable()
    handed = RecordingHost.prompt

    def lost_reply(self: RecordingHost, pane_id: str, text: str, expect: Any = None, gate: Any = None) -> Any:
        handed(self, pane_id, text, expect, gate)
        raise AgentError("the reply from the host was lost", code="agent_prompt_unconfirmed", delivered=None)

    monkeypatch.setattr(RecordingHost, "prompt", lost_reply)
    assert only_wake(world.send())["wake"] == "unconfirmed"
    (item,) = [n for n in world.service.inventory.status()["needs_attention"] if n["machine"] == "wake"]
    assert item["state"] == "delivering" and "expires at" in item["next"] and "reconcile" not in item["next"]


# --- identity (issue 24): every call as an agent presents its own token ------------------------------


def refused(call: Any) -> str:
    with pytest.raises(CorralError) as caught:
        call()
    assert caught.value.status.exit == 4, caught.value  # a refusal, never an internal error
    return caught.value.code


def mesh_state(world: MeshWorld) -> tuple[Any, ...]:
    """What a refused call must leave as it was: every presence, every unacked count, the event log."""
    presences = tuple(world.mesh.port.presence(a) for a in sorted(world.tokens))
    unacked = tuple(world.mesh.port.unacked(a) for a in sorted(world.tokens))
    return presences, unacked, len(world.store.events())


def test_the_first_checkin_answers_a_token_once_and_later_ones_need_it(world: MeshWorld) -> None:
    first = world.checked_in
    assert first["claimed"] is True and len(first["agent_token"]) >= 40
    again = world.mesh.checkin(CheckinInput("rev-agent", status="reviewing", agent_token=world.tokens["rev-agent"]))
    assert "agent_token" not in again and again["claimed"] is False and again["agent"]["status"] == "reviewing"
    assert world.tokens["rev-agent"] != world.tokens["boss"]


def test_a_checkin_over_a_live_agent_is_refused_and_changes_nothing(world: MeshWorld) -> None:
    before = mesh_state(world)
    world.clock.advance(5)
    assert (
        refused(lambda: world.mesh.checkin(CheckinInput("rev-agent", status="spoofed"))) == "mesh_agent_token_missing"
    )
    spoof = CheckinInput("rev-agent", pane="%99", agent_token=world.tokens["boss"])
    assert refused(lambda: world.mesh.checkin(spoof)) == "mesh_agent_token_invalid"
    assert mesh_state(world) == before  # no renewal, no new status or pane, no event


def test_an_expired_agent_stays_its_own(world: MeshWorld) -> None:
    world.clock.advance(7200)  # past rev-agent's TTL
    assert refused(lambda: world.mesh.checkin(CheckinInput("rev-agent"))) == "mesh_agent_token_missing"
    back = world.mesh.checkin(CheckinInput("rev-agent", agent_token=world.tokens["rev-agent"]))
    assert back["was"] == "expired" and "agent_token" not in back


def test_sending_as_another_agent_is_refused_and_records_nothing(world: MeshWorld) -> None:
    before = mesh_state(world)
    as_boss = SendInput("boss", "review", "merge it", to="rev-agent", agent_token=world.tokens["rev-agent"])
    assert refused(lambda: world.mesh.send(as_boss)) == "mesh_agent_token_invalid"
    assert refused(lambda: world.mesh.send(SendInput("boss", "review", "merge it", to="rev-agent"))) == (
        "mesh_agent_token_missing"
    )
    assert mesh_state(world) == before
    read = world.mesh.inbox(InboxInput("rev-agent", agent_token=world.tokens["rev-agent"]))
    assert read["messages"] == []


def test_reading_another_agents_inbox_is_refused(world: MeshWorld) -> None:
    world.send(body="for rev-agent only")
    before = mesh_state(world)
    world.clock.advance(5)
    assert refused(lambda: world.mesh.inbox(InboxInput("rev-agent"))) == "mesh_agent_token_missing"
    wrong = InboxInput("rev-agent", agent_token=world.tokens["boss"])
    assert refused(lambda: world.mesh.inbox(wrong)) == "mesh_agent_token_invalid"
    assert mesh_state(world) == before  # not even the presence was renewed


def test_acking_another_agents_messages_is_refused(world: MeshWorld) -> None:
    sent = world.send(body="keep me")
    before = mesh_state(world)
    for token in (None, world.tokens["boss"]):
        code = refused(lambda t=token: world.mesh.ack(AckInput("rev-agent", (sent["message_id"],), t)))
        assert code in ("mesh_agent_token_missing", "mesh_agent_token_invalid")
    assert mesh_state(world) == before
    read = world.mesh.inbox(InboxInput("rev-agent", agent_token=world.tokens["rev-agent"]))
    assert [m["message_id"] for m in read["messages"]] == [sent["message_id"]]


def test_a_woken_agent_presents_its_token_and_the_prompt_never_carries_it(world: MeshWorld) -> None:
    world.enable()
    assert only_wake(world.send(body="one"))["wake"] == "delivered"
    wake_token = token_of(world)
    assert all(world.tokens["rev-agent"] not in text for text in world.host.texts)
    # without (or with another's) agent token the wake is not spent
    assert refused(lambda: world.mesh.inbox(InboxInput("rev-agent", 50, wake_token))) == "mesh_agent_token_missing"
    stolen = InboxInput("rev-agent", 50, wake_token, world.tokens["boss"])
    assert refused(lambda: world.mesh.inbox(stolen)) == "mesh_agent_token_invalid"
    read = world.mesh.inbox(InboxInput("rev-agent", 50, wake_token, world.tokens["rev-agent"]))
    assert read["wake"]["state"] == "used" and [m["body"] for m in read["messages"]] == ["one"]


def test_a_token_is_never_in_events_listings_or_other_results(world: MeshWorld) -> None:
    import json

    from runner.service.mesh import token_sha256

    sent = world.send()
    read = world.mesh.inbox(InboxInput("rev-agent", agent_token=world.tokens["rev-agent"]))
    listed = world.mesh.agents(AgentsInput(include_expired=True))
    text = json.dumps([[e.payload for e in world.store.events()], listed, sent, read], default=str)
    for token in world.tokens.values():
        assert token not in text and str(token_sha256(token)) not in text
    assert "token_sha256" not in text
