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

import os
import sys

if __name__ == "__main__":
    # Started as a script with ``python -S`` (:meth:`ProcessHost.prompt`): no site (its .pth files cost
    # ~20 ms on the relay's path) and, instead of this file's folder (whose module names could shadow
    # the standard library's), the folder that holds the ``runner`` package. The detached half loads
    # the site once the agent runs (:func:`_full_path`).
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import json
from time import time_ns

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
    notes = list(job.get("notes") or ())
    if notes:  # beside the run's output, never in it: the output is the agent's answer (JSON, when asked)
        with open(job["log"].removesuffix(".log") + ".notes", "ab") as noted:
            noted.write("".join(f"{note}\n" for note in notes).encode())
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


def read_result(job: dict[str, Any], code: int) -> dict[str, Any] | None:
    """The driver's reading of a driven CLI's machine output (None for a plain kind), written beside
    the log as ``run-N.json`` before the outcome is recorded, so a settled slot always has its result."""
    if job.get("driver") in (None, "plain", "script") and (job.get("spec") or {}).get("schema") is None:
        return None  # plain output: nothing to read but the log (a verdict is read from any driver)
    from runner.agents.drivers import RunSpec, driver

    fields: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in job["spec"].items()}
    spec = RunSpec(**fields)
    with open(job["log"], "rb") as handle:
        lines = handle.read().decode("utf-8", "replace").splitlines()
    result = driver(job["driver"]).parse(lines, spec)
    marker = job.get("blocked_marker")
    blocked = code in (job.get("blocked_exit_codes") or ()) or (marker is not None and any(marker in x for x in lines))
    if result.error is None and code != 0 and not blocked:
        result.error = f"the CLI exited with status {code}"
    if spec.schema is not None and result.error is None and not blocked:  # a blocked run answers later
        result.structured, problem = _verdict(spec.schema, result)
        if problem is not None:
            result.error = problem
    document = result.to_dict()
    document["exit_status"] = code
    document["schema_invalid"] = spec.schema is not None and result.error is not None and result.structured is None
    path = job["log"][: -len(".log")] + ".json"
    partial = path + ".part"
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(document, handle)
    os.replace(partial, path)
    return document


def _verdict(schema_text: str, result: Any) -> tuple[Any, str | None]:
    """The answer checked against the verdict schema with jsonschema: (the value, None) or (None, why)."""
    import jsonschema

    value = result.structured
    if value is None:
        try:
            value = json.loads(result.final)
        except ValueError:
            return None, "the answer is not JSON, but the prompt asked for one matching a schema"
    try:
        jsonschema.validate(value, json.loads(schema_text))
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(the answer)"
        return None, f"the answer does not match the schema at {where}: {exc.message}"
    return value, None


RECORD_PATIENCE = 600.0
"""How long the supervisor keeps trying to record a run's outcome while the store is busy or its server
is away (seconds): the outcome exists only in this process until it is recorded."""


def record(
    job: dict[str, Any], code: int, result: dict[str, Any] | None = None, patience: float = RECORD_PATIENCE
) -> None:
    """Compare-and-set the slot from the run's cursor to the outcome (with what the run taught: its
    conversation's id, and what it spent added to the slot's spend).

    A store that stays busy (a writer holding its lock, stopped) or whose server went away is tried
    again, for up to ``patience`` seconds: a compare-and-set whose commit answer was lost is safe to
    try again (the slot has moved on, and nothing is written twice)."""
    import time

    from runner.errors import StoreBusyError, StoreUnavailableError

    deadline = time.monotonic() + patience
    pause = 0.1
    while True:
        try:
            _record_once(job, code, result)
            return
        except (StoreBusyError, StoreUnavailableError):
            if time.monotonic() + pause > deadline:
                raise
            time.sleep(pause)
            pause = min(pause * 2, 2.0)


def _record_once(job: dict[str, Any], code: int, result: dict[str, Any] | None) -> None:
    from dataclasses import replace

    from runner.agents.slots import slot_store
    from runner.errors import ConflictError, StoreBusyError, StoreUnavailableError
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
                options = dict(slot.options)
                if result is not None:
                    options = _learnt(options, result)
                    if result.get("error") is not None and code == 0:
                        code = 1  # the CLI said its run failed: never a clean exit
                tx.put_slot(
                    replace(slot, status=status, seq=slot.seq + 1, exit_status=code, pid=None, options=options),
                    slot.seq,
                )
        except (StoreBusyError, StoreUnavailableError):
            raise  # nothing was decided: try again (both are ConflictErrors, but not someone else's move)
        except ConflictError:
            return  # someone else moved the slot first; theirs is the truth


def _learnt(options: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
    """The slot's options after a run: the conversation confirmed, the spend added up."""
    session = result.get("session_id")
    if isinstance(session, str) and not result.get("session_lost"):
        options["session_id"] = session
        options.pop("new_session_id", None)
        if result.get("session_usage"):
            options["session_usage"] = dict(result["session_usage"])  # a CLI's running totals (Codex)
    spend = dict(options.get("spend") or {})
    usage = result.get("usage") or {}
    spend["tokens"] = int(spend.get("tokens", 0)) + sum(v for v in usage.values() if isinstance(v, int))
    spend["cost_usd"] = round(float(spend.get("cost_usd", 0.0)) + float(result.get("cost_usd") or 0.0), 6)
    spend["turns"] = int(spend.get("turns", 0)) + int(result.get("turns") or 0)
    spend["runs"] = int(spend.get("runs", 0)) + 1
    options["spend"] = spend
    return options


def _full_path() -> None:
    """The site this interpreter skipped (``-S``): site-packages (and the virtual environment's prefix)
    for the imports of the detached half, loaded while the agent runs."""
    if sys.flags.no_site:
        import site

        site.main()


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
        started_ns = time_ns()
        child = start(job)
        _full_path()
        from runner.agents.slots import SLOT_STORES

        SLOT_STORES.preload("sqlite")  # the slot port's adapter and its store: loaded while the agent runs

        code = 127 if child is None else child.wait()
        try:
            result = read_result(job, code)
        except Exception as exc:  # noqa: BLE001 (the outcome must be recorded whatever the reading did)
            result = {"error": f"corral could not read the run's output: {type(exc).__name__}: {exc}"}
        record(job, code, result)
        if job.get("traceparent"):
            _traced(job, started_ns, time_ns(), code, result)
    finally:
        os._exit(0)


def _traced(job: dict[str, Any], started_ns: int, ended_ns: int, code: int, result: dict[str, Any] | None) -> None:
    """The run as an ``invoke_agent`` span (with the tool calls its driver read from the log), exported
    before this process ends; a tracing failure never touches the recorded outcome."""
    try:
        from runner.observe import tracing

        if not tracing.active():
            return
        reading = dict(result) if result is not None else {}
        reading["tools"] = _tools(job)
        tracing.agent_run(job, started_ns, ended_ns, code, reading if result is not None or reading["tools"] else None)
        tracing.flush()
    except Exception as exc:  # noqa: BLE001 - the outcome is recorded; a trace lost is noted, not fatal
        with open(job["log"].removesuffix(".log") + ".notes", "ab") as noted:
            noted.write(f"corral: the run's trace was not exported: {type(exc).__name__}\n".encode())


def _tools(job: dict[str, Any]) -> list[str]:
    """The names of the tools the run called, in order (names only: never a path or an argument)."""
    if job.get("driver") in (None, "plain", "script"):
        return []
    from runner.agents.drivers import RunSpec, driver

    fields: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in job["spec"].items()}
    with open(job["log"], "rb") as handle:
        lines = handle.read().decode("utf-8", "replace").splitlines()
    shown = driver(job["driver"]).progress(lines, RunSpec(**fields))
    return [line.split(" ")[1] for line in shown if line.startswith("tool ") and len(line.split(" ")) > 1]


if __name__ == "__main__":
    main()
