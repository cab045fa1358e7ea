"""A scripted OpenAI Responses API on loopback, for driving the real Codex CLI (``codex exec``) offline.

A contract fake of the model only (the CLI is real), the counterpart of
:mod:`tests.support.anthropic_model`: ``POST /v1/responses`` answered with the streamed Server-Sent
Events codex-cli 0.171 reads (``response.created``, ``response.output_item.added``,
``response.output_text.delta``, ``response.output_item.done`` of a ``message`` or a ``function_call``
item, ``response.completed`` with the response's usage, or ``response.failed``); any other path
answers an empty object. Codex reaches it through a provider of a private ``CODEX_HOME``'s
``config.toml`` (:func:`codex_config`: ``base_url`` ``<url>/v1``, ``wire_api = "responses"``, no
retries, so a failure fails the run at once).

With a model name it does not know, codex 0.171 offers the model the tools ``exec_command``
(``{"cmd": …}``), ``write_stdin``, ``request_user_input``, ``view_image``, the goal tools, a
``multi_agent_v1`` namespace and ``web_search``; no ``apply_patch`` tool. A file is written the way
codex's own models do it without that tool: an ``exec_command`` whose ``cmd`` is an ``apply_patch``
heredoc, which codex intercepts and applies itself (a ``file_change`` item when the patch lands).

The model's reply is scripted by the prompt: the text of the user turn since the last assistant
message holds a directive, so each test scripts a turn from what it asks:

- ``WRITE <path>``: an ``apply_patch`` adding ``<path>`` (content ``written by the model``);
- ``SHELL <command>``: an ``exec_command`` running ``<command>`` (the rest of the line);
- ``JSON <object>``: the final text is that JSON text;
- ``FAIL``: HTTP 400 with an API error body (the CLI's turn fails);
- ``BROKEN``: a stream that ends in ``response.failed`` (the model's own failure);
- ``SLOW``: the plain answer below, two seconds late (a run a test can look at while it works);
- otherwise a final text ``turns=N`` (the user turns it was sent: a second prompt of the same
  conversation sees 2) followed by ``saw:`` and the prompts it was sent.

After a tool result the model ends the turn with ``AFTER-TOOL:`` and the result's text, so a denial is
visible in the final message. Every request body is kept in ``requests`` (the conversation checks,
and what codex offers in ``tools``). Usage is 11 input (3 of them cached) and 5 output tokens per call.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

DIRECTIVE = re.compile(r"\b(WRITE|SHELL|JSON|FAIL|BROKEN|SLOW)\b ?(.*)", re.S)
USAGE = {
    "input_tokens": 11,
    "input_tokens_details": {"cached_tokens": 3},
    "output_tokens": 5,
    "output_tokens_details": {"reasoning_tokens": 0},
    "total_tokens": 16,
}
MODEL = "scripted-model"


def codex_config(url: str, key_variable: str = "CODEX_API_KEY") -> str:
    """A ``config.toml`` pointing codex at the scripted model served at ``url`` (its key read from
    ``key_variable``), with no retries: a failed request fails the turn at once."""
    return (
        f'model = "{MODEL}"\n'
        'model_provider = "scripted"\n'
        "\n"
        "[model_providers.scripted]\n"
        'name = "scripted"\n'
        f'base_url = "{url}/v1"\n'
        'wire_api = "responses"\n'
        f'env_key = "{key_variable}"\n'
        "request_max_retries = 0\n"
        "stream_max_retries = 0\n"
    )


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(
            str(b.get("text", "")) for b in content if isinstance(b, dict) and b.get("type") in ("input_text", "text")
        )
    return ""


def _is_prompt(item: Any) -> bool:
    # Codex sends its own context as user messages too (<environment_context>, AGENTS.md, skills): left out.
    return (
        isinstance(item, dict)
        and item.get("type") == "message"
        and item.get("role") == "user"
        and not _text(item.get("content")).lstrip().startswith(("<", "#"))
    )


def user_prompts(body: dict[str, Any]) -> list[str]:
    """The prompts a request carries (the user turns' text, the CLI's own context left out)."""
    return [_text(item.get("content")).strip() for item in body.get("input") or () if _is_prompt(item)]


def tool_names(body: dict[str, Any]) -> list[str]:
    """The names of the tools a request offers the model (a namespace or built-in tool by its type)."""
    return [str(t.get("name") or t.get("type")) for t in body.get("tools") or () if isinstance(t, dict)]


def _patch(path: str) -> str:
    return f"apply_patch <<'PATCH'\n*** Begin Patch\n*** Add File: {path}\n+written by the model\n*** End Patch\nPATCH"


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

    def do_GET(self) -> None:
        self._json(200, {})

    def do_POST(self) -> None:
        size = int(self.headers.get("content-length") or 0)
        body = json.loads(self.rfile.read(size) or b"{}")
        if not self.path.split("?")[0].endswith("/responses"):
            self._json(200, {})
            return
        with self.server.lock:
            self.server.requests.append(body)
        items = [i for i in body.get("input") or () if isinstance(i, dict)]
        last_assistant = max(
            (n for n, i in enumerate(items) if i.get("type") == "message" and i.get("role") == "assistant"), default=-1
        )
        turn = items[last_assistant + 1 :]
        results = [i for i in turn if i.get("type") in ("function_call_output", "custom_tool_call_output")]
        asked = " ".join(_text(i.get("content")) for i in turn if _is_prompt(i))
        found = DIRECTIVE.search(asked)
        call: str | None = None
        if results:
            # One tool call per prompt: whatever came back, the turn ends with it.
            output = results[-1].get("output")
            reply = "AFTER-TOOL: " + (output if isinstance(output, str) else json.dumps(output))
        elif found and found.group(1) == "FAIL":
            self._json(
                400, {"error": {"type": "invalid_request_error", "code": "scripted", "message": "scripted failure"}}
            )
            return
        elif found and found.group(1) == "BROKEN":
            self._stream(body, "", None, failed=True)
            return
        elif found and found.group(1) == "WRITE":
            call = _patch(found.group(2).split()[0])
            reply = ""
        elif found and found.group(1) == "SHELL":
            call = found.group(2).strip().splitlines()[0]
            reply = ""
        elif found and found.group(1) == "JSON":
            reply = found.group(2).strip().splitlines()[0]
        else:
            if found and found.group(1) == "SLOW":
                time.sleep(2.0)
            prompts = user_prompts(body)
            reply = f"turns={len(prompts)} saw: " + " | ".join(prompts)
        self._stream(body, reply, call)

    def _stream(self, body: dict[str, Any], reply: str, call: str | None, failed: bool = False) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()

        def event(name: str, data: dict[str, Any]) -> None:
            self.wfile.write(f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n".encode())

        response = {"id": f"resp_{uuid.uuid4().hex[:24]}", "object": "response", "model": body.get("model", MODEL)}
        event("response.created", {"response": {**response, "status": "in_progress", "output": []}})
        if failed:
            error = {"code": "server_error", "message": "scripted broken stream"}
            event("response.failed", {"response": {**response, "status": "failed", "error": error, "output": []}})
            return
        if call is not None:
            call_id = f"call_{uuid.uuid4().hex[:24]}"
            item: dict[str, Any] = {
                "type": "function_call",
                "id": f"fc_{call_id[5:]}",
                "call_id": call_id,
                "name": "exec_command",
                "arguments": json.dumps({"cmd": call}),
                "status": "completed",
            }
            event("response.output_item.added", {"output_index": 0, "item": {**item, "arguments": ""}})
            event(
                "response.function_call_arguments.delta",
                {"item_id": item["id"], "output_index": 0, "delta": item["arguments"]},
            )
        else:
            message_id = f"msg_{uuid.uuid4().hex[:24]}"
            item = {"type": "message", "id": message_id, "role": "assistant", "status": "completed"}
            item["content"] = [{"type": "output_text", "text": reply, "annotations": []}]
            event("response.output_item.added", {"output_index": 0, "item": {**item, "content": []}})
            event(
                "response.output_text.delta",
                {"item_id": message_id, "output_index": 0, "content_index": 0, "delta": reply},
            )
        event("response.output_item.done", {"output_index": 0, "item": item})
        done = {**response, "status": "completed", "output": [item], "usage": USAGE}
        event("response.completed", {"response": done})


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.lock = threading.Lock()
        self.requests: list[dict[str, Any]] = []


class ResponsesModel:
    """The running server: ``url`` for a provider's ``base_url`` (plus ``/v1``), ``requests`` as received."""

    def __init__(self, server: _Server) -> None:
        self._server = server
        self.url = f"http://127.0.0.1:{server.server_address[1]}"

    @property
    def requests(self) -> list[dict[str, Any]]:
        with self._server.lock:
            return list(self._server.requests)


@contextmanager
def responses_model() -> Iterator[ResponsesModel]:
    """Serve the scripted model on a loopback port until the block ends."""
    server = _Server()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield ResponsesModel(server)
    finally:
        server.shutdown()
        server.server_close()
