"""The process host's supervisor: runs one prompt's command and records how it ended.

Started by :meth:`ProcessHost.prompt` after the slot was set ``working`` at cursor ``run``; it reads
its job as JSON on standard input (so the prompt text never touches the disk or argv), detaches
(fork + a new session: nobody's child, it outlives its prompter), runs the kind's fixed argv in the
agent's cwd with the job's environment only (the kind's allow-list, built by the prompter; the
supervisor's own environment, which may hold ``CORRAL_*``, is not passed on), output appended to the
run's log, and compare-and-sets the slot from ``run`` to ``run + 1`` as ``done`` or ``blocked`` with
the exit status. If the slot moved meanwhile (closed, or changed by someone else) it records
nothing.

The prompting process waits for the launcher half only, so that half imports nothing beyond
``json``, ``os`` and ``sys``; the detached half starts the agent first and imports the store while
it runs (both measured on the relay+collect critical path: bench/agents.py).
"""

from __future__ import annotations

import json
import os
import sys

TYPE_CHECKING = False  # not typing's: importing typing costs ~8 ms on the relay's critical path
if TYPE_CHECKING:
    import subprocess
    from typing import Any

TAIL_BYTES = 64 * 1024


def _tail(path: str) -> str:
    with open(path, "rb") as handle:
        handle.seek(0, os.SEEK_END)
        size = handle.tell()
        handle.seek(max(0, size - TAIL_BYTES))
        return handle.read().decode("utf-8", "replace")


def start(job: dict[str, Any]) -> subprocess.Popen[bytes] | None:
    """Start the job's command (never through a shell); None if it could not be started."""
    import subprocess

    argv = list(job["argv"])
    text = job["text"]
    if job["prompt_mode"] == "argv":
        argv.append(text)
    with open(job["log"], "ab") as output:
        try:
            child = subprocess.Popen(
                argv,
                cwd=job["cwd"],
                env=job["env"],  # only the kind's allow-list: never corral's variables or credential paths
                stdin=subprocess.PIPE if job["prompt_mode"] == "stdin" else subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
            )
        except OSError as exc:
            output.write(f"corral: could not start {argv[0]!r}: {exc}\n".encode())
            return None
    if child.stdin is not None:
        try:
            child.stdin.write(text.encode("utf-8"))
            child.stdin.close()
        except BrokenPipeError:  # the command does not read its input; that is its business
            pass
    return child


def record(job: dict[str, Any], code: int) -> None:
    """Compare-and-set the slot from the run's cursor to the outcome."""
    from dataclasses import replace

    from runner.agents.slots import slot_store
    from runner.errors import ConflictError
    from runner.store import open_store

    blocked = code in job["blocked_exit_codes"] or (
        job.get("blocked_marker") is not None and job["blocked_marker"] in _tail(job["log"])
    )
    with open_store(job["store"]) as store:
        try:
            with slot_store(store).write() as tx:
                slot = tx.slot(job["pane_id"])
                if slot is None or slot.closed or slot.seq != job["run"]:
                    return
                status = "blocked" if blocked else "done"
                tx.put_slot(replace(slot, status=status, seq=slot.seq + 1, exit_status=code, pid=None), slot.seq)
        except ConflictError:
            return  # someone else moved the slot first; theirs is the truth


def main() -> None:
    """Read the job, detach, print the detached pid for the prompter, run and record."""
    job = json.loads(sys.stdin.buffer.read().decode("utf-8"))
    pid = os.fork()
    if pid:
        sys.stdout.write(f"{pid}\n")
        sys.stdout.flush()
        os._exit(0)
    os.setsid()  # its own session and process group: close() stops it and its command together
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    try:
        child = start(job)
        import runner.agents.sqlite_slots  # noqa: F401  (the slot port and store: loaded while the agent runs)

        record(job, 127 if child is None else child.wait())
    finally:
        os._exit(0)


if __name__ == "__main__":
    main()
