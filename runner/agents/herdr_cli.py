"""The ``herdr`` executable as corral runs it: a fixed argv (never a shell), its environment and
version, and its answers read (``{"id", "result"}`` on success, ``{"id", "error"}`` on refusal)
and mapped to corral's errors. :class:`runner.agents.herdr.HerdrHost` drives agents with it.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import anyio

from runner.agents.abc import AgentBusyError, AgentError, AgentGoneError, AgentKindError
from runner.errors import CorralError, InputError

# Herdr's bounds on ``agent start --timeout`` (src/app/agents.rs): over 3000 ms, at most 300000 ms.
START_TIMEOUT_MIN_MS = 3_000
START_TIMEOUT_MAX_MS = 300_000
# Herdr's error codes, by what they mean to corral.
# The pane or its agent is not there (``agent_not_running``: a wait's agent left or its pane closed).
GONE_CODES = frozenset({"agent_not_found", "pane_not_found", "agent_not_running"})
# A prompt refused with one of these was not typed into the pane (src/app/api/agents.rs: each is
# answered before any byte is sent; a failed send sends nothing).
NOT_DELIVERED_CODES = frozenset(
    {"agent_blocked", "agent_not_ready", "empty_agent_prompt", "agent_prompt_failed", "agent_target_ambiguous"}
)
# Herdr code -> (corral code, what to do next), for the codes corral re-exposes under its own name.
# Any other Herdr code becomes ``herdr_error`` (the Herdr code is in ``details["herdr_code"]``).
MAPPED_CODES: dict[str, tuple[str, str]] = {
    "agent_name_taken": ("agent_name_taken", "choose another name, or close the agent that has it"),
    "agent_pane_busy": ("agent_pane_busy", "close the pane named in details and start again"),
    "agent_pane_not_found": (
        "agent_pane_not_found",
        "the new pane was closed before the agent could start in it; start again",
    ),
    "agent_pane_unavailable": ("agent_pane_not_found", "the new pane has no live terminal; start again"),
    "agent_kind_mismatch": (
        "agent_kind_mismatch",
        "Herdr detected another agent than the kind's herdr_kind; check the kind's configuration and close the pane",
    ),
    "agent_name_not_found": (
        "agent_name_lost",
        "the agent lost its name while starting (a restart, or someone renamed it); close the pane and start again",
    ),
    "invalid_agent_timeout": ("agent_start_timeout_invalid", "give a start timeout over 3 s and at most 300 s"),
    "agent_not_ready": ("agent_not_ready", "the agent is launching or no longer in the foreground; observe again"),
    "agent_blocked": ("agent_busy", "the agent shows a question; answer it in Herdr, then observe again"),
    "agent_prompt_stalled": (
        "agent_prompt_stalled",
        "the text was typed but the agent showed no change within 5 s; read the pane before prompting again",
    ),
    "confirmation_required": (
        "pane_close_needs_confirmation",
        "closing this pane would close a Herdr worktree group; close it in Herdr yourself, then reconcile",
    ),
    "precondition_failed": (
        "agent_moved",
        "the pane no longer holds the agent at the cursor corral saw; observe again",
    ),
}
GRACE = 5.0  # seconds a herdr call may run past the timeout it was given before it is killed


@dataclass(frozen=True)
class Completed:
    """How one herdr invocation ended."""

    returncode: int
    stdout: bytes
    stderr: bytes


class CommandRunner(Protocol):
    """Runs one argv to completion. Raises :class:`OSError` if it cannot start, :class:`TimeoutError`."""

    def run(self, argv: Sequence[str], timeout: float) -> Completed: ...

    async def run_async(self, argv: Sequence[str], timeout: float) -> Completed:
        """As :meth:`run`; when cancelled, the process is killed before the cancellation propagates."""
        ...


def herdr_environment() -> dict[str, str]:
    """Ours without corral's own ``CORRAL_*`` variables: Herdr may hand its client's environment to the
    panes it starts, and an agent must not learn where its coordinator's credentials are."""
    return {k: v for k, v in os.environ.items() if not k.upper().startswith("CORRAL_")}


class SubprocessRunner:
    """The real thing: a child process per call, stdin closed, output captured, no ``CORRAL_*``."""

    def run(self, argv: Sequence[str], timeout: float) -> Completed:
        try:
            done = subprocess.run(
                list(argv),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=timeout,
                check=False,
                env=herdr_environment(),
            )
        except subprocess.TimeoutExpired:
            raise TimeoutError(f"{argv[0]} did not finish within {timeout:g} s") from None
        return Completed(done.returncode, done.stdout, done.stderr)

    async def run_async(self, argv: Sequence[str], timeout: float) -> Completed:
        await anyio.lowlevel.checkpoint_if_cancelled()
        # Shielded: a cancellation delivered between the spawn and open_process's return would leave
        # the child killed but never reaped (asyncio's own clean-up wait is cancelled again), and the
        # loop closing under it warns of a subprocess still running. Cancelled, it is killed below.
        with anyio.CancelScope(shield=True):
            process = await anyio.open_process(list(argv), stdin=subprocess.DEVNULL, env=herdr_environment())
        chunks: dict[str, list[bytes]] = {"stdout": [], "stderr": []}

        async def drain(name: str, stream: Any) -> None:
            async for chunk in stream:
                chunks[name].append(chunk)

        try:
            with anyio.fail_after(timeout):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(drain, "stdout", process.stdout)
                    tg.start_soon(drain, "stderr", process.stderr)
                    await process.wait()
        finally:
            # Cancelled, timed out or failed: the process must not outlive the call.
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
            with anyio.CancelScope(shield=True):
                await process.aclose()
        if process.returncode is None:  # aclose() waited for it; this never happens
            raise OSError(f"{argv[0]} ended without an exit status")
        return Completed(process.returncode, b"".join(chunks["stdout"]), b"".join(chunks["stderr"]))


def ms(seconds: float) -> str:
    return str(max(1, round(seconds * 1000)))


def start_timeout_ms(seconds: float) -> int:
    """``agent start --timeout`` in ms, within Herdr's bounds (over 3000, at most 300000).

    Raises:
        InputError: ``seconds`` is outside them (Herdr would answer ``invalid_agent_timeout``).
    """
    ms = math.ceil(seconds * 1000)
    if not START_TIMEOUT_MIN_MS < ms <= START_TIMEOUT_MAX_MS:
        raise InputError(
            "start_timeout",
            f"{seconds:g} s is outside Herdr's agent start timeout (over {START_TIMEOUT_MIN_MS // 1000} s, at most "
            f"{START_TIMEOUT_MAX_MS // 1000} s)",
        )
    return ms


def herdr_binary(binary: str | None = None) -> str:
    """The ``herdr`` to run: ``binary``, else ``$CORRAL_HERDR``, else ``$HERDR_BIN_PATH`` (what Herdr
    sets inside its panes, as its own tools use it), else ``herdr`` on ``PATH``."""
    return binary or os.environ.get("CORRAL_HERDR") or os.environ.get("HERDR_BIN_PATH") or "herdr"


def parse_version(text: str) -> tuple[int, ...] | None:
    """``(0, 8, 2)`` from ``herdr 0.8.2`` (None if there is no version in it)."""
    found = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    if found is None:
        return None
    return tuple(int(part) for part in found.groups() if part is not None)


# --- herdr's answers -------------------------------------------------------------------------------


def optional_text(raw: dict[str, Any], key: str, pane_id: str) -> str:
    """``raw[key]`` if present (a string), else ``""``."""
    value = raw.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise protocol_error(["agent"], f"agent {pane_id} has a {key} that is not a string")
    return value


def command_line(args: Sequence[str]) -> str:
    """The subcommand words (``agent prompt``): safe to log, unlike a prompt's text."""
    return " ".join(args[:2])


def clip(text: str, limit: int = 500) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def unavailable(binary: str, args: Sequence[str], exc: Exception) -> AgentError:
    return AgentError(
        f"could not run {binary!r}: {exc}", code="herdr_unavailable", binary=binary, command=command_line(args)
    )


def protocol_error(args: Sequence[str], why: str) -> AgentError:
    return AgentError(
        f"herdr {command_line(args)}: unexpected answer: {why}", code="herdr_protocol", command=command_line(args)
    )


def check_answer(completed: Completed, args: Sequence[str], *, json_out: bool = True) -> None:
    """Raise the corral error for a failed herdr call.

    Herdr prints ``{"id", "error": {"code", "message"}}`` on stderr and exits 1; a JSON answer with
    exit 0 is checked for an error too. Exit 2 is the client's own refusal, in plain text.
    """
    command = command_line(args)
    if completed.returncode == 0:
        error = _error_in(completed.stdout) if json_out else None
        if error is None:
            return
        herdr_code, message = error
        raise _mapped(herdr_code, f"herdr {command}: {herdr_code}: {message}", command=command)
    stderr = completed.stderr.decode("utf-8", errors="replace").strip()
    if completed.returncode == 2:
        raise AgentError(f"herdr {command}: usage error: {clip(stderr)}", code="herdr_usage", command=command)
    error = _error_in(completed.stderr) or _error_in(completed.stdout)
    if error is None:
        raise AgentError(
            f"herdr {command} exited {completed.returncode}: {clip(stderr) or '(no error output)'}",
            code="herdr_protocol",
            command=command,
            exit_status=completed.returncode,
        )
    herdr_code, message = error
    raise _mapped(herdr_code, f"herdr {command}: {herdr_code}: {message}", command=command)


def _error_in(output: bytes) -> tuple[str, str] | None:
    """``(code, message)`` of the JSON error in ``output`` (all of it, or else its last line), if any."""
    text = output.decode("utf-8", errors="replace").strip()
    lines = text.splitlines()
    for candidate in (text, lines[-1] if lines else ""):
        try:
            document = json.loads(candidate)
        except ValueError:
            continue
        error = document.get("error") if isinstance(document, dict) else None
        if isinstance(error, dict) and isinstance(error.get("code"), str):
            return error["code"], str(error.get("message", ""))
        return None
    return None


def _mapped(herdr_code: str, message: str, **details: Any) -> CorralError:
    """The corral error for one of Herdr's error codes (its code kept in ``details["herdr_code"]``)."""
    details["herdr_code"] = herdr_code
    if herdr_code in GONE_CODES:
        return AgentGoneError(message, **details)
    if herdr_code == "unsupported_agent_kind":
        return AgentKindError(message, **details)
    if herdr_code == "precondition_failed":
        return AgentBusyError(f"{message}; {MAPPED_CODES[herdr_code][1]}", code="agent_moved", **details)
    if herdr_code in MAPPED_CODES:
        code, next_step = MAPPED_CODES[herdr_code]
        return AgentError(f"{message}; {next_step}", code=code, **details)
    return AgentError(message, code="herdr_error", **details)


def answer(completed: Completed, key: str, args: Sequence[str]) -> Any:
    """``result[key]`` from a successful call's stdout."""
    try:
        document = json.loads(completed.stdout)
        return document["result"][key]
    except (ValueError, KeyError, TypeError):
        text = completed.stdout.decode("utf-8", errors="replace")
        raise protocol_error(args, f"expected JSON with result.{key}, got {clip(text)!r}") from None
