"""Run a fixed argv under Bubblewrap: no network, no capabilities, nothing writable but a private home.

The sandbox for host validation (``corral writer verify``)::

    bwrap --unshare-all --cap-drop ALL --die-with-parent --new-session --clearenv
          --ro-bind /usr /usr (and /bin /sbin /lib* /etc when present: read-only system)
          --proc /proc --dev /dev --tmpfs /tmp --tmpfs /run   (private: host sockets are unreachable)
          --bind HOME HOME                                     (a private writable home per run)
          --ro-bind SNAPSHOT SNAPSHOT --chdir SNAPSHOT         (the worktree's snapshot, read-only)
          --remount-ro /                                       (bwrap's root tmpfs, read-only too)
          --setenv PATH … --setenv HOME HOME … -- ARGV…

Bounds (:class:`Limits`, defaults and maxima in ``LIMITS``; ``validate.yaml`` may set them per
validation within the maxima): ``/tmp`` and the home are tmpfs mounts of a fixed size (``--size``),
so nothing a validation writes reaches the host's disk or grows its RAM past them; RLIMIT_DATA
(memory), RLIMIT_FSIZE (one file's size) and RLIMIT_NPROC (processes and threads) are set by
util-linux ``prlimit`` exec'ing bwrap (fixed argv, no shell); the combined output is read from a
pipe as it comes, digested whole but kept only up to ``output_kb`` (head and tail, ``truncated``).

Run as root (as here and in CI), corral starts bwrap itself under a fresh unprivileged uid and gid
(``SANDBOX_UID_BASE`` + a random offset, no supplementary groups), so bwrap creates a real user
namespace and the command is uid ``N``, never root: ``/etc/shadow`` and root's 0700 files are
unreadable, and RLIMIT_NPROC counts only this run's processes (a uid nobody else has). As another
user bwrap runs as that user; RLIMIT_NPROC is then not set (it would count all of that user's
processes on the host, not the sandbox's) and the process bound is the user's own limit.

``--unshare-all`` includes the network namespace; as root, Bubblewrap keeps capabilities unless told
``--cap-drop ALL``, and ``--unshare-net`` alone would still let a process reach host unix sockets in
``/tmp`` or ``/run``, hence the private mounts. Without Bubblewrap, or on a kernel that refuses the
namespaces, :class:`SandboxUnavailableError` is raised: corral never runs a validation unsandboxed.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import os
import secrets
import selectors
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from runner.errors import CorralError

SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Fresh sandbox uids when corral runs as root: above the ranges distributions hand to users, systemd's
# dynamic users and container uid ranges (up to 0x6FFFFFFF), below systemd's nspawn range (0x7FFE0000).
SANDBOX_UID_BASE = 1_900_000_000
SANDBOX_UID_SPAN = 200_000_000

# name: (default, maximum). The schema (schemas/validate.schema.json) enforces the same maxima.
LIMITS: dict[str, tuple[int, int]] = {
    "processes": (256, 4096),  # RLIMIT_NPROC: processes and threads of the sandbox's uid
    "memory_mb": (4096, 32768),  # RLIMIT_DATA, per process: heap and private writable mappings
    "file_size_mb": (1024, 16384),  # RLIMIT_FSIZE: the largest file one process may write
    "tmp_mb": (512, 8192),  # the size of the tmpfs at /tmp
    "home_mb": (512, 8192),  # the size of the tmpfs at $HOME
    "output_kb": (256, 8192),  # output kept (head and tail); the rest is digested and counted only
}


@dataclass(frozen=True)
class Limits:
    """The bounds of one validation run (see ``LIMITS`` for what each bounds, defaults and maxima)."""

    processes: int = LIMITS["processes"][0]
    memory_mb: int = LIMITS["memory_mb"][0]
    file_size_mb: int = LIMITS["file_size_mb"][0]
    tmp_mb: int = LIMITS["tmp_mb"][0]
    home_mb: int = LIMITS["home_mb"][0]
    output_kb: int = LIMITS["output_kb"][0]

    def __post_init__(self) -> None:
        for name, (_, maximum) in LIMITS.items():
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= maximum:
                raise ValueError(f"limit {name}={value!r} is outside 1-{maximum}")

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


class SandboxUnavailableError(CorralError):
    """Bubblewrap is missing or the kernel refuses its namespaces. Install bubblewrap (Debian:
    ``apt-get install bubblewrap``) or run on a host that allows user namespaces; corral will not
    run validations without the sandbox."""

    category = "invalid"
    default_code = "sandbox_unavailable"


@dataclass(frozen=True)
class Command:
    """One validation: a name, a fixed argv, a timeout, extra environment."""

    name: str
    argv: tuple[str, ...]
    timeout: float = 600.0
    env: Mapping[str, str] = field(default_factory=dict)
    limits: Limits = field(default_factory=Limits)
    # Set by corral only (the bootstrap and the gate that uses its cache), never by validate.yaml:
    network: bool = False  # keep the host's network namespace (the bootstrap stage only)
    chdir: str | None = None  # the working directory inside (default: the snapshot)
    binds: tuple[tuple[str, str], ...] = ()  # (host path, sandbox path), read-only, after the snapshot
    writable: tuple[tuple[str, str], ...] = ()  # (host path, sandbox path), writable, after the snapshot


@dataclass(frozen=True)
class CommandResult:
    """How one validation ended. ``tail`` is filled only when asked for and is never recorded."""

    name: str
    argv: tuple[str, ...]
    exit_status: int | None
    timed_out: bool
    duration_seconds: float
    output_sha256: str
    output_bytes: int
    tail: str | None = field(default=None, repr=False)
    truncated: bool = False
    limits: Limits = field(default_factory=Limits)

    @property
    def passed(self) -> bool:
        return self.exit_status == 0 and not self.timed_out

    @property
    def reason(self) -> str | None:
        """Why it failed, in words (None when it passed). A limit the kernel enforces by a signal is named;
        running out of processes, memory or tmpfs space shows as the command's own error and exit status."""
        if self.timed_out:
            return "timed out: killed"
        if self.exit_status == 0:
            return None
        status = self.exit_status
        number = status - 128 if status is not None and 128 < status < 128 + 65 else None
        if number == signal.SIGXFSZ:
            return f"killed by SIGXFSZ: a file passed the file size limit ({self.limits.file_size_mb} MB)"
        if number == signal.SIGKILL:
            return "killed by SIGKILL"
        if number is not None:
            with contextlib.suppress(ValueError):
                return f"killed by {signal.Signals(number).name}"
        return f"exit status {status}"

    def to_record(self) -> dict[str, Any]:
        """What is recorded with the lane: statuses, durations and digests, no output."""
        return {
            "name": self.name,
            "argv": list(self.argv),
            "exit_status": self.exit_status,
            "timed_out": self.timed_out,
            "passed": self.passed,
            "duration_seconds": round(self.duration_seconds, 3),
            "output_sha256": self.output_sha256,
            "output_bytes": self.output_bytes,
            "truncated": self.truncated,
            "reason": self.reason,
            "limits": self.limits.to_dict(),
        }


class Sandbox:
    """Bubblewrap, probed once per instance."""

    def __init__(self, bwrap: str = "bwrap", uid: int | None = None) -> None:
        self.bwrap = bwrap
        self._checked = False
        # Invariant: as root the sandbox never runs as root: a fresh uid for this Sandbox's runs.
        if uid is None and os.geteuid() == 0:
            uid = SANDBOX_UID_BASE + secrets.randbelow(SANDBOX_UID_SPAN)
        self.uid = uid

    def _credentials(self) -> dict[str, Any]:
        """Popen's arguments to start bwrap as the sandbox uid (none when it is ours)."""
        if self.uid is None or self.uid == os.geteuid():
            return {}
        return {"user": self.uid, "group": self.uid, "extra_groups": []}

    def own(self, path: Path) -> None:
        """Give ``path`` (a private snapshot or home corral made) to the sandbox uid, so that bwrap,
        running as that uid, can read it. Nothing when the sandbox runs as corral's own user."""
        if not self._credentials():
            return
        assert self.uid is not None
        os.lchown(path, self.uid, self.uid)
        for top, dirs, files in os.walk(path):
            for name in (*dirs, *files):
                os.lchown(os.path.join(top, name), self.uid, self.uid)

    def check(self) -> None:
        """Raise :class:`SandboxUnavailableError` unless a minimal sandbox really starts here."""
        if self._checked:
            return
        binary = shutil.which(self.bwrap)
        if binary is None:
            raise SandboxUnavailableError(f"Bubblewrap ({self.bwrap}) is not installed", bwrap=self.bwrap)
        probe = [
            binary,
            "--unshare-all",
            "--cap-drop",
            "ALL",
            "--die-with-parent",
            "--new-session",
            "--ro-bind",
            "/",
            "/",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "true",
        ]
        try:
            done = subprocess.run(probe, capture_output=True, text=True, timeout=30, check=False, **self._credentials())
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SandboxUnavailableError(f"Bubblewrap could not start: {exc}", bwrap=binary) from None
        if done.returncode != 0:
            raise SandboxUnavailableError(
                f"the kernel refused Bubblewrap's namespaces: {done.stderr.strip() or done.returncode}", bwrap=binary
            )
        self.bwrap = binary
        self._checked = True

    def command_line(self, snapshot: Path, home: Path, command: Command) -> list[str]:
        """The full bwrap argv for ``command`` (exposed for tests and for ``--dry-run`` style display)."""
        argv = [self.bwrap, "--unshare-all", "--cap-drop", "ALL", "--die-with-parent", "--new-session", "--clearenv"]
        if command.network:
            argv.append("--share-net")  # the bootstrap stage: the host's network, nothing else of its
        for directory in SYSTEM_DIRS:
            if os.path.islink(directory):
                argv += ["--symlink", os.readlink(directory), directory]
            elif os.path.isdir(directory):
                argv += ["--ro-bind", directory, directory]
        limits = command.limits
        argv += ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--size", str(limits.tmp_mb << 20)]
        argv += ["--tmpfs", "/tmp", "--tmpfs", "/run"]
        argv += ["--perms", "0700", "--size", str(limits.home_mb << 20), "--tmpfs", str(home)]
        if command.network:
            resolver = os.path.realpath("/etc/resolv.conf")
            if resolver.startswith("/run/"):  # systemd-resolved's stub file: /run is private otherwise
                argv += ["--ro-bind-try", resolver, resolver]
        argv += ["--ro-bind", str(snapshot), str(snapshot)]
        for source, target in command.binds:
            argv += ["--ro-bind", source, target]
        for source, target in command.writable:
            argv += ["--bind", source, target]
        argv += ["--chdir", command.chdir or str(snapshot)]
        env = {
            "PATH": PATH,
            "HOME": str(home),
            "LANG": "C.UTF-8",
            "TMPDIR": "/tmp",
            "XDG_CACHE_HOME": str(home / ".cache"),
            "PYTHONDONTWRITEBYTECODE": "1",
            **dict(command.env),
        }
        for key, value in sorted(env.items()):
            argv += ["--setenv", key, value]
        # bwrap's own root is a writable tmpfs: make it read-only too, once everything is mounted.
        return [*argv, "--remount-ro", "/", "--", *command.argv]

    def run(self, snapshot: Path, home: Path, command: Command, tail: bool = False) -> CommandResult:
        """Run one command in the sandbox; its combined output is digested (and kept, bounded, on request).

        ``home`` is the path of the sandbox's private home: a tmpfs there, nothing of the host's.
        """
        self.check()
        limits = command.limits
        keep = limits.output_kb * 1024
        head, tail_chunks = bytearray(), collections.deque[bytes]()
        tail_size = 0
        digest, size = hashlib.sha256(), 0
        started = time.monotonic()
        process = subprocess.Popen(
            [*_prlimit(limits, nproc=bool(self._credentials())), *self.command_line(snapshot, home, command)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            **self._credentials(),
        )
        assert process.stdout is not None
        deadline = started + command.timeout
        timed_out = False
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ)
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    timed_out = True
                    break
                if not selector.select(timeout=min(left, 1.0)):
                    continue
                chunk = os.read(process.stdout.fileno(), 1 << 16)
                if not chunk:
                    break  # EOF: every process holding the pipe is gone
                digest.update(chunk)
                size += len(chunk)
                # Invariant: at most `keep` bytes are held: the first half, then a ring of the last half.
                room = keep // 2 - len(head)
                if room > 0:
                    head += chunk[:room]
                    chunk = chunk[room:]
                if chunk:
                    tail_chunks.append(chunk)
                    tail_size += len(chunk)
                    while tail_size - len(tail_chunks[0]) >= keep - keep // 2:
                        tail_size -= len(tail_chunks.popleft())
        process.stdout.close()
        exit_status: int | None
        if timed_out:
            _kill(process)
            exit_status = None
        else:
            try:
                exit_status = process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                timed_out = True
                _kill(process)
                exit_status = None
        duration = time.monotonic() - started
        truncated = size > keep
        text = None
        if tail:
            rest = b"".join(tail_chunks)
            if truncated:
                rest = rest[len(rest) - (keep - keep // 2) :]
                omitted = size - len(head) - len(rest)
                text = (
                    head.decode("utf-8", "replace")
                    + f"\n[corral: {omitted} bytes of output omitted, output_kb={limits.output_kb}]\n"
                    + rest.decode("utf-8", "replace")
                )
            else:
                text = (bytes(head) + rest).decode("utf-8", "replace")
        return CommandResult(
            command.name,
            command.argv,
            exit_status,
            timed_out,
            duration,
            digest.hexdigest(),
            size,
            text,
            truncated,
            limits,
        )

    def run_all(
        self, snapshot: Path, home: Path, commands: Sequence[Command], tail: bool = False
    ) -> list[CommandResult]:
        """Run every command in order (each in a fresh sandbox), whatever the others did."""
        return [self.run(snapshot, home, command, tail) for command in commands]


def _prlimit(limits: Limits, nproc: bool) -> list[str]:
    """util-linux ``prlimit`` as a fixed-argv wrapper around bwrap: it sets the limits on itself and
    execs bwrap, which and whose children inherit them (a Python ``preexec_fn`` is unsafe in a
    process with threads). RLIMIT_NPROC only under a fresh uid: otherwise it would count the user's
    processes outside the sandbox too."""
    binary = shutil.which("prlimit")
    if binary is None:
        raise SandboxUnavailableError("prlimit (util-linux) is not installed: the sandbox cannot be bounded")
    argv = [binary, f"--data={limits.memory_mb << 20}", f"--fsize={limits.file_size_mb << 20}", "--core=0"]
    if nproc:
        argv.append(f"--nproc={limits.processes}")
    return [*argv, "--"]


def _kill(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
