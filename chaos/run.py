"""``make chaos`` / ``python -m chaos``: set up the stores, run clients and nemesis, check, report.

Per store (a SQLite file; a PostgreSQL cluster of its own, started for the run and stopped after it,
so the nemesis can restart it): two state homes, two clients each, over two controller ids, and one
nemesis. ``--seed`` fixes every client's and nemesis's random stream: the same seed draws the same
operations and faults in the same order (what each operation then meets depends on timing; the
``schedule`` digest in the report covers the draws). Everything started is stopped on the way out,
Ctrl-C included.
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
import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Any

from chaos import history, lease, receipts
from chaos.clients import Client, Recorder
from chaos.nemesis import Nemesis
from chaos.relays import ReceiptClient

HOMES = ("A", "B")
CLIENTS_PER_HOME = 2
CONTROLLERS = ["c0", "c1"]
TTL = 5  # the smallest TTL corral accepts: expiries come soon


class Cluster:
    """A PostgreSQL cluster of the run's own (``tests.support.pgserver``), durable commits."""

    def __init__(self) -> None:
        from tests.support import pgserver

        reason = pgserver.unavailable()
        if reason is not None:
            raise SystemExit(f"chaos: no PostgreSQL server here ({reason}); use --store sqlite")
        # A short directory of its own: a socket's path is at most 107 bytes, and the server's user must
        # reach it (a test's tmp_path is private to root).
        self.directory = directory = Path(tempfile.mkdtemp(prefix="corral-chaos-pg-")) / "c"
        self.pgserver = pgserver
        base = pgserver.start(directory, durable=True)
        import psycopg

        from tests.support.stores import with_database

        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute('CREATE DATABASE "chaos"')
        self.url = with_database(base, "chaos")

    def restart(self) -> None:
        self.pgserver.restart(self.directory, "immediate")

    def stop(self) -> None:
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
    """By client, the windows its clock was jumped (open-ended if never set right)."""
    windows: dict[str, list[tuple[float, float]]] = {}
    for fault in faults:
        if fault["kind"] == "clock_jump":
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
            relay = ReceiptClient(f"{store}/{home}/r", store, "", Path(), Path(), Recorder(), seed)
            for _ in range(count):
                scratch.update(repr(relay.draw()).encode())
        targets = (CLIENTS_PER_HOME + 1) * len(HOMES)
        nemesis = Nemesis(store, [None] * targets, Recorder(), seed, TTL)  # type: ignore[list-item]
        if store == "postgresql":
            nemesis.restart = lambda: None
        for _ in range(count // 4):
            scratch.update(repr(nemesis.plan_round()).encode())
    return scratch.hexdigest()[:16]


def _client_names(store: str) -> list[str]:
    return [f"{store}/{home}/{n}" for home in HOMES for n in range(1, CLIENTS_PER_HOME + 1)]


def run(
    minutes: float, seed: int, stores: list[str], workdir: Path, broken: str | None = None, relays: bool = True
) -> dict[str, Any]:
    """One chaos run over ``stores``; the report (also the history, in ``workdir``)."""
    recorder = Recorder()
    homes: list[Path] = []
    clients: list[Client] = []
    nemeses: list[Nemesis] = []
    clusters: list[Cluster] = []
    try:
        for store in stores:
            base = workdir / store
            base.mkdir(parents=True)
            restart = None
            if store == "sqlite":
                url = f"sqlite://{base / 'corral.db'}"
            else:
                cluster = Cluster()
                clusters.append(cluster)
                url, restart = cluster.url, cluster.restart
            mine: list[Client] = []
            for name in _client_names(store):
                home = base / f"home-{name.split('/')[1]}"
                client = Client(name, store, url, home, base, CONTROLLERS, recorder, seed, TTL, broken)
                client.start_worker()  # one after the other: the first creates the schema
                mine.append(client)
            for home_name in HOMES if relays else ():
                relay = ReceiptClient(
                    f"{store}/{home_name}/r", store, url, base / f"home-{home_name}", base, recorder, seed
                )
                relay.start_worker()
                relay.setup()
                mine.append(relay)
                homes.append(relay.home)
            clients += mine
            nemeses.append(Nemesis(store, mine, recorder, seed, TTL, restart=restart))
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
        time.sleep(1.0 if homes else 0.0)  # the agents' last turns print
    finally:
        for nemesis in nemeses:
            nemesis.stop.set()
        for client in clients:
            client.close()
        for cluster in clusters:
            cluster.stop()
        reap(workdir)
    ops = list(recorder.ops)
    history.write(workdir / "history.jsonl", ops)
    lease_ops = [o for o in ops if ":controller/" in o.key]
    faults_done = [asdict(f) for n in nemeses for f in n.faults]
    (workdir / "faults.json").write_text(json.dumps(faults_done, indent=1), encoding="utf-8")
    report = lease.check(lease_ops)
    report.anomalies += lease.early_takeovers(lease_ops, _skewed(faults_done), TTL)
    checked = time.perf_counter()
    receipt_anomalies = receipts.check(ops, receipts.deliveries(homes))
    report.anomalies += receipt_anomalies
    receipt_ops = [o for o in ops if ":receipts/" in o.key]
    faults = Counter(f.kind for n in nemeses for f in n.faults)
    return {
        "seed": seed,
        "minutes": minutes,
        "elapsed_s": round(elapsed, 1),
        "stores": stores,
        "schedule": schedule_digest(seed, stores),
        "operations": {
            "total": len(ops),
            "by_status": dict(Counter(o.status for o in ops)),
            "by_op": dict(Counter(o.op for o in ops)),
            "by_store": dict(Counter(o.key.split(":")[0] for o in ops)),
            "ok_by_op": dict(Counter(o.op for o in ops if o.status == "ok")),
            "codes": dict(Counter(o.code for o in ops if o.code)),
        },
        "faults": {kind: faults.get(kind, 0) for kind in sorted({k for n in nemeses for k in n.kinds})},
        "faults_by_store": {n.store: dict(n.counts()) for n in nemeses},
        "clients": len(clients),
        "worker_starts": sum(c.starts for c in clients),
        "nemesis_errors": [e for n in nemeses for e in n.errors],
        "check": report.to_dict(),
        "receipts": {
            "operations": len(receipt_ops),
            "by_op": dict(Counter(f"{o.op} {o.status}" for o in receipt_ops)),
            "codes": dict(Counter(o.code for o in receipt_ops if o.code)),
            "anomalies": len(receipt_anomalies),
            "seconds": round(time.perf_counter() - checked, 4),
        },
        "anomalies": len(report.anomalies),
        "checker_seconds_per_10k": round(report.seconds / max(1, report.operations) * 10_000, 4),
        "history": str(workdir / "history.jsonl"),
        "servers": [str(c.directory) for c in clusters],
        "_report": report,
    }


def render(doc: dict[str, Any]) -> str:
    """The text report."""
    ops, check = doc["operations"], doc["check"]
    per_10k = check["seconds"] / max(1, check["operations"]) * 10_000
    rec = doc["receipts"]
    lines = [
        f"chaos: seed {doc['seed']}, {doc['elapsed_s']} s on {' + '.join(doc['stores'])} (schedule {doc['schedule']})",
        f"  operations: {ops['total']}  " + "  ".join(f"{k} {v}" for k, v in sorted(ops["by_status"].items())),
        "    by op: " + "  ".join(f"{k} {v} ({ops['ok_by_op'].get(k, 0)} ok)" for k, v in sorted(ops["by_op"].items())),
        "    codes: " + "  ".join(f"{k} {v}" for k, v in sorted(ops["codes"].items())),
        "  faults: "
        + "  ".join(f"{k} {v}" for k, v in doc["faults"].items())
        + f"  (worker starts {doc['worker_starts']})",
        "  receipts: "
        + (f"{rec['operations']} operations  " + "  ".join(f"{k} {v}" for k, v in sorted(rec["by_op"].items())))
        + f"  (checked in {rec['seconds']:.3f} s)",
        f"  checker: {check['seconds']:.3f} s for {check['operations']} lease operations in {check['partitions']} "
        "partitions "
        f"({per_10k:.3f} s per 10,000)",
        f"  anomalies: {doc['anomalies']}",
    ]
    if check["unexpected_codes"]:
        lines.append("  refusals the model does not judge: " + json.dumps(check["unexpected_codes"]))
    for error in doc["nemesis_errors"]:
        lines.append(f"  nemesis error: {error}")
    lines += ["", *(a.describe() for a in doc["_report"].anomalies)] if doc["anomalies"] else []
    lines.append(f"  history: {doc['history']}")
    return "\n".join(lines)


def recheck(directory: Path, as_json: bool) -> int:
    """Check a kept run's history again (``--check DIR``): the lease model and the receipt rules."""
    ops = list(history.read(directory / "history.jsonl"))
    started = time.perf_counter()
    lease_ops = [o for o in ops if ":controller/" in o.key]
    report = lease.check(lease_ops)
    if (directory / "faults.json").exists():
        faults = json.loads((directory / "faults.json").read_text(encoding="utf-8"))
        report.anomalies += lease.early_takeovers(lease_ops, _skewed(faults), TTL)
    report.anomalies += receipts.check(ops, receipts.deliveries(sorted(directory.glob("*/home-*"))))
    report.seconds = time.perf_counter() - started
    if as_json:
        print(json.dumps({**report.to_dict(), "history_operations": len(ops)}, indent=2, sort_keys=True))
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
    parser.add_argument("--json", action="store_true", help="the report as one JSON document")
    parser.add_argument("--keep", type=Path, metavar="DIR", help="keep the run's directory (history, logs) here")
    parser.add_argument("--check", type=Path, metavar="DIR", help="check the history a run kept in DIR again, and stop")
    parser.add_argument("--break", dest="broken", choices=("fence",), help=argparse.SUPPRESS)  # the checker's test
    args = parser.parse_args(argv)
    if args.check is not None:
        return recheck(args.check, args.json)
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
        doc = run(args.minutes, seed, stores, workdir, args.broken)
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
