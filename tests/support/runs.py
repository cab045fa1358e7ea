"""One finished ``corral`` subprocess as the CLI tests read it: exit code, stdout, stderr, parsed JSON."""

from __future__ import annotations

import json
import subprocess
from typing import Any


class Run:
    def __init__(self, proc: subprocess.CompletedProcess[str]) -> None:
        self.code = proc.returncode
        self.out = proc.stdout
        self.err = proc.stderr

    def json(self) -> Any:
        """stdout as one JSON document."""
        return json.loads(self.out)

    def lines(self) -> list[Any]:
        """stdout as JSON lines (``corral events --json``)."""
        return [json.loads(line) for line in self.out.splitlines()]

    def error_code(self) -> str:
        """The stable code of a ``--json`` error."""
        return str(self.json()["error"]["code"])


def stop_process(proc: subprocess.Popen[Any], timeout: float = 15) -> None:
    """Stop a server the test started: SIGTERM (its clean shutdown), then SIGKILL if it outstays ``timeout``."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=timeout)
