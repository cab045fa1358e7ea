"""A scripted Anthropic Messages API on loopback, for driving the real Claude Code CLI offline.

A contract fake of the model only (the CLI is real): ``POST /v1/messages`` answered with the streamed
Server-Sent Events the API sends (``message_start``, ``content_block_start`` of a ``text`` or
``tool_use`` block, ``content_block_delta`` with ``text_delta`` / ``input_json_delta``,
``content_block_stop``, ``message_delta`` with the stop reason and usage, ``message_stop``), and the
side calls the CLI makes (``count_tokens``; any other path answers an empty object).

The model's reply is scripted by the prompt: the text of the user turn since the last assistant
message holds a directive, so each test scripts a turn from what it asks:

- ``WRITE <path>``: a ``Write`` tool call of ``<path>`` (content ``written by the model``);
- ``JSON <object>``: the final text is that JSON text;
- ``FAIL``: HTTP 400 with an API error body (the CLI's run fails);
- ``SLOW``: the plain answer below, two seconds late (a run a test can look at while it works);
- otherwise a final text ``turns=N`` (the user turns it was sent: a second prompt of the same
  conversation sees 2) followed by ``saw:`` and the earlier prompts it was sent.

After a tool result the model ends the turn with ``AFTER-TOOL:`` and the result's text, so a denial is
visible in the final message. Every request body is kept in ``requests`` (for the conversation
checks). Usage is 11 input and 5 output tokens per call.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

DIRECTIVE = re.compile(r"\b(WRITE|JSON|FAIL|SLOW)\b ?(.*)", re.S)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(b.get("text", "")) for b in content if isinstance(b, dict) and b.get("type") == "text")
    return ""


def user_prompts(body: dict[str, Any]) -> list[str]:
    """The prompts a request carries (the user turns' text, the CLI's own reminders left out)."""
    prompts = []
    for message in body.get("messages") or ():
        if message.get("role") != "user":
            continue
        text = _text(message.get("content"))
        if text and not text.lstrip().startswith(("#", "<system-reminder>")):
            prompts.append(text.strip())
    return prompts


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        return

    def _json(self, status: int, doc: Any) -> None:
        raw = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_HEAD(self) -> None:
        self.send_response(200)
        self.end_headers()

    def do_GET(self) -> None:
        self._json(200, {})

    def do_POST(self) -> None:
        size = int(self.headers.get("content-length") or 0)
        body = json.loads(self.rfile.read(size) or b"{}")
        if not self.path.startswith("/v1/messages") or "count_tokens" in self.path:
            self._json(200, {"input_tokens": 11})
            return
        with self.server.lock:
            self.server.requests.append(body)
        messages = body.get("messages") or []
        last_assistant = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=-1)
        turn = messages[last_assistant + 1 :]
        results = [
            b
            for m in turn
            if isinstance(m.get("content"), list)
            for b in m["content"]
            if isinstance(b, dict) and b.get("type") == "tool_result"
        ]
        answered_tool = last_assistant >= 0 and any(
            isinstance(b, dict) and b.get("type") == "tool_use"
            for b in (messages[last_assistant].get("content") or [])
            if isinstance(messages[last_assistant].get("content"), list)
        )
        asked = " ".join(_text(m.get("content")) for m in turn)
        found = DIRECTIVE.search(asked)
        tool: dict[str, Any] | None = None
        if results or answered_tool:
            # One tool call per prompt: whatever came back, the turn ends with it.
            content = results[0].get("content") if results else asked
            reply = "AFTER-TOOL: " + (content if isinstance(content, str) else json.dumps(content))
        elif found and found.group(1) == "FAIL":
            # 400, not 500: the CLI retries a server error with back-off, but not a refused request.
            self._json(
                400, {"type": "error", "error": {"type": "invalid_request_error", "message": "scripted failure"}}
            )
            return
        elif found and found.group(1) == "WRITE":
            path = found.group(2).split()[0]
            tool = {"name": "Write", "input": {"file_path": path, "content": "written by the model\n"}}
            reply = ""
        elif found and found.group(1) == "SLOW":
            time.sleep(2.0)
            prompts = user_prompts(body)
            reply = f"turns={len(prompts)} saw: " + " | ".join(prompts)
        elif found and found.group(1) == "JSON":
            reply = found.group(2).strip().splitlines()[0]
        else:
            prompts = user_prompts(body)
            reply = f"turns={len(prompts)} saw: " + " | ".join(prompts)
        self._stream(body, reply, tool)

    def _stream(self, body: dict[str, Any], reply: str, tool: dict[str, Any] | None) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()

        def event(name: str, data: dict[str, Any]) -> None:
            self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())

        usage = {"input_tokens": 11, "output_tokens": 1}
        message = {"id": "msg_scripted", "type": "message", "role": "assistant", "model": body.get("model", "m")}
        event("message_start", {"type": "message_start", "message": {**message, "content": [], "usage": usage}})
        if tool is not None:
            block = {"type": "tool_use", "id": "toolu_scripted", "name": tool["name"], "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(tool["input"])}
            stop = "tool_use"
        else:
            block = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": reply}
            stop = "end_turn"
        event("content_block_start", {"type": "content_block_start", "index": 0, "content_block": block})
        event("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta})
        event("content_block_stop", {"type": "content_block_stop", "index": 0})
        event("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop}, "usage": {"output_tokens": 5}})
        event("message_stop", {"type": "message_stop"})


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.lock = threading.Lock()
        self.requests: list[dict[str, Any]] = []


class AnthropicModel:
    """The running server: ``url`` for ``ANTHROPIC_BASE_URL``, ``requests`` as received."""

    def __init__(self, server: _Server) -> None:
        self._server = server
        self.url = f"http://127.0.0.1:{server.server_address[1]}"

    @property
    def requests(self) -> list[dict[str, Any]]:
        with self._server.lock:
            return list(self._server.requests)


@contextmanager
def anthropic_model() -> Iterator[AnthropicModel]:
    """Serve the scripted model on a loopback port until the block ends."""
    server = _Server()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield AnthropicModel(server)
    finally:
        server.shutdown()
        server.server_close()
