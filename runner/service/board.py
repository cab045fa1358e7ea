"""The dashboard's read views: what needs a person, a plan's timeline, a search of the event log.

Read-only, over the other components' public methods and the store's reads; nothing here writes, and
nothing here returns a secret (fence tokens are only hashes in the store; a receipt's token is its
public id). Each view answers a JSON document ``corral serve`` serves under ``/api/dashboard``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from runner.context import Event, format_time, parse_time
from runner.service.inputs.board import EventSearchInput

if TYPE_CHECKING:
    from runner.service.decisions import Decisions
    from runner.service.events import Events
    from runner.service.inventory import Inventory
    from runner.service.plans import Plans
    from runner.store.abc import Store


class BoardHost(Protocol):
    """What the board reads through (the service façade is one): its components, store and clock.
    A port, so that the board never imports the façade that assembles it."""

    @property
    def decisions(self) -> Decisions: ...
    @property
    def events(self) -> Events: ...
    @property
    def inventory(self) -> Inventory: ...
    @property
    def plans(self) -> Plans: ...
    @property
    def store(self) -> Store: ...
    def now(self) -> datetime: ...


ATTENTION_KINDS = (
    "decision",
    "agent_blocked",
    "receipt_ambiguous",
    "controller_expired",
    "runner_stale",
    "plan_paused",
)
"""What can need a person, in the order the dashboard lists them."""

CREATES_NOTHING = ("flow.", "human.", "git.", "wait.")
"""The step operations (by namespace) that create no instance: their attempts' keys are never looked up
(a plan of 10,000 ``flow.pass`` steps would cost 90,000 key derivations and reads for nothing)."""

UNKNOWN_SPEND = {"tokens": None, "cost_usd": None, "turns": None}
"""What an attempt (or a step, or a plan) spent when no driven run recorded any: unknown, not zero."""

_DECISION_KIND = {"plan": "decision", "agent": "agent_blocked", "receipt": "receipt_ambiguous"}


class Board:
    """The dashboard's views over one service (its decisions, inventory, plans and events)."""

    def __init__(self, service: BoardHost) -> None:
        self.service = service

    # --- what needs a person -----------------------------------------------------------------------------

    def attention(self) -> dict[str, Any]:
        """Everything that waits on a person, each with the command that settles it.

        ``items``: each with ``kind`` (one of :data:`ATTENTION_KINDS`), ``id``, ``title``, ``since``
        (when known), ``subject`` (the plan, lease, receipt or controller it is about), ``command`` (the
        CLI text that settles it, to copy) and ``decision`` (the id ``POST /api/decisions/{id}``
        takes, only for a plan's decision that can be decided now; else None). ``counts``: per kind.
        """
        items: list[dict[str, Any]] = []
        for d in self.service.decisions.list():
            kind = _DECISION_KIND.get(str(d.get("kind")), "decision")
            settle = d.get("settle") or {}
            subject = {
                k: d[k] for k in ("plan", "step", "lease", "name", "receipt", "controller", "pane_id") if d.get(k)
            }
            items.append(
                {
                    "kind": kind,
                    "id": str(d["id"]),
                    "title": _decision_title(d),
                    "since": d.get("since"),
                    "subject": subject,
                    "command": settle.get("cli"),
                    "decision": str(d["id"]) if settle.get("decide") else None,
                }
            )
        for c in self.service.inventory.expired_controllers():
            items.append(
                {
                    "kind": "controller_expired",
                    "id": str(c["id"]),
                    "title": f"controller {c['controller']} expired holding {c['holds']} lease(s) or receipt(s)",
                    "since": c.get("expired_at"),
                    "subject": {"controller": c["controller"]},
                    "command": c["next"],
                    "decision": None,
                }
            )
        items += self._plans_needing_a_person({i["subject"].get("plan") for i in items if i["kind"] == "decision"})
        order = {kind: i for i, kind in enumerate(ATTENTION_KINDS)}
        items.sort(key=lambda i: (order[i["kind"]], str(i.get("since") or ""), i["id"]))
        counts = {kind: sum(1 for i in items if i["kind"] == kind) for kind in ATTENTION_KINDS}
        return {"items": items, "counts": counts}

    def _plans_needing_a_person(self, decided_here: set[Any]) -> list[dict[str, Any]]:
        """A running plan whose runner stopped renewing or is gone, a paused plan no decision covers."""
        from runner.service.plan_state import runner_lease

        now = self.service.now()
        out: list[dict[str, Any]] = []
        for plan in self.service.store.find("plan", ["running", "paused"]):
            plan_id = str(plan.data.get("plan_id"))
            if plan.state == "running":
                runner = runner_lease(plan, now)
                if runner["status"] != "expired":
                    continue
                out.append(
                    {
                        "kind": "runner_stale",
                        "id": plan.id,
                        "title": f"plan {plan_id} runs, but its runner (pid {runner['pid']} on {runner['host']}) "
                        "stopped renewing its lease",
                        "since": runner["expires_at"],
                        "subject": {"plan": plan_id},
                        "command": f"corral plans resume {plan_id}",
                        "decision": None,
                    }
                )
            elif plan_id not in decided_here:
                reason = plan.data.get("paused_reason")
                out.append(
                    {
                        "kind": "plan_paused",
                        "id": plan.id,
                        "title": f"plan {plan_id} is paused" + (f": {reason}" if reason else ""),
                        "since": None,
                        "subject": {"plan": plan_id},
                        "command": f"corral plans resume {plan_id}",
                        "decision": None,
                    }
                )
        return out

    # --- a plan's timeline -------------------------------------------------------------------------------

    def timeline(self, plan_id: str) -> dict[str, Any]:
        """A plan's steps as a waterfall, from its recorded events: each step's attempts, each with
        ``started_at``, ``ended_at`` (None while it runs), ``seconds``, ``state`` (a record's, or
        ``retried``: ended by the next attempt's start), the ``wait`` it
        paused on (``kind``, ``since``, ``until``), the person's ``decision``, the ``error`` code, and
        what its agent runs spent (``tokens``, ``cost_usd``, ``turns``: summed over the receipts the
        attempt created; None where no driven run recorded any). ``retries``: attempts after the first.
        A plan none of whose steps was retried is drawn from its step records alone; otherwise from its
        events (``from_events``), which alone hold a retried attempt's start.

        Raises:
            NotFoundError: ``plan_unknown``.
        """
        plans = self.service.plans
        plan = plans.plan(plan_id)
        summary = plans.summary(plan)
        attempts: dict[str, dict[int, dict[str, Any]]] = {}
        retried = any(int(step.get("attempt") or 1) > 1 for step in summary["steps"])
        if retried:
            # Only the events know a retried attempt's start (its record holds the last attempt's).
            _, events = self.service.events.history(plan.id)
            for event in events:
                for entry in (event.payload.get("params") or {}).get("records") or ():
                    if isinstance(entry, Mapping) and isinstance(entry.get("record"), Mapping):
                        _apply(attempts.setdefault(str(entry.get("step_id")), {}), entry["record"], event.at)
        else:
            # One attempt each: its record says it all (a plan of 10,000 steps decodes no event).
            for step in summary["steps"]:
                if step.get("state") != "pending" and isinstance(step.get("at"), str):
                    _apply_record(attempts.setdefault(str(step["id"]), {}), step)
        spent = self._spend_by_attempt(plan_id, attempts, {s["id"]: s.get("do") for s in summary["steps"]})
        steps = []
        for step in summary["steps"]:
            step_id = step["id"]
            runs = []
            for number, run in sorted(attempts.get(step_id, {}).items()):
                run.update(spent.get((step_id, number)) or UNKNOWN_SPEND)  # (the runs are this call's own)
                runs.append(run)
            steps.append(
                {
                    "id": step_id,
                    "do": step.get("do"),
                    "state": step.get("state"),
                    "attempts": runs,
                    "retries": max(len(runs) - 1, 0),
                    **(_totals(runs) if spent else UNKNOWN_SPEND),
                }
            )
        starts = [run["started_at"] for s in steps for run in s["attempts"] if run["started_at"]]
        ends = [run["ended_at"] or run["started_at"] for s in steps for run in s["attempts"] if run["started_at"]]
        return {
            "plan": summary["plan"],
            "recipe": summary["recipe"],
            "state": summary["state"],
            "controller": summary["controller"],
            "paused_reason": summary["paused_reason"],
            "started_at": min(starts) if starts else None,
            "ended_at": max(ends) if ends and plan.state in ("succeeded", "failed", "cancelled") else None,
            "from_events": retried,
            "steps": steps,
            **_totals([run for s in steps for run in s["attempts"]]),
        }

    def _spend_by_attempt(
        self, plan_id: str, attempts: Mapping[str, Mapping[int, Any]], dos: Mapping[str, Any]
    ) -> dict[tuple[str, int], dict[str, Any]]:
        """What the agent runs of each attempt spent, read from the receipts it created (by key)."""
        from runner.service.steps import attempt_keys

        out: dict[tuple[str, int], dict[str, Any]] = {}
        with self.service.store.read() as reader:
            for step_id, runs in attempts.items():
                if str(dos.get(step_id) or "").startswith(CREATES_NOTHING):
                    continue
                for number in runs:
                    found = [
                        r
                        for key in sorted(attempt_keys(plan_id, step_id, number))
                        if (r := reader.get(f"receipt/{key}"))
                    ]
                    used = [r.data for r in found if "usage" in r.data]
                    if not used:
                        continue  # no driven run recorded a spend for this attempt: unknown, not zero
                    out[(step_id, number)] = {
                        "tokens": sum(v for d in used for v in (d.get("usage") or {}).values() if isinstance(v, int)),
                        "cost_usd": round(sum(float(d.get("cost_usd") or 0.0) for d in used), 6),
                        "turns": sum(int(d.get("turns") or 0) for d in used),
                    }
        return out

    # --- a search of the event log -----------------------------------------------------------------------

    def events(self, inp: EventSearchInput) -> dict[str, Any]:
        """The events after ``inp.since`` that match every filter, oldest first, at most ``inp.limit``.

        ``events``: each as the event stream sends it; ``next_since``: the seq to search on from (the
        last one read, matched or not), None when the log was read to its end; ``floor``: the retention
        floor (a ``since`` below it starts there: older events were pruned).

        Raises:
            NotFoundError: ``plan_unknown`` (``inp.plan`` names no plan).
        """
        keys: set[str] | None = None
        instance = inp.instance
        if inp.plan is not None:
            keys = self._plan_keys(inp.plan)
        after = _when(inp.after)
        before = _when(inp.before)
        text = inp.text.lower() if inp.text else None
        out: list[dict[str, Any]] = []
        last: int | None = None
        scanned = self._scan(inp.since, instance)
        for event in scanned:
            last = event.seq
            if _matches(event, inp, keys, after, before, text):
                out.append(event.to_dict())
                if len(out) >= inp.limit:
                    break
        else:
            last = None
        return {"events": out, "next_since": last, "floor": self.service.events.floor()}

    def _scan(self, since: int, instance: str | None) -> Iterator[Event]:
        from runner.service.inputs.events import EventsInput

        return self.service.events.stream(EventsInput(since=since, instance_id=instance), from_floor=True)

    def _plan_keys(self, plan_id: str) -> set[str]:
        """The plan's instance id and every key its steps' attempts may create instances under."""
        from runner.service.steps import attempt_keys

        plan = self.service.plans.plan(plan_id)
        keys = {plan.id}
        for step_id, record in (plan.data.get("steps") or {}).items():
            if str(record.get("do") or "").startswith(CREATES_NOTHING):
                continue
            for number in range(1, max(int(record.get("attempt") or 1), 1) + 1):
                keys |= attempt_keys(plan_id, step_id, number)
        return keys


def _decision_title(d: Mapping[str, Any]) -> str:
    if d.get("kind") == "plan":
        what = d.get("prompt") or d.get("why") or "waits on a person"
        return f"plan {d.get('plan')} step {d.get('step')}: {what}"
    if d.get("kind") == "agent":
        return f"{d.get('machine')} {d.get('name')} is blocked (its agent waits on an answer)"
    return f"receipt {d.get('receipt')} to {d.get('target')}: delivery {d.get('delivery')}" + (
        f" ({d['why']})" if d.get("why") else ""
    )


def _apply(runs: dict[int, dict[str, Any]], record: Mapping[str, Any], at: str) -> None:
    """One step record as an event wrote it, folded into that step's attempts."""
    number = int(record.get("attempt") or 1)
    state = str(record.get("state") or "")
    run = runs.get(number)
    if run is None:
        for earlier in runs.values():
            # A retried attempt's failure is not recorded durably (only the progress stream hears it):
            # the next attempt's start ends it (so its time includes the retry's backoff).
            if earlier["attempt"] < number and earlier["ended_at"] is None and earlier["state"] == "running":
                earlier.update(state="retried", ended_at=at)
                earlier["seconds"] = _between(earlier["started_at"] or at, at)
        run = runs[number] = {
            "attempt": number,
            "state": state,
            "started_at": None,
            "ended_at": None,
            "seconds": None,
            "wait": None,
            "decision": None,
            "error": None,
        }
    run["state"] = state
    if state == "running":
        run["started_at"] = run["started_at"] or at
        return
    if state == "waiting":
        waiting = record.get("waiting_on") or {}
        run["wait"] = {"kind": waiting.get("kind"), "since": waiting.get("since") or at, "until": None}
        run["started_at"] = run["started_at"] or at
        return
    # an end: succeeded, failed, caught, skipped
    run["ended_at"] = at
    seconds = record.get("seconds")
    if isinstance(seconds, (int, float)):
        run["seconds"] = float(seconds)
    if run["started_at"] is None:
        run["started_at"] = at
    if run["seconds"] is None:
        run["seconds"] = _between(run["started_at"], at)
    if isinstance(record.get("decision"), Mapping):
        decision = record["decision"]
        run["decision"] = {k: decision.get(k) for k in ("approve", "reason", "actor", "at")}
    if run["wait"] is not None:
        run["wait"]["until"] = (run["decision"] or {}).get("at") or at
    error = record.get("error")
    if isinstance(error, Mapping):
        run["error"] = error.get("code")


def _between(start: str, end: str) -> float:
    return max((parse_time(end) - parse_time(start)).total_seconds(), 0.0)


def _apply_record(runs: dict[int, dict[str, Any]], record: Mapping[str, Any]) -> None:
    """A step's one attempt from its record alone: ``at`` is when the record was last written (its
    end once it has ``seconds``, which it then started that long before; its start while it runs)."""
    at = str(record["at"])
    seconds = record.get("seconds")
    ended = isinstance(seconds, (int, float)) and record.get("state") not in ("running", "waiting")
    started = at
    if ended and seconds:  # (a pure step's 0 s: its start is its end, no clock arithmetic for 10,000 of them)
        started = format_time(parse_time(at) - timedelta(seconds=float(seconds)))
    run: dict[str, Any] = {
        "attempt": int(record.get("attempt") or 1),
        "state": record.get("state"),
        "started_at": started,
        "ended_at": at if ended else None,
        "seconds": float(seconds) if ended else None,  # type: ignore[arg-type]
        "wait": None,
        "decision": None,
        "error": (record.get("error") or {}).get("code") if isinstance(record.get("error"), Mapping) else None,
    }
    waiting = record.get("waiting_on")
    if record.get("state") == "waiting" and isinstance(waiting, Mapping):
        run["wait"] = {"kind": waiting.get("kind"), "since": waiting.get("since") or at, "until": None}
    decision = record.get("decision")
    if isinstance(decision, Mapping):
        run["decision"] = {k: decision.get(k) for k in ("approve", "reason", "actor", "at")}
        kind = waiting.get("kind") if isinstance(waiting, Mapping) else None
        run["wait"] = {"kind": kind or "person", "since": started, "until": decision.get("at")}
    runs[run["attempt"]] = run


def _totals(runs: list[dict[str, Any]]) -> dict[str, Any]:
    known = [r for r in runs if r.get("tokens") is not None]
    if not known:
        return {"tokens": None, "cost_usd": None, "turns": None}
    return {
        "tokens": sum(r["tokens"] for r in known),
        "cost_usd": round(sum(r["cost_usd"] for r in known), 6),
        "turns": sum(r["turns"] for r in known),
    }


def _when(text: str | None) -> datetime | None:
    return None if text is None else parse_time(text)


def _matches(
    event: Event,
    inp: EventSearchInput,
    keys: set[str] | None,
    after: datetime | None,
    before: datetime | None,
    text: str | None,
) -> bool:
    if keys is not None and event.instance_id not in keys and event.instance_id.partition("/")[2] not in keys:
        return False
    if inp.machine is not None and event.machine != inp.machine:
        return False
    if inp.trigger is not None and event.trigger != inp.trigger:
        return False
    if inp.actor is not None and inp.actor not in event.actor:
        return False
    if after is not None or before is not None:
        at = parse_time(event.at)
        if (after is not None and at < after) or (before is not None and at >= before):
            return False
    if text is not None:
        hay = " ".join((event.instance_id, event.trigger, event.from_state, event.to_state, event.actor)).lower()
        if text not in hay:
            return False
    return True
