"""Who holds a local lock (a plan's runner), and whether that holder is still alive.

A holder is recorded as its pid, hostname, boot id (``/proc/sys/kernel/random/boot_id``) and the
process start time (field 22 of ``/proc/<pid>/stat``, parsed after the last ``)``, since the command
name may contain spaces and parentheses). Judged later:

================  =================================================================================
status            when
================  =================================================================================
``absent``        nothing recorded
``active``        same host and boot, the pid runs, and it is the same process (same start time)
``stale``         same host, and another boot, or the pid is gone, or it now belongs to another process
``indeterminate`` another host, or /proc could not be read: never broken by age alone
================  =================================================================================

A holder may also name an ``attempt``: one call of that process (a start), marked for as long as the
call runs by a unix socket bound in the abstract namespace (``\\0corral-attempt-<id>``, Linux: no file,
gone with the process or when the call ends), judged only from the same network namespace. A live
process whose attempt ended, as when a start lost its store and raised, is ``stale`` for that holder:
a long-lived process (``corral serve``, a plan runner) does not keep such a start's lease looking
busy for as long as it runs.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any


def boot_id() -> str | None:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as handle:
            return handle.read().strip()
    except OSError:
        return None


def start_time(pid: int) -> int | None:
    """The process start time in clock ticks since boot, or None if it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as handle:
            stat = handle.read()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()
    try:
        return int(fields[19])  # field 22 overall; fields here start at field 3
    except (IndexError, ValueError):
        return None


def hostname() -> str:
    """This machine's host name, as a lock holder records it."""
    import socket  # here, not at the top: a command that judges no lock does not import it (cold start)

    return socket.gethostname()


_ATTEMPT = "corral-attempt-"


def _attempt_address(attempt: str) -> str:
    return "\0" + _ATTEMPT + attempt


class Attempt:
    """One call marked as running (:func:`attempt`): ``close`` when it ends."""

    def __init__(self, attempt: str, sock: Any) -> None:
        self.id = attempt
        self._sock = sock

    @property
    def marked(self) -> bool:
        """The mark is up (False: this platform has no abstract namespace; record no attempt then)."""
        return self._sock is not None

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __enter__(self) -> Attempt:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def attempt(attempt_id: str) -> Attempt:
    """Mark the call ``attempt_id`` as running in this process until the result is closed (where the
    abstract namespace is not available, unmarked: the holder is then judged by its process alone)."""
    import socket  # here: only a start pays for it

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(_attempt_address(attempt_id))
    except OSError:
        sock.close()
        return Attempt(attempt_id, None)
    return Attempt(attempt_id, sock)


def attempt_running(attempt_id: str) -> bool | None:
    """Is the call ``attempt_id`` still marked running on this host? None: it cannot be told."""
    import errno
    import socket

    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.bind(_attempt_address(attempt_id))
    except OSError as exc:
        return True if exc.errno == errno.EADDRINUSE else None
    finally:
        probe.close()
    return False


def current(pid: int | None = None) -> dict[str, Any]:
    """This process (or ``pid``) as a lock holder."""
    pid = os.getpid() if pid is None else pid
    return {"pid": pid, "host": hostname(), "boot_id": boot_id(), "start_time": start_time(pid)}


def status(holder: Mapping[str, Any] | None) -> str:
    """``absent``, ``active``, ``stale`` or ``indeterminate`` for a recorded holder."""
    if not holder:
        return "absent"
    if holder.get("host") != hostname():
        return "indeterminate"
    mine = boot_id()
    if mine is None or holder.get("boot_id") is None:
        return "indeterminate"
    if holder.get("boot_id") != mine:
        return "stale"
    pid = holder.get("pid")
    if not isinstance(pid, int):
        return "indeterminate"
    started = start_time(pid)
    if started is None:
        return "stale" if not os.path.exists(f"/proc/{pid}") else "indeterminate"
    if started != holder.get("start_time"):
        return "stale"
    marked = holder.get("attempt")
    if isinstance(marked, str) and _same_network_namespace(pid) and attempt_running(marked) is False:
        return "stale"  # the process lives on, but the call it recorded has ended
    return "active"


def _same_network_namespace(pid: int) -> bool:
    """Does ``pid`` see the abstract sockets this process sees (one network namespace)? Unknown: no,
    and the holder is judged by its process alone (never stale on a probe that could not see it)."""
    try:
        return os.readlink(f"/proc/{pid}/ns/net") == os.readlink("/proc/self/ns/net")
    except OSError:
        return False
