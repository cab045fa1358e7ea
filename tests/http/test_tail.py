"""The live tail the SSE hub reads (``Events.tail``): a commit of another process is found by a probe
that reads no table, and an idle tick reads nothing; a pruned cursor is refused as by ``wait``."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from runner.errors import EventsPrunedError
from runner.runtime import Config, Runtime

ROOT = Path(__file__).resolve().parents[2]


def _corral(home: Path, *args: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
    env |= {"CORRAL_HOME": str(home), "PYTHONPATH": str(ROOT)}
    script = "import sys; from runner.cli.app import main; sys.exit(main(sys.argv[1:]))"
    done = subprocess.run([sys.executable, "-c", script, *args], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def _acquire(home: Path) -> None:
    sha = hashlib.sha256(b"tail").hexdigest()
    _corral(home, "controller", "acquire", "--controller", "c", "--authority-ref", "T-1", "--authority-sha256", sha)


def test_the_tail_finds_another_process_commit_and_reads_nothing_while_idle(tmp_path: Path) -> None:
    home = tmp_path / "home"
    _acquire(home)
    app = Runtime.open(Config.load(home=home, surface="http"))
    try:
        store = app.service.events.core.store
        reads: list[int] = []
        real = store.events

        def counted(*args: Any, **kw: Any) -> Any:
            reads.append(1)
            return real(*args, **kw)

        store.events = counted  # type: ignore[method-assign]
        first = app.service.events.tail(0, 1.0)
        assert [e.trigger for e in first] == ["acquire"]
        reads.clear()
        assert app.service.events.tail(first[-1].seq, 0.2) == []
        assert len(reads) == 1  # the first probe reads once; the idle ticks after it read nothing
        renewer = threading.Thread(target=_corral, args=(home, "controller", "renew", "--controller", "c"))
        renewer.start()
        started = time.monotonic()
        found = app.service.events.tail(first[-1].seq, 60.0)
        renewer.join()
        assert [e.trigger for e in found] == ["renew"] and time.monotonic() - started < 60
    finally:
        app.close()


def test_a_pruned_cursor_is_refused(tmp_path: Path) -> None:
    home = tmp_path / "home"
    _acquire(home)
    _corral(home, "controller", "renew", "--controller", "c")
    _corral(home, "controller", "renew", "--controller", "c")
    _corral(home, "events", "prune", "--before", "3")
    app = Runtime.open(Config.load(home=home, surface="http"))
    try:
        with pytest.raises(EventsPrunedError):
            app.service.events.tail(0, 0.1)
        assert [e.seq for e in app.service.events.tail(2, 0.1)] == [3]
    finally:
        app.close()
