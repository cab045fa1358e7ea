"""PostgreSQL vs SQLite in one run (issue 16): renew latency, a 200-step plan, writer throughput with 1, 2,
4 and 8 processes, and the wake-up of a notified wait.

The server is ``CORRAL_TEST_POSTGRES`` if set, else a throwaway cluster this script starts
(``tests.support.pgserver``: a unix socket, durable commits, ``fsync=off``) and stops at the end; every
measurement gets a fresh schema (PostgreSQL) or file (SQLite, WAL, ``synchronous=FULL``). Note the
asymmetry: the test cluster does not fsync, SQLite does; the detail of each figure says so.

- *renew*: one process, ``Service.renew`` of one lease back to back: median and p99 per store.
- *plan*: a recipe of 200 ``flow.pass`` steps run by the real plans component: seconds per store.
- *throughput*: N real processes (1, 2, 4, 8), each with its own connection and lease, renewing back
  to back for a window: renews per second and the p99 renew latency, per store and N. Target:
  PostgreSQL at 8 processes at least 1.5x SQLite's throughput.
- *ceiling*: what finer locks could buy, without corral: 8 processes, each its own row, run a renew's
  statements by hand (read, compare-and-set, the event's number, the event, NOTIFY, commit) under one
  exclusive lock (today's discipline), under per-row locks (the store's lock shared), and under per-row
  locks with a plain sequence and no NOTIFY (neither commit-ordered numbers nor notified waits).
- *wake-up*: a ``wait_events`` on one connection woken by a commit on another (PostgreSQL: the
  commit's NOTIFY; SQLite: its poll), median over the samples.

``--quick`` shortens every window (``make bench``); ``--json`` prints the figures for bench/summary.py.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT), str(HERE)]

from common import percentile  # noqa: E402 - bench/ and the checkout are put on sys.path just above

SHA = "d" * 64

WORKER = r"""
import json, sys, time
from pathlib import Path
from runner.definitions.library import Library
from runner.service import AcquireInput, RenewInput, Service
from runner.store import open_store

url, name, cache, seconds = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
service = Service(open_store(url), Library(cache_dir=Path(cache)), actor=name)
credential = service.controller.acquire(AcquireInput(name, "B-1", "d" * 64, 900, name)).credential
print("ready", flush=True)
sys.stdin.readline()  # the go signal
stop = time.perf_counter() + seconds
latencies = []
while time.perf_counter() < stop:
    started = time.perf_counter()
    service.controller.renew(RenewInput(name, credential, 900))
    latencies.append(time.perf_counter() - started)
service.store.close()
print(json.dumps(latencies), flush=True)
"""


CEILING = r"""
import json, sys, time
import psycopg

dsn, discipline, me, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
conn = psycopg.connect(dsn, autocommit=True)
row = f"r{me}"
one = "SELECT pg_advisory_xact_lock(1, 1)"  # today's shape: one exclusive lock of the store, held to commit
# finer locks: the store's lock shared, this row's exclusive
mine = f"SELECT pg_advisory_xact_lock_shared(1, 1); SELECT pg_advisory_xact_lock(hashtext('{row}')::bigint)"
lock, ordered, notify = {  # the lock; the event's number from a seq row (commit order) or a sequence; NOTIFY
    "one lock": (one, True, True),
    "row locks": (mine, True, True),
    "row locks, no NOTIFY": (mine, True, False),
    "row locks, no seq row": (mine, False, True),
    "row locks, no seq row, no NOTIFY": (mine, False, False),
}[discipline]
print("ready", flush=True)
sys.stdin.readline()
stop = time.perf_counter() + seconds
done = 0
while time.perf_counter() < stop:
    conn.execute(f"BEGIN; {lock}".encode())
    version = conn.execute("SELECT version FROM rows WHERE id = %s", (row,)).fetchone()[0]
    cas = "UPDATE rows SET version = version + 1, data = %s WHERE id = %s AND version = %s"
    conn.execute(cas, ("x" * 500, row, version))
    if ordered:
        seq = conn.execute("UPDATE meta SET last_seq = last_seq + 1 RETURNING last_seq").fetchone()[0]
    else:
        seq = conn.execute("SELECT nextval('seqs')").fetchone()[0]
    conn.execute("INSERT INTO log (seq, id, payload) VALUES (%s, %s, %s)", (seq, row, "y" * 200))
    conn.execute(b"NOTIFY bench_ceiling, 'i'; COMMIT" if notify else b"COMMIT")
    done += 1
conn.close()
print(json.dumps(done), flush=True)
"""
CEILING_DISCIPLINES = (
    "one lock",
    "row locks",
    "row locks, no NOTIFY",
    "row locks, no seq row",
    "row locks, no seq row, no NOTIFY",
)


def race(argvs: list[list[str]], env: dict[str, str] | None, timeout: float) -> list[str]:
    """Start one process per argv, wait until each says ``ready``, send them all ``go`` at once, and
    return the last line each printed (killing any left when something fails)."""
    procs = [subprocess.Popen(a, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env) for a in argvs]
    try:
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        return [proc.communicate(timeout=timeout)[0].strip().splitlines()[-1] for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def ceiling(url: str, processes: int, seconds: float) -> dict[str, float]:
    """What finer locks could buy, measured without corral: N processes, each its own row, running a
    renew's statements by hand (read, compare-and-set, the event with its number, NOTIFY, commit) under
    each discipline of :data:`CEILING_DISCIPLINES`; transactions per second of each."""
    import psycopg
    from psycopg.conninfo import make_conninfo

    from runner.sql.store_postgres_schema import Target

    dsn = Target(url).conninfo
    schema = f"ceiling_{os.getpid()}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    dsn_in = make_conninfo(dsn, options=f"-csearch_path={schema}")
    out: dict[str, float] = {}
    try:
        with psycopg.connect(dsn_in, autocommit=True) as conn:
            conn.execute("CREATE TABLE rows (id text PRIMARY KEY, version bigint NOT NULL, data text NOT NULL)")
            conn.execute("CREATE TABLE meta (last_seq bigint NOT NULL)")
            conn.execute("INSERT INTO meta VALUES (0)")
            conn.execute("CREATE SEQUENCE seqs")
            conn.execute("CREATE TABLE log (seq bigint PRIMARY KEY, id text NOT NULL, payload text NOT NULL)")
            for n in range(processes):
                conn.execute("INSERT INTO rows VALUES (%s, 0, '')", (f"r{n}",))
        for discipline in CEILING_DISCIPLINES:
            with psycopg.connect(dsn_in, autocommit=True) as conn:  # each discipline from an empty log
                conn.execute("TRUNCATE log")
            argvs = [
                [sys.executable, "-c", CEILING, dsn_in, discipline, str(n), str(seconds)] for n in range(processes)
            ]
            total = sum(int(last) for last in race(argvs, None, seconds + 60))
            out[discipline] = total / seconds
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
    return out


class Stores:
    """Fresh stores of both kinds: SQLite files in a directory, schemas of one PostgreSQL database."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.cluster: Path | None = None
        configured = os.environ.get("CORRAL_TEST_POSTGRES")
        if configured:
            base = configured
        else:
            from tests.support import pgserver

            reason = pgserver.unavailable()
            if reason is not None:
                raise SystemExit(f"no PostgreSQL: set CORRAL_TEST_POSTGRES or install the server ({reason})")
            self.cluster = Path(tempfile.mkdtemp(prefix="corral-bpg-")) / "c"
            base = pgserver.start(self.cluster, durable=True)
        import psycopg

        from tests.support.stores import _as_url, with_database

        base = _as_url(base)
        self.database = f"corral_bench_{os.getpid()}"
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{self.database}"')
        self.base = base
        self._with = with_database
        self.count = 0

    def url(self, kind: str) -> str:
        self.count += 1
        if kind == "sqlite":
            return f"sqlite://{self.directory / f'bench-{self.count}.db'}"
        return self._with(self.base, self.database, schema=f"b_{self.count}")

    def close(self) -> None:
        import psycopg

        with psycopg.connect(self.base, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.database}" WITH (FORCE)')
        if self.cluster is not None:
            from tests.support import pgserver

            pgserver.stop(self.cluster)
            shutil.rmtree(self.cluster.parent, ignore_errors=True)


def _service(url: str, cache: Path) -> Any:
    from runner.definitions.library import Library
    from runner.service import Service
    from runner.store import open_store

    return Service(open_store(url), Library(cache_dir=cache), actor="bench")


def renew(url: str, cache: Path, count: int) -> dict[str, float]:
    from runner.service import AcquireInput, RenewInput

    service = _service(url, cache)
    try:
        credential = service.controller.acquire(AcquireInput("ctl", "B-1", SHA, 900, "bench")).credential
        samples = []
        for _ in range(count):
            started = time.perf_counter()
            service.controller.renew(RenewInput("ctl", credential, 900))
            samples.append((time.perf_counter() - started) * 1000)
    finally:
        service.store.close()
    return {"median_ms": statistics.median(samples), "p99_ms": percentile(samples, 99)}


def plan(url: str, cache: Path, steps: int) -> float:
    import anyio

    from runner.definitions.recipes import RecipeLibrary
    from runner.plans.keeper import MemoryKeeper
    from runner.plans.ops import OPERATIONS
    from runner.service.inputs.plans import PlanRunInput, PlanSubmitInput
    from runner.service.plans import Plans

    recipes = cache / f"recipes-{steps}"
    recipes.mkdir(parents=True, exist_ok=True)
    lines = ["recipe: long", "version: 1", "description: Many passing steps.", "inputs: {type: object}", "steps:"]
    lines += [f"  - {{id: s{n}, do: flow.pass, with: {{values: {{n: {n}}}}}}}" for n in range(steps)]
    (recipes / "long.yaml").write_text("\n".join(lines) + "\n")
    service = _service(url, cache)
    try:
        plans = Plans(service, RecipeLibrary([recipes]), MemoryKeeper(), OPERATIONS)
        plans.submit(PlanSubmitInput({"plan": "long-1", "recipe": "long", "controller": "ctl", "inputs": {}}))
        started = time.perf_counter()
        done = anyio.run(plans.run, PlanRunInput("long-1"))
        seconds = time.perf_counter() - started
        assert done.state == "succeeded", done.state
    finally:
        service.store.close()
    return seconds


def throughput(url: str, cache: Path, processes: int, seconds: float) -> dict[str, float]:
    open_ = _service(url, cache)  # the schema made (and the spec cached) before the race
    from runner.definitions.library import Library

    Library(cache_dir=cache).builtin("controller")
    open_.store.close()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    argvs = [[sys.executable, "-c", WORKER, url, f"w{i}", str(cache), str(seconds)] for i in range(processes)]
    latencies: list[float] = []
    for last in race(argvs, env, seconds + 120):
        latencies += json.loads(last)
    return {"per_second": len(latencies) / seconds, "p99_ms": percentile([x * 1000 for x in latencies], 99)}


def wakeup(url: str, cache: Path, samples: int) -> float:
    from runner.context import Instance
    from runner.store import open_store

    waiter, writer = open_store(url), open_store(url)
    woke: list[float] = []
    try:
        with writer.write() as tx:
            tx.append(tx.put(Instance("w/1", "w", "start", 0, {}), "a", {}), "go", "start", "bench", {})
        since = writer.events()[-1].seq
        waiter.wait_events(since, 0.01)  # the listener (PostgreSQL) is up before the first sample
        for _ in range(samples):
            box: list[float] = []
            ready = threading.Event()

            def wait(after: int = since, out: list[float] = box, ready: threading.Event = ready) -> None:
                ready.set()
                found = waiter.wait_events(after, 10.0)
                assert found
                out.append(time.perf_counter())

            thread = threading.Thread(target=wait)
            thread.start()
            ready.wait()
            time.sleep(0.05)  # the waiter is waiting
            committed = time.perf_counter()
            with writer.write() as tx:
                current = tx.get("w/1")
                assert current is not None
                event = tx.append(tx.put(current, "a", {}), "go", "a", "bench", {})
            thread.join()
            since = event.seq
            woke.append((box[0] - committed) * 1000)
    finally:
        waiter.close()
        writer.close()
    return statistics.median(woke)


def figure(name: str, value: float, unit: str, target: str, met: bool, detail: str) -> dict[str, Any]:
    return {"figure": name, "value": round(value, 3), "unit": unit, "target": target, "met": met, "detail": detail}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="short windows (make bench)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    renews, steps, window, wakes = (100, 200, 1.5, 10) if args.quick else (1000, 200, 5.0, 50)
    directory = Path(tempfile.mkdtemp(prefix="corral-bench-pg-"))
    stores = Stores(directory)
    results: dict[str, Any] = {}
    try:
        for kind in ("sqlite", "postgresql"):
            cache = directory / f"cache-{kind}"
            results[kind] = {
                "renew": renew(stores.url(kind), cache, renews),
                "plan_seconds": plan(stores.url(kind), cache, steps),
                "throughput": {n: throughput(stores.url(kind), cache, n, window) for n in (1, 2, 4, 8)},
                "wakeup_ms": wakeup(stores.url(kind), cache, wakes),
            }
        results["ceiling"] = ceiling(stores.url("postgresql"), 8, window)
    finally:
        stores.close()
        shutil.rmtree(directory, ignore_errors=True)
    sq, pg = results["sqlite"], results["postgresql"]
    roof = results["ceiling"]
    note = "PostgreSQL: a local test cluster over a unix socket, fsync off; SQLite: WAL, synchronous=FULL"
    ratio = pg["throughput"][8]["per_second"] / sq["throughput"][8]["per_second"]
    per_n = "; ".join(
        f"N={n}: sqlite {sq['throughput'][n]['per_second']:.0f}/s p99 {sq['throughput'][n]['p99_ms']:.1f} ms, "
        f"postgresql {pg['throughput'][n]['per_second']:.0f}/s p99 {pg['throughput'][n]['p99_ms']:.1f} ms"
        for n in (1, 2, 4, 8)
    )
    figures = [
        figure(
            "renew median, PostgreSQL / SQLite",
            pg["renew"]["median_ms"],
            "ms",
            "value only",
            True,  # (a value-only figure is met by being measured: bench/README.md, "met" is a boolean)
            f"PostgreSQL median {pg['renew']['median_ms']:.2f} ms p99 {pg['renew']['p99_ms']:.2f} ms; SQLite median "
            f"{sq['renew']['median_ms']:.2f} ms p99 {sq['renew']['p99_ms']:.2f} ms ({renews} renews; {note})",
        ),
        figure(
            f"{steps}-step plan, PostgreSQL / SQLite",
            pg["plan_seconds"],
            "s",
            "value only",
            True,  # (a value-only figure is met by being measured: bench/README.md, "met" is a boolean)
            f"PostgreSQL {pg['plan_seconds']:.2f} s, SQLite {sq['plan_seconds']:.2f} s ({note})",
        ),
        figure(
            "writer throughput with 8 processes, PostgreSQL / SQLite",
            ratio,
            "x",
            ">= 1.5x",
            ratio >= 1.5,
            f"{per_n} ({window:g} s windows of back-to-back renews, one lease per process; {note})",
        ),
        figure(
            "what finer locks could buy: row locks / one lock, 8 processes, without corral",
            roof["row locks"] / roof["one lock"],
            "x",
            "value only",
            True,  # (a value-only figure is met by being measured: bench/README.md, "met" is a boolean)
            "a renew's statements by hand, each process its own row: "
            + ", ".join(f"{name} {rate:.0f}/s" for name, rate in roof.items())
            + f" (corral on SQLite: {sq['throughput'][8]['per_second']:.0f}/s). NOTIFY takes a cluster-wide"
            " lock held to commit, and a commit-ordered seq row is one more: the commits stay one at a time",
        ),
        figure(
            "notified wait wake-up (PostgreSQL), median",
            pg["wakeup_ms"],
            "ms",
            "< 10 ms median",
            pg["wakeup_ms"] < 10,
            f"PostgreSQL (NOTIFY) {pg['wakeup_ms']:.2f} ms, SQLite (poll) {sq['wakeup_ms']:.2f} ms, {wakes} samples",
        ),
    ]
    if args.json:
        print(json.dumps({"figures": figures, "results": results}, indent=2, default=str))
    else:
        for f in figures:
            verdict = "" if f["target"] == "value only" else (" MET" if f["met"] else " NOT MET")
            print(f"{f['figure']}: {f['value']} {f['unit']} (target {f['target']}{verdict})\n  {f['detail']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
