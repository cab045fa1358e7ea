"""The SQLite store's file: created exclusively and whole, recognised before anything writes to it.

A store file is created only where no file exists, and never observed half-made: the schema is
built in a private temporary file in the same directory, which is then hard-linked into place
(``link`` fails if the name exists, so of two processes creating at once exactly one wins and the
other opens the winner's file). An existing file is never re-initialised. Before the store writes
anything (not even the switch to WAL), :func:`recognise` checks, cheaply:

1. it is a regular file of at least one 100-byte header that starts with SQLite's magic string
   (an empty, short or random file is ``store_corrupt``);
2. SQLite can read its header and schema (a file truncated below the page count its header records
   fails here: SQLite compares the two on the first read; ``store_corrupt``);
3. ``PRAGMA application_id`` is corral's, or 0 with corral's tables (a database of an older corral,
   which gets the id stamped); anything else is ``store_foreign``;
4. ``PRAGMA user_version`` is one this code knows (newer: ``store_too_new``; 0 with corral's tables,
   or tables missing for the recorded version: ``store_corrupt``).

This is not ``PRAGMA integrity_check``, which reads every page (too slow for every command);
damage inside a page is found when it is read, and refused then (see ``corruption_refused``).
"""

from __future__ import annotations

import os
import secrets
import sqlite3
import stat
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.errors import StoreCorruptError, StoreForeignError, StoreVersionError

# "corr" in ASCII: SQLite's header field 68, so `file(1)` and corral itself tell corral's databases apart.
APPLICATION_ID = 0x636F7272
MAGIC = b"SQLite format 3\x00"
HEADER_SIZE = 100
_CORRUPT_CODES = frozenset({11, 26})  # SQLITE_CORRUPT, SQLITE_NOTADB (primary result codes)
_CORRAL_TABLES = frozenset({"instances", "events"})  # what every corral schema version has


@dataclass(frozen=True)
class Recognised:
    """What :func:`recognise` found in an existing store file."""

    user_version: int
    stamped: bool  # False: an older corral's database, application_id still 0


def corrupt(path: Path, why: str, **details: Any) -> StoreCorruptError:
    """The one ``store_corrupt`` message shape: what is wrong, where, and what to do."""
    return StoreCorruptError(
        f"the store {path} is damaged: {why}; corral will not re-initialise it. Restore it from a backup, "
        "or move it away to start a new store",
        path=str(path),
        **details,
    )


def is_corruption(exc: sqlite3.DatabaseError) -> bool:
    """Whether SQLite reported the file itself as damaged (not a lock, a constraint or a bug)."""
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(code, int) and code & 0xFF in _CORRUPT_CODES


@contextmanager
def corruption_refused(path: Path) -> Iterator[None]:
    """Turn SQLite's "malformed" / "not a database" into ``store_corrupt`` naming the file."""
    try:
        yield
    except sqlite3.DatabaseError as exc:
        if type(exc) is sqlite3.DatabaseError and is_corruption(exc):
            raise corrupt(path, str(exc)) from None
        raise


def check_header(path: Path) -> None:
    """Refuse an existing ``path`` that is not a regular file starting with an SQLite header.

    Opened with ``O_NONBLOCK`` and checked with ``fstat``, so a FIFO put in its place cannot hang us.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except IsADirectoryError:
        raise corrupt(path, "it is a directory, not a database file") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise corrupt(path, "it is not a regular file")
        if info.st_size == 0:
            raise corrupt(path, "the file is empty (0 bytes)", size=0)
        header = os.read(fd, HEADER_SIZE)
    finally:
        os.close(fd)
    if len(header) < HEADER_SIZE or not header.startswith(MAGIC):
        raise corrupt(path, "it is not an SQLite database (no SQLite header)", size=info.st_size)


def recognise(
    conn: sqlite3.Connection,
    path: Path,
    tables_by_version: Mapping[int, frozenset[str]],
    read: Callable[[Callable[[], Any]], Any],
) -> Recognised:
    """Classify the open database at ``path`` without writing to it; raise if it is not a corral store.

    Args:
        conn: a connection that has not written yet.
        tables_by_version: the tables each known schema version has (1..latest).
        read: runs one read, retrying while another connection holds a lock.
    """
    latest = max(tables_by_version)
    with corruption_refused(path):
        app_id = int(read(lambda: conn.execute("PRAGMA application_id").fetchone()[0]))
        version = int(read(lambda: conn.execute("PRAGMA user_version").fetchone()[0]))
        rows = read(lambda: conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall())
    tables = {str(row[0]) for row in rows}
    if app_id not in (0, APPLICATION_ID):
        raise StoreForeignError(
            f"the file {path} is another application's SQLite database (application_id {app_id:#x}, "
            f"corral's is {APPLICATION_ID:#x}); point --store elsewhere or move it away",
            path=str(path),
            application_id=app_id,
        )
    if version > latest:
        raise StoreVersionError(
            f"the database {path} has schema version {version}, newer than this corral understands "
            f"({latest}); upgrade corral",
            path=str(path),
            schema_version=version,
            supported=latest,
        )
    if app_id == 0 and not tables & _CORRAL_TABLES:
        what = f"tables {', '.join(sorted(tables))}" if tables else "no tables"
        raise StoreForeignError(
            f"the file {path} is an SQLite database corral did not create ({what}, application_id 0); "
            "point --store elsewhere or move it away",
            path=str(path),
            tables=sorted(tables),
        )
    if version < 1:
        raise corrupt(path, "corral's tables are there but its schema version (PRAGMA user_version) is 0")
    missing = tables_by_version[version] - tables
    if missing:
        raise corrupt(
            path,
            f"schema version {version} lacks the tables {', '.join(sorted(missing))}",
            schema_version=version,
            missing=sorted(missing),
        )
    return Recognised(version, stamped=app_id == APPLICATION_ID)


def create_exclusive(path: Path, build: Callable[[sqlite3.Connection], None]) -> bool:
    """Create the store file at ``path`` whole, if no file is there; False if one already was.

    ``build`` gets a connection to a private temporary file (mode 0600, same directory) and makes
    the complete schema; the file is then linked into place only if ``path`` does not exist.
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
    try:
        conn = sqlite3.connect(str(tmp), isolation_level=None)
        try:
            build(conn)
        finally:
            conn.close()  # the last connection: checkpoints and removes the temporary -wal / -shm
        fd = os.open(tmp, os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        dir_fd = os.open(path.parent, os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        return True
    finally:
        for leftover in (tmp, tmp.with_name(tmp.name + "-wal"), tmp.with_name(tmp.name + "-shm")):
            leftover.unlink(missing_ok=True)
