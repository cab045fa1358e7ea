"""The clients: each a worker process (:mod:`chaos.worker`) and a harness thread that drives it.

A :class:`Client` owns what its coordinator knows: the credentials it was granted or proposed (by
controller id) and the lease ids it has seen. Its thread draws each next operation from its own
seeded random stream (so a seed gives every client the same sequence of draws, whatever the timing),
builds the request from what the client knows, records the invocation, writes the request, waits
for the answer and records the completion. Killed (the nemesis) or silent past its deadline, the
operation is recorded as unknown and the worker replaced by a fresh process.

The nemesis reaches a client through :meth:`Client.arm_kill` (kill -9 while the next operation is in
flight), :meth:`Client.pause` / :meth:`Client.resume` (SIGSTOP / SIGCONT of the worker) and its clock
file (:attr:`Client.clock`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, cast

from chaos.history import INDETERMINATE_CODES, Op, Status

REPO = Path(__file__).resolve().parent.parent
ANSWER_DEADLINE = 30.0  # longer than any pause the nemesis makes: silence past it is a hung client
READY_DEADLINE = 60.0
FINAL_DEADLINE = 120.0  # an operation of the final settle: a plan's last resume may wait out its collect
WEIGHTS = {"acquire": 2.0, "renew": 3.0, "resume": 1.5, "takeover": 1.5, "release": 1.5, "read": 1.0}


def digest(token: str) -> str:
    """What the history records of a token: a digest, never the token."""
    return hashlib.sha256(token.encode()).hexdigest()[:16]


@dataclass
class Held:
    """A credential a client was granted, or proposed in a grant whose outcome it never learnt."""

    lease: str
    gen: int
    token: str
    confirmed: bool


@dataclass(frozen=True)
class Draws:
    """One operation's draws from its client's seeded stream."""

    op: str
    cid: str
    pick: float  # which credential
    twist: float  # below 0.05: a forged token
    new_lease: str  # a grant's proposal
    new_token: str
    kill_after: float  # if the nemesis armed a kill: how long after the request
    walk_away: bool  # forget this controller's credentials afterwards
    think: float  # the pause before the next operation


@dataclass
class Recorder:
    """The history: every operation of every client, numbered in invocation order."""

    ops: list[Op] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    epoch: float = field(default_factory=time.monotonic)

    def now(self) -> float:
        return time.monotonic() - self.epoch

    def invoke(self, process: str, pid: int, key: str, op: str, args: dict[str, Any]) -> Op:
        with self.lock:
            record = Op(len(self.ops), process, pid, key, op, args, self.now())
            self.ops.append(record)
            return record


class Worker:
    """One worker process and the thread that reads its answers."""

    def __init__(self, argv: list[str], env: dict[str, str], log: IO[str]) -> None:
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, env=env, text=True, bufsize=1
        )
        self.answers: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        with contextlib.suppress(OSError, ValueError):  # the pipe closed under the read: the worker was killed
            for line in self.proc.stdout:
                self.answers.put(line)
        self.answers.put(None)  # end of file: the process is gone

    def ready(self) -> bool:
        try:
            line = self.answers.get(timeout=READY_DEADLINE)
        except queue.Empty:
            return False
        return line is not None and "ready" in json.loads(line)

    def send(self, request: dict[str, Any]) -> bool:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
        except (OSError, ValueError):  # the process is gone (a broken or closed pipe)
            return False
        return True

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()  # SIGKILL works on a stopped process too
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()


class Client:
    """One coordinator of one state home: a worker process, what it knows, and its thread."""

    def __init__(
        self,
        name: str,
        store: str,
        url: str,
        home: Path,
        directory: Path,
        controllers: list[str],
        recorder: Recorder,
        seed: int,
        ttl: int,
        broken: str | None = None,
    ) -> None:
        self.name, self.store, self.url, self.home = name, store, url, home
        self.broken = broken
        self.controllers, self.recorder, self.ttl = controllers, recorder, ttl
        self.clock = directory / f"{name.replace('/', '-')}.clock"
        self.log_path = directory / f"{name.replace('/', '-')}.log"
        self.rng = random.Random(f"{seed}:{name}")
        self.held: dict[str, list[Held]] = {c: [] for c in controllers}
        self.seen: dict[str, str | None] = dict.fromkeys(controllers)
        self.worker: Worker | None = None
        self.lock = threading.Lock()  # guards worker replacement against the nemesis
        self.kill_armed = threading.Event()
        self.paused = False
        self.starts = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, name=name, daemon=True)

    # --- the worker process ------------------------------------------------------------------------------

    def start_worker(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
        argv = [sys.executable, "-m", "chaos.worker", "--store", self.url, "--home", str(self.home)]
        argv += ["--clock", str(self.clock), "--name", self.name]
        argv += ["--break", self.broken] if self.broken else []
        deadline = time.monotonic() + READY_DEADLINE
        while True:  # a worker started while the PostgreSQL server restarts cannot open its store: again
            with self.log_path.open("a", encoding="utf-8") as log:
                worker = Worker(argv, env, log)
            if worker.ready():
                break
            worker.kill()
            if self.stop.is_set():
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"chaos client {self.name} did not start: see {self.log_path}")
            self.stop.wait(0.5)
        with self.lock:
            if self.stop.is_set():  # closed while it started: it must not outlive the run
                worker.kill()
                return
            self.worker = worker
            self.paused = False
            self.starts += 1

    def call(self, request: dict[str, Any]) -> dict[str, Any]:
        """One request outside the history (the set-up), its answer."""
        assert self.worker is not None
        self.worker.send(request)
        try:
            line = self.worker.answers.get(timeout=ANSWER_DEADLINE)
        except queue.Empty:
            line = None
        return json.loads(line) if line else {"status": "unknown", "code": "lost"}

    def pid(self) -> int | None:
        with self.lock:
            return self.worker.proc.pid if self.worker is not None else None

    def pause(self) -> bool:
        with self.lock:
            if self.worker is None or self.worker.proc.poll() is not None:
                return False
            os.kill(self.worker.proc.pid, signal.SIGSTOP)
            self.paused = True
            return True

    def resume(self) -> None:
        with self.lock:
            if self.worker is not None and self.paused and self.worker.proc.poll() is None:
                os.kill(self.worker.proc.pid, signal.SIGCONT)
            self.paused = False

    def arm_kill(self) -> None:
        self.kill_armed.set()

    def close(self) -> None:
        self.stop.set()
        with self.lock:
            worker, self.worker = self.worker, None
        if worker is not None:
            worker.kill()

    # --- the operations ----------------------------------------------------------------------------------

    def draw(self) -> Any:
        """The next draws, always the same number of them, whatever the client knows or the nemesis does."""
        ops = list(WEIGHTS)
        return Draws(
            op=self.rng.choices(ops, [WEIGHTS[o] for o in ops])[0],
            cid=self.rng.choice(self.controllers),
            pick=self.rng.random(),
            twist=self.rng.random(),
            new_lease=str(uuid.UUID(int=self.rng.getrandbits(128), version=4)),
            new_token=self.rng.randbytes(16).hex(),
            kill_after=self.rng.uniform(0.0, 0.003),
            walk_away=self.rng.random() < 0.04,
            think=self.rng.uniform(0.0, 0.15),
        )

    def request(self, draws: Any) -> tuple[str, str, dict[str, Any], dict[str, Any]]:
        """The request for the drawn operation, from what the client knows (the history's args beside it).

        Without a credential a fenced operation becomes an acquire or a read, and a takeover without a
        lease id seen a read: what a coordinator would do first."""
        op, cid, pick, twist = draws.op, draws.cid, draws.pick, draws.twist
        held = self.held[cid]
        if op in ("renew", "resume", "release") and not held:
            op = "acquire" if pick < 0.5 else "read"
        if op == "takeover" and self.seen[cid] is None:
            op = "read"
        args: dict[str, Any] = {}
        shown: dict[str, Any] = {}
        if op in ("renew", "resume", "release"):
            # Mostly the newest credential; sometimes an older one (stale) or a forged token.
            cred = held[-1] if pick < 0.8 or len(held) == 1 else held[int(pick * 997) % len(held)]
            token = cred.token if twist >= 0.05 else uuid.UUID(int=int(twist * 2**60)).hex
            args.update(lease=cred.lease, gen=cred.gen, token=token)
            shown.update(lease=cred.lease, gen=cred.gen, token=digest(token))
        if op == "takeover":
            args["expect"] = shown["expect"] = self.seen[cid]
        if op in ("acquire", "resume", "takeover"):
            new_lease, new_token = draws.new_lease, draws.new_token
            args.update(new_lease=new_lease, new_token=new_token)
            shown.update(new_lease=new_lease, new_token=digest(new_token))
        return op, cid, args, shown

    def key(self, op: str, cid: str) -> str:
        """The object an operation acts on: the checker's partition."""
        return f"{self.store}:controller/{cid}"

    def learn(self, record: Op, cid: str, args: dict[str, Any], draws: Any) -> None:
        """What the answer teaches the client: a new credential, a lease id seen, a release."""
        held = self.held[cid]
        if record.op in ("acquire", "resume", "takeover"):
            if record.status == "ok":
                held.append(Held(args["new_lease"], record.result["gen"], args["new_token"], True))
                self.seen[cid] = args["new_lease"]
            elif record.status == "unknown":  # it may hold this one now: keep it, as a credential file would
                gen = (held[-1].gen if held else 0) + 1
                held.append(Held(args["new_lease"], gen, args["new_token"], False))
        elif record.op == "read" and record.status == "ok":
            self.seen[cid] = record.result.get("lease")
            for cred in held:
                if cred.lease == record.result.get("lease"):
                    cred.gen, cred.confirmed = record.result["gen"], True
        elif record.op == "release" and record.status == "ok":
            held.clear()
        if len(held) > 6:
            del held[:-6]
        if draws.walk_away:  # a coordinator that walks away: its lease is left to expire
            held.clear()

    def _one(self, draws: Any) -> None:
        op, cid, args, shown = self.request(draws)
        self.execute(op, cid, args, shown, draws)

    def execute(
        self,
        op: str,
        cid: str,
        args: dict[str, Any],
        shown: dict[str, Any],
        draws: Any,
        deadline: float = ANSWER_DEADLINE,
    ) -> Op | None:
        """Perform one operation through the worker and record it (None: closed, the run is over)."""
        request = {"op": op, "cid": cid, "args": args, "ttl": self.ttl, "holder": self.name}
        with self.lock:
            worker = self.worker
        if worker is None:  # closed: the run is over
            return None
        record = self.recorder.invoke(self.name, worker.proc.pid, self.key(op, cid), op, shown)
        killing = self.kill_armed.is_set()
        sent = worker.send(request)
        line: str | None = None
        if killing:
            self.kill_armed.clear()
            time.sleep(draws.kill_after)  # mid-operation, mostly
            worker.kill()
            try:
                line = worker.answers.get_nowait()  # an answer written before the kill still counts
            except queue.Empty:
                line = None
            outcome_end = self.recorder.now()
        elif sent:
            try:
                line = worker.answers.get(timeout=deadline)
            except queue.Empty:
                line = None
            outcome_end = self.recorder.now()
        else:
            outcome_end = self.recorder.now()
        answer: dict[str, Any] = (
            json.loads(line) if line else {"status": "unknown", "code": "killed" if killing else "lost"}
        )
        if line is None and not killing and sent:
            answer["code"] = "timeout"
        status, code = answer["status"], answer.get("code")
        if status == "refused" and code in INDETERMINATE_CODES:
            status = "unknown"
        record.status, record.code, record.result = cast("Status", status), code, dict(answer.get("result", {}))
        record.complete = None if status == "unknown" else outcome_end
        self.learn(record, cid, args, draws)
        if killing or line is None:  # killed, or hung or gone: a fresh worker
            with self.lock:
                if self.worker is worker:
                    self.worker = None
            worker.kill()
            if not self.stop.is_set():
                self.start_worker()
        return record

    def final(self, op: str, cid: str, args: dict[str, Any], shown: dict[str, Any]) -> Op | None:
        """One operation after the run (the nemesis stopped, the loop ended): the final settle, recorded
        like any other; a fresh worker first if the last one was lost."""
        self.kill_armed.clear()
        if self.worker is None or self.worker.proc.poll() is not None:
            self.stop.clear()
            self.start_worker()
        self.stop.set()
        draws = Draws("", cid, 0.0, 1.0, "", "", 0.0, False, 0.0)
        return self.execute(op, cid, args, shown, draws, FINAL_DEADLINE)

    def _loop(self) -> None:
        while not self.stop.is_set():
            draws = self.draw()
            try:
                self._one(draws)
            except RuntimeError:
                if self.stop.is_set():
                    return
                raise
            self.stop.wait(draws.think)
