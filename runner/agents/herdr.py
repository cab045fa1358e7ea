"""The Herdr agent host: agents in panes of the Herdr terminal multiplexer, driven through its CLI.

Every operation runs the ``herdr`` executable with a fixed argv (never a shell; a prompt is one argv
element) and reads its JSON: success is ``{"id", "result": {...}}`` on stdout with exit 0; a refusal
is ``{"id", "error": {"code", "message"}}`` on stderr with exit 1 (also honoured on stdout with exit
0); the client's own usage errors are plain text with exit 2. The commands used (Herdr 0.8.2)::

    tab create [--workspace W] --cwd DIR --label NAME --no-focus   -> result.root_pane.pane_id
    agent start NAME --kind K --pane P --timeout MS [-- ARGS]      -> waits until interactive_ready
    agent get P | agent list                                       -> result.agent | result.agents
    agent prompt P TEXT --wait --until working --timeout MS        -> result.agent (else: agent get)
    agent wait P --until S [--until S]... --timeout MS             -> once one of the S is shown
    agent read P --source recent --lines N                         -> plain text on stdout
    pane close P                                                   (unconditional in 0.8.2)
    --version                                                      -> "herdr X.Y.Z"

An agent record always has ``pane_id``, ``terminal_id``, ``agent_status`` and ``state_change_seq``;
``name``, ``agent`` (the kind) and ``cwd`` are optional (Herdr lists agents nobody named, and a
restart loses every name): an unnamed agent is observed with name ``""`` (no lease has an empty
name, so it never matches one), a missing kind as ``"unknown"`` and a missing cwd as ``""``.

Cursors: ``state_change_seq`` is the value of one counter for the whole Herdr server at *this*
agent's last status change, so it moves only when the agent changes, but by jumps, and it starts
again from zero when the server restarts. ``terminal_id`` names the pane's terminal and is never
reused; it changes on a restart and is kept as :attr:`Observation.terminal_id`. Herdr's own
``revision`` counts title and metadata changes, not status changes, so it is *not*
:attr:`Observation.revision` (None here). See docs/hosts.md.

Waits are event-driven: one ``agent wait`` process per target, waiting for any status other than
the one just observed (``--until`` repeated), then the agent is observed again; a wait returns only
a settled state strictly after its cursor. Herdr's ``agent_not_running`` (the pane closed or its
agent left) is :class:`AgentGoneError`.

Herdr reports an agent's kind in its own words (``herdr_kind``); it is mapped back to the one corral
kind that uses that word, so two corral kinds may not share a Herdr kind (they could not be told apart).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

import anyio

from runner.agents.abc import (
    NAME_PATTERN,
    STATUSES,
    AgentBusyError,
    AgentError,
    AgentGoneError,
    AgentHost,
    AgentKindError,
    Expect,
    Observation,
    StartOptions,
    WaitTimeoutError,
    check_promptable,
)
from runner.agents.herdr_cli import (
    GRACE,
    MAPPED_CODES,
    NOT_DELIVERED_CODES,
    CommandRunner,
    Completed,
    SubprocessRunner,
    answer,
    check_answer,
    clip,
    command_line,
    herdr_binary,
    ms,
    optional_text,
    parse_version,
    protocol_error,
    start_timeout_ms,
    unavailable,
)
from runner.agents.kinds import Kind, Kinds
from runner.context import Gate
from runner.errors import CorralError, InputError
from runner.log import get_logger

logger = get_logger(__name__)  # imports logging only to log (cold start)

BUSY_RETRY = 0.1  # seconds between agent starts while Herdr says the new pane is busy
MAX_PROMPT_BYTES = 128 * 1024 - 1  # Linux refuses a longer single argv element (MAX_ARG_STRLEN)
# Herdr's prompt effect gate (src/api/wait.rs): a prompt whose agent shows no change within 5 s is
# ``agent_prompt_stalled``; corral's prompt timeout must be longer for that answer to be given.
PROMPT_EFFECT_SECONDS = 5.0
# The first Herdr version whose ``pane close`` takes an expected terminal and cursor (upstream issue
# 4031). None: no release has one yet (0.8.2 has not), so the plain close after the gate is used.
CONDITIONAL_CLOSE_SINCE: tuple[int, ...] | None = None
UNKNOWN_KIND = "unknown"  # the kind of an agent Herdr has not identified


class HerdrHost(AgentHost):
    """Agents in Herdr panes, one new tab per agent.

    Args:
        kinds: the configured kinds; a kind's ``herdr_kind`` (default: its name) is what Herdr runs.
        binary: the ``herdr`` executable (default: :func:`herdr_binary`).
        workspace: the Herdr workspace new tabs go into (default: ``$HERDR_WORKSPACE_ID`` when
            corral runs inside Herdr, else Herdr's own default).
        busy_timeout: how long to keep retrying ``agent start`` while Herdr says the new pane is busy.
        runner: runs herdr (default: :class:`SubprocessRunner`); tests may record or replace calls.
        start_timeout: the ``--timeout`` given to ``agent start`` (over 3 s, at most 300 s: Herdr's bounds).
        prompt_timeout: how long ``agent prompt`` may take to see the agent ``working`` (over 5 s, so
            that a prompt Herdr typed without effect is told apart as ``agent_prompt_stalled``).
        call_timeout: the limit on any other herdr call.
        wait_slice: the longest single ``agent wait`` before the agent is observed afresh (bounds the
            cost of a change that happened between an observation and the start of a wait).
        conditional_close: use ``pane close`` with an expected terminal and cursor. None: when the
            Herdr version offers it (:data:`CONDITIONAL_CLOSE_SINCE`; none does yet).
    """

    confines_writes: ClassVar[bool] = False
    """Herdr runs the kind in a pane as the user: writer lanes get the scope hook."""

    name = "herdr"

    def __init__(
        self,
        kinds: Kinds,
        binary: str | None = None,
        workspace: str | None = None,
        busy_timeout: float = 10.0,
        runner: CommandRunner | None = None,
        *,
        start_timeout: float = 30.0,
        prompt_timeout: float = 30.0,
        call_timeout: float = 30.0,
        wait_slice: float = 3.0,
        conditional_close: bool | None = None,
        journal: Callable[[], Path] | None = None,
    ) -> None:
        self.kinds = kinds
        # Where a start records the pane it created before the agent in it exists (a pane
        # without an agent is invisible to `agent list`), so reconcile can close it after a kill -9.
        self._journal = journal
        self.binary = herdr_binary(binary)
        self.workspace = workspace or os.environ.get("HERDR_WORKSPACE_ID") or None
        # The pane corral itself runs in, when it runs inside Herdr: reported by describe() so that
        # nothing corral does closes its own coordinator's pane.
        self.own_pane = os.environ.get("HERDR_PANE_ID") or None
        # Herdr's client finds its server through this (else its default socket); passed on as is.
        self.socket_path = os.environ.get("HERDR_SOCKET_PATH") or None
        self.busy_timeout = busy_timeout
        self.runner: CommandRunner = runner or SubprocessRunner()
        self.start_timeout_ms = start_timeout_ms(start_timeout)
        self.start_timeout = self.start_timeout_ms / 1000
        if prompt_timeout <= PROMPT_EFFECT_SECONDS:
            raise InputError("prompt_timeout", f"{prompt_timeout:g} s: must be over {PROMPT_EFFECT_SECONDS:g} s")
        self.prompt_timeout = prompt_timeout
        self.call_timeout = call_timeout
        self.wait_slice = wait_slice
        self._conditional_close = conditional_close

    # --- calling herdr -----------------------------------------------------------------------------

    def _call(self, args: Sequence[str], timeout: float | None = None, *, json_out: bool = True) -> Completed:
        argv = [self.binary, *args]
        try:
            completed = self.runner.run(argv, timeout or self.call_timeout)
        except TimeoutError as exc:  # before OSError, of which it is a subclass
            raise AgentError(
                f"herdr {command_line(args)}: {exc}", code="herdr_timeout", command=command_line(args)
            ) from None
        except (OSError, ValueError) as exc:
            raise unavailable(self.binary, args, exc) from None
        check_answer(completed, args, json_out=json_out)
        return completed

    async def _call_async(self, args: Sequence[str], timeout: float) -> Completed:
        argv = [self.binary, *args]
        try:
            completed = await self.runner.run_async(argv, timeout)
        except TimeoutError as exc:  # before OSError, of which it is a subclass
            raise AgentError(
                f"herdr {command_line(args)}: {exc}", code="herdr_timeout", command=command_line(args)
            ) from None
        except (OSError, ValueError) as exc:
            raise unavailable(self.binary, args, exc) from None
        check_answer(completed, args)
        return completed

    def version(self) -> tuple[int, ...] | None:
        """The Herdr version (``herdr --version``), or None if it says none."""
        completed = self._call(["--version"], json_out=False)
        return parse_version(completed.stdout.decode("utf-8", errors="replace"))

    def conditional_close(self) -> bool:
        """Whether ``pane close`` can be told the terminal and cursor it must still find."""
        if self._conditional_close is None:
            if CONDITIONAL_CLOSE_SINCE is None:
                self._conditional_close = False  # no Herdr release offers it: do not even ask
            else:
                found = self.version()
                self._conditional_close = found is not None and found >= CONDITIONAL_CLOSE_SINCE
        return self._conditional_close

    # --- observing ---------------------------------------------------------------------------------

    def get(self, pane_id: str) -> Observation:
        return self._observation(answer(self._call(["agent", "get", pane_id]), "agent", ["agent", "get"]))

    async def _get_async(self, pane_id: str) -> Observation:
        completed = await self._call_async(["agent", "get", pane_id], self.call_timeout)
        return self._observation(answer(completed, "agent", ["agent", "get"]))

    def list(self) -> list[Observation]:
        agents = answer(self._call(["agent", "list"]), "agents", ["agent", "list"])
        if not isinstance(agents, list):
            raise protocol_error(["agent", "list"], "result.agents is not a list")
        return [self._observation(agent) for agent in agents]

    def read(self, pane_id: str, lines: int) -> str:
        args = ["agent", "read", pane_id, "--source", "recent", "--lines", str(max(1, lines))]
        completed = self._call(args, json_out=False)
        text = completed.stdout.decode("utf-8", errors="replace")
        if lines <= 0:
            return ""
        kept = text.splitlines()
        if len(kept) <= lines:
            return text
        return "\n".join(kept[-lines:]) + ("\n" if text.endswith("\n") else "")

    async def wait(self, pane_id: str, after_seq: int, timeout: float) -> Observation:
        deadline = time.monotonic() + timeout
        while True:
            began = time.monotonic()
            observation = await self._get_async(pane_id)
            if observation.seq > after_seq and observation.settled:
                return observation
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise WaitTimeoutError(
                    f"agent {pane_id!r} did not settle after seq {after_seq} within {timeout:g} s "
                    f"(now {observation.status} at seq {observation.seq})",
                    pane_id=pane_id,
                    after_seq=after_seq,
                    status=observation.status,
                    seq=observation.seq,
                )
            # Any status but the one just seen: from a settled state at or before the cursor that is
            # first of all ``working``, but a prompt that finishes before the wait starts shows as
            # a settled status too, and Herdr counts a status seen in passing.
            await self._wait_change(
                pane_id, [s for s in STATUSES if s != observation.status], min(remaining, self.wait_slice)
            )
            if time.monotonic() - began < 0.01:
                await anyio.sleep(0.01)  # a herdr that answers at once without a change must not spin us

    async def _wait_change(self, pane_id: str, statuses: Sequence[str], limit: float) -> None:
        """One ``agent wait`` until any of ``statuses`` or ``limit`` seconds; Herdr's ``timeout`` is no error.

        Raises:
            AgentGoneError: the pane closed or its agent left (Herdr's ``agent_not_running``).
        """
        args = ["agent", "wait", pane_id]
        for status in statuses:
            args += ["--until", status]
        args += ["--timeout", ms(limit)]
        try:
            await self._call_async(args, limit + GRACE)
        except AgentError as exc:
            if exc.details.get("herdr_code") != "timeout":
                raise

    # --- acting ------------------------------------------------------------------------------------

    def start(
        self,
        name: str,
        kind: str,
        cwd: str,
        options: StartOptions,
        gate: Gate | None = None,
        nonce: str | None = None,
    ) -> Observation:
        # Herdr keeps no start nonce: reconcile finds a half-started agent by name, kind and cwd, and a
        # pane whose agent never started through the start journal (started_pane).
        spec = self.kinds.get(kind)
        spec.check_options(options)
        herdr_kind = self._herdr_kind(spec)
        if not re.fullmatch(NAME_PATTERN, name):
            raise InputError("name", f"{name!r} is not an agent name (pattern {NAME_PATTERN})")
        args = ["tab", "create"]
        if self.workspace:
            args += ["--workspace", self.workspace]
        args += ["--cwd", cwd, "--label", name, "--no-focus"]
        if gate is not None:
            gate()  # Herdr cannot be atomic with the store: the last check before the pane exists
        created = answer(self._call(args), "root_pane", ["tab", "create"])
        pane_id = created.get("pane_id") if isinstance(created, dict) else None
        if not isinstance(pane_id, str) or not pane_id:
            raise protocol_error(["tab", "create"], "result.root_pane.pane_id is missing")
        from runner import faults  # test-only crash points: the pane exists, no lease records it yet

        self._note_start(nonce, pane_id)
        faults.point("agent.start:pane")
        try:
            self._start_in(pane_id, name, spec, herdr_kind, options)
            faults.point("agent.start:agent")
            observed = self.get(pane_id)
            self._forget_start(nonce)
            return observed
        except AgentKindError:
            self._close_after_failed_start(pane_id)
            self._forget_start(nonce)
            raise
        except AgentError as exc:
            exc.details["pane_id"] = pane_id  # the caller closes it: the journal need not remember it
            self._forget_start(nonce)
            raise
        except CorralError as exc:
            self._forget_start(nonce)
            raise AgentError(
                f"agent {name!r} did not start in pane {pane_id}: {exc.message}",
                code="agent_start_failed",
                pane_id=pane_id,
                cause=exc.to_dict(),
            ) from None

    def _start_in(self, pane_id: str, name: str, spec: Kind, herdr_kind: str, options: StartOptions) -> None:
        args = [
            "agent",
            "start",
            name,
            "--kind",
            herdr_kind,
            "--pane",
            pane_id,
            "--timeout",
            str(self.start_timeout_ms),
        ]
        extra: list[str] = []
        for option, flag in sorted(spec.options.items()):
            value = getattr(options, option, None)
            if value is not None:
                extra += [flag, value]
        if extra:
            args += ["--", *extra]
        deadline = time.monotonic() + self.busy_timeout
        attempts = 0
        while True:
            attempts += 1
            try:
                self._call(args, self.start_timeout + GRACE)
                return
            except AgentError as exc:
                herdr_code = exc.details.get("herdr_code")
                if exc.code == "herdr_usage" and "unsupported interactive agent kind" in exc.message:
                    # Herdr's client refuses a kind it does not know, in plain text with exit 2.
                    raise AgentKindError(
                        f"herdr does not run agent kind {herdr_kind!r} (corral kind {spec.name!r}): {exc.message}; "
                        "set the kind's herdr_kind to one Herdr knows",
                        kind=spec.name,
                        herdr_kind=herdr_kind,
                    ) from None
                if herdr_code == "timeout":
                    raise AgentError(
                        f"agent {name!r} did not become ready in pane {pane_id} within {self.start_timeout:g} s; "
                        f"read the pane, then close it and start again (or give a longer start timeout)",
                        code="agent_start_timeout",
                        herdr_code=herdr_code,
                        pane_id=pane_id,
                    ) from None
                if herdr_code != "agent_pane_busy":
                    raise
                if time.monotonic() + BUSY_RETRY > deadline:
                    raise AgentError(
                        f"pane {pane_id} stayed busy for {self.busy_timeout:g} s ({attempts} attempts to start "
                        f"agent {name!r}); close the pane and start again",
                        code="agent_pane_busy",
                        pane_id=pane_id,
                        attempts=attempts,
                        herdr_code="agent_pane_busy",
                    ) from None
            time.sleep(BUSY_RETRY)

    # --- the start journal -----------------------------------------------------------------------------

    def _journal_file(self, nonce: str | None) -> Path | None:
        if self._journal is None or nonce is None or not nonce.isalnum():
            return None
        return self._journal() / f"start-{nonce}.json"

    def _note_start(self, nonce: str | None, pane_id: str) -> None:
        """Record the pane of start ``nonce`` before its agent starts (written whole, then renamed)."""
        path = self._journal_file(nonce)
        if path is None:
            return
        partial = path.with_suffix(".tmp")
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump({"pane_id": pane_id}, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(partial, path)

    def _forget_start(self, nonce: str | None) -> None:
        path = self._journal_file(nonce)
        if path is not None:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    def started_pane(self, nonce: str) -> str | None:
        path = self._journal_file(nonce)
        if path is None:
            return None
        try:
            with open(path, encoding="utf-8") as handle:
                pane_id = json.load(handle).get("pane_id")
        except (OSError, ValueError, AttributeError):
            return None
        return pane_id if isinstance(pane_id, str) and pane_id else None

    def abandon_start(self, nonce: str) -> str | None:
        pane_id = self.started_pane(nonce)
        if pane_id is None:
            return None
        if pane_id == self.own_pane:
            raise AgentError(f"the journal names corral's own pane {pane_id}", code="pane_protected", pane_id=pane_id)
        self.close(pane_id)  # a pane already gone is fine
        self._forget_start(nonce)
        return pane_id

    def _close_after_failed_start(self, pane_id: str) -> None:
        """Close the pane of a start Herdr refused for its kind; if that fails the caller must close it."""
        try:
            self.close(pane_id)
        except CorralError as exc:
            raise AgentError(
                f"herdr does not run this kind, and closing pane {pane_id} failed: {exc.message}",
                code="agent_kind_unknown",
                pane_id=pane_id,
            ) from None

    def prompt(
        self,
        pane_id: str,
        text: str,
        expect: Expect | None = None,
        gate: Gate | None = None,
        schema: str | None = None,
    ) -> Observation:
        if schema is not None:
            raise AgentError(
                "a Herdr pane runs its agent interactively: corral cannot ask it for an answer matching a schema",
                code="agent_schema_unsupported",
                pane_id=pane_id,
                delivered=False,
            )
        if not text or "\x00" in text or len(text.encode("utf-8", errors="surrogatepass")) > MAX_PROMPT_BYTES:
            raise AgentError(
                f"the prompt cannot be passed to herdr as one argument (empty, a NUL byte, or over "
                f"{MAX_PROMPT_BYTES} bytes)",
                code="prompt_invalid",
                pane_id=pane_id,
                delivered=False,
            )
        # Herdr types into a working agent (it refuses only a blocked or launching one), so the
        # settled, promptable state is confirmed here, on a fresh read, immediately before the gate.
        check_promptable(self.get(pane_id), expect)
        args = ["agent", "prompt", pane_id, text, "--wait", "--until", "working", "--timeout"]
        args.append(ms(self.prompt_timeout))
        if gate is not None:
            # Herdr cannot be atomic with the store: this is the last check before the prompt is typed.
            # The window left is the time from this transaction's commit to herdr typing the text
            # (one process start); a fence moved inside it is not seen (docs/security.md).
            gate()
        try:
            completed = self._call(args, self.prompt_timeout + GRACE)
        except AgentGoneError as exc:
            # agent_not_found is answered before typing; agent_not_running only after it.
            exc.details["delivered"] = False if exc.details.get("herdr_code") != "agent_not_running" else None
            exc.details["pane_id"] = pane_id
            raise
        except AgentError as exc:
            herdr_code = exc.details.get("herdr_code")
            if herdr_code in NOT_DELIVERED_CODES:
                raise AgentBusyError(
                    f"agent {pane_id!r} did not take the prompt: {exc.message}",
                    code=MAPPED_CODES.get(str(herdr_code), ("agent_busy", ""))[0],
                    pane_id=pane_id,
                    herdr_code=herdr_code,
                    delivered=False,
                ) from None
            # Herdr refused the command line or never ran: nothing was typed. Anything else (a stall,
            # a timeout, a failure mid-way) may have typed some or all of it.
            exc.details["delivered"] = False if exc.code in ("herdr_usage", "herdr_unavailable") else None
            exc.details["pane_id"] = pane_id
            raise
        try:
            return self._observation(answer(completed, "agent", ["agent", "prompt"]))
        except AgentError:
            # Herdr took the prompt and saw the agent working, but its answer carries no full agent
            # record: observe afresh. The caller still judges delivery on the agent ``working`` past
            # the cursor seen before.
            logger.debug("herdr agent prompt %s: no agent record in the answer; observing again", pane_id)
        try:
            return self.get(pane_id)
        except CorralError as exc:
            exc.details["delivered"] = None  # herdr said yes, but the agent cannot be seen
            exc.details.setdefault("pane_id", pane_id)
            raise

    def close(self, pane_id: str, gate: Gate | None = None) -> None:
        args = ["pane", "close", pane_id]
        if self.conditional_close():
            # Bind the close to the agent as it is now, so that the close itself refuses a pane whose
            # terminal was replaced or whose agent moved on after this read and the gate.
            try:
                seen = self.get(pane_id)
            except AgentGoneError:
                seen = None
            if seen is not None and seen.terminal_id is not None:
                args += ["--if-terminal-id", seen.terminal_id, "--if-state-change-seq", str(seen.seq)]
        if gate is not None:
            gate()  # not atomic with the store; without a conditional close Herdr's close is unconditional
        try:
            self._call(args)
        except AgentGoneError:
            return

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "binary": self.binary,
            "workspace": self.workspace,
            "own_pane_id": self.own_pane,
            "socket_path": self.socket_path,
            "kinds": self.kinds.names(),
        }

    # --- kinds and observations --------------------------------------------------------------------

    def _herdr_kind(self, spec: Kind) -> str:
        """The Herdr kind for ``spec``; refused if another corral kind would be reported the same way."""
        herdr_kind = spec.herdr_kind or spec.name
        sharing: list[str] = [
            k.name for k in self.kinds if (k.herdr_kind or k.name) == herdr_kind and k.name != spec.name
        ]
        if sharing:
            raise AgentKindError(
                f"agent kind {spec.name!r} runs as herdr kind {herdr_kind!r}, as do {', '.join(sharing)}; "
                "herdr could not tell them apart",
                code="agent_kind_ambiguous",
                kind=spec.name,
                herdr_kind=herdr_kind,
            )
        return herdr_kind

    def _corral_kind(self, herdr_kind: str) -> str:
        """The corral kind that runs as ``herdr_kind`` (itself, if none does: an agent corral did not start)."""
        matching: list[str] = [k.name for k in self.kinds if (k.herdr_kind or k.name) == herdr_kind]
        if len(matching) == 1:
            return matching[0]
        return herdr_kind

    def _observation(self, raw: Any) -> Observation:
        if not isinstance(raw, dict):
            raise protocol_error(["agent"], "an agent is not a JSON object")
        pane_id, status, seq = (raw.get(k) for k in ("pane_id", "agent_status", "state_change_seq"))
        if not (isinstance(pane_id, str) and pane_id and isinstance(status, str)):
            raise protocol_error(["agent"], f"an agent lacks pane_id or agent_status: {clip(json.dumps(raw))}")
        seq = 0 if seq is None else seq  # Herdr omits nothing here, but its schema defaults it to 0
        if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
            raise protocol_error(["agent"], f"agent {pane_id} has no integer state_change_seq")
        # Optional in Herdr's AgentInfo: an agent nobody named, or not yet identified, is listed too.
        name = optional_text(raw, "name", pane_id)
        herdr_kind = optional_text(raw, "agent", pane_id) or optional_text(raw, "kind", pane_id)
        cwd = optional_text(raw, "cwd", pane_id)
        terminal_id = raw.get("terminal_id")
        if terminal_id is not None and not (isinstance(terminal_id, str) and terminal_id):
            raise protocol_error(["agent"], f"agent {pane_id} has a terminal_id that is not a string")
        if status not in STATUSES:
            logger.warning("herdr reported status %r for %s; treating it as unknown", status, pane_id)
            status = "unknown"
        kind = self._corral_kind(herdr_kind) if herdr_kind else UNKNOWN_KIND
        # revision stays None: Herdr's own ``revision`` counts title and metadata changes, not this
        # agent's status changes, so it cannot stand for Observation.revision.
        return Observation(pane_id, name, kind, cwd, status, seq, terminal_id=terminal_id)
