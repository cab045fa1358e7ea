"""A chaos client: one process doing corral's operations through the runtime and the service, as the CLI does.

``python -m chaos.worker --store URL --home DIR --clock FILE --name NAME`` reads one JSON request a line
on stdin, performs it through :class:`runner.runtime.Runtime` (its service's controller component, the
same calls ``corral controller …`` makes, guards and compare-and-set included) and writes one JSON
answer a line: ``{"status": "ok", "result": {...}}``, ``{"status": "refused", "code": …}`` (a guard's
answer: nothing happened) or ``{"status": "unknown", "code": …}`` (the store went away or stayed busy,
or something unexpected: it may have happened). The harness holds every credential; the worker holds
nothing between requests, so a killed worker is replaced by a fresh one that carries on.

The clock: corral's time is its store's ``now``. SQLite takes it from the calling process's wall
clock, so a SQLite worker's store is opened with that wall clock plus the offset written in
``--clock`` (seconds, read at every call): the nemesis jumps this coordinator's clock without touching
the machine's. PostgreSQL judges time by the server's ``clock_timestamp()`` unless a clock is
injected, so a PostgreSQL worker's store is opened without one: the nemesis still writes its clock
file, and by design the jump changes nothing corral decides.

Besides the controller's operations: a reviewer's receipts (:mod:`chaos.relays`), writer lanes
(``start_writer``, ``release_writer``, ``lanes``, ``settle_lanes``: :mod:`chaos.lanes`) and plans
(``run_plan``, ``plan_state``: :mod:`chaos.plans`).

``--break fence`` (for the checker's own test) runs a corral whose fence guard accepts any credential.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from runner.runtime import Config, Runtime

AUTHORITY = hashlib.sha256(b"chaos").hexdigest()


class JumpingClock:
    """The wall clock plus an offset read from a file at every call (missing or empty: no offset)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __call__(self) -> datetime:
        try:
            text = self.path.read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            text = ""
        try:
            offset = float(text or 0)
        except ValueError:  # caught mid-write: no jump this once
            offset = 0.0
        return datetime.now(UTC) + timedelta(seconds=offset)


class ChaosRuntime(Runtime):
    """The runtime, a SQLite store opened with the jumping clock (the one thing the worker changes); a
    PostgreSQL store keeps the server's clock."""

    def __init__(self, config: Config, clock: JumpingClock) -> None:
        super().__init__(config)
        self._clock = clock

    @property
    def store(self) -> Any:
        if self._store is None:
            from runner.store import open_store

            self.home.ensure()
            clock = None if self.store_url.startswith(("postgresql:", "postgres:")) else self._clock
            self._store = open_store(self.store_url, clock=clock)
        return self._store


def perform(runtime: Runtime, request: dict[str, Any]) -> dict[str, Any]:
    """One request: the controller operation it names, through the service."""
    from runner.fence import Credential, Proposal
    from runner.service import AcquireInput, RenewInput, ResumeInput, TakeoverInput
    from runner.service.inputs.controller import ListLeasesInput, ReleaseInput

    controller = runtime.service.controller
    op, cid, a = request["op"], request["cid"], request.get("args", {})
    ttl = request.get("ttl", 5)
    holder = request.get("holder")

    def credential() -> Credential:
        return Credential(cid, a["lease"], a["gen"], a["token"])

    def proposal() -> Proposal:
        return Proposal(a["new_lease"], a["new_token"])

    def granted(grant: Any) -> dict[str, Any]:
        return {"lease": grant.credential.lease_id, "gen": grant.credential.generation}

    if op == "acquire":
        return granted(controller.acquire(AcquireInput(cid, "chaos", AUTHORITY, ttl, holder, proposal=proposal())))
    if op == "renew":
        view = controller.renew(RenewInput(cid, credential(), ttl))
        return {"gen": view.data.get("generation")}
    if op == "resume":
        return granted(controller.resume(ResumeInput(cid, credential(), ttl, holder, proposal=proposal())))
    if op == "takeover":
        return granted(controller.takeover(TakeoverInput(cid, a["expect"], ttl, holder, proposal=proposal())))
    if op == "release":
        controller.release(ReleaseInput(cid, credential(), "chaos", AUTHORITY))
        return {}
    if op == "read":
        (view,) = controller.leases(ListLeasesInput(controller_id=cid))
        return {"state": view.state, "lease": view.data.get("lease_id"), "gen": view.data.get("generation")}
    if op in LANE_OPS:
        return perform_lanes(runtime, op, cid, a, credential)
    if op in PLAN_OPS:
        return perform_plans(runtime, op, a)
    return perform_receipts(runtime, op, cid, a, credential)


def perform_receipts(runtime: Runtime, op: str, cid: str, a: dict[str, Any], credential: Any) -> dict[str, Any]:
    """The receipt operations of one reviewer: start it, relay, collect, abandon, list the open receipts."""
    import anyio

    from runner.service import CollectInput, RelayInput, ReviewerStartInput
    from runner.service.inputs.receipts import AbandonInput, ReceiptsInput

    service = runtime.service
    if op == "start_reviewer":
        service.reviewers.start(ReviewerStartInput(cid, credential(), a["name"], "script", a["cwd"]))
        return {}
    if op == "relay":
        view = service.receipts.relay(RelayInput(cid, credential(), a["target"], a["text"], receipt_id=a["rid"]))
        return {"state": view.state}
    if op == "collect":
        token = f"corral-receipt-v1.{a['rid']}"
        (got,) = anyio.run(service.receipts.collect, CollectInput(cid, credential(), (token,), a.get("timeout", 10)))
        return {"state": got.receipt.state, "output": got.output.strip()[:200], "replayed": got.replayed}
    if op == "abandon":
        view = service.receipts.abandon(AbandonInput(cid, credential(), f"corral-receipt-v1.{a['rid']}", "chaos"))
        return {"state": view.state}
    if op == "receipts":
        views = service.receipts(ReceiptsInput(controller_id=cid))
        return {"open": [[v.data["token"].rsplit(".", 1)[-1], v.state] for v in views]}
    raise ValueError(f"unknown operation {op!r}")


LANE_OPS = ("start_writer", "release_writer", "lanes", "settle_lanes")
PLAN_OPS = ("run_plan", "plan_state", "plan_effects")
# The operations of the review recipe's steps, each of which must happen once per plan.
PLAN_EFFECTS = (
    ("controller", "acquire"),
    ("reviewer", "start:success"),
    ("receipt", "relay:success"),
    ("receipt", "collect"),
    ("reviewer", "close:success"),
    ("controller", "release"),
)
UNCONFINED = "chaos: the lanes' scopes and the store are under test, not the sandbox (Bubblewrap may be missing)"


def _lanes(runtime: Runtime, controller_id: str | None, ended: bool) -> list[list[Any]]:
    """``[lane uuid, name, state, holder]`` of the store's lanes (``controller_id``'s, or every one);
    holder: the lane's agent is live in its pane."""
    core = runtime.service.writers.core
    found = []
    for view in runtime.service.writers.leases(controller_id, ended):
        holder = False
        if view.state == "active":
            host = core.host(view.data.get("host", "process"))
            holder = bool(core.observe(host, view.data.get("pane_id")).get("exists"))
        found.append([view.id.removeprefix("writer/"), view.data.get("name"), view.state, holder])
    return found


def perform_lanes(runtime: Runtime, op: str, cid: str, a: dict[str, Any], credential: Any) -> dict[str, Any]:
    """The writer lanes of one coordinator: start one in a worktree, release it, list the store's lanes,
    and (the final settle) reconcile this controller's lanes and list them, ended ones too."""
    from runner.service import WriterReleaseInput, WriterStartInput
    from runner.service.inputs.inventory import ControllerInput

    writers = runtime.service.writers
    if op == "start_writer":
        facts = writers.preflight(a["worktree"])
        view = writers.start(
            WriterStartInput(
                cid,
                credential(),
                name=a["name"],
                kind="script",
                worktree=a["worktree"],
                branch=str(facts["branch"]),
                base_commit=str(facts["head"]),
                expected_head=str(facts["head"]),
                expected_status_sha256=str(facts["status_sha256"]),
                owned_scopes=tuple(a["owned"]),
                locked_scopes=tuple(a.get("locked", ())),
                protected_branches=("main",),
                purpose="chaos",
                ticket_ref="CHAOS-27",
                authority_ref="chaos",
                authority_sha256=AUTHORITY,
                lease_id=a["lane"],
                unconfined=True,
                unconfined_reason=UNCONFINED,
            )
        )
        return {"lane": view.id.removeprefix("writer/"), "state": view.state}
    if op == "release_writer":
        core = writers.core
        lane = core.store.get(f"writer/{a['lane']}")
        seq = 0
        if lane is not None and lane.data.get("pane_id") is not None:
            observed = core.observe(core.host(lane.data.get("host", "process")), lane.data.get("pane_id"))
            seq = int(observed.get("seq") or 0)
        facts = writers.preflight(a["worktree"])
        closed = writers.release(
            WriterReleaseInput(
                cid,
                credential(),
                name=a["name"],
                expected_state_change_seq=seq,
                expected_head=str(facts["head"]),
                expected_status_sha256=str(facts["status_sha256"]),
                checkpoint_ref=f"chaos/{a['name']}",
                checkpoint_sha256=AUTHORITY,
                lease_id=f"writer/{a['lane']}",
            )
        )
        return {"state": closed.lease.state}
    if op == "lanes":
        return {"lanes": _lanes(runtime, None, False)}
    runtime.service.inventory.reconcile(ControllerInput(cid, credential(), True), machine="writer")
    return {"lanes": _lanes(runtime, cid, True)}


def perform_plans(runtime: Runtime, op: str, a: dict[str, Any]) -> dict[str, Any]:
    """Plans: submit one (or find it) and run it to its end (``run_plan``: a second run resumes it), read
    where it stands (``plan_state``), or count, per plan controller, the events of the recipe's
    operations in the store (``plan_effects``: the evidence that each step acted once)."""
    import anyio

    from runner.service.inputs.plans import PlanRunInput, PlanSubmitInput

    runtime.home.ensure("credentials")
    runtime.home.ensure("snapshots")
    plans = runtime.service.plans
    if op == "run_plan":
        submitted = plans.submit(PlanSubmitInput(a["doc"]))
        plan = anyio.run(plans.run, PlanRunInput(a["plan"]))
        return {"state": plan.state, "created": submitted.created}
    if op == "plan_effects":
        return {"effects": {cid: _effects(runtime, cid) for cid in a["controllers"]}}
    plan = plans.plan(a["plan"])
    steps = {k: v.get("state") for k, v in (plan.data.get("steps") or {}).items()}
    paused = plan.data.get("paused_reason") or plan.data.get("waiting_on")
    failure = plan.data.get("failure") or {}
    return {
        "state": plan.state,
        "steps": steps,
        "paused": str(paused)[:300] if paused else None,
        "failure": {k: failure.get(k) for k in ("step", "code")} if failure else None,
    }


def _effects(runtime: Runtime, controller_id: str) -> dict[str, int]:
    """How many times each of :data:`PLAN_EFFECTS` happened to ``controller_id``'s instances."""
    from runner import fence

    store = runtime.store
    ids = [fence.instance_id(controller_id)]
    for machine in ("reviewer", "receipt"):
        ids += [i.id for i in store.find(machine) if i.data.get("controller_id") == controller_id]
    counts = dict.fromkeys((f"{m} {t}" for m, t in PLAN_EFFECTS), 0)
    for instance_id in ids:
        for event in store.events(instance_id=instance_id):
            name = f"{event.machine} {event.trigger}"
            if name in counts:
                counts[name] += 1
    return counts


def answer(runtime: Runtime, request: dict[str, Any]) -> dict[str, Any]:
    """The answer to one request, its error (if any) sorted into refused (no effect) or unknown."""
    from runner.errors import CorralError

    try:
        return {"status": "ok", "result": perform(runtime, request)}
    except CorralError as exc:
        if exc.category in ("refused", "invalid"):
            refused: dict[str, Any] = {"status": "refused", "code": exc.code}
            blocker = exc.details.get("lane") if request["op"] == "start_writer" else None
            if isinstance(blocker, str):  # the live lane a start was refused beside (scope_overlap, …)
                refused["result"] = {"blocker": blocker.removeprefix("writer/"), "state": exc.details.get("state")}
            return refused
        return {"status": "unknown", "code": exc.code, "message": str(exc)[:300]}
    except Exception as exc:  # noqa: BLE001 - reason: a bug must reach the history, not end the client
        return {"status": "unknown", "code": "internal", "message": f"{type(exc).__name__}: {exc}"[:300]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos.worker")
    parser.add_argument("--store", required=True)
    parser.add_argument("--home", required=True)
    parser.add_argument("--clock", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--break", dest="broken", choices=("fence",), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.broken == "fence":  # a corral whose fence guard accepts any credential: what the checker must catch
        from runner import fence

        fence.check = lambda *_args, **_kwargs: None
    config = Config.load(store=args.store, home=args.home, actor=f"chaos:{args.name}:{os.getpid()}", environ={})
    runtime = ChaosRuntime(config, JumpingClock(Path(args.clock)))
    runtime.service  # noqa: B018 - reason: open the store and the library before saying ready
    print(json.dumps({"ready": os.getpid()}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        print(json.dumps(answer(runtime, json.loads(line))), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
