"""``make chaos``'s entry point, run for real: a short seeded run on SQLite and PostgreSQL finds no anomaly.

The verdict is what is asserted (no anomaly, every fault kind injected, a floor of operations), never a
timing: under load a run does fewer operations, and each one's outcome may be unknown, which the checker
allows for. The schedule a seed draws is the same from run to run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chaos import run as chaos_run
from tests.support import pgserver

REPO = Path(__file__).resolve().parents[2]
SEED = 27


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return env


def _needs_postgres() -> None:
    reason = pgserver.unavailable()
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"make chaos needs PostgreSQL under CI: {reason}")
        pytest.skip(f"PostgreSQL: {reason}")


def _ours(directory: Path) -> list[int]:
    """The processes of the run in ``directory`` still alive, given a few seconds to end (a worker that was
    starting when the run was interrupted reads its end of file and exits)."""
    deadline = time.monotonic() + 15
    while (left := chaos_run.leftovers(directory)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def _named(text: str) -> list[str]:
    """Processes whose command line holds ``text``."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and int(proc.name) != os.getpid():
            try:
                cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if text in cmdline:
                found.append(cmdline)
    return found


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_short_seeded_run_on_both_stores_finds_no_anomaly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _needs_postgres()
    keep = tmp_path / "run"
    argv = [sys.executable, "-m", "chaos", "--minutes", "0.15", "--seed", str(SEED), "--store", "both"]
    done = subprocess.run(
        [*argv, "--json", "--keep", str(keep)], env=_env(), capture_output=True, text=True, timeout=220, check=False
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    doc = json.loads(done.stdout)
    assert doc["anomalies"] == 0, json.dumps(doc["check"]["anomalies"], indent=1)[:4000]
    assert doc["nemesis_errors"] == []
    assert doc["check"]["unexpected_codes"] == {}
    by_store = doc["operations"]["by_store"]
    assert by_store.get("sqlite", 0) >= 50 and by_store.get("postgresql", 0) >= 50, by_store
    assert doc["faults_by_store"]["sqlite"].keys() >= {"kill", "pause", "clock_jump"}, doc["faults_by_store"]
    assert doc["faults_by_store"]["postgresql"].keys() >= {"kill", "pause", "clock_jump", "pg_restart"}
    assert doc["clients"] == 20 and doc["worker_starts"] > 20  # the kills replaced workers
    relayed = doc["receipts"]["by_op"]
    assert relayed.get("relay ok", 0) >= 2 and relayed.get("collect ok", 0) >= 1, relayed
    assert doc["operations"]["ok_by_op"].get("acquire", 0) >= 1
    laned, planned = doc["by_workload"]["lanes"]["by_op"], doc["by_workload"]["plans"]["by_op"]
    assert laned.get("start_writer ok", 0) >= 2 and laned.get("release_writer ok", 0) >= 1, laned
    assert laned.get("settle_lanes ok", 0) == 4, laned  # every lanes client settled, on both stores
    assert planned.get("run_plan ok", 0) >= 2 and planned.get("plan_effects ok", 0) == 4, planned
    assert set(doc["anomalies_by_rule"]) >= {"overlapping_lanes", "lane_unsettled", "step_twice", "plan_unfinished"}
    # The kept history checks again the same; with one stale credential's refusal turned into a success, it does
    # not (a run refuses dozens: clients use older credentials and forged tokens on purpose).
    # (in this process: the check is the same, without an interpreter's start-up)
    assert chaos_run.main(["--check", str(keep), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["anomalies"] == []
    lines = (keep / "history.jsonl").read_text().splitlines()
    stale = next(i for i, line in enumerate(lines) if '"code": "fence_stale"' in line)  # a renew, resume or release
    tampered = json.loads(lines[stale]) | {"status": "ok", "code": None, "result": {}}
    (keep / "history.jsonl").write_text("\n".join([*lines[:stale], json.dumps(tampered), *lines[stale + 1 :]]) + "\n")
    assert chaos_run.main(["--check", str(keep), "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["anomalies"]
    assert _ours(keep) == []  # every worker stopped
    assert [_named(server) for server in doc["servers"]] == [[]]  # and the server
    assert not Path(doc["servers"][0]).exists()


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_an_interrupted_run_stops_everything_it_started(tmp_path: Path) -> None:
    keep = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "chaos", "--minutes", "5", "--seed", "1", "--store", "sqlite", "--keep", str(keep)],
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(list(keep.glob("sqlite/*.log"))) < 10:
        time.sleep(0.2)  # the ten clients started (lease, receipts, lanes, plans)
    time.sleep(2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-3000:]
    assert _ours(keep) == []


def test_a_seed_draws_the_same_schedule_every_time() -> None:
    stores = ["sqlite", "postgresql"]
    assert chaos_run.schedule_digest(7, stores) == chaos_run.schedule_digest(7, stores)
    assert chaos_run.schedule_digest(7, stores) != chaos_run.schedule_digest(8, stores)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_corral_whose_fence_accepts_any_credential_is_caught(tmp_path: Path) -> None:
    """The checker on a real history of a broken corral (its fence guard patched to accept anything in the
    workers): stale and forged credentials are accepted, and the run says so and exits 1."""
    argv = [sys.executable, "-m", "chaos", "--minutes", "0.1", "--seed", "5", "--store", "sqlite", "--json"]
    done = subprocess.run(
        [*argv, "--workloads", "lease", "--break", "fence", "--keep", str(tmp_path / "run")],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=160,
        check=False,
    )
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    doc = json.loads(done.stdout)
    kinds = {a["kind"] for a in doc["check"]["anomalies"]}
    assert doc["anomalies"] >= 1 and kinds <= {"stale_fence_accepted", "two_holders", "wrong_refusal", "stale_read"}
    assert all(a["op"]["status"] == "ok" or a["kind"] == "wrong_refusal" for a in doc["check"]["anomalies"])
