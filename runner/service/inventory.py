"""Inventory: what is on the store and the hosts, and settling what was left half-done.

Read-only: :meth:`Inventory.status` (counts, what needs a person, every lock judged), :meth:`~Inventory.locks`,
:meth:`~Inventory.agents` (every agent on a host, with the lease holding it). Housekeeping, fenced and
a dry run unless asked to apply: reconcile of reviewer, writer and pane leases, reviewer cleanup; and
an operator's close of a pane no lease holds.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from runner import fence
from runner.agents.abc import PROMPTABLE, AgentError
from runner.agents.hosts import known
from runner.context import Instance
from runner.definitions.model import MachineSpec
from runner.errors import CorralError, RefusedError
from runner.guards.agents import (
    LEASE_MACHINES,
    LIVE_LEASE_STATES,
    OPEN_RECEIPT_STATES,
    PANE_LEASE_MACHINES,
    budget_spent,
    same_identity,
)
from runner.service.checks import CAPTURE_LINES_DEFAULT
from runner.service.core import Core
from runner.service.inputs.inventory import ControllerInput, PaneCloseInput
from runner.service.views.inventory import Housekeeping
from runner.service.views.leases import AgentLeaseView

LOCK_STATES = ("absent", "active", "stale", "indeterminate")
RUNNER_WHY = {
    "absent": "no runner recorded",
    "active": "its runner process is alive on this host",
    "stale": "its runner is gone (the process exited, or the host rebooted): a new runner may take it",
    "indeterminate": "its runner is on another host or its liveness cannot be read: never taken by age",
}


SPENT_BY_LIMIT = (("budget_usd", "cost_usd"), ("budget_tokens", "tokens"), ("max_turns", "turns"))
"""Each budget a lease may set, and the key of the spend it limits."""


def lease_budget(data: Any) -> dict[str, Any]:
    """The limits a lease's start recorded (``budget_usd``, ``budget_tokens``, ``max_turns``: those set)."""
    options = data.get("options") if isinstance(data, dict) else None
    if not isinstance(options, dict):
        return {}
    return {limit: options[limit] for limit, _ in SPENT_BY_LIMIT if isinstance(options.get(limit), (int, float))}


def budget_left(budget: dict[str, Any], spent: Any) -> dict[str, Any]:
    """What is left of each set limit after ``spent`` (never below zero)."""
    spent = spent if isinstance(spent, dict) else {}
    left: dict[str, Any] = {}
    for limit, key in SPENT_BY_LIMIT:
        if limit in budget:
            value = budget[limit] - (spent.get(key) or 0)
            left[limit] = round(max(value, 0), 6) if isinstance(value, float) else max(value, 0)
    return left


def needs_attention(spec: MachineSpec) -> frozenset[str]:
    """States a person should look at: intermediate ones (an effect's outcome is not recorded) and
    those, other than ``active``, that ``reconcile`` settles (orphaned, a failed close or release)."""
    return frozenset(
        name
        for name, state in spec.states.items()
        if state.intermediate or (name != "active" and spec.transitions_for("reconcile", name))
    )


def next_for(machine: str, instance: Instance) -> str:
    """The command that settles an instance left where it needs a person."""
    controller = instance.data.get("controller_id")
    if machine == "receipt":
        return (
            f"observe the agent (corral agent get {instance.data.get('pane_id')}), then corral abandon --controller "
            f"{controller} --receipt {instance.data.get('token')} on fresh evidence that it is settled"
        )
    if machine == "wake":  # an unconfirmed mesh wake-up settles itself
        return (
            f"nothing: the agent {instance.data.get('agent_id')!r} uses its token (corral_mesh_inbox), or the wake-up "
            f"expires at {instance.data.get('window_ends_at')}"
        )
    group = {"pane": "agent"}.get(machine, machine)
    if machine == "plan":
        return f"corral plans resume {instance.data.get('plan_id')}"
    return f"corral {group} reconcile --controller {controller} (a dry run), then again with --apply"


def lease_lock(spec: MachineSpec, lease: Instance, judge: Callable[[Any], str]) -> tuple[str, str]:
    """A reviewer, writer or pane instance as a lock: ``active`` while it holds its agent, ``absent``
    once ended, ``stale`` where only reconcile can settle it, and for an effect in flight (an
    intermediate state) what its recorded process says, ``indeterminate`` without one."""
    state = spec.states.get(lease.state)
    if lease.state == "active":
        return "active", "holds its agent"
    if state is not None and state.terminal:
        return "absent", f"{lease.state}: ended"
    if state is not None and state.intermediate:
        if lease.state == "provisioning" and lease.data.get("starter"):
            judged = judge(lease.data.get("starter"))
            if judged == "active":
                return "active", "its start is still running"
            if judged == "stale":
                return "stale", "its start died before recording the outcome: reconcile"
        return "indeterminate", f"{lease.state}: an effect's outcome is not recorded (reconcile once no process acts)"
    return "stale", f"{lease.state}: reconcile settles it"


class Inventory:
    """Status, locks, agents on a host; reconcile and cleanup of what a controller holds."""

    def __init__(self, core: Core) -> None:
        self.core = core

    # --- read-only ---------------------------------------------------------------------------------------

    def lease(self, instance_id: str) -> AgentLeaseView | None:
        """The agent lease (reviewer, writer, adopted, pane) with this instance id, or None."""
        return self.core.lease(instance_id)

    def agents(self, host_name: str = "process") -> list[dict[str, Any]]:
        """Live observations of the host's agents, with the lease holding each (if any)."""
        host = self.core.host(host_name)
        holders = {
            (lease.data.get("host"), lease.data.get("pane_id")): lease
            for machine in PANE_LEASE_MACHINES
            for lease in self.core.store.find(machine, LIVE_LEASE_STATES)
        }
        out = []
        for observation in host.list():
            lease = holders.get((host_name, observation.pane_id))
            out.append(
                {
                    **observation.to_dict(),
                    "host": host_name,
                    "lease": lease.id if lease else None,
                    "controller_id": lease.data.get("controller_id") if lease else None,
                    "lease_state": lease.state if lease else None,
                    "budget": lease_budget(lease.data) if lease else None,
                }
            )
        return out

    def status(self) -> dict[str, Any]:
        """Version, store, agent hosts, counts by machine and state, what needs reconcile, and every
        lock and lease judged ``absent``/``active``/``stale``/``indeterminate`` (:meth:`locks`).

        Counts come from the store's aggregate (:meth:`Reader.counts`); only instances not yet ended
        (and those needing attention) are read, so the cost follows what is live, not what ever was."""
        from runner._version import __version__

        by_pair = self.core.store.counts()
        counts: dict[str, dict[str, int]] = {}
        needs: list[dict[str, Any]] = []
        rebuilt = self.core.library.cache_rebuilds()  # damaged or tampered entries found and rebuilt
        for path in self.core.library.builtin_paths():
            spec = self.core.library.builtin(path.stem)
            present = {state: n for (machine, state), n in sorted(by_pair.items()) if machine == spec.name}
            if present:
                counts[spec.name] = present
            attention = [state for state in present if state in needs_attention(spec)]
            for instance in self.core.store.find(spec.name, attention) if attention else ():
                needs.append(
                    {
                        "id": instance.id,
                        "machine": spec.name,
                        "state": instance.state,
                        "name": instance.data.get("name"),
                        "token": instance.data.get("token"),
                        "kind": "unsettled",
                        "next": next_for(spec.name, instance),
                    }
                )
        needs.extend(self._attention())
        hosts = self._describe_hosts(by_pair)
        return {
            "version": __version__,
            "store": self.core.store.info(),
            "agent_host": hosts[0] if hosts else None,
            "agent_hosts": hosts,
            "counts": counts,
            "needs_attention": needs,
            "locks": self.locks(by_pair),
            "spend": self.spend(by_pair),
            "confinement": self.confinement(by_pair),
            "cache": {"rebuilt": sum(rebuilt.values()), "by_cache": rebuilt},
        }

    def spend(self, by_pair: dict[tuple[str, str], int] | None = None) -> list[dict[str, Any]]:
        """Each live reviewer or writer lease whose agent a driver runs (claude, codex): its conversation,
        what its runs spent (tokens, cost, turns, runs) against its budget (``budget_usd``,
        ``budget_tokens``, ``max_turns``, only those set), what is ``left`` of each, and the limit it
        reached (``exhausted``: the refusal its next prompt gets, or None)."""
        by_pair = self.core.store.counts() if by_pair is None else by_pair
        views = []
        for machine in LEASE_MACHINES:
            spec = self.core.library.builtin(machine)
            views += [self.core.lease_view(i) for i in self._not_ended(spec, by_pair)]
        rows = []
        for view in self.core.with_runs(views):
            if "spend" not in view.data:
                continue  # not driven (script, plain), or not live: with_runs adds nothing
            spent = view.data.get("spend") or {}
            budget = lease_budget(view.data)
            rows.append(
                {
                    "lease": view.id,
                    "machine": view.machine,
                    "name": view.data.get("name"),
                    "kind": view.data.get("kind"),
                    "session_id": view.data.get("session_id"),
                    "confinement": view.data.get("confinement"),
                    "spend": spent,
                    "budget": budget,
                    "left": budget_left(budget, spent),
                    "exhausted": budget_spent(budget, spent),
                }
            )
        return rows

    def confinement(self, by_pair: dict[tuple[str, str], int] | None = None) -> list[dict[str, Any]]:
        """Each live reviewer or writer lease and how its agent is confined around the CLI's own checks:
        ``bwrap`` (the process host's Bubblewrap: read-only but a writer's owned scopes), ``none`` with
        the operator's ``unconfined_reason`` (started ``--unconfined``), ``none`` on the herdr host."""
        by_pair = self.core.store.counts() if by_pair is None else by_pair
        rows = []
        for machine in ("reviewer", "writer"):
            for instance in self._not_ended(self.core.library.builtin(machine), by_pair):
                options = instance.data.get("options") or {}
                reason = options.get("unconfined_reason") if isinstance(options, dict) else None
                host = instance.data.get("host")
                rows.append(
                    {
                        "lease": instance.id,
                        "machine": machine,
                        "name": instance.data.get("name"),
                        "host": host,
                        "confinement": "bwrap" if host == "process" and reason is None else "none",
                        "unconfined_reason": reason,
                    }
                )
        return rows

    def _not_ended(self, spec: MachineSpec, by_pair: dict[tuple[str, str], int]) -> list[Instance]:
        """The instances of ``spec``'s machine in a state that is not terminal (a state the spec does
        not know counts as not ended), read by state from the counts: ended ones are never decoded."""
        states = [s for (m, s) in by_pair if m == spec.name and not (s in spec.states and spec.states[s].terminal)]
        return self.core.store.find(spec.name, states) if states else []

    def expired_controllers(self) -> list[dict[str, Any]]:
        """Each active controller lease that has expired while it still holds live leases or open
        receipts (``kind`` ``controller_expired``), with how many it holds and the command to run next."""
        items: list[dict[str, Any]] = []
        now = self.core.store.now()
        held: dict[str, int] = {}
        for machine in (*LEASE_MACHINES, "adopted"):
            for lease in self.core.store.find(machine, LIVE_LEASE_STATES):
                key = str(lease.data.get("controller_id"))
                held[key] = held.get(key, 0) + 1
        for receipt in self.core.store.find("receipt", OPEN_RECEIPT_STATES):
            key = str(receipt.data.get("controller_id"))
            held[key] = held.get(key, 0) + 1
        for lease in self.core.store.find("controller", ["active"]):
            controller_id = str(lease.data.get("controller_id") or lease.id.partition("/")[2])
            if fence.is_expired(lease, now) and held.get(controller_id):
                items.append(
                    {
                        "kind": "controller_expired",
                        "id": lease.id,
                        "controller": controller_id,
                        "holds": held[controller_id],
                        "expired_at": lease.data.get("expires_at"),
                        "next": f"corral controller resume --controller {controller_id} (its holder), or "
                        f"corral controller takeover --controller {controller_id} --expect-lease <the id "
                        "`corral controller list` shows>",
                    }
                )
        return items

    def _attention(self) -> list[dict[str, Any]]:
        """What else waits on a person, each with the command to run next: an expired controller that
        still holds live leases or receipts, a plan whose runner died or that is paused, a blocked agent."""
        from runner import lockstatus

        items: list[dict[str, Any]] = self.expired_controllers()
        for plan in self.core.store.find("plan", ["running", "paused"]):
            plan_id = str(plan.data.get("plan_id"))
            if plan.state == "paused":
                waiting = plan.data.get("waiting_on") or {}
                follow = (
                    f"corral plans decide {plan_id} --step {waiting.get('step')} --approve|--reject --reason TEXT"
                    if waiting.get("kind") in ("agent_blocked", "approval")
                    else f"corral plans resume {plan_id}"
                )
                items.append(
                    {
                        "kind": "plan_paused",
                        "id": plan.id,
                        "plan": plan_id,
                        "why": plan.data.get("paused_reason"),
                        "waiting_on": waiting or None,
                        "next": follow,
                    }
                )
            elif lockstatus.status(plan.data.get("runner")) == "stale":
                items.append(
                    {
                        "kind": "plan_runner_gone",
                        "id": plan.id,
                        "plan": plan_id,
                        "next": f"corral plans resume {plan_id}",
                    }
                )
        for machine in LEASE_MACHINES:
            for lease in self.core.store.find(machine, ["active"]):
                host_name = str(lease.data.get("host"))
                try:
                    observed = self.core.observe(self.core.host(host_name), lease.data.get("pane_id"))
                except AgentError:
                    continue
                if observed.get("status") == "blocked" and same_identity(observed, lease.data):
                    name = lease.data.get("name")
                    verb = "reviewer close" if machine == "reviewer" else "writer release"
                    items.append(
                        {
                            "kind": "agent_blocked",
                            "id": lease.id,
                            "name": name,
                            "seq": observed.get("seq"),
                            "next": f"answer it in its pane yourself, or corral {verb} {name} --controller "
                            f"{lease.data.get('controller_id')} --expect-seq {observed.get('seq')} --blocked "
                            "--reason TEXT (abandon its open receipt first)",
                        }
                    )
        return items

    def _describe_hosts(self, by_pair: dict[tuple[str, str], int] | None = None) -> list[dict[str, Any]]:
        """The process host, and every other host a lease not yet ended records: each as it describes itself (Herdr:
        version, socket, ``terminal_id``); a host that cannot be reached says so with its error code."""
        if not self.core.has_hosts:
            return []
        by_pair = self.core.store.counts() if by_pair is None else by_pair
        recorded = set()
        for machine in (*LEASE_MACHINES, "pane"):
            spec = self.core.library.builtin(machine)
            for lease in self._not_ended(spec, by_pair):
                if known(str(lease.data.get("host"))):
                    recorded.add(str(lease.data["host"]))
        names = ["process", *sorted(recorded - {"process"})]
        described = []
        for name in names:
            try:
                described.append(self.core.host(name).describe())
            except AgentError as exc:
                # The host itself cannot answer (Herdr's server down): say so. Corrupt configuration
                # (agents_config_invalid) is not the host's state: it is refused, as everywhere.
                described.append({"name": name, "error": {"code": exc.code, "message": exc.message}})
        return described

    def locks(self, by_pair: dict[tuple[str, str], int] | None = None) -> dict[str, Any]:
        """Every lock and lease, each judged one of :data:`LOCK_STATES`, without pids, lease ids or
        credentials: controller leases by expiry (the store's clock), reviewer and writer leases by
        their state (a start in flight by its recorded starter), plan runner locks by
        :func:`runner.lockstatus.status`. A runner on another host, or whose liveness cannot be read,
        is ``indeterminate``: never judged by how old it is. Ended leases (released controllers
        included) are counted in ``ended`` from the store's counts (``by_pair``, read if not given),
        not listed and not read."""
        from runner import lockstatus

        by_pair = self.core.store.counts() if by_pair is None else by_pair
        now = self.core.store.now()
        controllers = []
        ended: dict[str, int] = {}
        for lease in self.core.store.find("controller", ["active"]):
            if fence.is_expired(lease, now):
                state, why = "stale", "expired: another coordinator may take it over"
            else:
                state, why = "active", "held until it expires"
            controllers.append(
                {
                    "id": lease.id,
                    "controller_id": lease.data.get("controller_id"),
                    "lock": state,
                    "why": why,
                    "generation": lease.data.get("generation"),
                    "holder": lease.data.get("holder"),
                    "expires_at": lease.data.get("expires_at"),
                }
            )
        released = sum(n for (m, s), n in by_pair.items() if m == "controller" and s != "active")
        if released:
            ended["controller"] = released
        leases: list[dict[str, Any]] = []
        for machine in (*LEASE_MACHINES, "pane"):
            spec = self.core.library.builtin(machine)
            finished = sum(
                n for (m, s), n in by_pair.items() if m == machine and s in spec.states and spec.states[s].terminal
            )
            if finished:
                ended[machine] = finished
            for lease in self._not_ended(spec, by_pair):
                state, why = lease_lock(spec, lease, lockstatus.status)
                if state == "absent":  # not terminal yet judged ended: counted like the terminal ones
                    ended[machine] = ended.get(machine, 0) + 1
                    continue
                leases.append(
                    {
                        "id": lease.id,
                        "machine": machine,
                        "name": lease.data.get("name"),
                        "controller_id": lease.data.get("controller_id"),
                        "host": lease.data.get("host"),
                        "pane_id": lease.data.get("pane_id"),
                        "state": lease.state,
                        "lock": state,
                        "why": why,
                    }
                )
        runners = []
        for plan in self.core.store.find("plan", ["running"]):
            holder = plan.data.get("runner")
            if holder is None:
                continue
            judged = lockstatus.status(holder)
            runners.append(
                {
                    "id": plan.id,
                    "state": plan.state,
                    "lock": judged,
                    "why": RUNNER_WHY[judged],
                    "same_host": holder.get("host") == lockstatus.hostname(),
                }
            )
        return {"controllers": controllers, "leases": leases, "plan_runners": runners, "ended": ended}

    def reconcile(self, inp: ControllerInput, machine: str = "reviewer") -> Housekeeping:
        """Settle this controller's leases (``reviewer``, ``writer`` or ``pane``) left where ``reconcile``
        applies; without ``inp.apply`` only report, per lease, what would be done and why.

        A lease whose pane is gone is settled; the pane of a start that never finished (found by its
        recorded pane, or by the start nonce and identity it recorded before the pane was created) is
        closed, fenced, and the lease ends ``failed_closed``; a recorded close or release whose pane is
        still open with the agent at the bound cursor is finished. A start whose process still runs is
        left alone; whatever the guards refuse is reported with their code, and nothing is touched.

        The dry run observes exactly as the real run does and asks the engine to evaluate the same
        request through the machine's guards (:meth:`Engine.plan`) without writing or acting, so its
        plan is the decision the apply would take on those observations (the world may move between).
        """
        from runner import lockstatus

        self.core.check_fence(inp.credential)
        spec = self.core.library.builtin(machine)
        unsettled = [state for state in spec.states if spec.transitions_for("reconcile", state)]
        actions: list[dict[str, Any]] = []
        seen: set[str] = set()
        for lease in self.core.store.find(machine, unsettled):
            if lease.data.get("controller_id") != inp.controller_id:
                continue
            if inp.leases and lease.id not in inp.leases:
                continue
            seen.add(lease.id)
            host = self.core.host(lease.data["host"])
            observed, ambiguous = self.core.find_pane(host, lease)
            action: dict[str, Any] = {"name": lease.data.get("name"), "lease": lease.id, "state": lease.state}
            if ambiguous is not None:
                action.update(action="skip", why=ambiguous)
            elif lease.state == "active" and observed.get("exists"):
                if same_identity(observed, lease.data):
                    if inp.leases:  # asked for by id: say why nothing is done
                        action.update(
                            action="skip", why="the lease is active and its pane is live: nothing to reconcile"
                        )
                        actions.append(action)
                    continue  # a live lease with its agent: nothing to reconcile, nothing to report
                # The pane holds another agent (after a Herdr restart: another terminal, no name). No
                # transition fits (the pane is not gone, and closing it would close an agent corral
                # did not start): report it, touch nothing; a person decides.
                action.update(
                    action="skip",
                    code="identity_changed",
                    why=f"pane {observed.get('pane_id')!r} no longer holds the leased agent (its name, kind, cwd or "
                    "terminal changed, as after a Herdr restart); inspect it in the host",
                )
            else:
                starter = lockstatus.status(lease.data.get("starter")) if lease.state == "provisioning" else None
                observations = {"agent": observed, "starter": starter}
                # A start killed after its pane was created but before an agent ran in it left a
                # pane no listing shows; the host's start journal names it. Closed only once the start's
                # process is gone (a live start is left alone, as the guards leave it).
                nonce = lease.data.get("start_nonce")
                orphan = (
                    host.started_pane(nonce)
                    if starter == "stale" and isinstance(nonce, str) and not observed.get("exists")
                    else None
                )
                try:
                    if orphan is not None and inp.apply:
                        host.abandon_start(str(nonce))
                        action.update(closed_pane=orphan)
                    elif orphan is not None:
                        action.update(would_close_pane=orphan)
                    if inp.apply:
                        result = self.core.fire_on(
                            machine, lease.id, "reconcile", inp.credential, {}, observations, host=host
                        )
                    else:
                        plan = self.core.engine.plan(
                            spec, self.core.request(lease.id, "reconcile", inp.credential, {}, observations)
                        )
                except RefusedError as exc:
                    # The machine's guards judged the evidence insufficient: report why, touch nothing.
                    action.update(action="skip", code=exc.code, why=exc.message)
                else:
                    if inp.apply:
                        action.update(action="reconciled", to=result.instance.state)
                        if machine == "writer" and spec.states[result.instance.state].terminal:
                            from runner.service.writers import remove_scope_hook

                            remove_scope_hook(result.instance)
                        if observed.get("exists"):
                            action.update(closed_pane=observed.get("pane_id"))
                    else:
                        action.update(action="would_reconcile", to=plan.then, why=" ".join(plan.description.split()))
                        if plan.effects:
                            action.update(via=plan.dest, effects=plan.effects)
                        if observed.get("exists"):
                            action.update(would_close_pane=observed.get("pane_id"))
            actions.append(action)
        for missing in inp.leases:
            if missing not in seen:
                actions.append(
                    {
                        "name": None,
                        "lease": missing,
                        "action": "skip",
                        "why": f"not a {machine} lease of controller {inp.controller_id!r} that reconcile applies to",
                    }
                )
        return Housekeeping(inp.apply, actions)

    def reviewer_reconcile(self, inp: ControllerInput) -> Housekeeping:
        """:meth:`reconcile` for reviewer leases."""
        return self.reconcile(inp, "reviewer")

    def pane_reconcile(self, inp: ControllerInput) -> Housekeeping:
        """:meth:`reconcile` for operator closes whose outcome was never recorded."""
        return self.reconcile(inp, "pane")

    def reviewer_cleanup(self, inp: ControllerInput) -> Housekeeping:
        """Close this controller's reviewers that are identity-matched, idle or done, with no open receipt.

        A dry run (the default) only reports what it would close.
        """
        self.core.check_fence(inp.credential)
        actions: list[dict[str, Any]] = []
        open_targets = {r.data.get("target") for r in self.core.store.find("receipt", OPEN_RECEIPT_STATES)}
        for lease in self.core.store.find("reviewer", ["active"]):
            if lease.data.get("controller_id") != inp.controller_id:
                continue
            host = self.core.host(lease.data["host"])
            observed = self.core.observe(host, lease.data.get("pane_id"))
            action = {
                "name": lease.data.get("name"),
                "lease": lease.id,
                "status": observed.get("status"),
                "seq": observed.get("seq"),
            }
            if not same_identity(observed, lease.data):
                action.update(action="skip", why="identity does not match (reconcile or inspect it)")
            elif observed.get("status") not in PROMPTABLE:
                action.update(action="skip", why=f"the agent is {observed.get('status')}")
            elif lease.id in open_targets:
                action.update(action="skip", why="a receipt for it is unresolved")
            elif not inp.apply:
                action.update(action="would_close")
            else:
                try:
                    params = {"expected_state_change_seq": int(observed["seq"])}
                    self.core.close_lease(lease, "close", inp.credential, params, CAPTURE_LINES_DEFAULT)
                    action.update(action="closed")
                except CorralError as exc:
                    action.update(action="failed", code=exc.code, why=exc.message)
            actions.append(action)
        return Housekeeping(inp.apply, actions)

    def pane_close(self, inp: PaneCloseInput) -> AgentLeaseView:
        """Close a pane corral started and no lease holds (a start killed before it recorded the pane).

        Fenced, bound to the identity and cursor the operator saw, and recorded (machine ``pane``).
        Refused: ``pane_leased`` (go through the lease), ``pane_not_corrals``, ``identity_changed``,
        ``cursor_mismatch``, ``agent_not_settled``, ``agent_gone``.
        """
        host = self.core.host(inp.host)
        result = self.core.fire_on(
            "pane",
            f"pane/{uuid.uuid4()}",
            "close",
            inp.credential,
            {
                "host": inp.host,
                "pane_id": inp.pane_id,
                "name": inp.expected_name,
                "kind": inp.expected_kind,
                "cwd": inp.expected_cwd,
                "expected_state_change_seq": inp.expected_state_change_seq,
                "reason": inp.reason,
            },
            {"agent": self.core.observe(host, inp.pane_id)},
            host=host,
        )
        return self.core.settled(result, "agent_close_failed", "closing the pane")
