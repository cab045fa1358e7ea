"""``corral events`` and ``corral events prune``: the real executable over a real SQLite store.

The output shapes are a contract: one JSON object per line (``--json``), one text line per event, and
now a log longer than one page streams with exactly the same bytes as the list used to print.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from runner.context import Instance
from runner.sql.store_sqlite import SQLiteStore
from tests.support.runs import Run


@pytest.fixture
def corral(cli_env: dict[str, str], tmp_path: Path) -> Any:
    def run(*args: str, env: dict[str, str] | None = None) -> Run:
        proc = subprocess.run(
            [str(Path(sys.executable).parent / "corral"), *args],
            capture_output=True, text=True, env={**cli_env, **(env or {})}, cwd=tmp_path, timeout=120, check=False,
        )  # fmt: skip
        return Run(proc)

    return run


@pytest.fixture
def store_path(home: Path) -> Path:
    return home / "corral.db"


def fill(path: Path, count: int, names: tuple[str, ...] = ("thing/1", "thing/2")) -> list[int]:
    """``count`` events over ``names`` written through the store, in a few transactions; their seqs."""
    seqs: list[int] = []
    with SQLiteStore(path) as store:
        for start in range(0, count, 500):
            with store.write() as tx:
                for index in range(start, min(count, start + 500)):
                    name = names[index % len(names)]
                    current = tx.get(name) or Instance(name, "thing", "start", 0, {})
                    written = tx.put(current, "on", {"i": index})
                    payload = {"changed": {"generation": index}, "params": {"i": index}}
                    seqs.append(tx.append(written, "go", current.state, "tester", payload).seq)
    return seqs


def legacy_json(path: Path, since: int = 0) -> str:
    """What ``corral events --json`` printed before it streamed: ``render.emit_json`` of each event."""
    with SQLiteStore(path) as store:
        found = store.events(since)
    return "".join(json.dumps(e.to_dict(), sort_keys=True, default=str) + "\n" for e in found)


def test_json_lines_are_unchanged_and_stream_past_one_page(corral: Any, home: Path, store_path: Path) -> None:
    assert corral("status", "--json").code == 0  # creates the store
    seqs = fill(store_path, 2345)
    run = corral("events", "--json")
    assert run.code == 0, run.err
    assert run.out == legacy_json(store_path), "byte for byte what the list printed"
    lines = run.lines()
    assert [e["seq"] for e in lines] == seqs
    assert set(lines[0]) == {"seq", "instance", "machine", "trigger", "from", "to", "version", "actor", "payload", "at"}
    assert corral("events", "--since", str(seqs[1000]), "--json").out == legacy_json(store_path, seqs[1000])
    limited = corral("events", "--since", str(seqs[10]), "--limit", "1500", "--json").lines()
    assert [e["seq"] for e in limited] == seqs[11:1511]
    mine = corral("events", "--instance", "thing/2", "--json").lines()
    assert [e["seq"] for e in mine] == seqs[1::2]


def test_text_lines_stream_one_per_event(corral: Any, store_path: Path) -> None:
    assert corral("status").code == 0
    seqs = fill(store_path, 1200)
    lines = corral("events").out.splitlines()
    assert len(lines) == len(seqs)
    assert lines[0].split()[0] == str(seqs[0]) and "thing/1 go: start -> on (v1) by tester  generation=0" in lines[0]
    assert lines[-1].split()[0] == str(seqs[-1])


def test_prune_reports_and_readers_below_the_floor_fail_with_events_pruned(corral: Any, store_path: Path) -> None:
    assert corral("status").code == 0
    seqs = fill(store_path, 10)

    dry = corral("events", "prune", "--keep", "4", "--dry-run")
    assert dry.code == 0, dry.err
    assert dry.out == f"would delete 6 event(s) (by keep 4): retention floor 0 -> {seqs[5]}; dry run, nothing deleted\n"
    assert len(corral("events", "--json").lines()) == 10

    pruned = corral("events", "prune", "--keep", "4", "--json")
    assert pruned.code == 0, pruned.err
    assert pruned.json() == {
        "pruned": {
            "floor_before": 0,
            "floor": seqs[5],
            "events": 6,
            "dry_run": False,
            "batches": 1,
            "by": {"keep": 4},
            "source": "options",
        }
    }

    # Without --since: every event still kept, and a note on stderr where the floor is.
    kept = corral("events", "--json")
    assert kept.code == 0, kept.err
    assert [e["seq"] for e in kept.lines()] == seqs[6:]
    assert kept.err == f"note: events up to {seqs[5]} were pruned (the retention floor); showing the rest\n"

    below = corral("events", "--since", "0", "--json")
    assert below.code == 5
    assert below.json()["error"] == {
        "code": "events_pruned",
        "message": below.json()["error"]["message"],
        "details": {"since": 0, "floor": seqs[5]},
    }
    text = corral("events", "--since", str(seqs[2]))
    assert text.code == 5 and text.out == ""
    assert text.err.startswith(f"error [events_pruned]: the events after {seqs[2]} were pruned up to {seqs[5]}")
    assert "--from-floor" in text.err

    assert [e["seq"] for e in corral("events", "--from-floor", "--json").lines()] == seqs[6:]
    assert [e["seq"] for e in corral("events", "--since", str(seqs[5]), "--json").lines()] == seqs[6:]
    assert [e["seq"] for e in corral("events", "--since", str(seqs[7]), "--from-floor", "--json").lines()] == seqs[8:]

    before = corral("events", "prune", "--before", str(seqs[7]))
    assert (
        before.out
        == f"deleted 1 event(s) (by before {seqs[7]}) in 1 batch(es): retention floor {seqs[5]} -> {seqs[6]}\n"
    )
    young = corral("events", "prune", "--older-than", "1d", "--json").json()["pruned"]
    assert (young["events"], young["floor"], young["by"]) == (0, seqs[6], {"older_than": "1d"})

    store = corral("status", "--json").json()["store"]
    assert store["retention_floor"] == seqs[6] and len(store["store_id"]) == 32
    assert f"events pruned up to {seqs[6]})" in corral("status").out.splitlines()[0]
    with SQLiteStore(store_path) as opened:
        assert {opened.get("thing/1") is not None, opened.get("thing/2") is not None} == {True}


def test_prune_arguments_and_the_configured_policy(corral: Any, store_path: Path) -> None:
    assert corral("status").code == 0
    seqs = fill(store_path, 6)

    none = corral("events", "prune", "--json")
    assert (none.code, none.json()["error"]["code"]) == (2, "usage")
    assert "CORRAL_EVENTS_KEEP" in none.json()["error"]["message"]
    two = corral("events", "prune", "--keep", "1", "--before", "3", "--json")
    assert (two.code, two.json()["error"]["code"], two.json()["error"]["details"]["given"]) == (
        3,
        "input_invalid",
        ["keep", "before"],
    )
    negative = corral("events", "prune", "--keep", "-1", "--json")
    assert (negative.code, negative.json()["error"]["details"]["field"]) == (3, "keep")
    bad_age = corral("events", "prune", "--older-than", "soon", "--json")
    assert (bad_age.code, bad_age.json()["error"]["details"]["field"]) == (3, "older_than")
    mixed = corral("events", "--since", "2", "prune", "--keep", "1")
    assert mixed.code == 2 and "--since" in mixed.err

    policy = corral("events", "prune", "--json", env={"CORRAL_EVENTS_KEEP": "2"}).json()["pruned"]
    assert (policy["events"], policy["floor"], policy["by"], policy["source"]) == (
        4,
        seqs[3],
        {"keep": 2},
        "CORRAL_EVENTS_KEEP",
    )
    aged = corral("events", "prune", "--json", env={"CORRAL_EVENTS_KEEP": "30d"}).json()["pruned"]
    assert (aged["events"], aged["by"]) == (0, {"older_than": "30d"})
    broken = corral("events", "prune", "--json", env={"CORRAL_EVENTS_KEEP": "lots"})
    assert (broken.code, broken.json()["error"]["details"]["field"]) == (3, "CORRAL_EVENTS_KEEP")
    assert corral("events", "--since", "0", "--json", env={"CORRAL_EVENTS_KEEP": "1"}).code == 5, "reading never prunes"
    assert corral("events", "--from-floor", "--json", env={"CORRAL_EVENTS_KEEP": "1"}).out.count("\n") == 2


def test_events_help_lists_prune(corral: Any) -> None:
    run = corral("events", "--help")
    assert run.code == 0 and "prune" in run.out and "--from-floor" in run.out
    assert "--older-than" in corral("events", "prune", "--help").out


def test_follow_streams_the_backlog_from_the_floor_then_follows(
    cli_env: dict[str, str], tmp_path: Path, corral: Any, store_path: Path
) -> None:
    assert corral("status").code == 0
    seqs = fill(store_path, 1500)
    assert corral("events", "prune", "--keep", "1200").code == 0
    follower = subprocess.Popen(
        [str(Path(sys.executable).parent / "corral"), "events", "--follow", "--from-floor", "--json"],
        stdout=subprocess.PIPE, text=True, env=cli_env, cwd=tmp_path,
    )  # fmt: skip
    try:
        assert follower.stdout is not None
        backlog = [json.loads(follower.stdout.readline())["seq"] for _ in range(1200)]
        assert backlog == seqs[300:]
        (later,) = fill(store_path, 1, ("other/1",))
        assert json.loads(follower.stdout.readline())["seq"] == later
    finally:
        follower.kill()
        follower.communicate()
    stuck = corral("events", "--since", "0", "--follow", "--json")
    assert (stuck.code, stuck.json()["error"]["code"]) == (5, "events_pruned")


def test_draw_of_an_instance_after_a_prune_shows_the_events_kept(corral: Any) -> None:
    sha = "c" * 64
    acquired = corral(
        "controller", "acquire", "--controller", "ctl", "--authority-ref", "T-1", "--authority-sha256", sha,
    )  # fmt: skip
    assert acquired.code == 0, acquired.err
    for _ in range(2):
        assert corral("controller", "renew", "--controller", "ctl").code == 0
    whole = corral("draw", "controller", "--instance", "controller/ctl", "--json").json()
    assert whole["path"] == ["absent", "active", "active", "active"]
    assert corral("events", "prune", "--keep", "1").code == 0
    drawn = corral("draw", "controller", "--instance", "controller/ctl", "--json")
    assert drawn.code == 0, drawn.err
    doc = drawn.json()
    assert (doc["state"], doc["path"]) == ("active", ["active", "active"]), "its state is never pruned"
