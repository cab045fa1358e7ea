"""Run plans: submit once (idempotent by plan id), execute step by step, resume after any crash.

The plan is an instance of ``machines/plan.yaml``; every step's start and outcome is a ``step``
transition, so the store always knows which step was in flight. A runner that finds a step
``running`` (its predecessor died) asks the step's operation to resolve it from the instances the
step creates under its deterministic key (see :mod:`runner.plans.operations`): done, not started, or
a decision for a person (the plan pauses). One runner at a time: the plan records its runner (pid,
host, boot id, start time) and another may take over only when that one is gone.

Step semantics: ``when`` (skip unless the comparison holds), ``retry`` (safe operations only; full
jitter: a random wait below ``interval * backoff_rate ** (attempt - 1)``), ``catch`` (error codes,
or ``*``, to a later step), ``finally`` (runs even after a failure; other steps are then skipped).
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import anyio

from runner import lockstatus
from runner.context import Instance
from runner.definitions.model import MachineSpec
from runner.definitions.plans import check_plan_document
from runner.definitions.recipes import Recipe, RecipeLibrary, Step, validate_inputs
from runner.engine import Request
from runner.errors import ConflictError, CorralError, InputError, RefusedError, TransitionNotAllowedError
from runner.fence import Credential
from runner.plans import get_plan, operations, plan_instance_id
from runner.plans.references import compare, resolve
from runner.service import Service

RETRYABLE_CATEGORIES = ("conflict", "internal")
# Steps that close or release what an earlier step started: with nothing started, they are skipped.
CLEANUP_OPERATIONS = frozenset({"reviewer.close", "writer.release"})

logger = logging.getLogger(__name__)


class CredentialKeeper(Protocol):
    """Where a plan's controller credential lives between steps (the CLI: the state home's files)."""

    def load(self, controller_id: str) -> Credential | None: ...

    def save(self, credential: Credential) -> None: ...

    def remove(self, controller_id: str, held: Credential | None = None) -> None:
        """Forget the credential; with ``held``, only if what is kept is still that grant."""
        ...


class PlanConflictError(ConflictError):
    """A plan id was submitted again with different content. Use a new plan id for a new plan."""

    default_code = "plan_conflict"


@dataclass(frozen=True)
class Submitted:
    plan: Instance
    created: bool


class Executor:
    """Submits and runs plans over one service."""

    def __init__(
        self,
        service: Service,
        recipes: RecipeLibrary,
        credentials: CredentialKeeper,
        scratch: Path | None = None,
        progress: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.service = service
        self.recipes = recipes
        self.credentials = credentials
        self.scratch = scratch
        self.progress = progress or (lambda event: None)
        self.me = lockstatus.current()
        self._private: dict[str, dict[str, dict[str, Any]]] = {}

    # --- submission ---------------------------------------------------------------------------------

    def check(self, doc: Mapping[str, Any]) -> tuple[dict[str, Any], Recipe, dict[str, Any]]:
        """The plan document, its recipe and its inputs (defaults filled in), all checked; writes nothing.

        Raises:
            InputError: ``plan_invalid`` (the document), ``inputs_invalid`` (an input, or an unknown one).
            NotFoundError: ``recipe_unknown``.
        """
        checked = check_plan_document(dict(doc))
        recipe = self.recipes.get(checked["recipe"])
        return checked, recipe, validate_inputs(recipe, dict(checked.get("inputs") or {}))

    def submit(self, doc: Mapping[str, Any], parent: str | None = None) -> Submitted:
        """Record the plan (or find it): the same id with the same content is the same plan."""
        doc, recipe, inputs = self.check(doc)
        content = {
            "plan": doc["plan"],
            "recipe": recipe.name,
            "recipe_sha256": recipe.sha256,
            "controller": doc["controller"],
            "inputs": inputs,
        }
        content_sha256 = hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()
        existing = self.service.store.get(plan_instance_id(doc["plan"]))
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
            self._plan_spec,
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
                    "parent": parent,
                },
                secrets={"inputs": json.dumps(inputs)},
                actor=self.service.actor,
            ),
        )
        return Submitted(result.instance, True)

    # --- transitions ----------------------------------------------------------------------------------

    @property
    def _plan_spec(self) -> MachineSpec:
        """``machines/plan.yaml`` (the library caches it)."""
        return self.service.library.builtin("plan")

    def _fire(
        self,
        plan_id: str,
        trigger: str,
        params: Mapping[str, Any] | None = None,
        secrets: Mapping[str, str] | None = None,
        observations: Mapping[str, Any] | None = None,
    ) -> Instance:
        result = self.service.engine.fire(
            self._plan_spec,
            Request(
                plan_instance_id(plan_id),
                trigger,
                params={"runner": self.me, **(params or {})},
                secrets=secrets or {},
                observations=observations or {},
                actor=self.service.actor,
            ),
        )
        return result.instance

    def _emit(self, plan: str, event: str, **fields: Any) -> None:
        self.progress({"plan": plan, "event": event, **fields})

    def _record(
        self, plan_id: str, step: Step, record: dict[str, Any], private: Mapping[str, Any] | None = None
    ) -> Instance:
        secrets = {"private": json.dumps(private)} if private else None
        instance = self._fire(plan_id, "step", {"step_id": step.id, "record": record}, secrets=secrets)
        if private:
            self._private[plan_id][step.id] = dict(private)
        return instance

    # --- running ----------------------------------------------------------------------------------------

    async def run(self, plan_id: str) -> Instance:
        """Run (or continue) the plan until it ends or pauses; returns the plan as it then stands."""
        plan = get_plan(self.service.store, plan_id)
        if self._plan_spec.states[plan.state].terminal or plan.state == "failed":
            return plan  # a failed plan runs again only through retry (a redrive)
        recipe = self._recipe_of(plan)
        plan = self._fire(plan_id, "start", observations={"runner_status": lockstatus.status(plan.data.get("runner"))})
        self._emit(plan_id, "plan_started", recipe=recipe.name, steps=[s.id for s in recipe.steps])
        self._private[plan_id] = dict(plan.data.get("private") or {})
        try:
            return await self._steps(plan_id, plan, recipe)
        except TransitionNotAllowedError:
            current = self.service.store.get(plan_instance_id(plan_id))
            if current is not None and current.state == "cancelled":
                self._emit(plan_id, "plan_cancelled")
                return current
            raise

    async def _steps(self, plan_id: str, plan: Instance, recipe: Recipe) -> Instance:
        inputs = dict(plan.data.get("inputs") or {})
        failure: dict[str, Any] | None = None
        index = 0
        steps = recipe.steps
        while index < len(steps):
            step = steps[index]
            records: dict[str, Any] = dict(plan.data.get("steps") or {})
            record = records.get(step.id)
            if record is not None and record["state"] in ("succeeded", "skipped", "failed", "caught"):
                if record["state"] == "failed" and failure is None:
                    failure = {"step": step.id, **(record.get("error") or {})}
                if record["state"] == "caught":
                    index = next(i for i, s in enumerate(steps) if s.id == record["next"])
                    continue
                index += 1
                continue
            if failure is not None and not step.final:
                plan = self._record(plan_id, step, {"state": "skipped", "reason": "an earlier step failed"})
                self._emit(plan_id, "step_skipped", step=step.id, reason="an earlier step failed")
                index += 1
                continue
            outputs = {
                sid: {**(rec.get("outputs") or {}), **self._private[plan_id].get(sid, {})}
                for sid, rec in records.items()
                if rec.get("state") in ("succeeded", "caught")  # a failed step's outputs are not its result
            }
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
                        plan = self._record(plan_id, step, {"state": "skipped", "reason": reason})
                        self._emit(plan_id, "step_skipped", step=step.id, reason=reason)
                        index += 1
                        continue
                    outcome = self._failed(plan, step, record, exc, 0.0)
                    plan = outcome.plan
                    failure = failure or {"step": step.id, **(outcome.error or {})}
                    index += 1
                    continue
                if not holds:
                    plan = self._record(plan_id, step, {"state": "skipped", "reason": "when is false"})
                    self._emit(plan_id, "step_skipped", step=step.id, reason="when is false")
                    index += 1
                    continue
            if record is not None and record.get("state") == "waiting":
                outcome = self._decided(plan, step, record)
            else:
                outcome = await self._attempts(plan, step, record, inputs, outputs)
            plan = outcome.plan
            if outcome.kind == "paused":
                plan = self._fire(plan_id, "pause", {"reason": outcome.reason, "waiting_on": outcome.waiting_on})
                self._emit(plan_id, "plan_paused", step=step.id, reason=outcome.reason, waiting_on=outcome.waiting_on)
                return plan
            if outcome.kind == "caught":
                index = next(i for i, s in enumerate(steps) if s.id == outcome.next)
                continue
            if outcome.kind == "failed" and failure is None:
                failure = {"step": step.id, **(outcome.error or {})}
            index += 1
        if failure is not None:
            plan = self._fire(plan_id, "fail", {"failure": failure})
            self._emit(plan_id, "plan_failed", failure=failure)
        else:
            plan = self._fire(plan_id, "finish")
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
        implementation = operations.OPERATIONS[step.do]
        max_attempts = step.retry.max_attempts if step.retry else 1
        attempt = int(record.get("attempt", 1)) if record else 1
        resuming = record is not None and record.get("state") == "running"
        plan_id = str(plan.data["plan_id"])
        controller_id = str(plan.data["controller_id"])
        try:
            args = resolve(step.args, inputs, outputs)
        except CorralError as exc:
            referenced = exc.details.get("step")
            if (
                exc.code == "reference_unresolved"
                and step.do in CLEANUP_OPERATIONS
                and referenced is not None
                and (plan.data.get("steps") or {}).get(referenced, {}).get("state") not in ("succeeded", "caught")
            ):
                # A clean-up whose target's step never produced it: the plan created nothing to clean up.
                return self._skipped(plan, step, attempt, f"step {referenced!r} created nothing")
            return self._failed(plan, step, {"attempt": attempt}, exc, 0.0)
        while True:
            ctx = operations.OpContext(self, plan_id, step.id, attempt, controller_id, step.timeout)
            started = time.monotonic()
            result: operations.Outputs | None = None
            error: CorralError | None = None
            if resuming:
                resuming = False
                try:
                    resolution = implementation.resume(ctx, args) if implementation.resume else operations.RUN
                except Exception as exc:  # noqa: BLE001 - any error in a step fails the step, never strands the plan
                    resolution = operations.Resume("fail", error=_as_corral_error(exc, step))
                self._emit(plan_id, "step_resumed", step=step.id, attempt=attempt, resolution=resolution.kind)
                if resolution.kind == "pause":
                    return _Outcome("paused", plan, reason=f"step {step.id}: {resolution.reason}")
                if resolution.kind == "done":
                    result = resolution.outputs
                elif resolution.kind == "fail":
                    error = resolution.error
            else:
                running = {"state": "running", "attempt": attempt, "do": step.do}
                if step.timeout is not None:
                    running["timeout"] = step.timeout
                plan = self._record(plan_id, step, running)
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
                except operations.NotCreatedByPlan as exc:
                    return self._skipped(plan, step, attempt, exc.message)
                except operations.AgentBlocked as exc:
                    return self._waiting(plan, step, attempt, exc)
                except CorralError as exc:
                    error = exc
                except Exception as exc:  # noqa: BLE001 - any error in a step fails the step, never strands the plan
                    error = _as_corral_error(exc, step)
            elapsed = round(time.monotonic() - started, 3)
            if result is not None:
                plan = self._record(
                    plan_id,
                    step,
                    {
                        "state": "succeeded",
                        "attempt": attempt,
                        "do": step.do,
                        "outputs": result.public,
                        "seconds": elapsed,
                    },
                    result.private,
                )
                self._emit(
                    plan_id, "step_succeeded", step=step.id, attempt=attempt, outputs=result.public, seconds=elapsed
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
                    plan = self._record(
                        plan_id,
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
                    )
                    self._emit(plan_id, "step_caught", step=step.id, error=summary, next=catch.next)
                    return _Outcome("caught", plan, next=catch.next)
            if failed_outputs is not None:
                error.details["outputs"] = failed_outputs
            return self._failed(plan, step, {"attempt": attempt}, error, elapsed)

    def _failed(
        self, plan: Instance, step: Step, record: Mapping[str, Any] | None, error: CorralError, elapsed: float
    ) -> _Outcome:
        """Record the step failed with ``error``'s code (and any outputs it carries)."""
        plan_id = str(plan.data["plan_id"])
        attempt = int((record or {}).get("attempt") or 1)
        summary = {"code": error.code, "message": error.message}
        outputs = error.details.pop("outputs", None)
        entry: dict[str, Any] = {"state": "failed", "attempt": attempt, "do": step.do, "error": summary}
        entry["seconds"] = elapsed
        if record and record.get("decision"):
            entry["decision"] = record["decision"]  # a person rejected it: the record keeps who and why
        if outputs is not None:
            entry["outputs"] = outputs
        plan = self._record(plan_id, step, entry)
        self._emit(plan_id, "step_failed", step=step.id, attempt=attempt, error=summary, seconds=elapsed)
        return _Outcome("failed", plan, error=summary)

    def _waiting(self, plan: Instance, step: Step, attempt: int, blocked: operations.AgentBlocked) -> _Outcome:
        """Record the step waiting on a person (what was collected kept) and pause the plan."""
        plan_id = str(plan.data["plan_id"])
        waiting_on = {"kind": "agent_blocked", "step": step.id, **blocked.details}
        entry = {
            "state": "waiting",
            "attempt": attempt,
            "do": step.do,
            "outputs": blocked.outputs.public,
            "waiting_on": waiting_on,
        }
        plan = self._record(plan_id, step, entry, blocked.outputs.private)
        self._emit(plan_id, "step_waiting", step=step.id, waiting_on=waiting_on)
        return _Outcome("paused", plan, reason=f"step {step.id}: {blocked.message}", waiting_on=waiting_on)

    def _decided(self, plan: Instance, step: Step, record: Mapping[str, Any]) -> _Outcome:
        """A waiting step after a person's decision: approved, it succeeds with what it collected;
        rejected, it fails with ``decision_rejected`` (a ``catch`` may take it); undecided, it waits."""
        plan_id = str(plan.data["plan_id"])
        decision = record.get("decision")
        attempt = int(record.get("attempt") or 1)
        if not isinstance(decision, Mapping):
            waiting_on = record.get("waiting_on")
            return _Outcome(
                "paused", plan, reason=f"step {step.id}: still waiting on a decision", waiting_on=waiting_on
            )
        if decision.get("approve"):
            entry = {"state": "succeeded", "attempt": attempt, "do": step.do, "outputs": record.get("outputs") or {}}
            plan = self._record(plan_id, step, {**entry, "decision": dict(decision)})
            self._emit(plan_id, "step_succeeded", step=step.id, attempt=attempt, decision="approved")
            return _Outcome("succeeded", plan)
        error = CorralError(f"a person rejected step {step.id}: {decision.get('reason')}", code="decision_rejected")
        summary = {"code": error.code, "message": error.message}
        for catch in step.catch:
            if "*" in catch.errors or error.code in catch.errors:
                entry = {"state": "caught", "attempt": attempt, "do": step.do, "error": summary, "next": catch.next}
                plan = self._record(plan_id, step, {**entry, "decision": dict(decision)})
                self._emit(plan_id, "step_caught", step=step.id, error=summary, next=catch.next)
                return _Outcome("caught", plan, next=catch.next)
        return self._failed(plan, step, {"attempt": attempt, "decision": dict(decision)}, error, 0.0)

    def decide(self, plan_id: str, step_id: str, approve: bool, reason: str) -> Instance:
        """A person's decision on a step that waits on one (a blocked agent): recorded on the plan as an
        event with the deciding actor; call :meth:`run` next to continue. Refused (``plan_not_waiting``)
        unless the plan is paused with that step waiting."""
        plan = get_plan(self.service.store, plan_id)
        record = (plan.data.get("steps") or {}).get(step_id)
        if plan.state != "paused" or not isinstance(record, Mapping) or record.get("state") != "waiting":
            raise RefusedError(
                f"plan {plan_id!r} has no step {step_id!r} waiting on a decision (it is {plan.state})",
                code="plan_not_waiting",
                plan=plan_id,
                step=step_id,
                state=plan.state,
            )
        if not reason or not reason.strip() or len(reason) > 1000:
            raise InputError("reason", "a decision's reason is 1-1000 characters of text")
        return self._fire(plan_id, "decide", {"step_id": step_id, "approve": bool(approve), "reason": reason})

    def _skipped(self, plan: Instance, step: Step, attempt: int, why: str) -> _Outcome:
        """Record a clean-up step skipped because its target was not created by this plan."""
        plan_id = str(plan.data["plan_id"])
        entry = {
            "state": "skipped",
            "attempt": attempt,
            "do": step.do,
            "skipped": operations.NOT_CREATED,
            "reason": f"{operations.NOT_CREATED}: {why}",
        }
        plan = self._record(plan_id, step, entry)
        self._emit(plan_id, "step_skipped", step=step.id, reason=entry["reason"], skipped=operations.NOT_CREATED)
        return _Outcome("skipped", plan)

    async def run_child(
        self, child_id: str, recipe: str, inputs: dict[str, Any], controller_id: str, parent: str
    ) -> Instance:
        """Submit (or find) and run a nested plan for ``recipe.call``."""
        self.submit({"plan": child_id, "recipe": recipe, "controller": controller_id, "inputs": inputs}, parent=parent)
        child = Executor(self.service, self.recipes, self.credentials, self.scratch, self.progress)
        return await child.run(child_id)

    def retry(self, plan_id: str) -> Instance:
        """Redrive a failed plan from its failed step (as Step Functions' redrive does): the steps
        before it keep their records and outputs and do not run again; the failed step and every later
        one run afresh at their next attempt. Call :meth:`run` next. Refused (``plan_not_failed``) for
        a plan in any other state; ``recipe_changed`` if its recipe changed since submission."""
        plan = get_plan(self.service.store, plan_id)
        if plan.state != "failed":
            raise RefusedError(
                f"plan {plan_id!r} is {plan.state}, not failed: only a failed plan is retried"
                + (" (continue it with `corral plans resume`)" if plan.state in ("paused", "running") else ""),
                code="plan_not_failed",
                plan=plan_id,
                state=plan.state,
            )
        recipe = self._recipe_of(plan)
        ids = [s.id for s in recipe.steps]
        failed_step = str((plan.data.get("failure") or {}).get("step") or "")
        records = dict(plan.data.get("steps") or {})
        if failed_step not in ids:  # no recorded failed step: from the first step that did not succeed
            failed_step = next((i for i in ids if (records.get(i) or {}).get("state") != "succeeded"), ids[-1])
        reset = ids[ids.index(failed_step) :]
        return self._fire(
            plan_id,
            "retry",
            {"reset": reset, "from_step": failed_step},
            observations={"runner_status": lockstatus.status(plan.data.get("runner"))},
        )

    def _recipe_of(self, plan: Instance) -> Recipe:
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

    def cancel(self, plan_id: str) -> Instance:
        get_plan(self.service.store, plan_id)
        return self._fire(plan_id, "cancel")


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
