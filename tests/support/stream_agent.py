"""A scripted agent CLI that prints Claude Code's ``--output-format stream-json`` as it works, for the
live-progress tests: a real subprocess, run by the process host through the ``claude`` driver.

Configured as a kind in ``agents.yaml`` (:func:`kind_yaml`). It reads the prompt on standard input, one
directive a line, and prints one JSON event a line, flushed at once (what the driver's progress
reading follows while it runs):

- ``read PATH`` / ``write PATH`` / ``edit PATH``: an assistant ``tool_use`` of ``Read`` / ``Write`` /
  ``Edit`` with ``file_path`` PATH (and a ``content`` the progress must never show), then the user
  ``tool_result`` (``write`` and ``edit`` really write PATH, relative to the cwd);
- ``deny PATH``: a ``Write`` whose result is an error (no file change);
- ``sleep SECONDS``; ``wait FILE``: until FILE exists (at most 60 s);
- anything else is the final answer's text.

It ends with a ``result`` event: 100 input and 20 output tokens, ``total_cost_usd`` 0.25, one turn,
and the session id given with ``--session-id`` or ``--resume``.
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from pathlib import Path

SECRET = "CONTENT-NEVER-SHOWN"
"""What every tool input carries beside its path: no progress, event or page may show it."""


def kind_yaml(name: str = "streamer") -> str:
    """An ``agents.yaml`` declaring this agent as kind ``name`` with the ``claude`` driver."""
    return f"kinds:\n  {name}:\n    driver: claude\n    argv: ['{{python}}', '{Path(__file__).resolve()}']\n"


def emit(event: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def main() -> None:
    argv = sys.argv[1:]
    session = str(uuid.uuid4())
    for flag in ("--session-id", "--resume"):
        if flag in argv:
            session = argv[argv.index(flag) + 1]
    prompt = sys.stdin.read()
    emit({"type": "system", "subtype": "init", "session_id": session, "cwd": os.getcwd()})
    said: list[str] = []
    for number, line in enumerate(prompt.splitlines()):
        verb, _, arg = line.strip().partition(" ")
        if verb in ("read", "write", "edit", "deny"):
            tool = {"read": "Read", "write": "Write", "edit": "Edit", "deny": "Write"}[verb]
            use_id = f"toolu_{number}"
            emit(
                {
                    "type": "assistant",
                    "session_id": session,
                    "message": {
                        "role": "assistant",
                        "content": [
                            {
                                "type": "tool_use",
                                "id": use_id,
                                "name": tool,
                                "input": {"file_path": arg, "content": SECRET},
                            }
                        ],
                    },
                }
            )
            result = {"type": "tool_result", "tool_use_id": use_id, "content": "ok"}
            if verb in ("write", "edit"):
                try:
                    Path(arg).write_text(SECRET, encoding="utf-8")
                except OSError as exc:  # as the CLI reports a write the system refused: a failed tool call
                    result = {**result, "is_error": True, "content": f"{type(exc).__name__}: {exc.strerror}"}
            if verb == "deny":
                result = {**result, "is_error": True, "content": "Permission to write denied"}
            emit({"type": "user", "session_id": session, "message": {"role": "user", "content": [result]}})
        elif verb == "sleep":
            time.sleep(float(arg))
        elif verb == "wait":
            deadline = time.monotonic() + 60
            while not Path(arg).exists() and time.monotonic() < deadline:
                time.sleep(0.02)
        elif line.strip():
            said.append(line.strip())
    final = " ".join(said) or "done"
    emit(
        {
            "type": "assistant",
            "session_id": session,
            "message": {"role": "assistant", "content": [{"type": "text", "text": final}]},
        }
    )
    emit(
        {
            "type": "result",
            "subtype": "success",
            "is_error": False,
            "session_id": session,
            "result": final,
            "num_turns": 1,
            "duration_ms": 5,
            "total_cost_usd": 0.25,
            "usage": {"input_tokens": 100, "output_tokens": 20},
            "permission_denials": [],
        }
    )


if __name__ == "__main__":
    main()
