"""Plans as a service component: submit once (idempotent by plan id), run step by step, resume after
any crash; retry (redrive), cancel, decide, show and list. One typed ``Plan*Input`` per operation.

The plan is an instance of ``machines/plan.yaml``; every step's outcome, and the start of every
effectful one, is recorded by a ``step`` transition (the outcome of one step with the start of the
next: one commit per effectful step; a run of pure steps in one, see :mod:`runner.service.plan_run`),
so the store always knows which effectful step was in flight. The step records are parts of the plan instance, one
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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner import lockstatus
from runner.context import Instance, parse_time
from runner.definitions.model import MachineSpec
from runner.definitions.plans import check_plan_document
from runner.definitions.recipes import Recipe, RecipeLibrary, validate_inputs
from runner.definitions.references import resolve
from runner.engine import Request
from runner.errors import (
    ConflictError,
    CorralError,
    InputError,
    NotFoundError,
    RefusedError,
)
from runner.service.steps import (
    attempt_keys,
)
from runner.service.views.pages import Page
from runner.updates.plans import STEP

if TYPE_CHECKING:
    from runner.service import Service
from runner.service.inputs.plans import (
    PlanCancelInput,
    PlanDecideInput,
    PlanListInput,
    PlanResumeInput,
    PlanRetryInput,
    PlanRunInput,
    PlanShowInput,
    PlanSubmitInput,
)
from runner.service.plan_run import PlanRun, approval_expired
from runner.service.plan_state import PLAN_RUNNER_TTL, plan_instance_id, plan_summary, plan_view, runner_lease
from runner.service.steps import CredentialKeeper, OperationLookup, Progress


class PlanConflictError(ConflictError):
    """A plan id was submitted again with different content. Use a new plan id for a new plan."""

    default_code = "plan_conflict"


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
        # A surface that confines paths (corral serve --workdir-root) checks every step's path
        # arguments (the catalogue's path=True), at submission and before each step runs; it raises to refuse.
        self.paths = paths
        self.recipes = recipes
        self.credentials = credentials
        self.operations = operations
        self.scratch = scratch
        self.runner_ttl = runner_ttl  # the runner's lease on a plan, renewed every third of it

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

    def summary(self, plan: Instance) -> dict[str, Any]:
        """The plan as every surface shows it (:func:`plan_summary`), its steps in its recipe's order
        (the recipe as found now; recorded steps it does not name follow)."""
        try:
            order = [step.id for step in self.recipes.get(str(plan.data.get("recipe"))).steps]
        except CorralError:
            order = []
        return plan_summary(plan, order)

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

    def absolute_inputs(self, document: Mapping[str, Any], base: Path) -> dict[str, Any]:
        """The plan document with each relative input that a step takes as a path (``cwd: .``) made
        absolute against ``base`` (where ``corral run`` was run from, as for a path on its command line).

        Only an input a step's path argument names whole (``${inputs.cwd}``) is a path; anything else,
        and a document this cannot read (checked, and refused, by :meth:`check`), is left as it is.
        """
        doc = dict(document)
        inputs = doc.get("inputs")
        if not isinstance(inputs, dict) or not isinstance(doc.get("recipe"), str):
            return doc
        try:
            recipe = self.recipes.get(doc["recipe"])
        except CorralError:
            return doc
        names: set[str] = set()
        for step in recipe.steps:
            implementation = self.operations.get(step.do)
            if implementation is None:
                continue
            for param in implementation.spec.params:
                value = step.args.get(param.name)
                if param.path and isinstance(value, str) and value.startswith("${inputs.") and value.endswith("}"):
                    names.add(value[len("${inputs.") : -1])
        fixed = dict(inputs)
        for name in names:
            value = fixed.get(name)
            if isinstance(value, str) and value and not Path(value).is_absolute():
                fixed[name] = str((base / value).resolve())
        doc["inputs"] = fixed
        return doc

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
        return await PlanRun(self, progress).run(inp.plan_id)

    async def resume(self, inp: PlanResumeInput, progress: Progress | None = None) -> Instance:
        """Continue a paused or interrupted plan from its last recorded step (a step found in flight is
        resolved by its operation first): the same as :meth:`run`."""
        return await PlanRun(self, progress).run(inp.plan_id)

    def retry(self, inp: PlanRetryInput) -> Instance:
        """Redrive a failed plan from its failed step (as Step Functions' redrive does): the steps
        before it keep their records and outputs and do not run again; the failed step and every later
        one run afresh at their next attempt. A plan that gave its controller back (a finally
        ``controller.release`` succeeded) is redriven from its ``controller.acquire`` step instead.
        Call :meth:`resume` next. Refused (``plan_not_failed``) for
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
        if any(
            step.do == "controller.release" and (records.get(step.id) or {}).get("state") == "succeeded"
            for step in recipe.steps
        ):
            # The plan gave its controller back (a finally release ran): every later step needs it,
            # so the redrive starts at its controller.acquire, whatever came between runs again.
            acquire = next((i for i, step in enumerate(recipe.steps) if step.do == "controller.acquire"), None)
            if acquire is not None and acquire < ids.index(failed_step):
                failed_step = ids[acquire]
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

    def any_ended(self) -> bool:
        """Whether some plan has ended (succeeded or cancelled): what a listing without them hides."""
        spec = self.service.library.builtin("plan")
        ended = [n for n, st in spec.states.items() if st.terminal]
        found, _ = self.service.core.page("plan", ended, limit=1)
        return bool(found)

    def list_rows(self, inp: PlanListInput) -> Page[dict[str, Any]]:
        """The listing the surfaces print as JSON (``plans list --json``, MCP, HTTP): each plan's
        summary without its step records, ``steps`` the number it recorded, counted in the store
        without reading them (a plan of 10,000 steps costs one count, not 10,000 decodes)."""
        found, more = self._headers(inp)
        rows = []
        with self.service.store.read() as reader:
            for header in found:
                if header.data.get("steps"):  # a plan written before its records were parts: read them all
                    steps = len(plan_view(header, reader.parts(header.id)).data["steps"])
                else:
                    steps = reader.part_count(header.id, STEP)
                rows.append(plan_summary(header) | {"steps": steps})
        return Page(rows, str(found[-1].data.get("plan_id")) if more else None)

    def _headers(self, inp: PlanListInput) -> tuple[list[Instance], bool]:
        """The page of plan headers ``inp`` asks for, and whether more follow."""
        spec = self.service.library.builtin("plan")
        states = None if inp.include_ended else [n for n, st in spec.states.items() if not st.terminal]
        after = None if inp.after is None else plan_instance_id(inp.after)
        return self.service.core.page("plan", states, after=after, limit=inp.limit)

    def list(self, inp: PlanListInput) -> Page[Instance]:
        """Plans with their step records, a page of them if asked (defined last: in the class body the
        name hides the builtin). A plan's records are read after its header: a listing, not a snapshot."""
        found, more = self._headers(inp)
        with self.service.store.read() as reader:
            plans = [plan_view(header, reader.parts(header.id)) for header in found]
        return Page(plans, str(found[-1].data.get("plan_id")) if more else None)
