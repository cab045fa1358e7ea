"""The mesh port (:mod:`runner.store.mesh`) in SQL, shared by the SQLite and PostgreSQL adapters.

The statements are the portable subset both speak (``ON CONFLICT`` upserts, ``RETURNING``, partial
indexes); they are written with ``?`` placeholders and the PostgreSQL adapter turns them into
``%s``. Every method runs inside one transaction of the store itself (``store.write()`` /
``store.read()``), on its connection, so a mesh write and the events it appends commit together, and
writers are serialized as every writer of the store is (``BEGIN IMMEDIATE``; the advisory lock).
Message sequence numbers come from the store's counter ``mesh_message``: handed out under that
serialization, they are commit-ordered on both stores.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from runner.context import format_time
from runner.errors import NotFoundError, RefusedError, StoreCorruptError
from runner.store.abc import Reader, Store, Transaction
from runner.store.mesh import (
    PRUNE_BATCH,
    Acked,
    CheckIn,
    Inbox,
    MeshStore,
    Message,
    Presence,
    Sent,
    check_agent_id,
    check_body,
    check_caps,
    check_limit,
    check_message_id,
    check_name,
    check_pane,
    check_repo,
    check_status,
    check_subject,
    check_thread,
    check_to,
    check_token,
    check_token_sha256,
    check_ttl,
    default_ttl,
    event_instance,
)

_AGENT = (
    "agent_id, role, repo, caps, status, status_at, pane, ttl_seconds, joined_at, seen_at, expires_at, version, wake_at"
)
_MESSAGE = "m.message_id, m.seq, m.sender, m.to_kind, m.to_value, m.subject, m.body, m.thread, m.urgent, m.sent_at"
_CHUNK = 500  # ids per statement (below SQLite's variable limit in old builds)


def _encode(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


class SQLMesh(MeshStore):
    """The mesh tables of ``store``; ``connection`` gives the connection under one of its views."""

    def __init__(self, store: Store, connection: Callable[[Reader], Any], placeholder: str, where: str) -> None:
        self.store = store
        self._connection = connection
        self._placeholder = placeholder
        self._where = where  # what a damaged row is reported against

    # --- plumbing --------------------------------------------------------------------------------------

    def _run(self, view: Reader, sql: str, args: Sequence[Any] = ()) -> Any:
        if self._placeholder != "?":
            sql = sql.replace("?", self._placeholder)
        return self._connection(view).execute(sql, tuple(args))

    def _presence(self, row: Sequence[Any]) -> Presence:
        try:
            caps = json.loads(row[3])
        except (TypeError, ValueError):
            caps = None
        if not isinstance(caps, list):
            raise StoreCorruptError(
                f"the store {self._where} is damaged: mesh_agents row {row[0]!r} has an undecodable caps column",
                table="mesh_agents",
                row=row[0],
                column="caps",
            )
        return Presence(
            agent_id=row[0],
            role=row[1],
            repo=row[2],
            caps=tuple(str(c) for c in caps),
            status=row[4],
            status_at=row[5],
            pane=row[6],
            ttl_seconds=int(row[7]),
            joined_at=row[8],
            seen_at=row[9],
            expires_at=row[10],
            version=int(row[11]),
            wake_at=row[12],
        )

    @staticmethod
    def _message(row: Sequence[Any]) -> Message:
        return Message(row[0], int(row[1]), row[2], row[3], row[4], row[5], row[6], row[7], bool(row[8]), row[9])

    def _row(self, view: Reader, agent_id: str) -> Presence | None:
        row = self._run(view, f"SELECT {_AGENT} FROM mesh_agents WHERE agent_id = ?", (agent_id,)).fetchone()
        return None if row is None else self._presence(row)

    def _identified(self, view: Reader, agent_id: str) -> tuple[Presence, str | None] | None:
        """The agent's presence and its token's hash (None: unclaimed); None if it never checked in."""
        row = self._run(
            view, f"SELECT {_AGENT}, token_sha256 FROM mesh_agents WHERE agent_id = ?", (agent_id,)
        ).fetchone()
        return None if row is None else (self._presence(row), row[13])

    def _me(self, view: Reader, agent_id: str, token_sha256: str | None) -> Presence:
        """The caller's presence once its token is checked (:func:`check_token`), before any write."""
        found = self._identified(view, agent_id)
        if found is None:
            raise RefusedError(
                f"the agent {agent_id!r} has not checked in: call checkin first (corral mesh checkin)",
                code="mesh_not_checked_in",
                agent_id=agent_id,
            )
        check_token(agent_id, found[1], token_sha256)
        return found[0]

    def _renew(self, tx: Transaction, agent_id: str, token_sha256: str | None, actor: str = "mesh") -> Presence:
        """Renew the caller's presence (every mesh call does) once its token is checked; an expired agent
        that calls comes back, recorded as a ``return`` event."""
        found = self._me(tx, agent_id, token_sha256)
        stamp = format_time(tx.now)
        expires = format_time(tx.now + timedelta(seconds=found.ttl_seconds))
        self._run(
            tx, "UPDATE mesh_agents SET seen_at = ?, expires_at = ? WHERE agent_id = ?", (stamp, expires, agent_id)
        )
        if not found.live(tx.now):
            tx.append(
                event_instance(agent_id, found.version),
                "return",
                "expired",
                actor,
                {"agent_id": agent_id, "stale_since": found.expires_at, "expires_at": expires},
            )
        return Presence(**{**found.__dict__, "seen_at": stamp, "expires_at": expires})

    # --- presence --------------------------------------------------------------------------------------

    def checkin(
        self,
        agent_id: str,
        *,
        role: str | None,
        repo: str | None,
        caps: Sequence[str] | None,
        status: str | None,
        ttl_seconds: int | None,
        pane: str | None,
        actor: str,
        token_sha256: str | None,
        issue_sha256: str,
    ) -> CheckIn:
        check_agent_id(agent_id)
        check_token_sha256(token_sha256)
        issue = check_token_sha256(issue_sha256, "issue_sha256")
        role = None if role is None else check_name(role, "role")
        repo = None if repo is None else check_repo(repo)
        caps = None if caps is None else check_caps(caps)
        status = None if status is None else check_status(status)
        pane = None if pane is None else check_pane(pane)
        if ttl_seconds is not None:
            check_ttl(ttl_seconds)
        with self.store.write() as tx:
            now = tx.now
            stamp = format_time(now)
            identified = self._identified(tx, agent_id)
            found = None if identified is None else identified[0]
            # Invariant: a claimed id is renewed only by its token; nothing is written before this check.
            issued = identified is None or identified[1] is None
            if identified is not None and identified[1] is not None:
                check_token(agent_id, identified[1], token_sha256)
            role = role if role is not None else (found.role if found else None)
            if ttl_seconds is not None:
                ttl = ttl_seconds
            else:  # omitted: what the agent said last, else the role's default
                ttl = found.ttl_seconds if found is not None else default_ttl(role)
            expires = format_time(now + timedelta(seconds=ttl))
            if found is None:
                was = "absent"
                presence = Presence(
                    agent_id,
                    role,
                    repo,
                    tuple(caps or ()),
                    status or "",
                    stamp,
                    pane,
                    ttl,
                    stamp,
                    stamp,
                    expires,
                    1,
                )
                self._run(
                    tx,
                    f"INSERT INTO mesh_agents ({_AGENT}, token_sha256) VALUES ({', '.join('?' * 14)})",
                    (
                        agent_id,
                        role,
                        repo,
                        _encode(list(presence.caps)),
                        presence.status,
                        stamp,
                        pane,
                        ttl,
                        stamp,
                        stamp,
                        expires,
                        1,
                        None,
                        issue,
                    ),
                )
            else:
                was = "live" if found.live(now) else "expired"
                new_status = found.status if status is None else status
                presence = Presence(
                    agent_id,
                    role,
                    found.repo if repo is None else repo,
                    found.caps if caps is None else tuple(caps),
                    new_status,
                    found.status_at if new_status == found.status else stamp,
                    found.pane if pane is None else pane,
                    ttl,
                    found.joined_at,
                    stamp,
                    expires,
                    found.version + 1,
                    found.wake_at,
                )
                self._run(
                    tx,
                    "UPDATE mesh_agents SET role = ?, repo = ?, caps = ?, status = ?, status_at = ?, pane = ?,"
                    " ttl_seconds = ?, seen_at = ?, expires_at = ?, version = ?,"
                    " token_sha256 = coalesce(token_sha256, ?) WHERE agent_id = ?",
                    (
                        presence.role,
                        presence.repo,
                        _encode(list(presence.caps)),
                        presence.status,
                        presence.status_at,
                        presence.pane,
                        ttl,
                        stamp,
                        expires,
                        presence.version,
                        issue,
                        agent_id,
                    ),
                )
            # Invariant: the event carries the presence's public facts only (never a message, a token or
            # its hash; ``claimed``: this check-in gave the id its token).
            tx.append(
                event_instance(agent_id, presence.version),
                "checkin",
                was,
                actor,
                {
                    "agent_id": agent_id,
                    "role": presence.role,
                    "repo": presence.repo,
                    "caps": list(presence.caps),
                    "status": presence.status,
                    "ttl_seconds": ttl,
                    "pane": presence.pane is not None,
                    "expires_at": expires,
                    "claimed": issued,
                },
            )
            return CheckIn(presence, was, issued)

    def presence(self, agent_id: str) -> Presence | None:
        with self.store.read() as view:
            return self._row(view, agent_id)

    def agents(
        self, *, include_expired: bool = False, role: str | None = None, repo: str | None = None, cap: str | None = None
    ) -> list[Presence]:
        sql = f"SELECT {_AGENT} FROM mesh_agents WHERE 1 = 1"
        args: list[Any] = []
        with self.store.read() as view:
            if not include_expired:
                sql += " AND expires_at > ?"
                args.append(format_time(self.store.now()))
            if role is not None:
                sql += " AND role = ?"
                args.append(role)
            if repo is not None:
                sql += " AND repo = ?"
                args.append(repo)
            rows = self._run(view, sql + " ORDER BY agent_id", args).fetchall()
        found = [self._presence(row) for row in rows]
        return [p for p in found if cap is None or cap in p.caps]

    # --- messages --------------------------------------------------------------------------------------

    def send(
        self,
        sender: str,
        to_kind: str,
        to_value: str,
        *,
        subject: str,
        body: str,
        thread: str | None,
        urgent: bool,
        message_id: str,
        actor: str,
        token_sha256: str | None,
        retain_before: datetime | None = None,
    ) -> Sent:
        check_agent_id(sender, "from")
        check_token_sha256(token_sha256)
        to_kind, to_value = check_to(to_kind, to_value)
        check_subject(subject)
        check_body(body)
        if thread is not None:
            check_thread(thread)
        check_message_id(message_id)
        with self.store.write() as tx:
            me = self._renew(tx, sender, token_sha256, actor)
            stamp = format_time(tx.now)
            if to_kind == "agent":
                if self._row(tx, to_value) is None:
                    raise NotFoundError(
                        f"no agent {to_value!r} has ever checked in: a message goes to a known agent, a role or a repo",
                        code="mesh_unknown_agent",
                        agent_id=to_value,
                    )
                recipients: list[str] = [to_value]
            else:
                column = "role" if to_kind == "role" else "repo"
                rows = self._run(
                    tx,
                    f"SELECT agent_id FROM mesh_agents WHERE {column} = ? AND expires_at > ? AND agent_id <> ?"
                    " ORDER BY agent_id",
                    (to_value, stamp, sender),
                ).fetchall()
                recipients = [str(r[0]) for r in rows]
            seq = tx.next_number("mesh_message")
            self._run(
                tx,
                "INSERT INTO mesh_messages (seq, message_id, sender, to_kind, to_value, subject, body, thread, urgent,"
                " sent_at, pending) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    seq,
                    message_id,
                    sender,
                    to_kind,
                    to_value,
                    subject,
                    body,
                    thread,
                    int(urgent),
                    stamp,
                    len(recipients),
                ),
            )
            for start in range(0, len(recipients), _CHUNK):
                chunk = recipients[start : start + _CHUNK]
                self._run(
                    tx,
                    "INSERT INTO mesh_deliveries (agent_id, seq, acked_at) VALUES "
                    + ", ".join("(?, ?, NULL)" for _ in chunk),
                    [v for agent in chunk for v in (agent, seq)],
                )
            # Invariant: ids and counts only: a subject or a body never reaches the event log.
            tx.append(
                event_instance(sender, me.version),
                "send",
                "live",
                actor,
                {
                    "message_id": message_id,
                    "seq": seq,
                    "to": {"kind": to_kind, "value": to_value},
                    "recipients": len(recipients),
                    "thread": thread,
                    "urgent": urgent,
                },
            )
            pruned = 0 if retain_before is None else self._prune(tx, retain_before, PRUNE_BATCH, keep=seq)
            return Sent(message_id, seq, stamp, tuple(recipients), me, pruned)

    def inbox(self, agent_id: str, limit: int, *, token_sha256: str | None, upto_seq: int | None = None) -> Inbox:
        check_agent_id(agent_id)
        check_limit(limit)
        check_token_sha256(token_sha256)
        with self.store.write() as tx:
            me = self._renew(tx, agent_id, token_sha256)
            sql = (
                f"SELECT {_MESSAGE} FROM mesh_deliveries d JOIN mesh_messages m ON m.seq = d.seq"
                " WHERE d.agent_id = ? AND d.acked_at IS NULL"
            )
            args: list[Any] = [agent_id]
            if upto_seq is not None:
                sql += " AND d.seq <= ?"
                args.append(upto_seq)
            rows = self._run(tx, sql + " ORDER BY d.seq LIMIT ?", [*args, limit + 1]).fetchall()
            total = self._run(
                tx, "SELECT count(*) FROM mesh_deliveries WHERE agent_id = ? AND acked_at IS NULL", (agent_id,)
            ).fetchone()
        messages = tuple(self._message(r) for r in rows[:limit])
        return Inbox(messages, int(total[0]), me, more=len(rows) > limit)

    def ack(self, agent_id: str, message_ids: Sequence[str], *, token_sha256: str | None) -> Acked:
        check_agent_id(agent_id)
        check_token_sha256(token_sha256)
        wanted = list(dict.fromkeys(check_message_id(m) for m in message_ids))
        with self.store.write() as tx:
            me = self._renew(tx, agent_id, token_sha256)
            found: dict[str, tuple[int, Any]] = {}
            for start in range(0, len(wanted), _CHUNK):
                chunk = wanted[start : start + _CHUNK]
                rows = self._run(
                    tx,
                    "SELECT m.message_id, d.seq, d.acked_at FROM mesh_messages m"
                    " JOIN mesh_deliveries d ON d.seq = m.seq AND d.agent_id = ?"
                    f" WHERE m.message_id IN ({', '.join('?' * len(chunk))})",
                    [agent_id, *chunk],
                ).fetchall()
                found.update({str(r[0]): (int(r[1]), r[2]) for r in rows})
            fresh = [m for m in wanted if m in found and found[m][1] is None]
            stamp = format_time(tx.now)
            for start in range(0, len(fresh), _CHUNK):
                seqs = [found[m][0] for m in fresh[start : start + _CHUNK]]
                marks = ", ".join("?" * len(seqs))
                # Invariant: acked_at is set once (the IS NULL), and each message's pending count falls
                # by exactly the deliveries acked here, so a message is "fully acked" at 0.
                self._run(
                    tx,
                    "UPDATE mesh_deliveries SET acked_at = ? WHERE agent_id = ? AND acked_at IS NULL"
                    f" AND seq IN ({marks})",
                    [stamp, agent_id, *seqs],
                )
                self._run(tx, f"UPDATE mesh_messages SET pending = pending - 1 WHERE seq IN ({marks})", seqs)
        return Acked(
            tuple(fresh),
            tuple(m for m in wanted if m in found and found[m][1] is not None),
            tuple(m for m in wanted if m not in found),
            me,
        )

    def authenticate(self, agent_id: str, token_sha256: str | None) -> Presence:
        check_agent_id(agent_id)
        check_token_sha256(token_sha256)
        with self.store.read() as view:
            return self._me(view, agent_id, token_sha256)

    def unacked(self, agent_id: str) -> tuple[int, int]:
        with self.store.read() as view:
            row = self._run(
                view,
                "SELECT count(*), max(seq) FROM mesh_deliveries WHERE agent_id = ? AND acked_at IS NULL",
                (agent_id,),
            ).fetchone()
        return int(row[0]), int(row[1] or 0)

    def note_wake(self, agent_id: str) -> None:
        with self.store.write() as tx:
            self._run(tx, "UPDATE mesh_agents SET wake_at = ? WHERE agent_id = ?", (format_time(tx.now), agent_id))

    # --- retention -------------------------------------------------------------------------------------

    def prune(self, before: datetime, batch: int = PRUNE_BATCH) -> int:
        with self.store.write() as tx:
            return self._prune(tx, before, batch)

    def _prune(self, tx: Transaction, before: datetime, batch: int, keep: int | None = None) -> int:
        # Invariant: only messages sent before the retention moment or acked by every recipient go; an
        # unacked message younger than the moment is never chosen.
        old = self._run(
            tx, "SELECT seq FROM mesh_messages WHERE sent_at < ? ORDER BY sent_at LIMIT ?", (format_time(before), batch)
        ).fetchall()
        done = self._run(
            tx, "SELECT seq FROM mesh_messages WHERE pending = 0 ORDER BY seq LIMIT ?", (batch,)
        ).fetchall()
        seqs = sorted({int(r[0]) for r in (*old, *done)} - {keep})[:batch]
        for start in range(0, len(seqs), _CHUNK):
            chunk = seqs[start : start + _CHUNK]
            marks = ", ".join("?" * len(chunk))
            self._run(tx, f"DELETE FROM mesh_deliveries WHERE seq IN ({marks})", chunk)
            self._run(tx, f"DELETE FROM mesh_messages WHERE seq IN ({marks})", chunk)
        return len(seqs)
