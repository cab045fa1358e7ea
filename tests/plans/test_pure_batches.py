"""Pure steps are committed in batches; effectful ones still one at a time, before they act.

A recipe mixes ``flow.pass`` (pure: its catalogue entry says so) with a stand-in for any effectful
operation: ``git.preflight``'s catalogue entry (not pure) run by :class:`Effect`, which appends a line
to a file outside the store and reads, through a connection of its own, what the store has committed
at that moment. The tests check, on real SQLite files:

* at every effect, the step's ``running`` record and every record before it are committed, and the
  commit that carried the last effect's outcome came before any later step ran;
* the commits of a plan: one per effectful step's start, one for its outcome when a pure step
  follows, pure runs riding on them, bounded by ``PURE_BATCH_STEPS`` records and ``PURE_BATCH_SECONDS``;
* ``kill -9`` of a real runner process at several points of a long mixed plan, then a resume: every
  step succeeds, no effect happened twice (each effectful step's ``run`` wrote one line), and pure
  steps may have been replayed.

``python tests/plans/test_pure_batches.py DIR`` runs the mixed plan in ``DIR`` (the killed child).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import anyio
import pytest

from runner.definitions.operations import OPERATIONS as CATALOGUE
from runner.definitions.recipes import RecipeLibrary
from runner.plans.keeper import MemoryKeeper
from runner.plans.ops import OPERATIONS
from runner.service import Service, plan_run
from runner.service.inputs.plans import PlanRunInput, PlanSubmitInput
from runner.service.plans import Plans
from runner.service.steps import RUN, OpContext, Operation, Outputs, Resume, StepOperation
from runner.sql.store_sqlite import SQLiteStore
from tests.support.plans import records_of
from tests.support.specs import shared_library

EFFECT = "git.preflight"  # the stand-in's name: a built-in entry that is not pure
BLOCKS = 12  # the long plan: BLOCKS times (PURES pure steps, one effectful step)
PURES = 40


def committed(db: Path, plan_id: str) -> dict[str, dict[str, Any]]:
    """The step records the store has committed for ``plan_id``, read through a connection of our own."""
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        rows = conn.execute(
            "SELECT key, value FROM instance_parts WHERE instance_id = ? AND key LIKE 'steps/%'", (f"plan/{plan_id}",)
        ).fetchall()
    return {str(key).partition("/")[2]: json.loads(value) for key, value in rows}


class Effect:
    """The built-in operations, but ``git.preflight`` is an effect outside the store: a line in
    ``effects`` per run (its step and key); resumed, it is done when its line is there."""

    def __init__(self, db: Path, effects: Path, order: list[str]) -> None:
        self.db = db
        self.effects = effects
        self.order = order  # the recipe's step ids, in order
        self.seen: list[dict[str, dict[str, Any]]] = []  # what was committed at each effect

    def get(self, name: str) -> StepOperation | None:
        if name != EFFECT:
            return OPERATIONS.get(name)
        return Operation(CATALOGUE[EFFECT], self.run, self.resume)

    async def run(self, ctx: OpContext, args: dict[str, Any]) -> Outputs:
        self.seen.append(committed(self.db, ctx.plan_id))
        with self.effects.open("a") as out:  # one write(2): a kill lands before or after it
            out.write(f"{ctx.step_id} {ctx.key}\n")
        return Outputs({"head": ctx.step_id})

    def resume(self, ctx: OpContext, args: dict[str, Any]) -> Resume:
        done = self.effects.exists() and f"{ctx.step_id} {ctx.key}\n" in self.effects.read_text().splitlines(True)
        return Resume("done", Outputs({"head": ctx.step_id})) if done else RUN


def layout_ids(layout: list[str]) -> list[str]:
    return [f"{kind}{index}" for index, kind in enumerate(layout)]


def mixed_recipe(directory: Path, layout: list[str]) -> list[str]:
    """A recipe ``mixed`` of ``layout`` (``p``: flow.pass, ``e``: the effect), each step passing on the
    last one's value; its step ids."""
    lines = ["recipe: mixed", "version: 1", "description: pure and effectful steps", "steps:"]
    ids: list[str] = []
    for index, (kind, step) in enumerate(zip(layout, layout_ids(layout), strict=True)):
        if kind == "p":
            value = "'${steps." + ids[-1] + ".n}'" if ids and ids[-1].startswith("p") else index
            lines.append(f"  - {{id: {step}, do: flow.pass, with: {{values: {{n: {value}}}}}}}")
        else:
            lines.append(f"  - {{id: {step}, do: {EFFECT}, with: {{worktree: {str(directory)!r}}}}}")
        ids.append(step)
    (directory / "mixed.yaml").write_text("\n".join(lines) + "\n")
    return ids


class World:
    def __init__(self, root: Path, layout: list[str]) -> None:
        self.root = root
        (root / "recipes").mkdir(parents=True, exist_ok=True)
        self.ids = mixed_recipe(root / "recipes", layout)
        self.db = root / "corral.db"
        self.effects = root / "effects.txt"
        self.store = SQLiteStore(self.db)
        self.service = Service(self.store, shared_library(), actor="test")
        self.ops = Effect(self.db, self.effects, self.ids)
        self.plans = Plans(self.service, RecipeLibrary([root / "recipes"]), MemoryKeeper(), self.ops)
        self.heard: list[dict[str, Any]] = []

    def run(self, plan_id: str = "m") -> Any:
        self.plans.submit(PlanSubmitInput({"plan": plan_id, "recipe": "mixed", "controller": "ctl"}))
        return anyio.run(self.plans.run, PlanRunInput(plan_id), self.heard.append)

    def commits(self, plan_id: str = "m") -> list[tuple[str, list[tuple[str, str]]]]:
        """Each commit of the plan after its submit (its lease renewals aside): trigger and records."""
        return [
            (e.trigger, [(s, str(r["state"])) for s, r in records_of(e.payload)])
            for e in self.store.events()
            if e.instance_id == f"plan/{plan_id}" and e.trigger not in ("submit", "renew_runner")
        ]


@pytest.fixture
def world(tmp_path: Path) -> Any:
    made = World(tmp_path, list("ppepepp"))
    yield made
    made.store.close()


def test_the_catalogue_declares_only_the_flow_operations_pure() -> None:
    assert sorted(name for name, spec in CATALOGUE.items() if spec.pure) == ["flow.fail", "flow.pass"]
    assert all(spec.safe_to_retry for spec in CATALOGUE.values() if spec.pure)
    with pytest.raises(ValueError, match="safe to retry"):
        type(CATALOGUE["flow.pass"])("x.y", "pure but not safe to retry", pure=True)


def test_an_effect_runs_only_after_everything_before_it_is_committed(world: World) -> None:
    plan = world.run()
    assert plan.state == "succeeded", plan.data.get("failure")
    assert world.effects.read_text().count("\n") == 2
    before_first, before_second = world.ops.seen
    assert {s: r["state"] for s, r in before_first.items()} == {"p0": "succeeded", "p1": "succeeded", "e2": "running"}
    assert {s: r["state"] for s, r in before_second.items()} == {
        "p0": "succeeded",
        "p1": "succeeded",
        "e2": "succeeded",
        "p3": "succeeded",
        "e4": "running",
    }
    assert world.commits() == [
        ("start", []),
        ("step", [("p0", "succeeded"), ("p1", "succeeded"), ("e2", "running")]),
        ("step", [("e2", "succeeded")]),  # an effect's outcome, committed before the pure step after it runs
        ("step", [("p3", "succeeded"), ("e4", "running")]),
        ("step", [("e4", "succeeded")]),
        ("finish", [("p5", "succeeded"), ("p6", "succeeded")]),
    ]
    seqs = [e.seq for e in world.store.events() if e.instance_id == "plan/m"]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), "one event per commit, in the global sequence"
    events = [(e["event"], e["step"]) for e in world.heard if e["event"].startswith("step_")]
    assert events == [(kind, step) for step in world.ids for kind in ("step_started", "step_succeeded")]


def test_a_commit_is_counted_by_the_store_connection(world: World) -> None:
    """The same commits, counted by the bench's own counter: write transactions on the store's connection."""
    from bench.common import WriteCommits

    commits = WriteCommits()
    world.plans.submit(PlanSubmitInput({"plan": "t", "recipe": "mixed", "controller": "ctl"}))
    world.store._conn.set_trace_callback(commits)  # the adapter's connection
    try:
        assert anyio.run(world.plans.run, PlanRunInput("t")).state == "succeeded"
    finally:
        world.store._conn.set_trace_callback(None)
    assert commits.count == len(world.commits("t")) == 6  # start, two effects' starts and outcomes, finish


def test_a_run_of_pure_steps_is_cut_at_its_bounds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    many = World(tmp_path / "many", ["p"] * 150)
    try:
        assert many.run().state == "succeeded"
        sizes = [(trigger, len(records)) for trigger, records in many.commits()]
        assert sizes == [("start", 0), ("step", 64), ("step", 64), ("finish", 22)]
    finally:
        many.store.close()
    monkeypatch.setattr(plan_run, "PURE_BATCH_SECONDS", 0.0)  # every record is old at once
    slow = World(tmp_path / "slow", ["p"] * 5)
    try:
        assert slow.run().state == "succeeded"
        assert [len(records) for _, records in slow.commits()] == [0, 1, 1, 1, 1, 1]
    finally:
        slow.store.close()


def test_a_crash_in_a_run_of_pure_steps_replays_them(tmp_path: Path) -> None:
    """A runner that dies inside a batch leaves it uncommitted: the next run computes it again."""

    class Crash(BaseException):
        pass

    crashing = World(tmp_path, list("ppepppp"))
    try:
        real = crashing.ops.get("flow.pass")
        assert real is not None
        calls = 0
        died = False

        async def dies_on_the_sixth(ctx: OpContext, args: dict[str, Any]) -> Outputs:
            nonlocal calls, died
            calls += 1
            if ctx.step_id == "p5" and not died:
                died = True
                raise Crash
            return await real.run(ctx, args)

        class Dying(Effect):
            def get(self, name: str) -> StepOperation | None:
                if name == "flow.pass":
                    return Operation(CATALOGUE["flow.pass"], dies_on_the_sixth)
                return super().get(name)

        crashing.plans.operations = Dying(crashing.db, crashing.effects, crashing.ids)
        with pytest.raises(Crash):
            crashing.run()
        assert {s: r["state"] for s, r in committed(crashing.db, "m").items()} == {
            "p0": "succeeded",
            "p1": "succeeded",
            "e2": "succeeded",
        }, "p3 and p4 ran but are not committed"
        plan = crashing.run()
        assert plan.state == "succeeded"
        assert calls == 2 + 3 + 4, "p0, p1; p3-p5 (dies); p3-p6 again"
        assert crashing.effects.read_text().count("\n") == 1, "the effect ran once"
    finally:
        crashing.store.close()


# --- kill -9 of a real runner, at several points -----------------------------------------------------------


def child(root: Path) -> None:
    """Run (or resume) the long mixed plan in ``root``, printing each progress event as a line."""
    world = World(root, (["p"] * PURES + ["e"]) * BLOCKS)
    try:
        world.plans.submit(PlanSubmitInput({"plan": "long", "recipe": "mixed", "controller": "ctl"}))

        def heard(event: dict[str, Any]) -> None:
            print(json.dumps(event), flush=True)

        final = anyio.run(world.plans.run, PlanRunInput("long"), heard)
        print(json.dumps({"final": final.state}), flush=True)
    finally:
        world.store.close()


def effect_lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


@pytest.mark.slow  # a few runner processes, each killed or run to the end
def test_kill_9_at_several_points_then_resume_runs_each_effect_once(tmp_path: Path) -> None:
    root = tmp_path / "long"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    argv = [sys.executable, str(Path(__file__).resolve()), str(root)]
    effects = root / "effects.txt"
    kills = [(2, 0.0), (5, 0.002), (8, 0.0005)]  # after the Nth effect, after so many seconds
    outputs: list[str] = []
    for index, (after, delay) in enumerate(kills):
        heard, errors = tmp_path / f"heard-{index}.jsonl", tmp_path / f"stderr-{index}.txt"
        with heard.open("w") as out, errors.open("w") as err:  # files: a full pipe would stall the runner
            proc = subprocess.Popen(argv, env=env, stdout=out, stderr=err)
            deadline = time.monotonic() + 60
            while len(effect_lines(effects)) < after and proc.poll() is None:
                assert time.monotonic() < deadline, "the runner made no progress"
                time.sleep(0.0005)
            time.sleep(delay)
            assert proc.poll() is None, f"the runner ended before the kill: {errors.read_text()[-2000:]}"
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        assert proc.returncode == -signal.SIGKILL, f"the runner ended before the kill: {errors.read_text()[-2000:]}"
        outputs.append(heard.read_text())
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.splitlines()[-1]) == {"final": "succeeded"}

    ids = layout_ids((["p"] * PURES + ["e"]) * BLOCKS)
    records = committed(root / "corral.db", "long")
    assert sorted(records) == sorted(ids) and {r["state"] for r in records.values()} == {"succeeded"}
    ran = [line.split()[0] for line in effect_lines(effects)]
    assert sorted(ran) == sorted(s for s in ids if s.startswith("e")), "every effect once, none twice"
    started = [
        json.loads(line)["step"]
        for out in [*outputs, done.stdout]
        for line in out.splitlines()
        if '"step_started"' in line
    ]
    effectful_starts = [s for s in started if s.startswith("e")]
    assert len(effectful_starts) == len(set(effectful_starts)), "an effectful step never starts twice"
    # A pure step may have started more than once (its batch died uncommitted), or been heard never (the
    # kill came between its batch's commit and the print): its record above is what says it ran.
    with closing(sqlite3.connect(f"file:{root / 'corral.db'}?mode=ro", uri=True)) as conn:
        payloads = conn.execute("SELECT payload FROM events WHERE instance_id = 'plan/long' ORDER BY seq").fetchall()
    running = [s for (payload,) in payloads for s, r in records_of(json.loads(payload)) if r["state"] == "running"]
    assert sorted(running) == sorted(s for s in ids if s.startswith("e")), "each effect started once, recorded"


if __name__ == "__main__":
    child(Path(sys.argv[1]))
