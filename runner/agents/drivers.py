"""Agent drivers: how one agent CLI is run for one prompt, and how its machine output is read.

A kind (``runner.agents.kinds``) names a driver. The driver turns a :class:`RunSpec` (the role,
the conversation to start or continue, the scopes a writer owns, the limits, a verdict schema) into
the CLI's argv, and reads what the CLI printed into a :class:`RunResult`: the final message, the
session id, usage and cost, turns, tool calls, file changes and every permission denial (tool and
path, never contents), and whether the run failed or its session was lost.

Built-ins:

- ``claude`` (Claude Code in print mode): ``-p`` with the prompt on standard input, ``--output-format
  stream-json --verbose``; ``--session-id`` for a lease's first prompt and ``--resume`` after it;
  ``--permission-mode dontAsk`` (only pre-approved tools run) with the allow rules of the role: a
  reviewer reads, a writer edits its owned scopes inside its worktree (``Edit(//path/**)`` rules,
  the locked scopes denied), nobody gets ``Bash``; ``--max-turns`` / ``--max-budget-usd``;
  ``--json-schema``.
- ``codex`` (``codex exec``): ``--json`` with the prompt on standard input (``-``), ``exec resume
  THREAD`` after the first prompt (the ``thread_id`` of ``thread.started``); ``-c
  sandbox_mode="read-only"`` for a reviewer and ``"workspace-write"`` (rooted at the worktree, the
  agent's cwd; ``/tmp``, ``$TMPDIR`` and the network excluded) for a writer; ``-c
  approval_policy="never"``; ``--output-schema``. Usage is the difference of the thread's running
  totals. Codex cannot confine a writer to its owned scopes inside the worktree, nor enforce a turn
  or cost limit (it reports no cost): corral's budget check and the release's scope checks stand for
  them. A sandbox-refused ``apply_patch`` is a denial without a path (codex logs the reason only); a
  shell write the sandbox refused leaves no trace in ``--json`` at all.
- ``script`` and ``plain``: the command as configured, output as printed (the scripted demo agent;
  an ``agents.yaml`` kind without a driver).

Drivers are pure: no I/O beyond building strings; the supervisor runs the command and hands the
output here. The prompt is never part of an argv.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

READ_TOOLS = ("Read", "Grep", "Glob", "LS")
"""The Claude Code tools a reviewer is granted: reading only."""
EDIT_TOOLS = frozenset({"Write", "Edit", "MultiEdit", "NotebookEdit"})
WIDE_MODES = frozenset({"bypassPermissions"})


@dataclass(frozen=True)
class RunSpec:
    """What one prompt's run needs from its lease."""

    role: str = "agent"
    """``reviewer`` (reads), ``writer`` (edits its owned scopes) or ``agent`` (a kind's defaults)."""
    cwd: str = "."
    session_id: str | None = None
    """The conversation to continue (``None``: the lease's first prompt starts one)."""
    new_session_id: str | None = None
    """The id corral chose for a new conversation, where the CLI takes one (Claude)."""
    owned: tuple[str, ...] = ()
    locked: tuple[str, ...] = ()
    max_turns: int | None = None
    budget_usd: float | None = None
    schema: str | None = None
    """A verdict schema as JSON text (Claude takes the text, Codex a file: ``schema_path``)."""
    schema_path: str | None = None
    model: str | None = None
    effort: str | None = None
    unconfined: bool = False
    """The kind's explicit wider grant (``agents.yaml`` ``unconfined: true``): shown in ``status``."""
    session_usage: dict[str, int] | None = None
    """The conversation's usage totals after its previous run, for a CLI that reports running totals
    rather than each run's (Codex): this run's usage is the difference."""


@dataclass
class RunResult:
    """What a run produced, read from the CLI's machine output."""

    final: str = ""
    session_id: str | None = None
    usage: dict[str, int] = field(default_factory=dict)
    cost_usd: float | None = None
    turns: int | None = None
    duration_ms: int | None = None
    tool_calls: int = 0
    file_changes: list[str] = field(default_factory=list)
    denials: list[dict[str, str]] = field(default_factory=list)
    error: str | None = None
    session_lost: bool = False
    structured: Any = None
    session_usage: dict[str, int] = field(default_factory=dict)
    """The conversation's usage totals after this run, where the CLI reports them (Codex), else empty."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "final": self.final,
            "session_id": self.session_id,
            "usage": dict(self.usage),
            "cost_usd": self.cost_usd,
            "turns": self.turns,
            "duration_ms": self.duration_ms,
            "tool_calls": self.tool_calls,
            "file_changes": list(self.file_changes),
            "denials": [dict(d) for d in self.denials],
            "error": self.error,
            "session_lost": self.session_lost,
            "structured": self.structured,
            "session_usage": dict(self.session_usage),
        }

    @property
    def tokens(self) -> int:
        """Every token the run spent (input, output and cache)."""
        return sum(v for v in self.usage.values() if isinstance(v, int))


def _json_lines(lines: Iterable[str]) -> tuple[list[dict[str, Any]], list[str]]:
    """The JSON objects of a machine output, and the lines that were not JSON (the CLI's own words)."""
    events: list[dict[str, Any]] = []
    other: list[str] = []
    for line in lines:
        text = line.strip()
        if not text:
            continue
        if text.startswith("{"):
            try:
                value = json.loads(text)
            except ValueError:
                other.append(text)
                continue
            if isinstance(value, dict):
                events.append(value)
                continue
        other.append(text)
    return events, other


def _inside(path: str, root: str) -> bool:
    real = os.path.normpath(path if os.path.isabs(path) else os.path.join(root, path))
    return real == root or real.startswith(root.rstrip("/") + "/")


def _relative(path: str, cwd: str) -> str:
    """A path as the coordinator reads it: relative to the agent's cwd when inside it."""
    if not path:
        return path
    full = os.path.normpath(path if os.path.isabs(path) else os.path.join(cwd, path))
    return os.path.relpath(full, cwd) if _inside(full, cwd) else full


class Driver:
    """The plain driver: the kind's argv as configured; the output is what the command printed."""

    name = "plain"
    structured = False
    """Whether the CLI prints machine output this driver reads (``parse`` means something)."""
    takes_session_id = False
    """Whether corral chooses a new conversation's id (Claude) or learns it from the output (Codex)."""

    @property
    def takes_schema(self) -> bool:
        """Whether a run can be asked for an answer matching a verdict schema (``ask --schema``)."""
        return self.structured

    def argv(self, base: Sequence[str], spec: RunSpec) -> list[str]:
        return list(base)

    def parse(self, lines: Sequence[str], spec: RunSpec) -> RunResult:
        return RunResult(final="\n".join(lines))

    def progress(self, lines: Sequence[str], spec: RunSpec) -> list[str]:
        """One line per tool call or file change so far (names and paths, never contents)."""
        return []

    def progress_step(self, lines: Sequence[str], spec: RunSpec, memo: dict[str, Any]) -> list[str]:
        """The progress lines of a run's log read in pieces: ``lines`` are the complete lines after those
        already read, ``memo`` what the earlier pieces taught (kept by the caller between calls, empty at
        the start). By default each line stands alone (:meth:`progress`)."""
        return self.progress(lines, spec)

    own_sandbox = False
    """Whether the CLI confines its own tools' writes to its workspace with an OS sandbox of its own
    (Codex): corral's Bubblewrap then opens the whole worktree to it as one mount (locked scopes and
    ``.git`` read-only), since that sandbox cannot write through a mount nested in a read-only one."""

    def confinement(self, spec: RunSpec) -> str:
        """How this run's permissions are enforced, for ``status`` (``unconfined`` when widened)."""
        return "unconfined" if spec.unconfined else "none"

    def state_dirs(self, env: Mapping[str, str]) -> list[str]:
        """The directories the CLI keeps its own state in (sessions, config, logs), given the agent's
        environment: writable inside the process host's confinement (made when missing). None here."""
        return []

    def state_files(self, env: Mapping[str, str]) -> list[str]:
        """Single files of the CLI's own state, writable inside the confinement when they exist."""
        return []


class ScriptDriver(Driver):
    """The bundled scripted agent: corral's own, whose output is plain text; given a verdict schema
    (``--schema FILE``) it answers with a JSON verdict instead (:mod:`runner.agents.demo_agent`)."""

    name = "script"

    @property
    def takes_schema(self) -> bool:
        return True

    def argv(self, base: Sequence[str], spec: RunSpec) -> list[str]:
        return [*base, "--schema", spec.schema_path] if spec.schema_path is not None else list(base)


class ClaudeDriver(Driver):
    """Claude Code in print mode (``claude -p``), read through ``--output-format stream-json``."""

    name = "claude"
    structured = True
    takes_session_id = True

    def permissions(self, spec: RunSpec) -> dict[str, Any]:
        """The settings' permission rules of the role: a reviewer reads; a writer edits its owned scopes."""
        allow: list[str] = list(READ_TOOLS)
        deny: list[str] = ["Bash", "WebFetch"]
        root = os.path.normpath(spec.cwd)
        if spec.role == "writer":
            for scope in spec.owned:
                target = os.path.normpath(os.path.join(root, scope))
                allow += [f"Edit(/{target})", f"Edit(/{target}/**)"]
            for scope in spec.locked:
                target = os.path.normpath(os.path.join(root, scope))
                deny += [f"Edit(/{target})", f"Edit(/{target}/**)"]
        elif spec.role == "reviewer":
            deny += sorted(EDIT_TOOLS)
        return {"permissions": {"allow": allow, "deny": deny, "defaultMode": "dontAsk"}}

    def argv(self, base: Sequence[str], spec: RunSpec) -> list[str]:
        argv = list(base)
        if "-p" not in argv and "--print" not in argv:
            argv.append("-p")
        argv += ["--output-format", "stream-json", "--verbose"]
        if spec.session_id is not None:
            argv += ["--resume", spec.session_id]
        elif spec.new_session_id is not None:
            argv += ["--session-id", spec.new_session_id]
        if spec.unconfined:
            argv += ["--permission-mode", "bypassPermissions"]
        else:
            argv += ["--permission-mode", "dontAsk", "--settings", json.dumps(self.permissions(spec))]
            argv += ["--allowedTools", ",".join(self.allowed(spec))]
            if spec.role == "reviewer":
                argv += ["--disallowedTools", ",".join(["Bash", *sorted(EDIT_TOOLS)])]
        if spec.model is not None:
            argv += ["--model", spec.model]
        if spec.effort is not None:
            argv += ["--effort", spec.effort]
        if spec.max_turns is not None:
            argv += ["--max-turns", str(spec.max_turns)]
        if spec.budget_usd is not None:
            argv += ["--max-budget-usd", f"{spec.budget_usd:g}"]
        if spec.schema is not None:
            argv += ["--json-schema", spec.schema]
        return argv

    def allowed(self, spec: RunSpec) -> list[str]:
        rules = self.permissions(spec)["permissions"]["allow"]
        return [str(rule) for rule in rules]

    def parse(self, lines: Sequence[str], spec: RunSpec) -> RunResult:
        events, other = _json_lines(lines)
        out = RunResult()
        tool_names: dict[str, tuple[str, str]] = {}
        refused: dict[str, dict[str, str]] = {}
        for event in events:
            kind = event.get("type")
            if kind == "system" and isinstance(event.get("session_id"), str):
                out.session_id = event["session_id"]
            elif kind == "assistant":
                for block in _content(event):
                    if block.get("type") == "tool_use":
                        out.tool_calls += 1
                        name = str(block.get("name"))
                        path = _tool_path(block.get("input"))
                        tool_names[str(block.get("id"))] = (name, path)
            elif kind == "user":
                for block in _content(event):
                    if block.get("type") != "tool_result":
                        continue
                    use_id = str(block.get("tool_use_id"))
                    name, path = tool_names.get(use_id, ("", ""))
                    if not block.get("is_error"):
                        if name in EDIT_TOOLS and path:
                            rel = _relative(path, spec.cwd)
                            if rel not in out.file_changes:
                                out.file_changes.append(rel)
                    elif REFUSED_TOOL.search(_result_text(block.get("content"))):
                        # A tool the role does not have at all (a reviewer's Write) is refused by the CLI
                        # as unavailable, not listed in permission_denials: a denial all the same.
                        refused[use_id] = {"tool": name, "path": _relative(path, spec.cwd)}
            elif kind == "result":
                self._result(event, out, spec)
                listed = {
                    str(d.get("tool_use_id")) for d in event.get("permission_denials") or () if isinstance(d, dict)
                }
                out.denials += [d for use_id, d in refused.items() if use_id not in listed]
        if not any(e.get("type") == "result" for e in events):
            out.error = " ".join(other[-5:]) or "the CLI printed no result"
        if out.error is not None and spec.session_id is not None:
            # "No conversation found with session ID: …" (on stderr, and in the result's errors)
            out.session_lost = _lost([*other, out.error])
        return out

    def _result(self, event: Mapping[str, Any], out: RunResult, spec: RunSpec) -> None:
        if isinstance(event.get("session_id"), str):
            out.session_id = event["session_id"]
        result = event.get("result")
        out.final = result if isinstance(result, str) else ""
        usage = event.get("usage") if isinstance(event.get("usage"), dict) else {}
        assert isinstance(usage, dict)
        out.usage = {
            name: int(usage[key])
            for name, key in (
                ("input_tokens", "input_tokens"),
                ("output_tokens", "output_tokens"),
                ("cache_read_tokens", "cache_read_input_tokens"),
                ("cache_creation_tokens", "cache_creation_input_tokens"),
            )
            if isinstance(usage.get(key), int)
        }
        cost = event.get("total_cost_usd")
        out.cost_usd = float(cost) if isinstance(cost, (int, float)) else None
        turns = event.get("num_turns")
        out.turns = turns if isinstance(turns, int) else None
        duration = event.get("duration_ms")
        out.duration_ms = duration if isinstance(duration, int) else None
        for denial in event.get("permission_denials") or ():
            if isinstance(denial, dict):
                out.denials.append(
                    {
                        "tool": str(denial.get("tool_name")),
                        "path": _relative(_tool_path(denial.get("tool_input")), spec.cwd),
                    }
                )
        if isinstance(event.get("structured_output"), (dict, list)):
            out.structured = event["structured_output"]
        if event.get("is_error") or event.get("subtype") not in (None, "success"):
            errors = event.get("errors")
            said = "; ".join(str(e) for e in errors) if isinstance(errors, list) and errors else out.final
            out.error = said or str(event.get("subtype") or "the run failed")

    def progress(self, lines: Sequence[str], spec: RunSpec) -> list[str]:
        events, _ = _json_lines(lines)
        shown: list[str] = []
        for event in events:
            if event.get("type") == "assistant":
                for block in _content(event):
                    if block.get("type") == "tool_use":
                        path = _relative(_tool_path(block.get("input")), spec.cwd)
                        shown.append(f"tool {block.get('name')}" + (f" {path}" if path else ""))
        return shown

    def progress_step(self, lines: Sequence[str], spec: RunSpec, memo: dict[str, Any]) -> list[str]:
        """Each tool call as it is asked for, and each file an edit tool changed once its result says it
        succeeded (the tool's name and path are remembered in ``memo`` by its ``tool_use`` id)."""
        events, _ = _json_lines(lines)
        tools: dict[str, list[str]] = memo.setdefault("tools", {})
        shown: list[str] = []
        for event in events:
            kind = event.get("type")
            for block in _content(event) if kind in ("assistant", "user") else ():
                if kind == "assistant" and block.get("type") == "tool_use":
                    name, path = str(block.get("name")), _relative(_tool_path(block.get("input")), spec.cwd)
                    tools[str(block.get("id"))] = [name, path]
                    shown.append(f"tool {name}" + (f" {path}" if path else ""))
                elif kind == "user" and block.get("type") == "tool_result" and not block.get("is_error"):
                    name, path = tools.pop(str(block.get("tool_use_id")), ["", ""])
                    if name in EDIT_TOOLS and path:
                        shown.append(f"file {path}")
        return shown

    def confinement(self, spec: RunSpec) -> str:
        return "unconfined" if spec.unconfined else "cli-permissions"

    def state_dirs(self, env: Mapping[str, str]) -> list[str]:
        """``CLAUDE_CONFIG_DIR``, else ``~/.claude``."""
        if env.get("CLAUDE_CONFIG_DIR"):
            return [env["CLAUDE_CONFIG_DIR"]]
        return [os.path.join(env["HOME"], ".claude")] if env.get("HOME") else []

    def state_files(self, env: Mapping[str, str]) -> list[str]:
        """``~/.claude.json`` (Claude Code keeps it in ``CLAUDE_CONFIG_DIR`` when that is set)."""
        if env.get("CLAUDE_CONFIG_DIR") or not env.get("HOME"):
            return []
        return [os.path.join(env["HOME"], ".claude.json")]


def _content(event: Mapping[str, Any]) -> list[dict[str, Any]]:
    message = event.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    return [block for block in content if isinstance(block, dict)] if isinstance(content, list) else []


REFUSED_TOOL = re.compile(r"no such tool|not available|permission|denied|not allowed", re.I)


def _result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return ""


def _tool_path(tool_input: Any) -> str:
    if not isinstance(tool_input, dict):
        return ""
    for key in ("file_path", "path", "notebook_path"):
        value = tool_input.get(key)
        if isinstance(value, str):
            return value
    return ""


LOST = re.compile(r"no conversation found|session.*not found|not found.*session|thread.*not found|no rollout", re.I)


def _lost(words: Iterable[str]) -> bool:
    return any(LOST.search(line) for line in words)


DENIED = re.compile(r"read-only file system|permission denied|operation not permitted", re.I)
"""What a shell command's output says when the sandbox refused its write."""
PATCH_REJECTED = re.compile(r"error=patch rejected: (.+?)(?:; rejected by user approval settings)?\s*$")
"""codex's own log line (on stderr) when its sandbox refused an ``apply_patch``: in codex-cli 0.171 the
only trace of that refusal outside the model's input (``--json`` shows no item for it). It says why,
not which path."""
CODEX_USAGE = (
    ("input_tokens", "input_tokens"),
    ("output_tokens", "output_tokens"),
    ("cache_read_tokens", "cached_input_tokens"),
)


class CodexDriver(Driver):
    """``codex exec`` read through ``--json`` (JSON Lines of thread, turn and item events).

    Flags as ``codex exec --help`` (codex-cli 0.171.0) gives them: ``--json`` ("Print events to stdout
    as JSONL"), ``-`` ("If not provided as an argument (or if `-` is used), instructions are read from
    stdin"), ``--skip-git-repo-check``, ``--output-schema FILE``; ``codex exec resume SESSION_ID``
    takes the same except ``--sandbox``, so the sandbox is set with ``-c`` (a ``config.toml`` override,
    which both take) on every run.
    """

    name = "codex"
    structured = True
    own_sandbox = True

    def sandbox(self, spec: RunSpec) -> str:
        if spec.unconfined:
            return "danger-full-access"
        return "workspace-write" if spec.role == "writer" else "read-only"

    def config(self, spec: RunSpec) -> list[str]:
        """The role's ``-c key=value`` overrides (TOML values): the sandbox, and never an approval prompt
        (nobody is there to answer one: a refused action is refused)."""
        pairs = [("sandbox_mode", f'"{self.sandbox(spec)}"'), ("approval_policy", '"never"')]
        if self.sandbox(spec) == "workspace-write":
            # workspace-write also lets commands write /tmp and $TMPDIR unless told not to: a writer
            # writes its worktree (the agent's cwd, codex's workspace root) and nothing else; no network.
            pairs += [
                ("sandbox_workspace_write.exclude_slash_tmp", "true"),
                ("sandbox_workspace_write.exclude_tmpdir_env_var", "true"),
                ("sandbox_workspace_write.network_access", "false"),
            ]
        return [part for key, value in pairs for part in ("-c", f"{key}={value}")]

    def argv(self, base: Sequence[str], spec: RunSpec) -> list[str]:
        argv = [part for part in base if part != "-"]
        if "exec" not in argv:
            argv.append("exec")
        if spec.session_id is not None:
            argv += ["resume", spec.session_id]
        argv += ["--json", "--skip-git-repo-check", *self.config(spec)]
        if spec.model is not None:
            argv += ["--model", spec.model]
        if spec.schema_path is not None:
            argv += ["--output-schema", spec.schema_path]
        argv.append("-")
        return argv

    def parse(self, lines: Sequence[str], spec: RunSpec) -> RunResult:
        events, other = _json_lines(lines)
        out = RunResult(session_id=spec.session_id)
        total: dict[str, int] = {}
        turns = 0
        for event in events:
            kind = event.get("type")
            if kind == "thread.started" and isinstance(event.get("thread_id"), str):
                thread = event["thread_id"]
                if spec.session_id is not None and thread != spec.session_id:
                    # `resume NAME` that names no thread starts a fresh one: never taken as the old one.
                    out.session_lost = True
                    out.error = f"codex started thread {thread} instead of resuming {spec.session_id}"
                    continue
                out.session_id = thread
            elif kind == "turn.completed":
                turns += 1
                usage = event.get("usage") if isinstance(event.get("usage"), dict) else {}
                assert isinstance(usage, dict)
                total = {name: int(usage[key]) for name, key in CODEX_USAGE if isinstance(usage.get(key), int)}
            elif kind == "turn.failed":
                error = event.get("error")
                said = error.get("message") if isinstance(error, dict) else error
                out.error = _api_message(str(said or "the turn failed"))
            elif kind == "error" and out.error is None:
                out.error = _api_message(str(event.get("message") or "error"))
            elif kind == "item.completed":
                self._item(event.get("item"), out, spec)
        for line in other:
            if found := PATCH_REJECTED.search(line):
                out.denials.append({"tool": "apply_patch", "path": "", "reason": found.group(1)})
        out.turns = turns or None
        out.session_usage = total
        out.usage = _run_usage(total, spec.session_usage if spec.session_id is not None else None)
        if out.error is None and not turns:
            out.error = " ".join(other[-5:]) or "the CLI printed no completed turn"
        if out.error is not None and spec.session_id is not None:
            # "Error: thread/resume: thread/resume failed: no rollout found for thread id …" (stderr)
            out.session_lost = out.session_lost or _lost(other) or _lost([out.error])
        return out

    def _item(self, item: Any, out: RunResult, spec: RunSpec) -> None:
        if not isinstance(item, dict):
            return
        kind = item.get("type")
        if kind == "agent_message" and isinstance(item.get("text"), str):
            out.final = item["text"]
            if spec.schema_path is not None:
                try:
                    out.structured = json.loads(item["text"])
                except ValueError:
                    out.structured = None
        elif kind == "command_execution":
            out.tool_calls += 1
            declined = item.get("status") == "declined"
            failed = item.get("exit_code") not in (None, 0)
            if declined or (failed and DENIED.search(str(item.get("aggregated_output") or ""))):
                out.denials.append({"tool": "shell", "path": _command_path(str(item.get("command") or ""))})
        elif kind == "file_change":
            out.tool_calls += 1
            for change in item.get("changes") or ():
                if not isinstance(change, dict):
                    continue
                path = _relative(str(change.get("path") or ""), spec.cwd)
                if item.get("status") == "completed":
                    if path not in out.file_changes:
                        out.file_changes.append(path)
                elif item.get("status") == "declined":
                    out.denials.append({"tool": "apply_patch", "path": path})
                # "failed": the patch did not apply (its context did not match); nothing was refused.
        elif kind in ("mcp_tool_call", "web_search"):
            out.tool_calls += 1

    def progress(self, lines: Sequence[str], spec: RunSpec) -> list[str]:
        events, _ = _json_lines(lines)
        shown: list[str] = []
        for event in events:
            item = event.get("item")
            if event.get("type") != "item.started" and event.get("type") != "item.completed":
                continue
            if not isinstance(item, dict):
                continue
            if item.get("type") == "command_execution" and event.get("type") == "item.started":
                shown.append("tool shell")
            elif item.get("type") == "file_change" and event.get("type") == "item.completed":
                for change in item.get("changes") or ():
                    if isinstance(change, dict):
                        shown.append(f"file {_relative(str(change.get('path') or ''), spec.cwd)}")
        return shown

    def confinement(self, spec: RunSpec) -> str:
        return "unconfined" if spec.unconfined else f"codex-sandbox:{self.sandbox(spec)}"

    def state_dirs(self, env: Mapping[str, str]) -> list[str]:
        """``CODEX_HOME``, else ``~/.codex``."""
        if env.get("CODEX_HOME"):
            return [env["CODEX_HOME"]]
        return [os.path.join(env["HOME"], ".codex")] if env.get("HOME") else []


def _api_message(said: str) -> str:
    """The API's own words when codex passes an error body through as text (``{"error": {"message": …}}``)."""
    try:
        doc = json.loads(said)
    except ValueError:
        return said
    inner = doc.get("error") if isinstance(doc, dict) else None
    message = inner.get("message") if isinstance(inner, dict) else None
    return message if isinstance(message, str) else said


def _run_usage(total: Mapping[str, int], before: Mapping[str, int] | None) -> dict[str, int]:
    """One run's usage from a conversation's running totals: codex's ``turn.completed`` usage is the
    thread's total so far (a resumed thread's counts include every earlier run), not the turn's."""
    if not before or any(int(before.get(name, 0)) > value for name, value in total.items()):
        return dict(total)
    return {name: value - int(before.get(name, 0)) for name, value in total.items()}


def _command_path(command: str) -> str:
    """The last word of a shell command that looks like a path (what a denied write aimed at)."""
    words = [w.strip("'\"") for w in command.replace(">", " ").split()]
    paths = [w for w in words if "/" in w or "." in w]
    return paths[-1] if paths else ""


DRIVERS: dict[str, Driver] = {d.name: d for d in (Driver(), ScriptDriver(), ClaudeDriver(), CodexDriver())}


def driver(name: str | None) -> Driver:
    """The driver called ``name`` (``plain`` for None or an unknown name: the kind's load refuses those)."""
    return DRIVERS.get(name or "plain", DRIVERS["plain"])
