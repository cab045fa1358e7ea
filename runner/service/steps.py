"""The step-operation contract: what a recipe step's operation is given, returns and raises, and the
registry that names operations.

A step operation is one object: its catalogue entry (``spec``, an
:class:`~runner.definitions.operations.OperationSpec`), ``run(ctx, args) -> Outputs`` and
``resume(ctx, args) -> Resume``. Operations that create an instance (a lease, a receipt) use the
step's deterministic key (:attr:`OpContext.key`) as the instance id, so ``resume`` can look the
instance up and decide, from its machine's state, whether the step already happened (``done``), never
happened (``run``), or might have happened in a way only a person can judge (``pause``). Nothing is
blindly sent twice.

The built-ins live in :mod:`runner.plans.ops` and register into its registry; other distributions add
operations through the entry point group ``corral.operations`` (see
:mod:`runner.definitions.operations`). The plans component (:mod:`runner.service.plans`) is handed a
registry and runs whatever it names; this module imports nothing from :mod:`runner.plans`, so the
service never depends on the plans package (which depends on the service).

Outputs are split: ``public`` values (cursors, tokens, digests) are recorded with the step and appear
in the event log; ``private`` values (agent output text) are kept with the plan but never logged.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from runner.definitions import operations as catalogue
from runner.definitions.operations import OperationSpec
from runner.errors import CorralError, CredentialError

if TYPE_CHECKING:
    from runner.context import Instance
    from runner.definitions.model import MachineSpec
    from runner.definitions.recipes import Recipe
    from runner.fence import Credential
    from runner.service import Service
    from runner.service.inputs.plans import PlanRunInput, PlanSubmitInput

Progress = Callable[[dict[str, Any]], None]
"""Where a plan run reports each plan and step event as it lands."""


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


class PlansPort(Protocol):
    """What a step operation may use of the plans component (``OpContext.plans``):
    :class:`runner.service.plans.Plans` is the one implementation."""

    @property
    def service(self) -> Service: ...

    @property
    def credentials(self) -> CredentialKeeper: ...

    @property
    def scratch(self) -> Path | None: ...

    def plan(self, plan_id: str) -> Instance: ...

    def submit(self, inp: PlanSubmitInput) -> Any: ...

    async def run(self, inp: PlanRunInput, progress: Progress | None = None) -> Instance: ...

    def spend(self, plan: Instance) -> dict[str, Any]: ...


class RunHost(PlansPort, Protocol):
    """What a plan's step loop (:class:`runner.service.plan_run.PlanRun`) uses of the component."""

    @property
    def spec(self) -> MachineSpec: ...

    @property
    def operations(self) -> OperationLookup: ...

    @property
    def runner_ttl(self) -> float: ...

    def recipe_of(self, plan: Instance) -> Recipe: ...

    def contain(self, do: str, args: Mapping[str, Any]) -> None: ...

    def _fire(
        self,
        plan_id: str,
        trigger: str,
        params: Mapping[str, Any] | None = None,
        secrets: Mapping[str, str] | None = None,
        observations: Mapping[str, Any] | None = None,
    ) -> Instance: ...


SUBKEYS = 8  # the most instances one step creates (receipt.ask_many's requests)


@dataclass
class Outputs:
    public: dict[str, Any] = field(default_factory=dict)
    private: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Resume:
    """How to continue a step found in flight: ``run`` it, it is ``done``, ``pause`` for a person, or ``fail``."""

    kind: str
    outputs: Outputs | None = None
    reason: str = ""
    error: CorralError | None = None


RUN = Resume("run")


class StepFailed(CorralError):
    """A ``flow.fail`` step, or an operation that reports failure without another error. The code is the step's."""

    category = "conflict"
    default_code = "step_failed"


class WaitsOnPerson(CorralError):
    """A step that cannot go on until a person decides. The plans component records the step
    ``waiting`` (its ``outputs`` kept) and pauses the plan with ``waiting_on: {kind, step, **details}``
    until ``corral plans decide`` approves or rejects it. ``kind`` says what waits: ``agent_blocked``
    (:class:`AgentBlocked`) or ``approval`` (:class:`ApprovalRequested`)."""

    category = "refused"
    default_code = "decision_needed"
    kind: ClassVar[str] = "decision"

    def __init__(self, message: str, outputs: Outputs, **details: Any) -> None:
        super().__init__(message, **details)
        self.outputs = outputs


class AgentBlocked(WaitsOnPerson):
    """A step's agent settled **blocked**: it waits on a person (a question, an approval). corral never
    answers it; the plans component records the step ``waiting`` (its outputs kept) and pauses the plan
    with ``waiting_on: {kind: agent_blocked, target, since}`` until ``corral plans decide`` approves (the
    step succeeds with what was collected) or rejects it (``decision_rejected``, catchable)."""

    default_code = "agent_blocked"
    kind = "agent_blocked"

    def __init__(self, message: str, outputs: Outputs, target: str, since: str | None) -> None:
        super().__init__(message, outputs, target=target, since=since)


class ApprovalRequested(WaitsOnPerson):
    """A ``human.approve`` step asks a person to approve: the plan pauses with ``waiting_on: {kind:
    approval, step, prompt, since, timeout, deadline}`` until ``corral plans decide`` approves (the step
    succeeds with ``{approved: true, reason, decided_by}``) or rejects it (``decision_rejected``); once
    ``deadline`` passed undecided the step fails with ``approval_timeout``. Both are catchable."""

    default_code = "approval_pending"
    kind = "approval"

    def __init__(self, message: str, prompt: str, since: str, timeout: float | None, deadline: str | None) -> None:
        super().__init__(message, Outputs(), prompt=prompt, since=since, timeout=timeout, deadline=deadline)


class NotCreatedByPlan(CorralError):
    """A step would act on a lease or receipt this plan did not create (a reviewer of the same name
    started by someone else, a lane whose start failed). The plans component records the step
    ``skipped`` with ``skipped: "not created by this plan"``: a plan acts only on what it created, by id."""

    category = "refused"
    default_code = "not_created_by_plan"


NOT_CREATED = "not created by this plan"


def step_key(plan_id: str, step_id: str, attempt: int, index: int | None = None) -> str:
    """The idempotency key of a step's attempt (``index``: of its ``index``-th instance)."""
    base = f"corral-plan:{plan_id}/{step_id}/{attempt}"
    return str(uuid.uuid5(uuid.NAMESPACE_URL, base if index is None else f"{base}/{index}"))


def attempt_keys(plan_id: str, step_id: str, attempt: int) -> set[str]:
    """Every key one attempt of a step may create instances under: its key and its subkeys."""
    return {step_key(plan_id, step_id, attempt)} | {
        step_key(plan_id, step_id, attempt, index) for index in range(SUBKEYS)
    }


@dataclass
class OpContext:
    """What an operation may use: the service's public methods, the plans component, the plan, the step,
    and the controller's credential."""

    plans: PlansPort
    plan_id: str
    step_id: str
    attempt: int
    controller_id: str
    timeout: float | None
    progress: Progress | None = None  # where a nested plan (recipe.call) reports its steps

    @property
    def service(self) -> Service:
        return self.plans.service

    @property
    def credentials(self) -> CredentialKeeper:
        """Where the plan's controller credential is kept between steps."""
        return self.plans.credentials

    @property
    def scratch(self) -> Path | None:
        """Where snapshots for sandboxed validation go (the plans component's)."""
        return self.plans.scratch

    @property
    def key(self) -> str:
        """This step's idempotency key: the same for the same plan, step and attempt."""
        return step_key(self.plan_id, self.step_id, self.attempt)

    def subkey(self, index: int) -> str:
        return step_key(self.plan_id, self.step_id, self.attempt, index)

    def plan(self) -> Instance:
        """The plan as it stands now."""
        return self.plans.plan(self.plan_id)

    def created_keys(self) -> set[str]:
        """Every instance key this plan's steps may have created: each recorded step's keys and
        subkeys for every attempt it reached (leases are ``MACHINE/KEY``, receipts ``receipt/KEY``)."""
        keys: set[str] = set()
        records = dict(self.plan().data.get("steps") or {})
        records.setdefault(self.step_id, {"attempt": self.attempt})
        for step_id, record in records.items():
            for attempt in range(1, max(int(record.get("attempt") or 1), 1) + 1):
                keys |= attempt_keys(self.plan_id, step_id, attempt)
        return keys

    def created(self, instance_id: str) -> bool:
        """Whether ``instance_id`` is one this plan created (its key derives from this plan's steps)."""
        return instance_id.partition("/")[2] in self.created_keys()

    def credential(self) -> Credential:
        found = self.credentials.load(self.controller_id)
        if found is None:
            raise CredentialError(
                f"no credential for controller {self.controller_id!r}: the plan must acquire it "
                "first (controller.acquire)",
                code="credential_missing",
            )
        return found


Run = Callable[[OpContext, dict[str, Any]], Awaitable[Outputs]]
ResumeFn = Callable[[OpContext, dict[str, Any]], Resume]


@runtime_checkable
class StepOperation(Protocol):
    """A step operation: its catalogue entry, how to run it, and how to resolve it found in flight."""

    @property
    def spec(self) -> OperationSpec: ...

    def run(self, ctx: OpContext, args: dict[str, Any]) -> Awaitable[Outputs]: ...

    def resume(self, ctx: OpContext, args: dict[str, Any]) -> Resume: ...


@dataclass(frozen=True)
class Operation:
    """A step operation made of two functions (how the built-ins are written; a plugin may use it too)."""

    spec: OperationSpec
    run_fn: Run
    resume_fn: ResumeFn | None = None  # None: safe to run again

    @property
    def name(self) -> str:
        return self.spec.name

    def run(self, ctx: OpContext, args: dict[str, Any]) -> Awaitable[Outputs]:
        return self.run_fn(ctx, args)

    def resume(self, ctx: OpContext, args: dict[str, Any]) -> Resume:
        return RUN if self.resume_fn is None else self.resume_fn(ctx, args)


class OperationRegistry:
    """Step operations by name: built-ins added at import, plugins (``corral.operations``) found on a miss.

    Invariant: a built-in's ``spec`` is its entry in the catalogue
    (:data:`runner.definitions.operations.OPERATIONS`), so what a recipe is checked against is what runs.
    """

    def __init__(self) -> None:
        self._entries: dict[str, StepOperation] = {}

    def add(self, op: StepOperation) -> StepOperation:
        """Register a built-in; registering another object under a taken name is a bug."""
        name = op.spec.name
        existing = self._entries.get(name)
        if existing is not None and existing is not op:
            raise ValueError(f"operation {name!r} is already registered")
        if catalogue.OPERATIONS.get(name) is not op.spec:
            raise ValueError(f"operation {name!r} is not the catalogue's (runner/definitions/operations.py)")
        self._entries[name] = op
        return op

    def operation(self, name: str, resume: ResumeFn | None = None) -> Callable[[Run], Run]:
        """Decorator: register ``run`` (and ``resume``) as the built-in ``name``, with its catalogue entry."""

        def register(fn: Run) -> Run:
            spec = catalogue.OPERATIONS.get(name)
            if spec is None:
                raise ValueError(f"operation {name!r} has no catalogue entry (runner/definitions/operations.py)")
            self.add(Operation(spec, fn, resume))
            return fn

        return register

    def get(self, name: str) -> StepOperation | None:
        """The operation ``name``: a built-in, else a plugin's; None if nobody has it."""
        found = self._entries.get(name)
        if found is None:
            loaded = catalogue.plugins().get(name)
            if isinstance(loaded, StepOperation):
                found = loaded
        return found

    def builtins(self) -> list[str]:
        """The built-in operations' names."""
        return sorted(self._entries)

    def names(self) -> list[str]:
        """Every operation's name, plugins included."""
        return sorted({*self._entries, *(n for n, o in catalogue.plugins().items() if isinstance(o, StepOperation))})

    def __iter__(self) -> Iterator[StepOperation]:
        for name in self.names():
            found = self.get(name)
            if found is not None:
                yield found
