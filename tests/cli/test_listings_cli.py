"""Issue 13: listings show live instances by default, ``--all`` adds ended ones, ``--limit``/``--after``
page them (keyset by id, ``next_after`` in JSON, a hint on stderr in text); ``status`` counts by
aggregate with its JSON shape unchanged; text tables stream.

The store is a real SQLite file filled through the store port (as the service would write it), and
every command is the real ``corral`` executable.
"""

from __future__ import annotations

import io
import json
import random
import sqlite3
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest

from runner.context import Instance
from runner.sql.store_sqlite import SQLiteStore

STAMP = "2025-01-01T00:00:00.000000Z"
FUTURE = "2099-01-01T00:00:00.000000Z"
# machine -> (its live states, its ended states) as the listings judge them by default.
WORLD = {
    "controller": (("active",), ("released",)),
    "reviewer": (("active", "orphaned"), ("closed", "failed_closed")),
    "writer": (("active",), ("released", "failed_closed")),
    "adopted": (("active",), ("closed", "released")),
    "receipt": (("reserved", "pending"), ("completed", "abandoned")),
    "plan": (("submitted", "paused", "failed"), ("succeeded", "cancelled")),
}


def _data(machine: str, key: str, n: int) -> dict[str, Any]:
    controller = "ctl" if n % 2 else "other"
    if machine == "controller":
        return {"controller_id": key, "lease_id": str(uuid.uuid4()), "generation": 1, "holder": "me@here",
                "expires_at": FUTURE, "issued_at": STAMP}  # fmt: skip
    if machine == "receipt":
        return {"token": f"rcpt_{key}", "controller_id": controller, "name": f"agent-{n}", "reserved_at": STAMP,
                "before_seq": 0, "host": "process"}  # fmt: skip
    if machine == "plan":
        return {"plan_id": key, "recipe": "demo", "controller_id": controller, "steps": {}, "submitted_at": STAMP}
    return {"controller_id": controller, "name": f"{machine}-{n}", "kind": "script", "cwd": "/nowhere",
            "host": "process", "pane_id": f"p{n}", "owned_scopes": ["src"], "locked_scopes": []}  # fmt: skip


@pytest.fixture
def world(corral: Any, home: Path) -> dict[str, list[Instance]]:
    """A store with live and ended instances of every listed machine, ids in random order."""
    store_path = Path(json.loads(corral("status", "--json").stdout)["store"]["path"])
    rng = random.Random(13)
    written: dict[str, list[Instance]] = {m: [] for m in WORLD}
    with SQLiteStore(store_path) as store, store.write() as tx:
        for machine, (live, ended) in WORLD.items():
            for n in range(7):
                key = f"k{rng.randrange(10**6):06d}-{n}"
                state = (live + ended)[n % len(live + ended)]
                instance = Instance(f"{machine}/{key}", machine, "absent", 0, {})
                written[machine].append(tx.put(instance, state, _data(machine, key, n)))
    return written


def ok(done: subprocess.CompletedProcess[str]) -> Any:
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


# command, the JSON key of its rows, how a row names the key --after takes, how an instance names it
LISTINGS = {
    "controller": (("controller", "list"), "leases", lambda r: r["controller_id"], lambda i: i.id.split("/", 1)[1]),
    "reviewer": (("reviewer", "list"), "reviewers", lambda r: r["id"], lambda i: i.id),
    "writer": (("writer", "list"), "writers", lambda r: r["id"], lambda i: i.id),
    "adopted": (("adopted", "list"), "adopted", lambda r: r["id"], lambda i: i.id),
    "receipt": (("receipts",), "receipts", lambda r: r["token"][len("rcpt_") :], lambda i: i.id.split("/", 1)[1]),
    "plan": (("plans", "list"), "plans", lambda r: r["plan"], lambda i: i.id.split("/", 1)[1]),
}


@pytest.mark.parametrize("machine", list(LISTINGS))
def test_a_listing_shows_live_ones_by_default_and_every_one_with_all(
    corral: Any, world: dict[str, list[Instance]], machine: str
) -> None:
    args, key, row_key, instance_key = LISTINGS[machine]
    live_states, _ = WORLD[machine]
    default = ok(corral(*args, "--json"))
    assert set(default) == {key, "next_after"} and default["next_after"] is None
    live = sorted(instance_key(i) for i in world[machine] if i.state in live_states)
    assert sorted(row_key(r) for r in default[key]) == live and live, "the live ones, and only those"
    everything = ok(corral(*args, "--all", "--json"))
    assert sorted(row_key(r) for r in everything[key]) == sorted(instance_key(i) for i in world[machine])
    assert len(everything[key]) > len(default[key]), "--all adds the ended ones"


@pytest.mark.parametrize(("machine", "limit"), [(m, 1 if m == "controller" else 3) for m in LISTINGS])
def test_paging_with_after_visits_every_row_once_in_key_order(
    corral: Any, world: dict[str, list[Instance]], machine: str, limit: int
) -> None:
    args, key, row_key, instance_key = LISTINGS[machine]
    pages: list[list[str]] = []
    after: list[str] = []
    while True:
        page = ok(corral(*args, "--all", "--limit", str(limit), *after, "--json"))
        pages.append([row_key(r) for r in page[key]])
        assert len(pages[-1]) <= limit
        if page["next_after"] is None:
            break
        assert page["next_after"] == max(pages[-1]), "the cursor is the page's last key"
        after = ["--after", page["next_after"]]
    walked = [k for p in pages for k in p]
    assert walked == sorted(instance_key(i) for i in world[machine]), "each once, in id order"
    assert all(pages), "a full last page says so: no empty page is ever needed"


def test_a_controller_filter_pages_over_its_own_rows_only(corral: Any, world: dict[str, list[Instance]]) -> None:
    mine = sorted(i.id for i in world["reviewer"] if i.data["controller_id"] == "ctl")
    walked: list[str] = []
    after: list[str] = []
    while True:
        page = ok(corral("reviewer", "list", "--all", "--controller", "ctl", "--limit", "2", *after, "--json"))
        assert {r["controller_id"] for r in page["reviewers"]} <= {"ctl"}
        walked += [r["id"] for r in page["reviewers"]]
        if page["next_after"] is None:
            break
        after = ["--after", page["next_after"]]
    assert walked == mine


def test_text_listings_keep_their_columns_and_hint_the_next_page(corral: Any, world: dict[str, list[Instance]]) -> None:
    done = corral("controller", "list")
    assert done.returncode == 0 and done.stderr == ""
    header, *rows = done.stdout.splitlines()
    assert header.split() == ["controller", "state", "generation", "lease", "holder", "expires"]
    live = sorted(i.data["controller_id"] for i in world["controller"] if i.state == "active")
    assert [row.split()[0] for row in rows] == live
    assert all(header.index("state") == row.index("active") for row in rows), "aligned columns"
    first = corral("controller", "list", "--all", "--limit", "2")
    assert first.returncode == 0 and len(first.stdout.splitlines()) == 3
    second_key = first.stdout.splitlines()[2].split()[0]
    assert first.stderr == f"more: repeat with --after {second_key}\n"
    rest = corral("controller", "list", "--all", "--after", second_key)
    shown = [line.split()[0] for line in (first.stdout + rest.stdout).splitlines() if not line.startswith("contr")]
    assert shown == sorted(i.data["controller_id"] for i in world["controller"]) and rest.stderr == ""
    receipts = corral("receipts", "--all")
    assert receipts.stdout.splitlines()[0].split() == ["token", "state", "target", "before", "after", "settled",
                                                       "reason"]  # fmt: skip


def test_receipts_state_overrides_the_default_and_excludes_all(corral: Any, world: dict[str, list[Instance]]) -> None:
    completed = ok(corral("receipts", "--state", "completed", "--json"))["receipts"]
    assert {r["state"] for r in completed} == {"completed"} and completed
    both = corral("receipts", "--all", "--state", "completed", "--json")
    assert both.returncode == 2 and json.loads(both.stdout)["error"]["code"] == "usage"


@pytest.mark.parametrize(
    ("machine", "args", "field"),
    [
        ("controller", ("--limit", "0"), "limit"),
        ("reviewer", ("--limit", "10001"), "limit"),
        ("writer", ("--limit", "-1"), "limit"),
        ("adopted", ("--after", ""), "after"),
        ("receipt", ("--limit", "0"), "limit"),
        ("plan", ("--after", ""), "after"),
    ],
)
def test_a_bad_page_is_a_clear_input_error(
    corral: Any, home: Path, machine: str, args: tuple[str, ...], field: str
) -> None:
    done = corral(*LISTINGS[machine][0], *args, "--json")
    assert done.returncode == 3, done.stdout + done.stderr
    error = json.loads(done.stdout)["error"]
    assert (error["code"], error["details"]["field"]) == ("input_invalid", field)


def test_status_counts_by_aggregate_and_keeps_its_shape(corral: Any, world: dict[str, list[Instance]]) -> None:
    report = ok(corral("status", "--json"))
    assert set(report) == {"version", "store", "agent_host", "agent_hosts", "counts", "needs_attention", "locks",
                           "spend", "cache", "confinement"}  # fmt: skip
    assert report["spend"] == [], "no driven agent (claude, codex) here: nothing spent"
    assert set(report["locks"]) == {"controllers", "leases", "plan_runners", "ended"}
    with sqlite3.connect(report["store"]["path"]) as raw:
        decoded: dict[str, dict[str, int]] = {}
        for machine, state, _data_text in raw.execute("SELECT machine, state, data FROM instances"):
            decoded.setdefault(machine, {}).setdefault(state, 0)
            decoded[machine][state] += 1
    assert report["counts"] == decoded, "counts equal a decode-and-count"
    locks = report["locks"]
    live = sorted(i.data["controller_id"] for i in world["controller"] if i.state == "active")
    assert sorted(c["controller_id"] for c in locks["controllers"]) == live
    assert {c["lock"] for c in locks["controllers"]} == {"active"}
    assert locks["ended"]["controller"] == sum(i.state == "released" for i in world["controller"])
    for machine in ("reviewer", "writer"):
        ended = sum(i.state in WORLD[machine][1] for i in world[machine])
        assert locks["ended"][machine] == ended
        listed = sorted(lease["id"] for lease in locks["leases"] if lease["machine"] == machine)
        assert listed == sorted(i.id for i in world[machine] if i.state not in WORLD[machine][1])
    unsettled = {(item["machine"], item["id"]) for item in report["needs_attention"] if item["kind"] == "unsettled"}
    assert ("reviewer", next(i.id for i in world["reviewer"] if i.state == "orphaned")) in unsettled
    assert not any(item["id"].startswith("controller/") for item in report["needs_attention"])


def test_the_streamed_table_aligns_on_a_sample_and_never_cuts_a_cell(monkeypatch: pytest.MonkeyPatch) -> None:
    from runner.cli import render

    out = io.StringIO()
    monkeypatch.setattr("sys.stdout", out)
    rows = [(f"id-{n}", None if n % 2 else n, "tail") for n in range(render.SAMPLE_ROWS + 50)]
    rows.append(("x" * 40, "wide-after-the-sample", "end"))
    render.table("a title", ["id", "value", "last"], iter(rows))
    title, header, *lines = out.getvalue().splitlines()
    assert title == "a title" and header.split() == ["id", "value", "last"]
    assert len(lines) == len(rows)
    assert lines[1].split() == ["id-1", "-", "tail"], "None prints as -"
    width = len("id-249")
    assert all(line.index("tail") == lines[0].index("tail") for line in lines[:-1]), "aligned by the sample"
    assert lines[0].startswith("id-0".ljust(width) + "  ")
    assert lines[-1] == "x" * 40 + "  " + "wide-after-the-sample" + "  end", "a wider cell later is printed whole"
