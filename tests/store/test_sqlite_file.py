"""The SQLite store's file: created whole and exclusively; an empty, damaged or foreign file is refused.

Every refusal is checked through the real ``corral`` executable (exit 3, the code, the path in the
message) and leaves the file byte-for-byte as it was. An older corral's database (application id 0,
corral's tables, a known version) still opens, and gets corral's application id stamped.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from runner.agents.slots import slot_store
from runner.definitions.library import Library
from runner.errors import StoreCorruptError
from runner.service import AcquireInput, Service
from runner.sql.store_sqlite import MIGRATIONS, SCHEMA_VERSION, SQLiteStore
from runner.sql.store_sqlite_file import APPLICATION_ID

SHA = hashlib.sha256(b"authority").hexdigest()


def corral(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(Path(sys.executable).parent / "corral"), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def real_db(path: Path, library: Library) -> None:
    """A real corral database with a live lease and a few events, checkpointed into the main file."""
    with SQLiteStore(path) as store:
        service = Service(store, library, actor="test")
        for controller in ("ctl", "other"):
            service.controller.acquire(AcquireInput(controller, "TICKET-1", SHA, 60, "h@host"))


def pragma(path: Path, name: str) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute(f"PRAGMA {name}").fetchone()[0])
    finally:
        conn.close()


def _zero_length(db: Path, library: Library) -> None:
    db.write_bytes(b"")


def _truncated(db: Path, library: Library) -> None:
    real_db(db, library)
    with sqlite3.connect(db) as conn:  # enough pages that half the file loses some
        conn.execute("CREATE TABLE padding (x TEXT)")
        conn.executemany("INSERT INTO padding VALUES (?)", [("x" * 500,)] * 200)
    conn.close()
    data = db.read_bytes()
    db.write_bytes(data[: len(data) // 2])


def _random_bytes(db: Path, library: Library) -> None:
    db.write_bytes(os.urandom(8192))


def _short_header(db: Path, library: Library) -> None:
    db.write_bytes(b"SQLite format 3\x00" + b"\x00" * 20)


def _other_app(db: Path, library: Library) -> None:
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
    conn.execute("INSERT INTO notes (body) VALUES ('mine')")
    conn.commit()
    conn.close()


def _other_app_id(db: Path, library: Library) -> None:
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA application_id = 1234567")
    conn.execute("CREATE TABLE instances (id TEXT)")  # corral's table names do not make it corral's
    conn.commit()
    conn.close()


def _empty_sqlite(db: Path, library: Library) -> None:
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA user_version = 0")
    conn.execute("VACUUM")  # writes a header: a valid, empty database that is nobody's store
    conn.close()


def _version_zero(db: Path, library: Library) -> None:
    real_db(db, library)
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA user_version = 0")
    conn.close()


def _table_dropped(db: Path, library: Library) -> None:
    real_db(db, library)
    with sqlite3.connect(db) as conn:
        conn.execute("DROP TABLE counters")
    conn.close()


def _directory(db: Path, library: Library) -> None:
    db.mkdir()


def _fifo(db: Path, library: Library) -> None:
    os.mkfifo(db)


CASES = {
    "zero-length": (_zero_length, "store_corrupt"),
    "truncated": (_truncated, "store_corrupt"),
    "random-bytes": (_random_bytes, "store_corrupt"),
    "short-header": (_short_header, "store_corrupt"),
    "other-app": (_other_app, "store_foreign"),
    "other-app-id": (_other_app_id, "store_foreign"),
    "empty-sqlite": (_empty_sqlite, "store_foreign"),
    "user-version-0": (_version_zero, "store_corrupt"),
    "table-dropped": (_table_dropped, "store_corrupt"),
    "directory": (_directory, "store_corrupt"),
    "fifo": (_fifo, "store_corrupt"),
}


def snapshot(directory: Path) -> dict[str, bytes | str]:
    """Every file beside the store (names and bytes): a refusal must leave them all as they were."""
    out: dict[str, bytes | str] = {}
    for path in sorted(directory.iterdir()):
        if path.is_file() and not path.is_symlink():
            out[path.name] = path.read_bytes()
        else:
            out[path.name] = "dir" if path.is_dir() else "other"
    return out


@pytest.mark.parametrize("case", list(CASES))
def test_damaged_or_foreign_store_is_refused_untouched(
    case: str, cli_env: dict[str, str], home: Path, library: Library
) -> None:
    home.mkdir(mode=0o700)
    db = home / "corral.db"
    make, code = CASES[case]
    make(db, library)
    before = snapshot(home)
    for args in (["controller", "list", "--json"], ["status", "--json"], ["controller", "list"]):
        proc = corral(cli_env, *args)
        assert proc.returncode == 3, (args, proc.stdout, proc.stderr)
        if "--json" in args:
            error = json.loads(proc.stdout)["error"]
            assert error["code"] == code, error
            assert error["details"]["path"] == str(db)
            assert str(db) in error["message"]
            assert "move it away" in error["message"]
        else:
            assert f"error [{code}]" in proc.stderr and "Traceback" not in proc.stderr
        assert snapshot(home) == before, f"{args} changed the files of a refused store"


def test_a_corrupt_row_is_refused_by_table_and_id(cli_env: dict[str, str], home: Path, library: Library) -> None:
    home.mkdir(mode=0o700)
    db = home / "corral.db"
    real_db(db, library)
    conn = sqlite3.connect(db)
    query = "SELECT id FROM instances WHERE json_extract(data, '$.controller_id') = 'ctl'"
    (lease_id,) = conn.execute(query).fetchone()
    conn.execute('UPDATE instances SET data = \'{"controller_id": "ctl", trunc\' WHERE id = ?', (lease_id,))
    conn.commit()
    conn.close()
    before = db.read_bytes()
    for args in (["controller", "list", "--json"], ["status", "--json"]):
        proc = corral(cli_env, *args)
        assert proc.returncode == 3, (args, proc.stdout, proc.stderr)
        error = json.loads(proc.stdout)["error"]
        assert error["code"] == "store_corrupt"
        assert error["details"] == {
            "path": str(db),
            "table": "instances",
            "row": lease_id,
            "column": "data",
        }
        assert "instances" in error["message"] and lease_id in error["message"]
    assert db.read_bytes() == before


@pytest.mark.parametrize("bad", ["[1, 2]", "not json", '"a string"'])
def test_a_corrupt_event_payload_or_slot_is_refused(tmp_path: Path, library: Library, bad: str) -> None:
    db = tmp_path / "corral.db"
    real_db(db, library)
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("DROP TRIGGER events_no_update")  # the log is append-only even to raw SQL, on purpose
    conn.execute("UPDATE events SET payload = ? WHERE seq = 2", (bad,))
    conn.execute(
        "INSERT INTO agent_slots (pane_id, number, name, kind, cwd, status, seq, options, dir, created_at, updated_at)"
        " VALUES ('p1', 1, 'a', 'script', '/', 'idle', 0, ?, '/', 't', 't')",
        (bad,),
    )
    conn.close()
    with SQLiteStore(db) as store:
        with pytest.raises(StoreCorruptError) as caught:
            store.events()
        assert caught.value.details == {"path": str(db), "table": "events", "row": 2, "column": "payload"}
        with pytest.raises(StoreCorruptError) as caught, slot_store(store).read() as reader:
            reader.slots()
        assert caught.value.details["table"] == "agent_slots" and caught.value.details["row"] == "p1"


def test_an_older_corrals_database_opens_and_is_stamped(cli_env: dict[str, str], home: Path) -> None:
    """Version 2 as corral made it before application ids: migrated by stamping, data kept."""
    home.mkdir(mode=0o700)
    db = home / "corral.db"
    conn = sqlite3.connect(db, isolation_level=None)
    for script in MIGRATIONS:
        conn.executescript(script)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    conn.execute(
        "INSERT INTO instances VALUES ('i1', 'controller', 'released', 3, '{\"controller_id\": \"old\"}', 't', 't')"
    )
    conn.close()
    assert pragma(db, "application_id") == 0
    proc = corral(cli_env, "controller", "list", "--all", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [lease["controller_id"] for lease in json.loads(proc.stdout)["leases"]] == ["old"]
    assert pragma(db, "application_id") == APPLICATION_ID
    assert pragma(db, "user_version") == SCHEMA_VERSION
    with SQLiteStore(db) as store, store.read() as reader:
        assert reader.get("i1") is not None


def test_a_new_store_is_stamped_and_private(tmp_path: Path) -> None:
    db = tmp_path / "corral.db"
    SQLiteStore(db).close()
    assert pragma(db, "application_id") == APPLICATION_ID
    assert pragma(db, "user_version") == SCHEMA_VERSION
    assert oct(db.stat().st_mode & 0o777) == oct(0o600)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corral.db"], "no temporary file left behind"


def test_concurrent_creation_makes_one_store(tmp_path: Path) -> None:
    """Eight threads open a store that does not exist yet: one creates it, all open the same file."""
    db = tmp_path / "corral.db"
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []
    inodes: list[int] = []

    def open_one() -> None:
        barrier.wait()
        try:
            with SQLiteStore(db) as store:
                with store.write() as tx:
                    tx.next_number("opened")
                inodes.append(db.stat().st_ino)
        except BaseException as exc:  # reported below, with the thread's error
            errors.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(set(inodes)) == 1
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT value FROM counters WHERE name = 'opened'").fetchone()[0] == 8
    conn.close()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
