"""``make chaos`` / ``python -m chaos``: set up the stores, run clients and nemesis, check, report.

Per store (a SQLite file; a PostgreSQL cluster of its own, started for the run and stopped after it,
so the nemesis can restart it): two state homes, each with two lease clients over two controller
ids, a receipt client, a lanes client and a plans client (``--workloads`` chooses), and one nemesis.
After the nemesis stops, the lanes and plans clients settle (reconcile, the final resume) and what
they left is read; then every history rule is checked. ``--seed`` fixes every client's and
nemesis's random stream: the same seed draws the same operations and faults in the same order (what
each operation then meets depends on timing; the ``schedule`` digest in the report covers the draws).
Everything started is stopped on the way out, Ctrl-C included.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Any

from chaos import history, lanes, lease, plans, receipts
from chaos.clients import READY_DEADLINE, Client, Recorder
from chaos.lanes import LaneClient
from chaos.nemesis import Nemesis
from chaos.plans import PlanClient
from chaos.relays import ReceiptClient

HOMES = ("A", "B")
CLIENTS_PER_HOME = 2
CONTROLLERS = ["c0", "c1"]
TTL = 5  # the smallest TTL corral accepts: expiries come soon
WORKLOADS = ("lease", "receipts", "lanes", "plans")
RULES = (
    "two_holders",
    "stale_fence_accepted",
    "generation_skipped",
    "wrong_refusal",
    "stale_read",
    "early_takeover",
    "delivered_twice",
    "delivery_lost",
    "wrong_result",
    "two_open_receipts",
    "overlapping_lanes",
    "released_lane_live",
    "lane_unsettled",
    "worktree_touched",
    "step_twice",
    "plan_unfinished",
)


class Cluster:
    """A PostgreSQL cluster of the run's own (``tests.support.pgserver``), durable commits."""

    def __init__(self) -> None:
        from tests.support import pgserver

        reason = pgserver.unavailable()
        if reason is not None:
            raise SystemExit(f"chaos: no PostgreSQL server here ({reason}); use --store sqlite")
        # A short directory of its own: a socket's path is at most 107 bytes, and the server's user must
        # reach it (a test's tmp_path is private to root).
        self.directory = Path(tempfile.mkdtemp(prefix="corral-chaos-pg-")) / "c"
        self.pgserver = pgserver
        self.url = ""
        self.started = False

    def start(self) -> None:
        pgserver = self.pgserver
        self.started = True  # from here on, stop() stops it (whatever start got to)
        base = pgserver.start(self.directory, durable=True)
        import psycopg

        from tests.support.stores import with_database

        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute('CREATE DATABASE "chaos"')
        self.url = with_database(base, "chaos")

    def restart(self) -> None:
        self.pgserver.restart(self.directory, "immediate")

    def stop(self) -> None:
        if self.started:
            with contextlib.suppress(Exception):  # a server that never came up: nothing to stop
                self.pgserver.stop(self.directory)
        shutil.rmtree(self.directory.parent, ignore_errors=True)


def leftovers(directory: Path) -> list[int]:
    """Processes of the run in ``directory`` still alive: their command line names one of its stores'
    directories (which the run made, fresh) or they run in one of its agents' worktrees (an agent's
    detached supervisor does)."""
    found = []
    stores = [str((directory / store).resolve()) for store in ("sqlite", "postgresql")]
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cwd = os.readlink(proc / "cwd")
        except OSError:
            continue
        if any(s in cmdline or cwd.startswith(f"{s}/wt-") for s in stores):
            found.append(int(proc.name))
    return found


def reap(directory: Path, grace: float = 10.0) -> None:
    """Wait for the run's last agent turns to end; kill (by pid) whatever is left after ``grace`` s."""
    deadline = time.monotonic() + grace
    while (left := leftovers(directory)) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in left:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def _skewed(faults: list[dict[str, Any]]) -> dict[str, list[tuple[float, float]]]:
    """By client, the windows its clock was jumped (open-ended if never set right). PostgreSQL's
    clients are never skewed: the server's clock judges their expiry, whatever the nemesis does to
    theirs, so ``early_takeover`` judges every PostgreSQL takeover."""
    windows: dict[str, list[tuple[float, float]]] = {}
    for fault in faults:
        if fault["kind"] == "clock_jump" and fault["store"] != "postgresql":
            until = fault["until"] if fault["until"] is not None else math.inf
            windows.setdefault(fault["target"], []).append((fault["at"], until))
    return windows


def schedule_digest(seed: int, stores: list[str], count: int = 64) -> str:
    """A digest of the first ``count`` draws of every client and round of every nemesis for ``seed``."""
    scratch = hashlib.sha256()
    for store in stores:
        for name in _client_names(store):
            client = Client(name, store, "", Path(), Path(), CONTROLLERS, Recorder(), seed, TTL)
            for _ in range(count):
                scratch.update(repr(client.draw()).encode())
        for home in HOMES:
            for kind in (ReceiptClient, LaneClient, PlanClient):
                other = kind(f"{store}/{home}/{kind.SUFFIX}", store, "", Path(), Path(), Recorder(), seed)
                for _ in range(count):
                    scratch.update(repr(other.draw()).encode())
        targets = (CLIENTS_PER_HOME + 3) * len(HOMES)
        nemesis = Nemesis(store, [None] * targets, Recorder(), seed, TTL)  # type: ignore[list-item]
        if store == "postgresql":
            nemesis.restart = lambda: None
        for _ in range(count // 4):
            scratch.update(repr(nemesis.plan_round()).encode())
    return scratch.hexdigest()[:16]


def _client_names(store: str) -> list[str]:
    return [f"{store}/{home}/{n}" for home in HOMES for n in range(1, CLIENTS_PER_HOME + 1)]


def run(
    minutes: float,
    seed: int,
    stores: list[str],
    workdir: Path,
    broken: str | None = None,
    workloads: tuple[str, ...] = WORKLOADS,
) -> dict[str, Any]:
    """One chaos run over ``stores``; the report (also the history, in ``workdir``)."""
    recorder = Recorder()
    homes: list[Path] = []
    clients: list[Client] = []
    settlers: list[LaneClient | PlanClient] = []
    nemeses: list[Nemesis] = []
    clusters: list[Cluster] = []
    prints: dict[str, dict[str, Any]] = {}  # by worktree: its fingerprint at set-up
    worktrees: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
    preparing: list[threading.Thread] = []
    try:
        servers: dict[str, Cluster] = {}
        for store in stores:
            (workdir / store).mkdir(parents=True)
            if store != "sqlite":
                servers[store] = Cluster()  # its directory only: started below, stopped on the way out
                clusters.append(servers[store])

        def prepare(store: str) -> None:
            base = workdir / store
            if store == "sqlite":
                url, restart = f"sqlite://{base / 'corral.db'}", None
            else:
                servers[store].start()
                url, restart = servers[store].url, servers[store].restart
            mine: list[Client] = []
            for name in _client_names(store) if "lease" in workloads else []:
                home = base / f"home-{name.split('/')[1]}"
                mine.append(Client(name, store, url, home, base, CONTROLLERS, recorder, seed, TTL, broken))
            if "lanes" in workloads:
                prints.update(lanes.make_repo(base, HOMES))
            for home_name in HOMES:
                home = base / f"home-{home_name}"
                homes.append(home)
                for kind in (ReceiptClient, LaneClient, PlanClient):
                    if kind.WORKLOAD in workloads:
                        mine.append(kind(f"{store}/{home_name}/{kind.SUFFIX}", store, url, home, base, recorder, seed))
            clients.extend(mine)  # before they start: whatever starts is stopped on the way out
            _start_workers(mine)
            settlers.extend(c for c in mine if isinstance(c, (LaneClient, PlanClient)))
            nemeses.append(Nemesis(store, mine, recorder, seed, TTL, restart=restart))

        _side_by_side(prepare, stores, preparing)  # the stores set up at once: servers and workers side by side
        nemeses.sort(key=lambda n: stores.index(n.store))
        clients.sort(key=lambda c: (stores.index(c.store), c.name))
        started = time.monotonic()
        for client in clients:
            client.thread.start()
        for nemesis in nemeses:
            nemesis.thread.start()
        deadline = started + minutes * 60
        while time.monotonic() < deadline:
            time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
            dead = [c.name for c in clients if not c.thread.is_alive()]
            if dead:
                raise RuntimeError(f"chaos clients stopped: {', '.join(dead)} (see their logs in {workdir})")
        for nemesis in nemeses:
            nemesis.stop.set()
        for nemesis in nemeses:
            nemesis.thread.join(timeout=30)
        for client in clients:
            client.resume()
            client.stop.set()
        for client in clients:
            client.thread.join(timeout=60)
        elapsed = time.monotonic() - started
        settling = time.monotonic()
        # The nemesis stopped: reconcile the lanes, resume the plans, read them (each client on its own).
        _side_by_side(lambda settler: settler.settle(), settlers)
        for path, before in prints.items():
            worktrees[path] = (before, lanes.fingerprint(Path(path)))
        settled = time.monotonic() - settling
        if {"receipts", "plans"} & set(workloads):
            time.sleep(1.0)  # the agents' last turns print
    finally:
        for nemesis in nemeses:
            nemesis.stop.set()
        for client in clients:
            client.close()
        for thread in preparing:  # interrupted while setting up: what it started, it stops first
            thread.join(timeout=READY_DEADLINE)
        for client in clients:
            client.close()
        for cluster in clusters:
            cluster.stop()
        reap(workdir)
    ops = list(recorder.ops)
    history.write(workdir / "history.jsonl", ops)
    faults_done = [asdict(f) for n in nemeses for f in n.faults]
    (workdir / "faults.json").write_text(json.dumps(faults_done, indent=1), encoding="utf-8")
    (workdir / "worktrees.json").write_text(json.dumps(worktrees, indent=1), encoding="utf-8")
    verdict = check_all(ops, faults_done, homes, worktrees)
    faults = Counter(f.kind for n in nemeses for f in n.faults)
    report = verdict["_report"]
    return {
        "seed": seed,
        "minutes": minutes,
        "elapsed_s": round(elapsed, 1),
        "settle_s": round(settled, 1),
        "stores": stores,
        "workloads": list(workloads),
        "schedule": schedule_digest(seed, stores),
        "operations": {
            "total": len(ops),
            "by_status": dict(Counter(o.status for o in ops)),
            "by_op": dict(Counter(o.op for o in ops)),
            "by_store": dict(Counter(o.key.split(":")[0] for o in ops)),
            "by_workload": dict(Counter(workload_of(o) for o in ops)),
            "ok_by_op": dict(Counter(o.op for o in ops if o.status == "ok")),
            "codes": dict(Counter(o.code for o in ops if o.code)),
        },
        "faults": {kind: faults.get(kind, 0) for kind in sorted({k for n in nemeses for k in n.kinds})},
        "faults_by_store": {n.store: dict(n.counts()) for n in nemeses},
        "clients": len(clients),
        "worker_starts": sum(c.starts for c in clients),
        "nemesis_errors": [e for n in nemeses for e in n.errors],
        "check": report.to_dict(),
        **{k: v for k, v in verdict.items() if not k.startswith("_")},
        "anomalies": len(report.anomalies),
        "checker_seconds_per_10k": round(report.seconds / max(1, report.operations) * 10_000, 4),
        "history": str(workdir / "history.jsonl"),
        "servers": [str(c.directory) for c in clusters],
        "_report": report,
    }


def _side_by_side(fn: Any, items: list[Any], threads: list[threading.Thread] | None = None) -> None:
    """``fn(item)`` for every item, each in a thread of its own (added to ``threads``, for a caller
    interrupted meanwhile to wait for); the first error raised here."""
    errors: list[BaseException] = []

    def one(item: Any) -> None:
        try:
            fn(item)
        except BaseException as exc:  # noqa: BLE001 - reason: raised in the caller's thread, below
            errors.append(exc)

    mine = [threading.Thread(target=one, args=(item,), daemon=True) for item in items]
    if threads is not None:
        threads += mine
    for thread in mine:
        thread.start()
    for thread in mine:
        thread.join()
    if errors:
        raise errors[0]


def _start_workers(clients: list[Client]) -> None:
    """Start the clients' workers (and set up the clients that need it): the first alone, as it creates
    the store's schema, then the others side by side."""

    def start(client: Client) -> None:
        client.start_worker()
        setup = getattr(client, "setup", None)
        if setup is not None:
            setup()

    _side_by_side(start, clients[:1])
    _side_by_side(start, clients[1:])


def workload_of(op: history.Op) -> str:
    """The workload an operation belongs to, by its key."""
    kind = op.key.split(":", 1)[-1].split("/", 1)[0]
    return {"controller": "lease"}.get(kind, kind)


def check_all(
    ops: list[history.Op],
    faults: list[dict[str, Any]],
    homes: list[Path],
    worktrees: dict[str, tuple[dict[str, Any], dict[str, Any]]],
) -> dict[str, Any]:
    """Every check of a history: the lease model and ``early_takeover``, the receipt, lane and plan rules.

    Returns the report (``_report``: the lease check's, every anomaly in it), per workload its
    operations (by op and outcome), anomalies and checking time, and the anomalies per rule."""
    lease_ops = [o for o in ops if ":controller/" in o.key]
    report = lease.check(lease_ops)
    report.anomalies += lease.early_takeovers(lease_ops, _skewed(faults), TTL)
    lease_anomalies = len(report.anomalies)
    timed: dict[str, tuple[int, float]] = {"lease": (lease_anomalies, report.seconds)}
    delivered = receipts.deliveries(homes)
    checked = time.perf_counter()
    found = receipts.check(ops, delivered)
    timed["receipts"] = (len(found), time.perf_counter() - checked)
    report.anomalies += found
    checked = time.perf_counter()
    found = lanes.check(ops, worktrees)
    timed["lanes"] = (len(found), time.perf_counter() - checked)
    report.anomalies += found
    checked = time.perf_counter()
    found, paused = plans.check(ops, delivered)
    timed["plans"] = (len(found), time.perf_counter() - checked)
    report.anomalies += found
    by_workload: dict[str, dict[str, Any]] = {}
    for workload, (count, seconds) in timed.items():
        mine = [o for o in ops if workload_of(o) == workload]
        by_workload[workload] = {
            "operations": len(mine),
            "by_op": dict(Counter(f"{o.op} {o.status}" for o in mine)),
            "codes": dict(Counter(o.code for o in mine if o.code)),
            "anomalies": count,
            "seconds": round(seconds, 4),
        }
    kinds = Counter(a.kind for a in report.anomalies)
    return {
        "receipts": by_workload["receipts"],  # kept: what the report has always had
        "by_workload": by_workload,
        "anomalies_by_rule": {rule: kinds.get(rule, 0) for rule in sorted({*RULES, *kinds})},
        "plans_paused": paused,
        "_report": report,
    }


def render(doc: dict[str, Any]) -> str:
    """The text report."""
    ops, check = doc["operations"], doc["check"]
    per_10k = check["seconds"] / max(1, check["operations"]) * 10_000
    lines = [
        f"chaos: seed {doc['seed']}, {doc['elapsed_s']} s on {' + '.join(doc['stores'])} (schedule {doc['schedule']})"
        + f", settled in {doc['settle_s']} s",
        f"  operations: {ops['total']}  " + "  ".join(f"{k} {v}" for k, v in sorted(ops["by_status"].items())),
        "    by op: " + "  ".join(f"{k} {v} ({ops['ok_by_op'].get(k, 0)} ok)" for k, v in sorted(ops["by_op"].items())),
        "    codes: " + "  ".join(f"{k} {v}" for k, v in sorted(ops["codes"].items())),
        "  faults: "
        + "  ".join(f"{k} {v}" for k, v in doc["faults"].items())
        + f"  (worker starts {doc['worker_starts']})",
    ]
    for workload, got in doc["by_workload"].items():
        if not got["operations"]:
            continue
        lines.append(
            f"  {workload}: {got['operations']} operations  "
            + "  ".join(f"{k} {v}" for k, v in sorted(got["by_op"].items()))
            + f"  (anomalies {got['anomalies']}, checked in {got['seconds']:.3f} s)"
        )
    if doc["plans_paused"]:
        lines.append("  plans paused for a person (by design): " + "; ".join(doc["plans_paused"]))
    lines += [
        f"  checker: {check['seconds']:.3f} s for {check['operations']} lease operations in {check['partitions']} "
        "partitions "
        f"({per_10k:.3f} s per 10,000)",
        f"  anomalies: {doc['anomalies']}  (by rule: "
        + "  ".join(f"{k} {v}" for k, v in doc["anomalies_by_rule"].items() if v or not doc["anomalies"])
        + ")",
    ]
    if check["unexpected_codes"]:
        lines.append("  refusals the model does not judge: " + json.dumps(check["unexpected_codes"]))
    for error in doc["nemesis_errors"]:
        lines.append(f"  nemesis error: {error}")
    lines += ["", *(a.describe() for a in doc["_report"].anomalies)] if doc["anomalies"] else []
    lines.append(f"  history: {doc['history']}")
    return "\n".join(lines)


def recheck(directory: Path, as_json: bool) -> int:
    """Check a kept run's history again (``--check DIR``): the lease model and every history rule."""
    ops = list(history.read(directory / "history.jsonl"))
    started = time.perf_counter()
    faults = []
    if (directory / "faults.json").exists():
        faults = json.loads((directory / "faults.json").read_text(encoding="utf-8"))
    worktrees = {}
    if (directory / "worktrees.json").exists():
        worktrees = json.loads((directory / "worktrees.json").read_text(encoding="utf-8"))
    verdict = check_all(ops, faults, sorted(directory.glob("*/home-*")), worktrees)
    report = verdict["_report"]
    report.seconds = time.perf_counter() - started
    if as_json:
        doc = {**report.to_dict(), "history_operations": len(ops), "anomalies_by_rule": verdict["anomalies_by_rule"]}
        print(json.dumps(doc, indent=2, sort_keys=True))
    else:
        print(f"chaos: {len(ops)} operations of {directory / 'history.jsonl'} checked in {report.seconds:.3f} s")
        print(f"  anomalies: {len(report.anomalies)}")
        for anomaly in report.anomalies:
            print(anomaly.describe())
    return 1 if report.anomalies else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m chaos",
        description="Randomized clients and a nemesis on corral's stores; every history checked (docs/proof.md).",
    )
    parser.add_argument("--minutes", type=float, default=1.0, help="how long the clients run (fractions allowed)")
    parser.add_argument("--seed", type=int, default=None, help="reproduce a run's schedule (default: a new one)")
    parser.add_argument("--store", choices=("sqlite", "postgresql", "both"), default="both", help="(default: both)")
    parser.add_argument(
        "--workloads",
        default=",".join(WORKLOADS),
        help=f"which clients run, comma-separated (default: {','.join(WORKLOADS)})",
    )
    parser.add_argument("--json", action="store_true", help="the report as one JSON document")
    parser.add_argument("--keep", type=Path, metavar="DIR", help="keep the run's directory (history, logs) here")
    parser.add_argument("--check", type=Path, metavar="DIR", help="check the history a run kept in DIR again, and stop")
    parser.add_argument("--break", dest="broken", choices=("fence",), help=argparse.SUPPRESS)  # the checker's test
    args = parser.parse_args(argv)
    if args.check is not None:
        return recheck(args.check, args.json)
    workloads = tuple(w for w in WORKLOADS if w in args.workloads.split(","))
    if not workloads or set(args.workloads.split(",")) - set(WORKLOADS):
        parser.error(f"--workloads: a comma-separated list of {', '.join(WORKLOADS)}")
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "big")
    stores = ["sqlite", "postgresql"] if args.store == "both" else [args.store]
    workdir = Path(tempfile.mkdtemp(prefix="corral-chaos-")) if args.keep is None else args.keep
    workdir.mkdir(parents=True, exist_ok=True)

    def interrupted(signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt(signum)

    signal.signal(signal.SIGTERM, interrupted)
    # Ctrl-C stops the run even when it was started with SIGINT ignored (a background job of a
    # non-interactive shell inherits that): everything it started is stopped either way.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    doc: dict[str, Any] | None = None
    try:
        doc = run(args.minutes, seed, stores, workdir, args.broken, workloads)
    except KeyboardInterrupt:
        print("chaos: interrupted; every process and server it started is stopped", file=sys.stderr)
        return 130
    finally:
        # A run with an anomaly keeps its history and logs, to be read; any other is removed unless kept.
        if args.keep is None and (doc is None or not doc["anomalies"]):
            shutil.rmtree(workdir, ignore_errors=True)
            if doc is not None:
                doc["history"] = None
    if args.json:
        print(json.dumps({k: v for k, v in doc.items() if not k.startswith("_")}, indent=2, sort_keys=True))
    else:
        print(render(doc))
    return 1 if doc["anomalies"] or doc["nemesis_errors"] else 0
