"""Plans as a service component: submit once (idempotent by plan id), run step by step, resume after
any crash; retry (redrive), cancel, decide, show and list. One typed ``Plan*Input`` per operation.

The plan is an instance of ``machines/plan.yaml``; every step's start and outcome is recorded by a
``step`` transition (the outcome of one step with the start of the next: one commit per step), so the
store always knows which step was in flight. The step records are parts of the plan instance, one
per step (see :mod:`runner.updates.plans`): a step writes its own record only. A runner that finds a step
``running`` (its predecessor died) asks the step's operation to resolve it from the instances the
step creates under its deterministic key (see :mod:`runner.service.steps`): done, not started, or
a decision for a person (the plan pauses). One runner at a time: the plan records its runner (pid,
host, boot id, start time) with a lease (``expires_at`` by the store's clock, renewed every third of
:data:`PLAN_RUNNER_TTL` while steps run); another runner, on any machine, may take over once that lease
expired, or at once when the recorded one is gone from this machine (its process is not running).

Step semantics: ``when`` (skip unless the comparison holds), ``retry`` (safe operations only; full
jitter: a random wait below ``interval * backoff_rate ** (attempt - 1)``), ``catch`` (error codes,
or ``*``, to a later step), ``finally`` (runs even after a failure; other steps are then skipped).

The component is handed the step operations (a registry: :data:`runner.plans.ops.OPERATIONS` holds
the built-ins and finds the plugins), which reach the agents only through the service's public
methods; the store and the engine are used here for the plan instance alone.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from runner import faults, lockstatus
from runner.context import Instance, parse_time
from runner.definitions.model import MachineSpec
from runner.definitions.plans import check_plan_document
from runner.definitions.recipes import Recipe, RecipeLibrary, Step, validate_inputs
from runner.definitions.references import compare, resolve
from runner.engine import Request
from runner.errors import (
    ConflictError,
    CorralError,
    InputError,
    NotFoundError,
    RefusedError,
    TransitionNotAllowedError,
)
from runner.fence import Credential
from runner.service.steps import (
    NOT_CREATED,
    NotCreatedByPlan,
    OpContext,
    Outputs,
    Resume,
    StepOperation,
    WaitsOnPerson,
    attempt_keys,
)
from runner.service.views.pages import Page
from runner.updates.plans import PRIVATE, STEP

if TYPE_CHECKING:
    from runner.service import Service

RETRYABLE_CATEGORIES = ("conflict", "internal")
# Steps that close or release what an earlier step started: with nothing started, they are skipped.
CLEANUP_OPERATIONS = frozenset({"reviewer.close", "writer.release"})

Progress = Callable[[dict[str, Any]], None]

PLAN_RUNNER_TTL = 60.0
"""Seconds a plan runner's lease lasts unless renewed (issue 16); it renews every third of it. A runner
on another machine takes a plan whose runner stopped renewing once this much has passed."""

logger = logging.getLogger(__name__)


def plan_instance_id(plan_id: str) -> str:
    return f"plan/{plan_id}"


def plan_summary(plan: Instance) -> dict[str, Any]:
    """A plan as every surface shows it (``corral plans show --json``, the MCP and HTTP plan tools)."""
    data = plan.data
    return {
        "plan": data.get("plan_id"),
        "recipe": data.get("recipe"),
        "state": plan.state,
        "controller": data.get("controller_id"),
        "paused_reason": data.get("paused_reason"),
        "waiting_on": data.get("waiting_on"),
        "failure": data.get("failure"),
        "steps": data.get("steps") or {},
    }


def runner_lease(plan: Instance, now: datetime) -> dict[str, Any]:
    """The runner's lease on a plan as ``plans show`` reports it (issue 24): ``status`` ``active`` (held:
    its lease has not expired by the store's clock, and its process is not known gone), ``expired``
    (it stopped renewing, paused or ended, or its process is gone from this machine: any runner may
    take the plan) or ``absent`` (no runner ever took it); its ``host``, ``pid`` and ``expires_at``.
    The record holds no credential, and nothing else of it is shown."""
    recorded = plan.data.get("runner")
    if not isinstance(recorded, Mapping) or not recorded:
        return {"status": "absent", "host": None, "pid": None, "expires_at": None}
    expires = recorded.get("expires_at")
    expired = isinstance(expires, str) and parse_time(expires) <= now
    gone = lockstatus.status(recorded) == "stale"
    return {
        "status": "expired" if expired or gone else "active",
        "host": recorded.get("host"),
        "pid": recorded.get("pid"),
        "expires_at": expires if isinstance(expires, str) else None,
    }


def plan_view(header: Instance, parts: Mapping[str, Mapping[str, Any]]) -> Instance:
    """The plan as readers know it: its data with ``steps`` and ``private`` filled in from its parts.

    The store keeps a plan's step records as parts (``steps/STEP``, ``private/STEP``) beside a small
    header; a plan written before that layout has them in its data, and a part (written later)
    wins over such an entry."""
    steps = dict(header.data.get("steps") or {})
    private = dict(header.data.get("private") or {})
    for key, value in parts.items():
        if key.startswith(STEP):
            steps[key[len(STEP) :]] = dict(value)
        elif key.startswith(PRIVATE):
            private[key[len(PRIVATE) :]] = dict(value)
    data = {**header.data, "steps": steps}
    if private:
        data["private"] = private
    else:
        data.pop("private", None)
    return replace(header, data=data)


class CredentialKeeper(Protocol):
    """Where a plan's controller credential lives between steps (the CLI: the state home's files)."""

    def load(self, controller_id: str) -> Credential | None: ...

    def save(self, credential: Credential) -> None: ...

    def remove(self, controller_id: str, held: Credential | None = None) -> None:
        """Forget the credential; with ``held``, only if what is kept is still that grant."""
        ...


class OperationLookup(Protocol):
    """The step operations a component runs (e.g. :class:`runner.service.steps.OperationRegistry`)."""

    def get(self, name: str) -> StepOperation | None: ...


class PlanConflictError(ConflictError):
    """A plan id was submitted again with different content. Use a new plan id for a new plan."""

    default_code = "plan_conflict"


# --- inputs -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlanSubmitInput:
    """A plan document (``plan``, ``recipe``, ``controller``, ``inputs``) to record, or find if recorded.

    ``parent`` names the plan and step that call this one (``recipe.call``)."""

    document: Mapping[str, Any]
    parent: str | None = None


@dataclass(frozen=True)
class PlanRunInput:
    """Run (or continue) a submitted plan until it ends or pauses."""

    plan_id: str


@dataclass(frozen=True)
class PlanResumeInput:
    """Continue a paused or interrupted plan from its last recorded step (as run does)."""

    plan_id: str


@dataclass(frozen=True)
class PlanRetryInput:
    """Redrive a failed plan from its failed step."""

    plan_id: str


@dataclass(frozen=True)
class PlanCancelInput:
    """Cancel a plan: no further step runs."""

    plan_id: str


@dataclass(frozen=True)
class PlanDecideInput:
    """A person's decision on a step that waits on one: ``approve`` or reject, and why (1-1000 characters).

    The reason is checked after the plan is found waiting (``plan_not_waiting`` comes first). ``actor``
    names who decided, when a surface knows better than the service's own actor (the HTTP API's
    authenticated caller); it is the decide event's actor and the decision's ``actor``."""

    plan_id: str
    step_id: str
    approve: bool
    reason: str
    actor: str | None = None


@dataclass(frozen=True)
class PlanShowInput:
    """One plan, with what its running steps wait on and the agent output its steps collected."""

    plan_id: str


@dataclass(frozen=True)
class PlanListInput:
    """Plans not finished (succeeded or cancelled) unless ``include_ended``; ``after`` (a plan id: the
    previous page's ``next_after``) and ``limit`` page through them in plan id order."""

    include_ended: bool = False
    after: str | None = None
    limit: int | None = None

    def __post_init__(self) -> None:
        from runner.service.inputs.base import check_page

        check_page(self.after, self.limit)


# --- results ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckedPlan:
    """A plan document checked: the document, its recipe, its inputs with defaults filled in."""

    document: dict[str, Any]
    recipe: Recipe
    inputs: dict[str, Any]


@dataclass(frozen=True)
class Submitted:
    plan: Instance
    created: bool


@dataclass(frozen=True)
class PlanDetail:
    """A plan as ``plans show`` gives it: ``live`` (each open receipt of a running or waiting step: its
    agent's status, the time left), ``collected`` (the agent output text its steps kept) and
    ``runner`` (the runner's lease: :func:`runner_lease`)."""

    plan: Instance
    live: list[dict[str, Any]]
    collected: dict[str, dict[str, Any]] = field(repr=False)
    spend: dict[str, Any] = field(default_factory=dict)
    """What the agents the plan leased spent (:meth:`Plans.spend`)."""
    runner: dict[str, Any] = field(
        default_factory=lambda: {"status": "absent", "host": None, "pid": None, "expires_at": None}
    )


class Plans:
    """Plans over one service: built with the service, the recipes, the credential keeper, the step
    operations and (for sandboxed validation) a scratch directory."""

    def __init__(
        self,
        service: Service,
        recipes: RecipeLibrary,
        credentials: CredentialKeeper,
        operations: OperationLookup,
        scratch: Path | None = None,
        runner_ttl: float = PLAN_RUNNER_TTL,
        paths: Callable[[dict[str, Any], tuple[str, ...]], None] | None = None,
    ) -> None:
        self.service = service
        # Issue 24: a surface that confines paths (corral serve --workdir-root) checks every step's path
        # arguments (the catalogue's path=True), at submission and before each step runs; it raises to refuse.
        self.paths = paths
        self.recipes = recipes
        self.credentials = credentials
        self.operations = operations
        self.scratch = scratch
        self.runner_ttl = runner_ttl  # issue 16: the runner's lease on a plan, renewed every third of it

    @cached_property
    def me(self) -> dict[str, Any]:
        """This process, as a plan records its runner (read on first use)."""
        return lockstatus.current()

    @property
    def spec(self) -> MachineSpec:
        """``machines/plan.yaml`` (the library caches it)."""
        return self.service.library.builtin("plan")

    # --- reads --------------------------------------------------------------------------------------

    def plan(self, plan_id: str) -> Instance:
        """The plan instance.

        Raises:
            NotFoundError: ``plan_unknown``.
        """
        found = self._read(plan_id)
        if found is None:
            raise NotFoundError(f"no plan {plan_id!r}", code="plan_unknown", plan=plan_id)
        return found

    def _viewed(self, instance: Instance) -> Instance:
        """A plan instance just written (a header), with its step records read back."""
        with self.service.store.read() as reader:
            return plan_view(instance, reader.parts(instance.id))

    def _read(self, plan_id: str) -> Instance | None:
        """The plan with its step records (:func:`plan_view`), from one snapshot; None if never submitted."""
        instance_id = plan_instance_id(plan_id)
        with self.service.store.read() as reader:
            header = reader.get(instance_id)
            return None if header is None else plan_view(header, reader.parts(instance_id))

    def show(self, inp: PlanShowInput) -> PlanDetail:
        """The plan, what its running or waiting steps wait on, and the agent output its steps collected
        (kept out of the event log: this is the one reply that hands it out)."""
        plan = self.plan(inp.plan_id)
        collected = {
            step: dict(private)
            for step, private in (plan.data.get("private") or {}).items()
            if isinstance(private, dict)
        }
        return PlanDetail(plan, self._live(plan), collected, self.spend(plan), runner_lease(plan, self.service.now()))

    def spend(self, plan: Instance) -> dict[str, Any]:
        """What the agents this plan leased spent, against each lease's budget.

        ``leases``: each reviewer or writer lease a step of this plan started (by the id its start step
        recorded, and only if the plan created it), with its ``session_id``, ``spend`` (tokens, cost,
        turns, runs: summed over the receipts this plan created for it, so an ended lease still
        counts), ``budget`` (the limits its start set), ``left`` and ``exhausted``; ``total``: the
        sum over them; ``budget``: the plan's own limits (``usd``, ``tokens``, ``turns``; its recipe's by
        default; empty when it has none) and ``reached``: the first of them ``total`` has reached, as
        ``{limit, budget, spent}``, or None (the plan's next prompt is refused ``budget_exhausted``)."""
        from runner.guards.agents import budget_spent
        from runner.service.inventory import budget_left, lease_budget

        plan_id = str(plan.data.get("plan_id"))
        keys: set[str] = set()
        for step_id, record in (plan.data.get("steps") or {}).items():
            for attempt in range(1, max(int(record.get("attempt") or 1), 1) + 1):
                keys |= attempt_keys(plan_id, step_id, attempt)
        started = [
            str(lease_id)
            for record in (plan.data.get("steps") or {}).values()
            if isinstance(lease_id := (record.get("outputs") or {}).get("lease"), str)
            and lease_id.partition("/")[0] in ("reviewer", "writer")
            and lease_id.partition("/")[2] in keys
        ]
        with self.service.store.read() as reader:
            leases = [found for lease_id in dict.fromkeys(started) if (found := reader.get(lease_id)) is not None]
            receipts = [found for key in sorted(keys) if (found := reader.get(f"receipt/{key}")) is not None]
        total = {"tokens": 0, "cost_usd": 0.0, "turns": 0, "runs": 0}
        rows = []
        for lease in leases:
            spent = {"tokens": 0, "cost_usd": 0.0, "turns": 0, "runs": 0}
            session = None
            for receipt in receipts:
                if receipt.data.get("target") != lease.id or "usage" not in receipt.data:
                    continue  # another agent's, or no driven run recorded on it (yet)
                usage = receipt.data.get("usage") or {}
                spent["tokens"] += sum(v for v in usage.values() if isinstance(v, int))
                spent["cost_usd"] = round(spent["cost_usd"] + float(receipt.data.get("cost_usd") or 0.0), 6)
                spent["turns"] += int(receipt.data.get("turns") or 0)
                spent["runs"] += 1
                session = receipt.data.get("session_id") or session
            total = {k: round(v + spent[k], 6) if k == "cost_usd" else v + spent[k] for k, v in total.items()}
            budget = lease_budget(lease.data)
            rows.append(
                {
                    "lease": lease.id,
                    "machine": lease.machine,
                    "name": lease.data.get("name"),
                    "state": lease.state,
                    "session_id": session,
                    "spend": spent,
                    "budget": budget,
                    "left": budget_left(budget, spent),
                    "exhausted": budget_spent(budget, spent),
                }
            )
        budget = dict(plan.data["budget"]) if isinstance(plan.data.get("budget"), dict) else {}
        reached = None
        for limit, key in (("usd", "cost_usd"), ("tokens", "tokens"), ("turns", "turns")):
            if isinstance(budget.get(limit), (int, float)) and total[key] >= budget[limit]:
                reached = {"limit": limit, "budget": budget[limit], "spent": total[key]}
                break
        return {"leases": rows, "total": total, "budget": budget, "reached": reached}

    def _live(self, plan: Instance) -> list[dict[str, Any]]:
        """What a running or paused plan's steps wait on: each open receipt, its agent, the time left."""
        out: list[dict[str, Any]] = []
        now = self.service.now()
        plan_id = str(plan.data.get("plan_id"))
        for step_id, record in (plan.data.get("steps") or {}).items():
            if record.get("state") not in ("running", "waiting"):
                continue
            keys = attempt_keys(plan_id, step_id, int(record.get("attempt") or 1))
            for receipt in self.service.store.find("receipt", ("reserved", "pending")):
                if receipt.id.partition("/")[2] not in keys:
                    continue
                entry: dict[str, Any] = {
                    "step": step_id,
                    "receipt": receipt.data.get("token"),
                    "receipt_state": receipt.state,
                    "target": receipt.data.get("name"),
                }
                try:
                    host = self.service.host(str(receipt.data["host"]))
                    entry["agent_status"] = host.get(str(receipt.data["pane_id"])).status
                except CorralError:
                    entry["agent_status"] = "gone"
                started = record.get("at")
                timeout = record.get("timeout")
                if started and isinstance(timeout, (int, float)):
                    entry["seconds_left"] = max(0.0, timeout - (now - parse_time(started)).total_seconds())
                out.append(entry)
        return out

    # --- submission ---------------------------------------------------------------------------------

    def check(self, inp: PlanSubmitInput) -> CheckedPlan:
        """The plan document, its recipe and its inputs (defaults filled in), all checked; writes nothing.

        Raises:
            InputError: ``plan_invalid`` (the document), ``inputs_invalid`` (an input, or an unknown one).
            NotFoundError: ``recipe_unknown``.
        """
        checked = check_plan_document(dict(inp.document))
        recipe = self.recipes.get(checked["recipe"])
        return CheckedPlan(checked, recipe, validate_inputs(recipe, dict(checked.get("inputs") or {})))

    def contain(self, do: str, args: Mapping[str, Any]) -> None:
        """Check the path arguments of one step (operation ``do``, ``args`` resolved) with :attr:`paths`.

        Raises:
            InputError: what :attr:`paths` raises (``path_outside_root``, ``path_traversal``).
        """
        if self.paths is None:
            return
        implementation = self.operations.get(do)
        if implementation is None:
            return
        names = tuple(p.name for p in implementation.spec.params if p.path)
        if names:
            self.paths(dict(args), names)

    def _contain_plan(self, recipe: Recipe, inputs: Mapping[str, Any]) -> None:
        """Every step's path arguments that the plan's inputs decide (those naming an earlier step's
        outputs are checked when the step runs)."""
        if self.paths is None:
            return
        for step in recipe.steps:
            known: dict[str, Any] = {}
            for name, value in step.args.items():
                try:
                    known[name] = resolve(value, inputs, {})
                except CorralError:
                    continue  # an earlier step's output: checked before this step runs
            self.contain(step.do, known)

    def submit(self, inp: PlanSubmitInput) -> Submitted:
        """Record the plan (or find it): the same id with the same content is the same plan.

        Raises:
            PlanConflictError: ``plan_conflict``, the id is taken by other content.
            InputError: a step's path outside the surface's confinement (:attr:`paths`); nothing written.
        """
        checked = self.check(inp)
        doc, recipe, inputs = checked.document, checked.recipe, checked.inputs
        self._contain_plan(recipe, inputs)
        content = {
            "plan": doc["plan"],
            "recipe": recipe.name,
            "recipe_sha256": recipe.sha256,
            "controller": doc["controller"],
            "inputs": inputs,
        }
        budget = {**recipe.budget, **dict(doc.get("budget") or {})}
        if budget:  # only when set: a plan without one keeps the digest it always had
            content["budget"] = budget
        content_sha256 = hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()
        existing = self._read(doc["plan"])
        if existing is not None:
            if existing.data.get("content_sha256") != content_sha256:
                raise PlanConflictError(
                    f"plan {doc['plan']!r} exists with other content (recipe, inputs or controller differ); "
                    "submit it under a new plan id",
                    plan=doc["plan"],
                    state=existing.state,
                )
            return Submitted(existing, False)
        result = self.service.engine.fire(
            self.spec,
            Request(
                plan_instance_id(doc["plan"]),
                "submit",
                params={
                    "plan_id": doc["plan"],
                    "recipe": recipe.name,
                    "recipe_version": recipe.version,
                    "recipe_sha256": recipe.sha256,
                    "content_sha256": content_sha256,
                    "controller_id": doc["controller"],
                    "parent": inp.parent,
                    "budget": budget or None,
                },
                secrets={"inputs": json.dumps(inputs)},
                actor=self.service.actor,
            ),
        )
        return Submitted(plan_view(result.instance, {}), True)  # a new plan: no step records yet

    def _fire(
        self,
        plan_id: str,
        trigger: str,
        params: Mapping[str, Any] | None = None,
        secrets: Mapping[str, str] | None = None,
        observations: Mapping[str, Any] | None = None,
        actor: str | None = None,
        expected_version: int | None = None,
    ) -> Instance:
        result = self.service.engine.fire(
            self.spec,
            Request(
                plan_instance_id(plan_id),
                trigger,
                params={"runner": self.me, "runner_ttl": self.runner_ttl, **(params or {})},
                secrets=secrets or {},
                observations=observations or {},
                actor=actor or self.service.actor,
                expected_version=expected_version,
            ),
        )
        return result.instance

    # --- running ------------------------------------------------------------------------------------

    async def run(self, inp: PlanRunInput, progress: Progress | None = None) -> Instance:
        """Run (or continue) the plan until it ends or pauses; returns the plan as it then stands.

        ``progress`` hears each plan and step event as it lands (``plan_started``, ``step_succeeded`` …)."""
        return await _Run(self, progress).run(inp.plan_id)

    async def resume(self, inp: PlanResumeInput, progress: Progress | None = None) -> Instance:
        """Continue a paused or interrupted plan from its last recorded step (a step found in flight is
        resolved by its operation first): the same as :meth:`run`."""
        return await _Run(self, progress).run(inp.plan_id)

    def retry(self, inp: PlanRetryInput) -> Instance:
        """Redrive a failed plan from its failed step (as Step Functions' redrive does): the steps
        before it keep their records and outputs and do not run again; the failed step and every later
        one run afresh at their next attempt. Call :meth:`resume` next. Refused (``plan_not_failed``) for
        a plan in any other state; ``recipe_changed`` if its recipe changed since submission."""
        plan_id = inp.plan_id
        plan = self.plan(plan_id)
        if plan.state != "failed":
            raise RefusedError(
                f"plan {plan_id!r} is {plan.state}, not failed: only a failed plan is retried"
                + (" (continue it with `corral plans resume`)" if plan.state in ("paused", "running") else ""),
                code="plan_not_failed",
                plan=plan_id,
                state=plan.state,
            )
        recipe = self.recipe_of(plan)
        ids = [s.id for s in recipe.steps]
        failed_step = str((plan.data.get("failure") or {}).get("step") or "")
        records = dict(plan.data.get("steps") or {})
        if failed_step not in ids:  # no recorded failed step: from the first step that did not succeed
            failed_step = next((i for i in ids if (records.get(i) or {}).get("state") != "succeeded"), ids[-1])
        reset = ids[ids.index(failed_step) :]
        redriven = self._fire(
            plan_id,
            "retry",
            {"reset": reset, "from_step": failed_step},
            observations={"runner_status": lockstatus.status(plan.data.get("runner"))},
        )
        return self._viewed(redriven)

    def cancel(self, inp: PlanCancelInput) -> Instance:
        """Cancel the plan: no further step runs (a step in flight finishes; its runner then stops)."""
        self.plan(inp.plan_id)
        return self._viewed(self._fire(inp.plan_id, "cancel"))

    def decide(self, inp: PlanDecideInput) -> Instance:
        """A person's decision on a step that waits on one (a blocked agent, an approval step): recorded
        on the plan as an event with the deciding actor (``inp.actor``, else the service's); call
        :meth:`resume` next to continue. Refused (``plan_not_waiting``) unless the plan is paused with
        that step waiting and not yet decided; an approval whose deadline passed is refused
        (``approval_timeout``): resume the plan and the step fails with that code. Two deciders racing:
        one decides, the other gets ``version_conflict`` (the plan is compared and set at the version read)."""
        plan_id, step_id, reason = inp.plan_id, inp.step_id, inp.reason
        plan = self.plan(plan_id)
        record = (plan.data.get("steps") or {}).get(step_id)
        if plan.state != "paused" or not isinstance(record, Mapping) or record.get("state") != "waiting":
            raise RefusedError(
                f"plan {plan_id!r} has no step {step_id!r} waiting on a decision (it is {plan.state})",
                code="plan_not_waiting",
                plan=plan_id,
                step=step_id,
                state=plan.state,
            )
        if isinstance(record.get("decision"), Mapping):
            raise RefusedError(
                f"plan {plan_id!r}: step {step_id!r} was decided already (by {record['decision'].get('actor')}); "
                f"`corral plans resume {plan_id}` carries the decision out",
                code="plan_not_waiting",
                plan=plan_id,
                step=step_id,
                state=plan.state,
                decision=dict(record["decision"]),
            )
        if approval_expired(record.get("waiting_on"), self.service.now()):
            raise RefusedError(
                f"plan {plan_id!r}: the approval of step {step_id!r} timed out at "
                f"{record['waiting_on'].get('deadline')}; `corral plans resume {plan_id}` fails it with "
                "approval_timeout (a catch may take it)",
                code="approval_timeout",
                plan=plan_id,
                step=step_id,
                deadline=record["waiting_on"].get("deadline"),
            )
        if not reason or not reason.strip() or len(reason) > 1000:
            raise InputError("reason", "a decision's reason is 1-1000 characters of text")
        if inp.actor is not None and (not inp.actor.strip() or len(inp.actor) > 200 or not inp.actor.isprintable()):
            raise InputError("actor", "a deciding actor is 1-200 printable characters")
        return self._viewed(
            self._fire(
                plan_id,
                "decide",
                {"step_id": step_id, "approve": bool(inp.approve), "reason": reason},
                actor=inp.actor,
                # Invariant: one decision per waiting step. The plan as read above: a decision (or a
                # resume) committed meanwhile makes this one a version_conflict, never an overwrite.
                expected_version=plan.version,
            )
        )

    def recipe_of(self, plan: Instance) -> Recipe:
        """The plan's recipe, refused (``recipe_changed``) if it is not the one the plan was submitted with."""
        recipe = self.recipes.get(str(plan.data["recipe"]))
        if recipe.sha256 != plan.data.get("recipe_sha256"):
            raise ConflictError(
                f"recipe {recipe.name!r} changed since plan {plan.data.get('plan_id')!r} was submitted; finish it "
                "with the old recipe or submit a new plan",
                code="recipe_changed",
                plan=plan.data.get("plan_id"),
            )
        return recipe

    def list(self, inp: PlanListInput) -> Page[Instance]:
        """Plans with their step records, a page of them if asked (defined last: in the class body the
        name hides the builtin). A plan's records are read after its header: a listing, not a snapshot."""
        spec = self.service.library.builtin("plan")
        states = None if inp.include_ended else [n for n, st in spec.states.items() if not st.terminal]
        after = None if inp.after is None else plan_instance_id(inp.after)
        found, more = self.service.core.page("plan", states, after=after, limit=inp.limit)
        with self.service.store.read() as reader:
            plans = [plan_view(header, reader.parts(header.id)) for header in found]
        return Page(plans, str(found[-1].data.get("plan_id")) if more else None)


class _Run:
    """One runner of one plan: the step loop. A nested plan (``recipe.call``) gets its own.

    Invariant: an operation runs only after its step's ``running`` record is committed, and every
    outcome is committed with the next write, which comes before the next operation runs: the outcome
    of one step and the start of the next are one ``step`` transition (one commit per step), the last
    outcome rides on ``finish``, ``fail`` or ``pause``. A runner killed between an operation and that
    commit leaves the step ``running``, which its successor resolves through the operation's
    ``resume``, as after a kill during the operation. The loop keeps the records in memory (read once
    when the run starts): no step re-reads or re-encodes the others."""

    def __init__(self, plans: Plans, progress: Progress | None) -> None:
        self.plans = plans
        self.progress = progress
        self.plan_id = ""
        self.records: dict[str, dict[str, Any]] = {}
        self.private: dict[str, dict[str, Any]] = {}
        self.outputs: dict[str, dict[str, Any]] = {}  # the results of the steps that succeeded or were caught
        self._pending: list[tuple[str, dict[str, Any], Mapping[str, Any] | None]] = []
        self._later: list[dict[str, Any]] = []  # progress events of the pending records

    def _fire(
        self,
        plan_id: str,
        trigger: str,
        params: Mapping[str, Any] | None = None,
        secrets: Mapping[str, str] | None = None,
        observations: Mapping[str, Any] | None = None,
    ) -> Instance:
        # The component's own transition helper: _Run is the component's loop, in its module.
        return self.plans._fire(plan_id, trigger, params, secrets, observations)

    def _emit(self, plan: str, event: str, **fields: Any) -> None:
        if self.progress is not None:
            self.progress({"plan": plan, "event": event, **fields})

    def _settle(
        self, step: Step, record: dict[str, Any], private: Mapping[str, Any] | None, event: str, **fields: Any
    ) -> None:
        """A step's record, to be committed with the next write (its progress event is heard then)."""
        self._pending.append((step.id, record, private))
        self._later.append({"event": event, "step": step.id, **fields})
        self._remember(step.id, record, private)

    def _remember(self, step_id: str, record: dict[str, Any], private: Mapping[str, Any] | None) -> None:
        self.records[step_id] = record
        if private:
            self.private[step_id] = dict(private)
        if record.get("state") in ("succeeded", "caught"):  # a failed step's outputs are not its result
            self.outputs[step_id] = {**(record.get("outputs") or {}), **self.private.get(step_id, {})}
        else:
            self.outputs.pop(step_id, None)

    def _write(
        self, trigger: str, params: Mapping[str, Any] | None = None, start: tuple[Step, dict[str, Any]] | None = None
    ) -> Instance:
        """Fire ``trigger`` carrying the pending records (and ``start``, the next step's running record)."""
        records = [{"step_id": step_id, "record": record} for step_id, record, _ in self._pending]
        privates = {step_id: dict(private) for step_id, _, private in self._pending if private}
        if start is not None:
            records.append({"step_id": start[0].id, "record": start[1]})
            self._remember(start[0].id, start[1], None)
        sent = dict(params or {})
        if records:
            sent["records"] = records
        secrets = {"privates": json.dumps(privates)} if privates else None
        instance = self._fire(self.plan_id, trigger, sent, secrets=secrets)
        self._pending.clear()
        heard, self._later = self._later, []
        for fields in heard:
            self._emit(self.plan_id, **fields)
        return instance

    async def run(self, plan_id: str) -> Instance:
        plans = self.plans
        plan = plans.plan(plan_id)
        if plans.spec.states[plan.state].terminal or plan.state == "failed":
            return plan  # a failed plan runs again only through retry (a redrive)
        recipe = plans.recipe_of(plan)
        self.plan_id = plan_id
        plan = self._fire(plan_id, "start", observations={"runner_status": lockstatus.status(plan.data.get("runner"))})
        self._emit(plan_id, "plan_started", recipe=recipe.name, steps=[s.id for s in recipe.steps])
        started = plans.plan(plan_id)  # the step records, once (start moved an old-layout plan's to parts)
        self.private = {k: dict(v) for k, v in (started.data.get("private") or {}).items() if isinstance(v, dict)}
        for step_id, record in (started.data.get("steps") or {}).items():
            self._remember(step_id, dict(record), None)
        stop = threading.Event()
        beat = threading.Thread(target=self._heartbeat, args=(plan_id, stop), name=f"corral-plan-lease-{plan_id}")
        beat.daemon = True
        beat.start()
        try:
            await self._steps(plan_id, plan, recipe)
        except TransitionNotAllowedError:
            current = plans.service.store.get(plan_instance_id(plan_id))
            if current is not None and current.state == "cancelled":
                self._emit(plan_id, "plan_cancelled")
                return plans.plan(plan_id)
            raise
        finally:
            stop.set()
            beat.join()
        return plans.plan(plan_id)

    def _heartbeat(self, plan_id: str, stop: threading.Event) -> None:
        """Renew this runner's lease on the plan every third of its TTL while the steps run (issue 16).

        Ends quietly when the plan is no longer running under this runner (it paused or ended, or
        another runner took it after the lease expired: the step loop's next write then stops)."""
        period = max(self.plans.runner_ttl / 3, 0.05)
        while not stop.wait(period):
            try:
                self._fire(plan_id, "renew_runner")
            except (RefusedError, TransitionNotAllowedError) as exc:
                logger.info("plan %s: the runner's lease was not renewed (%s); stopping the renewals", plan_id, exc)
                return
            except CorralError as exc:  # the store busy or unreachable: try again at the next beat
                logger.info("plan %s: renewing the runner's lease failed (%s)", plan_id, exc)

    async def _steps(self, plan_id: str, plan: Instance, recipe: Recipe) -> Instance:
        inputs = dict(plan.data.get("inputs") or {})
        failure: dict[str, Any] | None = None
        index = 0
        steps = recipe.steps
        positions = {s.id: i for i, s in enumerate(steps)}
        while index < len(steps):
            step = steps[index]
            record = self.records.get(step.id)
            if record is not None and record["state"] in ("succeeded", "skipped", "failed", "caught"):
                if record["state"] == "failed" and failure is None:
                    failure = {"step": step.id, **(record.get("error") or {})}
                if record["state"] == "caught":
                    index = positions[record["next"]]
                    continue
                index += 1
                continue
            if failure is not None and not step.final:
                self._settle(
                    step,
                    {"state": "skipped", "reason": "an earlier step failed"},
                    None,
                    "step_skipped",
                    reason="an earlier step failed",
                )
                index += 1
                continue
            outputs = self.outputs
            if step.when is not None and (record is None or record.get("state") == "pending"):
                try:
                    left = resolve(step.when["left"], inputs, outputs)
                    right = resolve(step.when["right"], inputs, outputs)
                    holds = compare(left, step.when["op"], right)
                except CorralError as exc:
                    referenced = exc.details.get("step")
                    if exc.code == "reference_unresolved" and referenced is not None and referenced not in outputs:
                        # A condition on the outputs of a step that produced none (it failed or was
                        # skipped) does not hold.
                        reason = f"when: step {referenced!r} produced no outputs"
                        self._settle(step, {"state": "skipped", "reason": reason}, None, "step_skipped", reason=reason)
                        index += 1
                        continue
                    outcome = self._failed(plan, step, record, exc, 0.0)
                    failure = failure or {"step": step.id, **(outcome.error or {})}
                    index += 1
                    continue
                if not holds:
                    self._settle(
                        step,
                        {"state": "skipped", "reason": "when is false"},
                        None,
                        "step_skipped",
                        reason="when is false",
                    )
                    index += 1
                    continue
            if record is not None and record.get("state") == "waiting":
                outcome = self._decided(plan, step, record)
            else:
                outcome = await self._attempts(plan, step, record, inputs, outputs)
            plan = outcome.plan
            if outcome.kind == "paused":
                plan = self._write("pause", {"reason": outcome.reason, "waiting_on": outcome.waiting_on})
                self._emit(plan_id, "plan_paused", step=step.id, reason=outcome.reason, waiting_on=outcome.waiting_on)
                return plan
            if outcome.kind == "caught":
                index = positions[outcome.next]
                continue
            if outcome.kind == "failed" and failure is None:
                failure = {"step": step.id, **(outcome.error or {})}
            index += 1
        if failure is not None:
            plan = self._write("fail", {"failure": failure})
            self._emit(plan_id, "plan_failed", failure=failure)
        else:
            plan = self._write("finish")
            self._emit(plan_id, "plan_succeeded")
        return plan

    async def _attempts(
        self,
        plan: Instance,
        step: Step,
        record: Mapping[str, Any] | None,
        inputs: Mapping[str, Any],
        outputs: Mapping[str, Any],
    ) -> _Outcome:
        import anyio  # here, not at the top: plans show and list never pay for it

        implementation = self.plans.operations.get(step.do)
        max_attempts = step.retry.max_attempts if step.retry else 1
        attempt = int(record.get("attempt", 1)) if record else 1
        resuming = record is not None and record.get("state") == "running"
        plan_id = str(plan.data["plan_id"])
        controller_id = str(plan.data["controller_id"])
        if implementation is None:  # a plugin's operation, uninstalled since the plan was submitted
            unknown = NotFoundError(f"no operation {step.do!r} is installed", code="operation_unknown", do=step.do)
            return self._failed(plan, step, {"attempt": attempt}, unknown, 0.0)
        try:
            args = resolve(step.args, inputs, outputs)
            self.plans.contain(step.do, args)
        except CorralError as exc:
            referenced = exc.details.get("step")
            if (
                exc.code == "reference_unresolved"
                and step.do in CLEANUP_OPERATIONS
                and referenced is not None
                and self.records.get(referenced, {}).get("state") not in ("succeeded", "caught")
            ):
                # A clean-up whose target's step never produced it: the plan created nothing to clean up.
                return self._skipped(plan, step, attempt, f"step {referenced!r} created nothing")
            return self._failed(plan, step, {"attempt": attempt}, exc, 0.0)
        while True:
            ctx = OpContext(self.plans, plan_id, step.id, attempt, controller_id, step.timeout, self.progress)
            started = time.monotonic()
            result: Outputs | None = None
            error: CorralError | None = None
            if resuming:
                resuming = False
                if self._pending:  # no operation acts before the records settled before it are committed
                    plan = self._write("step")
                try:
                    resolution = implementation.resume(ctx, args)
                except Exception as exc:  # noqa: BLE001 - any error in a step fails the step, never strands the plan
                    resolution = Resume("fail", error=_as_corral_error(exc, step))
                self._emit(plan_id, "step_resumed", step=step.id, attempt=attempt, resolution=resolution.kind)
                if resolution.kind == "pause":
                    return _Outcome("paused", plan, reason=f"step {step.id}: {resolution.reason}")
                if resolution.kind == "done":
                    result = resolution.outputs
                elif resolution.kind == "fail":
                    error = resolution.error
            else:
                running: dict[str, Any] = {"state": "running", "attempt": attempt, "do": step.do}
                if step.timeout is not None:
                    running["timeout"] = step.timeout
                plan = self._write("step", start=(step, running))
                self._emit(plan_id, "step_started", step=step.id, do=step.do, attempt=attempt)
            if result is None and error is None:
                try:
                    if step.timeout is not None:
                        with anyio.fail_after(step.timeout):
                            result = await implementation.run(ctx, dict(args))
                    else:
                        result = await implementation.run(ctx, dict(args))
                except TimeoutError:
                    error = CorralError(f"step {step.id} took longer than {step.timeout:g} s", code="step_timeout")
                except NotCreatedByPlan as exc:
                    return self._skipped(plan, step, attempt, exc.message)
                except WaitsOnPerson as exc:
                    return self._waiting(plan, step, attempt, exc)
                except CorralError as exc:
                    error = exc
                except Exception as exc:  # noqa: BLE001 - any error in a step fails the step, never strands the plan
                    error = _as_corral_error(exc, step)
            elapsed = round(time.monotonic() - started, 3)
            faults.point(f"plan.step:{step.id}:done")  # the operation acted, its outcome is not recorded
            if result is not None:
                self._settle(
                    step,
                    {
                        "state": "succeeded",
                        "attempt": attempt,
                        "do": step.do,
                        "outputs": result.public,
                        "seconds": elapsed,
                    },
                    result.private,
                    "step_succeeded",
                    attempt=attempt,
                    outputs=result.public,
                    seconds=elapsed,
                )
                return _Outcome("succeeded", plan)
            assert error is not None
            summary = {"code": error.code, "message": error.message}
            failed_outputs = error.details.pop("outputs", None)
            retryable = error.category in RETRYABLE_CATEGORIES and step.retry is not None
            if retryable and attempt < max_attempts:
                assert step.retry is not None
                delay = random.uniform(0, step.retry.interval * step.retry.backoff_rate ** (attempt - 1))
                self._emit(
                    plan_id, "step_retrying", step=step.id, attempt=attempt, error=summary, delay=round(delay, 3)
                )
                await anyio.sleep(delay)
                attempt += 1
                continue
            for catch in step.catch:
                if "*" in catch.errors or error.code in catch.errors:
                    self._settle(
                        step,
                        {
                            "state": "caught",
                            "attempt": attempt,
                            "do": step.do,
                            "error": summary,
                            "next": catch.next,
                            "seconds": elapsed,
                            **({"outputs": failed_outputs} if failed_outputs is not None else {}),
                        },
                        None,
                        "step_caught",
                        error=summary,
                        next=catch.next,
                    )
                    return _Outcome("caught", plan, next=catch.next)
            if failed_outputs is not None:
                error.details["outputs"] = failed_outputs
            return self._failed(plan, step, {"attempt": attempt}, error, elapsed)

    def _failed(
        self, plan: Instance, step: Step, record: Mapping[str, Any] | None, error: CorralError, elapsed: float
    ) -> _Outcome:
        """Record the step failed with ``error``'s code (and any outputs it carries)."""
        attempt = int((record or {}).get("attempt") or 1)
        summary = {"code": error.code, "message": error.message}
        outputs = error.details.pop("outputs", None)
        entry: dict[str, Any] = {"state": "failed", "attempt": attempt, "do": step.do, "error": summary}
        entry["seconds"] = elapsed
        if record and record.get("decision"):
            entry["decision"] = record["decision"]  # a person rejected it: the record keeps who and why
        if outputs is not None:
            entry["outputs"] = outputs
        self._settle(step, entry, None, "step_failed", attempt=attempt, error=summary, seconds=elapsed)
        return _Outcome("failed", plan, error=summary)

    def _waiting(self, plan: Instance, step: Step, attempt: int, blocked: WaitsOnPerson) -> _Outcome:
        """Record the step waiting on a person (what was collected kept) and pause the plan."""
        waiting_on = {"kind": blocked.kind, "step": step.id, **blocked.details}
        entry = {
            "state": "waiting",
            "attempt": attempt,
            "do": step.do,
            "outputs": blocked.outputs.public,
            "waiting_on": waiting_on,
        }
        self._settle(step, entry, blocked.outputs.private, "step_waiting", waiting_on=waiting_on)
        return _Outcome("paused", plan, reason=f"step {step.id}: {blocked.message}", waiting_on=waiting_on)

    def _decided(self, plan: Instance, step: Step, record: Mapping[str, Any]) -> _Outcome:
        """A waiting step after a person's decision: approved, it succeeds with what it collected (an
        approval step: ``{approved, reason, decided_by}``); rejected, it fails with ``decision_rejected``
        (a ``catch`` may take it); undecided, it waits, unless it is an approval whose deadline passed:
        then it fails with ``approval_timeout`` (catchable too)."""
        decision = record.get("decision")
        attempt = int(record.get("attempt") or 1)
        waiting_on = record.get("waiting_on")
        if not isinstance(decision, Mapping):
            if approval_expired(waiting_on, self.plans.service.now()):
                assert isinstance(waiting_on, Mapping)
                error = CorralError(
                    f"step {step.id}: nobody decided the approval before {waiting_on.get('deadline')}",
                    code="approval_timeout",
                )
                return self._undecided(plan, step, attempt, error, None)
            return _Outcome(
                "paused", plan, reason=f"step {step.id}: still waiting on a decision", waiting_on=waiting_on
            )
        if decision.get("approve"):
            outputs = dict(record.get("outputs") or {})
            if isinstance(waiting_on, Mapping) and waiting_on.get("kind") == "approval":
                outputs = {"approved": True, "reason": decision.get("reason"), "decided_by": decision.get("actor")}
            entry = {"state": "succeeded", "attempt": attempt, "do": step.do, "outputs": outputs}
            self._settle(
                step,
                {**entry, "decision": dict(decision)},
                None,
                "step_succeeded",
                attempt=attempt,
                decision="approved",
            )
            return _Outcome("succeeded", plan)
        error = CorralError(f"a person rejected step {step.id}: {decision.get('reason')}", code="decision_rejected")
        return self._undecided(plan, step, attempt, error, dict(decision))

    def _undecided(
        self, plan: Instance, step: Step, attempt: int, error: CorralError, decision: dict[str, Any] | None
    ) -> _Outcome:
        """A waiting step that ends without approval (rejected, or its approval timed out): caught by the
        step's ``catch`` if it names the code, else failed; the record keeps the decision, if any."""
        summary = {"code": error.code, "message": error.message}
        kept = {"decision": decision} if decision is not None else {}
        for catch in step.catch:
            if "*" in catch.errors or error.code in catch.errors:
                entry = {"state": "caught", "attempt": attempt, "do": step.do, "error": summary, "next": catch.next}
                self._settle(step, {**entry, **kept}, None, "step_caught", error=summary, next=catch.next)
                return _Outcome("caught", plan, next=catch.next)
        return self._failed(plan, step, {"attempt": attempt, **kept}, error, 0.0)

    def _skipped(self, plan: Instance, step: Step, attempt: int, why: str) -> _Outcome:
        """Record a clean-up step skipped because its target was not created by this plan."""
        entry = {
            "state": "skipped",
            "attempt": attempt,
            "do": step.do,
            "skipped": NOT_CREATED,
            "reason": f"{NOT_CREATED}: {why}",
        }
        self._settle(step, entry, None, "step_skipped", reason=entry["reason"], skipped=NOT_CREATED)
        return _Outcome("skipped", plan)


def approval_expired(waiting_on: Any, now: datetime) -> bool:
    """Whether ``waiting_on`` (a waiting step's) is an approval whose deadline has passed by ``now``."""
    if not isinstance(waiting_on, Mapping) or waiting_on.get("kind") != "approval":
        return False
    deadline = waiting_on.get("deadline")
    return isinstance(deadline, str) and now >= parse_time(deadline)


def _as_corral_error(exc: Exception, step: Step) -> CorralError:
    """An unexpected exception inside a step, as the step's failure (logged with its traceback): the
    plan must end ``failed`` naming the step, never stay ``running`` for ever."""
    logger.error("step %s (%s) raised %r", step.id, step.do, exc, exc_info=exc)
    return CorralError(f"step {step.id} ({step.do}) raised {type(exc).__name__}: {exc}", code="internal")


@dataclass
class _Outcome:
    kind: str  # succeeded, failed, caught, paused, skipped
    plan: Instance
    waiting_on: Mapping[str, Any] | None = None
    error: dict[str, Any] | None = None
    next: str = ""
    reason: str = ""
