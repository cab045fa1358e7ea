"""Fire one trigger on one instance, following the transition protocol of DESIGN.md.

1. Read the instance inside a serialized store transaction (an unwritten one is in the initial state).
2. Ask the transition table for the candidate transitions; the first whose guards all pass is taken.
   Guards judge fresh observations the caller made just before, and the store as of this transaction.
3. Apply the transition's updates to the data; check the result against the declared fields.
4. Compare-and-set the instance and append the event, in the same transaction.
5. If the transition has effects, that write recorded the intent (an intermediate state). Outside
   the transaction: perform the effects, each behind a *gate* (the instance still at the intent's
   version, the ``recheck`` guards passing) checked immediately before it and, where the adapter
   allows, atomically with its hand-over (``ctx.gate(tx)``); then compare-and-set the outcome
   (``success``/``failure``/``ambiguous``) with its own event. A gate refusal records ``failure``
   (nothing was done) and raises. A crash or an exception between the two writes leaves the
   intermediate state for ``reconcile``; nothing is retried. An outcome whose instance moved
   meanwhile is logged as a ``late_outcome`` event and reported as what it was, never applied.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from runner import faults
from runner.context import Claim, Context, EffectResult, Event, Instance, Rejection
from runner.definitions.library import Library
from runner.definitions.model import MachineSpec, Ref, TransitionSpec
from runner.definitions.table import TransitionTable
from runner.effects import EFFECTS
from runner.errors import (
    AuthorityMovedError,
    ConflictError,
    CorralError,
    InvalidError,
    NotFoundError,
    OutcomeUnrecordedError,
    RefusedError,
    TransitionNotAllowedError,
)
from runner.guards import GUARDS
from runner.log import get_logger
from runner.observe import meter, tracing
from runner.store.abc import Store, Transaction
from runner.updates import UPDATES

logger = get_logger(__name__)  # imports logging only to log (cold start)


@dataclass(frozen=True, init=False)
class Request:
    """One trigger to fire.

    ``params`` are public and recorded in the event log; ``secrets`` (a presented token, a prompt's
    text) reach guards and effects but are never recorded. ``resources`` are the adapters effects act
    through (``agents``: the agent host). ``observations`` are fresh reads of the world, made by the caller just before.
    ``expected_version``, when given, is compare-and-set against the version the caller last saw.
    """

    instance_id: str
    trigger: str
    params: Mapping[str, Any] = field(default_factory=dict)
    secrets: Mapping[str, str] = field(default_factory=dict, repr=False)
    observations: Mapping[str, Any] = field(default_factory=dict)
    actor: str = "unknown"
    expected_version: int | None = None
    resources: Mapping[str, Any] = field(default_factory=dict, repr=False)

    def __init__(
        self,
        instance_id: str,
        trigger: str,
        params: Mapping[str, Any] | None = None,
        secrets: Mapping[str, str] | None = None,
        observations: Mapping[str, Any] | None = None,
        actor: str = "unknown",
        expected_version: int | None = None,
        resources: Mapping[str, Any] | None = None,
    ) -> None:
        # One call instead of a frozen dataclass's field-by-field object.__setattr__ (see runner.context).
        self.__dict__.update(
            instance_id=instance_id,
            trigger=trigger,
            params={} if params is None else params,
            secrets={} if secrets is None else secrets,
            observations={} if observations is None else observations,
            actor=actor,
            expected_version=expected_version,
            resources={} if resources is None else resources,
        )


@dataclass(frozen=True, init=False)
class Result:
    """What a fired trigger did: the instance as it now stands, its events, and the one-time reply.

    ``reply`` may hold secrets (a freshly issued token): hand it to the caller once, never log it.
    ``outcome`` is set for two-phase transitions (``success``, ``failure`` or ``ambiguous``).
    """

    instance: Instance
    events: tuple[Event, ...]
    reply: Mapping[str, Any] = field(default_factory=dict, repr=False)
    outcome: str | None = None

    def __init__(
        self,
        instance: Instance,
        events: tuple[Event, ...],
        reply: Mapping[str, Any] | None = None,
        outcome: str | None = None,
    ) -> None:
        self.__dict__.update(instance=instance, events=events, reply={} if reply is None else reply, outcome=outcome)


@dataclass(frozen=True)
class Plan:
    """What a trigger would do (:meth:`Engine.plan`): from the instance as read, to ``dest``, acting
    through ``effects`` (empty for a store-only transition), ending in ``then`` if the effects succeed."""

    instance: Instance
    dest: str
    effects: list[str]
    then: str
    description: str = ""


class Engine:
    """Executes triggers against a store, with machines from a library."""

    def __init__(self, store: Store, library: Library) -> None:
        self.store = store
        self.library = library

    def fire(self, spec: MachineSpec, request: Request) -> Result:
        """Fire ``request.trigger`` on the instance ``request.instance_id`` of machine ``spec``.

        Raises:
            TransitionNotAllowedError: the trigger has no transition from the current state.
            NotFoundError: ``instance_unknown``, the same for an instance never written.
            RefusedError: a guard refused; ``code`` is the guard's rejection code.
            ConflictError: the instance moved since ``expected_version`` or during an effect.
            StoreBusyError: the store stayed locked.
        """
        if tracing.active():
            with tracing.span(
                f"transition {spec.name}:{request.trigger}",
                {
                    "corral.machine": spec.name,
                    "corral.trigger": request.trigger,
                    "corral.instance.id": request.instance_id,
                },
            ) as span:
                result = self._fire(spec, request, span)
                span.set_attribute("corral.state.to", result.instance.state)
                if result.outcome is not None:
                    span.set_attribute("corral.effect.outcome", result.outcome)
                return result
        return self._fire(spec, request, None)

    def _fire(self, spec: MachineSpec, request: Request, span: Any) -> Result:
        table = self.library.table(spec)
        with self.store.write() as tx:
            chosen, after, first, reply = self._first_phase(tx, spec, table, request, span)
        if meter.SINK is not None:
            meter.SINK.transition(spec.name, request.trigger)
        if not chosen.two_phase:
            return Result(after, (first,), reply)
        return self._second_phase(spec, chosen, after, request, first, reply)

    def fire_many(self, spec: MachineSpec, requests: list[Request]) -> list[Result | CorralError]:
        """Fire several triggers whose first steps must be admitted together (an ask-many's receipts).

        Invariant: every request's guards are judged, and every intent recorded, in **one** serialized
        transaction: one refusal raises and leaves nothing written (all or nothing). Then each two-phase
        request's effect runs behind its own gate, in order; a failure there is that request's result
        (an error in the list), not a reason to skip the others, whose intents are already recorded.
        """
        if tracing.active():
            first_trigger = requests[0].trigger if requests else ""
            with tracing.span(
                f"transition {spec.name}:{first_trigger}",
                {
                    "corral.machine": spec.name,
                    "corral.trigger": first_trigger,
                    "corral.transition.count": len(requests),
                },
            ):
                return self._fire_many(spec, requests)
        return self._fire_many(spec, requests)

    def _fire_many(self, spec: MachineSpec, requests: list[Request]) -> list[Result | CorralError]:
        table = self.library.table(spec)
        firsts = []
        with self.store.write() as tx:
            for request in requests:
                firsts.append((request, *self._first_phase(tx, spec, table, request)))
        if meter.SINK is not None:
            for request in requests:
                meter.SINK.transition(spec.name, request.trigger)
        results: list[Result | CorralError] = []
        for request, chosen, after, first, reply in firsts:
            if not chosen.two_phase:
                results.append(Result(after, (first,), reply))
                continue
            try:
                results.append(self._second_phase(spec, chosen, after, request, first, reply))
            except CorralError as exc:
                results.append(exc)
        return results

    def _first_phase(
        self, tx: Transaction, spec: MachineSpec, table: TransitionTable, request: Request, span: Any = None
    ) -> tuple[TransitionSpec, Instance, Event, dict[str, Any]]:
        """Steps 2-4 inside ``tx``: choose the transition, apply its updates, compare-and-set, log it."""
        before = tx.get(request.instance_id) or Instance(request.instance_id, spec.name, spec.initial, 0, {})
        if before.machine != spec.name:
            raise InvalidError(
                f"instance {before.id!r} belongs to machine {before.machine!r}, not {spec.name!r}",
                code="instance_machine_mismatch",
                instance=before.id,
            )
        if request.expected_version is not None and before.version != request.expected_version:
            raise ConflictError(
                f"instance {before.id!r} is at version {before.version}, not {request.expected_version}",
                instance=before.id,
                expected_version=request.expected_version,
                actual_version=before.version,
            )
        if not table.allows(request.trigger, before.state):
            raise _not_allowed(spec, before, request.trigger)
        ctx = self._context(before, request, tx)
        firing = table.fire(request.trigger, before.state, ctx)
        chosen = firing.chosen
        if span is not None:
            span.set_attribute("corral.state.from", before.state)
            tracing.guard_verdicts(span, chosen, firing.rejections)
        if chosen is None:
            raise _refused(before, request.trigger, firing.rejections)
        data, reply, parts, claims = _apply_updates(spec, chosen, ctx)
        after = tx.put(before, chosen.dest, data)
        _keep_claims(tx, spec, after, claims)
        changed = _changed(spec, before.data, data)
        if parts:
            _put_parts(tx, spec, after, parts, changed)
        payload: dict[str, Any] = {"params": dict(request.params), "changed": changed}
        if chosen.two_phase:
            payload["phase"] = "intent"
        first = tx.append(after, request.trigger, before.state, request.actor, payload)
        logger.debug("%s %s: %s -> %s (seq %d)", spec.name, request.trigger, before.state, after.state, first.seq)
        return chosen, after, first, reply

    def plan(self, spec: MachineSpec, request: Request) -> Plan:
        """What :meth:`fire` would do with ``request`` now, without writing or acting: the transition
        its guards would choose on the same observations, or the refusal :meth:`fire` would raise.

        Why: a dry run (``reconcile`` without ``--apply``) must report the very decision the real run
        would take, from the machine's own guards, not from a second copy of the rules in the service.
        The guards run in a read snapshot, so a plan is advice: the world may move before an apply,
        which then judges afresh. Updates and effects are not run (an update may mint a token).

        Raises the same errors as :meth:`fire` does before its first write (``trigger_unknown``,
        ``transition_not_allowed``, a guard's :class:`RefusedError`, ``instance_machine_mismatch``).
        """
        table = self.library.table(spec)
        with self.store.read() as view:
            before = view.get(request.instance_id) or Instance(request.instance_id, spec.name, spec.initial, 0, {})
            if before.machine != spec.name:
                raise InvalidError(
                    f"instance {before.id!r} belongs to machine {before.machine!r}, not {spec.name!r}",
                    code="instance_machine_mismatch",
                    instance=before.id,
                )
            if not spec.transitions_for(request.trigger, before.state):
                raise _not_allowed(spec, before, request.trigger)
            ctx = Context(
                instance=before,
                trigger=request.trigger,
                params=request.params,
                secrets=request.secrets,
                observations=request.observations,
                now=self.store.now(),
                view=view,
                actor=request.actor,
                data=dict(before.data),
            )
            firing = table.fire(request.trigger, before.state, ctx)
        if firing.chosen is None:
            raise _refused(before, request.trigger, firing.rejections)
        chosen = firing.chosen
        then = chosen.outcomes.success if chosen.two_phase and chosen.outcomes is not None else chosen.dest
        return Plan(before, chosen.dest, [e.name for e in chosen.effects], then, chosen.description)

    def _context(self, instance: Instance, request: Request, tx: Transaction) -> Context:
        return Context(
            instance=instance,
            trigger=request.trigger,
            params=request.params,
            secrets=request.secrets,
            observations=request.observations,
            now=tx.now,
            view=tx,
            actor=request.actor,
            data=dict(instance.data),
        )

    def _second_phase(
        self,
        spec: MachineSpec,
        chosen: TransitionSpec,
        intent: Instance,
        request: Request,
        first: Event,
        reply: Mapping[str, Any],
    ) -> Result:
        assert chosen.outcomes is not None  # the schema requires outcomes with effects
        gate = _Gate(self, chosen, intent, request)
        ctx = Context(
            instance=intent,
            trigger=request.trigger,
            params=request.params,
            secrets=request.secrets,
            observations=request.observations,
            now=self.store.now(),
            view=_NoView(),
            actor=request.actor,
            data=intent.data,
            resources=request.resources,
            gate=gate,
        )
        refusal: AuthorityMovedError | None = None
        try:
            _fault(spec, chosen, "intent")
            result = _run_effects(chosen, ctx)
        except AuthorityMovedError as exc:
            # The gate refused before anything was done: certainly not started.
            refusal = exc
            result = EffectResult("failure", _not_started_data(spec, exc), message=f"not started: {exc.message}")
        _fault(spec, chosen, "effect")
        dest = {
            "success": chosen.outcomes.success,
            "failure": chosen.outcomes.failure,
            "ambiguous": chosen.outcomes.ambiguous or chosen.dest,
        }[result.outcome]
        data = {**intent.data, **result.data}
        _check_data(spec, data, result.data, "effects", chosen.trigger)
        payload: dict[str, Any] = {
            "phase": "outcome",
            "outcome": result.outcome,
            "changed": _changed(spec, intent.data, data),
        }
        if result.message:
            payload["message"] = result.message
        if refusal is not None:
            payload["not_started"] = refusal.code
        with self.store.write() as tx:
            current = tx.get(intent.id)
            if current is None or current.version != intent.version:
                # Invariant: an outcome is recorded only on the intent it belongs to. The instance moved
                # meanwhile (an abandon, a reconcile): say what the effect did, never a bare conflict.
                late = self._late(tx, current, request, result, refusal)
            else:
                final = tx.put(intent, dest, data)
                _keep_claims(tx, spec, final, None)
                second = tx.append(final, f"{request.trigger}:{result.outcome}", intent.state, request.actor, payload)
                late = None
        if late is not None:
            raise late
        if refusal is not None:
            refusal.details.update(instance=intent.id, state=final.state, outcome="failure", started=False)
            raise refusal
        return Result(final, (first, second), {**reply, **result.reply}, result.outcome)

    def _late(
        self,
        tx: Transaction,
        current: Instance | None,
        request: Request,
        result: EffectResult,
        refusal: AuthorityMovedError | None,
    ) -> CorralError:
        """The error for an outcome whose instance moved during the effect; the outcome is logged as a
        fact (an event at the instance's current version) without changing the instance."""
        state = current.state if current is not None else None
        if current is not None:
            tx.append(
                current,
                f"{request.trigger}:{result.outcome}",
                current.state,
                request.actor,
                {"phase": "late_outcome", "outcome": result.outcome, "message": result.message},
            )
        if refusal is not None:
            refusal.details.update(instance=request.instance_id, state=state, started=False)
            return refusal
        if result.outcome == "failure":
            return AuthorityMovedError(
                f"{request.instance_id} moved to {state!r} while {request.trigger!r} ran; the effect did not happen "
                f"({result.message})",
                code="instance_moved",
                instance=request.instance_id,
                state=state,
                effect_outcome="failure",
                started=False,
            )
        return OutcomeUnrecordedError(
            f"{request.instance_id} moved to {state!r} while {request.trigger!r} ran; the effect's outcome was "
            f"{result.outcome!r} ({result.message or 'done'}) and is logged, not applied",
            instance=request.instance_id,
            state=state,
            effect_outcome=result.outcome,
            effect_data=dict(result.data),
        )


class _Gate:
    """The authority check of one two-phase transition (see :class:`runner.context.Gate`)."""

    def __init__(self, engine: Engine, chosen: TransitionSpec, intent: Instance, request: Request) -> None:
        self._engine = engine
        self._chosen = chosen
        self._intent = intent
        self._request = request

    @property
    def store(self) -> Store:
        return self._engine.store

    def __call__(self, tx: Any = None) -> None:
        if tx is None:
            with self._engine.store.write() as own:
                self._check(own)
        else:
            self._check(tx)

    def _check(self, tx: Transaction) -> None:
        intent = self._intent
        current = tx.get(intent.id)
        if current is None or current.version != intent.version:
            state = current.state if current is not None else None
            raise AuthorityMovedError(
                f"{intent.id} is now {state!r} (version {current.version if current else 0}, the intent was "
                f"version {intent.version}): the {self._request.trigger!r} recorded for it is void, nothing was done",
                code="instance_moved",
                instance=intent.id,
                state=state,
            )
        ctx = self._engine._context(intent, self._request, tx)
        for ref in self._chosen.recheck:
            rejection = _guard(ref)(ctx, **ref.args)
            if rejection is not None:
                raise AuthorityMovedError(
                    f"{rejection.message}; nothing was done",
                    code=rejection.code,
                    guard=ref.name,
                    **dict(rejection.details),
                )


def _not_started_data(spec: MachineSpec, refusal: AuthorityMovedError) -> dict[str, Any]:
    """What a failure outcome records when the gate refused: the machine's own failure fields, if declared."""
    data: dict[str, Any] = {}
    if "failure" in spec.fields:
        data["failure"] = f"not started: {refusal.message}"
    if "reason" in spec.fields:
        data["reason"] = refusal.code
    if "message" in spec.fields:
        data["message"] = f"not started: {refusal.message}"
    return data


def _fault(spec: MachineSpec, chosen: TransitionSpec, point: str) -> None:
    """A crash point of the test harness (:mod:`runner.faults`): ``<machine>.<trigger>:<intent|effect>``."""
    faults.point(f"{spec.name}.{chosen.trigger}:{point}")


class _NoView:
    """Effects act on the world, not the store: they get no store access."""

    def get(self, instance_id: str) -> Instance | None:
        raise CorralError("effects may not read the store", code="internal")

    def find(self, machine: str, states: Any = None) -> list[Instance]:
        raise CorralError("effects may not read the store", code="internal")

    def part(self, instance_id: str, key: str) -> dict[str, Any] | None:
        raise CorralError("effects may not read the store", code="internal")

    def overlapping_claims(self, space: Any, scopes: Any, kinds: Any = None, states: Any = None) -> list[Claim]:
        raise CorralError("effects may not read the store", code="internal")


def _guard(ref: Ref) -> Any:
    entry = GUARDS.get(ref.name)
    if entry is None:
        raise CorralError(f"guard {ref.name!r} is not registered", code="spec_unknown_guard")
    return entry.fn


def _run_effects(chosen: TransitionSpec, ctx: Context) -> EffectResult:
    """Run the effects in order. Before each, the gate checks the authority still holds (an effect
    that can act atomically with the store checks it again at the hand-over itself, through
    ``ctx.gate``); a refusal (:class:`AuthorityMovedError`) propagates: nothing more was done."""
    merged_data: dict[str, Any] = {}
    merged_reply: dict[str, Any] = {}
    assert ctx.gate is not None
    for ref in chosen.effects:
        entry = EFFECTS.get(ref.name)
        if entry is None:
            return EffectResult("ambiguous", merged_data, merged_reply, f"effect {ref.name!r} is not registered")
        ctx.gate()
        with tracing.span(f"effect {ref.name}", {"corral.effect.name": ref.name}) as span:
            try:
                result = entry.fn(ctx, **ref.args)
            except AuthorityMovedError:
                raise
            except Exception as exc:
                logger.exception("effect %s of %s raised", ref.name, ctx.instance.id)
                tracing.mark_error(span, "effect_raised")
                return EffectResult("ambiguous", merged_data, merged_reply, f"effect {ref.name!r} raised: {exc}")
            span.set_attribute("corral.effect.outcome", str(result.outcome))
        if result.outcome not in ("success", "failure", "ambiguous"):
            return EffectResult(
                "ambiguous",
                merged_data,
                merged_reply,
                f"effect {ref.name!r} reported an unknown outcome {result.outcome!r}",
            )
        merged_data.update(result.data)
        merged_reply.update(result.reply)
        if result.outcome != "success":
            return EffectResult(result.outcome, merged_data, merged_reply, result.message)
    return EffectResult("success", merged_data, merged_reply)


def _keep_claims(tx: Transaction, spec: MachineSpec, instance: Instance, claims: Any) -> None:
    """Write the claims the updates declared, in the compare-and-set's transaction.

    Invariant: an instance in a terminal state holds no claims (it never moves again, so they could
    only ever grow the index); guards count claims only of instances in the states they name.
    """
    if claims is None and spec.states[instance.state].terminal:
        claims = ()
    if claims is not None:
        tx.set_claims(instance.id, claims)


def _apply_updates(
    spec: MachineSpec, chosen: TransitionSpec, ctx: Context
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Mapping[str, Any]], tuple[tuple[str, str, str], ...] | None]:
    # ctx.data is the engine's working copy: each update sees what the earlier ones wrote.
    data = ctx.data
    assert isinstance(data, dict)
    written: dict[str, Any] = {}
    reply: dict[str, Any] = {}
    parts: dict[str, Mapping[str, Any]] = {}
    claims: tuple[tuple[str, str, str], ...] | None = None
    for ref in chosen.updates:
        entry = UPDATES.get(ref.name)
        if entry is None:
            raise CorralError(f"update {ref.name!r} is not registered", code="spec_unknown_update")
        update = entry.fn(ctx, **ref.args)
        data.update(update.data)
        written.update(update.data)
        reply.update(update.reply)
        parts.update(update.parts)
        if update.claims is not None:
            claims = update.claims
    _check_data(spec, data, written, "updates", chosen.trigger)
    return data, reply, parts, claims


def _put_parts(
    tx: Transaction, spec: MachineSpec, after: Instance, parts: Mapping[str, Mapping[str, Any]], changed: dict[str, Any]
) -> None:
    """Write an update's parts beside the instance; log each public field's written entries in ``changed``.

    Invariant: a part is an entry (a JSON object) of a declared object field, named ``FIELD/NAME``."""
    hidden = spec.secret_field_names
    for key, value in parts.items():
        name, _, entry = key.partition("/")
        declared = spec.fields.get(name)
        if not entry or declared is None or declared.type != "object" or not isinstance(value, Mapping):
            raise CorralError(
                f"an update wrote the part {key!r}, not an object entry of a declared object field of {spec.name!r}",
                code="data_invalid",
                field=name,
            )
        tx.put_part(after.id, key, value)
        if name not in hidden:
            logged = changed.get(name)
            if not isinstance(logged, dict):
                logged = changed[name] = {}
            logged[entry] = dict(value)


def _check_data(
    spec: MachineSpec, data: Mapping[str, Any], written: Mapping[str, Any], what: str, trigger: str
) -> None:
    """Invariant: an instance's data holds only declared fields, each of its declared type.

    Only ``written`` needs checking: the rest of ``data`` was checked when it was written. ``what``
    (``updates``, ``effects``) of ``trigger`` wrote it, as the error says.
    """
    fields = spec.fields
    for key, value in written.items():
        declared = fields.get(key)
        if declared is None:
            raise CorralError(
                f"{what} of {trigger!r} wrote {key!r}, which machine {spec.name!r} does not declare",
                code="data_invalid",
                field=key,
            )
        if not declared.accepts(value):
            raise CorralError(
                f"{what} of {trigger!r} wrote {key!r} = {value!r}, not a {declared.type}",
                code="data_invalid",
                field=key,
            )
    for name in spec.required_field_names:
        if data.get(name) is None:
            raise CorralError(
                f"{what} of {trigger!r} left the required field {name!r} empty", code="data_invalid", field=name
            )


_SCALARS = frozenset({str, int, float, bool, type(None)})  # JSON values that are never mappings: no ABC check


def _changed(spec: MachineSpec, before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    """The public fields a transition changed, for the event log (secret fields never appear).

    For a mapping that changed (a plan's step records), only its changed keys are recorded, so an
    event stays the size of what happened rather than of everything that happened before it.
    """
    hidden = spec.secret_field_names
    changed: dict[str, Any] = {}
    for key, value in after.items():
        old = before.get(key)
        if old == value or key in hidden:
            continue
        if type(old) not in _SCALARS and isinstance(old, Mapping) and isinstance(value, Mapping):
            changed[key] = {k: value.get(k) for k in {*old, *value} if old.get(k) != value.get(k)}
        else:
            changed[key] = value
    return changed


def _not_allowed(spec: MachineSpec, instance: Instance, trigger: str) -> CorralError:
    allowed = sorted({t.trigger for t in spec.transitions if instance.state in t.sources})
    if trigger not in spec.triggers():
        return InvalidError(
            f"machine {spec.name!r} has no trigger {trigger!r} (it has: {', '.join(spec.triggers())})",
            code="trigger_unknown",
            machine=spec.name,
            trigger=trigger,
        )
    if not instance.exists:
        return NotFoundError(
            f"{instance.id!r} does not exist yet; {trigger!r} needs an existing instance",
            code="instance_unknown",
            instance=instance.id,
            trigger=trigger,
            allowed=allowed,
        )
    return TransitionNotAllowedError(
        f"{trigger!r} is not allowed while {instance.id!r} is {instance.state!r}"
        + (f" (allowed: {', '.join(allowed)})" if allowed else ""),
        instance=instance.id,
        state=instance.state,
        trigger=trigger,
        allowed=allowed,
    )


def _refused(
    instance: Instance, trigger: str, rejections: list[tuple[str, Rejection]], left_in: str | None = None
) -> RefusedError:
    guard, rejection = rejections[0]
    details: dict[str, Any] = {"instance": instance.id, "trigger": trigger, "guard": guard, **rejection.details}
    if len(rejections) > 1:
        details["other_rejections"] = [{"guard": g, "code": r.code, "message": r.message} for g, r in rejections[1:]]
    message = rejection.message
    if left_in is not None:
        details["left_in"] = left_in
        message += f" (the instance stays {left_in!r} for reconcile)"
    return RefusedError(message, code=rejection.code, **details)
