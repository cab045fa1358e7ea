"""The operations a recipe step can ``do``: their parameters, outputs, and whether a retry is safe.

This is the catalogue recipes are checked against: what each operation takes and gives, never what
it does. The built-in implementations live in :mod:`runner.plans.ops` (one registered object per
entry here, each carrying its entry as ``spec``; a test ties the two). An operation is *safe to retry*
when running it twice has the effect of running it once (reads, waits, collects, verifications);
anything that hands a prompt over or starts or closes something is not, and a recipe may not put
``retry`` on it.

An operation is *pure* when it has no effect outside the plan's own record and its outputs follow
from its arguments alone (``flow.pass``, ``flow.fail``): it reads no clock, file, agent or other
instance. The plan runner commits a run of pure steps in one transaction, with whatever comes next
(the next effectful step's ``running`` record, a pause, the plan's end) or at a bound, instead of one
commit per step (:class:`runner.service.plan_run.PlanRun`): a runner killed in between replays those
steps, which changes nothing. Purity is declared per entry and reviewed per operation; the default
is not pure, and a pure operation is safe to retry by definition.

Other distributions add step operations through the entry point group ``corral.operations``
(``name = "package.module:object"``): the object carries its own catalogue entry as ``spec`` (an
:class:`OperationSpec` of the same name) beside ``run`` and ``resume``. :func:`find` and :func:`names`
see them; a plugin may not take a built-in name. They are loaded the first time a name is not found
among the built-ins, as guards are (:mod:`runner.registry`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from runner.log import get_logger

logger = get_logger(__name__)  # imports logging only to log (cold start)

GROUP = "corral.operations"


@dataclass(frozen=True)
class Param:
    name: str
    kind: str = "any"  # string, integer, number, boolean, array, object, any
    required: bool = False
    description: str = ""
    path: bool = False
    """A path on the runner's machine that the operation opens: a surface that confines paths (``corral
    serve --workdir-root``) checks it at submission and before the step runs."""


@dataclass(frozen=True)
class OperationSpec:
    name: str
    description: str
    params: tuple[Param, ...] = ()
    outputs: tuple[str, ...] = ()
    safe_to_retry: bool = False
    machine: str | None = None  # the machine the operation drives, for drawings
    pure: bool = False
    """No effect outside the plan's record, outputs a function of the arguments: a crash may replay it.

    Invariant: only an operation that acts on nothing but its arguments is marked pure; an agent, a
    lease, git, a file, the clock or another instance makes it effectful (the default)."""
    param_index: dict[str, Param] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.pure and not self.safe_to_retry:
            raise ValueError(f"operation {self.name!r}: a pure operation is safe to retry (running it twice is once)")
        self.param_index.update({p.name: p for p in self.params})


def _p(name: str, kind: str = "string", required: bool = False, description: str = "", path: bool = False) -> Param:
    return Param(name, kind, required, description, path)


_AGENT = (
    _p("host"),
    _p("model"),
    _p("effort"),
    _p("budget_usd", "number", description="Dollars the lease's runs may spend (the CLI's own cap too)."),
    _p("budget_tokens", "integer", description="Tokens the lease's runs may spend."),
    _p("max_turns", "integer", description="Model turns per run (the CLI enforces it)."),
)
_DENIALS = _p("allow_denials", "boolean", description="A run whose actions the CLI denied is not a failure.")
_SCHEMA = _p("schema", "object", description="A JSON Schema the agent's answer must match (a verdict).")
_RUN_OUT = ("denials", "denied", "verdict")  # verdict: a private output (the agent's words)

OPERATIONS: dict[str, OperationSpec] = {
    spec.name: spec
    for spec in (
        OperationSpec(
            "controller.acquire",
            "Acquire the plan's controller lease, or resume it with the credential held here.",
            (_p("authority_ref", required=True), _p("authority_sha256", required=True), _p("ttl_seconds", "integer")),
            ("lease_id", "generation", "expires_at"),
            safe_to_retry=True,
            machine="controller",
        ),
        OperationSpec(
            "controller.release",
            "Release the plan's controller lease with a checkpoint.",
            (
                _p("checkpoint_ref", required=True),
                _p(
                    "checkpoint_sha256",
                    description="Filled from the checkpoint with a memory:<id> ref; otherwise, when absent, "
                    "the SHA-256 of the ref's own text.",
                ),
            ),
            ("state",),
            machine="controller",
        ),
        OperationSpec(
            "reviewer.start",
            "Start a reviewer agent leased to the plan's controller.",
            (_p("name", required=True), _p("kind", required=True), _p("cwd", required=True, path=True), *_AGENT),
            ("lease", "pane_id", "seq"),
            machine="reviewer",
        ),
        OperationSpec(
            "reviewer.close",
            "Close a reviewer this plan started (lease: its start step's lease id; or name: the one this plan "
            "started under that name) at its cursor (the one observed now unless expected_seq is given).",
            (_p("lease"), _p("name"), _p("expected_seq", "integer"), _p("lines", "integer")),
            ("capture_sha256", "closing_seq", "state"),
            machine="reviewer",
        ),
        OperationSpec(
            "receipt.relay",
            "Hand a prompt to a leased agent with a receipt (does not wait).",
            (_p("target", required=True), _p("text", required=True), _SCHEMA),
            ("token", "before_seq", "after_seq"),
            machine="receipt",
        ),
        OperationSpec(
            "receipt.collect",
            "Collect a receipt's result (replays a completed one).",
            (_p("receipt", required=True), _p("timeout", "number"), _p("lines", "integer"), _DENIALS),
            ("token", "output", "output_sha256", "settled_seq", "status", *_RUN_OUT),
            safe_to_retry=True,
            machine="receipt",
        ),
        OperationSpec(
            "receipt.collect_many",
            "Collect every receipt listed (none: nothing to do), e.g. those left pending.",
            (_p("receipts", "array", required=True), _p("timeout", "number"), _p("lines", "integer"), _DENIALS),
            ("results",),
            safe_to_retry=True,
            machine="receipt",
        ),
        OperationSpec(
            "receipt.ask",
            "Relay a prompt and collect its result (resumable: never delivered twice).",
            (
                _p("target", required=True),
                _p("text", required=True),
                _p("timeout", "number"),
                _p("lines", "integer"),
                _SCHEMA,
                _DENIALS,
            ),
            ("token", "output", "output_sha256", "settled_seq", "status", *_RUN_OUT),
            machine="receipt",
        ),
        OperationSpec(
            "receipt.ask_many",
            "Ask 1-8 leased agents; mode all collects every result, first the first to settle.",
            (
                _p("requests", "array", required=True),
                _p("mode"),
                _p("timeout", "number"),
                _p("lines", "integer"),
                _DENIALS,
            ),
            ("results", "pending_receipts", "first"),
            machine="receipt",
        ),
        OperationSpec(
            "receipt.abandon",
            "Abandon a receipt on fresh evidence that its agent is settled.",
            (_p("receipt", required=True), _p("message")),
            ("state",),
            machine="receipt",
        ),
        OperationSpec(
            "wait.any",
            "Wait for the first of several leased agents to settle after its cursor.",
            (_p("targets", "array", required=True), _p("timeout", "number")),
            ("target", "status", "seq"),
            safe_to_retry=True,
        ),
        OperationSpec(
            "git.preflight",
            "Read a worktree's git facts (branch, HEAD, status digest, linked).",
            (_p("worktree", required=True, path=True),),
            ("branch", "head", "status_sha256", "linked", "default_branch", "common_dir"),
            safe_to_retry=True,
        ),
        OperationSpec(
            "memory.checkpoint",
            "Write a handoff checkpoint to a project's open session, starting one with goal if none is "
            "open; the outputs ref and sha256 are what a release records (ref is memory:<id>). Written once per step "
            "(its idempotency key), so safe to run again; with fallback_ref/fallback_sha256 a refusal gives those "
            "instead (written: false, error) rather than failing the step.",
            (
                _p("project", description="Empty: named after the repository's directory."),
                _p("agent", required=True),
                _p("summary", required=True),
                _p("goal"),
                _p("work_done", "array"),
                _p("current_state"),
                _p("next_steps", "array"),
                _p("blockers", "array"),
                _p("files", "array"),
                _p("commands", "array"),
                _p("verify"),
                _p("status"),
                _p("auto_files", "boolean"),
                _p("repository", path=True),
                _p("subdir", path=True),
                _p("fallback_ref", description="With fallback_sha256: the ref the step gives when it cannot write."),
                _p("fallback_sha256", description="With fallback_ref: its digest."),
            ),
            ("written", "replayed", "checkpoint_id", "session_id", "session_started", "ref", "sha256", "error"),
            safe_to_retry=True,
        ),
        OperationSpec(
            "writer.start",
            "Start a writer lane after Git preflight and scope checks.",
            (
                _p("name", required=True),
                _p("kind", required=True),
                _p("worktree", required=True, path=True),
                _p("branch", required=True),
                _p("base_commit", required=True),
                _p("expected_head", required=True),
                _p("expected_status_sha256", required=True),
                _p("owned_scopes", "array", required=True),
                _p("locked_scopes", "array"),
                _p("protected_branches", "array"),
                _p("purpose", required=True),
                _p("ticket_ref", required=True),
                _p("authority_ref", required=True),
                _p("authority_sha256", required=True),
                *_AGENT,
            ),
            ("lease", "pane_id", "seq"),
            machine="writer",
        ),
        OperationSpec(
            "writer.verify",
            "Run the repository's validations on a snapshot of the lane (lease: by id; name: a live lane of the "
            "controller), in the sandbox; fails with validation_failed when any validation fails.",
            (_p("lease"), _p("name")),
            ("passed", "head", "status_sha256", "results"),
            safe_to_retry=True,
            machine="writer",
        ),
        OperationSpec(
            "writer.release",
            "Checkpoint a lane this plan started (lease or name, as reviewer.close) and close its agent (at the "
            "cursor, HEAD and status observed now unless given).",
            (
                _p("lease"),
                _p("name"),
                _p("checkpoint_ref", required=True),
                _p("checkpoint_sha256", description="Filled from the checkpoint with a memory:<id> ref."),
                _p("expected_seq", "integer"),
                _p("expected_head"),
                _p("expected_status_sha256"),
                _p("lines", "integer"),
            ),
            ("release_head", "release_status_sha256", "capture_sha256", "state"),
            machine="writer",
        ),
        OperationSpec(
            "recipe.call",
            "Run another recipe as a nested plan and take its steps' outputs.",
            (_p("recipe", required=True), _p("inputs", "object")),
            ("plan", "state", "steps"),
            machine="plan",
        ),
        OperationSpec(
            "human.approve",
            "Pause the plan until a person decides (corral plans decide): approved, the step succeeds; rejected, "
            "it fails with decision_rejected; undecided once timeout seconds passed, with approval_timeout.",
            (
                _p("prompt", required=True, description="What the person is asked to approve."),
                _p("timeout", "number", description="Seconds from the step's start; none: wait for ever."),
            ),
            ("approved", "reason", "decided_by"),
        ),
        OperationSpec(
            "flow.pass",
            "Do nothing: the step's outputs are its arguments (as in the Amazon States Language).",
            (_p("values", "object"),),
            ("values",),
            safe_to_retry=True,
            pure=True,  # its outputs are its arguments
        ),
        OperationSpec(
            "flow.fail",
            "Fail with an error code (for catch and finally flows).",
            (_p("code", required=True), _p("message")),
            (),
            safe_to_retry=True,
            pure=True,  # its error is its arguments
        ),
    )
}


_plugins: dict[str, Any] = {}
_plugins_loaded = False


def plugins() -> Mapping[str, Any]:
    """The step operations other distributions register (``corral.operations``), loaded once: name to
    the loaded object, whose ``spec`` is its catalogue entry. A plugin that takes a built-in name, or
    whose ``spec`` is not an :class:`OperationSpec` of its own name, is left out (logged)."""
    global _plugins_loaded  # noqa: PLW0603 - loaded once per process, as the guard registry's plugins are
    if _plugins_loaded:
        return _plugins
    _plugins_loaded = True
    from importlib.metadata import entry_points  # costs ~10 ms: only on a miss

    for point in entry_points(group=GROUP):
        if point.name in OPERATIONS:
            logger.warning("operation %r from %s ignored: a built-in has that name", point.name, point.value)
            continue
        try:
            loaded = point.load()
        except Exception:  # a broken plugin must not take the built-ins down with it
            logger.exception("could not load operation %r from %s", point.name, point.value)
            continue
        spec = getattr(loaded, "spec", None)
        if not isinstance(spec, OperationSpec) or spec.name != point.name:
            logger.error("operation %r from %s ignored: its spec is no OperationSpec named so", point.name, point.value)
            continue
        _plugins[point.name] = loaded
    return _plugins


def find(name: str) -> OperationSpec | None:
    """The catalogue entry of operation ``name``: a built-in's, else a plugin's; None if nobody has it."""
    spec = OPERATIONS.get(name)
    if spec is None:
        loaded = plugins().get(name)
        spec = None if loaded is None else loaded.spec
    return spec


def names() -> list[str]:
    """Every operation a recipe may ``do``: the built-ins and the plugins'."""
    return sorted({*OPERATIONS, *plugins()})
