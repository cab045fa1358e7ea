"""Process lineage: binding a controller credential to the coordinator process that asked for it.

``corral controller acquire --bind-process`` records *the coordinator*: the parent of the ``corral``
process (the shell or agent that called it) as its pid and start time (field 22 of
``/proc/<pid>/stat``, which tells a reused pid apart), the boot id
(``/proc/sys/kernel/random/boot_id``) and ``$HERDR_PANE_ID`` when set. A later command honours the
credential only from inside that lineage: the recorded process is the caller itself or one of its
ancestors (the ppid chain read from ``/proc``), on the same boot, in the same Herdr pane when one was
recorded. Anything that cannot be read counts as outside: the check fails closed.

This binds cooperating processes of one user (an agent the coordinator started elsewhere cannot
act as it by accident or by following an injected instruction). It is not isolation from a hostile
process of the same user, which can read the credential file or ptrace the coordinator.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from runner.errors import CredentialError, RefusedError

MAX_DEPTH = 4096  # ancestors walked before giving up (a pid chain is far shorter; a loop is impossible)
BOOT_ID = "/proc/sys/kernel/random/boot_id"


def boot_id() -> str | None:
    """This boot's id, or None where /proc cannot tell."""
    try:
        with open(BOOT_ID, encoding="ascii") as handle:
            return handle.read().strip() or None
    except OSError:
        return None


def stat_of(pid: int) -> tuple[int, int] | None:
    """``(ppid, start_time)`` of ``pid`` from ``/proc/<pid>/stat``, or None if it cannot be read.

    The command name (field 2) may hold spaces and parentheses, so fields are counted after the last
    ``)``: there field 3 (state) comes first, ppid (field 4) second, start time (field 22) 20th.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            raw = handle.read(4096)
    except OSError:
        return None
    fields = raw[raw.rfind(b")") + 2 :].split()
    try:
        return int(fields[1]), int(fields[19])
    except (IndexError, ValueError):
        return None


@dataclass(frozen=True)
class Binding:
    """The coordinator process a credential is bound to."""

    boot_id: str
    pid: int
    start_time: int
    herdr_pane_id: str | None = None

    @classmethod
    def of_caller(cls) -> Binding:
        """The parent of this process: the shell or agent that ran ``corral``.

        Raises:
            CredentialError: ``credential_bind_unavailable`` where /proc cannot say who that is.
        """
        pid = os.getppid()
        boot = boot_id()
        found = stat_of(pid)
        if boot is None or found is None or pid <= 1:
            raise CredentialError(
                f"--bind-process needs /proc to identify the calling process (pid {pid}); "
                "it is not available here: run without --bind-process",
                code="credential_bind_unavailable",
                pid=pid,
            )
        return cls(boot, pid, found[1], os.environ.get("HERDR_PANE_ID") or None)

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"boot_id": self.boot_id, "pid": self.pid, "start_time": self.start_time}
        if self.herdr_pane_id is not None:
            doc["herdr_pane_id"] = self.herdr_pane_id
        return doc

    def why_outside(self) -> str | None:
        """None when this process descends from (or is) the bound one; otherwise the reason why not."""
        if boot_id() != self.boot_id:
            return "the machine rebooted since the binding (or its boot id cannot be read)"
        if self.herdr_pane_id is not None and os.environ.get("HERDR_PANE_ID") != self.herdr_pane_id:
            return f"it is bound to Herdr pane {self.herdr_pane_id!r} and this process is not in it"
        pid = os.getpid()
        for _ in range(MAX_DEPTH):
            found = stat_of(pid)
            if found is None:
                break
            ppid, started = found
            if pid == self.pid and started == self.start_time:
                return None
            if ppid <= 0 or ppid == pid:
                break
            pid = ppid
        return f"process {self.pid} (started at tick {self.start_time}) is not this process or one of its ancestors"

    def check(self, path: str, controller_id: str) -> None:
        """Refuse unless the caller is inside the bound lineage.

        Raises:
            RefusedError: ``caller_not_controller``: act from the bound coordinator (or a process it
                started), or resume the lease there with ``--bind-process`` to bind it elsewhere.
        """
        why = self.why_outside()
        if why is not None:
            raise RefusedError(
                f"the credential {path} of controller {controller_id!r} is bound to another process: {why}; "
                "act from the coordinator that acquired it (or a process it started)",
                code="caller_not_controller",
                path=path,
                controller_id=controller_id,
                bound_pid=self.pid,
            )
