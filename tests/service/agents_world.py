"""The world the reviewer, receipt, wait and inventory tests share: a real store (wall clock), the real
process host, the scripted agent, a service and a controller lease; and hosts that fail on purpose."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from runner.agents.abc import AgentError, AgentHost, Expect, Observation, StartOptions
from runner.agents.kinds import Kinds
from runner.agents.process import ProcessHost
from runner.errors import CorralError
from runner.fence import Credential
from runner.service import (
    AcquireInput,
    CollectInput,
    RelayInput,
    ReviewerListInput,
    ReviewerStartInput,
    Service,
)
from runner.store import Store
from tests.support.specs import shared_library
from tests.support.stores import open_test_store

SHA = "d" * 64


class World:
    """A real store (wall clock), a real process host and a service, plus a controller lease."""

    def __init__(self, root: Path, host_factory: Callable[[Store, Path], AgentHost] | None = None) -> None:
        self.root = root
        self.store = open_test_store(root)
        self.kinds = Kinds.load([])
        factory = host_factory or (lambda store, agents: ProcessHost(store, agents, self.kinds))
        self.host = factory(self.store, root / "agents")
        self.service = Service(
            self.store, shared_library(), actor="test", hosts=lambda name: self.host, kinds=self.kinds
        )
        self.credential = self.service.controller.acquire(AcquireInput("ctl", "T-3", SHA, 900, "t@h")).credential
        self.worktree = root / "wt"
        self.worktree.mkdir()
        (self.worktree / "main.py").write_text("print('hi')\n")

    def start(self, name: str = "rev", kind: str = "script") -> Any:
        return self.service.reviewers.start(ReviewerStartInput("ctl", self.credential, name, kind, str(self.worktree)))

    def relay(self, text: str, target: str = "rev", credential: Credential | None = None) -> Any:
        return self.service.receipts.relay(RelayInput("ctl", credential or self.credential, target, text))

    def collect(self, *tokens: str, timeout: float = 30) -> Any:
        return anyio.run(self.service.receipts.collect, CollectInput("ctl", self.credential, tokens, timeout))

    def observe(self, name: str = "rev") -> Observation:
        lease = next(x for x in self.service.reviewers(ReviewerListInput("ctl")) if x.data["name"] == name)
        return self.host.get(lease.data["pane_id"])


def refused(code: str, call: Callable[[], Any]) -> CorralError:
    with pytest.raises(CorralError) as caught:
        call()
    assert caught.value.code == code, caught.value.to_dict()
    return caught.value


class LostReplyHost(ProcessHost):
    """The process host, except that the first prompt's confirmation is lost after it was handed over."""

    lose = True

    def prompt(self, pane_id: str, text: str, expect: Expect | None = None, gate: Any = None) -> Observation:
        observed = super().prompt(pane_id, text, expect, gate)
        if self.lose:
            self.lose = False
            raise AgentError("the reply from the host was lost", code="agent_prompt_unconfirmed", delivered=None)
        return observed


class FlakyStartHost(ProcessHost):
    """Starts fail after creating a pane; closing that pane may fail too."""

    close_fails = False

    def start(
        self, name: str, kind: str, cwd: str, options: StartOptions, gate: Any = None, nonce: Any = None
    ) -> Observation:
        started = super().start(name, kind, cwd, options, gate, nonce)
        raise AgentError("the agent did not come up", code="agent_start_failed", pane_id=started.pane_id)

    def close(self, pane_id: str, gate: Any = None) -> None:
        if self.close_fails:
            raise AgentError("the pane would not close", code="pane_close_failed")
        super().close(pane_id, gate)


class KindlessHost(ProcessHost):
    """A host that does not know the kind after all (Herdr's own kind list can differ from corral's)."""

    def start(
        self, name: str, kind: str, cwd: str, options: StartOptions, gate: Any = None, nonce: Any = None
    ) -> Observation:
        from runner.agents.abc import AgentKindError

        raise AgentKindError(f"the host has no agent kind {kind!r}", kind=kind)
