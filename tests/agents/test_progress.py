"""A driven run's live progress (issue 23): tool calls and file changes, names and paths only, read from
the run's log while it streams, incrementally, through the driver's own parser.

The driver's incremental reading is checked on lines, the reader on a log written in pieces (a line
cut in two), and the process host on a real supervised subprocess printing Claude's stream-json
(``tests/support/stream_agent.py``) while a test holds it mid-run.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from runner.agents.abc import StartOptions
from runner.agents.drivers import RunSpec, driver
from runner.agents.kinds import Kinds
from runner.agents.process import ProcessHost
from runner.agents.progress import ProgressReader, progress_item
from runner.sql.store_sqlite import SQLiteStore
from tests.support import stream_agent


def _use(use_id: str, name: str, path: str) -> str:
    block = {"type": "tool_use", "id": use_id, "name": name, "input": {"file_path": path, "content": "SECRET"}}
    return json.dumps({"type": "assistant", "message": {"content": [block]}})


def _result(use_id: str, error: bool = False) -> str:
    block = {"type": "tool_result", "tool_use_id": use_id, "content": "SECRET", "is_error": error}
    return json.dumps({"type": "user", "message": {"content": [block]}})


def test_claude_progress_in_pieces_names_tools_and_changed_files_only(tmp_path: Path) -> None:
    chosen, spec = driver("claude"), RunSpec(role="writer", cwd=str(tmp_path))
    memo: dict[str, object] = {}
    first = chosen.progress_step(
        [_use("a", "Read", str(tmp_path / "src/x.py")), _use("b", "Write", "out.txt")], spec, memo
    )
    assert first == ["tool Read src/x.py", "tool Write out.txt"]
    # The result comes in a later piece: the memo remembers which tool and path it answers.
    assert chosen.progress_step(
        [_result("b"), _use("c", "Edit", "/elsewhere/y"), _result("c", error=True)], spec, memo
    ) == [
        "file out.txt",
        "tool Edit /elsewhere/y",
    ]
    assert chosen.progress_step(["not json", _result("a")], spec, memo) == []  # a Read changes no file
    assert progress_item("tool Write my file.txt") == {"type": "tool", "tool": "Write", "path": "my file.txt"}
    assert progress_item("tool shell") == {"type": "tool", "tool": "shell", "path": ""}
    assert progress_item("file a/b") == {"type": "file", "path": "a/b"}


def test_the_reader_reads_only_what_was_appended_and_waits_for_a_whole_line(tmp_path: Path) -> None:
    log = tmp_path / "run-1.log"
    log.write_text("")
    reader = ProgressReader(log, driver("claude"), RunSpec(cwd=str(tmp_path)))
    line = _use("a", "Write", "a.txt") + "\n"
    with log.open("a") as out:
        out.write(line[:20])  # half a line: nothing yet
    reader.poll()
    assert reader.lines == [] and reader.offset == 20
    with log.open("a") as out:
        out.write(line[20:] + _result("a"))  # the last line has no newline yet
    reader.poll()
    assert reader.lines == ["tool Write a.txt"]
    reader.poll(final=True)  # the run ended: its last line counts
    assert reader.lines == ["tool Write a.txt", "file a.txt"]
    assert reader.progress("p1", 1, False, after=1).lines == ("file a.txt",)
    assert reader.progress("p1", 1, False, after=1).start == 1 and reader.progress("p1", 1, False).total == 2


@pytest.fixture
def host(tmp_path: Path) -> Iterator[ProcessHost]:
    config = tmp_path / "agents.yaml"
    config.write_text(stream_agent.kind_yaml())
    with SQLiteStore(tmp_path / "s.db") as store:
        yield ProcessHost(store, tmp_path / "agents", Kinds.load([config]))


def _until(check: object, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        time.sleep(0.01)
    raise AssertionError("not reached in time")


def test_a_running_driven_agent_shows_its_progress_and_agent_read_does_too(host: ProcessHost, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    pane = host.start("w", "streamer", str(work), StartOptions(role="writer", owned=("out.txt",))).pane_id
    assert host.progress(pane) is None  # it never ran
    # The signal is in its directory: the confined agent's /tmp is its own, the test's tmp_path not in it.
    host.prompt(pane, f"read lib.py\nwrite out.txt\nwait {work / 'go'}\nedit out.txt\nall done")
    _until(lambda: (p := host.progress(pane)) is not None and len(p.lines) >= 3)
    now = host.progress(pane)
    assert now is not None and now.running and now.run == 1
    assert now.lines == ("tool Read lib.py", "tool Write out.txt", "file out.txt")
    assert now.items[1] == {"type": "tool", "tool": "Write", "path": "out.txt"}
    assert host.read(pane, 50) == "tool Read lib.py\ntool Write out.txt\nfile out.txt\n"
    assert host.progress(pane, after=3) is not None and host.progress(pane, after=3).lines == ()  # type: ignore[union-attr]
    (work / "go").write_text("")
    settled = anyio.run(host.wait, pane, 1, 30.0)
    assert settled.status == "done"
    done = host.progress(pane, after=3)
    assert done is not None and not done.running and done.lines == ("tool Edit out.txt", "file out.txt")
    assert done.total == 5
    assert host.read(pane, 50) == "all done"  # once it ended, read gives the final message
    everything = json.dumps(host.progress(pane).to_dict())  # type: ignore[union-attr]
    assert stream_agent.SECRET not in everything


def test_a_plain_or_script_kind_shows_no_progress(host: ProcessHost, tmp_path: Path) -> None:
    pane = host.start("s", "script", str(tmp_path), StartOptions()).pane_id
    host.prompt(pane, "echo hi")
    anyio.run(host.wait, pane, 1, 30.0)
    assert host.progress(pane) is None


def test_a_long_path_is_cut_short(tmp_path: Path) -> None:
    from runner.agents.progress import LINE_CHARS

    log = tmp_path / "run-1.log"
    log.write_text(_use("a", "Read", "x" * 5000) + "\n")
    reader = ProgressReader(log, driver("claude"), RunSpec(cwd=str(tmp_path)))
    reader.poll()
    (line,) = reader.lines
    assert len(line) == LINE_CHARS and line.startswith("tool Read xxx") and line.endswith("…")
