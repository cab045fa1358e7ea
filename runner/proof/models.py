"""The abstract models of guards and updates the explorer evaluates, keyed by registered name.

A guard whose outcome follows from what the explorer models (the lease, the actors' credentials,
the instances' states) is *computed*; a guard that reads the outside world (git, an agent's cursor,
its settledness) is a *free choice*: the explorer lets it pass or fail, so both are explored. An
update is modelled by what it does to the lease and which data fields it sets. A guard or update
without a model here (a plugin's) is a free choice, and touches nothing modelled.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class View:
    """What a computed guard may look at: one actor's belief and the modelled world, read-only."""

    machine: str
    current: bool
    """The actor holds the credential of the current generation."""
    live: bool
    """The current grant has not expired by the store's clock."""
    granted: bool
    """Some grant was ever issued."""
    others_open: bool
    """Another instance contending for the same target is open (neither initial nor terminal)."""


Guard = Callable[[View, Mapping[str, Any]], "bool | None"]
"""A guard's model: pass (True), reject (False) or None, a free choice."""


@dataclass(frozen=True)
class GuardModel:
    summary: str
    decide: Guard
    lease: bool = False
    """It reads the lease: a machine with such a guard is checked with a lease to contend for."""


@dataclass(frozen=True)
class UpdateModel:
    summary: str
    sets: tuple[str, ...] = ()
    lease: str | None = None
    """``issue`` (a new generation to the actor, live), ``extend`` (live again) or ``release``."""


def _free(view: View, args: Mapping[str, Any]) -> bool | None:
    return None


def _fence(view: View, args: Mapping[str, Any]) -> bool | None:
    return view.current and (view.live or bool(args.get("allow_expired")))


def _same(machine: str) -> Guard:
    def decide(view: View, args: Mapping[str, Any]) -> bool | None:
        return (not view.others_open) if view.machine == machine else None

    return decide


def _free_guard(summary: str) -> GuardModel:
    return GuardModel(f"free choice: {summary}", _free)


GUARD_MODELS: dict[str, GuardModel] = {
    "fence": GuardModel("the actor's generation is current and the lease live (unless allow_expired)", _fence, True),
    "wake_authority": GuardModel(
        "the waking agent's lease generation is current and live", lambda v, a: v.current and v.live, True
    ),
    "lease_expired": GuardModel("a grant exists and it has expired", lambda v, a: v.granted and not v.live, True),
    "lease_predecessor": GuardModel("the caller names the lease it just read: passes", lambda v, a: True),
    "owner": GuardModel("every actor coordinates under the instance's controller id: passes", lambda v, a: True),
    "plan_runner_free": GuardModel(
        "no runner, the caller's own, or its lease expired", lambda v, a: not v.granted or v.current or not v.live
    ),
    "plan_runner": GuardModel("the caller is the recorded runner (current generation)", lambda v, a: v.current),
    "no_open_receipt": GuardModel("no other open receipt for the target (free outside receipts)", _same("receipt")),
    "no_open_wake": GuardModel("no other open wake for the target (free outside wakes)", _same("wake")),
    **{
        name: _free_guard(summary)
        for name, summary in {
            "agent_name_free": "the name is free on the host",
            "agent_cwd": "the directory exists",
            "agent_kind_known": "the kind is configured",
            "agent_identity": "the pane holds the same agent",
            "identity_changed": "the pane holds another agent",
            "agent_settled": "the agent is settled",
            "agent_cursor": "the cursor matches",
            "capture_stable": "nothing moved while capturing",
            "agent_gone": "the pane is gone",
            "target_leased": "the target lease is active (another machine)",
            "collect_cursor": "the agent settled at the next cursor",
            "cursor_superseded": "the agent moved past the window",
            "agent_quiet": "the agent is quiet",
            "start_abandoned": "the start is old enough to abandon",
            "agent_found": "a pane with the start nonce exists",
            "agent_expected": "the pane holds the expected agent",
            "pane_unleased": "no lease holds the pane",
            "pane_started_by_corral": "corral started the pane",
            "pane_not_protected": "the pane is not protected",
            "closing_cursor": "the cursor is the closing one",
            "agent_closable": "the agent may be closed",
            "within_budget": "spend is under the budget",
            "git_linked_worktree": "a linked worktree",
            "git_branch": "an unprotected branch",
            "git_same_worktree": "the lane's worktree",
            "git_head": "HEAD as expected",
            "git_base": "the base commit as expected",
            "git_status": "the status digest as expected",
            "git_content": "the content digest as expected",
            "scopes_respected": "changes inside the owned scopes",
            "scopes_disjoint": "scopes disjoint from live lanes",
            "scopes_resolved": "scopes resolve without symlinks",
            "lane_conflicts": "no live lane shares the worktree or branch",
            "worktree_free": "no live lane in the worktree",
            "wake_owner": "the caller is the woken agent",
            "wake_window_over": "the wake's window is over",
        }.items()
    },
}
"""Every built-in guard's model; ``tests/proof`` fails when a registered guard has none."""

UPDATE_MODELS: dict[str, UpdateModel] = {
    "issue_lease": UpdateModel(
        "a new generation to the caller, live", ("lease_id", "generation", "expires_at", "holder", "issued_at"), "issue"
    ),
    "extend_lease": UpdateModel("the caller's grant live again", ("renewed_at", "expires_at"), "extend"),
    "record_runner": UpdateModel("the caller becomes the plan's runner", ("runner",), "issue"),
    "renew_runner": UpdateModel("the runner's lease live again", ("runner",), "extend"),
    "record_checkpoint": UpdateModel("the lease is given up", ("checkpoint_ref", "released_at"), "release"),
    "record_authority": UpdateModel("the authority", ("authority_ref", "authority_sha256")),
    "record_receipt": UpdateModel("the target and its cursor", ("target", "before_seq", "reserved_at", "token")),
    "record_completion": UpdateModel("the settled cursor and output", ("settled_seq", "completed_at")),
    "record_failure": UpdateModel("why it failed", ("reason", "failed_at", "observed_seq")),
    "record_abandon": UpdateModel("why it was abandoned", ("reason", "abandoned_at", "observed_seq")),
    "record_agent_lease": UpdateModel("the lease's agent", ("controller_id", "lease_id", "name", "start_nonce")),
    "record_writer_lane": UpdateModel("the lane", ("worktree", "branch", "owned_scopes", "start_head")),
    "record_found_pane": UpdateModel("the pane found", ("pane_id",)),
    "record_capture": UpdateModel("the capture", ("capture_sha256", "closing_seq")),
    "record_reconcile": UpdateModel("what reconcile saw", ("reconciled_at",)),
    "record_release": UpdateModel("the release", ("checkpoint_ref", "release_head")),
    "record_verification": UpdateModel("the verification", ("verification", "verified_at")),
    "record_adoption": UpdateModel("the adoption", ("controller_id", "lease_id", "adopted_seq")),
    "record_adoption_release": UpdateModel("the release", ("released_at",)),
    "record_pane_close": UpdateModel("the close", ("closing_seq", "requested_at")),
    "record_wake": UpdateModel("the wake", ("agent_id", "generation", "target", "before_seq", "window_ends_at")),
    "record_wake_used": UpdateModel("the use", ("used_at",)),
    "record_wake_expired": UpdateModel("the expiry", ("expired_at",)),
    "record_plan": UpdateModel("the plan", ("plan_id", "recipe", "inputs", "submitted_at")),
    "record_step": UpdateModel("a step", ("steps",)),
    "record_pause": UpdateModel("the pause", ("paused_reason",)),
    "record_decision": UpdateModel("the decision", ("waiting_on",)),
    "record_finish": UpdateModel("the end", ("finished_at",)),
    "record_retry": UpdateModel("the retry", ("retries",)),
}
"""Every built-in update's model; ``tests/proof`` fails when a registered update has none."""

UNKNOWN_GUARD = GuardModel("free choice: no model (a plugin's guard)", _free)
UNKNOWN_UPDATE = UpdateModel("no model (a plugin's update): touches nothing modelled")
