"""Fixtures of the HTTP API tests: real ``corral serve`` processes driven with httpx and httpx-sse.

- ``serve(*options, home=None, uds=False)`` starts ``python -m runner.cli serve`` of this checkout in
  the test's state home (or ``home``), on loopback (``--listen 127.0.0.1:0``: the port is read from
  the ``serving http://HOST:PORT`` line on stderr) or on a unix socket, and returns a :class:`Served`
  (its ``client()`` is an httpx client over the right transport). Every server is terminated (or
  killed) and reaped when the test ends; ``kill()`` is ``kill -9`` for the crash tests.
- ``corral(*args)``: the real CLI in the same home (``--json`` documents parsed by the caller).
- ``racer(controller, rounds)``: another process that acquires ``controller`` on the same store and
  renews it ``rounds`` times as fast as it can (the transitions a snapshot-then-tail test races).

Everything a server sent back can be recorded (``Recorder``) so the secrets test can scan it all.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.runs import stop_process

REPO = Path(__file__).resolve().parents[2]
SHA = hashlib.sha256(b"authority").hexdigest()
CHECKPOINT_SHA = hashlib.sha256(b"checkpoint").hexdigest()
READY_SECONDS = 60.0  # how long a server may take to say where it listens (a loaded machine)
SERVING = re.compile(r"corral serve: serving (\S+)")


def server_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment of a ``corral`` subprocess of this checkout in the state home ``home``."""
    env = dict(os.environ)
    env["CORRAL_HOME"] = str(home)
    env["PYTHONPATH"] = str(REPO)
    for name in ("CORRAL_STORE", "CORRAL_CONTROLLER", "XDG_STATE_HOME", "CORRAL_AGENT_HOST", "CORRAL_EVENTS_KEEP"):
        env.pop(name, None)
    env.update(extra)
    return env


class Recorder:
    """Every response body (and SSE line) a test received, for the scan for secrets."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def hook(self, response: httpx.Response) -> None:
        if "text/event-stream" not in response.headers.get("content-type", ""):
            response.read()
            self.texts.append(response.text)
        self.texts.append(json.dumps(dict(response.headers)))


@dataclass
class Served:
    """One running ``corral serve``."""

    proc: subprocess.Popen[bytes]
    home: Path
    stderr_path: Path
    where: str
    """``http://HOST:PORT`` or ``unix:///path``."""
    token: str | None = None
    recorder: Recorder = field(default_factory=Recorder)

    @property
    def base_url(self) -> str:
        return self.where if self.where.startswith("http") else "http://corral"

    @property
    def uds(self) -> str | None:
        return self.where[len("unix://") :] if self.where.startswith("unix://") else None

    def client(self, *, token: str | None = None, timeout: float = 60.0, **kw: Any) -> httpx.Client:
        """An httpx client of this server (over its unix socket if it has one), recording every body."""
        headers = dict(kw.pop("headers", {}))
        bearer = token if token is not None else self.token
        if bearer:
            headers["Authorization"] = f"Bearer {bearer}"
        transport = httpx.HTTPTransport(uds=self.uds) if self.uds else None
        return httpx.Client(
            base_url=self.base_url,
            transport=transport,
            timeout=timeout,
            headers=headers,
            event_hooks={"response": [self.recorder.hook]},
            **kw,
        )

    def stderr(self) -> str:
        return self.stderr_path.read_text(encoding="utf-8", errors="replace")

    def kill(self) -> None:
        """``kill -9``: no shutdown, no flush; the store must hold everything acknowledged."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        stop_process(self.proc)


def start_server(home: Path, log_dir: Path, *options: str, uds: bool = False, token: str | None = None) -> Served:
    """Start ``corral serve`` and wait for the line that says where it listens."""
    log_dir.mkdir(parents=True, exist_ok=True)
    n = len(list(log_dir.glob("serve-*.err")))
    stderr_path = log_dir / f"serve-{n}.err"
    listen = f"unix://{log_dir / f'serve-{n}.sock'}" if uds else "127.0.0.1:0"
    with stderr_path.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "runner.cli", "serve", "--listen", listen, *options],
            env=server_env(home), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, cwd=home,
        )  # fmt: skip
    deadline = time.monotonic() + READY_SECONDS
    while True:
        found = SERVING.search(stderr_path.read_text(encoding="utf-8", errors="replace"))
        if found:
            return Served(proc, home, stderr_path, found.group(1), token)
        if proc.poll() is not None:
            raise AssertionError(f"corral serve exited {proc.returncode}: {stderr_path.read_text()}")
        if time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            raise AssertionError(f"corral serve said nothing in {READY_SECONDS} s: {stderr_path.read_text()}")
        time.sleep(0.05)


@pytest.fixture
def state_home(tmp_path: Path) -> Path:
    root = tmp_path / "home"
    root.mkdir(mode=0o700)
    return root


@pytest.fixture
def serve(state_home: Path, tmp_path: Path) -> Iterator[Any]:
    started: list[Served] = []

    def start(*options: str, home: Path | None = None, uds: bool = False, token: str | None = None) -> Served:
        served = start_server(home or state_home, tmp_path / "logs", *options, uds=uds, token=token)
        started.append(served)
        return served

    try:
        yield start
    finally:
        for served in started:
            served.stop()


@pytest.fixture
def corral(state_home: Path) -> Any:
    def run(*args: str, home: Path | None = None) -> subprocess.CompletedProcess[str]:
        env = server_env(home or state_home)
        return subprocess.run(
            [sys.executable, "-m", "runner.cli", *args],
            env=env, capture_output=True, text=True, timeout=120, check=False, cwd=env["CORRAL_HOME"],
        )  # fmt: skip

    return run


RACER = """
import sys
from runner.runtime import Config, Runtime
from runner.service import AcquireInput
from runner.service.inputs.controller import RenewInput

import threading

home, controller = sys.argv[1], sys.argv[2]
with Runtime.open(Config.load(home=home, actor="racer")) as runtime:
    service = runtime.service
    grant = service.controller.acquire(AcquireInput(controller, "T-RACE", "SHA", 600, "racer@host"))
    print("acquired", flush=True)
    stop = threading.Event()
    spinning = None

    def spin():
        while not stop.is_set():
            service.controller.renew(RenewInput(controller, grant.credential))

    for line in sys.stdin:
        if line.strip() == "run":  # until "stop"
            stop.clear()
            spinning = threading.Thread(target=spin)
            spinning.start()
            continue
        if line.strip() == "stop":
            stop.set()
            spinning.join()
        else:
            for _ in range(int(line)):
                service.controller.renew(RenewInput(controller, grant.credential))
        print("done", flush=True)
    stop.set()  # stdin closed (the test is over, or failed): a run still spinning ends too
    if spinning is not None:
        spinning.join()
""".replace("SHA", SHA)


class Racer:
    """Another process on the store (see :func:`racing`)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc

    def renew(self, rounds: int) -> None:
        """Start ``rounds`` renewals (they run while the test goes on)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{rounds}\n")
        self.proc.stdin.flush()

    def run(self) -> None:
        """Renew without pause until :meth:`stop` (racing whatever the test does meanwhile, however slowly)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write("run\n")
        self.proc.stdin.flush()

    def stop(self) -> None:
        """End :meth:`run` and wait until its renewals are all committed."""
        assert self.proc.stdin is not None
        self.proc.stdin.write("stop\n")
        self.proc.stdin.flush()
        self.done()

    def done(self) -> None:
        """Wait until the renewals started last are all committed."""
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line.strip() == "done", (line, self.proc.stderr.read() if self.proc.stderr else "")


@contextlib.contextmanager
def racing(home: Path, controller: str) -> Iterator[Racer]:
    """Another process on the store: it acquires ``controller`` at once, then renews it as many times
    as each :meth:`Racer.renew` asks, as fast as it can."""
    proc = subprocess.Popen(
        [sys.executable, "-c", RACER, str(home), controller],
        env=server_env(home), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() == "acquired", (line, proc.stderr.read() if proc.stderr else "")
        yield Racer(proc)
    finally:
        if proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


SUBMIT = """
import json, sys
from runner.runtime import Config, Runtime
from runner.service.inputs.plans import PlanSubmitInput

with Runtime.open(Config.load(home=sys.argv[1], actor="submitter")) as runtime:
    runtime.home.ensure("credentials")
    runtime.home.ensure("snapshots")
    submitted = runtime.service.plans.submit(PlanSubmitInput(json.loads(sys.argv[2])))
    print(json.dumps({"plan": submitted.plan.id, "state": submitted.plan.state, "created": submitted.created}))
"""


def submit_plan(home: Path, plan_id: str) -> Any:
    """A plan recorded (submitted, not run) by another process: a ``validate`` plan nobody runs."""
    document = {
        "plan": plan_id,
        "recipe": "validate",
        "controller": "planner",
        "inputs": {"lane": "writer", "authority_ref": "T-PLAN", "authority_sha256": SHA},
    }
    done = subprocess.run(
        [sys.executable, "-c", SUBMIT, str(home), json.dumps(document)],
        env=server_env(home), capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def acquire(client: httpx.Client, controller: str = "ctl", ttl: int = 600) -> dict[str, Any]:
    """A granted lease through the API: the response (with its one ``credential``)."""
    response = client.post(
        f"/api/controllers/{controller}/acquire",
        json={"authority_ref": "TICKET-1", "authority_sha256": SHA, "ttl_seconds": ttl},
    )
    assert response.status_code == 200, response.text
    doc = response.json()
    assert isinstance(doc["credential"], str) and doc["credential"].startswith("v1.")
    return dict(doc)


def renew(client: httpx.Client, controller: str, credential: str) -> httpx.Response:
    return client.post(f"/api/controllers/{controller}/renew", json={}, headers={"Corral-Credential": credential})


def sse_events(client: httpx.Client, path: str, count: int, **kw: Any) -> list[Any]:
    """The first ``count`` events of the stream at ``path`` (then the connection is dropped)."""
    from httpx_sse import connect_sse

    got: list[Any] = []
    with connect_sse(client, "GET", path, **kw) as source:
        assert source.response.status_code == 200, source.response.read()
        for event in source.iter_sse():
            got.append(event)
            if len(got) >= count:
                break
    return got


def seq_of(event: Any) -> int:
    return int(event.id.rpartition(":")[2])
