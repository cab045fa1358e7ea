"""The mesh port against a model (issue 17), as a Hypothesis state machine over check-ins, sends, inbox
reads, acks and clock advances, on SQLite and on PostgreSQL.

Invariants checked after every step and on every read:

- no message is ever lost before it is acked: an inbox returns exactly the model's unacked messages
  of that agent, oldest first (the port's limit is never reached here);
- none is returned after it was acked;
- none is delivered to an agent that joined after it was sent (the model delivers only to agents
  known, for a broadcast live, at the moment of the send);
- presence expires exactly ``ttl`` seconds after the agent's last mesh call, by the store's clock.
"""

from __future__ import annotations

import hashlib
import tempfile
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from runner.errors import NotFoundError, RefusedError
from runner.store.mesh import default_ttl
from tests.conftest import FakeClock
from tests.support.stores import StoreKind, kind_for


def H(agent_id: str) -> str:
    """The token hash each agent of the model holds (its own, on every call)."""
    return hashlib.sha256(f"token-{agent_id}".encode()).hexdigest()


pytestmark = pytest.mark.slow

AGENTS = ("a", "b", "c", "d")
ROLES = ("builder", "reviewer", "ping")
STEPS = (1, 29, 59, 60, 61, 299, 300, 901)


class MeshModel(RuleBasedStateMachine):
    """One fresh store per example; the model is plain dictionaries."""

    kind: ClassVar[StoreKind]

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.directory = tempfile.TemporaryDirectory(prefix="mesh-model-")
        self.store = self.kind.open(self.kind.url(Path(self.directory.name)), clock=self.clock)
        self.mesh = self.store.mesh()
        self.role: dict[str, str | None] = {}
        self.ttl: dict[str, int] = {}
        self.expires: dict[str, Any] = {}
        self.unacked: dict[str, list[str]] = {}
        self.acked: dict[str, set[str]] = {}
        self.sent: list[str] = []

    def teardown(self) -> None:
        self.store.close()
        self.directory.cleanup()

    # --- the model ---------------------------------------------------------------------------------

    def _live(self, agent: str) -> bool:
        return agent in self.expires and self.clock.now < self.expires[agent]

    def _renew(self, agent: str) -> None:
        self.expires[agent] = self.clock.now + timedelta(seconds=self.ttl[agent])

    # --- rules -------------------------------------------------------------------------------------

    @initialize()
    def start(self) -> None:
        assert self.mesh.agents(include_expired=True) == []

    @rule(agent=st.sampled_from(AGENTS), role=st.none() | st.sampled_from(ROLES), ttl=st.sampled_from([None, 60, 300]))
    def checkin(self, agent: str, role: str | None, ttl: int | None) -> None:
        done = self.mesh.checkin(
            agent,
            role=role,
            repo=None,
            caps=None,
            status=None,
            ttl_seconds=ttl,
            pane=None,
            actor="model",
            token_sha256=H(agent),
            issue_sha256=H(agent),
        )
        first = agent not in self.role
        assert done.was == ("absent" if first else ("live" if self._live(agent) else "expired"))
        self.role[agent] = role if role is not None else self.role.get(agent)
        if ttl is not None:
            self.ttl[agent] = ttl
        elif first:
            self.ttl[agent] = default_ttl(self.role[agent])
        self._renew(agent)
        self.unacked.setdefault(agent, [])
        self.acked.setdefault(agent, set())
        assert done.presence.ttl_seconds == self.ttl[agent]

    @rule(sender=st.sampled_from(AGENTS), to=st.sampled_from(AGENTS))
    def send_direct(self, sender: str, to: str) -> None:
        message_id = "msg-" + uuid.uuid4().hex
        call = lambda: self.mesh.send(  # noqa: E731 - reason: one call, asserted in three ways
            sender,
            "agent",
            to,
            subject="s",
            body="b",
            thread=None,
            urgent=False,
            message_id=message_id,
            actor="m",
            token_sha256=H(sender),
        )
        if sender not in self.role:
            with pytest.raises(RefusedError) as refused:
                call()
            assert refused.value.code == "mesh_not_checked_in"
            return
        if to not in self.role:
            with pytest.raises(NotFoundError) as unknown:
                call()
            assert unknown.value.code == "mesh_unknown_agent"
            return  # a refused call writes nothing, its renewal neither
        sent = call()
        self._renew(sender)
        assert sent.recipients == (to,)
        self.unacked[to].append(message_id)
        self.sent.append(message_id)

    @precondition(lambda self: bool(self.role))
    @rule(data=st.data(), role=st.sampled_from(ROLES))
    def send_role(self, data: st.DataObject, role: str) -> None:
        sender = data.draw(st.sampled_from(sorted(self.role)))
        message_id = "msg-" + uuid.uuid4().hex
        expected = sorted(a for a, r in self.role.items() if r == role and a != sender and self._live(a))
        sent = self.mesh.send(
            sender,
            "role",
            role,
            subject="s",
            body="b",
            thread=None,
            urgent=False,
            message_id=message_id,
            actor="m",
            token_sha256=H(sender),
        )
        self._renew(sender)
        assert list(sent.recipients) == expected
        for agent in expected:
            self.unacked[agent].append(message_id)
        self.sent.append(message_id)

    @rule(agent=st.sampled_from(AGENTS))
    def inbox(self, agent: str) -> None:
        if agent not in self.role:
            with pytest.raises(RefusedError):
                self.mesh.inbox(agent, 100, token_sha256=H(agent))
            return
        read = self.mesh.inbox(agent, 100, token_sha256=H(agent))
        self._renew(agent)
        got = [m.message_id for m in read.messages]
        # Invariant: exactly the unacked ones, oldest first: none lost, none after its ack, none from
        # before the agent joined (the model never delivered those).
        assert got == self.unacked[agent]
        assert not set(got) & self.acked[agent]
        assert read.unacked == len(self.unacked[agent])

    @precondition(lambda self: bool(self.role))
    @rule(data=st.data())
    def ack(self, data: st.DataObject) -> None:
        agent = data.draw(st.sampled_from(sorted(self.role)))
        pool = sorted(set(self.unacked[agent]) | self.acked[agent] | set(self.sent[-3:]))
        if not pool:
            return
        chosen = data.draw(st.lists(st.sampled_from(pool), min_size=1, max_size=4, unique=True))
        done = self.mesh.ack(agent, chosen, token_sha256=H(agent))
        self._renew(agent)
        fresh = [m for m in chosen if m in self.unacked[agent]]
        assert list(done.acked) == fresh
        assert set(done.already) == {m for m in chosen if m in self.acked[agent]}
        self.unacked[agent] = [m for m in self.unacked[agent] if m not in fresh]
        self.acked[agent] |= set(fresh)

    @rule(seconds=st.sampled_from(STEPS))
    def advance(self, seconds: int) -> None:
        self.clock.advance(seconds)

    # --- invariants --------------------------------------------------------------------------------

    @invariant()
    def presence_expires_exactly_at_ttl_after_the_last_call(self) -> None:
        live = {p.agent_id for p in self.mesh.agents()}
        assert live == {a for a in self.role if self._live(a)}
        for agent in self.role:
            presence = self.mesh.presence(agent)
            assert presence is not None
            assert presence.expires_at == self._format(self.expires[agent])

    @staticmethod
    def _format(moment: Any) -> str:
        from runner.context import format_time

        return format_time(moment)


@pytest.mark.parametrize("scheme", ["sqlite", "postgresql"])
def test_mesh_against_its_model(scheme: str, request: pytest.FixtureRequest) -> None:
    MeshModel.kind = kind_for(scheme, request)
    examples = 25 if scheme == "sqlite" else 12
    run_state_machine_as_test(
        MeshModel,
        settings=settings(
            max_examples=examples,
            stateful_step_count=30,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        ),
    )
