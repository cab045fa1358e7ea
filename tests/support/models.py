"""Scripted model servers on loopback for the real agent CLIs (``tests/agentcli``), and their fixtures.

Two small real HTTP servers (``ThreadingHTTPServer`` on ``127.0.0.1``, port 0, in a thread):
:class:`AnthropicServer` speaks the Messages API's streamed events (what Claude Code calls) and
:class:`ResponsesServer` the OpenAI Responses API's (what ``codex exec`` calls). Each records every
request body (parsed JSON, in order) in ``.requests`` and answers each model call with a
:class:`Reply` chosen by its ``script``: a function of the :class:`Turn` (the latest user prompt,
the tool result if the last message holds one, how many user turns the conversation has).

The default script (:func:`directive_script`) reads directives from the prompt, one a line:
``WRITE path <<content>>`` (a file write: Claude's ``Write``, Codex's ``apply_patch``), ``BASH
command`` (a shell command), ``SAY text`` (final text), ``JSON {...}`` (final text is that JSON),
``FAIL`` (the server answers an error: HTTP 400 to Claude, which would retry a 5xx for minutes, HTTP 500 to
Codex, configured with no retries; the CLI run fails). A prompt with none gets the final text
``echo turns=N: <prompt> | earlier: <earlier prompts>``. After a tool result the model ends the turn
with ``tool result: <the result text>``, so denials and outputs are visible in the final text.

Fixtures ``claude_cli`` and ``codex_cli`` give a :class:`CLI` (binary, environment, server) that runs
the installed CLI offline against a fresh server; without the installed CLIs they skip with one line,
except under CI (``CI`` set), where they fail (as the PostgreSQL tests do, ``tests/support/stores.py``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

AGENTCLI = Path(__file__).resolve().parent.parent / "agentcli"
BIN = AGENTCLI / "node_modules" / ".bin"
USAGE = {"input_tokens": 120, "output_tokens": 30, "cache_creation_input_tokens": 10, "cache_read_input_tokens": 40}


@dataclass(frozen=True)
class Turn:
    """What the script sees of one model call."""

    prompt: str  # the latest user message's text (tool results left out)
    prompts: tuple[str, ...]  # every user prompt of the conversation, oldest first
    tool_result: str | None  # the text of the tool result the last message holds, if any
    body: dict[str, Any]

    @property
    def user_turns(self) -> int:
        return len(self.prompts)


@dataclass(frozen=True)
class Reply:
    """One model answer: final ``text``, or a ``tool`` call with ``args``, or ``fail`` (an HTTP error)."""

    text: str = ""
    tool: str | None = None  # "write" or "bash": each server maps it to its CLI's tool
    args: dict[str, str] = field(default_factory=dict)
    fail: bool = False


Script = Callable[[Turn], Reply]
WRITE = re.compile(r"^WRITE (\S+) <<(.*?)>>", re.MULTILINE | re.DOTALL)


def directive_script(turn: Turn) -> Reply:
    """The default script: the prompt's first directive (see the module docstring), else an echo."""
    if turn.tool_result is not None:
        return Reply(text=f"tool result: {turn.tool_result}")
    prompt = turn.prompt
    if re.search(r"^FAIL\b", prompt, re.MULTILINE):
        return Reply(fail=True)
    if found := WRITE.search(prompt):
        return Reply(tool="write", args={"path": found[1], "content": found[2]})
    for line in prompt.splitlines():
        verb, _, rest = line.strip().partition(" ")
        if verb == "BASH":
            return Reply(tool="bash", args={"command": rest})
        if verb == "SAY":
            return Reply(text=rest)
        if verb == "JSON":
            return Reply(text=json.dumps(json.loads(rest)))
    earlier = " / ".join(p.strip() for p in turn.prompts[:-1])
    return Reply(text=f"echo turns={turn.user_turns}: {prompt.strip()} | earlier: {earlier}")


class ModelServer:
    """A scripted model server on loopback: ``.url``, ``.requests``, ``.script``; a context manager."""

    def __init__(self, script: Script = directive_script) -> None:
        self.script = script
        self.requests: list[dict[str, Any]] = []
        self.paths: list[str] = []
        server = self
        self._lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_HEAD(self) -> None:
                self._send(200, b"", "application/json")

            def do_GET(self) -> None:
                server._get(self)

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else {}
                except ValueError:
                    body = {"_raw": raw.decode(errors="replace")}
                with server._lock:
                    server.requests.append(body)
                    server.paths.append(self.path)
                server._post(self, self.path.split("?")[0], body)

            def _send(self, status: int, data: bytes, kind: str) -> None:
                self.send_response(status)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._handler = Handler
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> ModelServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def model_requests(self) -> list[dict[str, Any]]:
        """The requests that were model calls answered by the script (not side calls)."""
        return [r for r in self.requests if self._is_model_call(r)]

    # Subclasses: the protocol.
    def _is_model_call(self, body: dict[str, Any]) -> bool:
        raise NotImplementedError

    def _get(self, handler: Any) -> None:
        handler._send(404, b'{"error": "not found"}', "application/json")

    def _post(self, handler: Any, path: str, body: dict[str, Any]) -> None:
        raise NotImplementedError

    @staticmethod
    def _stream(handler: Any, events: list[tuple[str, dict[str, Any]]]) -> None:
        data = "".join(f"event: {name}\ndata: {json.dumps(payload)}\n\n" for name, payload in events).encode()
        handler._send(200, data, "text/event-stream")


def _text_of(content: Any, kinds: tuple[str, ...]) -> str:
    if isinstance(content, str):
        return content
    parts = []
    for block in content or ():
        if isinstance(block, dict) and block.get("type") in kinds:
            parts.append(block.get("text", ""))
    return "\n".join(parts)


class AnthropicServer(ModelServer):
    """The Anthropic Messages API stand-in Claude Code talks to (``ANTHROPIC_BASE_URL=.url``).

    ``POST /v1/messages`` with ``stream: true`` and tools is a model call; a call without tools (title
    and topic side calls) gets a short non-streamed (or streamed, if asked) text; ``count_tokens``
    gets a count; other paths a 200 with an empty object."""

    def _is_model_call(self, body: dict[str, Any]) -> bool:
        return "messages" in body and bool(body.get("tools"))

    def turn(self, body: dict[str, Any]) -> Turn:
        prompts, result = [], None
        for message in body.get("messages", []):
            if message.get("role") != "user":
                continue
            content = message.get("content")
            results = [b for b in (content if isinstance(content, list) else []) if b.get("type") == "tool_result"]
            text = _text_of(content, ("text",))
            # Claude Code prefixes context (<system-reminder> blocks) to the prompt: keep the prompt.
            text = re.sub(r"<system-reminder>.*?</system-reminder>\s*", "", text, flags=re.DOTALL).strip()
            if results:
                result = "\n".join(_text_of(r.get("content"), ("text",)) for r in results)
            elif text:
                prompts.append(text)
                result = None
        messages = body.get("messages") or [{}]
        last = messages[-1].get("content")
        last_is_result = isinstance(last, list) and any(b.get("type") == "tool_result" for b in last)
        return Turn(prompts[-1] if prompts else "", tuple(prompts), result if last_is_result else None, body)

    def _post(self, handler: Any, path: str, body: dict[str, Any]) -> None:
        if path.endswith("/count_tokens"):
            handler._send(200, b'{"input_tokens": 100}', "application/json")
            return
        if not path.endswith("/v1/messages"):
            handler._send(200, b"{}", "application/json")
            return
        reply = self.script(self.turn(body)) if self._is_model_call(body) else Reply(text="scripted")
        if reply.fail:
            # 400, not 500: Claude Code retries a 5xx for minutes with backoff; a 400 fails the run at once.
            error = {"type": "error", "error": {"type": "invalid_request_error", "message": "scripted failure"}}
            handler._send(400, json.dumps(error).encode(), "application/json")
            return
        message_id = f"msg_{uuid.uuid4().hex[:20]}"
        model = body.get("model", "claude-scripted")
        if reply.tool is not None:
            tool, args = ("Write", {"file_path": reply.args["path"], "content": reply.args["content"]})
            if reply.tool == "bash":
                tool, args = ("Bash", {"command": reply.args["command"], "description": "scripted command"})
            block: dict[str, Any] = {"type": "tool_use", "id": f"toolu_{uuid.uuid4().hex[:20]}", "name": tool}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(args)}
            block["input"] = {}
            stop = "tool_use"
        else:
            block = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": reply.text}
            stop = "end_turn"
        if not body.get("stream"):
            content = {**block, "input": args} if reply.tool else {"type": "text", "text": reply.text}
            message = {"id": message_id, "type": "message", "role": "assistant", "model": model}
            message |= {"content": [content], "stop_reason": stop, "stop_sequence": None, "usage": USAGE}
            handler._send(200, json.dumps(message).encode(), "application/json")
            return
        start = {"id": message_id, "type": "message", "role": "assistant", "model": model, "content": []}
        start |= {"stop_reason": None, "stop_sequence": None, "usage": {**USAGE, "output_tokens": 1}}
        self._stream(
            handler,
            [
                ("message_start", {"type": "message_start", "message": start}),
                ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": block}),
                ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}),
                ("content_block_stop", {"type": "content_block_stop", "index": 0}),
                (
                    "message_delta",
                    {
                        "type": "message_delta",
                        "delta": {"stop_reason": stop, "stop_sequence": None},
                        "usage": {"output_tokens": USAGE["output_tokens"]},
                    },
                ),
                ("message_stop", {"type": "message_stop"}),
            ],
        )


class ResponsesServer(ModelServer):
    """The OpenAI Responses API stand-in ``codex exec`` talks to (a provider whose ``base_url`` is
    ``.url + "/v1"``, ``wire_api = "responses"``).

    A file write is an ``exec_command`` call running ``apply_patch`` with an ``*** Add File`` patch
    (codex runs it as a patch: a ``file_change`` item); a shell command an ``exec_command`` call."""

    def _is_model_call(self, body: dict[str, Any]) -> bool:
        return "input" in body

    def turn(self, body: dict[str, Any]) -> Turn:
        prompts, result = [], None
        for item in body.get("input", []):
            if item.get("type") == "message" and item.get("role") == "user":
                text = _text_of(item.get("content"), ("input_text",)).strip()
                if text and not text.startswith("<"):  # <environment_context>, <user_instructions> ...
                    prompts.append(text)
                    result = None
            elif item.get("type") in ("function_call_output", "custom_tool_call_output"):
                output = item.get("output")
                result = output if isinstance(output, str) else json.dumps(output)
        items = body.get("input") or [{}]
        last_is_result = items[-1].get("type") in ("function_call_output", "custom_tool_call_output")
        return Turn(prompts[-1] if prompts else "", tuple(prompts), result if last_is_result else None, body)

    def _post(self, handler: Any, path: str, body: dict[str, Any]) -> None:
        if not path.endswith("/responses"):
            handler._send(200, b"{}", "application/json")
            return
        reply = self.script(self.turn(body))
        if reply.fail:
            error = {"error": {"type": "server_error", "code": "server_error", "message": "scripted failure"}}
            handler._send(500, json.dumps(error).encode(), "application/json")
            return
        response_id = f"resp_{uuid.uuid4().hex[:20]}"
        if reply.tool is not None:
            command = reply.args.get("command", "")
            if reply.tool == "write":
                lines = "".join(f"+{line}\n" for line in reply.args["content"].splitlines())
                patch = f"*** Begin Patch\n*** Add File: {reply.args['path']}\n{lines}*** End Patch\n"
                command = f"apply_patch <<'PATCH'\n{patch}PATCH"
            call_id = f"call_{uuid.uuid4().hex[:20]}"
            item: dict[str, Any] = {"type": "function_call", "id": f"fc_{call_id[5:]}", "call_id": call_id}
            item |= {"name": "exec_command", "arguments": json.dumps({"cmd": command}), "status": "completed"}
            deltas: list[tuple[str, dict[str, Any]]] = []
        else:
            message_id = f"msg_{uuid.uuid4().hex[:20]}"
            item = {"type": "message", "id": message_id, "role": "assistant", "status": "completed"}
            item["content"] = [{"type": "output_text", "text": reply.text, "annotations": []}]
            added = {**item, "content": [], "status": "in_progress"}
            deltas = [
                (
                    "response.output_item.added",
                    {"type": "response.output_item.added", "output_index": 0, "item": added},
                ),
                (
                    "response.output_text.delta",
                    {
                        "type": "response.output_text.delta",
                        "item_id": message_id,
                        "output_index": 0,
                        "content_index": 0,
                        "delta": reply.text,
                    },
                ),
            ]
        usage = {
            "input_tokens": USAGE["input_tokens"],
            "input_tokens_details": {"cached_tokens": USAGE["cache_read_input_tokens"]},
            "output_tokens": USAGE["output_tokens"],
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": USAGE["input_tokens"] + USAGE["output_tokens"],
        }
        created = {"id": response_id, "object": "response", "status": "in_progress", "output": []}
        completed = {"id": response_id, "object": "response", "status": "completed", "output": [item], "usage": usage}
        self._stream(
            handler,
            [
                ("response.created", {"type": "response.created", "response": created}),
                *deltas,
                ("response.output_item.done", {"type": "response.output_item.done", "output_index": 0, "item": item}),
                ("response.completed", {"type": "response.completed", "response": completed}),
            ],
        )


@dataclass
class CLI:
    """One installed agent CLI set up to run offline against its scripted ``server``."""

    binary: Path
    env: dict[str, str]
    server: ModelServer
    home: Path

    def run(self, args: list[str], prompt: str, cwd: Path, timeout: float = 90) -> subprocess.CompletedProcess[str]:
        """Run the CLI with ``args``, the prompt on standard input, in ``cwd``."""
        return subprocess.run(
            [str(self.binary), *args],
            input=prompt,
            cwd=cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


def unavailable(name: str) -> str | None:
    """Why the installed CLI ``name`` cannot run here (None: it can)."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        return "node/npm not installed"
    if not (BIN / name).exists():
        return f"{BIN / name} missing: run `npm ci --prefix tests/agentcli` (make test does)"
    return None


def require(name: str) -> Path:
    """The CLI's binary; ``pytest.skip`` with one line if it is not installed (``fail`` under CI)."""
    why = unavailable(name)
    if why is not None:
        if os.environ.get("CI"):
            pytest.fail(f"real {name} CLI tests cannot run under CI: {why}")
        pytest.skip(f"real {name} CLI: {why}")
    return BIN / name


def _base_env(home: Path) -> dict[str, str]:
    keep = ("PATH", "LANG", "LC_ALL", "TMPDIR", "TERM")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    home.mkdir(parents=True, exist_ok=True)
    env |= {"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"), "NO_COLOR": "1"}
    env |= {"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    return env


@pytest.fixture
def claude_cli(tmp_path: Path) -> Iterator[CLI]:
    """Claude Code (``claude``), its environment pointing it at a fresh :class:`AnthropicServer`."""
    binary = require("claude")
    home = tmp_path / "claude-home"
    with AnthropicServer() as server:
        env = _base_env(home)
        env |= {
            "ANTHROPIC_BASE_URL": server.url,
            "ANTHROPIC_API_KEY": "sk-ant-scripted",
            "CLAUDE_CONFIG_DIR": str(home / ".claude"),
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
        }
        yield CLI(binary, env, server, home)


CODEX_CONFIG = """\
model = "scripted-model"
model_provider = "scripted"

[model_providers.scripted]
name = "scripted"
base_url = "{url}/v1"
wire_api = "responses"
env_key = "SCRIPTED_API_KEY"
request_max_retries = 0
stream_max_retries = 0
"""


@pytest.fixture
def codex_cli(tmp_path: Path) -> Iterator[CLI]:
    """``codex``, with a private ``CODEX_HOME`` whose config.toml points it at a fresh
    :class:`ResponsesServer` (provider ``scripted``, key in ``SCRIPTED_API_KEY``, no retries)."""
    binary = require("codex")
    home = tmp_path / "codex-home"
    with ResponsesServer() as server:
        env = _base_env(home)
        codex_home = home / ".codex"
        codex_home.mkdir(parents=True)
        (codex_home / "config.toml").write_text(CODEX_CONFIG.format(url=server.url))
        env |= {"CODEX_HOME": str(codex_home), "SCRIPTED_API_KEY": "scripted"}
        yield CLI(binary, env, server, home)
