"""Effects on agents: start one, close one, deliver a prompt. Each acts through ``ctx.resources["agents"]``.

Outcomes follow the two-phase protocol: ``success``; ``failure`` when it is certain nothing (more)
happened; ``ambiguous`` when the world may have changed in a way that could not be confirmed.
"""

from __future__ import annotations

from runner.agentfacts import (
    AgentActions,
    AgentBusyError,
    AgentError,
    AgentGoneError,
    Expect,
    StartOptions,
)
from runner.context import Context, EffectResult, format_time
from runner.effects import EFFECTS
from runner.log import get_logger

logger = get_logger(__name__)  # imports logging only to log (cold start)


def _host(ctx: Context) -> AgentActions:
    host = ctx.resources.get("agents")
    if not isinstance(host, AgentActions):
        raise TypeError("this transition needs an agent host in resources['agents']")
    return host


@EFFECTS.register("start_agent")
def start_agent(ctx: Context) -> EffectResult:
    """Start the leased agent; if that fails, close the pane it got (orphaned if that fails too)."""
    host = _host(ctx)
    data = ctx.data
    options = data.get("options") or {}
    try:
        started = host.start(
            data["name"],
            data["kind"],
            data["cwd"],
            StartOptions(
                model=options.get("model"),
                effort=options.get("effort"),
                role=options.get("role"),
                owned=tuple(options.get("owned") or ()),
                locked=tuple(options.get("locked") or ()),
                max_turns=options.get("max_turns"),
                budget_usd=options.get("budget_usd"),
                unconfined_reason=options.get("unconfined_reason"),
            ),
            gate=ctx.gate,
            nonce=data.get("start_nonce"),
        )
    except AgentError as exc:
        # failure_code: the host's code, so the caller is told e.g. agent_kind_unknown (a refusal: Herdr
        # does not run the kind) rather than a generic agent_start_failed.
        failed = {"failure": exc.message, "failure_code": exc.code}
        pane_id = exc.details.get("pane_id")
        if pane_id is None:
            return EffectResult("failure", failed, message=exc.message)
        try:
            host.close(pane_id)
        except AgentError as close_exc:
            why = f"{exc.message}; closing its pane {pane_id} failed too: {close_exc.message}"
            return EffectResult("ambiguous", {"pane_id": pane_id, "failure": why}, message=why)
        return EffectResult("failure", {"pane_id": pane_id, **failed}, message=exc.message)
    if (started.name, started.kind) != (data["name"], data["kind"]):
        why = f"the started agent reports itself as {started.name}/{started.kind}"
        return EffectResult("ambiguous", {"pane_id": started.pane_id, "failure": why}, message=why)
    return EffectResult(
        "success",
        {
            "pane_id": started.pane_id,
            "started_seq": started.seq,
            "terminal_id": started.terminal_id,
            "started_at": format_time(ctx.now),
        },
    )


@EFFECTS.register("close_agent")
def close_agent(ctx: Context) -> EffectResult:
    """Close the leased agent's pane. Never touches its working directory."""
    try:
        _host(ctx).close(ctx.data["pane_id"], gate=ctx.gate)
    except AgentError as exc:
        return EffectResult("failure", {"failure": exc.message}, message=exc.message)
    return EffectResult("success", {"closed_at": format_time(ctx.now)})


def _fail(message: str) -> EffectResult:
    return EffectResult("failure", {"reason": "delivery_failed", "message": message}, message=message)


def _ambiguous(message: str) -> EffectResult:
    return EffectResult("ambiguous", {"message": message}, message=message)


@EFFECTS.register("deliver_prompt")
def deliver_prompt(ctx: Context) -> EffectResult:
    """Hand the prompt over; delivery is confirmed by this very agent seen ``working`` past ``before_seq``.

    Cursors are monotonic, not contiguous (on Herdr ``seq`` is one counter for the whole server): any
    seq greater than ``before_seq`` counts, with the identity (and the host's lifetime) unchanged, and,
    where the host counts the agent's own changes, its ``revision`` moved past the one seen before."""
    host = _host(ctx)
    data = ctx.data
    expected = Expect(
        (str(data["pane_id"]), str(data["name"]), str(data["kind"]), str(data["cwd"])), data["before_seq"]
    )
    before_seq = expected.seq
    try:
        # The host hands it over only to this agent at this cursor (re-read just before delivery).
        schema = ctx.secrets.get("schema")
        if schema is not None:
            after = host.prompt(data["pane_id"], ctx.secrets["prompt"], expected, gate=ctx.gate, schema=schema)
        else:
            after = host.prompt(data["pane_id"], ctx.secrets["prompt"], expected, gate=ctx.gate)
    except (AgentBusyError, AgentGoneError) as exc:
        return _fail(f"not delivered: {exc.message}")
    except AgentError as exc:
        if exc.details.get("delivered") is False:
            return _fail(f"not delivered: {exc.message}")
        return _ambiguous(f"delivery unconfirmed: {exc.message}")
    before_revision = data.get("before_revision")
    own_moved = after.revision is None or before_revision is None or after.revision > before_revision
    same_lifetime = data.get("terminal_id") is None or after.terminal_id == data.get("terminal_id")
    if (
        after.identity == expected.identity
        and same_lifetime
        and after.status == "working"
        and after.seq > before_seq
        and own_moved
    ):
        return EffectResult(
            "success",
            {"after_seq": after.seq, "after_revision": after.revision, "delivered_at": format_time(ctx.now)},
        )
    return _ambiguous(
        f"delivery unconfirmed: expected this agent working after seq {before_seq}, saw {after.status} at seq "
        f"{after.seq}"
    )
