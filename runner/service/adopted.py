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
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from runner.context import Instance
from runner.errors import InputError, InvalidError, NotFoundError, RefusedError
from runner.fence import Credential
from runner.guards.agents import LIVE_LEASE_STATES
from runner.service.agents import (
    CAPTURE_LINES_DEFAULT,
    AgentLeaseView,
    AgentOps,
    CloseResult,
    ControllerInput,
    Housekeeping,
    _check_cursor,
    _check_key,
    _check_lines,
    check_expected_agent,
)
from runner.service.checks import check_controller_id, check_credential

PROTECTED_ENV = "CORRAL_PROTECTED_PANES"
PANE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9:._-]{0,127}$")
# An adopted lease in one of these states still holds its pane; close and release act on them.
HELD_STATES = ("active", "close_failed")


def _check_pane(field_name: str, value: str) -> None:
    if not isinstance(value, str) or not PANE_ID.match(value):
        raise InputError(field_name, f"{value!r} is not a pane id or agent name")


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


# --- inputs -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AdoptInput:
    """Adopt the agent in ``pane_id`` if it is exactly the one seen: name, kind, cwd, settled at the cursor."""

    controller_id: str
    credential: Credential
    pane_id: str
    expected_name: str
    expected_kind: str
    expected_cwd: str
    expected_state_change_seq: int
    host: str = "process"
    lease_id: str | None = None
    """An idempotency key: the lease instance is ``adopted/<lease_id>``."""

    def __post_init__(self) -> None:
        check_controller_id(self.controller_id)
        check_credential(self.credential, self.controller_id)
        _check_pane("target", self.pane_id)
        check_expected_agent(self)
        _check_key("lease_id", self.lease_id)


@dataclass(frozen=True)
class AdoptedCloseInput:
    """Close the adopted agent ``target`` (its name or pane id) if it sits settled at the expected cursor."""

    controller_id: str
    credential: Credential
    target: str
    expected_state_change_seq: int
    lines: int = CAPTURE_LINES_DEFAULT

    def __post_init__(self) -> None:
        check_controller_id(self.controller_id)
        check_credential(self.credential, self.controller_id)
        _check_pane("target", self.target)
        _check_cursor("expect_seq", self.expected_state_change_seq)
        _check_lines(self.lines)


@dataclass(frozen=True)
class AdoptedReleaseInput:
    """End the adoption of ``target`` (its name or pane id); the pane is left running."""

    controller_id: str
    credential: Credential
    target: str

    def __post_init__(self) -> None:
        check_controller_id(self.controller_id)
        check_credential(self.credential, self.controller_id)
        _check_pane("target", self.target)


@dataclass(frozen=True)
class AdoptedListInput:
    """Adopted leases (of one controller, if given); ``include_ended`` adds closed and released ones."""

    controller_id: str | None = None
    include_ended: bool = False

    def __post_init__(self) -> None:
        if self.controller_id is not None:
            check_controller_id(self.controller_id)


# --- operations ---------------------------------------------------------------------------------------


class AdoptedOps(AgentOps):
    """Adopt, close, release, list and reconcile adopted pane leases."""

    def _adopted(self, controller_id: str, target: str, states: tuple[str, ...]) -> Instance:
        """This controller's adopted lease in ``states`` named ``target`` or holding pane ``target``."""
        found = [
            lease
            for lease in self.store.find("adopted", states)
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
        host = self.host(inp.host)
        result = self._fire_on(
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
            {"agent": self._observe(host, inp.pane_id), "protected_panes": protected_panes(inp.host, os.environ)},
        )
        return self._lease_view(result.instance)

    def adopted_close(self, inp: AdoptedCloseInput) -> CloseResult:
        """Capture the adopted agent's output at the expected cursor and close its pane (two-phase).

        Raises:
            RefusedError: ``pane_protected``, ``identity_changed``, ``agent_not_settled``, ``cursor_mismatch``,
                ``cursor_superseded``, ``fence_stale`` (nothing closed).
            AgentOperationError: ``agent_close_failed`` (the lease is ``close_failed``, or still ``closing``).
        """
        lease = self._adopted(inp.controller_id, inp.target, HELD_STATES)
        host_name = str(lease.data["host"])
        return self._close_lease(
            lease,
            "close",
            inp.credential,
            {"expected_state_change_seq": inp.expected_state_change_seq},
            inp.lines,
            observe=lambda: {"protected_panes": protected_panes(host_name, os.environ)},
        )

    def adopted_release(self, inp: AdoptedReleaseInput) -> AgentLeaseView:
        """End the adoption; the pane is left running and is nobody's again. Refused: ``fence_stale``."""
        lease = self._adopted(inp.controller_id, inp.target, HELD_STATES)
        result = self._fire_on("adopted", lease.id, "release", inp.credential, {}, {})
        return self._lease_view(result.instance)

    def adopted_list(self, inp: AdoptedListInput) -> list[AgentLeaseView]:
        return self._leases("adopted", None if inp.include_ended else LIVE_LEASE_STATES, inp.controller_id)

    def adopted_reconcile(self, inp: ControllerInput) -> Housekeeping:
        """Settle this controller's adopted leases: a pane that vanished (``closed``, nothing captured), a
        recorded close whose pane is gone, or whose pane is still open with the agent settled at the
        bound cursor (the close is finished). A dry run unless ``inp.apply``: it only reports what each
        lease's pane looks like; with ``apply`` the machine's guards decide, and whatever they refuse is
        reported with their code, untouched."""
        self._check_fence(inp.credential)
        spec = self.library.builtin("adopted")
        unsettled = [state for state in spec.states if spec.transitions_for("reconcile", state)]
        actions: list[dict[str, Any]] = []
        for lease in self.store.find("adopted", unsettled):
            if lease.data.get("controller_id") != inp.controller_id:
                continue
            host = self.host(lease.data["host"])
            observed = self._observe(host, lease.data.get("pane_id"))
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
                    result = self._fire_on(
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
