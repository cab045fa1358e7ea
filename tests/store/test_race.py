"""Eight real processes race for one controller lease in one store, on the wall clock: an SQLite file, and
one PostgreSQL schema shared by two coordinator homes (the workers alternate between them; each process
has its own connection, as coordinators on two machines would).

Each worker polls the listing. It acquires a released lease, or takes over an expired one naming the
lease id it saw (after first naming an older lease id it saw, which must be refused); now and then it
also tries to acquire or take over a live lease, which must be refused. A winner renews a few times,
resumes once (and replays the credential the resume retired), renews again, then either releases or
"dies" by going silent; a silent holder waits until someone else holds the lease and replays its dead
credential. Every acknowledged operation and every refusal is logged, one JSON line each, to the
worker's own file; tokens are never logged.

Afterwards the event log alone must show one holder at a time and generations growing by one per
grant, every acknowledgement a worker saw must be in it at the same seq and version (and nothing
else), and the run must have included a takeover, refused attempts and refused stale credentials.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from runner import fence
from runner.context import parse_time
from runner.definitions.library import Library
from runner.service import EventsInput, Service
from runner.store import open_store
from tests.support.stores import check_integrity

WORKERS = 8
RUN_SECONDS = 11.0  # the minimum TTL is 5 s: enough for a silent holder to expire and be taken over
CONTROLLER = "race"
GRANTS = ("acquire", "resume", "takeover")
# What a worker may legitimately be told "no" for, by operation.
ALLOWED_REFUSALS = {
    "acquire": {"lease_held"},
    "takeover": {"lease_not_expired", "lease_mismatch", "lease_not_held"},
    "renew": {"fence_stale", "lease_expired"},  # a holder stalled past its TTL and lost the lease
    "resume": {"fence_stale"},
    "release": {"fence_stale"},
    "stale_renew": {"fence_stale"},
    "stale_resume": {"fence_stale"},
    "stale_release": {"fence_stale"},
}

WORKER = r"""
import hashlib, json, random, sys, time
from pathlib import Path

from runner.errors import NotFoundError, RefusedError
from runner.service import (
    AcquireInput, EventsInput, ListLeasesInput, ReleaseInput, RenewInput, ResumeInput, Service, TakeoverInput,
)
from runner.definitions.library import Library
from runner.store import open_store

workdir, cache, name, seed = sys.argv[1:5]
workdir = Path(workdir)
url = (workdir / "store-url").read_text()  # a file, not argv: a store URL may carry what ps must not show
CTL, TTL = "race", 5
SHA = hashlib.sha256(b"race").hexdigest()
rng = random.Random(seed)
service = Service(open_store(url), Library(cache_dir=Path(cache)), actor=name)


def log(**record):
    print(json.dumps(record, sort_keys=True), flush=True)  # never a token: only public fields


def attempt(op, call):
    # Refusals are expected and logged; anything else is a bug and kills the worker (exit status != 0).
    try:
        return call()
    except (RefusedError, NotFoundError) as exc:
        log(op=op, refused=exc.code)
        return None


def ack_grant(op, grant):
    log(op=op, seq=grant.event_seq, version=grant.lease.version, lease_id=grant.credential.lease_id,
        generation=grant.credential.generation)
    return grant.credential


def ack_view(op, cred, view):
    log(op=op, version=view.version, lease_id=cred.lease_id, generation=cred.generation,
        expires_at=view.data["expires_at"], state=view.state)


def look():
    try:
        return service.controller.leases(ListLeasesInput(CTL))[0]
    except NotFoundError:
        return None


def renew(cred):
    view = attempt("renew", lambda: service.controller.renew(RenewInput(CTL, cred)))
    if view is not None:
        ack_view("renew", cred, view)
    return view is not None


def replay(cred, prefix="stale_"):
    # A credential that no longer holds the lease: every fenced operation must be refused.
    for op in ("renew", "resume", "release"):
        if op == "renew":
            call = lambda: service.controller.renew(RenewInput(CTL, cred))
        elif op == "resume":
            call = lambda: service.controller.resume(ResumeInput(CTL, cred))
        else:
            call = lambda: service.controller.release(ReleaseInput(CTL, cred, "checkpoint", SHA))
        result = attempt(prefix + op, call)
        if result is not None:  # a stale credential was honoured: log it, the parent fails the test
            log(op=prefix + op, version=getattr(result, "version", None) or result.lease.version, bug=True)


def hold(cred, stop):
    for _ in range(3):
        time.sleep(0.5)
        if time.time() >= stop or not renew(cred):
            return
    grant = attempt("resume", lambda: service.controller.resume(ResumeInput(CTL, cred)))
    if grant is None:
        return
    old, cred = cred, ack_grant("resume", grant)
    replay(old)
    time.sleep(0.5)
    if not renew(cred):
        return
    taken_over = any(e.trigger == "takeover" for e in service.events(EventsInput(instance_id="controller/race")))
    if taken_over and rng.random() < 0.5:
        view = attempt("release", lambda: service.controller.release(ReleaseInput(CTL, cred, "checkpoint", SHA)))
        if view is not None:
            ack_view("release", cred, view)
        return
    # Die: go silent until someone else holds the lease, then come back with the dead credential.
    log(op="silent", lease_id=cred.lease_id)
    while time.time() < stop:
        seen = look()
        if seen is not None and seen.data["lease_id"] != cred.lease_id:
            replay(cred)
            return
        time.sleep(0.1)


(workdir / f"ready-{name}").touch()
go = workdir / "go"
while not go.exists():
    time.sleep(0.005)
time.sleep(0.01)
stop = float(go.read_text())
seen_ids = []  # every lease id this worker saw listed, oldest first
while time.time() < stop:
    view = look()
    grant, op = None, None
    if view is not None and view.data["lease_id"] not in seen_ids:
        seen_ids.append(view.data["lease_id"])
    if view is None or view.state == "released":
        grant = attempt("acquire", lambda: service.controller.acquire(AcquireInput(CTL, "RACE-1", SHA, TTL, name)))
        op = "acquire"
    elif view.expired:
        if len(seen_ids) > 1:  # first with an id seen earlier (e.g. before a resume): must be lease_mismatch
            stale_id = seen_ids[-2]
            grant = attempt("takeover", lambda: service.controller.takeover(TakeoverInput(CTL, stale_id, TTL, name)))
        if grant is None:
            seen = view.data["lease_id"]
            grant = attempt("takeover", lambda: service.controller.takeover(TakeoverInput(CTL, seen, TTL, name)))
        op = "takeover"
    else:
        dice = rng.random()
        if dice < 0.2:  # a live lease: acquire must be refused
            grant = attempt("acquire", lambda: service.controller.acquire(AcquireInput(CTL, "RACE-1", SHA, TTL, name)))
            op = "acquire"
        elif dice < 0.3:  # and so must a takeover, even naming the right lease
            seen = view.data["lease_id"]
            grant = attempt("takeover", lambda: service.controller.takeover(TakeoverInput(CTL, seen, TTL, name)))
            op = "takeover"
    if grant is not None:
        hold(ack_grant(op, grant), stop)
        break  # a holder that let go (or died) stays out of the race
    time.sleep(rng.uniform(0.005, 0.03))
service.store.close()
"""


def _homes(tmp_path: Path, url: str) -> list[Path]:
    """The two coordinator homes the workers alternate between, each told the one store's URL."""
    homes = [tmp_path / "home-a", tmp_path / "home-b"]
    for home in homes:
        home.mkdir(exist_ok=True)
        (home / "store-url").write_text(url)
    return homes


def _run_workers(tmp_path: Path, url: str) -> list[list[dict[str, Any]]]:
    cache = tmp_path / "spec-cache"
    # Create the schema and warm the spec cache up front, so the race is about the lease only.
    with open_store(url) as store:
        Library(cache_dir=cache).builtin("controller")
        check_integrity(store)
    homes = _homes(tmp_path, url)
    logs = [tmp_path / f"worker-{i}.log" for i in range(WORKERS)]
    errs = [tmp_path / f"worker-{i}.err" for i in range(WORKERS)]
    procs = []
    for i in range(WORKERS):
        with logs[i].open("w") as out, errs[i].open("w") as err:
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-c", WORKER, str(homes[i % 2]), str(cache), f"worker-{i}", str(i)],
                    stdout=out,
                    stderr=err,
                    cwd=homes[i % 2],
                )
            )
    try:
        deadline = time.monotonic() + 30
        while sum(len(list(home.glob("ready-*"))) for home in homes) < WORKERS:
            assert all(p.poll() is None for p in procs), [e.read_text() for e in errs]
            assert time.monotonic() < deadline, "the workers did not start within 30 s"
            time.sleep(0.02)
        stop = str(time.time() + RUN_SECONDS)
        for home in homes:
            (home / "go.tmp").write_text(stop)
            (home / "go.tmp").rename(home / "go")
        for proc in procs:
            proc.wait(timeout=RUN_SECONDS + 30)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for i, proc in enumerate(procs):
        assert proc.returncode == 0, f"worker {i} failed:\n{errs[i].read_text()}"
        assert errs[i].read_text() == "", errs[i].read_text()
    for path in logs:
        # A fence token is 32 hex digits; lease ids (UUIDs) and SHA-256s have other shapes.
        assert not re.search(r"(?<![0-9a-f-])[0-9a-f]{32}(?![0-9a-f-])", path.read_text()), "a token was printed"
    return [[json.loads(line) for line in path.read_text().splitlines()] for path in logs]


@pytest.mark.slow
def test_processes_racing_for_one_lease_never_overlap(tmp_path: Path, race_url: str) -> None:
    records = _run_workers(tmp_path, race_url)
    with open_store(race_url) as store:
        check_integrity(store)
        events = Service(store, Library(cache_dir=tmp_path / "spec-cache")).events(
            EventsInput(instance_id=fence.instance_id(CONTROLLER))
        )
        lease = store.get(fence.instance_id(CONTROLLER))
        everything = store.events()
    assert lease is not None
    assert [e.seq for e in everything] == [e.seq for e in events], "events of another instance appeared"

    # The log is complete and ordered: strictly increasing seq, versions 1..n, n == the lease's version.
    assert [e.seq for e in events] == sorted({e.seq for e in events})
    assert [e.version for e in events] == list(range(1, lease.version + 1))

    # One holder at a time: every renew/release between two grants names the latest grant, a takeover
    # names the grant it replaced and happens only after that lease expired, an acquire only when free.
    state, current, generation, expires_at = "absent", None, 0, None
    for e in events:
        params, changed = e.payload["params"], e.payload["changed"]
        assert e.from_state == state, f"seq {e.seq}: {e.trigger} from {e.from_state}, but the lease was {state}"
        if e.trigger in GRANTS:
            if e.trigger == "acquire":
                assert state in ("absent", "released"), f"seq {e.seq}: acquire of a held lease"
            elif e.trigger == "resume":
                assert (params["lease_id"], params["generation"]) == (current, generation), f"seq {e.seq}"
            else:
                assert state == "active" and params["expected_lease_id"] == current, f"seq {e.seq}"
                assert expires_at is not None and parse_time(e.at) >= expires_at, f"seq {e.seq}: lease was live"
            assert changed["generation"] == generation + 1, f"seq {e.seq}: generation did not grow by one"
            assert changed["lease_id"] != current
            state, current, generation = "active", changed["lease_id"], changed["generation"]
            expires_at = parse_time(changed["expires_at"])
        elif e.trigger == "renew":
            assert state == "active" and (params["lease_id"], params["generation"]) == (current, generation)
            assert expires_at is not None and parse_time(e.at) < expires_at, f"seq {e.seq}: renewed after expiry"
            expires_at = parse_time(changed["expires_at"])
        else:
            assert e.trigger == "release", f"seq {e.seq}: unexpected trigger {e.trigger}"
            assert state == "active" and (params["lease_id"], params["generation"]) == (current, generation)
            state = "released"
    assert lease.data["generation"] == generation and lease.state == state

    # Every acknowledgement is in the log at the same seq and version, and every event was acknowledged.
    by_version = {e.version: e for e in events}
    acked: list[int] = []
    refusals: dict[str, int] = {}
    for record in (r for worker in records for r in worker):
        op = record["op"]
        assert not record.get("bug"), f"a stale credential was honoured: {record}"
        if "refused" in record:
            assert record["refused"] in ALLOWED_REFUSALS[op], record
            refusals[op] = refusals.get(op, 0) + 1
            continue
        if op == "silent":
            continue
        event = by_version.get(record["version"])
        assert event is not None, f"acknowledged but not in the event log: {record}"
        assert event.trigger == op, (record, event)
        if "seq" in record:
            assert event.seq == record["seq"], (record, event)
            assert event.payload["changed"]["lease_id"] == record["lease_id"]
            assert event.payload["changed"]["generation"] == record["generation"]
        else:
            assert event.payload["params"]["lease_id"] == record["lease_id"], (record, event)
            assert event.to_state == record["state"], (record, event)
            if op == "renew":
                assert event.payload["changed"]["expires_at"] == record["expires_at"], (record, event)
        acked.append(record["version"])
    assert sorted(acked) == list(range(1, lease.version + 1)), "an event nobody was told about, or told twice"

    triggers = [e.trigger for e in events]
    assert "takeover" in triggers, f"no takeover happened: {triggers}"
    refused_codes = {r["refused"] for worker in records for r in worker if "refused" in r}
    # A live lease refuses acquire and takeover; an expired one refuses a takeover naming an older grant.
    assert {"lease_held", "lease_not_expired", "lease_mismatch"} <= refused_codes, refused_codes
    assert sum(n for op, n in refusals.items() if op.startswith("stale_")) >= 3, f"no stale replay: {refusals}"


@pytest.mark.slow  # seconds of waiting on processes or deadlines: left out of make test-fast
def test_a_lone_worker_acquires_the_free_lease_and_logs_exactly_what_it_did(tmp_path: Path, race_url: str) -> None:
    """The worker (a string run by ``python -c``) on its own, in a race of one second: it finds no lease,
    acquires it, renews it while it holds it, and logs exactly the events the store recorded; a broken
    worker fails here, fast."""
    cache = tmp_path / "spec-cache"
    open_store(race_url).close()
    (home,) = _homes(tmp_path, race_url)[:1]
    proc = subprocess.Popen(
        [sys.executable, "-c", WORKER, str(home), str(cache), "worker-solo", "0"],
        cwd=home,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not (home / "ready-worker-solo").exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the worker never got ready"
            time.sleep(0.01)
        (home / "go").write_text(str(time.time() + 1.0))
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert (proc.returncode, err) == (0, ""), err
    records = [json.loads(line) for line in out.splitlines()]
    with open_store(race_url) as store:
        lease = store.get(fence.instance_id(CONTROLLER))
        assert lease is not None
        events = store.events()
    assert [r["op"] for r in records] == [e.trigger for e in events] == ["acquire"] + ["renew"] * (len(events) - 1)
    assert [r["version"] for r in records] == [e.version for e in events] == list(range(1, lease.version + 1))
    assert records[0]["seq"] == events[0].seq and records[0]["generation"] == 1
    assert {r["lease_id"] for r in records} == {lease.data["lease_id"]}
    assert (lease.state, lease.data["holder"], {e.actor for e in events}) == ("active", "worker-solo", {"worker-solo"})
    assert records[-1].get("expires_at", lease.data["expires_at"]) == lease.data["expires_at"]
