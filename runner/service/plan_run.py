"""The step loop of one plan run (:class:`PlanRun`): what :meth:`runner.service.plans.Plans.run` and
``resume`` drive, step by step, resumable after any crash: one commit per effectful step, one per run
of pure steps (operations whose catalogue entry says ``pure``)."""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from runner import faults, lockstatus
from runner.context import Instance, parse_time
from runner.definitions.recipes import Recipe, Step
from runner.definitions.references import compare, resolve
from runner.errors import (
    CorralError,
    NotFoundError,
    RefusedError,
    StoreUnavailableError,
    TransitionNotAllowedError,
)
from runner.log import get_logger
from runner.observe import meter, tracing
from runner.service.plan_state import plan_instance_id
from runner.service.steps import (
    NOT_CREATED,
    NotCreatedByPlan,
    OpContext,
    Outputs,
    Progress,
    Resume,
    WaitsOnPerson,
)

if TYPE_CHECKING:
    from runner.service.steps import RunHost

RETRYABLE_CATEGORIES = ("conflict", "internal")
# Steps that close or release what an earlier step started: with nothing started, they are skipped.
CLEANUP_OPERATIONS = frozenset({"reviewer.close", "writer.release"})
# The bounds of a run of pure steps held uncommitted: records, and seconds since the oldest was
# settled. Past either the run is committed on its own, so `plans show` trails a long run of pure
# steps by at most this much and a crash replays at most this many.
PURE_BATCH_STEPS = 64
PURE_BATCH_SECONDS = 0.05

logger = get_logger(__name__)  # imports logging only to log (cold start)


class PlanRun:
    """One runner of one plan: the step loop. A nested plan (``recipe.call``) gets its own.

    Invariant: an operation that is not pure (the default: see ``pure`` in
    :mod:`runner.definitions.operations`) runs only after its step's ``running`` record and every
    record before it are committed, and its outcome is committed before any later step runs: with
    the next effectful step's ``running`` record (one ``step`` transition: one commit per step), alone
    before a pure step, or on ``finish``, ``fail`` or ``pause``. A pure step gets no ``running``
    record: the records of a run of pure steps (and of the skips among them) are held in memory and
    committed in one transaction with whatever comes next (the next effectful step's ``running``
    record, the plan's end, a pause), or alone once the run holds :data:`PURE_BATCH_STEPS` records or
    its oldest is :data:`PURE_BATCH_SECONDS` old. A runner killed before that commit loses records
    its successor derives again by replaying those pure steps (same arguments, same outputs, nothing
    outside the store acted). A runner killed between an effectful operation and the commit of its
    outcome leaves the step ``running``, which its successor resolves through the operation's
    ``resume``, as after a kill during the operation. A commit is one ``step`` event listing its
    records in order; their progress events are heard after it, in that order. The loop keeps the
    records in memory (read once when the run starts): no step re-reads or re-encodes the others."""

    def __init__(self, plans: RunHost, progress: Progress | None) -> None:
        self.plans = plans
        self.progress = progress
        self.plan_id = ""
        self.records: dict[str, dict[str, Any]] = {}
        self.private: dict[str, dict[str, Any]] = {}
        self.outputs: dict[str, dict[str, Any]] = {}  # the results of the steps that succeeded or were caught
        self._pending: list[tuple[str, dict[str, Any], Mapping[str, Any] | None]] = []
        self._later: list[dict[str, Any]] = []  # progress events of the pending records
        # Invariant: while _replayable holds, every pending record is one a successor derives again
        # by replaying pure steps and the loop's own skips; an effectful step's outcome clears it,
        # and then nothing runs before the next commit.
        self._replayable = True
        self._since: float | None = None  # time.monotonic() when the oldest pending record was settled
        self._pure: dict[str, bool] = {}

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
        self,
        step: Step,
        record: dict[str, Any],
        private: Mapping[str, Any] | None,
        event: str,
        *,
        derived: bool = False,
        **fields: Any,
    ) -> None:
        """A step's record, to be committed with the next write (its progress event is heard then).

        ``derived``: the loop decided it (a skip) from the records before it, so a replay decides it
        again; otherwise the record is replayable only if the step's operation is pure."""
        self._pending.append((step.id, record, private))
        self._later.append({"event": event, "step": step.id, **fields})
        self._remember(step.id, record, private)
        if self._since is None:
            self._since = time.monotonic()
        if not (derived or self._is_pure(step)):
            self._replayable = False

    def _is_pure(self, step: Step) -> bool:
        """Whether ``step`` is batched as pure: its operation is declared pure (an uninstalled one is
        not) and it has no ``retry`` policy. A retried step's attempts are each recorded (a ``running``
        record per attempt, as an effectful step's), so the event log and the timeline hold every
        attempt; its backoff dwarfs the commits that costs."""
        if step.retry is not None:
            return False
        pure = self._pure.get(step.do)
        if pure is None:
            implementation = self.plans.operations.get(step.do)
            pure = self._pure[step.do] = implementation is not None and implementation.spec.pure
        return pure

    def _must_commit(self) -> bool:
        """Before a pure step: whether the pending records must be committed first (one is not
        replayable, or the run reached its bounds)."""
        if not self._pending:
            return False
        if not self._replayable or len(self._pending) >= PURE_BATCH_STEPS:
            return True
        return self._since is not None and time.monotonic() - self._since >= PURE_BATCH_SECONDS

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
        if meter.SINK is not None:
            for _, record, _ in self._pending:
                meter.SINK.step(str(record.get("state")))
            if start is not None:
                meter.SINK.step(str(start[1].get("state")))
        self._pending.clear()
        self._replayable, self._since = True, None
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
        with tracing.plan_span(
            plan_id,
            str(plan.data.get("content_sha256") or ""),
            recipe.name,
            first=plan.state == "submitted",
            attributes={"corral.plan.id": plan_id, "corral.plan.recipe": recipe.name, "corral.plan.from": plan.state},
        ) as span:
            done = await self._run(plan_id, plan, recipe)
            span.set_attribute("corral.plan.state", done.state)
            return done

    async def _run(self, plan_id: str, plan: Instance, recipe: Recipe) -> Instance:
        plans = self.plans
        plan = self._fire(plan_id, "start", observations={"runner_status": lockstatus.status(plan.data.get("runner"))})
        self._emit(plan_id, "plan_started", recipe=recipe.name, steps=[s.id for s in recipe.steps])
        started = plans.plan(plan_id)  # the step records, once (start moved an old-layout plan's to parts)
        self.private = {k: dict(v) for k, v in (started.data.get("private") or {}).items() if isinstance(v, dict)}
        for step_id, record in (started.data.get("steps") or {}).items():
            self._remember(step_id, dict(record), None)
        stop = threading.Event()
        beat = threading.Thread(
            target=self._heartbeat, args=(plan_id, stop, tracing.current()), name=f"corral-plan-lease-{plan_id}"
        )
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

    def _heartbeat(self, plan_id: str, stop: threading.Event, trace: Any = None) -> None:
        """Renew this runner's lease on the plan every third of its TTL while the steps run (its
        renewals traced under the plan's span, ``trace``).

        Ends quietly when the plan is no longer running under this runner (it paused or ended, or
        another runner took it after the lease expired: the step loop's next write then stops)."""
        with tracing.attached(trace):
            self._beat(plan_id, stop)

    def _beat(self, plan_id: str, stop: threading.Event) -> None:
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
                    derived=True,
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
                        skipped = {"state": "skipped", "reason": reason}
                        self._settle(step, skipped, None, "step_skipped", derived=True, reason=reason)
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
                        derived=True,
                        reason="when is false",
                    )
                    index += 1
                    continue
            with tracing.span(
                f"step {step.do}",
                {"corral.plan.id": plan_id, "corral.step.id": step.id, "corral.step.do": step.do},
            ) as span:
                if record is not None and record.get("state") == "waiting":
                    outcome = self._decided(plan, step, record)
                else:
                    outcome = await self._attempts(plan, step, record, inputs, outputs)
                span.set_attribute("corral.step.outcome", outcome.kind)
                attempt = (self.records.get(step.id) or {}).get("attempt")
                if isinstance(attempt, int):
                    span.set_attribute("corral.step.attempt", attempt)
                if outcome.error:
                    tracing.mark_error(span, str(outcome.error.get("code") or "step_failed"))
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
        pure = self._is_pure(step)
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
                except StoreUnavailableError:
                    raise  # the store is gone, not the step: see below
                except Exception as exc:  # noqa: BLE001 - any error in a step fails the step, never strands the plan
                    resolution = Resume("fail", error=_as_corral_error(exc, step))
                self._emit(plan_id, "step_resumed", step=step.id, attempt=attempt, resolution=resolution.kind)
                if resolution.kind == "pause":
                    return _Outcome("paused", plan, reason=f"step {step.id}: {resolution.reason}")
                if resolution.kind == "done":
                    result = resolution.outputs
                elif resolution.kind == "fail":
                    error = resolution.error
            elif pure:
                # No running record: a crash before this step's outcome is committed replays it.
                if self._must_commit():
                    plan = self._write("step")
                self._later.append({"event": "step_started", "step": step.id, "do": step.do, "attempt": attempt})
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
                except StoreUnavailableError:
                    # Invariant: a step's outcome is recorded only if its operation said what it was. The
                    # store's server went away under the operation: it may have acted (a commit whose
                    # answer was lost), so this is no failure of the step. Recording one would end the
                    # plan ``failed`` whenever the server is back by the time that record is written
                    # (an immediate restart races the next connection); the step stays ``running``,
                    # this run stops with ``store_unavailable`` and the next asks the operation (resume).
                    raise
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
                retrying = {"step": step.id, "attempt": attempt, "error": summary, "delay": round(delay, 3)}
                if self._later:  # a pure step's attempt, not committed yet: heard in order, after the commit
                    self._later.append({"event": "step_retrying", **retrying})
                else:
                    self._emit(plan_id, "step_retrying", **retrying)
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
