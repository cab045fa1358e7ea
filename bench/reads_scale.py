"""What ``corral status`` and ``corral controller list`` cost at 30k instances (most finished) / at 1.

Two stores per checkout, in a temporary directory: one with a single live controller lease, one with
``--instances`` (30 000) instances of the built-in machines, almost all finished (released controller
leases, closed reviewers, completed receipts, released writer lanes, succeeded plans) and a handful
live. Each store file is created by the checkout's own ``corral`` (so it has that checkout's schema),
then filled with ``sqlite3`` directly in the store's schema, with data of realistic sizes (every
field a real instance of its machine records). Each command then runs cold, in its own fresh
process, interleaved over ``--runs`` runs after a warm-up: ``corral status --json``, ``corral
controller list`` (text) and ``corral controller list --json``. A figure is median(at 30k) /
median(at 1); target <= 2x.

``--root DIR`` measures another checkout (e.g. ``/work/main``, the code before issue 13) in the same
run, as a baseline reported in each figure's ``detail``; the figures themselves are this checkout's.

    python bench/reads_scale.py [--quick] [--json] [--runs N] [--instances N] [--root DIR] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
TARGET = 2.0
COMMANDS = {
    "status": (["status", "--json"], "status at 30k / at 1 instance"),
    "list_text": (["controller", "list"], "controller list (text) at 30k / at 1"),
    "list_json": (["controller", "list", "--json"], "controller list (JSON) at 30k / at 1"),
}
# Of every 30 000 instances: (machine, share, finished state, live state, live count).
MIX = (
    ("controller", 0.50, "released", "active", 5),
    ("reviewer", 0.15, "closed", "active", 3),
    ("receipt", 0.20, "completed", "pending", 2),
    ("writer", 0.10, "released", "active", 2),
    ("plan", 0.05, "succeeded", "submitted", 1),
)
# Timed at 30k only, for the record (not a figure): every released lease too, streamed as text.
# A checkout whose ``controller list`` has no ``--all`` (before issue 13) lists them all by default.
EVERY_ROW = ["controller", "list", "--all"]
STAMP = "2025-01-01T00:00:00.000000Z"
FUTURE = "2099-01-01T00:00:00.000000Z"


def _sha(rng: random.Random) -> str:
    return f"{rng.getrandbits(256):064x}"


def data_for(machine: str, n: int, live: bool, rng: random.Random) -> dict[str, Any]:
    """A record of the fields a real instance of ``machine`` holds, of a real instance's size."""
    controller = f"ctl-{n % 97}"
    agent = {
        "controller_id": controller,
        "lease_id": str(uuid.UUID(int=rng.getrandbits(128))),
        "name": f"agent-{n}",
        "kind": "claude",
        "cwd": f"/home/someone/src/project/worktrees/lane-{n}",
        "host": "process",
        "options": {"model": "opus", "effort": "high"},
        "pane_id": f"p{n}",
        "start_nonce": _sha(rng)[:32],
        "starter": {"pid": 40000 + n % 20000, "start_time": 123456 + n, "boot_id": _sha(rng)[:36], "host": "bench"},
        "terminal_id": None,
        "started_seq": 0,
        "requested_at": STAMP,
        "started_at": STAMP,
        "decision": None,
        "closing_seq": None if live else 2,
        "closed_at": None if live else STAMP,
        "failure": None,
        "reconciled_at": None,
    }
    if machine == "controller":
        return {
            "controller_id": f"ctl-{n}",
            "lease_id": str(uuid.UUID(int=rng.getrandbits(128))),
            "generation": 1 + n % 5,
            "holder": f"someone@bench-{n % 7}",
            "ttl_seconds": 900,
            "token_sha256": _sha(rng),
            "issued_at": STAMP,
            "renewed_at": STAMP,
            "expires_at": FUTURE,
            "predecessor_lease_id": None,
            "authority_ref": f"TICKET-{n}",
            "authority_sha256": _sha(rng),
            "checkpoint_ref": None if live else f"checkpoint-{n}",
            "checkpoint_sha256": None if live else _sha(rng),
            "released_at": None if live else STAMP,
        }
    if machine == "reviewer":
        return agent
    if machine == "writer":
        return {
            **agent,
            "purpose": "implement the part of the ticket this lane owns, with its tests",
            "ticket_ref": f"TICKET-{n}",
            "authority_ref": f"TICKET-{n}",
            "worktree": agent["cwd"],
            "common_dir": "/home/someone/src/project/.git",
            "branch": f"lane-{n}",
            "base_commit": _sha(rng)[:40],
            "start_head": _sha(rng)[:40],
            "owned_scopes": [f"src/area{n % 50}/part{n}", f"tests/area{n % 50}/test_part{n}.py"],
            "locked_scopes": ["pyproject.toml"],
            "protected_branches": ["main", "master"],
            "verification": None if live else {"passed": True, "results": [{"name": "tests", "passed": True}]},
            "verified_at": None if live else STAMP,
            "checkpoint_ref": None if live else f"lane-{n}@{_sha(rng)[:12]}",
            "release_head": None if live else _sha(rng)[:40],
        }
    if machine == "receipt":
        return {
            "token": f"rcpt_{_sha(rng)[:32]}",
            "controller_id": controller,
            "target": f"reviewer/{uuid.UUID(int=rng.getrandbits(128))}",
            "target_machine": "reviewer",
            "name": f"agent-{n % 500}",
            "pane_id": f"p{n % 500}",
            "kind": "claude",
            "cwd": f"/home/someone/src/project/worktrees/lane-{n % 500}",
            "host": "process",
            "batch_id": None,
            "before_seq": 2,
            "after_seq": 3,
            "before_revision": 2,
            "after_revision": 3,
            "terminal_id": None,
            "settled_seq": None if live else 4,
            "exit_status": None if live else 0,
            "settled_status": None if live else "done",
            "observed_seq": 4,
            "reason": None,
            "prompt_sha256": _sha(rng),
            "reserved_at": STAMP,
            "delivered_at": STAMP,
            "completed_at": None if live else STAMP,
        }
    steps = {
        f"step{i}": {"state": "succeeded", "attempt": 1, "seconds": 1.5, "outputs": {"token": f"rcpt_{i}"}}
        for i in range(6)
    }
    return {
        "plan_id": f"plan-{n}",
        "recipe": "review-and-merge",
        "recipe_version": 1,
        "recipe_sha256": _sha(rng),
        "controller_id": controller,
        "inputs": {"ticket": f"TICKET-{n}", "branch": f"lane-{n}"},
        "parent": None,
        "steps": {} if live else steps,
        "private": {},
        "runner": None,
        "waiting_on": None,
        "paused_reason": None,
        "failure": None,
        "retries": 0,
        "submitted_at": STAMP,
        "finished_at": None if live else STAMP,
    }


def build(corral: list[str], env: dict[str, str], db: Path, instances: int, seed: int) -> None:
    """Create the store with the checkout's own corral, then insert ``instances`` rows with sqlite3."""
    argv = [*corral, "--store", f"sqlite://{db}", "status", "--json"]
    subprocess.run(argv, env=env, cwd=db.parent, capture_output=True, check=True)
    rng = random.Random(seed)
    rows: list[tuple[Any, ...]] = []
    if instances == 1:
        rows.append(("controller/ctl-0", "controller", "active", 1, data_for("controller", 0, True, rng)))
    else:
        for machine, share, finished, live_state, live in MIX:
            count = int(instances * share) if machine != "plan" else instances - len(rows)
            for n in range(count):
                is_live = n < live
                key = f"ctl-{n}" if machine == "controller" else f"plan-{n}" if machine == "plan" else str(uuid.uuid4())
                state = live_state if is_live else finished
                rows.append((f"{machine}/{key}", machine, state, 3, data_for(machine, n, is_live, rng)))
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    conn.executemany(
        "INSERT INTO instances (id, machine, state, version, data, created_at, updated_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)",
        [(i, m, s, v, json.dumps(d, sort_keys=True, separators=(",", ":")), STAMP, STAMP) for i, m, s, v, d in rows],
    )
    conn.execute("COMMIT")
    conn.close()


def timed(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, check=False)
    elapsed = (time.perf_counter() - start) * 1000
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}:\n{done.stdout.decode()}{done.stderr.decode()}")
    return elapsed


def measure(root: Path, work: Path, instances: int, runs: int, warmup: int) -> dict[str, dict[str, list[float]]]:
    """Median-able samples (ms) per command and store size, for the checkout at ``root``."""
    home = work / "home"
    home.mkdir(mode=0o700)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_") and k != "XDG_STATE_HOME"}
    env |= {"PYTHONPATH": str(root), "CORRAL_HOME": str(home), "PYTHONPYCACHEPREFIX": str(work / "pycache")}
    # Run in ``work``: ``python -m`` puts the current directory first on sys.path, before PYTHONPATH,
    # so a bench started in another checkout would otherwise measure that checkout's code.
    corral = [sys.executable, "-m", "runner.cli"]
    stores = {"one": work / "one.db", "many": work / "many.db"}
    build(corral, env, stores["one"], 1, seed=1)
    build(corral, env, stores["many"], instances, seed=2)
    samples: dict[str, dict[str, list[float]]] = {key: {"one": [], "many": []} for key in COMMANDS}
    samples["every_row_text"] = {"many": []}
    helped = [*corral, "controller", "list", "--help"]
    probe = subprocess.run(helped, env=env, cwd=work, capture_output=True, text=True, check=True)
    every = EVERY_ROW if "--all" in probe.stdout else EVERY_ROW[:2]
    for n in range(warmup + runs):
        for key, (args, _) in COMMANDS.items():
            for size, db in stores.items():
                took = timed([*corral, "--store", f"sqlite://{db}", *args], env, work)
                if n >= warmup:
                    samples[key][size].append(took)
        took = timed([*corral, "--store", f"sqlite://{stores['many']}", *every], env, work)
        if n >= warmup:
            samples["every_row_text"]["many"].append(took)
    return samples


def _median(samples: dict[str, dict[str, list[float]]], key: str) -> float:
    return statistics.median(samples[key]["many"])


def figures(samples: dict[str, dict[str, list[float]]], baseline: dict[str, Any] | None, instances: int) -> list[Any]:
    out = []
    for key, (_, name) in COMMANDS.items():
        one, many = statistics.median(samples[key]["one"]), statistics.median(samples[key]["many"])
        ratio = many / one
        detail = f"median {many:.1f} ms at {instances} / {one:.1f} ms at 1 ({len(samples[key]['one'])} runs)"
        if baseline is not None:
            b_one, b_many = (statistics.median(baseline["samples"][key][s]) for s in ("one", "many"))
            detail += f"; before ({baseline['root']}): {b_many:.1f} / {b_one:.1f} ms = {b_many / b_one:.2f}x"
        if key == "list_text":
            rows = int(instances * MIX[0][1])
            detail += f"; every one of the {rows} leases as text (--all): {_median(samples, 'every_row_text'):.1f} ms"
            if baseline is not None:
                detail += f", before {_median(baseline['samples'], 'every_row_text'):.1f} ms"
        out.append(
            {
                "figure": name,
                "value": round(ratio, 3),
                "unit": "x",
                "target": f"<= {TARGET:g}x",
                "met": ratio <= TARGET,
                "detail": detail,
            }
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 runs, 1 warm-up (a few seconds)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--instances", type=int, default=30_000)
    parser.add_argument("--root", type=Path, help="another checkout to measure as the baseline (e.g. /work/main)")
    parser.add_argument("--dir", type=Path, help="where the temporary stores go")
    args = parser.parse_args()
    runs, warmup = (3, 1) if args.quick else (args.runs, args.warmup)
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="corral-reads-") as tmp:
        baseline = None
        if args.root is not None:
            (Path(tmp) / "before").mkdir()
            before = measure(args.root.resolve(), Path(tmp) / "before", args.instances, runs, warmup)
            baseline = {"root": str(args.root), "samples": before}
        (Path(tmp) / "after").mkdir()
        samples = measure(HERE, Path(tmp) / "after", args.instances, runs, warmup)
    found = figures(samples, baseline, args.instances)
    if args.json:
        doc: dict[str, Any] = {"figures": found, "samples_ms": samples, "instances": args.instances}
        if baseline is not None:
            doc["baseline"] = baseline
        print(json.dumps(doc, indent=2))
        return
    for figure in found:
        verdict = "met" if figure["met"] else "MISSED"
        print(f"{figure['figure']:<40} {figure['value']:>7.2f}x  target {figure['target']:<7} {verdict}")
        print(f"    {figure['detail']}")


if __name__ == "__main__":
    main()
