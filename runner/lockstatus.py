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


def _hostname() -> str:
    import socket  # here, not at the top: a command that judges no lock does not import it (cold start)

    return socket.gethostname()


def current(pid: int | None = None) -> dict[str, Any]:
    """This process (or ``pid``) as a lock holder."""
    pid = os.getpid() if pid is None else pid
    return {"pid": pid, "host": _hostname(), "boot_id": boot_id(), "start_time": start_time(pid)}


def status(holder: Mapping[str, Any] | None) -> str:
    """``absent``, ``active``, ``stale`` or ``indeterminate`` for a recorded holder."""
    if not holder:
        return "absent"
    if holder.get("host") != _hostname():
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
    return "active" if started == holder.get("start_time") else "stale"
