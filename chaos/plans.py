"""The plans workload: a client per state home that submits small plans and runs them, resuming the one
its killed worker left; and the history rules for plans.

Each :class:`PlanClient` submits plans of the built-in ``review`` recipe (what ``corral run`` runs, and
what tests/plans/test_crash_resume.py kills at every step boundary): acquire the plan's own controller,
start a reviewer of the scripted kind (``script``) in the client's directory, relay ``echo <marker>``
(a uuid of the client's draws), collect it, close the reviewer, release the controller. A run whose
worker was killed (or whose answer was lost) is run again, which resumes the plan from its last
recorded step. After the run the client runs every plan it submitted once more (the final resume),
reads where each stands and counts the events of each plan's operations in the store.

The rules (:func:`check`), over the operations with a ``plans/`` key and what the agents printed:

- ``step_twice``: a step's effect happened more than once: an operation of the recipe (the controller's
  acquire and release, the reviewer's start and close, the receipt's relay and collect) has more than
  one event for the plan, or more than one turn printed the plan's marker;
- ``plan_unfinished``: after the nemesis stopped and the final resume, a plan is not ``succeeded`` with
  every step ``succeeded`` and each operation once (a plan paused for a person, with the reason it
  records, is reported apart: a kill between an acquire and the credential's save, or a relay left
  reserved, pauses a plan by design), or its marker was never printed.
"""

from __future__ import annotations

import hashlib
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chaos.clients import Client, Recorder
from chaos.history import Op
from chaos.lease import Anomaly

PLAN_WEIGHTS = {"run_plan": 4.0, "plan_state": 1.0}
PLAN_TTL = 900
STEPS = ("acquire", "start", "relay", "collect", "close", "release-controller")
ONCE = (
    "controller acquire",
    "reviewer start:success",
    "receipt relay:success",
    "receipt collect",
    "reviewer close:success",
    "controller release",
)
AUTHORITY = hashlib.sha256(b"chaos plans").hexdigest()


@dataclass(frozen=True)
class PlanDraws:
    """One plan operation's draws from its client's seeded stream."""

    op: str
    marker: str  # a new plan's prompt prints it
    kill_after: float  # long enough to land mid-plan
    think: float


class PlanClient(Client):
    """A coordinator running plans; what it knows: the plans it submitted, and the one to run next."""

    WORKLOAD = "plans"
    SUFFIX = "p"  # its name: <store>/<home>/p

    def __init__(self, name: str, store: str, url: str, home: Path, directory: Path, recorder: Recorder, seed: int):
        self.letter = name.split("/")[1].lower()
        super().__init__(name, store, url, home, directory, [f"p{self.letter}"], recorder, seed, PLAN_TTL)
        self.project = directory / f"wt-plan-{self.letter}"  # the reviewers' directory
        self.plans: dict[str, dict[str, Any]] = {}  # plan id: its document
        self.markers: dict[str, str] = {}
        self.current: str | None = None  # the plan to run (again) next

    def setup(self) -> None:
        self.project.mkdir(exist_ok=True)
        (self.project / "main.py").write_text("print('hi')\n", encoding="utf-8")

    def draw(self) -> PlanDraws:
        ops = list(PLAN_WEIGHTS)
        return PlanDraws(
            op=self.rng.choices(ops, [PLAN_WEIGHTS[o] for o in ops])[0],
            marker=str(uuid.UUID(int=self.rng.getrandbits(128), version=4)),
            kill_after=self.rng.uniform(0.0, 1.5),
            think=self.rng.uniform(0.0, 0.3),
        )

    def key(self, op: str, cid: str) -> str:
        return f"{self.store}:plans/{self.letter}"

    def document(self, plan: str, marker: str) -> dict[str, Any]:
        return {
            "plan": plan,
            "recipe": "review",
            "controller": plan,
            "inputs": {
                "cwd": str(self.project),
                "prompt": f"echo {marker}",
                "reviewer": f"rv-{plan}",
                "kind": "script",
                "timeout": 20,
                "verdict_schema": None,
                "authority_ref": "chaos",
                "authority_sha256": AUTHORITY,
            },
        }

    def request(self, draws: Any) -> tuple[str, str, dict[str, Any], dict[str, Any]]:
        """A run of the unfinished plan, else of a new one; a read of the last plan (a run if none)."""
        op = draws.op
        if op == "plan_state" and not self.plans:
            op = "run_plan"
        if op == "run_plan":
            if self.current is None:
                plan = f"plan-{self.letter}{len(self.plans)}"
                self.plans[plan] = self.document(plan, draws.marker)
                self.markers[plan] = draws.marker
                self.current = plan
            plan = self.current
            return op, plan, {"plan": plan, "doc": self.plans[plan]}, {"plan": plan, "marker": self.markers[plan]}
        plan = self.current or list(self.plans)[-1]
        return op, plan, {"plan": plan}, {"plan": plan}

    def learn(self, record: Op, cid: str, args: dict[str, Any], draws: Any) -> None:
        if record.op == "run_plan" and record.status != "unknown" and args["plan"] == self.current:
            self.current = None  # ended, paused for a person, or refused: the next run is a new plan

    def settle(self) -> list[Op]:
        """The final resume: every plan run once more, each read, and the effects of each counted."""
        done = []
        for plan, doc in self.plans.items():
            done.append(
                self.final("run_plan", plan, {"plan": plan, "doc": doc}, {"plan": plan, "marker": self.markers[plan]})
            )
            done.append(self.final("plan_state", plan, {"plan": plan}, {"plan": plan}))
        if self.plans:
            controllers = list(self.plans)
            done.append(self.final("plan_effects", "", {"controllers": controllers}, {"controllers": controllers}))
        return [o for o in done if o is not None]


# --- the rules -------------------------------------------------------------------------------------------


def check(ops: Iterable[Op], delivered: Counter[str]) -> tuple[list[Anomaly], list[str]]:
    """The anomalies of the plan operations in ``ops`` (those with a ``plans/`` key), and the plans
    paused for a person (with why); ``delivered``: how many turns printed each marker."""
    by_key: dict[str, list[Op]] = defaultdict(list)
    for op in ops:
        if ":plans/" in op.key:
            by_key[op.key].append(op)
    anomalies: list[Anomaly] = []
    paused: list[str] = []
    for key, mine in sorted(by_key.items()):
        runs: dict[str, list[Op]] = defaultdict(list)
        for op in mine:
            if op.op == "run_plan":
                runs[op.args["plan"]].append(op)
        effects: dict[str, dict[str, int]] = {}
        for op in mine:
            if op.op == "plan_effects" and op.status == "ok":
                effects.update(op.result.get("effects", {}))
        final: dict[str, Op] = {}
        for op in mine:
            if op.op == "plan_state" and op.status == "ok":
                final[op.args["plan"]] = op  # the last read of each: the final settle's
        for plan, tried in sorted(runs.items()):
            marker = tried[0].args["marker"]
            counts = effects.get(plan, {})
            twice = {name: n for name, n in counts.items() if n > 1}
            if delivered[marker] > 1:
                twice["delivered"] = delivered[marker]
            if twice:
                message = f"plan {plan}: a step's effect happened more than once: {twice}"
                anomalies.append(Anomaly("step_twice", key, message, tried[-1], tried[:-1][-4:]))
            anomalies += _unfinished(
                key, plan, tried, final.get(plan), counts, delivered[marker], plan in effects, paused
            )
    return anomalies, paused


def _unfinished(
    key: str,
    plan: str,
    tried: list[Op],
    read: Op | None,
    counts: dict[str, int],
    delivered: int,
    counted: bool,
    paused: list[str],
) -> list[Anomaly]:
    if read is None:
        return [Anomaly("plan_unfinished", key, f"plan {plan} was never read after the final resume", tried[-1])]
    state, steps = read.result.get("state"), read.result.get("steps") or {}
    if state == "paused" and read.result.get("paused"):
        paused.append(f"{plan}: {read.result.get('paused')}")
        return []
    missing = [s for s in STEPS if steps.get(s) != "succeeded"]
    never = [name for name in ONCE if counts.get(name, 0) == 0] if counted else ["(effects not counted)"]
    if delivered == 0:
        never.append("the prompt's delivery")
    if state == "succeeded" and not missing and not never:
        return []
    message = f"plan {plan} is {state} after the final resume"
    message += f" ({read.result['failure']})" if read.result.get("failure") else ""
    message += f"; steps not succeeded: {missing}" if missing else ""
    message += f"; never happened: {never}" if never else ""
    return [Anomaly("plan_unfinished", key, message, read, tried[-3:])]
