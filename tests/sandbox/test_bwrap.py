"""The Bubblewrap sandbox, for real: what a validation command can and cannot reach.

Every probe runs ``python3 -c …`` through :meth:`Sandbox.run` (the argv corral really uses) and
reports what happened as one JSON line, read back from the output tail; the host side sets up the
thing to reach (a listening TCP socket on loopback, unix sockets in the host's ``/tmp`` and ``/run``,
an abstract unix socket, files in ``/tmp``) and checks it from outside too.

Without ``bwrap`` these tests are skipped, except under ``CI`` (the variable set), where a missing
sandbox is a failure: the sandbox is what makes ``writer verify`` safe to run at all.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import socket
import stat
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from runner.sandbox.bwrap import Command, CommandResult, Limits, Sandbox, SandboxUnavailableError

HOST_TMP = Path("/tmp")


def _require_bwrap() -> None:
    if shutil.which("bwrap") is None:
        if os.environ.get("CI"):
            pytest.fail("bwrap is not installed; under CI the sandbox tests must run: apt-get install bubblewrap")
        pytest.skip("bwrap is not installed (apt-get install bubblewrap); under CI this is a failure, not a skip")


@dataclass
class Box:
    sandbox: Sandbox
    snapshot: Path
    home: Path

    def run(self, argv: tuple[str, ...], timeout: float = 30.0, env: dict[str, str] | None = None) -> CommandResult:
        return self.sandbox.run(self.snapshot, self.home, Command("probe", argv, timeout, env or {}), tail=True)

    def probe(self, code: str, env: dict[str, str] | None = None) -> dict[str, Any]:
        """Run ``code`` with python3 in the sandbox; it prints one JSON object as its last line."""
        result = self.run(("python3", "-c", code), env=env)
        assert result.tail is not None
        assert result.exit_status == 0 and not result.timed_out, f"the probe itself failed:\n{result.tail}"
        found: dict[str, Any] = json.loads(result.tail.strip().splitlines()[-1])
        return found


@pytest.fixture
def box(tmp_path: Path) -> Iterator[Box]:
    _require_bwrap()
    sandbox = Sandbox()
    sandbox.check()  # bwrap is installed: if the kernel refuses it, that is a failure here, not a skip
    # As root the sandbox runs as its own uid, which must reach the snapshot: pytest's tmp_path is 0700.
    run = Path(tempfile.mkdtemp(prefix="corral-test-")) if sandbox.uid is not None else tmp_path
    snapshot, home = run / "snapshot", run / "home"  # home: only a path, a tmpfs inside the sandbox
    snapshot.mkdir()
    (snapshot / "app.py").write_text("print('app')\n")
    sandbox.own(run)
    yield Box(sandbox, snapshot, home)
    shutil.rmtree(run, ignore_errors=True)


# A probe helper, prepended to the probes that try to reach something: the errno, or None if it worked.
ATTEMPT = """
import errno, json, os, socket, sys
def attempt(fn):
    try:
        fn()
    except OSError as exc:
        return exc.errno or -1
    return None
"""


def _connect(family: int, address: Any, timeout: float = 3.0) -> None:
    with socket.socket(family, socket.SOCK_STREAM) as client:
        client.settimeout(timeout)
        client.connect(address)


# --- network ---------------------------------------------------------------------------------------


def test_loopback_tcp_listener_on_the_host_is_unreachable(box: Box) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        port = server.getsockname()[1]
        _connect(socket.AF_INET, ("127.0.0.1", port))  # control: the listener is real and reachable here
        server.setblocking(False)
        server.accept()[0].close()
        found = box.probe(
            ATTEMPT
            + f"""
def go():
    with socket.create_connection(("127.0.0.1", {port}), timeout=3):
        pass
print(json.dumps({{"errno": attempt(go)}}))
"""
        )
        assert found["errno"] is not None, "the sandbox connected to a host loopback listener"
        with pytest.raises(BlockingIOError):
            server.accept()  # nothing from inside ever reached the listener


def test_outside_addresses_are_unreachable_and_only_loopback_exists(box: Box) -> None:
    found = box.probe(
        ATTEMPT
        + """
import time
def go(address, family=socket.AF_INET):
    def connect():
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.settimeout(3)
            s.connect(address)
    return attempt(connect)
started = time.monotonic()
results = {
    "v4": go(("1.1.1.1", 53)),
    "v4_http": go(("93.184.215.14", 80)),
    "v6": go(("2606:4700:4700::1111", 53, 0, 0), socket.AF_INET6),
}
elapsed = time.monotonic() - started
interfaces = sorted(line.split(":")[0].strip() for line in open("/proc/net/dev").read().splitlines()[2:])
routes = open("/proc/net/route").read().splitlines()[1:]
print(json.dumps({"results": results, "elapsed": elapsed, "interfaces": interfaces, "routes": routes}))
"""
    )
    # No route at all: refused on the spot (ENETUNREACH; EAFNOSUPPORT/EADDRNOTAVAIL for v6 without it).
    unreachable = {errno.ENETUNREACH, errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT, errno.EHOSTUNREACH}
    assert found["results"]["v4"] == errno.ENETUNREACH, found
    assert found["results"]["v4_http"] == errno.ENETUNREACH, found
    assert found["results"]["v6"] in unreachable, found
    assert found["elapsed"] < 2.5, f"connections hung instead of failing at once: {found}"
    assert found["interfaces"] == ["lo"], found
    assert found["routes"] == [], found


# --- unix sockets ----------------------------------------------------------------------------------


class _UnixServer:
    """A real AF_UNIX listener that records every connection it accepts."""

    def __init__(self, address: str | bytes) -> None:
        self.address = address
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(address)
        self.sock.listen(16)
        self.sock.settimeout(0.05)
        self.accepted = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()
        if isinstance(self.address, str):
            Path(self.address).unlink(missing_ok=True)


@pytest.fixture
def unix_servers() -> Iterator[dict[str, _UnixServer]]:
    tag = uuid.uuid4().hex[:12]
    servers: dict[str, _UnixServer] = {}
    try:
        servers["tmp"] = _UnixServer(str(HOST_TMP / f"corral-test-{tag}.sock"))
        if os.access("/run", os.W_OK):
            servers["run"] = _UnixServer(f"/run/corral-test-{tag}.sock")
        servers["abstract"] = _UnixServer(f"\0corral-test-{tag}".encode())
        yield servers
    finally:
        for server in servers.values():
            server.close()


def test_unix_sockets_of_the_host_are_unreachable(box: Box, unix_servers: dict[str, _UnixServer]) -> None:
    for server in unix_servers.values():  # control: each listener is real and reachable from the host
        _connect(socket.AF_UNIX, server.address)
    deadline = time.monotonic() + 5
    while sum(s.accepted for s in unix_servers.values()) < len(unix_servers) and time.monotonic() < deadline:
        time.sleep(0.01)
    before = {name: server.accepted for name, server in unix_servers.items()}
    assert all(before.values()), before
    addresses = {name: repr(server.address) for name, server in unix_servers.items()}
    found = box.probe(
        ATTEMPT
        + f"""
addresses = {{{", ".join(f"{name!r}: {address}" for name, address in addresses.items())}}}
def go(address):
    def connect():
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(3)
            s.connect(address)
    return attempt(connect)
print(json.dumps({{name: go(address) for name, address in addresses.items()}}))
"""
    )
    for name in unix_servers:
        assert found[name] is not None, f"the sandbox reached the host's {name} unix socket: {found}"
    time.sleep(0.1)
    assert {name: server.accepted for name, server in unix_servers.items()} == before


# --- the filesystem --------------------------------------------------------------------------------

WRITE_PROBE = (
    ATTEMPT
    + """
import pathlib
def write(path):
    def go():
        with open(path, "w") as f:
            f.write("written from the sandbox\\n")
    return attempt(go)
targets = json.loads(sys.argv[1])
print(json.dumps({name: write(path) for name, path in targets.items()}))
"""
)


def _write_from_inside(box: Box, targets: dict[str, str]) -> dict[str, Any]:
    result = box.run(("python3", "-c", WRITE_PROBE, json.dumps(targets)))
    assert result.tail is not None and result.exit_status == 0, result.tail
    found: dict[str, Any] = json.loads(result.tail.strip().splitlines()[-1])
    return found


def test_only_the_home_is_writable(box: Box) -> None:
    tag = uuid.uuid4().hex[:12]
    original = (box.snapshot / "app.py").read_bytes()
    targets = {
        "snapshot_new": str(box.snapshot / f"new-{tag}"),
        "snapshot_existing": str(box.snapshot / "app.py"),
        "snapshot_relative": f"rel-{tag}",  # the cwd is the snapshot
        "usr": f"/usr/corral-{tag}",
        "etc": f"/etc/corral-{tag}",
        "home": str(box.home / f"ok-{tag}"),
    }
    found = _write_from_inside(box, targets)
    for name in ("snapshot_new", "snapshot_existing", "snapshot_relative", "usr", "etc"):
        assert found[name] in (errno.EROFS, errno.EACCES, errno.EPERM), f"wrote to {name}: {found}"
    assert found["home"] is None, found
    assert not (box.home / f"ok-{tag}").exists(), "the home is a tmpfs of the sandbox, not the host's directory"
    assert (box.snapshot / "app.py").read_bytes() == original
    assert sorted(p.name for p in box.snapshot.iterdir()) == ["app.py"]
    assert not Path(f"/usr/corral-{tag}").exists() and not Path(f"/etc/corral-{tag}").exists()


def test_writing_to_the_root_fails(box: Box) -> None:
    tag = uuid.uuid4().hex[:12]
    found = _write_from_inside(box, {"root": f"/corral-{tag}"})
    assert found["root"] in (errno.EROFS, errno.EACCES, errno.EPERM), found


def test_what_is_written_outside_the_home_never_reaches_the_host(box: Box) -> None:
    tag = uuid.uuid4().hex[:12]
    targets = {"root": f"/corral-{tag}", "tmp": f"/tmp/corral-{tag}", "run": f"/run/corral-{tag}"}
    _write_from_inside(box, targets)  # whether they succeed inside or not
    for path in targets.values():
        assert not os.path.lexists(path), f"{path} appeared on the host"


def test_tmp_and_run_are_private(box: Box) -> None:
    tag = uuid.uuid4().hex[:12]
    planted = HOST_TMP / f"corral-host-{tag}"
    planted.write_text("host secret\n")
    planted_run = Path(f"/run/corral-host-{tag}")
    try:
        if os.access("/run", os.W_OK):
            planted_run.write_text("host secret\n")
        assert planted.exists()
        found = box.probe(
            f"""
import json, os
written = "/tmp/corral-sandbox-{tag}"
with open(written, "w") as f:
    f.write("from the sandbox\\n")
print(json.dumps({{
    "sees_tmp_file": os.path.exists({str(planted)!r}),
    "sees_run_file": os.path.exists({str(planted_run)!r}),
    "tmp_listing": sorted(os.listdir("/tmp")),
    "wrote": open(written).read(),
}}))
"""
        )
    finally:
        planted.unlink()
        planted_run.unlink(missing_ok=True)
    assert found["sees_tmp_file"] is False and found["sees_run_file"] is False, found
    assert found["wrote"] == "from the sandbox\n", "the private /tmp is writable inside"
    assert not (HOST_TMP / f"corral-sandbox-{tag}").exists(), "a file written in the sandbox's /tmp reached the host"
    # Only the path down to this test's home and snapshot (bind mounts) shows; nothing else of the host's /tmp.
    visible = set(found["tmp_listing"]) - {f"corral-sandbox-{tag}"}
    allowed = {p.relative_to(HOST_TMP).parts[0] for p in (box.home, box.snapshot) if p.is_relative_to(HOST_TMP)}
    assert visible <= allowed, f"the sandbox's /tmp shows more of the host's: {visible - allowed}"


def test_nothing_of_the_host_is_visible_but_the_system_directories(box: Box) -> None:
    """The root holds the read-only system directories, /proc, /dev, private /tmp and /run: nothing else.

    In particular not the caller's files: this test file, corral's state home, the store, credentials.
    """
    here = str(Path(__file__).resolve())
    found = box.probe(
        f"""
import json, os
print(json.dumps({{"root": sorted(os.listdir("/")), "sees_test_file": os.path.exists({here!r})}}))
"""
    )
    system = {"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "proc", "dev", "tmp", "run"}
    assert set(found["root"]) <= system, f"host directories visible: {set(found['root']) - system}"
    if not here.startswith(("/usr/", "/etc/")):
        assert found["sees_test_file"] is False, "the sandbox sees the caller's files"


# --- privileges ------------------------------------------------------------------------------------


def test_cannot_remount_the_root(box: Box) -> None:
    result = box.run(("mount", "-o", "remount,rw", "/"))
    assert result.exit_status not in (None, 0), f"remounted /: {result.tail}"
    mount = box.run(("mount", "-t", "tmpfs", "none", str(box.home)))
    assert mount.exit_status not in (None, 0), f"mounted a tmpfs: {mount.tail}"


def test_no_capabilities_and_no_new_privileges(box: Box) -> None:
    found = box.probe(
        """
import json
status = dict(line.split(":\\t", 1) for line in open("/proc/self/status").read().splitlines() if ":\\t" in line)
print(json.dumps({k: status[k].strip() for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs")}))
"""
    )
    for key in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(found[key], 16) == 0, found
    assert found["NoNewPrivs"] == "1", found


# --- outcomes --------------------------------------------------------------------------------------


def test_a_failing_command_is_reported_failed_with_its_exit_status(box: Box) -> None:
    script = (
        "import sys; print('checked', 1 + 2, 'files', flush=True); print('bad:', 'app.py', file=sys.stderr); "
        "sys.exit(7)"
    )
    result = box.run(("python3", "-c", script))
    assert (result.exit_status, result.timed_out, result.passed) == (7, False, False)
    output = b"checked 3 files\nbad: app.py\n"
    assert result.output_bytes == len(output)
    assert result.output_sha256 == hashlib.sha256(output).hexdigest()
    assert result.tail == output.decode()
    record = result.to_record()
    assert record["exit_status"] == 7 and record["passed"] is False and "tail" not in record
    assert "checked 3 files" not in json.dumps(record) and "bad: app" not in json.dumps(record), "output recorded"
    quiet = box.sandbox.run(box.snapshot, box.home, Command("quiet", ("python3", "-c", script)))
    assert quiet.tail is None and quiet.output_sha256 == result.output_sha256
    assert box.run(("python3", "-c", "pass")).passed


def _processes_with(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline:
            found.append(int(entry.name))
    return found


def test_a_command_past_its_timeout_is_killed_and_reported(box: Box) -> None:
    marker = f"corral-spin-{uuid.uuid4().hex[:12]}"
    spin = (
        "import os, subprocess, sys, time\n"
        "subprocess.Popen(['sleep', '300'])  # a grandchild that must die too\n"
        "while True:\n"
        "    print('.', end='', flush=True)\n"
        "    time.sleep(0.02)\n"
    )
    started = time.monotonic()
    result = box.sandbox.run(box.snapshot, box.home, Command("spin", ("python3", "-c", spin, marker), timeout=1.0))
    elapsed = time.monotonic() - started
    assert (result.timed_out, result.exit_status, result.passed) == (True, None, False)
    assert 1.0 <= result.duration_seconds < 10 and elapsed < 10
    assert result.output_bytes > 0, "the command ran before it was killed"
    deadline = time.monotonic() + 5
    while _processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _processes_with(marker) == [], "a process of the timed-out command survived"


def test_the_environment_is_cleared(box: Box, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CORRAL_HOST_SECRET", "from-the-host")
    found = box.probe("import json, os; print(json.dumps(dict(os.environ)))", env={"EXTRA_FLAG": "on"})
    assert "CORRAL_HOST_SECRET" not in found, found
    assert found["EXTRA_FLAG"] == "on"
    assert found["HOME"] == str(box.home)
    assert found["PATH"] == "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    assert found.get("PWD", str(box.snapshot)) == str(box.snapshot)  # bwrap sets PWD after --chdir
    allowed = {"PATH", "HOME", "LANG", "TMPDIR", "XDG_CACHE_HOME", "PYTHONDONTWRITEBYTECODE", "EXTRA_FLAG", "PWD"}
    assert set(found) <= allowed, f"unexpected variables: {set(found) - allowed}"


# --- no sandbox, nothing runs ---------------------------------------------------------------------


def test_missing_bwrap_is_sandbox_unavailable_and_nothing_runs(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    sandbox = Sandbox(bwrap="/nonexistent/bwrap")
    with pytest.raises(SandboxUnavailableError) as caught:
        sandbox.check()
    assert caught.value.code == "sandbox_unavailable"
    with pytest.raises(SandboxUnavailableError):
        sandbox.run(tmp_path, tmp_path, Command("touch", ("touch", str(marker))))
    with pytest.raises(SandboxUnavailableError):
        sandbox.run_all(tmp_path, tmp_path, [Command("touch", ("touch", str(marker)))])
    assert not marker.exists()


def test_a_bwrap_the_kernel_refuses_is_sandbox_unavailable_and_nothing_runs(tmp_path: Path) -> None:
    """A bwrap that exists but cannot create its namespaces: the probe fails, the command never runs."""
    log = tmp_path / "calls"
    fake = tmp_path / "bwrap"
    fake.write_text(
        f"#!{sys.executable}\nimport sys\n"
        f"open({str(log)!r}, 'a').write(' '.join(sys.argv[1:]) + '\\n')\n"
        "sys.stderr.write('bwrap: No permissions to create new namespace\\n')\nsys.exit(1)\n"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    marker = tmp_path / "ran"
    sandbox = Sandbox(bwrap=str(fake), uid=os.geteuid())  # run as us: the fake lives in a 0700 tmp_path
    with pytest.raises(SandboxUnavailableError) as caught:
        sandbox.run(tmp_path, tmp_path, Command("touch", ("touch", str(marker))))
    assert caught.value.code == "sandbox_unavailable"
    assert "namespace" in caught.value.message
    calls = log.read_text().splitlines()
    assert len(calls) == 1 and calls[0].endswith(" true"), calls  # only the probe was ever started
    assert not marker.exists()


# --- bounds and the unprivileged uid ---------------------------------------------------------------


def _bounded(box: Box, code: str, **limits: int) -> CommandResult:
    command = Command("bounded", ("python3", "-c", code), 60.0, {}, Limits(**limits))
    return box.sandbox.run(box.snapshot, box.home, command, tail=True)


def test_as_root_the_command_is_not_root_and_cannot_read_shadow(box: Box) -> None:
    if os.geteuid() != 0:
        pytest.skip("corral is not root here: the sandbox runs as the caller")
    found = box.probe(
        "import json, os\n"
        "try:\n    open('/etc/shadow').read(); shadow = 'read'\n"
        "except OSError as exc:\n    shadow = exc.errno\n"
        "print(json.dumps({'uid': os.getuid(), 'gid': os.getgid(), 'shadow': shadow}))\n"
    )
    assert found["uid"] != 0 and found["gid"] != 0, found
    assert found["shadow"] == errno.EACCES, found
    cat = box.run(("cat", "/etc/shadow"))
    assert cat.exit_status not in (None, 0) and "root:" not in (cat.tail or "")


def test_a_fork_loop_stops_at_the_process_limit(box: Box) -> None:
    if os.geteuid() != 0:
        pytest.skip("RLIMIT_NPROC is set only under a fresh uid (corral as root)")
    code = (
        "import os, sys, time\n"
        "made = 0\n"
        "for _ in range(50):\n"
        "    try:\n        pid = os.fork()\n"
        "    except OSError as exc:\n        print('fork failed after', made, exc.errno, flush=True); sys.exit(9)\n"
        "    if pid == 0:\n        time.sleep(5); os._exit(0)\n"
        "    made += 1\n"
        "print('forked', made)\n"
    )
    result = _bounded(box, code, processes=20)
    assert result.exit_status == 9 and not result.passed, result.tail
    assert "fork failed after" in (result.tail or "")
    assert int((result.tail or "").split("after")[1].split()[0]) < 20
    assert result.to_record()["limits"]["processes"] == 20


def test_tmp_is_capped(box: Box) -> None:
    code = (
        "import sys\n"
        "try:\n    open('/tmp/big', 'wb').write(b'x' * (20 << 20))\n"
        "except OSError as exc:\n    print('tmp full', exc.errno); sys.exit(4)\n"
    )
    result = _bounded(box, code, tmp_mb=8)
    assert result.exit_status == 4 and f"tmp full {errno.ENOSPC}" in (result.tail or ""), result.tail


def test_home_is_capped_and_never_reaches_the_host(box: Box) -> None:
    code = (
        "import os, sys\n"
        "try:\n    open(os.path.join(os.environ['HOME'], 'big'), 'wb').write(b'x' * (20 << 20))\n"
        "except OSError as exc:\n    print('home full', exc.errno); sys.exit(4)\n"
    )
    result = _bounded(box, code, home_mb=8)
    assert result.exit_status == 4 and f"home full {errno.ENOSPC}" in (result.tail or ""), result.tail
    assert not (box.home / "big").exists()


def test_a_file_past_the_file_size_limit_kills_the_writer_with_a_reason(box: Box) -> None:
    # dd, not python3: Python ignores SIGXFSZ (it gets EFBIG instead, and fails with its own error).
    argv = ("dd", "if=/dev/zero", "of=/tmp/f", "bs=1M", "count=3")
    command = Command("bounded", argv, 60.0, {}, Limits(file_size_mb=1))
    result = box.sandbox.run(box.snapshot, box.home, command, tail=True)
    assert not result.passed
    assert result.reason is not None and "SIGXFSZ" in result.reason, (result.exit_status, result.tail)


def test_memory_is_bounded_per_process(box: Box) -> None:
    code = (
        "import sys\n"
        "try:\n    block = bytearray(200 << 20)\n"
        "except MemoryError:\n    print('no memory'); sys.exit(5)\n"
        "print('allocated')\n"
    )
    result = _bounded(box, code, memory_mb=64)
    assert result.exit_status == 5 and "no memory" in (result.tail or ""), result.tail


def test_output_is_kept_up_to_its_bound_and_marked_truncated(box: Box) -> None:
    code = "import sys\nsys.stdout.write('h' * 1000 + 'x' * ((1 << 20) - 2000) + 't' * 1000)\n"
    result = _bounded(box, code, output_kb=64)
    assert result.output_bytes == 1 << 20 and result.truncated is True and result.passed
    expected = ("h" * 1000 + "x" * ((1 << 20) - 2000) + "t" * 1000).encode()
    assert result.output_sha256 == hashlib.sha256(expected).hexdigest(), "the whole output is digested"
    assert result.tail is not None and len(result.tail) < 66 * 1024
    assert result.tail.startswith("h" * 1000) and result.tail.endswith("t" * 1000) and "omitted" in result.tail
    record = result.to_record()
    assert record["truncated"] is True and record["limits"]["output_kb"] == 64
    small = _bounded(box, "print('short')", output_kb=64)
    assert small.truncated is False and small.tail == "short\n"


def test_limits_beyond_their_maxima_are_refused() -> None:
    with pytest.raises(ValueError, match="processes"):
        Limits(processes=100_000)
