"""The SQLite store's schema: its migrations, one per version, and the tables each version has.

The PostgreSQL store mirrors these tables (``runner.sql.store_postgres_schema``).
"""

from __future__ import annotations

# Each entry migrates the schema from version i to i + 1; never edit one that has shipped. One
# version number covers the whole file: the ``agent_slots`` table belongs to the process host's
# slot port (``runner.sql.slots_sqlite``), which keeps its rows in this database so a slot's
# compare-and-set and the engine's effect gate commit in one transaction; its migrations go here too.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE instances (
        id          TEXT PRIMARY KEY,
        machine     TEXT NOT NULL,
        state       TEXT NOT NULL,
        version     INTEGER NOT NULL CHECK (version > 0),
        data        TEXT NOT NULL,
        created_at  TEXT NOT NULL,
        updated_at  TEXT NOT NULL
    );
    CREATE INDEX instances_by_machine_state ON instances (machine, state);
    CREATE TABLE events (
        seq          INTEGER PRIMARY KEY AUTOINCREMENT,
        instance_id  TEXT NOT NULL,
        machine      TEXT NOT NULL,
        trigger      TEXT NOT NULL,
        from_state   TEXT NOT NULL,
        to_state     TEXT NOT NULL,
        version      INTEGER NOT NULL,
        actor        TEXT NOT NULL,
        payload      TEXT NOT NULL,
        at           TEXT NOT NULL
    );
    CREATE INDEX events_by_instance ON events (instance_id, seq);
    CREATE TRIGGER events_no_update BEFORE UPDATE ON events
        BEGIN SELECT RAISE(ABORT, 'the event log is append-only'); END;
    CREATE TRIGGER events_no_delete BEFORE DELETE ON events
        BEGIN SELECT RAISE(ABORT, 'the event log is append-only'); END;
    """,
    """
    CREATE TABLE agent_slots (
        pane_id      TEXT PRIMARY KEY,
        number       INTEGER NOT NULL UNIQUE,
        name         TEXT NOT NULL,
        kind         TEXT NOT NULL,
        cwd          TEXT NOT NULL,
        status       TEXT NOT NULL,
        seq          INTEGER NOT NULL CHECK (seq >= 0),
        run          INTEGER,
        pid          INTEGER,
        exit_status  INTEGER,
        closed       INTEGER NOT NULL DEFAULT 0,
        options      TEXT NOT NULL DEFAULT '{}',
        dir          TEXT NOT NULL,
        created_at   TEXT NOT NULL,
        updated_at   TEXT NOT NULL
    );
    CREATE TABLE counters (
        name   TEXT PRIMARY KEY,
        value  INTEGER NOT NULL
    );
    """,
    # Event-log retention. The store's identity and its retention floor (the highest pruned
    # seq) in a table of fixed keys; events may be deleted only at or below the floor, which only rises.
    """
    CREATE TABLE store_meta (
        key    TEXT PRIMARY KEY,
        value  NOT NULL
    );
    INSERT INTO store_meta (key, value) VALUES ('store_id', lower(hex(randomblob(16)))), ('retention_floor', 0);
    CREATE TRIGGER store_meta_no_insert BEFORE INSERT ON store_meta
        BEGIN SELECT RAISE(ABORT, 'the store''s metadata has fixed keys'); END;
    CREATE TRIGGER store_meta_no_delete BEFORE DELETE ON store_meta
        BEGIN SELECT RAISE(ABORT, 'the store''s metadata has fixed keys'); END;
    CREATE TRIGGER store_meta_fixed BEFORE UPDATE ON store_meta
        WHEN NEW.key IS NOT OLD.key OR OLD.key = 'store_id'
            OR (OLD.key = 'retention_floor' AND (typeof(NEW.value) <> 'integer' OR NEW.value < OLD.value))
        BEGIN SELECT RAISE(ABORT, 'the store id never changes and the retention floor only rises'); END;
    DROP TRIGGER events_no_delete;
    CREATE TRIGGER events_no_delete BEFORE DELETE ON events
        WHEN OLD.seq > COALESCE((SELECT value FROM store_meta WHERE key = 'retention_floor'), 0)
        BEGIN SELECT RAISE(ABORT, 'the event log is append-only: only events at or below the retention floor go'); END;
    """,
    # Plan steps as rows. An instance's keyed parts (Transaction.put_part); the rowid orders
    # them by first write (an upsert keeps it). Plans written before keep their steps in their data
    # until their next run converts them (runner.updates.plans), so nothing is rewritten here.
    """
    CREATE TABLE instance_parts (
        instance_id  TEXT NOT NULL,
        key          TEXT NOT NULL,
        value        TEXT NOT NULL,
        PRIMARY KEY (instance_id, key)
    );
    """,
    # The lane-conflict index (the claim index of the store port, runner.store.abc), keyed
    # for probes by space and scope. The backfill reads the writer machine's own fields (common_dir,
    # branch, cwd, owned_scopes, locked_scopes) of every writer not in a terminal state: the claims
    # record_writer_lane declares (runner.scopes.lane_claims) for lanes started before the index.
    """
    CREATE TABLE claims (
        space        TEXT NOT NULL,
        scope        TEXT NOT NULL,
        kind         TEXT NOT NULL,
        instance_id  TEXT NOT NULL,
        PRIMARY KEY (space, scope, kind, instance_id)
    ) WITHOUT ROWID;
    CREATE INDEX claims_by_instance ON claims (instance_id);
    CREATE TEMP VIEW lanes_to_claim AS
        SELECT id, data, json_extract(data, '$.common_dir') AS space FROM instances
        WHERE machine = 'writer' AND state NOT IN ('absent', 'released', 'failed_closed') AND json_valid(data)
        AND json_type(data, '$.common_dir') = 'text';
    INSERT OR IGNORE INTO claims (space, scope, kind, instance_id)
        SELECT l.space, s.value, 'owned', l.id FROM lanes_to_claim AS l, json_each(l.data, '$.owned_scopes') AS s
        WHERE s.type = 'text';
    INSERT OR IGNORE INTO claims (space, scope, kind, instance_id)
        SELECT l.space, s.value, 'locked', l.id FROM lanes_to_claim AS l, json_each(l.data, '$.locked_scopes') AS s
        WHERE s.type = 'text';
    INSERT OR IGNORE INTO claims (space, scope, kind, instance_id)
        SELECT l.space, json_extract(l.data, '$.branch'), 'branch', l.id FROM lanes_to_claim AS l
        WHERE json_type(l.data, '$.branch') = 'text';
    INSERT OR IGNORE INTO claims (space, scope, kind, instance_id)
        SELECT '/', substr(json_extract(l.data, '$.cwd'), 2), 'worktree', l.id FROM lanes_to_claim AS l
        WHERE json_type(l.data, '$.cwd') = 'text' AND length(json_extract(l.data, '$.cwd')) > 1
        AND substr(json_extract(l.data, '$.cwd'), 1, 1) = '/';
    DROP VIEW lanes_to_claim;
    """,
    # Paged listings. Keyset pages of one machine (``WHERE machine = ? AND id > ? ORDER BY
    # id LIMIT ?``) read only the page from this index; (machine, state) stays for counts and states.
    """
    CREATE INDEX instances_by_machine_id ON instances (machine, id);
    """,
    # Idempotency keys. One row per key of a surface's mutating request (the HTTP API's
    # Idempotency-Key): the request's digest, pending until its answer is recorded, kept until it
    # expires; in the store, so every server on one store shares them (runner.store.abc).
    """
    CREATE TABLE idempotency (
        key             TEXT PRIMARY KEY,
        request_sha256  TEXT NOT NULL,
        state           TEXT NOT NULL CHECK (state IN ('pending', 'done')),
        status          INTEGER,
        response        TEXT,
        created_at      TEXT NOT NULL,
        expires_at      TEXT NOT NULL
    );
    CREATE INDEX idempotency_by_expiry ON idempotency (expires_at);
    """,
    # The agent mesh (runner.store.mesh). Presence per agent id, messages (seq from the
    # counter mesh_message; pending counts the deliveries not yet acked), one delivery per recipient.
    """
    CREATE TABLE mesh_agents (
        agent_id     TEXT PRIMARY KEY,
        role         TEXT,
        repo         TEXT,
        caps         TEXT NOT NULL,
        status       TEXT NOT NULL,
        status_at    TEXT NOT NULL,
        pane         TEXT,
        ttl_seconds  INTEGER NOT NULL,
        joined_at    TEXT NOT NULL,
        seen_at      TEXT NOT NULL,
        expires_at   TEXT NOT NULL,
        version      INTEGER NOT NULL,
        wake_at      TEXT
    );
    CREATE INDEX mesh_agents_by_role ON mesh_agents (role, expires_at);
    CREATE INDEX mesh_agents_by_repo ON mesh_agents (repo, expires_at);
    CREATE TABLE mesh_messages (
        seq         INTEGER PRIMARY KEY,
        message_id  TEXT NOT NULL UNIQUE,
        sender      TEXT NOT NULL,
        to_kind     TEXT NOT NULL,
        to_value    TEXT NOT NULL,
        subject     TEXT NOT NULL,
        body        TEXT NOT NULL,
        thread      TEXT,
        urgent      INTEGER NOT NULL,
        sent_at     TEXT NOT NULL,
        pending     INTEGER NOT NULL CHECK (pending >= 0)
    );
    CREATE INDEX mesh_messages_by_time ON mesh_messages (sent_at);
    CREATE INDEX mesh_messages_done ON mesh_messages (seq) WHERE pending = 0;
    CREATE TABLE mesh_deliveries (
        agent_id  TEXT NOT NULL,
        seq       INTEGER NOT NULL,
        acked_at  TEXT,
        PRIMARY KEY (agent_id, seq)
    ) WITHOUT ROWID;
    CREATE INDEX mesh_deliveries_unacked ON mesh_deliveries (agent_id, seq) WHERE acked_at IS NULL;
    CREATE INDEX mesh_deliveries_by_seq ON mesh_deliveries (seq);
    """,
    # Handoff memory (runner.store.memory): projects, their sessions, and checkpoints with a
    # row number ``n`` that orders them by write (sessions: the rowid); ``memory_fts`` indexes their
    # words (FTS5, external content: the checkpoints' search_text, keyed by ``n``). A build of SQLite
    # without FTS5 skips that one statement (see _run_migration) and memory searches by a scan instead.
    """
    CREATE TABLE memory_projects (
        name        TEXT PRIMARY KEY,
        repository  TEXT,
        subdir      TEXT,
        common_dir  TEXT,
        created_at  TEXT NOT NULL
    );
    CREATE TABLE memory_sessions (
        id          TEXT PRIMARY KEY,
        project     TEXT NOT NULL REFERENCES memory_projects (name),
        goal        TEXT NOT NULL,
        agent       TEXT NOT NULL,
        status      TEXT NOT NULL CHECK (status IN ('active', 'paused', 'completed', 'blocked')),
        created_at  TEXT NOT NULL,
        updated_at  TEXT NOT NULL,
        closed_at   TEXT,
        last_seq    INTEGER NOT NULL DEFAULT 0,
        newest_n    INTEGER
    );
    CREATE INDEX memory_sessions_by_project ON memory_sessions (project, status);
    CREATE TABLE memory_checkpoints (
        n               INTEGER PRIMARY KEY AUTOINCREMENT,
        id              TEXT NOT NULL UNIQUE,
        session_id      TEXT NOT NULL REFERENCES memory_sessions (id),
        project         TEXT NOT NULL,
        seq             INTEGER NOT NULL CHECK (seq > 0),
        agent           TEXT NOT NULL,
        summary         TEXT NOT NULL,
        status          TEXT NOT NULL,
        pinned          INTEGER NOT NULL DEFAULT 0,
        body            TEXT NOT NULL,
        search_text     TEXT NOT NULL,
        content_sha256  TEXT NOT NULL,
        created_at      TEXT NOT NULL,
        origin          TEXT UNIQUE,
        UNIQUE (session_id, seq)
    );
    CREATE INDEX memory_checkpoints_by_project ON memory_checkpoints (project, n);
    CREATE INDEX memory_checkpoints_unpinned ON memory_checkpoints (session_id, n) WHERE pinned = 0;
    CREATE INDEX memory_checkpoints_unpinned_n ON memory_checkpoints (n) WHERE pinned = 0;
    CREATE VIRTUAL TABLE memory_fts USING fts5 (search_text, content='memory_checkpoints', content_rowid='n');
    """,
    # Mesh identity (runner.store.mesh). The SHA-256 of the agent token the first check-in of
    # an id handed out; NULL for a row from before (the next check-in of that id claims it).
    """
    ALTER TABLE mesh_agents ADD COLUMN token_sha256 TEXT;
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)
# The tables each schema version has: an existing file missing one of its version's is damaged.
TABLES_BY_VERSION: dict[int, frozenset[str]] = {
    1: frozenset({"instances", "events"}),
    2: frozenset({"instances", "events", "agent_slots", "counters"}),
    3: frozenset({"instances", "events", "agent_slots", "counters", "store_meta"}),
    4: frozenset({"instances", "events", "agent_slots", "counters", "store_meta", "instance_parts"}),
    5: frozenset({"instances", "events", "agent_slots", "counters", "store_meta", "instance_parts", "claims"}),
    6: frozenset({"instances", "events", "agent_slots", "counters", "store_meta", "instance_parts", "claims"}),
    7: frozenset(
        {"instances", "events", "agent_slots", "counters", "store_meta", "instance_parts", "claims", "idempotency"}
    ),
    8: frozenset(
        {"instances", "events", "agent_slots", "counters", "store_meta", "instance_parts", "claims", "idempotency"}
        | {"mesh_agents", "mesh_messages", "mesh_deliveries"}
    ),
    9: frozenset(
        {"instances", "events", "agent_slots", "counters", "store_meta", "instance_parts", "claims", "idempotency"}
        | {"mesh_agents", "mesh_messages", "mesh_deliveries"}
        | {"memory_projects", "memory_sessions", "memory_checkpoints"}
    ),
    10: frozenset(
        {"instances", "events", "agent_slots", "counters", "store_meta", "instance_parts", "claims", "idempotency"}
        | {"mesh_agents", "mesh_messages", "mesh_deliveries"}
        | {"memory_projects", "memory_sessions", "memory_checkpoints"}
    ),
}
