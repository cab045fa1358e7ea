"""Adopted pane leases: a cleanup-only hold on an agent corral did not start.

Agents made outside corral (a Herdr pane opened by hand, another tool's agent) are nobody's until a
coordinator adopts one (machine ``adopted``): the exact agent it saw (pane, name, kind, cwd, settled at
a cursor), fenced, in a pane that is not protected and that no live lease holds. An adoption grants
no git ownership and no prompting (``relay``/``ask``/``wait-any`` refuse it: ``lease_adopted``; no
receipt can name it). It allows only a fenced close at a settled cursor (capture, then close:
two-phase) and a release that ends the lease and leaves the pane running.

Protected panes are read afresh for every adopt and close (never cached, never taken from the caller):
``$HERDR_PANE_ID`` (the coordinator's own pane) on the Herdr host, and ``$CORRAL_PROTECTED_PANES``, a
comma-separated list of pane ids, on every host.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping
from typing import Any

from runner.context import Instance
from runner.errors import InvalidError, NotFoundError, RefusedError
from runner.guards.agents import LIVE_LEASE_STATES
from runner.service.checks import PANE_ID
from runner.service.core import Core
from runner.service.inputs.adopted import AdoptedCloseInput, AdoptedListInput, AdoptedReleaseInput, AdoptInput
from runner.service.inputs.inventory import ControllerInput
from runner.service.views.inventory import Housekeeping
from runner.service.views.leases import AgentLeaseView, CloseResult
from runner.service.views.pages import Page

PROTECTED_ENV = "CORRAL_PROTECTED_PANES"
# An adopted lease in one of these states still holds its pane; close and release act on them.
HELD_STATES = ("active", "close_failed")


def protected_panes(host: str, environ: Mapping[str, str]) -> list[str]:
    """The panes nobody may adopt or close through an adoption on ``host``: the coordinator's own Herdr
    pane and the ones listed in ``$CORRAL_PROTECTED_PANES``.

    Raises:
        InvalidError: ``config_invalid`` for an entry that is not a pane id (a typo must not silently
            leave a pane unprotected).
    """
    panes: set[str] = set()
    for raw in environ.get(PROTECTED_ENV, "").split(","):
        entry = raw.strip()
        if not entry:
            continue
        if not PANE_ID.match(entry):
            raise InvalidError(
                f"${PROTECTED_ENV} holds {entry!r}, which is not a pane id; fix the list (comma-separated pane ids)",
                code="config_invalid",
                variable=PROTECTED_ENV,
            )
        panes.add(entry)
    own = environ.get("HERDR_PANE_ID")
    if host == "herdr" and own:
        panes.add(own)
    return sorted(panes)


class Adopted:
    """Adopt, close, release, list and reconcile adopted pane leases."""

    def __init__(self, core: Core) -> None:
        self.core = core

    def _adopted(self, controller_id: str, target: str, states: tuple[str, ...]) -> Instance:
        """This controller's adopted lease in ``states`` named ``target`` or holding pane ``target``."""
        found = [
            lease
            for lease in self.core.store.find("adopted", states)
            if lease.data.get("controller_id") == controller_id
            and target in (lease.data.get("name"), lease.data.get("pane_id"))
        ]
        if not found:
            raise NotFoundError(
                f"controller {controller_id!r} holds no {' or '.join(states)} adopted lease named {target!r} or on "
                f"pane {target!r}",
                code="target_unknown",
                target=target,
                states=list(states),
            )
        if len(found) > 1:
            raise RefusedError(
                f"{target!r} names {len(found)} adopted leases; give the pane id",
                code="target_ambiguous",
                leases=[lease.id for lease in found],
            )
        return found[0]

    def adopt(self, inp: AdoptInput) -> AgentLeaseView:
        """Adopt an agent corral did not start, for cleanup only.

        Refused (nothing written): ``fence_stale``, ``pane_protected``, ``pane_leased``,
        ``agent_name_taken``, ``identity_changed``, ``agent_gone``, ``agent_not_settled``,
        ``cursor_mismatch``.
        """
        host = self.core.host(inp.host)
        result = self.core.fire_on(
            "adopted",
            f"adopted/{inp.lease_id or uuid.uuid4()}",
            "adopt",
            inp.credential,
            {
                "host": inp.host,
                "pane_id": inp.pane_id,
                "name": inp.expected_name,
                "kind": inp.expected_kind,
                "cwd": inp.expected_cwd,
                "expected_state_change_seq": inp.expected_state_change_seq,
            },
            {"agent": self.core.observe(host, inp.pane_id), "protected_panes": protected_panes(inp.host, os.environ)},
        )
        return self.core.lease_view(result.instance)

    def close(self, inp: AdoptedCloseInput) -> CloseResult:
        """Capture the adopted agent's output at the expected cursor and close its pane (two-phase).

        Raises:
            RefusedError: ``pane_protected``, ``identity_changed``, ``agent_not_settled``, ``cursor_mismatch``,
                ``cursor_superseded``, ``fence_stale`` (nothing closed).
            AgentOperationError: ``agent_close_failed`` (the lease is ``close_failed``, or still ``closing``).
        """
        lease = self._adopted(inp.controller_id, inp.target, HELD_STATES)
        host_name = str(lease.data["host"])
        return self.core.close_lease(
            lease,
            "close",
            inp.credential,
            {"expected_state_change_seq": inp.expected_state_change_seq},
            inp.lines,
            observe=lambda: {"protected_panes": protected_panes(host_name, os.environ)},
        )

    def release(self, inp: AdoptedReleaseInput) -> AgentLeaseView:
        """End the adoption; the pane is left running and is nobody's again. Refused: ``fence_stale``."""
        lease = self._adopted(inp.controller_id, inp.target, HELD_STATES)
        result = self.core.fire_on("adopted", lease.id, "release", inp.credential, {}, {})
        return self.core.lease_view(result.instance)

    def leases(self, inp: AdoptedListInput) -> Page[AgentLeaseView]:
        """Adopted leases, live ones only unless ``inp.include_ended``; a page if ``inp.limit``/``inp.after``."""
        states = None if inp.include_ended else LIVE_LEASE_STATES
        return self.core.leases("adopted", states, inp.controller_id, after=inp.after, limit=inp.limit)

    def reconcile(self, inp: ControllerInput) -> Housekeeping:
        """Settle this controller's adopted leases: a pane that vanished (``closed``, nothing captured), a
        recorded close whose pane is gone, or whose pane is still open with the agent settled at the
        bound cursor (the close is finished). A dry run unless ``inp.apply``: it only reports what each
        lease's pane looks like; with ``apply`` the machine's guards decide, and whatever they refuse is
        reported with their code, untouched."""
        self.core.check_fence(inp.credential)
        spec = self.core.library.builtin("adopted")
        unsettled = [state for state in spec.states if spec.transitions_for("reconcile", state)]
        actions: list[dict[str, Any]] = []
        for lease in self.core.store.find("adopted", unsettled):
            if lease.data.get("controller_id") != inp.controller_id:
                continue
            host = self.core.host(lease.data["host"])
            observed = self.core.observe(host, lease.data.get("pane_id"))
            exists = bool(observed.get("exists"))
            if lease.state == "active" and exists:
                continue  # held, with its pane: nothing to reconcile, nothing to report
            action: dict[str, Any] = {
                "name": lease.data.get("name"),
                "lease": lease.id,
                "state": lease.state,
                "pane_exists": exists,
            }
            if lease.state == "close_failed" and exists:
                action.update(action="skip", why="its pane is still open: close it again, or release it")
            elif not inp.apply:
                action.update(action="would_reconcile")
            else:
                try:
                    result = self.core.fire_on(
                        "adopted", lease.id, "reconcile", inp.credential, {}, {"agent": observed}, host=host
                    )
                except RefusedError as exc:
                    action.update(action="skip", code=exc.code, why=exc.message)
                else:
                    action.update(action="reconciled", to=result.instance.state)
                    if exists:
                        action.update(closed_pane=observed.get("pane_id"))
            actions.append(action)
        return Housekeeping(inp.apply, actions)
