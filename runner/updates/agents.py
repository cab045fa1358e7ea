"""Updates of agent leases and receipts: what is recorded, never a prompt or an output."""

from __future__ import annotations

from typing import Any

from runner.agentfacts import IDENTITY
from runner.context import Context, Update, format_time
from runner.updates import UPDATES


def _observed(ctx: Context) -> dict[str, Any]:
    observed = ctx.observations.get("agent")
    return dict(observed) if isinstance(observed, dict) else {}


@UPDATES.register("record_agent_lease")
def record_agent_lease(ctx: Context) -> Update:
    """Record who holds the lease and what agent it is for (the cwd as resolved)."""
    cwd = ctx.observations.get("cwd") or {}
    return Update(
        data={
            "controller_id": ctx.params["controller_id"],
            "lease_id": ctx.instance.id.split("/", 1)[1],
            "name": ctx.params["name"],
            "kind": ctx.params["kind"],
            "cwd": cwd.get("real") or ctx.params.get("cwd"),
            "host": ctx.params.get("host"),
            "options": dict(ctx.params.get("options") or {}),
            "requested_at": format_time(ctx.now),
            # Invariant: recorded before the host is asked to create anything, so a start killed at any
            # point leaves what reconcile needs to find its pane (and to tell whether it still runs).
            "start_nonce": ctx.params.get("start_nonce"),
            "starter": ctx.params.get("starter"),
        }
    )


@UPDATES.register("record_found_pane")
def record_found_pane(ctx: Context) -> Update:
    """Record the pane reconcile found for a start that never finished, before closing it."""
    return Update(
        data={
            "pane_id": _observed(ctx).get("pane_id"),
            "failure": "the start never finished; reconcile closes the pane it left",
        }
    )


@UPDATES.register("record_pane_close")
def record_pane_close(ctx: Context) -> Update:
    """Record which pane an operator closes, the agent in it and the cursor the close is bound to."""
    return Update(
        data={
            "controller_id": ctx.params["controller_id"],
            "host": ctx.params["host"],
            **{k: ctx.params[k] for k in IDENTITY},
            "closing_seq": _observed(ctx).get("seq"),
            "reason": ctx.params.get("reason"),
            "requested_at": format_time(ctx.now),
        }
    )


@UPDATES.register("record_capture")
def record_capture(ctx: Context) -> Update:
    """Record the SHA-256 of the output captured at the cursor the close is bound to, and, for a blocked
    agent, the operator's decision to end the lease anyway (who, when, why)."""
    data: dict[str, Any] = {
        "capture_sha256": ctx.observations.get("capture_sha256"),
        "closing_seq": _observed(ctx).get("seq"),
    }
    reason = ctx.params.get("blocked_reason")
    if reason and _observed(ctx).get("status") == "blocked":
        data["decision"] = {
            "kind": f"{ctx.trigger} a blocked agent",
            "reason": reason,
            "actor": ctx.actor,
            "at": format_time(ctx.now),
        }
    return Update(data=data)


@UPDATES.register("record_reconcile")
def record_reconcile(ctx: Context, lost: bool = False) -> Update:
    """Record when reconcile settled the lease on the evidence that its pane is gone."""
    data: dict[str, Any] = {"reconciled_at": format_time(ctx.now)}
    if lost:
        data["failure"] = "the pane vanished while the lease was active; nothing was captured"
    return Update(data=data)


@UPDATES.register("record_receipt")
def record_receipt(ctx: Context) -> Update:
    """Bind the receipt to its target's identity and to the cursor seen before delivery."""
    lease = ctx.view.get(str(ctx.params["target"]))
    assert lease is not None  # target_leased passed in this same transaction
    return Update(
        data={
            "token": ctx.params["token"],
            "controller_id": ctx.params["controller_id"],
            "target": lease.id,
            "target_machine": lease.machine,
            **{k: lease.data.get(k) for k in IDENTITY},
            "host": lease.data.get("host"),
            "batch_id": ctx.params.get("batch_id"),
            "prompt_sha256": ctx.params["prompt_sha256"],
            **({"schema_sha256": ctx.params["schema_sha256"]} if ctx.params.get("schema_sha256") else {}),
            "before_seq": _observed(ctx)["seq"],
            "before_revision": _observed(ctx).get("revision"),
            "terminal_id": lease.data.get("terminal_id"),
            "reserved_at": format_time(ctx.now),
        }
    )


@UPDATES.register("record_completion")
def record_completion(ctx: Context) -> Update:
    """Record the settled cursor and the SHA-256 of the output captured there."""
    return Update(
        data={
            "settled_seq": _observed(ctx)["seq"],
            "output_sha256": ctx.observations.get("capture_sha256"),
            "exit_status": _observed(ctx).get("exit_status"),
            "settled_status": _observed(ctx).get("status"),
            "completed_at": format_time(ctx.now),
            **_run_facts(ctx.observations.get("run")),
        }
    )


def _run_facts(run: Any) -> dict[str, Any]:
    """What a driven run's result says, as the receipt records it (no text: paths and counts only)."""
    if not isinstance(run, dict):
        return {}
    facts: dict[str, Any] = {
        "session_id": run.get("session_id"),
        "usage": run.get("usage") or {},
        "cost_usd": run.get("cost_usd"),
        "turns": run.get("turns"),
        "duration_ms": run.get("duration_ms"),
        "tool_calls": run.get("tool_calls"),
        "file_changes": list(run.get("file_changes") or []),
        "denials": list(run.get("denials") or []),
        "denied": bool(run.get("denials")),
        "run_error": run.get("error"),
        "session_lost": bool(run.get("session_lost")),
        "verdict": run.get("structured") if isinstance(run.get("structured"), dict) else None,
    }
    return {k: v for k, v in facts.items() if v is not None}


@UPDATES.register("record_failure")
def record_failure(ctx: Context, reason: str) -> Update:
    """Record why the receipt can never complete, and the cursor that showed it."""
    return Update(data={"reason": reason, "observed_seq": _observed(ctx).get("seq"), "failed_at": format_time(ctx.now)})


@UPDATES.register("record_abandon")
def record_abandon(ctx: Context) -> Update:
    """Record the operator's release of the target and the evidence it rested on."""
    return Update(
        data={
            "reason": "abandoned",
            "observed_seq": _observed(ctx).get("seq"),
            "message": ctx.params.get("message"),
            "abandoned_at": format_time(ctx.now),
        }
    )
