"""Reviewer leases: start an agent leased to a controller, close it at a settled cursor, list them.

Cleanup and reconcile of reviewers are :mod:`~runner.service.inventory`'s (they judge every lease
the controller holds); prompts go through :mod:`~runner.service.receipts`.
"""

from __future__ import annotations

import os
import uuid

from runner.guards.agents import LIVE_LEASE_STATES
from runner.service.checks import budget_options
from runner.service.core import Core
from runner.service.inputs.reviewers import ReviewerCloseInput, ReviewerListInput, ReviewerStartInput
from runner.service.views.leases import AgentLeaseView, CloseResult
from runner.service.views.pages import Page


class Reviewers:
    """Reviewer leases."""

    def __init__(self, core: Core) -> None:
        self.core = core

    def __call__(self, inp: ReviewerListInput) -> Page[AgentLeaseView]:
        """``service.reviewers(inp)``: :meth:`leases` (the listing's spelling before reviewers were a component)."""
        return self.leases(inp)

    def start(self, inp: ReviewerStartInput) -> AgentLeaseView:
        """Start a reviewer. Refused: fence_stale, agent_name_taken, cwd_invalid, agent_kind_unknown."""
        core = self.core
        host = core.host(inp.host)
        real = os.path.realpath(inp.cwd)
        observations = {
            "cwd": {"given": inp.cwd, "real": real, "is_dir": os.path.isdir(real)},
            "kinds": core.kinds.names(),
        }
        options = core.agent_options(
            inp.kind,
            inp.model,
            inp.effort,
            inp.host,
            role="reviewer",
            limits=budget_options(inp.budget_usd, inp.budget_tokens, inp.max_turns),
        )
        with core.starting() as starting:
            result = core.fire_on(
                "reviewer",
                f"reviewer/{inp.lease_id or uuid.uuid4()}",
                "start",
                inp.credential,
                {
                    "name": inp.name,
                    "kind": inp.kind,
                    "cwd": inp.cwd,
                    "host": inp.host,
                    "options": options,
                    **starting,
                },
                observations,
                host=host,
            )
        return core.settled(result, "agent_start_failed", "starting the agent")

    def close(self, inp: ReviewerCloseInput) -> CloseResult:
        """Capture the output at the expected cursor and close the pane."""
        lease = self.core.lease_named(inp.controller_id, inp.name, inp.lease_id, ("active", "close_failed"), "reviewer")
        params = {"expected_state_change_seq": inp.expected_state_change_seq, "blocked_reason": inp.blocked_reason}
        return self.core.close_lease(lease, "close", inp.credential, params, inp.lines)

    def leases(self, inp: ReviewerListInput) -> Page[AgentLeaseView]:
        """Reviewer leases, live ones only unless ``inp.include_ended``; a page if ``inp.limit``/``inp.after``."""
        states = None if inp.include_ended else LIVE_LEASE_STATES
        return self.core.leases("reviewer", states, inp.controller_id, after=inp.after, limit=inp.limit)
