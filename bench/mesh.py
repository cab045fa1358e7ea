"""Issue 17's mesh figures, through the service's mesh component over a real store (SQLite; PostgreSQL too
when a server is given): send-to-inbox latency, an inbox read with 10 000 unacked messages, and 100
agents checking in every second.

- **send-to-inbox**: one agent sends to another, which reads its inbox until the message is there; the
  time from the start of the send to the read that returned it (median and p99).
- **inbox with 10k unacked**: the recipient's deliveries are made directly in one transaction (setup,
  not measured); then reads of the first page (50, the default) go through the port: median and p99.
- **100 agents checking in every second**: 100 agent ids each check in once per second, paced, for a few
  seconds; per check-in latency p99 and the share of each second the check-ins kept the store busy.

``--quick`` (for ``bench/summary.py``): fewer samples and 3 s of check-ins. ``--json`` prints
``{"figures": [...]}`` (bench/README.md). ``--postgres URL`` (default ``$CORRAL_TEST_POSTGRES``) adds the
same figures on PostgreSQL, in a scratch schema dropped at the end.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from common import percentile, print_figures  # noqa: E402 - bench scripts import their sibling as a module

SEND_TARGET_MS = 10.0
INBOX_TARGET_MS = 20.0
CHECKIN_TARGET_MS = 50.0


def _service(url: str) -> Any:
    from runner.definitions.library import Library
    from runner.service import Service
    from runner.store import open_store

    store = open_store(url)
    return store, Service(store, Library(), actor="bench")


def send_to_inbox(service: Any, samples: int) -> dict[str, Any]:
    from runner.service.inputs.mesh import AckInput, CheckinInput, InboxInput, SendInput

    mesh = service.mesh
    sender = mesh.checkin(CheckinInput("sender", role="builder"))["agent_token"]
    reader = mesh.checkin(CheckinInput("reader", role="reviewer"))["agent_token"]
    took: list[float] = []
    for n in range(samples):
        started = time.perf_counter()
        sent = mesh.send(SendInput("sender", "note", f"note {n}", to="reader", agent_token=sender))
        while True:
            read = mesh.inbox(InboxInput("reader", 50, agent_token=reader))
            if any(m["message_id"] == sent["message_id"] for m in read["messages"]):
                break
        took.append((time.perf_counter() - started) * 1000)
        mesh.ack(AckInput("reader", (sent["message_id"],), reader))
    return {"runs": samples, "median_ms": round(percentile(took, 50), 3), "p99_ms": round(percentile(took, 99), 3)}


def _fill(store: Any, agent: str, count: int) -> None:
    """``count`` unacked messages for ``agent``, made in one transaction (setup, not measured)."""
    from runner.context import format_time

    with store.write() as tx:
        if store.url.startswith("sqlite"):
            from runner.sql.store_sqlite import connection_of
        else:
            from runner.sql.store_postgres import connection_of  # type: ignore[assignment]
        conn = connection_of(tx)[0]
        mark = "?" if store.url.startswith("sqlite") else "%s"
        stamp = format_time(tx.now)
        first = tx.next_number("mesh_message")
        for _ in range(count - 1):
            tx.next_number("mesh_message")
        rows = [
            (first + n, "msg-" + uuid.uuid4().hex, "flood-sender", "agent", agent, "s", f"body {n}", None, 0, stamp, 1)
            for n in range(count)
        ]
        marks = ", ".join([mark] * 11)
        cursor = conn.cursor()
        cursor.executemany(
            "INSERT INTO mesh_messages (seq, message_id, sender, to_kind, to_value, subject, body, thread, urgent,"
            f" sent_at, pending) VALUES ({marks})",
            rows,
        )
        cursor.executemany(
            f"INSERT INTO mesh_deliveries (agent_id, seq, acked_at) VALUES ({mark}, {mark}, NULL)",
            [(agent, r[0]) for r in rows],
        )


def inbox_10k(service: Any, samples: int, count: int = 10_000) -> dict[str, Any]:
    from runner.service.inputs.mesh import CheckinInput, InboxInput

    mesh = service.mesh
    mesh.checkin(CheckinInput("flood-sender"))
    flooded = mesh.checkin(CheckinInput("flooded"))["agent_token"]
    _fill(service.store, "flooded", count)
    took: list[float] = []
    for _ in range(samples):
        started = time.perf_counter()
        read = mesh.inbox(InboxInput("flooded", 50, agent_token=flooded))
        took.append((time.perf_counter() - started) * 1000)
        assert len(read["messages"]) == 50 and read["unacked"] == count, read["unacked"]
    return {
        "unacked": count,
        "runs": samples,
        "median_ms": round(percentile(took, 50), 3),
        "p99_ms": round(percentile(took, 99), 3),
    }


def checkins(service: Any, agents: int, seconds: int) -> dict[str, Any]:
    from runner.service.inputs.mesh import CheckinInput

    mesh = service.mesh
    tokens: dict[str, str] = {}
    took: list[float] = []
    busy = 0.0
    started = time.perf_counter()
    for second in range(seconds):
        tick = started + second
        for n in range(agents):
            t0 = time.perf_counter()
            agent_id = f"agent-{n:03d}"
            done = mesh.checkin(
                CheckinInput(agent_id, role="builder", status=f"tick {second}", agent_token=tokens.get(agent_id))
            )
            tokens.setdefault(agent_id, done.get("agent_token", ""))
            took.append((time.perf_counter() - t0) * 1000)
        spent = time.perf_counter() - tick
        busy += min(spent, 1.0)
        rest = tick + 1 - time.perf_counter()
        if rest > 0:
            time.sleep(rest)
    return {
        "agents": agents,
        "seconds": seconds,
        "checkins": len(took),
        "median_ms": round(percentile(took, 50), 3),
        "p99_ms": round(percentile(took, 99), 3),
        "busy_share": round(busy / seconds, 3),
        "kept_up": busy / seconds < 1.0,
    }


def measure(url: str, quick: bool) -> dict[str, Any]:
    store, service = _service(url)
    try:
        return {
            "send_to_inbox": send_to_inbox(service, 50 if quick else 300),
            "inbox_10k": inbox_10k(service, 30 if quick else 200),
            "checkins": checkins(service, 100, 3 if quick else 10),
        }
    finally:
        store.close()


def _postgres_url(base: str) -> tuple[str, str]:
    schema = f"bench_mesh_{secrets.token_hex(4)}"
    joiner = "&" if "?" in base else "?"
    return f"{base}{joiner}schema={schema}", schema


def _drop(base: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def figures_of(adapter: str, m: dict[str, Any]) -> list[dict[str, Any]]:
    send, inbox, beat = m["send_to_inbox"], m["inbox_10k"], m["checkins"]
    return [
        {
            "figure": f"mesh send-to-inbox latency, median ({adapter})",
            "value": send["median_ms"],
            "unit": "ms",
            "target": f"< {SEND_TARGET_MS:g} ms",
            "met": send["median_ms"] < SEND_TARGET_MS,
            "detail": send,
        },
        {
            "figure": f"mesh inbox read with 10k unacked, median ({adapter})",
            "value": inbox["median_ms"],
            "unit": "ms",
            "target": f"< {INBOX_TARGET_MS:g} ms",
            "met": inbox["median_ms"] < INBOX_TARGET_MS,
            "detail": inbox,
        },
        {
            "figure": f"mesh 100 agents checking in every second: check-in p99 ({adapter})",
            "value": beat["p99_ms"],
            "unit": "ms",
            "target": f"< {CHECKIN_TARGET_MS:g} ms, and every second's 100 check-ins done within it",
            "met": beat["p99_ms"] < CHECKIN_TARGET_MS and beat["kept_up"],
            "detail": beat,
        },
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short run (about 15 s) for bench/summary.py")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--postgres", default=os.environ.get("CORRAL_TEST_POSTGRES"), help="a PostgreSQL server URL")
    args = parser.parse_args()
    figures: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="corral-bench-mesh-") as directory:
        figures += figures_of("sqlite", measure(f"sqlite://{Path(directory) / 'mesh.db'}", args.quick))
    if args.postgres:
        url, schema = _postgres_url(args.postgres)
        try:
            figures += figures_of("postgresql", measure(url, args.quick))
        finally:
            _drop(args.postgres, schema)
    print_figures(figures, args.json)


if __name__ == "__main__":
    main()
