"""Guards over leased agents and receipts: identity, status, cursors, names and open receipts.

They judge the observations the service made just before the transaction:

==================  =====================================================================
observation         meaning
==================  =====================================================================
``agent``           the agent observed before acting (``exists`` False: its pane is gone)
``agent_after``     the agent observed again after its output was captured
``capture_sha256``  SHA-256 of that capture
``cwd``             ``{"given", "real", "is_dir"}`` for a start
``kinds``           the agent kinds configured on this machine
``starter``         for reconcile: is the process that recorded a start still running?
                    (``absent``/``active``/``stale``/``indeterminate``, :mod:`runner.lockstatus`)
==================  =====================================================================
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runner.agentfacts import IDENTITY, PROMPTABLE, SETTLED, STATUSES
from runner.context import Context, Rejection
from runner.guards import GUARDS

# Machines whose instances lease one agent each (writer lanes join with the writer machine); only
# these are prompt targets.
LEASE_MACHINES = ("reviewer", "writer")
# Invariant: every machine whose live instances hold a pane (and its name): an adopted pane is held for
# cleanup only, so it is never a prompt target, but no other lease may take its pane or name.
PANE_LEASE_MACHINES = (*LEASE_MACHINES, "adopted")
# Invariant: a lease in one of these states may still hold a pane, so its name is taken.
LIVE_LEASE_STATES = (
    "provisioning",
    "active",
    "closing",
    "orphaned",
    "discarding",
    "close_failed",
    "releasing",
    "release_failed",
)
OPEN_RECEIPT_STATES = ("reserved", "pending")


def _agent(ctx: Context, key: str = "agent") -> Mapping[str, Any]:
    observed = ctx.observations.get(key)
    return observed if isinstance(observed, Mapping) else {"exists": False}


def _identity(data: Mapping[str, Any]) -> tuple[Any, ...]:
    return tuple(data.get(k) for k in IDENTITY)


def same_identity(observed: Mapping[str, Any], expected: Mapping[str, Any]) -> bool:
    """The observed agent is the expected one: same pane, name, kind and cwd, and, where a host lifetime
    (Herdr's ``terminal_id``) was recorded, the same lifetime: a pane id reused after a restart is
    another agent."""
    if not observed.get("exists") or _identity(observed) != _identity(expected):
        return False
    lifetime = expected.get("terminal_id")
    return lifetime is None or observed.get("terminal_id") == lifetime


def _identity_rejection(observed: Mapping[str, Any], expected: Mapping[str, Any]) -> Rejection:
    if not observed.get("exists"):
        return Rejection(
            "agent_gone", f"the pane {expected.get('pane_id')!r} no longer exists", {"pane_id": expected.get("pane_id")}
        )
    return Rejection(
        "identity_changed",
        f"the agent in pane {expected.get('pane_id')!r} is not the leased one",
        {
            "expected": dict(zip(IDENTITY, _identity(expected), strict=True)),
            "observed": dict(zip(IDENTITY, _identity(observed), strict=True)),
        },
    )


@GUARDS.register("agent_name_free")
def agent_name_free(ctx: Context) -> Rejection | None:
    """No live lease (reviewer, writer or adopted, any controller) holds the requested agent name."""
    name = ctx.params.get("name")
    for machine in PANE_LEASE_MACHINES:
        for lease in ctx.view.find(machine, LIVE_LEASE_STATES):
            if lease.data.get("name") == name:
                return Rejection(
                    "agent_name_taken",
                    f"the name {name!r} is held by the live lease {lease.id}",
                    {"name": name, "holder": lease.id, "state": lease.state},
                )
    return None


@GUARDS.register("agent_cwd")
def agent_cwd(ctx: Context) -> Rejection | None:
    """The working directory was given absolute and resolves to an existing directory."""
    cwd = ctx.observations.get("cwd") or {}
    given = cwd.get("given")
    if not isinstance(given, str) or not given.startswith("/"):
        return Rejection("cwd_invalid", f"the working directory {given!r} is not an absolute path", {"cwd": given})
    if not cwd.get("is_dir"):
        return Rejection(
            "cwd_invalid", f"the working directory {given!r} does not exist or is not a directory", {"cwd": given}
        )
    return None


@GUARDS.register("agent_kind_known")
def agent_kind_known(ctx: Context) -> Rejection | None:
    """The agent kind is configured on this machine (an unknown kind is never guessed)."""
    kinds = ctx.observations.get("kinds") or ()
    kind = ctx.params.get("kind")
    if kind in kinds:
        return None
    return Rejection(
        "agent_kind_unknown",
        f"unknown agent kind {kind!r} (configured: {', '.join(kinds)})",
        {"kind": kind, "configured": list(kinds)},
    )


@GUARDS.register("owner")
def owner(ctx: Context) -> Rejection | None:
    """The instance belongs to the requesting controller."""
    holder = ctx.instance.data.get("controller_id")
    if holder == ctx.params.get("controller_id"):
        return None
    return Rejection(
        "not_owner",
        f"{ctx.instance.id} belongs to controller {holder!r}",
        {"owner": holder, "controller_id": ctx.params.get("controller_id")},
    )


@GUARDS.register("agent_identity")
def agent_identity(ctx: Context) -> Rejection | None:
    """The observed agent is exactly the one recorded: same pane, name, kind and cwd."""
    observed = _agent(ctx)
    if same_identity(observed, ctx.instance.data):
        return None
    return _identity_rejection(observed, ctx.instance.data)


@GUARDS.register("identity_changed")
def identity_changed(ctx: Context) -> Rejection | None:
    """The observed agent is not the recorded one (or its pane is gone): the receipt cannot complete."""
    if not same_identity(_agent(ctx), ctx.instance.data):
        return None
    return Rejection("identity_unchanged", "the agent is still the recorded one")


@GUARDS.register("agent_settled")
def agent_settled(ctx: Context, allow_blocked: bool = False) -> Rejection | None:
    """The agent is idle or done (or blocked, where allowed): it is working on nothing."""
    observed = _agent(ctx)
    allowed = [s for s in STATUSES if s in (SETTLED if allow_blocked else PROMPTABLE)]
    if not observed.get("exists"):
        return Rejection("agent_gone", "the agent's pane no longer exists")
    if observed.get("status") in allowed:
        return None
    return Rejection(
        "agent_not_settled",
        f"the agent is {observed.get('status')} at seq {observed.get('seq')}; it must be {' or '.join(allowed)}",
        {"status": observed.get("status"), "seq": observed.get("seq")},
    )


@GUARDS.register("agent_cursor")
def agent_cursor(ctx: Context) -> Rejection | None:
    """The agent sits at exactly the cursor the caller saw (``expected_state_change_seq``)."""
    expected = ctx.params.get("expected_state_change_seq")
    seen = _agent(ctx).get("seq")
    if seen == expected:
        return None
    return Rejection(
        "cursor_mismatch",
        f"the agent is at seq {seen}, not the expected {expected}",
        {"expected_seq": expected, "observed_seq": seen},
    )


@GUARDS.register("capture_stable")
def capture_stable(ctx: Context) -> Rejection | None:
    """Nothing moved while the output was captured: identity, status and cursor read the same after."""
    before, after = _agent(ctx), _agent(ctx, "agent_after")
    keys = (*IDENTITY, "status", "seq", "exists")
    if all(before.get(k) == after.get(k) for k in keys):
        return None
    return Rejection(
        "cursor_superseded",
        f"the agent moved while its output was captured (seq {before.get('seq')} -> {after.get('seq')}, "
        f"{before.get('status')} -> {after.get('status')})",
        {"before_seq": before.get("seq"), "after_seq": after.get("seq")},
    )


def _receipt_target(ctx: Context) -> str:
    return str(ctx.params.get("target") or ctx.instance.id)


@GUARDS.register("no_open_receipt")
def no_open_receipt(ctx: Context) -> Rejection | None:
    """No receipt for this target is reserved or pending (one prompt at a time per agent)."""
    target = _receipt_target(ctx)
    for receipt in ctx.view.find("receipt", OPEN_RECEIPT_STATES):
        if receipt.data.get("target") == target and receipt.id != ctx.instance.id:
            return Rejection(
                "receipt_outstanding",
                f"receipt {receipt.data.get('token')} for {receipt.data.get('name')!r} is {receipt.state}; "
                "collect or abandon it first",
                {"receipt": receipt.data.get("token"), "state": receipt.state, "target": target},
            )
    return None


@GUARDS.register("agent_gone")
def agent_gone(ctx: Context) -> Rejection | None:
    """The lease's pane no longer exists (what reconcile settles on)."""
    if not _agent(ctx).get("exists"):
        return None
    return Rejection(
        "agent_present",
        f"the pane {ctx.instance.data.get('pane_id')!r} still exists; close it instead",
        {"pane_id": ctx.instance.data.get("pane_id")},
    )


@GUARDS.register("target_leased")
def target_leased(ctx: Context) -> Rejection | None:
    """The target is exactly one active lease of this controller, and the observed agent is it."""
    target_id = ctx.params.get("target")
    controller_id = ctx.params.get("controller_id")
    lease = ctx.view.get(str(target_id)) if target_id else None
    if lease is None or lease.machine not in LEASE_MACHINES or lease.state != "active":
        return Rejection("target_not_leased", f"{target_id} is not an active lease", {"target": target_id})
    if lease.data.get("controller_id") != controller_id:
        return Rejection(
            "not_owner", f"{target_id} belongs to controller {lease.data.get('controller_id')!r}", {"target": target_id}
        )
    name = lease.data.get("name")
    same_name = [
        other.id
        for machine in LEASE_MACHINES
        for other in ctx.view.find(machine, ["active"])
        if other.data.get("name") == name and other.data.get("controller_id") == controller_id
    ]
    if same_name != [lease.id]:
        return Rejection("target_ambiguous", f"{name!r} names {len(same_name)} active leases", {"leases": same_name})
    observed = _agent(ctx)
    if not same_identity(observed, lease.data):
        return _identity_rejection(observed, lease.data)
    return None


@GUARDS.register("collect_cursor")
def collect_cursor(ctx: Context) -> Rejection | None:
    """The agent settled after the cursor it took the prompt at, and that settle was its own very next
    change (``revision`` one past the one seen working, where the host counts them): later work is never
    labelled as this result."""
    observed = _agent(ctx)
    after_seq = ctx.instance.data.get("after_seq")
    after_revision = ctx.instance.data.get("after_revision")
    seq, revision = observed.get("seq"), observed.get("revision")
    next_own = after_revision is None or revision is None or revision == after_revision + 1
    if (
        isinstance(seq, int)
        and isinstance(after_seq, int)
        and seq > after_seq
        and observed.get("status") in SETTLED
        and next_own
    ):
        return None
    return Rejection(
        "cursor_mismatch",
        f"the agent is {observed.get('status')} at seq {seq} (revision {revision}); expected it settled after "
        f"seq {after_seq} by its next own change",
        {
            "after_seq": after_seq,
            "observed_seq": seq,
            "after_revision": after_revision,
            "observed_revision": revision,
            "status": observed.get("status"),
        },
    )


@GUARDS.register("cursor_superseded")
def cursor_superseded(ctx: Context) -> Rejection | None:
    """The agent moved past the receipt's window (its own changes went past the settle that would be
    this result's), or moved during the capture."""
    observed, after = _agent(ctx), _agent(ctx, "agent_after")
    after_revision = ctx.instance.data.get("after_revision")
    seq, revision = observed.get("seq"), observed.get("revision")
    past = isinstance(revision, int) and isinstance(after_revision, int) and revision > after_revision + 1
    moved = "agent_after" in ctx.observations and (after.get("seq"), after.get("status"), after.get("revision")) != (
        seq,
        observed.get("status"),
        revision,
    )
    if past or moved:
        return None
    return Rejection("cursor_not_superseded", "the agent is still within the receipt's window")


@GUARDS.register("agent_quiet")
def agent_quiet(ctx: Context) -> Rejection | None:
    """Fresh evidence that nothing runs for this receipt: the exact agent is settled, or its pane is gone."""
    observed = _agent(ctx)
    if not observed.get("exists"):
        return None
    if not same_identity(observed, ctx.instance.data):
        return _identity_rejection(observed, ctx.instance.data)
    return agent_settled(ctx, allow_blocked=True)


@GUARDS.register("start_abandoned")
def start_abandoned(ctx: Context) -> Rejection | None:
    """No process is still starting this lease: its recorded starter has ended (only a lease still
    ``provisioning`` can have one at work; a live start is never raced by reconcile)."""
    if ctx.instance.state != "provisioning":
        return None
    status = ctx.observations.get("starter")
    if status in ("stale", "absent"):
        return None
    starter = ctx.instance.data.get("starter") or {}
    if status == "active":
        return Rejection(
            "start_in_progress",
            f"the start of {ctx.instance.id} is still running (process {starter.get('pid')}); let it finish",
            {"starter": status},
        )
    return Rejection(
        "start_indeterminate",
        f"whether the process that started {ctx.instance.id} still runs cannot be told from here (it was "
        f"recorded on host {starter.get('host')!r}); reconcile it from that host",
        {"starter": status},
    )


@GUARDS.register("agent_found")
def agent_found(ctx: Context) -> Rejection | None:
    """A live pane is this lease's: its own recorded pane, or (none recorded) one with the name, kind,
    cwd and, where the host keeps it, the start nonce the lease recorded before the pane was created."""
    observed = _agent(ctx)
    data = ctx.instance.data
    if not observed.get("exists"):
        return Rejection("agent_gone", "no pane of this lease exists")
    recorded = data.get("pane_id")
    same = all(observed.get(k) == data.get(k) for k in ("name", "kind", "cwd"))
    nonce_ok = observed.get("nonce") in (None, data.get("start_nonce"))
    if same and nonce_ok and (recorded is None or observed.get("pane_id") == recorded):
        return None
    return _identity_rejection(observed, {**data, "pane_id": recorded or observed.get("pane_id")})


@GUARDS.register("agent_expected")
def agent_expected(ctx: Context) -> Rejection | None:
    """The pane holds exactly the agent the operator named (pane, name, kind, cwd), and it is settled."""
    observed = _agent(ctx)
    expected = {k: ctx.params.get(k) for k in IDENTITY}
    if not same_identity(observed, expected):
        return _identity_rejection(observed, expected)
    return agent_settled(ctx, allow_blocked=True)


def _holder(ctx: Context, host: Any, pane_id: Any) -> Any:
    for machine in PANE_LEASE_MACHINES:
        for lease in ctx.view.find(machine, LIVE_LEASE_STATES):
            if lease.data.get("pane_id") == pane_id and lease.data.get("host") == host:
                return lease
    return None


@GUARDS.register("pane_unleased")
def pane_unleased(ctx: Context) -> Rejection | None:
    """No live lease holds the pane: closing a leased pane goes through its lease (close, release,
    reconcile), never around it."""
    host, pane_id = ctx.params.get("host"), ctx.params.get("pane_id")
    lease = _holder(ctx, host, pane_id)
    if lease is None:
        return None
    return Rejection(
        "pane_leased",
        f"pane {pane_id!r} is held by the {lease.state} lease {lease.id}; close, release or reconcile that lease",
        {"lease": lease.id, "state": lease.state, "pane_id": pane_id},
    )


@GUARDS.register("pane_started_by_corral")
def pane_started_by_corral(ctx: Context) -> Rejection | None:
    """corral started the pane: every pane of the process host; on another host, one a lease recorded
    (by pane id, or by the name, kind and cwd of a start that never recorded its pane)."""
    host, pane_id = ctx.params.get("host"), ctx.params.get("pane_id")
    if host == "process":
        return None
    identity = tuple(ctx.params.get(k) for k in ("name", "kind", "cwd"))
    for machine in LEASE_MACHINES:
        for lease in ctx.view.find(machine):
            if lease.data.get("host") != host:
                continue
            if lease.data.get("pane_id") == pane_id or (
                lease.data.get("pane_id") is None
                and tuple(lease.data.get(k) for k in ("name", "kind", "cwd")) == identity
            ):
                return None
    return Rejection(
        "pane_not_corrals",
        f"no lease records that corral started pane {pane_id!r} on {host!r}; corral closes only panes it started",
        {"pane_id": pane_id, "host": host},
    )


@GUARDS.register("closing_cursor")
def closing_cursor(ctx: Context) -> Rejection | None:
    """The agent is still settled at the cursor its recorded close was bound to: nothing ran since."""
    observed = _agent(ctx)
    expected = ctx.instance.data.get("closing_seq")
    if observed.get("seq") == expected and observed.get("status") in SETTLED:
        return None
    return Rejection(
        "cursor_mismatch",
        f"the agent is {observed.get('status')} at seq {observed.get('seq')}, not settled at the cursor the close "
        f"was bound to ({expected}); inspect it before closing",
        {"expected_seq": expected, "observed_seq": observed.get("seq"), "status": observed.get("status")},
    )


@GUARDS.register("agent_closable")
def agent_closable(ctx: Context) -> Rejection | None:
    """The agent is idle or done; or it is blocked and an operator decided to end the lease anyway
    (``blocked_reason`` given: corral never answers a blocked agent, but a person may close it)."""
    observed = _agent(ctx)
    if not observed.get("exists"):
        return Rejection("agent_gone", "the agent's pane no longer exists")
    status = observed.get("status")
    reason = ctx.params.get("blocked_reason")
    if status in PROMPTABLE or (status == "blocked" and isinstance(reason, str) and reason.strip()):
        return None
    hint = (
        "; it waits on a person: answer it yourself, or end the lease with --blocked --reason TEXT (abandon its "
        "open receipt first)"
        if status == "blocked"
        else ""
    )
    return Rejection(
        "agent_not_settled",
        f"the agent is {status} at seq {observed.get('seq')}; it must be idle or done{hint}",
        {"status": status, "seq": observed.get("seq")},
    )


def budget_spent(options: Any, spend: Any) -> dict[str, Any] | None:
    """The first limit of a lease's recorded ``options`` its agent's ``spend`` has reached, as
    ``{limit, budget, spent}``, or None while every limit still has room."""
    if not isinstance(options, dict) or not isinstance(spend, dict):
        return None
    for limit, spent_key in (("budget_usd", "cost_usd"), ("budget_tokens", "tokens"), ("max_turns", "turns")):
        budget = options.get(limit)
        spent = spend.get(spent_key)
        if isinstance(budget, (int, float)) and isinstance(spent, (int, float)) and spent >= budget:
            return {"limit": limit, "budget": budget, "spent": spent}
    return None


@GUARDS.register("within_budget")
def within_budget(ctx: Context) -> Rejection | None:
    """The target lease's runs have not spent its budget (dollars, tokens or turns) yet."""
    target_id = ctx.params.get("target")
    lease = ctx.view.get(str(target_id)) if target_id else None
    if lease is None:
        return None  # target_leased says why
    observed = _agent(ctx)
    reached = budget_spent(lease.data.get("options"), observed.get("spend"))
    if reached is None:
        return None
    return Rejection(
        "budget_exhausted",
        f"{lease.data.get('name')!r} has spent its budget: {reached['limit']} {reached['budget']:g}, spent "
        f"{reached['spent']:g}; start a new lease with a larger budget to go on",
        {"target": target_id, **reached, "spend": observed.get("spend")},
    )
