"""The store itself as an operation: ``corral store info`` and ``corral store migrate``.

**Info**: what the store is (adapter, where, ``store_id``, schema version, retention floor) and its
sizes (rows per table, bytes on disk), never a password.

**Migrate**: copy a whole store into an empty one of any adapter (``sqlite:///…`` to
``postgresql://…``, or back): instances, their parts, events with their sequence numbers, claims,
counters, agent slots, idempotency records, the agent mesh (agents, messages, deliveries), handoff
memory (projects, sessions, checkpoints with their numbers; the target's search index rebuilt), and
the store's metadata (its ``store_id``: it is the same
store, moved, so credential files bound to it stay valid; its retention floor; its last seq, so the
next event continues the sequence). The source is read from one snapshot, streamed; the target is
written in one transaction that refuses a non-empty target (``store_not_empty``, exit 4) and, before
it commits, re-reads what it wrote and compares it with what was read: the same rows per table and
the same SHA-256 digest of every row in order (``store_copy_mismatch`` otherwise, and nothing is
written). Stop the coordinators first: writes to the source after its snapshot are not copied.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from typing import Any

from runner.errors import CorralError, InputError
from runner.store import Store, open_store, sqlite_path
from runner.store.abc import ExportRow


class Tally:
    """Rows per table and a digest of every row in order, of one export stream."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self._digest = hashlib.sha256()

    def add(self, table: str, row: tuple[Any, ...]) -> None:
        self.counts[table] = self.counts.get(table, 0) + 1
        line = json.dumps([table, list(row)], separators=(",", ":"), ensure_ascii=False, sort_keys=True)
        self._digest.update(line.encode("utf-8", "surrogatepass") + b"\n")

    def through(self, rows: Iterable[ExportRow]) -> Iterator[ExportRow]:
        for table, row in rows:
            self.add(table, row)
            yield table, row

    @property
    def digest(self) -> str:
        return self._digest.hexdigest()


def _described(store: Store) -> dict[str, Any]:
    """The store's public description: its info without anything secret (a PostgreSQL info carries
    the URL without its password already)."""
    info = dict(store.info())
    return {"url": info.pop("url", None) or store.url, **info}


def store_info(store: Store) -> dict[str, Any]:
    """``corral store info``: the store, its schema version, retention floor and sizes."""
    return {**_described(store), "sizes": store.sizes()}


def _open_source(url: str) -> Store:
    path = sqlite_path(url)
    if path is not None and not path.is_file():
        # Opening an SQLite URL makes the file: a source that is not there is a typo, not an empty store.
        raise InputError("from", f"no store file at {path}", code="store_url_invalid", path=str(path))
    return open_store(url)


def migrate_store(source_url: str, target_url: str) -> dict[str, Any]:
    """Copy the store at ``source_url`` into the empty store at ``target_url`` (created if need be).

    Raises:
        InputError: ``store_url_invalid`` for a bad URL or a missing source file (field ``from``/``to``).
        RefusedError: ``store_not_empty`` when the target holds anything; nothing was written.
        CorralError: ``store_copy_mismatch`` when the target's re-read differs; nothing was written.
    """
    if source_url == target_url:
        raise InputError("to", "the target is the source", code="store_url_invalid")
    with _open_source(source_url) as source, open_store(target_url) as target:
        read = Tally()
        where = _described(target)["url"]

        def verify(written: Iterator[ExportRow]) -> None:
            again = Tally()
            for table, row in written:
                again.add(table, row)
            if (again.counts, again.digest) != (read.counts, read.digest):
                raise CorralError(
                    f"the copy in {where} differs from what was read from the source; nothing was written",
                    code="store_copy_mismatch",
                    read=read.counts,
                    written=again.counts,
                )

        rows = source.export_rows()
        try:
            target.import_rows(read.through(rows), verify)
        finally:
            close = getattr(rows, "close", None)
            if close is not None:
                close()
        return {
            "from": _described(source),
            "to": _described(target),
            "counts": {table: read.counts.get(table, 0) for table in read.counts},
            "digest": read.digest,
            "verified": True,
        }
