"""The lanes workload: a client per state home that starts writer lanes in linked worktrees of one
repository (shared by the store's homes) and releases them; and the history rules for lanes.

Each :class:`LaneClient` holds a controller lease of its own (``w<home>``, a long TTL: the lease
workload is the other clients') and two linked worktrees of the store's repository (``wt-lane-<home><n>``,
each on its own branch). It draws lane starts (in one of its worktrees, owning and locking one of
:data:`SCOPES`, which overlap each other across homes, with the lane id its own proposal: a start whose
client died is known by id, and retried under it), releases of the lanes it may hold, and listings of
the store's live lanes. The agent is the scripted kind (``script``) on the process host, the tests' own;
it runs unconfined (the lanes' scopes are under test, not the sandbox). After the run the client
settles its controller's lanes (``settle_lanes``: reconcile, then list every
lane, ended ones too; see :meth:`LaneClient.settle`).

The rules (:func:`check`), over the operations with a ``lanes/`` key and what the worktrees hold:

- ``overlapping_lanes``: two lanes whose scopes overlap (owned/owned, or owned/locked either way) were
  certainly live at the same moment: each was seen live (its start answered ``active``, or a listing
  showed it) before the other could have ended (nothing that could end it, a release or a settle,
  began before);
- ``released_lane_live``: a lane whose release answered ``released`` is shown live by a listing (or
  the settle), or still holds its scopes or worktree (another start is refused naming it), in an
  operation that began after that answer;
- ``lane_unsettled``: after the nemesis stopped and the final settle, a lane is neither released nor
  live with its agent in its pane (an acknowledged start that ended otherwise counts too), or a
  controller was never settled;
- ``worktree_touched``: a worktree is not as it was set up (its files and their bytes, an ignored
  file, HEAD, the stash, the repository's worktree list) after its lanes' releases: a release must
  never commit, stash, reset or delete.
"""

from __future__ import annotations

import hashlib
import math
import subprocess
import uuid
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chaos.clients import Client, Recorder
from chaos.history import Op
from chaos.lease import Anomaly
from chaos.relays import CONTROLLER_TTL

LANE_WEIGHTS = {"start_writer": 3.0, "release_writer": 2.5, "lanes": 1.5}
WORKTREES_PER_HOME = 2
# (owned, locked) scopes a lane may take: ``src`` overlaps ``src/core`` and ``src/util``; ``tests`` locks
# inside ``src/core``; ``docs`` overlaps ``docs/api``; locks never conflict with locks (``README.md``).
SCOPES: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = (
    (("src",), ()),
    (("src/core",), ()),
    (("src/util", "docs/api"), ()),
    (("docs",), ("README.md",)),
    (("tests",), ("src/core/a.py",)),
    (("tools",), ("README.md",)),
)
FILES = {
    "README.md": "chaos\n",
    "src/core/a.py": "a = 1\n",
    "src/util/b.py": "b = 2\n",
    "docs/guide.md": "# guide\n",
    "docs/api/index.md": "# api\n",
    "tests/test_a.py": "def test_a(): pass\n",
    "tools/run.sh": "echo run\n",
    ".gitignore": "*.log\n",
}
LIVE = ("provisioning", "active", "releasing", "orphaned", "release_failed")
GIT_IDENTITY = ("-c", "user.email=chaos@example.invalid", "-c", "user.name=chaos", "-c", "commit.gpgsign=false")


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *GIT_IDENTITY, *args], cwd=cwd, check=True, capture_output=True, text=True)
    return done.stdout


def make_repo(base: Path, homes: Iterable[str]) -> dict[str, dict[str, Any]]:
    """The store's repository (``base/repo``) and its linked worktrees, each with an ignored file
    (``keep.log``) beside the tracked ones; the fingerprint of each, by path."""
    repo = base / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    for relative, text in FILES.items():
        (repo / relative).parent.mkdir(parents=True, exist_ok=True)
        (repo / relative).write_text(text, encoding="utf-8")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    prints = {}
    for home in homes:
        for n in range(WORKTREES_PER_HOME):
            worktree = base / f"wt-lane-{home.lower()}{n}"
            git(repo, "worktree", "add", "-q", "-b", f"lane-{home.lower()}{n}", str(worktree))
            (worktree / "keep.log").write_text("an ignored file a release must leave alone\n", encoding="utf-8")
            prints[str(worktree)] = fingerprint(worktree)
    return prints


def fingerprint(worktree: Path) -> dict[str, Any]:
    """What a release must leave as it is: every file's bytes (outside ``.git``), HEAD, the stash, the
    status, and whether the repository still lists the worktree."""
    if not worktree.is_dir():
        return {"exists": False}
    files = {
        str(p.relative_to(worktree)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(worktree.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(worktree).parts
    }
    listed = str(worktree.resolve()) in git(worktree, "worktree", "list", "--porcelain")
    return {
        "exists": True,
        "files": files,
        "head": git(worktree, "rev-parse", "HEAD").strip(),
        "stash": git(worktree, "stash", "list").strip(),
        "status": git(worktree, "status", "--porcelain", "--ignored").strip(),
        "listed": listed,
    }


@dataclass(frozen=True)
class LaneDraws:
    """One lane operation's draws from its client's seeded stream."""

    op: str
    slot: int  # which of the client's worktrees
    scopes: int  # which of SCOPES a start takes
    lane: str  # a new start's lane id
    kill_after: float
    think: float


@dataclass
class Mine:
    """A lane the client may hold: its id, whether its start was acknowledged, and which of SCOPES it
    asked for (a retry under the same id asks for the same)."""

    lane: str
    confirmed: bool
    scopes: int = -1


class LaneClient(Client):
    """A coordinator starting and releasing writer lanes in its own worktrees of the store's repository."""

    WORKLOAD = "lanes"
    SUFFIX = "w"  # its name: <store>/<home>/w

    def __init__(self, name: str, store: str, url: str, home: Path, directory: Path, recorder: Recorder, seed: int):
        cid = "w" + name.split("/")[1]
        super().__init__(name, store, url, home, directory, [cid], recorder, seed, CONTROLLER_TTL)
        self.cid = cid
        letter = cid[1:].lower()
        self.worktrees = [directory / f"wt-lane-{letter}{n}" for n in range(WORKTREES_PER_HOME)]
        self.names = [f"lane-{letter}{n}" for n in range(WORKTREES_PER_HOME)]
        self.credential: dict[str, Any] = {}
        self.mine: dict[int, Mine] = {}  # by slot

    def setup(self) -> None:
        """The client's controller lease, before the run."""
        proposal = {"new_lease": str(uuid.UUID(int=self.rng.getrandbits(128), version=4))}
        proposal["new_token"] = self.rng.randbytes(16).hex()
        got = self.call({"op": "acquire", "cid": self.cid, "args": proposal, "ttl": CONTROLLER_TTL})
        if got["status"] != "ok":
            raise RuntimeError(f"{self.name}: acquire for the lanes workload failed: {got}")
        self.credential = {"lease": proposal["new_lease"], "gen": got["result"]["gen"], "token": proposal["new_token"]}

    def draw(self) -> LaneDraws:
        ops = list(LANE_WEIGHTS)
        return LaneDraws(
            op=self.rng.choices(ops, [LANE_WEIGHTS[o] for o in ops])[0],
            slot=self.rng.randrange(WORKTREES_PER_HOME),
            scopes=self.rng.randrange(len(SCOPES)),
            lane=str(uuid.UUID(int=self.rng.getrandbits(128), version=4)),
            kill_after=self.rng.uniform(0.0, 0.05),
            think=self.rng.uniform(0.0, 0.3),
        )

    def key(self, op: str, cid: str) -> str:
        return f"{self.store}:lanes/repo"

    def request(self, draws: Any) -> tuple[str, str, dict[str, Any], dict[str, Any]]:
        """A start in the drawn worktree: again under the same id if its last start's outcome was lost, a
        release instead if the client holds a lane there; a release of the drawn worktree's lane (or
        another one's), a listing if it holds none."""
        op, slot = draws.op, draws.slot
        held = self.mine.get(slot)
        if op == "start_writer" and held is not None and held.confirmed:
            op = "release_writer"
        if op == "release_writer" and held is None:
            slot = next(iter(sorted(self.mine)), slot)
            held = self.mine.get(slot)
            if held is None:
                op = "lanes"
        args: dict[str, Any] = dict(self.credential)
        shown: dict[str, Any] = {"controller": self.cid}
        if op == "start_writer":
            lane, scopes = (held.lane, held.scopes) if held is not None else (draws.lane, draws.scopes)
            owned, locked = SCOPES[scopes]
            shown["scopes"] = scopes
            shown.update(lane=lane, name=self.names[slot], worktree=str(self.worktrees[slot]))
            shown.update(owned=list(owned), locked=list(locked))
        elif op == "release_writer":
            assert held is not None
            shown.update(lane=held.lane, name=self.names[slot], worktree=str(self.worktrees[slot]))
        args.update({k: v for k, v in shown.items() if k != "controller"})
        return op, self.cid, args, shown

    def learn(self, record: Op, cid: str, args: dict[str, Any], draws: Any) -> None:
        slot = self.names.index(args["name"]) if "name" in args else None
        if record.op == "start_writer" and slot is not None:
            if record.status == "ok":
                self.mine[slot] = Mine(args["lane"], True, args["scopes"])
            elif record.status == "unknown":
                self.mine[slot] = Mine(args["lane"], False, args["scopes"])
            elif self.mine.get(slot) is not None and self.mine[slot].lane == args["lane"]:
                del self.mine[slot]  # a retried start refused: a listing says if it is live
        elif record.op == "release_writer" and slot is not None and record.status in ("ok", "refused"):
            self.mine.pop(slot, None)  # released, or not this client's to release (any more)
        elif record.op in ("lanes", "settle_lanes") and record.status == "ok":
            live = {lane: name for lane, name, state, _ in record.result.get("lanes", []) if state in LIVE}
            known = {m.lane: m.scopes for m in self.mine.values()}
            self.mine = {}
            for lane, name in live.items():
                if name in self.names:
                    self.mine[self.names.index(name)] = Mine(lane, True, known.get(lane, -1))

    def settle(self) -> Op | None:
        """The final settle (after the nemesis stopped): reconcile this controller's lanes, list them all.

        From the worker that ran the lanes, when it lives on (as a long-lived ``corral serve`` would): a
        start that lost its store after the lane was recorded leaves it ``provisioning``, and its call
        has ended, so reconcile settles it even though the process that started it still runs."""
        return self.final("settle_lanes", self.cid, dict(self.credential), {"controller": self.cid})


# --- the rules -------------------------------------------------------------------------------------------


def _overlap(a: str, b: str) -> bool:
    """Equal, or one is an ancestor directory of the other."""
    pa, pb = a.split("/"), b.split("/")
    n = min(len(pa), len(pb))
    return pa[:n] == pb[:n]


def conflict(first: Mapping[str, Any], second: Mapping[str, Any]) -> list[list[str]]:
    """The overlapping pairs of two lanes' scopes: owned/owned, owned/locked, locked/owned."""
    pairs = []
    for mine, theirs in (("owned", "owned"), ("owned", "locked"), ("locked", "owned")):
        pairs += [[a, b] for a in first.get(mine, ()) for b in second.get(theirs, ()) if _overlap(a, b)]
    return pairs


def _live_seen(ops: list[Op]) -> dict[str, list[Op]]:
    """By lane id, the operations that saw it live: its start answered ok, a listing showed it live."""
    seen: dict[str, list[Op]] = defaultdict(list)
    for op in ops:
        if op.status != "ok":
            continue
        if op.op == "start_writer" and op.result.get("state") in LIVE:
            seen[op.args["lane"]].append(op)
        elif op.op in ("lanes", "settle_lanes"):
            for lane, _, state, _ in op.result.get("lanes", []):
                if state in LIVE:
                    seen[lane].append(op)
    return seen


def check(
    ops: Iterable[Op], worktrees: Mapping[str, tuple[dict[str, Any], dict[str, Any]]] | None = None
) -> list[Anomaly]:
    """The anomalies of the lane operations in ``ops`` (those with a ``lanes/`` key); ``worktrees``: by
    path, the fingerprint at set-up and after the run (:func:`fingerprint`)."""
    by_key: dict[str, list[Op]] = defaultdict(list)
    for op in ops:
        if ":lanes/" in op.key:
            by_key[op.key].append(op)
    anomalies: list[Anomaly] = []
    for key, mine in sorted(by_key.items()):
        anomalies += _overlapping(key, mine)
        anomalies += _released_live(key, mine)
        anomalies += _unsettled(key, mine)
        anomalies += _touched(key, mine, worktrees or {})
    return anomalies


def _overlapping(key: str, ops: list[Op]) -> list[Anomaly]:
    scopes: dict[str, dict[str, Any]] = {}  # a lane's scopes: its first start's (a retry asks the same)
    for op in ops:
        if op.op == "start_writer":
            scopes.setdefault(op.args["lane"], op.args)
    enders: dict[str, list[Op]] = defaultdict(list)
    for op in ops:
        if op.status == "refused":
            continue
        if op.op == "release_writer":
            enders[op.args["lane"]].append(op)
        elif op.op == "settle_lanes":  # a reconcile may end any lane of its controller
            for lane, start in scopes.items():
                if start.get("controller") == op.args.get("controller"):
                    enders[lane].append(op)
    # Certainly live from the first moment it was seen live (a witness's completion) until the first
    # invocation of anything that could end it.
    certain: dict[str, tuple[float, float, Op]] = {}
    for lane, seen in _live_seen(ops).items():
        first = min(seen, key=lambda o: o.complete or math.inf)
        assert first.complete is not None
        end = min((e.invoke for e in enders[lane]), default=math.inf)
        if first.complete < end:
            certain[lane] = (first.complete, end, first)
    found = []
    lanes = sorted(certain)
    for i, a in enumerate(lanes):
        for b in lanes[i + 1 :]:
            if a not in scopes or b not in scopes:
                continue
            pairs = conflict(scopes[a], scopes[b])
            (a_from, a_to, a_op), (b_from, b_to, b_op) = certain[a], certain[b]
            if pairs and max(a_from, b_from) < min(a_to, b_to):
                later, earlier = (a_op, b_op) if a_from >= b_from else (b_op, a_op)
                message = (
                    f"lanes {a[:8]} ({scopes[a]['name']}) and {b[:8]} ({scopes[b]['name']}) were live together "
                    f"from {max(a_from, b_from):.3f} s, their scopes overlapping: {pairs}"
                )
                found.append(Anomaly("overlapping_lanes", key, message, later, [earlier]))
    return found


def _released_live(key: str, ops: list[Op]) -> list[Anomaly]:
    released = [o for o in ops if o.op == "release_writer" and o.status == "ok" and o.result.get("state") == "released"]
    seen = _live_seen(ops)
    for op in ops:  # a start refused beside a lane: that lane was live (holding its scopes) then
        if op.op == "start_writer" and op.status == "refused" and op.result.get("blocker"):
            seen[op.result["blocker"]].append(op)
    found = []
    for release in released:
        assert release.complete is not None
        for witness in seen.get(release.args["lane"], []):
            if witness.args.get("lane") != release.args["lane"] and witness.invoke > release.complete:
                how = "refused a start beside it" if witness.op == "start_writer" else "seen live"
                message = f"lane {release.args['lane'][:8]} ({release.args['name']}) released, then {how}"
                found.append(Anomaly("released_lane_live", key, message, witness, [release]))
                break
    return found


def _unsettled(key: str, ops: list[Op]) -> list[Anomaly]:
    starts = [o for o in ops if o.op == "start_writer"]
    by_controller: dict[Any, list[Op]] = defaultdict(list)
    for start in starts:
        by_controller[start.args.get("controller")].append(start)
    settles = {o.args.get("controller"): o for o in ops if o.op == "settle_lanes" and o.status == "ok"}
    found = []
    for controller, mine in by_controller.items():
        settle = settles.get(controller)
        if settle is None:
            message = f"controller {controller}'s lanes were never settled after the run"
            found.append(Anomaly("lane_unsettled", key, message, mine[-1]))
            continue
        final = {lane: (state, holder) for lane, _, state, holder in settle.result.get("lanes", [])}
        acknowledged = {o.args["lane"] for o in mine if o.status == "ok"}
        for start in {o.args["lane"]: o for o in mine}.values():
            lane = start.args["lane"]
            state, holder = final.get(lane, (None, False))
            if state == "released" or (state == "active" and holder):
                continue
            if lane not in acknowledged and (state is None or state not in LIVE):
                continue  # a start that may never have taken effect, or that reconcile closed
            message = f"lane {lane[:8]} ({start.args['name']}) is {state or 'gone'} after the final settle"
            message += " with no agent in its pane" if state == "active" else ""
            found.append(Anomaly("lane_unsettled", key, message, start, [settle]))
    return found


def _touched(key: str, ops: list[Op], worktrees: Mapping[str, tuple[dict[str, Any], dict[str, Any]]]) -> list[Anomaly]:
    releases: dict[str, list[Op]] = defaultdict(list)
    for op in ops:
        if op.op == "release_writer" and op.status != "refused":
            releases[op.args["worktree"]].append(op)
    found = []
    for path, (before, after) in sorted(worktrees.items()):
        if not releases.get(path) or before == after:
            continue
        if not after.get("exists"):
            what = "is gone"
        else:
            changed = sorted(k for k in before if before[k] != after.get(k))
            what = f"changed: {', '.join(changed)}"
            if "files" in changed:
                lost = sorted(set(before["files"]) - set(after["files"]))
                what += f" (missing {lost})" if lost else ""
        message = f"worktree {Path(path).name} {what} after its lanes' releases"
        found.append(Anomaly("worktree_touched", key, message, releases[path][-1], releases[path][:-1][-3:]))
    return found
