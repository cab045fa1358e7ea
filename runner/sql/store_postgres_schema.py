"""What a PostgreSQL store is on the server: its schema's tables (:data:`MIGRATIONS`) and the URL
that names it (:class:`Target`: the libpq connection string, the schema, a password-free description).

The tables mirror the SQLite store's (``runner.sql.store_sqlite_schema.MIGRATIONS``), in one schema of their own;
``store_meta`` is one row (the store's id, its retention floor and the last event seq handed out),
and the event log and the metadata refuse raw SQL that would rewrite them, as SQLite's triggers do.
"""

from __future__ import annotations

import hashlib
import re
import zlib
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from runner.errors import InputError

_TEXT = 'COLLATE "C"'  # code point order, as Python compares str: keyset pages and range probes
DEFAULT_SCHEMA = "corral"
_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")

# Each entry migrates the schema from version i to i + 1 (statements separated by ";\n\n" are sent
# whole: PL/pgSQL bodies hold semicolons). Never edit one that has shipped.
MIGRATIONS: tuple[str, ...] = (
    f"""
    CREATE TABLE schema_version (
        version  integer NOT NULL
    );

    CREATE TABLE instances (
        id          text {_TEXT} PRIMARY KEY,
        machine     text {_TEXT} NOT NULL,
        state       text {_TEXT} NOT NULL,
        version     integer NOT NULL CHECK (version > 0),
        data        text NOT NULL,
        created_at  text NOT NULL,
        updated_at  text NOT NULL
    );

    CREATE INDEX instances_by_machine_state ON instances (machine, state);

    CREATE INDEX instances_by_machine_id ON instances (machine, id);

    CREATE TABLE store_meta (
        only_row         boolean PRIMARY KEY DEFAULT true CHECK (only_row),
        store_id         text NOT NULL,
        retention_floor  bigint NOT NULL CHECK (retention_floor >= 0),
        last_seq         bigint NOT NULL CHECK (last_seq >= retention_floor)
    );

    INSERT INTO store_meta (store_id, retention_floor, last_seq)
        VALUES (replace(gen_random_uuid()::text, '-', ''), 0, 0);

    CREATE FUNCTION store_meta_guard() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF TG_OP <> 'UPDATE' THEN
            RAISE EXCEPTION 'the store''s metadata is one row';
        END IF;
        IF NEW.store_id IS DISTINCT FROM OLD.store_id OR NEW.retention_floor < OLD.retention_floor
            OR NEW.last_seq < OLD.last_seq THEN
            RAISE EXCEPTION 'the store id never changes; the retention floor and the last seq only rise';
        END IF;
        RETURN NEW;
    END $$;

    CREATE TRIGGER store_meta_fixed BEFORE INSERT OR UPDATE OR DELETE ON store_meta
        FOR EACH ROW EXECUTE FUNCTION store_meta_guard();

    CREATE TABLE events (
        seq          bigint PRIMARY KEY,
        instance_id  text {_TEXT} NOT NULL,
        machine      text {_TEXT} NOT NULL,
        trigger      text NOT NULL,
        from_state   text NOT NULL,
        to_state     text NOT NULL,
        version      integer NOT NULL,
        actor        text NOT NULL,
        payload      text NOT NULL,
        at           text {_TEXT} NOT NULL
    );

    CREATE INDEX events_by_instance ON events (instance_id, seq);

    CREATE FUNCTION events_guard() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
    BEGIN
        IF TG_OP = 'UPDATE' THEN
            RAISE EXCEPTION 'the event log is append-only';
        END IF;
        IF OLD.seq > (SELECT retention_floor FROM store_meta) THEN
            RAISE EXCEPTION 'the event log is append-only: only events at or below the retention floor go';
        END IF;
        RETURN OLD;
    END $$;

    CREATE TRIGGER events_append_only BEFORE UPDATE OR DELETE ON events
        FOR EACH ROW EXECUTE FUNCTION events_guard();

    CREATE TABLE instance_parts (
        instance_id  text {_TEXT} NOT NULL,
        key          text {_TEXT} NOT NULL,
        value        text NOT NULL,
        ord          bigserial NOT NULL,
        PRIMARY KEY (instance_id, key)
    );

    CREATE TABLE claims (
        space        text {_TEXT} NOT NULL,
        scope        text {_TEXT} NOT NULL,
        kind         text {_TEXT} NOT NULL,
        instance_id  text {_TEXT} NOT NULL,
        PRIMARY KEY (space, scope, kind, instance_id)
    );

    CREATE INDEX claims_by_instance ON claims (instance_id);

    CREATE TABLE counters (
        name   text {_TEXT} PRIMARY KEY,
        value  bigint NOT NULL
    );

    CREATE TABLE agent_slots (
        pane_id      text {_TEXT} PRIMARY KEY,
        number       integer NOT NULL UNIQUE,
        name         text NOT NULL,
        kind         text NOT NULL,
        cwd          text NOT NULL,
        status       text NOT NULL,
        seq          integer NOT NULL CHECK (seq >= 0),
        run          integer,
        pid          integer,
        exit_status  integer,
        closed       boolean NOT NULL DEFAULT false,
        options      text NOT NULL DEFAULT '{{}}',
        dir          text NOT NULL,
        created_at   text NOT NULL,
        updated_at   text NOT NULL
    )
    """,
    # Idempotency keys of a surface's mutating requests (runner.store.abc), shared by every
    # server on the store.
    f"""
    CREATE TABLE idempotency (
        key             text {_TEXT} PRIMARY KEY,
        request_sha256  text NOT NULL,
        state           text NOT NULL CHECK (state IN ('pending', 'done')),
        status          integer,
        response        text,
        created_at      text {_TEXT} NOT NULL,
        expires_at      text {_TEXT} NOT NULL
    );

    CREATE INDEX idempotency_by_expiry ON idempotency (expires_at)
    """,
    # The agent mesh (runner.store.mesh), as in the SQLite store.
    f"""
    CREATE TABLE mesh_agents (
        agent_id     text {_TEXT} PRIMARY KEY,
        role         text {_TEXT},
        repo         text {_TEXT},
        caps         text NOT NULL,
        status       text NOT NULL,
        status_at    text NOT NULL,
        pane         text,
        ttl_seconds  integer NOT NULL,
        joined_at    text NOT NULL,
        seen_at      text NOT NULL,
        expires_at   text {_TEXT} NOT NULL,
        version      integer NOT NULL,
        wake_at      text
    );

    CREATE INDEX mesh_agents_by_role ON mesh_agents (role, expires_at);

    CREATE INDEX mesh_agents_by_repo ON mesh_agents (repo, expires_at);

    CREATE TABLE mesh_messages (
        seq         bigint PRIMARY KEY,
        message_id  text {_TEXT} NOT NULL UNIQUE,
        sender      text NOT NULL,
        to_kind     text NOT NULL,
        to_value    text NOT NULL,
        subject     text NOT NULL,
        body        text NOT NULL,
        thread      text,
        urgent      integer NOT NULL,
        sent_at     text {_TEXT} NOT NULL,
        pending     integer NOT NULL CHECK (pending >= 0)
    );

    CREATE INDEX mesh_messages_by_time ON mesh_messages (sent_at);

    CREATE INDEX mesh_messages_done ON mesh_messages (seq) WHERE pending = 0;

    CREATE TABLE mesh_deliveries (
        agent_id  text {_TEXT} NOT NULL,
        seq       bigint NOT NULL,
        acked_at  text,
        PRIMARY KEY (agent_id, seq)
    );

    CREATE INDEX mesh_deliveries_unacked ON mesh_deliveries (agent_id, seq) WHERE acked_at IS NULL;

    CREATE INDEX mesh_deliveries_by_seq ON mesh_deliveries (seq)
    """,
    # Handoff memory (runner.store.memory), as the SQLite store keeps it; full-text search on
    # a stored tsvector of the checkpoints' words ('simple': no stemming, as SQLite's unicode61) with a
    # GIN index. fastupdate off: a pending list (scanned linearly until a vacuum merges it) made a search
    # of a fresh store ~100x slower; a checkpoint's few dozen lexemes go straight into the index instead.
    f"""
    CREATE TABLE memory_projects (
        name        text {_TEXT} PRIMARY KEY,
        repository  text,
        subdir      text,
        common_dir  text,
        created_at  text NOT NULL
    );

    CREATE TABLE memory_sessions (
        n           bigserial UNIQUE,
        id          text {_TEXT} PRIMARY KEY,
        project     text {_TEXT} NOT NULL REFERENCES memory_projects (name),
        goal        text NOT NULL,
        agent       text NOT NULL,
        status      text NOT NULL CHECK (status IN ('active', 'paused', 'completed', 'blocked')),
        created_at  text NOT NULL,
        updated_at  text NOT NULL,
        closed_at   text,
        last_seq    integer NOT NULL DEFAULT 0,
        newest_n    bigint
    );

    CREATE INDEX memory_sessions_by_project ON memory_sessions (project, status);

    CREATE TABLE memory_checkpoints (
        n               bigserial PRIMARY KEY,
        id              text {_TEXT} NOT NULL UNIQUE,
        session_id      text {_TEXT} NOT NULL REFERENCES memory_sessions (id),
        project         text {_TEXT} NOT NULL,
        seq             integer NOT NULL CHECK (seq > 0),
        agent           text NOT NULL,
        summary         text NOT NULL,
        status          text NOT NULL,
        pinned          boolean NOT NULL DEFAULT false,
        body            text NOT NULL,
        search_text     text NOT NULL,
        search          tsvector GENERATED ALWAYS AS (to_tsvector('simple', search_text)) STORED,
        content_sha256  text NOT NULL,
        created_at      text NOT NULL,
        origin          text {_TEXT} UNIQUE,
        UNIQUE (session_id, seq)
    );

    CREATE INDEX memory_checkpoints_by_project ON memory_checkpoints (project, n);

    CREATE INDEX memory_checkpoints_unpinned ON memory_checkpoints (session_id, n) WHERE NOT pinned;

    CREATE INDEX memory_checkpoints_unpinned_n ON memory_checkpoints (n) WHERE NOT pinned;

    CREATE INDEX memory_checkpoints_search ON memory_checkpoints USING gin (search) WITH (fastupdate = off)
    """,
    # Mesh identity, as in the SQLite store: the SHA-256 of an agent's token (NULL: unclaimed).
    """
    ALTER TABLE mesh_agents ADD COLUMN token_sha256 text
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)


def statements(script: str) -> list[str]:
    return [part.strip() for part in script.strip().split(";\n\n") if part.strip()]


def lock_key(schema: str) -> int:
    """The advisory lock key of a schema: a signed 32-bit hash (the two-key form takes int4s)."""
    value = zlib.crc32(schema.encode())
    return value - 2**32 if value >= 2**31 else value


def channel_of(schema: str) -> str:
    """The NOTIFY channel of a store schema (an identifier of at most 63 bytes)."""
    name = f"corral_{schema}"
    return name if len(name) <= 63 else "corral_" + hashlib.sha1(schema.encode()).hexdigest()[:16]


class Target:
    """What a PostgreSQL URL names: the libpq connection string (without ``schema``), the schema,
    and a description for messages (host, port, database, schema; never a password)."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("postgresql", "postgres"):
            raise InputError("store", f"{parts.scheme!r} is not a PostgreSQL URL", code="store_url_invalid")
        query = parse_qsl(parts.query, keep_blank_values=True)
        schemas = [value for key, value in query if key == "schema"]
        self.schema = schemas[-1] if schemas else DEFAULT_SCHEMA
        if not _SCHEMA_NAME.match(self.schema):
            raise InputError(
                "store",
                f"the schema {self.schema!r} is not a lowercase identifier ([a-z_][a-z0-9_]*, at most 63)",
                code="store_url_invalid",
            )
        rest = [(key, value) for key, value in query if key != "schema"]
        self.conninfo = urlunsplit(parts._replace(query=urlencode(rest)))
        params = dict(rest)
        host = parts.hostname or params.get("host") or "(default host)"
        port = parts.port or params.get("port") or 5432
        database = parts.path.lstrip("/") or params.get("dbname") or "(default database)"
        self.server = f"{host}:{port}/{database}"
        self.described = f"postgresql {self.server} schema {self.schema}"
        netloc = parts.hostname or ""
        if parts.username:
            netloc = f"{parts.username}@{netloc}"
        if parts.port:
            netloc += f":{parts.port}"
        self.public_url = urlunsplit(parts._replace(netloc=netloc))  # the URL without its password

    def details(self) -> dict[str, Any]:
        return {"server": self.server, "schema": self.schema}
