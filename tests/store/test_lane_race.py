"""Eight real processes start writer lanes at the same moment, in one repository and one store (an SQLite
file; a PostgreSQL schema), from two coordinator homes (the workers alternate; the credential is in both).

One repository with eight linked worktrees, each on its own branch; one worktree per process. The
scopes are chosen so the set of winners does not depend on who gets the write lock first:

* two *loners* overlap nobody, so both always win (they lock ``README.md`` as another lane does: locks
  never conflict with locks; and they own or lock ``srcx`` and ``api-v3``, which merely share a string
  prefix with ``src`` and ``api``);
* group ``owned``: three lanes whose owned scopes are equal or ancestors of each other (owned/owned),
  so exactly one wins and the others are refused ``scope_overlap``;
* group ``cycle``: three lanes in a cycle, each locking a path inside the next one's owned scope (and
  owning nothing another owns), so they overlap pairwise and exactly one wins. Whoever wins, one loser
  owns what the winner locks and the other locks what the winner owns: both directions of the
  owned/locked rule are exercised in every round, each refused ``scope_locked``.

Twenty rounds, each with its own store file, lease and rotation of the roles over the worktrees; the
same eight worker processes play every round (so the rounds cost no interpreter start-ups). For each
round the parent acquires the controller lease once and hands the credential to the workers in a 0600
file (never on argv, never printed). Each worker prepares everything (store, credential, git
preflight), reports ready and waits for the round's ``go`` file; then all eight call ``writer_start``
at once (the test checks that all eight calls were in flight together). The parent checks every reply
against the forced outcome, and the store against the replies.
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from runner import credentials, fence
from runner.definitions.library import Library
from runner.service import AcquireInput, Service
from runner.sql.store_sqlite import SQLiteStore
from runner.store import open_store
from tests.support.stores import check_integrity, fresh_url, store_holds

WORKERS = 8
ROUNDS = 20
CONTROLLER = "race"
SHA = "d" * 64


@dataclass(frozen=True)
class Role:
    group: str  # "loner" or the name of a group whose members overlap each other pairwise
    owned: tuple[str, ...]
    locked: tuple[str, ...] = ()


ROLES = (
    # "api-v3" and "srcx" share a string prefix with "api" and "src" but are not inside them: no overlap.
    Role("loner", ("tests",), ("README.md", "api-v3")),
    Role("loner", ("tools", "Makefile", "srcx"), ("README.md", "docs/index.md")),
    Role("owned", ("src/core",)),
    Role("owned", ("src/core/engine.py", "src/util")),
    Role("owned", ("src",), ("README.md",)),
    Role("cycle", ("api",), ("schema/v1",)),
    Role("cycle", ("schema",), ("web/static",)),
    Role("cycle", ("web",), ("api/v2",)),
)

WORKER = r"""
import json, sys, time
from pathlib import Path

from runner import credentials
from runner.agents.kinds import Kinds
from runner.agents.process import ProcessHost
from runner.errors import CorralError
from runner.service import Service, WriterStartInput
from runner.definitions.library import Library
from runner.store import open_store

root, index, rounds = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
kinds = Kinds.load([])
for round_no in range(rounds):
    rundir = root / f"round-{round_no}"
    job = json.loads((rundir / "jobs.json").read_text())[index]
    store = open_store((rundir / "store-url").read_text())
    host = ProcessHost(store, rundir / "agents", kinds)
    library = Library(cache_dir=rundir / "spec-cache")
    service = Service(store, library, actor=f"worker-{index}", hosts=lambda name: host, kinds=kinds)
    home = rundir / ("home-a", "home-b")[int(index) % 2]
    credential = credentials.load(home / "credentials" / f"{job['controller']}.json", job["controller"], store.url)
    facts = service.writers.preflight(job["worktree"])
    request = WriterStartInput(
        controller_id=job["controller"],
        credential=credential,
        name=job["name"],
        kind="script",
        worktree=job["worktree"],
        branch=job["branch"],
        base_commit=job["base"],
        expected_head=facts["head"],
        expected_status_sha256=facts["status_sha256"],
        owned_scopes=tuple(job["owned"]),
        locked_scopes=tuple(job["locked"]),
        protected_branches=("main",),
        purpose="race",
        ticket_ref="RACE-1",
        authority_ref="RACE-AUTH",
        authority_sha256="d" * 64,
    )
    (rundir / f"ready-{index}").touch()
    go = rundir / "go"
    while not go.exists():
        time.sleep(0.0005)
    began = time.time()
    try:
        lane = service.writers.start(request)
        reply = {"won": True, "lane": lane.id, "state": lane.state}
    except CorralError as exc:  # a refusal is an answer; anything else is a bug and kills the worker
        reply = {"won": False, "code": exc.code, "details": exc.details, "message": exc.message}
    reply.update(name=job["name"], round=round_no, began=began, ended=time.time())
    # Close first: when the parent has every reply, no worker is still closing this round's store (the
    # last close checkpoints the WAL under an exclusive lock, and opening the store then is not retried).
    store.close()
    print(json.dumps(reply, sort_keys=True), flush=True)  # public fields only: never the token
"""


def _git(*args: str, cwd: Path) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True)
    return done.stdout.strip()


@dataclass(frozen=True)
class Repo:
    base: str
    worktrees: tuple[Path, ...]
    common_dir: str


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Repo]:
    """One repository, eight linked worktrees (``lane-0`` … ``lane-7``), shared by every round."""
    root = tmp_path_factory.mktemp("lane-race")
    main = root / "main"
    main.mkdir()
    _git("init", "-q", "-b", "main", cwd=main)
    _git("config", "user.email", "race@example.invalid", cwd=main)
    _git("config", "user.name", "race", cwd=main)
    for relative in ("README.md", "src/core/engine.py", "api/v2/x.py", "schema/v1/s.json", "web/static/a.css"):
        path = main / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{relative}\n")
    _git("add", "-A", cwd=main)
    _git("commit", "-q", "-m", "base", cwd=main)
    base = _git("rev-parse", "HEAD", cwd=main)
    worktrees = []
    for i in range(WORKERS):
        worktree = root / f"wt-{i}"
        _git("worktree", "add", "-q", "-b", f"lane-{i}", str(worktree), cwd=main)
        worktrees.append(worktree)
    yield Repo(base, tuple(worktrees), os.path.realpath(main / ".git"))


def _overlaps(a: str, b: str) -> bool:
    """Independent of runner.scopes: equal, or one is an ancestor directory of the other."""
    pa, pb = a.split("/"), b.split("/")
    n = min(len(pa), len(pb))
    return pa[:n] == pb[:n]


def _pairs(mine: tuple[str, ...], theirs: tuple[str, ...]) -> list[list[str]]:
    return sorted([a, b] for a in mine for b in theirs if _overlaps(a, b))


def _expected_refusal(loser: Role, winner: Role) -> tuple[str, str, list[list[str]]]:
    """(code, direction, pairs) of refusing ``loser`` against the live lane ``winner``, in the rule's order."""
    for code, direction, mine, theirs in (
        ("scope_overlap", "owned/owned", loser.owned, winner.owned),
        ("scope_locked", "owned/locked", loser.owned, winner.locked),
        ("scope_locked", "locked/owned", loser.locked, winner.owned),
    ):
        pairs = _pairs(mine, theirs)
        if pairs:
            return code, direction, pairs
    raise AssertionError(f"{loser} does not overlap {winner}: the roles are wrong")


def test_roles_force_a_unique_winner_set() -> None:
    """The design itself: loners overlap nobody; members of a group overlap each other pairwise."""

    def conflict(a: Role, b: Role) -> bool:
        return bool(_pairs(a.owned, b.owned) or _pairs(a.owned, b.locked) or _pairs(a.locked, b.owned))

    for i, a in enumerate(ROLES):
        for j, b in enumerate(ROLES):
            if i == j:
                continue
            same_group = a.group == b.group != "loner"
            assert conflict(a, b) == same_group, (a, b)
    cycle = [r for r in ROLES if r.group == "cycle"]
    for winner in cycle:  # whoever wins the cycle, both owned/locked directions are refused
        directions = {_expected_refusal(loser, winner)[1] for loser in cycle if loser is not winner}
        assert directions == {"owned/locked", "locked/owned"}, winner


def test_a_lone_worker_starts_its_lane_and_reports_it(tmp_path: Path, repo: Repo, race_url: str) -> None:
    """The worker (a string run by ``python -c``) alone for one round: it starts its lane through the real
    service and prints the one reply the race reads, without the token; a broken worker fails here, fast."""
    rundir = tmp_path / "round-0"
    token = _prepare_round(rundir, repo, list(ROLES), race_url)
    (rundir / "go").touch()  # the barrier is open before the worker gets there
    argv = [sys.executable, "-c", WORKER, str(tmp_path), "0", "1"]
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False)
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    (reply,) = [json.loads(line) for line in done.stdout.splitlines()]
    assert token not in done.stdout
    assert {k: reply[k] for k in ("won", "name", "round", "state")} == {
        "won": True,
        "name": "w0",
        "round": 0,
        "state": "active",
    }
    assert reply["began"] <= reply["ended"]
    with open_store((rundir / "store-url").read_text()) as store:
        (lane,) = store.find("writer")
    assert (lane.id, lane.state, lane.data["name"]) == (reply["lane"], "active", "w0")
    assert (lane.data["owned_scopes"], lane.data["locked_scopes"]) == (list(ROLES[0].owned), list(ROLES[0].locked))


def _prepare_round(rundir: Path, repo: Repo, roles: list[Role], url: str) -> str:
    """The round's store (a fresh one of ``url``'s kind, its URL in ``store-url``), spec cache, lease (its
    credential in both coordinator homes) and jobs, before anyone races: the race is about the lanes."""
    rundir.mkdir()
    url = fresh_url(url, rundir)
    (rundir / "store-url").write_text(url)
    cache = rundir / "spec-cache"
    with open_store(url) as store:
        Library(cache_dir=cache).builtin("writer")
        service = Service(store, Library(cache_dir=cache), actor="parent")
        credential = service.controller.acquire(AcquireInput(CONTROLLER, "RACE-1", SHA, 900, "parent@race")).credential
        for home in ("home-a", "home-b"):
            credential_file = rundir / home / "credentials" / f"{CONTROLLER}.json"
            credentials.save(credential_file, credential, store.url)
            assert stat.S_IMODE(credential_file.stat().st_mode) == 0o600
    jobs = {
        str(i): {
            "controller": CONTROLLER,
            "name": f"w{i}",
            "worktree": str(repo.worktrees[i]),
            "branch": f"lane-{i}",
            "base": repo.base,
            "owned": list(role.owned),
            "locked": list(role.locked),
        }
        for i, role in enumerate(roles)
    }
    (rundir / "jobs.json").write_text(json.dumps(jobs))
    return credential.token


class Workers:
    """Eight worker processes that play every round; their stdout is one JSON reply per round."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.outs = [root / f"worker-{i}.out" for i in range(WORKERS)]
        self.errs = [root / f"worker-{i}.err" for i in range(WORKERS)]
        self.argvs = [[sys.executable, "-c", WORKER, str(root), str(i), str(ROUNDS)] for i in range(WORKERS)]
        self.procs: list[subprocess.Popen[bytes]] = []
        for i, argv in enumerate(self.argvs):
            with self.outs[i].open("w") as out, self.errs[i].open("w") as err:
                self.procs.append(subprocess.Popen(argv, stdout=out, stderr=err, cwd=root))

    def _check_alive(self) -> None:
        for i, proc in enumerate(self.procs):
            assert proc.poll() is None, f"worker {i} died:\n{self.errs[i].read_text()}"

    def play(self, rundir: Path, round_no: int) -> list[dict[str, Any]]:
        """Wait until all are ready, open the barrier, and collect the replies of this round."""
        deadline = time.monotonic() + 60
        while len(list(rundir.glob("ready-*"))) < WORKERS:
            self._check_alive()
            assert time.monotonic() < deadline, "the workers did not get ready within 60 s"
            time.sleep(0.002)
        (rundir / "go.tmp").touch()
        go_at = time.time()
        (rundir / "go.tmp").rename(rundir / "go")
        while True:
            lines = [out.read_text().splitlines() for out in self.outs]
            if all(len(worker) > round_no for worker in lines):
                break
            if round_no < ROUNDS - 1:
                self._check_alive()
            assert time.monotonic() < deadline + 60, "the workers did not answer within 60 s"
            time.sleep(0.005)
        replies = [json.loads(worker[round_no]) for worker in lines]
        assert all(reply["round"] == round_no for reply in replies), replies
        for reply in replies:
            assert reply["began"] >= go_at, "a worker started before the barrier opened"
        # A real race: every call was in flight at one moment (the last began before the first ended).
        began, ended = max(r["began"] for r in replies), min(r["ended"] for r in replies)
        assert began < ended, (
            f"the calls did not overlap: last began {began - go_at:.3f} s, first ended {ended - go_at:.3f} s"
        )
        return replies

    def finish(self, tokens: list[str]) -> None:
        for i, proc in enumerate(self.procs):
            assert proc.wait(timeout=60) == 0, f"worker {i} failed:\n{self.errs[i].read_text()}"
            assert self.errs[i].read_text() == "", self.errs[i].read_text()
        for token in tokens:
            for argv, out in zip(self.argvs, self.outs, strict=True):
                assert token not in " ".join(argv), "a token travelled on argv"
                assert token not in out.read_text(), "a worker printed a token"

    def kill(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def _check_round(rundir: Path, repo: Repo, roles: list[Role], replies: list[dict[str, Any]], token: str) -> None:
    by_name = {reply["name"]: reply for reply in replies}
    role_of = {f"w{i}": role for i, role in enumerate(roles)}
    winners = {name for name, reply in by_name.items() if reply["won"]}

    # Every loner wins; exactly one of each group wins.
    for name, role in role_of.items():
        if role.group == "loner":
            assert by_name[name]["won"], f"loner {name} {role} lost: {by_name[name]}"
    groups = sorted({r.group for r in ROLES} - {"loner"})
    group_winner: dict[str, str] = {}
    for group in groups:
        won = [name for name in winners if role_of[name].group == group]
        assert len(won) == 1, f"group {group}: winners {won}; replies {replies}"
        group_winner[group] = won[0]
    assert all(by_name[name]["state"] == "active" for name in winners)

    # Each loser is refused by lane_conflicts, naming the winner of its group and the overlapping pairs.
    lane_of = {name: by_name[name]["lane"] for name in winners}
    directions: dict[str, set[str]] = {group: set() for group in groups}
    for name, reply in by_name.items():
        if reply["won"]:
            continue
        role = role_of[name]
        winner = group_winner[role.group]
        code, direction, pairs = _expected_refusal(role, role_of[winner])
        assert reply["code"] == code, (name, role, reply)
        details = reply["details"]
        assert details["guard"] == "lane_conflicts", reply
        assert (details["lane"], details["name"]) == (lane_of[winner], winner), reply
        assert details["state"] in ("provisioning", "active"), reply  # the winner may still be starting
        assert details["pairs"] == pairs, reply
        directions[role.group].add(direction)
    assert directions == {"owned": {"owned/owned"}, "cycle": {"owned/locked", "locked/owned"}}

    # The store agrees with the replies: exactly the winners are live lanes, nothing of the losers.
    url = (rundir / "store-url").read_text()
    with open_store(url) as store:
        check_integrity(store)
        lanes = store.find("writer")
        events = store.events()
        controller = store.get(fence.instance_id(CONTROLLER))
    assert {lane.data["name"] for lane in lanes} == winners
    assert {lane.id for lane in lanes} == set(lane_of.values())
    for lane in lanes:
        role = role_of[lane.data["name"]]
        assert lane.state == "active"
        assert (lane.data["owned_scopes"], lane.data["locked_scopes"]) == (sorted(role.owned), sorted(role.locked))
        assert lane.data["common_dir"] == repo.common_dir
    for a in lanes:  # the invariant itself, read back from the store
        for b in lanes:
            if a.id != b.id:
                assert not _pairs(tuple(a.data["owned_scopes"]), tuple(b.data["owned_scopes"])), (a.data, b.data)
                assert not _pairs(tuple(a.data["owned_scopes"]), tuple(b.data["locked_scopes"])), (a.data, b.data)
    writer_events = [(e.instance_id, e.trigger) for e in events if e.machine == "writer"]
    assert sorted(writer_events) == sorted(
        (lane_id, trigger) for lane_id in lane_of.values() for trigger in ("start", "start:success")
    )
    assert controller is not None and controller.version == 1, "the lease was not touched"
    assert not store_holds(url, token), "the token is in the store: it is stored only hashed"


@pytest.mark.slow
def test_racing_lane_starts_have_exactly_the_forced_winners(repo: Repo, tmp_path: Path, race_url: str) -> None:
    # Rotate the roles over the worktrees, so every worktree plays every role over the rounds.
    plans = [[ROLES[(i + round_no) % WORKERS] for i in range(WORKERS)] for round_no in range(ROUNDS)]
    tokens = [_prepare_round(tmp_path / f"round-{n}", repo, roles, race_url) for n, roles in enumerate(plans)]
    workers = Workers(tmp_path)
    try:
        for round_no, roles in enumerate(plans):
            rundir = tmp_path / f"round-{round_no}"
            replies = workers.play(rundir, round_no)
            try:
                _check_round(rundir, repo, roles, replies, tokens[round_no])
            except AssertionError as exc:
                raise AssertionError(f"round {round_no} of {ROUNDS}: {exc}") from exc
        workers.finish(tokens)
    finally:
        workers.kill()


def test_opening_a_locked_store_waits_then_reports_store_busy(tmp_path: Path) -> None:
    db = tmp_path / "corral.db"
    with SQLiteStore(db):
        pass
    blocker = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    blocker.execute("PRAGMA locking_mode = EXCLUSIVE")
    blocker.execute("BEGIN EXCLUSIVE")  # what a closing connection holds while it checkpoints
    unlock = threading.Timer(0.3, blocker.close)  # closing releases the lock
    unlock.start()
    try:
        started = time.monotonic()
        with SQLiteStore(db, busy_deadline=10.0) as store:  # the lock goes away after 0.3 s: this must wait
            assert store.integrity() == "ok"
        assert time.monotonic() - started >= 0.25
    finally:
        unlock.join()
