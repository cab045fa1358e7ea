"""PostgreSQL killed under corral: ``pg_ctl restart -m immediate`` (every server process killed, crash
recovery on start) in the middle of a stream of transitions and of a running plan, on a private cluster
this module starts (never the shared one: the other tests keep running), durable commits on.

* A writer process commits a stream of compare-and-set transitions and prints each one the store
  acknowledged; the server is killed in the middle. Afterwards every acknowledged transition is in the
  log at its seq and version, the log has no hole, and the writer saw ``store_unavailable`` (naming the
  server) while the server was down, never anything else, and carried on after it came back.
* A real ``corral run`` of the ``review`` recipe with the server killed while a step runs; ``corral run``
  again finishes the plan, and every operation happened once, one prompt was delivered.
* The real ``corral`` with its server gone: ``store_unavailable``, exit 5, naming the server.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import pgserver
from tests.support.plans import records_of
from tests.support.stores import with_database

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
TRANSITIONS = 300
KILL_AFTER = 80  # acknowledged transitions before the server is killed

WRITER = r"""
import json, sys, time
from runner.context import Instance
from runner.errors import StoreUnavailableError
from runner.store import open_store

url, count = sys.argv[1], int(sys.argv[2])
ids = [f"stream/{n}" for n in range(4)]
store = open_store(url)
done = 0
while done < count:
    name = ids[done % len(ids)]
    try:
        with store.write() as tx:
            current = tx.get(name) or Instance(name, "stream", "start", 0, {})
            if current.data.get("n") == done:  # a commit whose answer was lost did land: not again
                event = None
            else:
                written = tx.put(current, "run", {"n": done})
                event = tx.append(written, "tick", current.state, "writer", {"n": done})
    except StoreUnavailableError as exc:
        # Nothing is re-sent blindly: the loop re-reads the instance (compare-and-set) and goes on.
        print(json.dumps({"unavailable": exc.code, "exit": exc.status.exit, "details": exc.details}), flush=True)
        time.sleep(0.05)
        continue
    if event is None:
        print(json.dumps({"landed": done}), flush=True)
    else:
        print(json.dumps({"seq": event.seq, "id": name, "version": written.version, "n": done}), flush=True)
    done += 1
store.close()
"""


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[Path, str]]:
    """A private, durable cluster: its directory and URL."""
    reason = pgserver.unavailable()
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"PostgreSQL fault tests cannot run under CI: {reason}")
        pytest.skip(f"PostgreSQL: {reason}")
    directory = Path(tempfile.mkdtemp(prefix="corral-pgf-")) / "c"  # short: a socket path is <= 107 bytes
    try:
        url = pgserver.start(directory, durable=True)
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute('CREATE DATABASE "faults"')
        yield directory, with_database(url, "faults")
    finally:
        pgserver.stop(directory)
        shutil.rmtree(directory.parent, ignore_errors=True)


def _url(cluster: tuple[Path, str], schema: str) -> str:
    return with_database(cluster[1], "faults", schema=schema)


def _rows(url: str, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    import psycopg

    from runner.sql.store_postgres import Target

    target = Target(url)
    with psycopg.connect(target.conninfo, autocommit=True) as conn:
        conn.execute("SELECT set_config('search_path', %s, false)", (target.schema,))
        return [tuple(row) for row in conn.execute(sql, args)]


def _env(cli_env: dict[str, str], url: str) -> dict[str, str]:
    return {**cli_env, "CORRAL_STORE": url, "PYTHONPATH": str(REPO)}


def test_every_acknowledged_transition_survives_an_immediate_restart(cluster: tuple[Path, str], tmp_path: Path) -> None:
    directory, _ = cluster
    url = _url(cluster, "stream")
    out = tmp_path / "writer.out"
    with out.open("w") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, url, str(TRANSITIONS)],
            stdout=sink,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
    try:
        deadline = time.monotonic() + 60
        while len(out.read_text().splitlines()) < KILL_AFTER:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "the writer did not get going"
            time.sleep(0.01)
        acked_before = len(out.read_text().splitlines())
        pgserver.restart(directory, "immediate")
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert (proc.returncode, err) == (0, ""), err
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    acks = [line for line in lines if "seq" in line]
    losses = [line for line in lines if "unavailable" in line]
    landed = [line["landed"] for line in lines if "landed" in line]  # committed, its answer lost
    assert sorted([a["n"] for a in acks] + landed) == list(range(TRANSITIONS)), "every transition done once"
    assert len(landed) <= 1, "only the commit in flight when the server died has an unknown outcome"
    assert acked_before < TRANSITIONS, "the restart came in the middle of the stream"
    assert losses, "the writer saw the server go away"
    for loss in losses:
        assert (loss["unavailable"], loss["exit"]) == ("store_unavailable", 5), loss
        assert loss["details"]["server"].endswith("/faults") and loss["details"]["schema"] == "stream", loss
    events = _rows(url, "SELECT seq, instance_id, version FROM events ORDER BY seq")
    by_seq = {seq: (instance, version) for seq, instance, version in events}
    for ack in acks:
        assert by_seq.get(ack["seq"]) == (ack["id"], ack["version"]), f"acknowledged but lost: {ack}"
    assert [seq for seq, _, _ in events] == list(range(1, len(events) + 1)), "a hole in the log"
    versions: dict[str, list[int]] = {}
    for _, instance, version in events:
        versions.setdefault(instance, []).append(version)
    for instance, seen in versions.items():
        assert seen == list(range(1, len(seen) + 1)), f"{instance}: versions {seen}"
    assert len(events) == TRANSITIONS, "a transition whose answer was lost was not applied twice"


AUTHORITY = hashlib.sha256(b"pg fault authority").hexdigest()
STEPS = ("acquire", "start", "relay", "collect", "close")


def _plan(root: Path) -> Path:
    project = root / "project"
    project.mkdir(parents=True)
    (project / "main.py").write_text("print('hi')\n")
    plan = root / "plan.json"
    plan.write_text(
        json.dumps(
            {
                "plan": "pgf-1",
                "recipe": "review",
                "controller": "ctl",
                "inputs": {
                    "cwd": str(project),
                    "prompt": "Review this project.\nsleep 1\necho reviewed once",
                    "kind": "script",
                    "timeout": 60,
                    "authority_ref": "PGF-1",
                    "authority_sha256": AUTHORITY,
                },
            }
        )
    )
    return plan


def _steps_seen(url: str) -> Counter[tuple[str, str]]:
    try:
        rows = _rows(url, "SELECT payload FROM events WHERE machine = 'plan' ORDER BY seq")
    except Exception:
        return Counter()
    return Counter(
        (step, str(record["state"])) for (payload,) in rows for step, record in records_of(json.loads(payload))
    )


@pytest.mark.parametrize("step", ["start", "collect"])
def test_a_plan_finishes_after_an_immediate_restart_with_every_step_once(
    cluster: tuple[Path, str], tmp_path: Path, cli_env: dict[str, str], step: str
) -> None:
    """The server killed as a step starts (``start``: its operation is about to write) or while it
    waits (``collect``: the agent is working); the runner either rides it out (its next transaction
    reconnects) or stops with ``store_unavailable``, and ``corral run`` again finishes the plan."""
    directory, _ = cluster
    url = _url(cluster, f"plan_{step}")
    env = _env(cli_env, url)
    plan = _plan(tmp_path)
    corral = [sys.executable, "-m", "runner.cli"]
    proc = subprocess.Popen(
        [*corral, "run", str(plan), "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        deadline = time.monotonic() + 60
        while _steps_seen(url)[(step, "running")] == 0:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, f"the plan never reached its {step} step"
            time.sleep(0.02)
        pgserver.restart(directory, "immediate")
        first_out, first_err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    runs = [(proc.returncode, first_out[-2000:], first_err[-2000:])]
    state = None
    for _ in range(3):  # the first run may have ended with store_unavailable (exit 5): run it again
        (row,) = _rows(url, "SELECT state FROM instances WHERE id = 'plan/pgf-1'")
        state = row[0]
        if state == "succeeded":
            break
        again = subprocess.run(
            [*corral, "run", str(plan), "--json"], capture_output=True, text=True, env=env, timeout=120, check=False
        )
        runs.append((again.returncode, again.stdout[-2000:], again.stderr[-2000:]))
    assert state == "succeeded", runs
    for code, out, _ in runs[:1]:
        if code != 0:  # the runner lost its server: a clear error document, never a traceback
            error = json.loads(out.splitlines()[-1])
            assert (code, error["error"]["code"]) == (5, "store_unavailable"), runs

    records = _steps_seen(url)
    for name in STEPS:
        assert records[(name, "succeeded")] == 1, f"{name}: one outcome, got {records}"
    operations = Counter(
        (str(m), str(t)) for m, t in _rows(url, "SELECT machine, trigger FROM events WHERE machine <> 'plan'")
    )
    for key in (("controller", "acquire"), ("reviewer", "start:success"), ("receipt", "relay:success")):
        assert operations[key] == 1, operations
    assert operations[("reviewer", "close:success")] == 1, operations
    assert _rows(url, "SELECT state FROM instances WHERE machine = 'receipt'") == [("completed",)]
    assert [r[0] for r in _rows(url, "SELECT pane_id FROM agent_slots")] == ["p1"], "one agent was started"
    logs = sorted((Path(cli_env["CORRAL_HOME"]) / "agents").glob("*/run-*.log"))
    assert [p.name for p in logs] == ["run-1.log"], "one prompt was delivered"
    assert "reviewed once" in logs[0].read_text()


def test_the_cli_without_its_server_says_store_unavailable_naming_it(
    cluster: tuple[Path, str], cli_env: dict[str, str]
) -> None:
    directory, _ = cluster
    url = _url(cluster, "gone")
    env = _env(cli_env, url)
    corral = [sys.executable, "-m", "runner.cli"]
    made = subprocess.run([*corral, "events", "--json"], capture_output=True, text=True, env=env, check=False)
    assert made.returncode == 0, made.stderr
    pgserver.stop_now(directory)
    try:
        gone = subprocess.run([*corral, "events", "--json"], capture_output=True, text=True, env=env, check=False)
    finally:
        pgserver.restart(directory, "immediate")
    assert gone.returncode == 5, gone.stdout + gone.stderr
    assert "Traceback" not in gone.stderr
    error = json.loads(gone.stdout)["error"]
    assert error["code"] == "store_unavailable"
    assert error["details"]["server"].endswith("/faults") and error["details"]["schema"] == "gone"
    assert str(directory / "socket") in error["details"]["server"] or "socket" in error["message"], error
