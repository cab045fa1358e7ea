"""Fixtures of the MCP tests: a real ``corral mcp`` driven by the SDK's own client.

- ``stdio``: ``stdio(scenario)`` starts ``python -m runner.cli mcp`` of this checkout in the test's
  private state home, connects ``mcp.Client`` over stdio and awaits ``scenario(session)``; the
  server's stderr goes to a file (``session.stderr()``) and the server is gone when it returns.
- ``http`` / ``unix_http``: the same over streamable HTTP on loopback (``--listen 127.0.0.1:0``: the
  port is read from the ``serving http://HOST:PORT/mcp`` line the server writes on stderr) or on a
  unix socket; the server process is terminated and reaped when the scenario ends.

A :class:`Session` records every tool result and every progress message it receives, so a test can
scan all of them (the secrets test does). Each scenario runs under ``anyio.run``: the tests are plain
functions, with no async test plugin.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.support.runs import stop_process

REPO = Path(__file__).resolve().parents[2]
SHA = hashlib.sha256(b"authority").hexdigest()
CHECKPOINT_SHA = hashlib.sha256(b"checkpoint").hexdigest()
SERVER_READY_SECONDS = 60.0  # how long a server may take to say where it listens (a loaded machine)


def server_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment of a ``corral`` subprocess of this checkout in the state home ``home``."""
    env = dict(os.environ)
    env["CORRAL_HOME"] = str(home)
    env["PYTHONPATH"] = str(REPO)
    for name in ("CORRAL_STORE", "CORRAL_CONTROLLER", "XDG_STATE_HOME", "CORRAL_AGENT_HOST"):
        env.pop(name, None)
    env.update(extra)
    return env


def corral_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """The real ``corral`` of this checkout, as a subprocess."""
    return subprocess.run(
        [sys.executable, "-m", "runner.cli", *args],
        env=env, capture_output=True, text=True, timeout=60, check=False, cwd=str(Path(env["CORRAL_HOME"]).parent),
    )  # fmt: skip


class Refused(AssertionError):
    pass


@dataclass
class Session:
    """One client connection to a running server, recording everything the server sent back."""

    client: Any
    home: Path
    stderr_path: Path | None = None
    results: list[tuple[str, Any]] = field(default_factory=list)
    progress: list[str] = field(default_factory=list)
    called: set[str] = field(default_factory=set)

    async def call(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        *,
        progress: list[str] | None = None,
    ) -> Any:
        """The raw ``CallToolResult`` (recorded); progress messages are recorded too."""

        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            self.progress.append(message or "")
            if progress is not None:
                progress.append(message or "")

        result = await self.client.call_tool(name, arguments or {}, progress_callback=on_progress)
        self.called.add(name)
        self.results.append((name, result))
        return result

    async def ok(self, name: str, arguments: dict[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
        """The structured result of a call that must succeed."""
        result = await self.call(name, arguments, **kw)
        assert not result.is_error, f"{name} failed: {result.structured_content}"
        structured = result.structured_content
        assert isinstance(structured, dict)
        text = result.content[0].text
        assert json.loads(text.split("\n", 1)[1] if text.startswith("[corral:") else text) == structured
        return structured

    async def refused(self, name: str, arguments: dict[str, Any] | None, code: str) -> dict[str, Any]:
        """The error document of a call that must be refused with ``code`` (a tool error, never a protocol one)."""
        result = await self.call(name, arguments)
        assert result.is_error, f"{name} was not refused: {result.structured_content}"
        error = (result.structured_content or {}).get("error")
        assert isinstance(error, dict), result
        assert set(error) >= {"code", "message", "details"}
        assert error["code"] == code, error
        assert json.loads(result.content[0].text) == result.structured_content
        return error

    def stderr(self) -> str:
        return self.stderr_path.read_text(encoding="utf-8", errors="replace") if self.stderr_path else ""

    def texts(self) -> Iterator[str]:
        """Every text the server sent back: each result's text content and structured content, and
        every progress message."""
        for _, result in self.results:
            for block in result.content:
                yield str(getattr(block, "text", block))
            yield json.dumps(result.structured_content)
        yield from self.progress


Scenario = Callable[[Session], Awaitable[Any]]


def _leaf(error: BaseException) -> BaseException:
    """The one exception inside nested task-group exception groups (what the scenario raised)."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error


def run_async(main: Callable[[], Awaitable[Any]]) -> Any:
    """``anyio.run(main)``, re-raising a scenario's failure itself rather than the groups around it."""
    try:
        return anyio.run(main)
    except BaseExceptionGroup as group:
        leaf = _leaf(group)
        if leaf is group:
            raise
        raise leaf from None


def run_stdio(home: Path, scenario: Scenario, stderr_path: Path, env: dict[str, str] | None = None) -> Any:
    """``scenario`` against a real ``corral mcp`` over stdio (the server is reaped when it returns)."""
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command=sys.executable, args=["-m", "runner.cli", "mcp"], env=env or server_env(home), cwd=str(home.parent)
    )

    async def main() -> Any:
        with stderr_path.open("w", encoding="utf-8") as errlog:
            async with Client(stdio_client(params, errlog=errlog)) as client:
                return await scenario(Session(client, home, stderr_path))

    return run_async(main)


class HttpServer:
    """A ``corral mcp --http`` subprocess; its address read from what it writes on stderr."""

    def __init__(self, home: Path, listen: str, extra_args: tuple[str, ...] = (), stderr_path: Path | None = None):
        self.home = home
        self.stderr_path = stderr_path or home.parent / f"mcp-http-{time.monotonic_ns()}.stderr"
        self.stderr_path.parent.mkdir(parents=True, exist_ok=True)
        self._err = self.stderr_path.open("w", encoding="utf-8")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "runner.cli", "mcp", "--http", "--listen", listen, *extra_args],
            env=server_env(home), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._err,
            cwd=str(home.parent),
        )  # fmt: skip
        self.url = ""

    def wait_ready(self) -> str:
        """The ``serving ...`` address; fails with the server's stderr if it exits instead."""
        deadline = time.monotonic() + SERVER_READY_SECONDS
        while time.monotonic() < deadline:
            for line in self.stderr().splitlines():
                if line.startswith("corral mcp: serving "):
                    self.url = line.split("serving ", 1)[1].strip()
                    return self.url
            if self.proc.poll() is not None:
                raise AssertionError(f"corral mcp --http exited {self.proc.returncode}: {self.stderr()}")
            time.sleep(0.05)
        raise AssertionError(f"corral mcp --http never said where it serves: {self.stderr()}")

    def stderr(self) -> str:
        return self.stderr_path.read_text(encoding="utf-8", errors="replace")

    def stop(self) -> None:
        stop_process(self.proc)
        self._err.close()


@contextlib.contextmanager
def http_server(home: Path, listen: str = "127.0.0.1:0", *extra_args: str) -> Iterator[HttpServer]:
    server = HttpServer(home, listen, extra_args)
    try:
        yield server
    finally:
        server.stop()


@contextlib.asynccontextmanager
async def http_client(url: str, *, uds: str | None = None, token: str | None = None) -> AsyncIterator[Any]:
    """The SDK client over streamable HTTP (on a unix socket with ``uds``; with a bearer ``token``)."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": f"Bearer {token}"} if token else None
    transport = httpx2.AsyncHTTPTransport(uds=uds) if uds else None
    timeout = httpx2.Timeout(30.0, read=300.0)
    async with (
        httpx2.AsyncClient(transport=transport, headers=headers, timeout=timeout) as web,
        Client(streamable_http_client(url, http_client=web)) as client,
    ):
        yield client


def run_http(server: HttpServer, scenario: Scenario, *, token: str | None = None) -> Any:
    """``scenario`` against a running HTTP server (tcp, or its unix socket)."""
    where = server.wait_ready()
    uds = where[len("unix://") :] if where.startswith("unix://") else None
    url = "http://localhost/mcp" if uds else where

    async def main() -> Any:
        async with http_client(url, uds=uds, token=token) as client:
            return await scenario(Session(client, server.home, server.stderr_path))

    return run_async(main)


# --- fixtures ---------------------------------------------------------------------------------------------


@pytest.fixture
def mcp_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A scratch state home, reachable by the sandbox's uid (verify runs as another user under root)."""
    root = tmp_path / "home"
    monkeypatch.setenv("CORRAL_HOME", str(root))
    for name in ("CORRAL_STORE", "CORRAL_CONTROLLER", "CORRAL_MACHINES", "XDG_STATE_HOME"):
        monkeypatch.delenv(name, raising=False)
    return root


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A directory a reviewer reads."""
    root = tmp_path / "project"
    root.mkdir()
    (root / "lib.py").write_text("x = 1\ny = 2\n")
    return root


class StdioRunner:
    """``runner(scenario)``: ``scenario(session)`` against a fresh ``corral mcp`` over stdio; the session
    (what the server sent back, its stderr) stays readable as ``last_session``."""

    def __init__(self, home: Path, scratch: Path) -> None:
        self.home, self.scratch = home, scratch
        self.sessions: list[Session] = []

    def __call__(self, scenario: Scenario, env: dict[str, str] | None = None) -> Any:
        async def recorded(session: Session) -> Any:
            self.sessions.append(session)
            return await scenario(session)

        return run_stdio(self.home, recorded, self.scratch / f"mcp-stdio-{len(self.sessions)}.stderr", env)

    @property
    def last_session(self) -> Session:
        return self.sessions[-1]


@pytest.fixture
def stdio(mcp_home: Path, tmp_path: Path) -> StdioRunner:
    """``stdio(scenario)``: run ``scenario(session)`` against a real ``corral mcp`` over stdio."""
    return StdioRunner(mcp_home, tmp_path)


@pytest.fixture
def http(mcp_home: Path) -> Iterator[Callable[[Scenario], Any]]:
    """``http(scenario)``: the same over streamable HTTP on loopback (one server for the test)."""
    with http_server(mcp_home) as server:
        yield lambda scenario: run_http(server, scenario)


@pytest.fixture
def unix_http(mcp_home: Path, tmp_path: Path) -> Iterator[tuple[HttpServer, Callable[[Scenario], Any]]]:
    """A server on a unix socket (``tmp/mcp.sock``), and ``run(scenario)`` over it."""
    with http_server(mcp_home, f"unix://{tmp_path / 'mcp.sock'}") as server:
        yield server, lambda scenario: run_http(server, scenario)


@pytest.fixture(params=["stdio", "http"])
def transport(request: pytest.FixtureRequest) -> Callable[[Scenario], Any]:
    """Both transports: the test runs once over stdio and once over loopback HTTP."""
    fixture: Callable[[Scenario], Any] = request.getfixturevalue(request.param)
    return fixture


VALIDATE = """\
validations:
  - name: compiles
    argv:
      - python3
      - -c
      - "import ast, pathlib; [ast.parse(p.read_text()) for p in pathlib.Path('src').rglob('*.py')]; print('ok')"
"""


def make_lane(root: Path) -> Path:
    """``root/repo`` (branch main: ``src/calc.py`` and ``.corral/validate.yaml``) and its linked worktree
    ``root/lane`` on branch ``feat``; ``root`` opened to others' traversal (the sandbox's own uid reads
    the snapshot when corral runs as root). Needs the ``hermetic_git`` fixture."""
    from tests.support.gitrepo import git

    repo = root / "repo"
    (repo / "src").mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    (repo / "src" / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    (repo / ".corral").mkdir()
    (repo / ".corral" / "validate.yaml").write_text(VALIDATE)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    lane = root / "lane"
    git(repo, "worktree", "add", "-q", "-b", "feat", str(lane))
    os.chmod(root, 0o711)
    return lane


def writer_start_args(facts: dict[str, Any], lane: Path, name: str = "writer1") -> dict[str, Any]:
    """corral_writer_start's arguments for a lane owning ``src`` at what ``facts`` (a preflight) saw."""
    return {
        "controller": "ctl", "name": name, "kind": "script", "worktree": str(lane), "branch": "feat",
        "base_commit": facts["head"], "expect_head": facts["head"], "expect_status": facts["status_sha256"],
        "own": ["src"], "lock": [".corral"], "purpose": "mcp proof", "ticket": "T-14",
        "authority_ref": "ISSUE-14", "authority_sha256": SHA,
    }  # fmt: skip


def credential_of(home: Path, controller: str) -> dict[str, Any]:
    """The 0600 credential file the server keeps for ``controller`` (see runner/credentials.py)."""
    path = home / "credentials" / f"{controller}.json"
    assert path.stat().st_mode & 0o777 == 0o600
    data: dict[str, Any] = json.loads(path.read_text())
    return data


class InProcess:
    """One long-lived in-process server (``Client(build_server(runtime))``) on a runtime over ``home``,
    driven from synchronous code (Hypothesis) through a blocking portal."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> InProcess:
        from anyio.from_thread import start_blocking_portal
        from mcp import Client

        from runner.mcp.server import build_server
        from runner.runtime import Config, Runtime

        self.runtime = self._stack.enter_context(
            Runtime.open(Config.load(home=self.home, surface="mcp", environ={"CORRAL_HOME": str(self.home)}))
        )
        self.portal = self._stack.enter_context(start_blocking_portal())
        self.client = self._stack.enter_context(
            self.portal.wrap_async_context_manager(Client(build_server(self.runtime)))
        )
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def call(self, name: str, arguments: dict[str, Any] | None = None, limit: float = 60.0) -> Any:
        """The ``CallToolResult``; a call still running after ``limit`` seconds fails the test (and is
        cancelled, so the server stays usable and its teardown does not hang)."""

        async def bounded() -> Any:
            with anyio.fail_after(limit):
                return await self.client.call_tool(name, arguments or {})

        return self.portal.call(bounded)

    def ok(self, name: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        result = self.call(name, arguments)
        assert not result.is_error, f"{name} failed: {result.structured_content}"
        assert isinstance(result.structured_content, dict)
        return result.structured_content

    def list_tools(self) -> Any:
        return self.portal.call(self.client.list_tools)
