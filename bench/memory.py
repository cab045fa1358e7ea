"""Handoff memory (issue 18): checkpoint write latency, and ``search`` over 100k checkpoints.

1. Write latency: ``Memory.checkpoint`` by session (one serialized transaction each: the checkpoint,
   the session's status, retention and the event, fsynced: ``synchronous=FULL``), on a fresh SQLite
   store, and again on a store holding the total limit (10,000 countable checkpoints: every write then
   also prunes one, in the same transaction). p50 and p99 per write.
2. Search: ``--checkpoints`` checkpoints (100,000; ``--quick``: 20,000) of varied text written through
   the memory port in large transactions, then ``Memory.search`` for a rare word, a common word (every
   checkpoint matches; the newest 20 are returned) and two words, each timed over repeated runs (FTS5).

``--postgres URL`` runs both on a PostgreSQL store too (a fresh schema).

Targets: write p50 < 20 ms (fsync bound), search p50 < 50 ms at 100k.
"""

from __future__ import annotations

import argparse
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from common import percentile, print_figures  # noqa: E402  - reason: bench/ runs as a script directory

from runner.definitions.library import Library  # noqa: E402
from runner.service import Service  # noqa: E402
from runner.service.inputs.memory import CheckpointInput, SearchInput  # noqa: E402
from runner.service.memory import Memory, MemoryLimits  # noqa: E402
from runner.store import open_store  # noqa: E402
from runner.store.memory import CheckpointRecord, ProjectRecord, SessionRecord, memory_store  # noqa: E402

WRITE_TARGET_MS = 20.0
SEARCH_TARGET_MS = 50.0
WORDS = (
    "parser",
    "lexer",
    "schema",
    "migration",
    "retention",
    "window",
    "session",
    "checkpoint",
    "release",
    "writer",
    "lane",
    "scope",
    "fence",
    "receipt",
    "relay",
    "collect",
    "store",
    "sqlite",
    "postgres",
    "index",
    "search",
    "vector",
    "token",
    "budget",
    "cursor",
    "agent",
)


def service_on(url: str, root: Path) -> Service:
    return Service(open_store(url), Library(cache_dir=root / "cache"), actor="bench")


def write_latency(url: str, root: Path, writes: int, *, preload: int = 0) -> list[float]:
    """Milliseconds per ``checkpoint`` call (after ``preload`` checkpoints filled the store)."""
    service = service_on(url, root)
    try:
        memory = Memory(service.core, MemoryLimits())
        first = memory.checkpoint(
            CheckpointInput("bench", "start", project="bench", goal="measure", next_steps=("write more",))
        )
        if preload:
            fill(service, preload, project="filler")
        sid = first["session_id"]
        samples = []
        for n in range(writes):
            inp = CheckpointInput(
                "bench",
                f"checkpoint {n}: {WORDS[n % len(WORDS)]} work",
                session_id=sid,
                work_done=("measured one more write",),
                current_state="the bench is running",
                next_steps=("write the next one",),
                files=("bench/memory.py",),
            )
            started = time.perf_counter()
            memory.checkpoint(inp)
            samples.append((time.perf_counter() - started) * 1000)
        return samples
    finally:
        service.store.close()


def fill(service: Service, count: int, project: str = "p", per_session: int = 500) -> None:
    """``count`` checkpoints through the memory port, ``per_session`` to a session, 5,000 per transaction."""
    port = memory_store(service.store)
    stamp = "2026-01-01T00:00:00.000000Z"
    with port.transaction() as tx:
        if tx.project(project) is None:
            tx.add_project(ProjectRecord(project, None, None, None, stamp))
    made = 0
    while made < count:
        with port.transaction() as tx:
            for _ in range(min(5000, count - made)):
                if made % per_session == 0:
                    session = SessionRecord("ses_" + secrets.token_hex(8), project, "g", "a", "paused", stamp, stamp)
                    tx.add_session(session)
                    seq = 0
                seq += 1
                words = " ".join(WORDS[(made * k) % len(WORDS)] for k in (1, 3, 7))
                tx.add_checkpoint(
                    CheckpointRecord(
                        "cp_" + secrets.token_hex(8),
                        session.id,
                        project,
                        seq,
                        "a",
                        f"common {words} item{made}",
                        "paused",
                        False,
                        stamp,
                        "0" * 64,
                        {"next_steps": [f"step {made}"], "files": [f"src/file{made % 97}.py"]},
                    )
                )
                made += 1


def search_latency(url: str, root: Path, count: int, runs: int) -> dict[str, Any]:
    service = service_on(url, root)
    try:
        started = time.perf_counter()
        fill(service, count)
        # Planner statistics, as autovacuum (PostgreSQL) or a periodic ANALYZE (SQLite) would have them
        # for a store of this size: without them PostgreSQL cannot tell a rare word from a common one.
        with service.store.write() as tx:
            tx._conn.execute("ANALYZE")  # type: ignore[attr-defined]  # reason: the bench reaches the adapter
        built = time.perf_counter() - started
        memory = Memory(service.core, MemoryLimits(500, count + 1))
        queries = {"rare": f"item{count // 2}", "common": "common", "two words": "parser schema"}
        results: dict[str, Any] = {"build_seconds": round(built, 1), "fts": memory.port.info()["fts"]}
        every: list[float] = []
        for label, query in queries.items():
            samples = []
            found = 0
            for _ in range(runs):
                began = time.perf_counter()
                found = len(memory.search(SearchInput(query, limit=20))["checkpoints"])
                samples.append((time.perf_counter() - began) * 1000)
            every += samples
            results[label] = {"query": query, "found": found, "p50_ms": round(statistics.median(samples), 2)}
        results["p50_ms"] = round(statistics.median(every), 2)
        results["p99_ms"] = round(percentile(every, 99), 2)
        return results
    finally:
        service.store.close()


def measure(label: str, url_of: Any, root: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    writes = write_latency(url_of("writes"), root, args.writes)
    full = write_latency(url_of("writes-full"), root, max(20, args.writes // 4), preload=10_100)
    search = search_latency(url_of("search"), root, args.checkpoints, args.runs)
    p50, p99 = statistics.median(writes), percentile(writes, 99)
    full50 = statistics.median(full)
    return [
        {
            "figure": f"memory checkpoint write latency, p50 ({label})",
            "value": round(p50, 2),
            "unit": "ms",
            "target": f"< {WRITE_TARGET_MS:g} ms",
            "met": p50 < WRITE_TARGET_MS,
            "detail": f"{len(writes)} writes, p99 {p99:.2f} ms; over the 10,000 limit (pruning in each write) "
            f"p50 {full50:.2f} ms",
        },
        {
            "figure": f"memory search over {args.checkpoints // 1000}k checkpoints, p50 ({label})",
            "value": search["p50_ms"],
            "unit": "ms",
            "target": f"< {SEARCH_TARGET_MS:g} ms",
            "met": search["p50_ms"] < SEARCH_TARGET_MS,
            "detail": f"{search['fts']}; p99 {search['p99_ms']} ms; rare {search['rare']['p50_ms']} ms, common "
            f"{search['common']['p50_ms']} ms, two words {search['two words']['p50_ms']} ms; built in "
            f"{search['build_seconds']} s",
        },
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer writes, 20k checkpoints to search")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--writes", type=int, default=None)
    parser.add_argument("--checkpoints", type=int, default=None)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--postgres", metavar="URL", help="also measure on this PostgreSQL server (a fresh schema)")
    args = parser.parse_args()
    args.writes = args.writes or (100 if args.quick else 1000)
    args.checkpoints = args.checkpoints or (20_000 if args.quick else 100_000)
    figures: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="corral-bench-memory-") as tmp:
        root = Path(tmp)
        figures += measure("sqlite", lambda name: f"sqlite://{root / (name + '.db')}", root, args)
        if args.postgres:
            sep = "&" if "?" in args.postgres else "?"
            tag = secrets.token_hex(4)
            figures += measure(
                "postgresql",
                lambda name: f"{args.postgres}{sep}schema=bench_{tag}_{name.replace('-', '_')}",
                root,
                args,
            )
    print_figures(figures, args.json)


if __name__ == "__main__":
    main()
