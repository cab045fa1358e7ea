"""``kill -9`` of a real ``corral run`` at every step boundary of the ``review`` recipe, then ``corral run``
again: the plan finishes, no operation ran twice and no prompt was delivered twice.

The runner is the real executable with ``CORRAL_HOME`` and ``CORRAL_STORE`` in a temporary directory.
The test watches the store's event log through its own SQLite connection, lets the runner commit one
transaction at a time (see ``World.kill_when``) and sends SIGKILL as soon as the chosen event is
committed: a step's ``running`` record (the step started, its operation has not acted; committed
with the previous step's ``succeeded`` record, one transaction per step) and the step's ``succeeded``
record (the boundary before the next step, which that same commit opens; for the last step, the
plan's ``finish``). A kill that lands later than that boundary (the runner got further before the
signal) is retried in a fresh directory, so every boundary is really exercised. Between an
operation's last event and the plan's record of it (it acted, the plan has not recorded it) the
runner is killed by the fault point ``plan.step:<step>:done``. After the second run the store and
the agent's slot directory are checked directly: one ``running`` record per step and attempt, one
instance and one event per operation, one receipt, one ``run-*.log`` (one per delivered prompt).
Also: a kill while a collect waits, and a relay left ``reserved`` (delivered, never confirmed), which
pauses the plan until ``corral abandon``.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest

from runner import credentials
from runner.agents.abc import AgentError, Expect, Observation
from runner.agents.kinds import Kinds
from runner.agents.process import ProcessHost
from runner.plans.ops import OpContext
from runner.service import AcquireInput, DeliveryError, RelayInput, Service
from runner.sql.store_sqlite import SQLiteStore
from runner.sql.store_sqlite_writelock import Place, QueueTimeout, WriteQueue, lock_path
from tests.support.plans import records_of, steps_by_id
from tests.support.specs import shared_library

pytestmark = pytest.mark.slow

AUTHORITY = hashlib.sha256(b"crash authority").hexdigest()
STEPS = ("acquire", "start", "relay", "collect", "close", "release-controller")
# The last event each step's operation writes (machine, trigger) before the plan records the outcome.
OPERATION_DONE = {
    "acquire": ("controller", "acquire"),
    "start": ("reviewer", "start:success"),
    "relay": ("receipt", "relay:success"),
    "collect": ("receipt", "collect"),
    "close": ("reviewer", "close:success"),
    "release-controller": ("controller", "release"),
}
PROMPT = "Review this project.\necho reviewed once"
BUDGET = 90.0  # seconds to land one kill point


class Starved(Exception):
    """The runner made no progress to the kill point in time (a saturated machine): try again."""


@dataclass(frozen=True)
class Row:
    seq: int
    instance: str
    machine: str
    trigger: str
    from_state: str
    to_state: str
    payload: dict[str, Any]

    @property
    def plan_steps(self) -> list[tuple[str, str]]:
        """(step, record state) of each record this plan event committed, in order (none for another)."""
        if self.machine != "plan":
            return []
        return [(step, str(record["state"])) for step, record in records_of(self.payload)]

    @property
    def plan_step(self) -> tuple[str, str] | None:
        """The last record this event committed (a step's start, or the last outcome), if any."""
        return self.plan_steps[-1] if self.plan_steps else None


def read_rows(db: Path, since: int = 0) -> list[Row]:
    if not db.exists():
        return []
    try:
        with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
            found = conn.execute(
                "SELECT seq, instance_id, machine, trigger, from_state, to_state, payload FROM events "
                "WHERE seq > ? ORDER BY seq",
                (since,),
            ).fetchall()
    except sqlite3.OperationalError:  # not created yet
        return []
    return [Row(r[0], r[1], r[2], r[3], r[4], r[5], json.loads(r[6])) for r in found]


def query(db: Path, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        return list(conn.execute(sql, args).fetchall())


def tickets_taken(db: Path) -> int:
    """The write queue's ticket counter (it moves when a writer queues behind another)."""
    raw = lock_path(db).read_bytes()[:8]
    return int.from_bytes(raw, "little") if len(raw) == 8 else 0


class World:
    """A state home, a store file elsewhere, a project directory and a review plan file."""

    def __init__(self, root: Path, base_env: dict[str, str], prompt: str = PROMPT) -> None:
        root.mkdir(parents=True)
        self.root = root
        self.home = root / "home"
        (root / "state").mkdir()
        self.db = root / "state" / "corral.db"
        self.env = {**base_env, "CORRAL_HOME": str(self.home), "CORRAL_STORE": f"sqlite://{self.db}"}
        self.project = root / "project"
        self.project.mkdir()
        (self.project / "main.py").write_text("print('hi')\n")
        self.plan_id = "crash-1"
        self.plan = root / "plan.yaml"
        doc = {
            "plan": self.plan_id,
            "recipe": "review",
            "controller": "ctl",
            "inputs": {
                "cwd": str(self.project),
                "prompt": prompt,
                "kind": "script",
                "timeout": 60,
                "authority_ref": "CRASH-1",
                "authority_sha256": AUTHORITY,
            },
        }
        self.plan.write_text(json.dumps(doc))

    def corral(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(Path(sys.executable).parent / "corral"), *args],
            capture_output=True,
            text=True,
            env=self.env,
            cwd=self.root,
            timeout=90,
            check=False,
        )

    def start(self, faults: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        """``corral run`` in the background; ``faults`` arms a fault point (:mod:`runner.faults`) for this run only."""
        return subprocess.Popen(
            [str(Path(sys.executable).parent / "corral"), "run", str(self.plan), "--json"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**self.env, **(faults or {})},
            cwd=self.root,
        )

    def kill_when(
        self, proc: subprocess.Popen[bytes], hit: Any, timeout: float = 60, delay: float = 0, then: Any = None
    ) -> Row:
        """SIGKILL ``proc`` right after the commit of an event for which ``hit(row)`` holds, before its next commit.

        The watcher holds a place in the store's FIFO write queue (``<db>.lock``, which every corral
        writer enters before it asks SQLite for the write lock) and SQLite's write lock with it, reading
        the new events meanwhile, and hands the queue on one writer at a time: once a writer has queued
        behind it (the queue's ticket counter moves), it queues again behind that writer, and only then
        leaves. The kernel grants the queue in ticket order, so that writer commits one transaction and
        the watcher has the queue back before the writer's next one can start; nothing depends on which
        process is on a CPU when (the old watcher raced the runner for SQLite's lock in 1 ms windows
        and, on a loaded machine, lost: the runner committed twice, or starved). On a hit the runner is
        killed while its next write waits in the queue (after ``delay`` seconds, and once ``then()``
        holds, if given).
        """
        deadline = time.monotonic() + timeout
        last = 0
        conn = None
        queue = None
        place: Place | None = None
        queued: list[Place | Starved] = []  # the next place (or why none), once the helper thread below is done
        helper: threading.Thread | None = None
        try:
            while conn is None:
                conn = self._reader()
                if conn is None:
                    if proc.poll() is not None:
                        raise AssertionError(f"the runner ended (exit {proc.returncode}) before creating the store")
                    if time.monotonic() > deadline:
                        raise Starved("the runner never created the store")
                    time.sleep(0.001)
            queue = WriteQueue.open(self.db)
            assert queue is not None, "the store's FIFO write queue works here (Linux OFD locks)"
            place = self._enter(queue, deadline)
            self._lock(conn, deadline)
            while True:
                rows = conn.execute(
                    "SELECT seq, instance_id, machine, trigger, from_state, to_state, payload FROM events "
                    "WHERE seq > ? ORDER BY seq",
                    (last,),
                ).fetchall()
                for r in rows:
                    row = Row(r[0], r[1], r[2], r[3], r[4], r[5], json.loads(r[6]))
                    last = row.seq
                    if hit(row):
                        while then is not None and not then() and time.monotonic() < deadline:
                            time.sleep(0.0005)
                        time.sleep(delay)
                        os.kill(proc.pid, signal.SIGKILL)
                        proc.wait(timeout=30)
                        return row
                # Let the next writer through, and only it: queue behind it first, then leave. (A third
                # writer queuing in the same instant may pass too: ``crash`` then tries again.)
                assert place is not None
                self._wait_queued(proc, place.ticket, deadline, "a writer queued behind the watcher")
                writer = tickets_taken(self.db)  # at least that writer's ticket
                helper = threading.Thread(target=self._enter_into, args=(queue, deadline, queued), daemon=True)
                helper.start()
                self._wait_queued(proc, writer, deadline, "the watcher queued behind that writer")
                conn.execute("ROLLBACK")
                queue.release(place)
                place = None
                helper.join(max(deadline - time.monotonic(), 0) + 1)  # its acquire gives up at the deadline
                if not queued:
                    raise Starved("the kill point never came")  # the writer held the queue past the deadline
                entered, helper = queued.pop(), None
                if isinstance(entered, Starved):
                    raise entered
                place = entered
                self._lock(conn, deadline)  # free: the writer left the queue after its commit
        finally:
            if conn is not None:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                conn.close()
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
            if queue is not None:
                if place is not None:
                    queue.release(place)  # first: a helper still queued waits for this place
                if helper is not None:
                    helper.join(max(deadline - time.monotonic(), 0) + 1)
                for entered in queued:
                    if isinstance(entered, Place):
                        queue.release(entered)
                queue.close()

    @staticmethod
    def _enter(queue: WriteQueue, deadline: float) -> Place:
        """A place in the store's write queue (a writer holding it past ``deadline``: the runner starved)."""
        try:
            return queue.acquire(deadline)
        except QueueTimeout:
            raise Starved("the store's write queue stayed taken") from None

    @classmethod
    def _enter_into(cls, queue: WriteQueue, deadline: float, into: list[Place | Starved]) -> None:
        """:meth:`_enter` for a helper thread: the place, or the ``Starved`` that says why none, into ``into``."""
        try:
            into.append(cls._enter(queue, deadline))
        except Starved as exc:
            into.append(exc)

    def _wait_queued(self, proc: subprocess.Popen[bytes], above: int, deadline: float, what: str) -> None:
        """Until the queue's ticket counter passes ``above``: a writer took a ticket behind that one."""
        while tickets_taken(self.db) <= above:
            if proc.poll() is not None:
                raise AssertionError(f"the runner ended (exit {proc.returncode}) before the kill point")
            if time.monotonic() > deadline:
                raise Starved(f"the kill point never came (waiting for {what})")
            time.sleep(0.0005)

    @staticmethod
    def _lock(conn: sqlite3.Connection, deadline: float) -> None:
        """Take the write lock the moment it is free (the connection does not wait by itself)."""
        while True:
            try:
                conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise
                if time.monotonic() > deadline:
                    raise Starved("the store stayed locked") from None

    def _reader(self) -> sqlite3.Connection | None:
        """A connection (it only ever takes the write lock, never writes) once the event log exists."""
        if not self.db.exists():
            return None
        conn = sqlite3.connect(str(self.db), isolation_level=None, timeout=0)
        try:
            conn.execute("SELECT 1 FROM events LIMIT 1").fetchall()
        except sqlite3.OperationalError:
            conn.close()
            return None
        return conn

    def plan_row(self) -> tuple[str, dict[str, Any]]:
        """The plan's state and data, its step records read from its parts (one row per step)."""
        plan = f"plan/{self.plan_id}"
        ((state, data),) = query(self.db, "SELECT state, data FROM instances WHERE id = ?", plan)
        loaded = json.loads(data)
        loaded["steps"], loaded["private"] = {}, {}
        for key, value in query(self.db, "SELECT key, value FROM instance_parts WHERE instance_id = ?", plan):
            field, _, step = str(key).partition("/")
            loaded[field][step] = json.loads(value)
        return str(state), loaded

    def run_logs(self) -> list[Path]:
        return sorted((self.home / "agents").glob("*/run-*.log"))

    def slots(self) -> list[tuple[str, str, int]]:
        return [
            (str(r[0]), str(r[1]), int(r[2])) for r in query(self.db, "SELECT pane_id, status, seq FROM agent_slots")
        ]


def crash(tmp_path: Path, env: dict[str, str], name: str, hit: Any, after_ok: Any) -> tuple[World, Row]:
    """Run the plan, kill the runner at ``hit``; retry in a fresh world until ``after_ok(target, later)``.

    A retry is for a commit the watcher could not hold back: the runner's first ones, before the watcher
    holds the queue, or another writer's queued in the same instant as the runner's (``World.kill_when``).
    """
    landed: list[str] = []
    budget = time.monotonic() + BUDGET
    attempt = 0
    while time.monotonic() < budget:
        world = World(tmp_path / f"{name}-{attempt}", env)
        attempt += 1
        try:
            target = world.kill_when(
                world.start(),
                hit,
                timeout=min(30.0, max(budget - time.monotonic(), 1.0)),
            )
        except Starved as exc:
            landed.append(str(exc))
            continue
        later = read_rows(world.db, target.seq)
        if after_ok(target, later):
            print(f"crash point {name}: landed on try {attempt}")
            return world, target
        landed.append(", ".join(f"{r.machine} {r.trigger} {r.plan_step or ''}" for r in later[:3]))
    raise AssertionError(f"the kill never landed on its boundary in {attempt} tries; got past it to: {landed}")


def resume_and_check(world: World) -> dict[str, Any]:
    """``corral run`` again; the plan succeeds and every operation happened exactly once."""
    again = world.corral("run", str(world.plan), "--json")
    assert again.returncode == 0, again.stdout + again.stderr
    summary = json.loads(again.stdout.splitlines()[-1])
    assert summary["event"] == "summary" and summary["state"] == "succeeded", summary
    return check_exactly_once(world)


def check_exactly_once(world: World) -> dict[str, Any]:
    state, data = world.plan_row()
    assert state == "succeeded"
    rows = read_rows(world.db)
    records = Counter(found for r in rows for found in r.plan_steps)
    for step in STEPS:
        assert records[(step, "running")] == 1, f"{step}: one running record per attempt, got {records}"
        assert records[(step, "succeeded")] == 1, f"{step}: one outcome, got {records}"
        assert data["steps"][step]["attempt"] == 1
    operations = Counter((r.machine, r.trigger) for r in rows if r.machine != "plan")
    expected = {
        ("controller", "acquire"): 1,
        ("reviewer", "start"): 1,
        ("reviewer", "start:success"): 1,
        ("receipt", "relay"): 1,
        ("receipt", "relay:success"): 1,
        ("receipt", "collect"): 1,
        ("reviewer", "close"): 1,
        ("reviewer", "close:success"): 1,
        ("controller", "release"): 1,
    }
    assert {k: operations[k] for k in expected} == expected, operations
    assert set(operations) - set(expected) <= {("controller", "renew")}, operations
    receipts = query(world.db, "SELECT state FROM instances WHERE machine = 'receipt'")
    assert receipts == [("completed",)], "exactly one receipt for the one relay step"
    reviewers = query(world.db, "SELECT state FROM instances WHERE machine = 'reviewer'")
    assert reviewers == [("closed",)]
    assert [s[0] for s in world.slots()] == ["p1"], "one agent was started"
    logs = world.run_logs()
    assert [p.relative_to(world.home / "agents").as_posix() for p in logs] == ["p1/run-1.log"], "one delivery"
    output = logs[0].read_text()
    assert "reviewed once" in output
    assert data["private"]["collect"]["output"] == output, "the collected result is exactly the one delivery's"
    return data


def at_boundary(target: Row, later: list[Row]) -> bool:
    """Nothing after the commit of the step's ``succeeded`` record (which also started the next step)."""
    return not later


def nothing_after(target: Row, later: list[Row]) -> bool:
    return not later


def step_event(step: str, state: str) -> Any:
    return lambda row: (step, state) in row.plan_steps


@pytest.mark.parametrize("step", STEPS)
def test_kill_when_a_step_starts(tmp_path: Path, cli_env: dict[str, str], step: str) -> None:
    """Killed right after ``running`` was recorded: the resumed step asks its operation and runs it once.

    That one commit also recorded the previous step's outcome (the fused transition): it is settled
    and does not run again."""
    world, target = crash(tmp_path, cli_env, step, step_event(step, "running"), nothing_after)
    state, data = world.plan_row()
    assert (state, data["steps"][step]["state"]) == ("running", "running")
    index = STEPS.index(step)
    if index > 0:
        previous = STEPS[index - 1]
        assert target.plan_steps == [(previous, "succeeded"), (step, "running")], "one commit for both"
        assert data["steps"][previous]["state"] == "succeeded"
    else:
        assert target.plan_steps == [(step, "running")]
    resume_and_check(world)


@pytest.mark.parametrize("step", STEPS)
def test_kill_after_the_operation_acted_before_the_plan_recorded_it(
    tmp_path: Path, cli_env: dict[str, str], step: str
) -> None:
    """Killed between the operation's last event and the step's outcome: found done under its key.

    The kill is the fault point ``plan.step:<step>:done`` (the operation returned: its last event is
    committed, and for ``acquire`` its credential file is written; the outcome is not): the outcome of
    a step is committed only with the next step's start, so no watcher can reliably stop the runner
    between the two."""
    world = World(tmp_path / step, cli_env)
    proc = world.start(faults={"CORRAL_TEST_FAULTS": "1", "CORRAL_FAULT": f"after:plan.step:{step}:done"})
    assert proc.wait(timeout=90) == -signal.SIGKILL, "the runner died at the fault point"
    rows = read_rows(world.db)
    assert (rows[-1].machine, rows[-1].trigger) == OPERATION_DONE[step], "the operation's last event is the last"
    plan_rows = [r for r in rows if r.plan_steps]
    assert plan_rows[-1].plan_steps[-1] == (step, "running"), "the plan recorded nothing after the step started"
    _, data = world.plan_row()
    assert data["steps"][step]["state"] == "running", "the plan never heard of the operation's outcome"
    resume_and_check(world)


@pytest.mark.parametrize("step", STEPS)
def test_kill_at_the_step_boundary(tmp_path: Path, cli_env: dict[str, str], step: str) -> None:
    """Killed as soon as the step's ``succeeded`` record is committed: with the next step's ``running``
    record (its operation has not acted), or for the last step with the plan's ``finish``."""
    world, target = crash(tmp_path, cli_env, step, step_event(step, "succeeded"), at_boundary)
    state, data = world.plan_row()
    assert data["steps"][step]["state"] == "succeeded"
    if step == STEPS[-1]:
        assert (state, target.trigger) == ("succeeded", "finish")
    else:
        following = STEPS[STEPS.index(step) + 1]
        assert state == "running" and data["steps"][following]["state"] == "running"
        assert target.plan_steps == [(step, "succeeded"), (following, "running")]
    resume_and_check(world)


def test_kill_in_the_middle_of_a_collect(tmp_path: Path, cli_env: dict[str, str]) -> None:
    world = World(tmp_path / "mid", cli_env, prompt="sleep 2\necho reviewed once")
    proc = world.start()
    world.kill_when(proc, step_event("collect", "running"), delay=0.5)
    assert world.slots() == [("p1", "working", 1)], "killed while the agent works and the collect waits"
    assert read_rows(world.db)[-1].plan_step == ("collect", "running"), "nothing was recorded after it"
    state, data = world.plan_row()
    assert state == "running" and data["steps"]["collect"]["state"] == "running"
    assert query(world.db, "SELECT state FROM instances WHERE machine = 'receipt'") == [("pending",)]
    started = time.monotonic()
    data = resume_and_check(world)
    assert time.monotonic() - started > 0.5, "the resumed collect waited for the agent"
    assert data["steps"]["collect"]["outputs"]["settled_seq"] == 2


def test_kill_while_the_collect_waits_then_resume_after_the_agent_finished(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    world = World(tmp_path / "mid-late", cli_env, prompt="sleep 1\necho reviewed once")
    proc = world.start()
    world.kill_when(proc, step_event("collect", "running"))
    deadline = time.monotonic() + 30
    while world.slots() != [("p1", "done", 2)]:
        assert time.monotonic() < deadline, world.slots()
        time.sleep(0.05)
    resume_and_check(world)


class UnconfirmedHost(ProcessHost):
    """Delivers the prompt for real, then loses the confirmation (the two-phase relay stays ``reserved``)."""

    def prompt(
        self, pane_id: str, text: str, expect: Expect | None = None, gate: Any = None, schema: str | None = None
    ) -> Observation:
        super().prompt(pane_id, text, expect, gate, schema)
        raise AgentError("the confirmation of the delivery was lost", code="agent_prompt_unconfirmed")


def test_a_relay_left_reserved_pauses_the_plan_until_abandoned(tmp_path: Path, cli_env: dict[str, str]) -> None:
    world, _ = crash(tmp_path, cli_env, "reserved", step_event("relay", "running"), nothing_after)
    # The state a kill between the relay's intent and its outcome leaves, built through the store: the
    # receipt under the step's own key, reserved, its prompt actually delivered.
    with SQLiteStore(world.db) as store:
        kinds = Kinds.load([])
        host = UnconfirmedHost(store, world.home / "agents", kinds)
        service = Service(store, shared_library(), actor="test", hosts=lambda n: host, kinds=kinds)
        credential = credentials.load(credentials.path_for(world.home / "credentials", "ctl"), "ctl", store.url)
        key = OpContext(cast("Any", None), world.plan_id, "relay", 1, "ctl", None).key
        with pytest.raises(DeliveryError) as caught:
            service.receipts.relay(RelayInput("ctl", credential, "reviewer", PROMPT, receipt_id=key))
        assert caught.value.code == "delivery_ambiguous"
    ((token, receipt_state),) = [
        (json.loads(r[0])["token"], r[1])
        for r in query(world.db, "SELECT data, state FROM instances WHERE machine = 'receipt'")
    ]
    assert receipt_state == "reserved" and token.endswith(key)
    assert len(world.run_logs()) == 1

    paused = world.corral("run", str(world.plan), "--json")
    assert paused.returncode == 5, paused.stdout + paused.stderr
    summary = json.loads(paused.stdout.splitlines()[-1])
    assert summary["state"] == "paused"
    assert "corral abandon" in summary["paused_reason"] and token in summary["paused_reason"]
    assert world.plan_row()[0] == "paused"
    assert len(world.run_logs()) == 1, "the unconfirmed prompt was not sent again"
    again = world.corral("plans", "resume", world.plan_id, "--json")
    assert again.returncode == 5, "still reserved: still paused"

    deadline = time.monotonic() + 30
    while world.slots() != [("p1", "done", 2)]:
        assert time.monotonic() < deadline, world.slots()
        time.sleep(0.05)
    abandoned = world.corral(
        "abandon", "--controller", "ctl", "--receipt", token, "--message", "seen settled", "--json"
    )
    assert abandoned.returncode == 0, abandoned.stdout + abandoned.stderr
    assert json.loads(abandoned.stdout)["receipt"]["state"] == "abandoned"

    resumed = world.corral("plans", "resume", world.plan_id, "--json")
    summary = json.loads(resumed.stdout.splitlines()[-1])
    assert summary["state"] == "failed" and resumed.returncode == 1, resumed.stdout
    steps = steps_by_id(summary)
    assert (steps["relay"]["state"], steps["relay"]["error"]["code"]) == ("failed", "abandoned")
    assert steps["collect"]["state"] == "skipped"
    assert steps["close"]["state"] == "succeeded", "the finally step ran once the plan continued"
    records = Counter(found for r in read_rows(world.db) for found in r.plan_steps)
    assert records[("relay", "running")] == 1
    assert query(world.db, "SELECT state FROM instances WHERE machine = 'receipt'") == [("abandoned",)]
    assert [p.name for p in world.run_logs()] == ["run-1.log"], "no prompt was delivered twice"


def test_an_acquire_found_in_flight_with_the_lease_held_by_a_lost_credential_pauses(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """The state a kill between the lease's commit and the credential file's write left before the grant
    kept its credential-to-be: the lease is active and no credential here holds it. The resumed plan
    must neither fail nor take the lease: it pauses for a person."""
    world, _ = crash(tmp_path, cli_env, "lease", step_event("acquire", "running"), nothing_after)
    with SQLiteStore(world.db) as store:
        service = Service(store, shared_library(), actor="cli:lost")
        service.controller.acquire(AcquireInput("ctl", "CRASH-1", AUTHORITY, 900))
    assert not (world.home / "credentials" / "ctl.json").exists()
    again = world.corral("run", str(world.plan), "--json")
    assert again.returncode == 5, again.stdout + again.stderr
    summary = json.loads(again.stdout.splitlines()[-1])
    assert summary["state"] == "paused" and "takeover" in summary["paused_reason"], summary
    assert steps_by_id(summary)["acquire"]["state"] == "running"
    assert query(world.db, "SELECT count(*) FROM instances WHERE machine = 'reviewer'") == [(0,)]
    assert Counter((r.machine, r.trigger) for r in read_rows(world.db))[("controller", "acquire")] == 1
