"""Run a fixed argv under Bubblewrap: no network, no capabilities, nothing writable but a private home.

The sandbox for host validation (``corral writer verify``)::

    bwrap --unshare-all --cap-drop ALL --die-with-parent --new-session --clearenv
          --ro-bind /usr /usr (and /bin /sbin /lib* /etc when present: read-only system)
          --proc /proc --dev /dev --tmpfs /tmp --tmpfs /run   (private: host sockets are unreachable)
          --bind HOME HOME                                     (a private writable home per run)
          --ro-bind SNAPSHOT SNAPSHOT --chdir SNAPSHOT         (the worktree's snapshot, read-only)
          --remount-ro /                                       (bwrap's root tmpfs, read-only too)
          --setenv PATH … --setenv HOME HOME … -- ARGV…

``--unshare-all`` includes the network namespace; as root, Bubblewrap keeps capabilities unless told
``--cap-drop ALL``, and ``--unshare-net`` alone would still let a process reach host unix sockets in
``/tmp`` or ``/run``, hence the private mounts. Without Bubblewrap, or on a kernel that refuses the
namespaces, :class:`SandboxUnavailableError` is raised: corral never runs a validation unsandboxed.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.errors import CorralError

SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
TAIL_BYTES = 16 * 1024


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

    @property
    def passed(self) -> bool:
        return self.exit_status == 0 and not self.timed_out

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
        }


class Sandbox:
    """Bubblewrap, probed once per instance."""

    def __init__(self, bwrap: str = "bwrap") -> None:
        self.bwrap = bwrap
        self._checked = False

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
            done = subprocess.run(probe, capture_output=True, text=True, timeout=30, check=False)
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
        for directory in SYSTEM_DIRS:
            if os.path.islink(directory):
                argv += ["--symlink", os.readlink(directory), directory]
            elif os.path.isdir(directory):
                argv += ["--ro-bind", directory, directory]
        argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", "/run"]
        argv += ["--bind", str(home), str(home), "--ro-bind", str(snapshot), str(snapshot), "--chdir", str(snapshot)]
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
        """Run one command in the sandbox; its combined output is digested (and tailed on request)."""
        self.check()
        with tempfile.TemporaryFile() as output:
            started = time.monotonic()
            process = subprocess.Popen(
                self.command_line(snapshot, home, command),
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            timed_out = False
            try:
                exit_status: int | None = process.wait(timeout=command.timeout)
            except subprocess.TimeoutExpired:
                timed_out = True
                _kill(process)
                exit_status = None
            duration = time.monotonic() - started
            output.seek(0)
            digest, size = hashlib.sha256(), 0
            for chunk in iter(lambda: output.read(1 << 16), b""):
                digest.update(chunk)
                size += len(chunk)
            text = None
            if tail:
                output.seek(max(0, size - TAIL_BYTES))
                text = output.read().decode("utf-8", "replace")
        return CommandResult(
            command.name, command.argv, exit_status, timed_out, duration, digest.hexdigest(), size, text
        )

    def run_all(
        self, snapshot: Path, home: Path, commands: Sequence[Command], tail: bool = False
    ) -> list[CommandResult]:
        """Run every command in order (each in a fresh sandbox), whatever the others did."""
        return [self.run(snapshot, home, command, tail) for command in commands]


def _kill(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
