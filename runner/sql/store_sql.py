"""The store port's SQL (:mod:`runner.store.abc`), shared by the SQLite and PostgreSQL adapters.

Reading instances and their parts, the compare-and-set of an instance, the claims' overlap (all but
the probe itself), paging the event log, pruning it in batches and the idempotency records are one
implementation over a small :class:`Dialect`: what each store spells its own way (placeholders, a
list match, the column that orders an instance's parts, where its retention floor lives) and how a
row that does not decode is reported (by file or by server). Statements are written with ``?``
placeholders; a dialect whose placeholder differs turns them into its own (``%s``), as the mesh's
and the memory's shared SQL do (:mod:`runner.sql.mesh_sql`, :mod:`runner.sql.memory_sql`).
What differs in substance stays in its adapter: transactions and locking (SQLite's ``BEGIN
IMMEDIATE`` behind its write queue, PostgreSQL's advisory write lock), SQLite's cache of decoded
rows, PostgreSQL's NOTIFY, how an event takes its seq, how claims are probed (JSON arrays on
SQLite, arrays on PostgreSQL), counters, moving a store (but for the export's shared key order).

A dialect is bound to one connection under one of the store's own snapshots or writing
transactions, so every statement here commits or rolls back with the store's rows.
"""

from __future__ import annotations

import json
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from datetime import datetime, timedelta
from typing import Any, ClassVar

from runner.context import Claim, Event, Instance, format_time, parse_time
from runner.errors import ConflictError, EventsPrunedError, InputError, StoreCorruptError
from runner.scopes import ancestors
from runner.sql.dialect import SQLDialect
from runner.store.abc import IDEMPOTENCY_PRUNE_BATCH, IdempotencyRecord, Reader

INSTANCE = "SELECT id, machine, state, version, data, created_at, updated_at FROM instances"
EVENT = "SELECT seq, instance_id, machine, trigger, from_state, to_state, version, actor, payload, at FROM events"
"""The columns :meth:`Dialect.instance` and :meth:`Dialect.event` read, in their order."""


def decode_object(text: Any, where: str, table: str, row_id: Any, column: str, **located: Any) -> dict[str, Any]:
    """One JSON object column of one row; a row that does not decode is ``store_corrupt``, by table
    and id, against ``where`` (the file, the server and schema) and ``located`` (its fields: ``path``
    or ``server``)."""
    try:
        value = json.loads(text)
    except (TypeError, ValueError) as exc:  # ValueError covers JSONDecodeError and bad UTF-8
        why = f"{type(exc).__name__}: {exc}"
    else:
        if isinstance(value, dict):
            return value
        why = f"a JSON {type(value).__name__}, not an object"
    raise StoreCorruptError(
        f"the store {where} is damaged: {table} row {row_id!r} has an undecodable {column} column ({why}); "
        "restore the database from a backup",
        **located,
        table=table,
        row=row_id,
        column=column,
    )


def appended(
    seq: int, instance: Instance, trigger: str, from_state: str, actor: str, payload: dict[str, Any], at: str
) -> Event:
    """The event an append of ``instance``'s transition wrote, as the log's row reads back."""
    return Event(
        seq, instance.id, instance.machine, trigger, from_state, instance.state, instance.version, actor, payload, at
    )


COPY_ORDER = {
    "instances": "id",
    "events": "seq",
    "claims": "space, scope, kind, instance_id",
    "counters": "name",
    "agent_slots": "pane_id",
    "idempotency": "key",
    "mesh_agents": "agent_id",
    "mesh_messages": "seq",
    "mesh_deliveries": "agent_id, seq",
    "memory_projects": "name",
    "memory_checkpoints": "n",
}
"""The key order of each table's export, where both stores say it alike; each adapter adds
the first-write order of ``instance_parts`` and ``memory_sessions``, which it keeps its own way."""


class Dialect(SQLDialect, ABC):
    """One store's way of saying the store port's SQL, bound to one connection (:attr:`conn`)."""

    part_order: ClassVar[str]
    """The column that orders an instance's parts by first write (an upsert keeps it)."""

    __slots__ = ()

    @abstractmethod
    def one_of(self, column: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
        """A condition "``column`` is one of ``values``" (none: false) and its arguments."""

    @abstractmethod
    def decode(self, text: Any, table: str, row_id: Any, column: str) -> dict[str, Any]:
        """One JSON object column of one row (``store_corrupt``, by table and id, if it does not decode)."""

    @abstractmethod
    def floor(self) -> int:
        """The retention floor (``store_corrupt`` if the store's metadata lacks it)."""

    @abstractmethod
    def raise_floor(self, upto: int) -> None:
        """Set the retention floor to ``upto`` (the store's trigger lets it only rise)."""

    def instance(self, row: Sequence[Any]) -> Instance:
        """One row of :data:`INSTANCE`."""
        data = self.decode(row[4], "instances", row[0], "data")
        return Instance(row[0], row[1], row[2], row[3], data, row[5], row[6])

    def event(self, row: Sequence[Any]) -> Event:
        """One row of :data:`EVENT`."""
        payload = self.decode(row[8], "events", row[0], "payload")
        return Event(row[0], row[1], row[2], row[3], row[4], row[5], row[6], row[7], payload, row[9])


# --- instances ----------------------------------------------------------------------------------------


def check_page(after: str | None, limit: int | None) -> None:
    """The paging arguments of :meth:`Reader.find`, refused alike by every adapter.

    Raises:
        InputError: ``input_invalid`` for a ``limit`` that is not an integer >= 1, or an ``after``
            that is not a string (a caller's bug: surfaces validate their inputs first).
    """
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise InputError("limit", f"{limit!r} is not an integer >= 1")
    if after is not None and not isinstance(after, str):
        raise InputError("after", f"{after!r} is not an instance id")


class SQLReader(Reader):
    """The reads both adapters' snapshots answer alike, through :attr:`_sql`.

    An adapter's reader sets :attr:`_sql` (its dialect on the view's connection) and keeps what is
    its own: ``get`` (SQLite remembers decoded rows) and how claims are probed.
    """

    _sql: Dialect

    def find(
        self,
        machine: str,
        states: Iterable[str] | None = None,
        *,
        after: str | None = None,
        limit: int | None = None,
    ) -> list[Instance]:
        check_page(after, limit)
        sql = self._sql
        statement = INSTANCE + " WHERE machine = ?"
        args: list[Any] = [machine]
        if states is not None:
            condition, values = sql.one_of("state", list(states))
            statement += " AND " + condition
            args += values
        if after is not None:
            # Code point order, as Python compares str: SQLite's BINARY collation compares UTF-8 bytes,
            # PostgreSQL's columns are COLLATE "C".
            statement += " AND id > ?"
            args.append(after)
        statement += " ORDER BY id"
        if limit is not None:
            statement += " LIMIT ?"
            args.append(limit)
        return [sql.instance(row) for row in sql.run(statement, args)]

    def counts(self, machine: str | None = None) -> dict[tuple[str, str], int]:
        # Served by instances_by_machine_state (on SQLite a covering scan): no data column is read.
        statement = "SELECT machine, state, count(*) FROM instances"
        args: list[Any] = []
        if machine is not None:
            statement += " WHERE machine = ?"
            args.append(machine)
        rows = self._sql.run(statement + " GROUP BY machine, state", args)
        return {(str(m), str(s)): int(n) for m, s, n in rows}

    def part(self, instance_id: str, key: str) -> dict[str, Any] | None:
        sql = self._sql
        row = sql.run(
            "SELECT value FROM instance_parts WHERE instance_id = ? AND key = ?", (instance_id, key)
        ).fetchone()
        return None if row is None else sql.decode(row[0], "instance_parts", f"{instance_id} {key}", "value")

    def parts(self, instance_id: str, prefix: str = "") -> dict[str, dict[str, Any]]:
        sql = self._sql
        rows = sql.run(
            "SELECT key, value FROM instance_parts WHERE instance_id = ? AND substr(key, 1, ?) = ?"
            f" ORDER BY {sql.part_order}",
            (instance_id, len(prefix), prefix),
        )
        return {key: sql.decode(value, "instance_parts", f"{instance_id} {key}", "value") for key, value in rows}

    def part_count(self, instance_id: str, prefix: str = "") -> int:
        row = self._sql.run(
            "SELECT count(*) FROM instance_parts WHERE instance_id = ? AND substr(key, 1, ?) = ?",
            (instance_id, len(prefix), prefix),
        ).fetchone()
        return int(row[0])

    def probe_claims(
        self, space: str | None, scopes: Iterable[str], probe: Callable[[str, list[str], list[str]], Iterable[Any]]
    ) -> list[Claim]:
        """:meth:`Reader.overlapping_claims`: ``probe(space, exact, under)`` gives the rows
        ``(instance_id, space, kind, scope)`` of one space's claims whose scope is one of ``exact``
        (the scopes and their ancestors) or lies under one of ``under`` (the scopes), each sorted."""
        wanted = sorted(set(scopes))
        if not wanted:
            return []
        exact: set[str] = set(wanted)
        for scope in wanted:
            exact.update(ancestors(scope))
        if space is None:
            spaces = [row[0] for row in self._sql.run("SELECT DISTINCT space FROM claims ORDER BY space")]
        else:
            spaces = [space]
        probes = sorted(exact)
        rows: set[tuple[str, str, str, str]] = set()  # a claim may be under one scope and above another
        for one in spaces:
            rows.update(probe(one, probes, wanted))
        return [Claim(space=r[1], kind=r[2], scope=r[3], instance_id=r[0]) for r in sorted(rows)]


def created_elsewhere(instance: Instance) -> ConflictError:
    """The conflict of creating an instance whose id someone else took meanwhile."""
    return ConflictError(
        f"instance {instance.id!r} was created by someone else meanwhile", instance=instance.id, expected_version=0
    )


def compare_and_set(sql: Dialect, reader: Reader, instance: Instance, state: str, encoded: str, stamp: str) -> None:
    """Write ``instance``'s next version, or ``version_conflict`` if it is no longer the stored one."""
    # Invariant: the compare-and-set; 0 rows means the row moved (or never was) since it was read.
    cursor = sql.run(
        "UPDATE instances SET state = ?, version = version + 1, data = ?, updated_at = ? WHERE id = ? AND version = ?",
        (state, encoded, stamp, instance.id, instance.version),
    )
    if cursor.rowcount != 1:
        current = reader.get(instance.id)
        raise ConflictError(
            f"instance {instance.id!r} changed underneath (expected version {instance.version}, "
            f"found {current.version if current else 'none'})",
            instance=instance.id,
            expected_version=instance.version,
            actual_version=current.version if current else None,
        )


def put_part(sql: Dialect, instance_id: str, key: str, encoded: str) -> None:
    """:meth:`Transaction.put_part`: an upsert, which keeps the part's place in first-write order."""
    sql.run(
        "INSERT INTO instance_parts (instance_id, key, value) VALUES (?, ?, ?)"
        " ON CONFLICT (instance_id, key) DO UPDATE SET value = excluded.value",
        (instance_id, key, encoded),
    )


# --- the event log ------------------------------------------------------------------------------------


def event_rows(sql: Dialect, since: int, limit: int | None, instance_id: str | None) -> list[Sequence[Any]]:
    """The rows of :meth:`Store.events` (decode them with :meth:`Dialect.event`); ``events_pruned``
    if ``since`` is below the floor. Call it in one snapshot: the floor and the rows agree, no silent hole."""
    statement = EVENT + " WHERE seq > ?"
    args: list[Any] = [since]
    if instance_id is not None:
        statement += " AND instance_id = ?"
        args.append(instance_id)
    statement += " ORDER BY seq"
    if limit is not None:
        statement += " LIMIT ?"
        args.append(limit)
    floor = sql.floor()
    if since < floor:
        raise EventsPrunedError(since, floor)
    return list(sql.run(statement, args).fetchall())


def check_prune(keep: int | None, before: int | None, recorded_before: datetime | None, batch: int) -> None:
    """The arguments of :meth:`Store.prune_events`: exactly one criterion, integers >= 0, a batch >= 1."""
    criteria = {"keep": keep, "before": before, "recorded_before": recorded_before}
    given = [name for name, value in criteria.items() if value is not None]
    if len(given) != 1:
        raise InputError("prune", f"give exactly one of keep, before, recorded_before (got {given or 'none'})")
    for name, number in (("keep", keep), ("before", before), ("batch", batch)):
        if number is not None and (isinstance(number, bool) or not isinstance(number, int) or number < 0):
            raise InputError(name, f"{number!r} is not an integer >= 0")
    if batch < 1:
        raise InputError("batch", f"{batch!r} is not a positive integer")


def prune_plan(
    sql: Dialect, keep: int | None, before: int | None, recorded_before: datetime | None
) -> tuple[int, int, int]:
    """The floor, the target (the highest seq that goes) and how many events that removes, read
    in one snapshot; the batches of :func:`prune_batches` never go past the target."""
    floor = sql.floor()
    target = max(floor, _prune_target(sql, keep, before, recorded_before) or 0)
    row = sql.run("SELECT count(*) FROM events WHERE seq <= ?", (target,)).fetchone()
    return floor, target, int(row[0]) if row else 0


def _prune_target(sql: Dialect, keep: int | None, before: int | None, recorded_before: datetime | None) -> int | None:
    """The highest seq that one pruning criterion removes (None: none), never past the newest event."""
    if keep is not None:
        row = sql.run("SELECT seq FROM events ORDER BY seq DESC LIMIT 1 OFFSET ?", (keep,)).fetchone()
        return int(row[0]) if row else None
    if before is None:
        assert recorded_before is not None
        # The longest prefix recorded before the moment: up to the first event that is not.
        first_kept = sql.run(
            "SELECT seq FROM events WHERE at >= ? ORDER BY seq LIMIT 1", (format_time(recorded_before),)
        ).fetchone()
        if first_kept is None:
            newest = sql.run("SELECT max(seq) FROM events").fetchone()
            return None if newest is None or newest[0] is None else int(newest[0])
        before = int(first_kept[0])
    below = sql.run("SELECT max(seq) FROM events WHERE seq < ?", (before,)).fetchone()
    return None if below is None or below[0] is None else int(below[0])


def prune_batches(
    write: Callable[[], AbstractContextManager[Dialect]], target: int, batch: int
) -> tuple[int, int, int]:
    """Delete the events up to ``target``, ``batch`` at a time, each batch one writing transaction
    (``write``); the floor reached, the events deleted and the batches taken."""
    deleted = batches = 0
    took = 0.0
    current = 0
    while True:
        if batches:
            time.sleep(min(0.05, took))  # the lock free for a while: waiting writers get in
        began = time.monotonic()
        with write() as sql:
            current = sql.floor()
            if current >= target:
                break
            row = sql.run(
                "SELECT seq FROM events WHERE seq > ? AND seq <= ? ORDER BY seq LIMIT 1 OFFSET ?",
                (current, target, batch - 1),
            ).fetchone()
            upto = int(row[0]) if row else target
            # The floor first: the delete trigger admits only rows at or below it.
            sql.raise_floor(upto)
            deleted += sql.run("DELETE FROM events WHERE seq <= ?", (upto,)).rowcount
            batches += 1
        took = time.monotonic() - began
    return current, deleted, batches


# --- idempotency records -----------------------------------------------------------------------------


def reserve_idempotency(
    sql: Dialect, now: datetime, key: str, request_sha256: str, ttl_seconds: float, stale_seconds: float
) -> IdempotencyRecord | None:
    """:meth:`Store.reserve_idempotency` inside one writing transaction of the store."""
    stamp = format_time(now)
    expires = format_time(now + timedelta(seconds=ttl_seconds))
    # Opportunistic and bounded: expired rows go a batch at a time, so a reservation stays short.
    sql.run(
        "DELETE FROM idempotency WHERE key IN"
        " (SELECT key FROM idempotency WHERE expires_at <= ? ORDER BY expires_at LIMIT ?)",
        (stamp, IDEMPOTENCY_PRUNE_BATCH),
    )
    row = sql.run(
        "SELECT key, request_sha256, state, status, response, created_at, expires_at FROM idempotency WHERE key = ?",
        (key,),
    ).fetchone()
    found = None if row is None else IdempotencyRecord(*row)
    # Invariant: a reservation is one serialized transaction (SQLite's BEGIN IMMEDIATE, PostgreSQL's
    # advisory write lock), so of two reservers of one free key exactly one inserts; the other reads
    # the row and gets it back.
    if found is not None and found.expires_at > stamp:
        if not found.matches(request_sha256) or found.state == "done":
            return found
        if parse_time(found.created_at) > now - timedelta(seconds=stale_seconds):
            return found  # in flight
    sql.run(
        "INSERT INTO idempotency (key, request_sha256, state, status, response, created_at, expires_at)"
        " VALUES (?, ?, 'pending', NULL, NULL, ?, ?)"
        " ON CONFLICT (key) DO UPDATE SET request_sha256 = excluded.request_sha256, state = 'pending',"
        " status = NULL, response = NULL, created_at = excluded.created_at, expires_at = excluded.expires_at",
        (key, request_sha256, stamp, expires),
    )
    return None


def check_completion(status: int, response_json: str) -> None:
    """The answer :meth:`Store.complete_idempotency` records: an integer status and JSON text."""
    if isinstance(status, bool) or not isinstance(status, int):
        raise InputError("status", f"{status!r} is not an integer status")
    if not isinstance(response_json, str):
        raise InputError("response_json", "the response is JSON text")


def complete_idempotency(sql: Dialect, now: datetime, key: str, status: int, response_json: str) -> bool:
    """:meth:`Store.complete_idempotency` inside one writing transaction: the pending record done,
    kept as long again as it was reserved for, from now."""
    row = sql.run(
        "SELECT created_at, expires_at FROM idempotency WHERE key = ? AND state = 'pending'", (key,)
    ).fetchone()
    if row is None:
        return False
    ttl = parse_time(row[1]) - parse_time(row[0])
    sql.run(
        "UPDATE idempotency SET state = 'done', status = ?, response = ?, expires_at = ? WHERE key = ?",
        (status, response_json, format_time(now + ttl), key),
    )
    return True


def release_idempotency(sql: Dialect, key: str) -> bool:
    """:meth:`Store.release_idempotency` inside one writing transaction: a pending record goes."""
    return bool(sql.run("DELETE FROM idempotency WHERE key = ? AND state = 'pending'", (key,)).rowcount)


def prune_idempotency(sql: Dialect, moment: datetime) -> int:
    """:meth:`Store.prune_idempotency` inside one writing transaction: the records expired at ``moment``."""
    return int(sql.run("DELETE FROM idempotency WHERE expires_at <= ?", (format_time(moment),)).rowcount)
