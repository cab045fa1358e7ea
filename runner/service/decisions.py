"""Decisions: what waits on a person, each with the operation that settles it.

Read-only but for one verb. :meth:`Decisions.list` (the component is callable: ``service.decisions()``)
gathers three kinds, each under a stable id a surface can put in a URL:

- ``plan:<plan id>:<step id>``: a plan paused on a step that waits on a person, an approval step
  (``waits_on: approval``, its ``prompt``, ``since`` and ``deadline``) or an agent that settled
  blocked (``waits_on: agent_blocked``, its ``target``); once decided (not yet resumed) it waits on a
  runner, not a person, and is no longer listed. Settled by :meth:`Decisions.decide`, which
  calls the very operation ``corral plans decide`` does (:meth:`runner.service.plans.Plans.decide`);
  the plan then continues when it is resumed (the CLI's ``plans decide`` resumes it at once).
- ``agent:<lease instance id>``: a reviewer or writer agent, under a live lease, observed blocked
  now (a question for a person; corral never answers it). Settled by closing (releasing) it with
  ``blocked`` and a reason, or by answering it in its pane.
- ``receipt:<receipt id>``: a receipt left ``reserved`` because its delivery could not be confirmed
  (the relay's outcome was recorded ``ambiguous``: its ``message`` says why), or whose relay never
  recorded an outcome at all and is older than :data:`RESERVED_STALE_SECONDS` (a runner died in the
  hand-over). It blocks its target. Settled by ``abandon`` on fresh evidence that the agent is settled.

Only ``plan`` decisions are decided here; the others are refused with ``decision_not_plan``, whose
details name what to call instead. Blocked agents are observed on their hosts; a host that cannot be
reached leaves its agents out (``corral status`` reports the host).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from runner.agents.abc import AgentError
from runner.context import Instance, parse_time
from runner.errors import InputError, NotFoundError, RefusedError
from runner.guards.agents import LEASE_MACHINES, same_identity
from runner.service.core import Core
from runner.updates.plans import STEP

if TYPE_CHECKING:
    from runner.service.plans import Plans

RESERVED_STALE_SECONDS = 120.0
"""A ``reserved`` receipt with no recorded outcome older than this is taken as left by a relay that
died in the hand-over (a delivery in progress records its outcome well within it)."""

PLAN_WAITS = ("approval", "agent_blocked")
"""What a paused plan's ``waiting_on.kind`` may be for a person to decide it."""


class DecisionNotPlanError(RefusedError):
    """Only a plan's decision is decided through :meth:`Decisions.decide`; an agent or receipt
    decision is settled by its own operation, which ``details["next"]`` names."""

    default_code = "decision_not_plan"


@dataclass(frozen=True)
class DecideInput:
    """A person's decision on a listed decision: ``approve`` (or reject) and why (1-1000 characters);
    ``actor`` names who decided when the surface knows (the HTTP API's caller), else the service's
    actor is recorded."""

    decision_id: str
    approve: bool
    reason: str
    actor: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.decision_id, str) or not self.decision_id or len(self.decision_id) > 400:
            raise InputError("decision_id", "a decision id is 1-400 characters (as decisions list them)")
        if not isinstance(self.approve, bool):
            raise InputError("approve", f"{self.approve!r} is not true or false")


def parse_decision_id(decision_id: str) -> tuple[str, str, str]:
    """``(kind, subject, step)`` of a decision id: ``plan:P:S`` -> ``("plan", P, S)``, ``agent:L`` ->
    ``("agent", L, "")``, ``receipt:R`` -> ``("receipt", R, "")``.

    Raises:
        NotFoundError: ``decision_unknown`` for an id of no known kind (or a plan id without a step).
    """
    kind, _, rest = decision_id.partition(":")
    if kind == "plan":
        plan_id, _, step_id = rest.partition(":")
        if plan_id and step_id:
            return kind, plan_id, step_id
    elif kind in ("agent", "receipt") and rest:
        return kind, rest, ""
    raise NotFoundError(
        f"no decision {decision_id!r}: decision ids are plan:PLAN:STEP, agent:LEASE or receipt:RECEIPT "
        "(as the decisions listing gives them)",
        code="decision_unknown",
        decision=decision_id,
    )


class Decisions:
    """What waits on a person, over one core; ``plans`` gives the plans component (built on first use)."""

    def __init__(self, core: Core, plans: Callable[[], Plans]) -> None:
        self.core = core
        self._plans = plans

    def __call__(self) -> list[dict[str, Any]]:
        """``service.decisions()``: :meth:`list`."""
        return self.list()

    # --- decide ------------------------------------------------------------------------------------

    def decide(self, inp: DecideInput) -> dict[str, Any]:
        """Decide a plan decision: the operation ``corral plans decide`` calls, recorded as the plan's
        ``decide`` event with the deciding actor. Returns what was decided and the plan's state; resume
        the plan next (:meth:`runner.service.plans.Plans.resume`) to continue it.

        Raises:
            NotFoundError: ``decision_unknown`` (an id of no known kind), ``plan_unknown``.
            DecisionNotPlanError: ``decision_not_plan`` for an agent or receipt decision.
            RefusedError: ``plan_not_waiting`` (decided already, or not paused on that step),
                ``approval_timeout`` (the approval's deadline passed: resume the plan).
            InputError: the reason or actor.
        """
        from runner.service.inputs.plans import PlanDecideInput

        kind, subject, step_id = parse_decision_id(inp.decision_id)
        if kind != "plan":
            raise DecisionNotPlanError(
                f"decision {inp.decision_id!r} is about {'an agent' if kind == 'agent' else 'a receipt'}, not a "
                f"plan: {self._settle_hint(kind)}",
                decision=inp.decision_id,
                kind=kind,
                next=self._settle_hint(kind),
            )
        plan = self._plans().decide(PlanDecideInput(subject, step_id, inp.approve, inp.reason, inp.actor))
        record = (plan.data.get("steps") or {}).get(step_id) or {}
        decision = dict(record.get("decision") or {})
        return {
            "id": inp.decision_id,
            "kind": "plan",
            "plan": subject,
            "step": step_id,
            "approve": inp.approve,
            "reason": decision.get("reason", inp.reason),
            "actor": decision.get("actor"),
            "at": decision.get("at"),
            "plan_state": plan.state,
            "next": f"resume the plan (corral plans resume {subject}); `corral plans decide` does so itself",
        }

    @staticmethod
    def _settle_hint(kind: str) -> str:
        if kind == "agent":
            return (
                "answer it in its pane, or close it as blocked with a reason (corral reviewer close / writer "
                "release NAME --expect-seq S --blocked --reason TEXT)"
            )
        return "observe its agent, then abandon the receipt on fresh evidence (corral abandon --receipt TOKEN)"

    # --- list --------------------------------------------------------------------------------------

    def _plan_decisions(self, now: datetime) -> list[dict[str, Any]]:
        from runner.service.plan_run import approval_expired

        out: list[dict[str, Any]] = []
        for plan in self.core.store.find("plan", ["paused"]):
            waiting = plan.data.get("waiting_on")
            if not isinstance(waiting, Mapping) or waiting.get("kind") not in PLAN_WAITS or not waiting.get("step"):
                continue
            plan_id, step_id = str(plan.data.get("plan_id")), str(waiting["step"])
            if self._decided(plan, step_id):
                continue  # decided, not yet resumed: it waits on a runner now, not on a person
            expired = approval_expired(waiting, now)
            entry: dict[str, Any] = {
                "id": f"plan:{plan_id}:{step_id}",
                "kind": "plan",
                "waits_on": waiting["kind"],
                "plan": plan_id,
                "step": step_id,
                "why": plan.data.get("paused_reason"),
                "since": waiting.get("since"),
            }
            if waiting["kind"] == "approval":
                entry.update(prompt=waiting.get("prompt"), deadline=waiting.get("deadline"), expired=expired)
            else:
                entry["target"] = waiting.get("target")
            cli = f"corral plans decide {plan_id} --step {step_id} --approve|--reject --reason TEXT"
            entry["settle"] = (
                {"operation": "resume", "decide": False, "cli": f"corral plans resume {plan_id}",
                 "why": "the approval timed out: resuming fails the step with approval_timeout"}
                if expired
                else {"operation": "decide", "decide": True, "approve": [True, False], "cli": cli}
            )  # fmt: skip
            out.append(entry)
        return out

    def _decided(self, plan: Instance, step_id: str) -> bool:
        """Whether the step's record already holds a person's decision (read from its part alone)."""
        with self.core.store.read() as reader:
            record = reader.part(plan.id, STEP + step_id)
        if record is None:  # a plan written before steps were parts keeps them in its data
            record = (plan.data.get("steps") or {}).get(step_id)
        return isinstance(record, Mapping) and isinstance(record.get("decision"), Mapping)

    def _agent_decisions(self) -> list[dict[str, Any]]:
        if not self.core.has_hosts:
            return []
        out: list[dict[str, Any]] = []
        for machine in LEASE_MACHINES:
            for lease in self.core.store.find(machine, ["active"]):
                try:
                    observed = self.core.observe(self.core.host(str(lease.data.get("host"))), lease.data.get("pane_id"))
                except AgentError:
                    continue  # its host cannot be reached now: corral status says so
                if observed.get("status") != "blocked" or not same_identity(observed, lease.data):
                    continue
                name, controller = lease.data.get("name"), lease.data.get("controller_id")
                verb = "reviewer close" if machine == "reviewer" else "writer release"
                out.append(
                    {
                        "id": f"agent:{lease.id}",
                        "kind": "agent",
                        "machine": machine,
                        "lease": lease.id,
                        "name": name,
                        "controller": controller,
                        "pane_id": lease.data.get("pane_id"),
                        "host": lease.data.get("host"),
                        "seq": observed.get("seq"),
                        "since": None,  # a host reports no time for a status, only its cursor
                        "settle": {
                            "operation": "close_blocked" if machine == "reviewer" else "release_blocked",
                            "decide": False,
                            "cli": f"corral {verb} {name} --controller {controller} --expect-seq "
                            f"{observed.get('seq')} --blocked --reason TEXT (abandon its open receipt first), "
                            "or answer it in its pane",
                        },
                    }
                )
        return out

    def _receipt_decisions(self, now: datetime) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for receipt in self.core.store.find("receipt", ["reserved"]):
            delivery = ambiguity(receipt, now)
            if delivery is None:
                continue
            data = receipt.data
            out.append(
                {
                    "id": f"receipt:{receipt.id.partition('/')[2]}",
                    "kind": "receipt",
                    "receipt": data.get("token"),
                    "state": receipt.state,
                    "delivery": delivery,
                    "why": data.get("message"),
                    "target": data.get("name"),
                    "controller": data.get("controller_id"),
                    "pane_id": data.get("pane_id"),
                    "since": data.get("reserved_at"),
                    "settle": {
                        "operation": "abandon",
                        "decide": False,
                        "cli": f"observe the agent (corral agent get {data.get('pane_id')}), then corral abandon "
                        f"--controller {data.get('controller_id')} --receipt {data.get('token')} on fresh evidence "
                        "that it is settled",
                    },
                }
            )
        return out

    def list(self) -> list[dict[str, Any]]:
        """Every decision waiting on a person, oldest first (``since``), each with ``id``, ``kind``
        (``plan``, ``agent``, ``receipt``), what it is about, and ``settle``: the operation that settles
        it (``operation``, the ``cli`` command, and for plans whether ``decide`` takes it now). Defined
        last: in the class body the name hides the builtin."""
        now = self.core.now()
        found = [*self._plan_decisions(now), *self._agent_decisions(), *self._receipt_decisions(now)]
        return sorted(found, key=lambda d: (str(d.get("since") or ""), d["id"]))


def ambiguity(receipt: Instance, now: datetime) -> str | None:
    """Why a ``reserved`` receipt waits on a person: ``ambiguous`` (its relay recorded an outcome it
    could not confirm, with a ``message``), ``unrecorded`` (no outcome recorded and reserved longer ago
    than :data:`RESERVED_STALE_SECONDS`); None for a relay that may still be handing over."""
    if receipt.state != "reserved":
        return None
    if receipt.data.get("message"):
        return "ambiguous"
    reserved = receipt.data.get("reserved_at")
    if isinstance(reserved, str) and (now - parse_time(reserved)).total_seconds() > RESERVED_STALE_SECONDS:
        return "unrecorded"
    return None
