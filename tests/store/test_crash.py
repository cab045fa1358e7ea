"""Acknowledged transitions survive ``kill -9``; a database newer than the code is refused untouched.

A child process acquires a controller lease and then renews and resumes it as fast as it can,
printing one JSON line per acknowledged transition (seq, version, generation; never a token) and
keeping its current credential in a 0600 file. The parent SIGKILLs it at a chosen point, reopens the
file and checks: SQLite's integrity check passes, every acknowledged event is there with the same seq
and version, the lease is at least as far as the last acknowledgement and agrees with its own event log,
and the lease can be carried on (resumed with the saved credential, or taken over if the child died
between committing a resume and saving its new credential).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import signal
import sqlite3
import stat
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from runner import fence
from runner.definitions.library import Library
from runner.errors import RefusedError, StoreVersionError
from runner.fence import Credential
from runner.service import (
    AcquireInput,
    EventsInput,
    ReleaseInput,
    RenewInput,
    ResumeInput,
    Service,
    TakeoverInput,
)
from runner.sql.store_sqlite import SCHEMA_VERSION, SQLiteStore

CONTROLLER = "crash"
INSTANCE = fence.instance_id(CONTROLLER)
TTL = 3600
SHA = hashlib.sha256(b"crash").hexdigest()
TOKEN_SHAPE = re.compile(r"(?<![0-9a-f-])[0-9a-f]{32}(?![0-9a-f-])")

CHILD = r"""
import hashlib, json, os, signal, sys, time
from pathlib import Path

from runner.service import AcquireInput, EventsInput, RenewInput, ResumeInput, Service
from runner.definitions.library import Library
from runner.sql.store_sqlite import SQLiteStore

db, cache, credfile, die_at = sys.argv[1:5]
CTL, INSTANCE = "crash", "controller/crash"
SHA = hashlib.sha256(b"crash").hexdigest()
service = Service(SQLiteStore(db), Library(cache_dir=Path(cache)), actor="child")


def save(cred):
    # The credential goes to a 0600 file, never to stdout; written before the grant is acknowledged.
    tmp = credfile + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump({"lease_id": cred.lease_id, "generation": cred.generation, "token": cred.token}, out)
    os.replace(tmp, credfile)


def ack(op, seq, version, cred):
    print(json.dumps({"op": op, "seq": seq, "version": version, "generation": cred.generation,
                      "lease_id": cred.lease_id}), flush=True)


grant = service.controller.acquire(AcquireInput(CTL, "CRASH-1", SHA, 3600, "child@host"))
cred = grant.credential
save(cred)
ack("acquire", grant.event_seq, grant.lease.version, cred)
last_seq = grant.event_seq
deadline = time.monotonic() + 60  # the parent kills us long before; never outlive a lost parent
i = 0
while time.monotonic() < deadline:
    i += 1
    if i % 4 == 0:
        grant = service.controller.resume(ResumeInput(CTL, cred))
        if i == int(die_at):  # die after the commit, before the new credential is saved or acknowledged
            os.kill(os.getpid(), signal.SIGKILL)
        cred = grant.credential
        save(cred)
        seq, version = grant.event_seq, grant.lease.version
    else:
        view = service.controller.renew(RenewInput(CTL, cred))
        # Only this process writes: the one event after last_seq is the renew just acknowledged.
        (event,) = service.events(EventsInput(since=last_seq, instance_id=INSTANCE))
        assert event.version == view.version and event.trigger == "renew"
        seq, version = event.seq, view.version
    ack("resume" if i % 4 == 0 else "renew", seq, version, cred)
    last_seq = seq
"""


def _crash_child(tmp_path: Path, acks: int | None, die_at: int, rng: random.Random) -> tuple[list[dict[str, Any]], str]:
    """Run the child and SIGKILL it after ``acks`` acknowledgements (plus a random moment), or let it
    SIGKILL itself at iteration ``die_at``; return every acknowledgement it printed, and all its output."""
    db, cache, credfile = tmp_path / "corral.db", tmp_path / "spec-cache", tmp_path / "credential.json"
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(db), str(cache), str(credfile), str(die_at)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
    )
    assert proc.stdout is not None and proc.stderr is not None
    lines: list[bytes] = []
    try:
        while acks is None or len(lines) < acks:
            line = proc.stdout.readline()
            if not line:
                if acks is None:
                    break
                proc.wait(timeout=10)
                pytest.fail(f"the child exited early ({proc.returncode}): {proc.stderr.read().decode()}")
            lines.append(line)
        if acks is not None:
            time.sleep(rng.uniform(0, 0.02))  # land somewhere inside the next transactions
            os.kill(proc.pid, signal.SIGKILL)
        status = proc.wait(timeout=10)
        assert status == -signal.SIGKILL, f"the child died of something else ({status}): {proc.stderr.read().decode()}"
        rest = proc.stdout.read()  # lines printed before the kill are acknowledgements too
        stderr = proc.stderr.read().decode()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    output = b"".join(lines) + rest
    complete = output.decode().split("\n")[:-1]  # a torn last line (no newline) was never acknowledged
    return [json.loads(line) for line in complete], output.decode() + stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    ("acks", "die_at"),
    [(1, -1), (13, -1), (150, -1), (None, 8)],
    ids=["after-acquire", "after-13", "after-150", "between-resume-and-save"],
)
def test_acknowledged_transitions_survive_sigkill(tmp_path: Path, acks: int | None, die_at: int) -> None:
    acked, output = _crash_child(tmp_path, acks, die_at, random.Random(acks))
    assert len(acked) >= (acks or die_at)
    assert not TOKEN_SHAPE.search(output), "a token was printed"
    credfile = tmp_path / "credential.json"
    assert stat.S_IMODE(credfile.stat().st_mode) == 0o600
    saved = json.loads(credfile.read_text())
    assert saved["token"] not in output

    with SQLiteStore(tmp_path / "corral.db") as store:
        assert store.integrity() == "ok"
        service = Service(store, Library(cache_dir=tmp_path / "spec-cache"), actor="parent")
        events = service.events(EventsInput(instance_id=INSTANCE))
        lease = store.get(INSTANCE)
        assert lease is not None and lease.state == "active"

        # No half-written state: versions 1..n, the row at n, and the row agrees with its last events.
        assert [e.version for e in events] == list(range(1, lease.version + 1))
        assert [e.seq for e in events] == sorted({e.seq for e in events})
        grants = [e for e in events if e.trigger in ("acquire", "resume")]
        assert [g.payload["changed"]["generation"] for g in grants] == list(range(1, lease.data["generation"] + 1))
        assert lease.data["lease_id"] == grants[-1].payload["changed"]["lease_id"]
        expiries = [e.payload["changed"]["expires_at"] for e in events if "expires_at" in e.payload["changed"]]
        assert lease.data["expires_at"] == expiries[-1]

        # Every acknowledged transition is there, at the same seq and version.
        by_seq = {e.seq: e for e in events}
        for record in acked:
            event = by_seq.get(record["seq"])
            assert event is not None, f"acknowledged but lost: {record}"
            assert (event.version, event.trigger) == (record["version"], record["op"]), (record, event)
        assert [r["seq"] for r in acked] == [e.seq for e in events[: len(acked)]], "acks out of order or missing"
        assert lease.version >= acked[-1]["version"]

        # The credential file is never ahead of the store (it is written after the commit).
        assert saved["generation"] <= lease.data["generation"]
        if die_at > 0:
            assert saved["generation"] == lease.data["generation"] - 1, "the resume before the kill was lost"
        cred = Credential(CONTROLLER, saved["lease_id"], saved["generation"], saved["token"])
        if saved["generation"] == lease.data["generation"]:
            grant = service.controller.resume(ResumeInput(CONTROLLER, cred, holder="parent@host"))
        else:
            # The child died between committing a resume and saving the new credential: the saved one
            # is stale now, and the lease can only be taken over once it expires.
            with pytest.raises(RefusedError) as caught:
                service.controller.resume(ResumeInput(CONTROLLER, cred))
            assert caught.value.code == "fence_stale"
            later = datetime.now(UTC) + timedelta(seconds=TTL + 60)
            with SQLiteStore(tmp_path / "corral.db", clock=lambda: later) as future:
                grant = Service(future, service.library, actor="parent").controller.takeover(
                    TakeoverInput(CONTROLLER, lease.data["lease_id"], 60, "parent@host")
                )
        assert grant.credential.generation == lease.data["generation"] + 1
        assert grant.event_seq > events[-1].seq
        service.controller.renew(RenewInput(CONTROLLER, grant.credential))
        released = service.controller.release(ReleaseInput(CONTROLLER, grant.credential, "after-crash", SHA))
        assert released.state == "released" and released.version == lease.version + 3
        assert store.integrity() == "ok"


def _user_version(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])
    finally:
        conn.close()


@pytest.mark.parametrize("kind", ["corral", "bare"])
def test_newer_schema_is_refused_and_left_untouched(tmp_path: Path, kind: str) -> None:
    db = tmp_path / "corral.db"
    if kind == "corral":  # a real store with a lease in it, then "upgraded" by a future corral
        with SQLiteStore(db) as store:
            Service(store, Library(cache_dir=tmp_path / "spec-cache")).controller.acquire(
                AcquireInput(CONTROLLER, "TICKET-1", SHA, 60, "h@host")
            )
    conn = sqlite3.connect(db)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    # The write queue's lock file (corral.db.lock, made by the write) is not the database: left out.
    before = {p.name: p.read_bytes() for p in tmp_path.glob("corral.db*") if p.suffix != ".lock"}
    assert list(before) == ["corral.db"]

    with pytest.raises(StoreVersionError) as caught:
        SQLiteStore(db)
    assert caught.value.code == "store_too_new"
    assert caught.value.details["schema_version"] == SCHEMA_VERSION + 1
    assert caught.value.details["supported"] == SCHEMA_VERSION

    after = {p.name: p.read_bytes() for p in tmp_path.glob("corral.db*") if p.suffix != ".lock"}
    assert after == before, "the refused open wrote to the database"
    assert _user_version(db) == SCHEMA_VERSION + 1
    conn = sqlite3.connect(db)
    try:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
    finally:
        conn.close()
    if kind == "bare":
        assert tables == set(), "the refused open created tables"
        assert mode == "delete", "the refused open switched the journal to WAL"
    else:
        assert {"instances", "events"} <= tables
