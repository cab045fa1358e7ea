PRAGMA user_version = 2;
PRAGMA application_id = 1668248178;
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
INSERT INTO "events" VALUES(1,'plan/interrupted','plan','submit','absent','submitted',1,'legacy','{"changed":{"content_sha256":"657b1785a3dfb0320ce2cfe37add16c5f9e40581b81709b9fbc9ea21f179f225","controller_id":"old","plan_id":"interrupted","recipe":"legacy","recipe_sha256":"09bfa995309d8af0c1da004c1694339f8cd947899275935d39cf09d6bd6164a0","recipe_version":1,"steps":{},"submitted_at":"2026-12-01T14:45:29.384433Z"},"params":{"content_sha256":"657b1785a3dfb0320ce2cfe37add16c5f9e40581b81709b9fbc9ea21f179f225","controller_id":"old","parent":null,"plan_id":"interrupted","recipe":"legacy","recipe_sha256":"09bfa995309d8af0c1da004c1694339f8cd947899275935d39cf09d6bd6164a0","recipe_version":1}}','2026-12-01T14:45:29.384433Z');
INSERT INTO "events" VALUES(2,'plan/interrupted','plan','start','submitted','running',2,'legacy','{"changed":{"runner":{"boot_id":"5a72a3b7-9cb7-4049-afbc-fbe6aca9cd1c","host":"vm","pid":17146,"start_time":2118124}},"params":{"runner":{"boot_id":"5a72a3b7-9cb7-4049-afbc-fbe6aca9cd1c","host":"vm","pid":17146,"start_time":2118124}}}','2026-12-01T14:45:29.669350Z');
INSERT INTO "events" VALUES(3,'plan/interrupted','plan','step','running','running',3,'legacy','{"changed":{"steps":{"s0":{"at":"2026-12-01T14:45:29.689851Z","attempt":1,"do":"flow.pass","state":"running"}}},"params":{"record":{"attempt":1,"do":"flow.pass","state":"running"},"runner":{"boot_id":"5a72a3b7-9cb7-4049-afbc-fbe6aca9cd1c","host":"vm","pid":17146,"start_time":2118124},"step_id":"s0"}}','2026-12-01T14:45:29.689851Z');
INSERT INTO "events" VALUES(4,'plan/interrupted','plan','step','running','running',4,'legacy','{"changed":{"steps":{"s0":{"at":"2026-12-01T14:45:29.697666Z","attempt":1,"do":"flow.pass","outputs":{"n":1},"seconds":0.008,"state":"succeeded"}}},"params":{"record":{"attempt":1,"do":"flow.pass","outputs":{"n":1},"seconds":0.008,"state":"succeeded"},"runner":{"boot_id":"5a72a3b7-9cb7-4049-afbc-fbe6aca9cd1c","host":"vm","pid":17146,"start_time":2118124},"step_id":"s0"}}','2026-12-01T14:45:29.697666Z');
INSERT INTO "events" VALUES(5,'plan/interrupted','plan','step','running','running',5,'legacy','{"changed":{"steps":{"s1":{"at":"2026-12-01T14:45:29.705752Z","attempt":1,"do":"flow.pass","state":"running"}}},"params":{"record":{"attempt":1,"do":"flow.pass","state":"running"},"runner":{"boot_id":"5a72a3b7-9cb7-4049-afbc-fbe6aca9cd1c","host":"vm","pid":17146,"start_time":2118124},"step_id":"s1"}}','2026-12-01T14:45:29.705752Z');
INSERT INTO "events" VALUES(6,'plan/broken','plan','submit','absent','submitted',1,'legacy','{"changed":{"content_sha256":"06d14c6f3718d390cbddf09502c7ea32c6be8a2ea7c4fc6dc8017da2ec5c28fa","controller_id":"old","plan_id":"broken","recipe":"legacyfail","recipe_sha256":"9898c3b6fc0955f690198bec7c3dc84d8ebe0adaad62530b73ceeebdcbaa04b0","recipe_version":1,"steps":{},"submitted_at":"2026-12-01T14:45:29.725951Z"},"params":{"content_sha256":"06d14c6f3718d390cbddf09502c7ea32c6be8a2ea7c4fc6dc8017da2ec5c28fa","controller_id":"old","parent":null,"plan_id":"broken","recipe":"legacyfail","recipe_sha256":"9898c3b6fc0955f690198bec7c3dc84d8ebe0adaad62530b73ceeebdcbaa04b0","recipe_version":1}}','2026-12-01T14:45:29.725951Z');
INSERT INTO "events" VALUES(7,'plan/broken','plan','start','submitted','running',2,'legacy','{"changed":{"runner":{"boot_id":"5a72a3b7-9cb7-4049-afbc-fbe6aca9cd1c","host":"vm","pid":17146,"start_time":2118124}},"params":{"runner":{"boot_id":"5a72a3b7-9cb7-4049-afbc-fbe6aca9cd1c","host":"vm","pid":17146,"start_time":2118124}}}','2026-12-01T14:45:29.738653Z');
INSERT INTO "events" VALUES(8,'plan/broken','plan','step','running','running',3,'legacy','{"changed":{"steps":{"s0":{"at":"2026-12-01T14:45:29.741594Z","attempt":1,"do":"flow.pass","state":"running"}}},"params":{"record":{"attempt":1,"do":"flow.pass","state":"running"},"runner":{"boot_id":"5a72a3b7-9cb7-4049-afbc-fbe6aca9cd1c","host":"vm","pid":17146,"start_time":2118124},"step_id":"s0"}}','2026-12-01T14:45:29.741594Z');
INSERT INTO "events" VALUES(9,'plan/broken','plan','step','running','running',4,'legacy','{"changed":{"steps":{"s0":{"at":"2026-12-01T14:45:29.753708Z","attempt":1,"do":"flow.pass","outputs":{"n":1},"seconds":0.012,"state":"succeeded"}}},"params":{"record":{"attempt":1,"do":"flow.pass","outputs":{"n":1},"seconds":0.012,"state":"succeeded"},"runner":{"boot_id":"5a72a3b7-9cb7-4049-afbc-fbe6aca9cd1c","host":"vm","pid":17146,"start_time":2118124},"step_id":"s0"}}','2026-12-01T14:45:29.753708Z');
INSERT INTO "events" VALUES(10,'plan/broken','plan','step','running','running',5,'legacy','{"changed":{"steps":{"s1":{"at":"2026-12-01T14:45:29.756798Z","attempt":1,"do":"flow.fail","state":"running"}}},"params":{"record":{"attempt":1,"do":"flow.fail","state":"running"},"runner":{"boot_id":"5a72a3b7-9cb7-4049-afbc-fbe6aca9cd1c","host":"vm","pid":17146,"start_time":2118124},"step_id":"s1"}}','2026-12-01T14:45:29.756798Z');
INSERT INTO "events" VALUES(11,'plan/broken','plan','step','running','running',6,'legacy','{"changed":{"steps":{"s1":{"at":"2026-12-01T14:45:29.765770Z","attempt":1,"do":"flow.fail","error":{"code":"broke","message":"step s1 failed on purpose"},"seconds":0.009,"state":"failed"}}},"params":{"record":{"attempt":1,"do":"flow.fail","error":{"code":"broke","message":"step s1 failed on purpose"},"seconds":0.009,"state":"failed"},"runner":{"boot_id":"5a72a3b7-9cb7-4049-afbc-fbe6aca9cd1c","host":"vm","pid":17146,"start_time":2118124},"step_id":"s1"}}','2026-12-01T14:45:29.765770Z');
INSERT INTO "events" VALUES(12,'plan/broken','plan','fail','running','failed',7,'legacy','{"changed":{"failure":{"code":"broke","message":"step s1 failed on purpose","step":"s1"},"finished_at":"2026-12-01T14:45:29.774575Z"},"params":{"failure":{"code":"broke","message":"step s1 failed on purpose","step":"s1"},"runner":{"boot_id":"5a72a3b7-9cb7-4049-afbc-fbe6aca9cd1c","host":"vm","pid":17146,"start_time":2118124}}}','2026-12-01T14:45:29.774575Z');
CREATE TABLE instances (
        id          TEXT PRIMARY KEY,
        machine     TEXT NOT NULL,
        state       TEXT NOT NULL,
        version     INTEGER NOT NULL CHECK (version > 0),
        data        TEXT NOT NULL,
        created_at  TEXT NOT NULL,
        updated_at  TEXT NOT NULL
    );
INSERT INTO "instances" VALUES('plan/interrupted','plan','running',5,'{"content_sha256":"657b1785a3dfb0320ce2cfe37add16c5f9e40581b81709b9fbc9ea21f179f225","controller_id":"old","inputs":{},"parent":null,"paused_reason":null,"plan_id":"interrupted","recipe":"legacy","recipe_sha256":"09bfa995309d8af0c1da004c1694339f8cd947899275935d39cf09d6bd6164a0","recipe_version":1,"runner":{"boot_id":"5a72a3b7-9cb7-4049-afbc-fbe6aca9cd1c","host":"vm","pid":17146,"start_time":2118124},"steps":{"s0":{"at":"2026-12-01T14:45:29.697666Z","attempt":1,"do":"flow.pass","outputs":{"n":1},"seconds":0.008,"state":"succeeded"},"s1":{"at":"2026-12-01T14:45:29.705752Z","attempt":1,"do":"flow.pass","state":"running"}},"submitted_at":"2026-12-01T14:45:29.384433Z","waiting_on":null}','2026-12-01T14:45:29.384433Z','2026-12-01T14:45:29.705752Z');
INSERT INTO "instances" VALUES('plan/broken','plan','failed',7,'{"content_sha256":"06d14c6f3718d390cbddf09502c7ea32c6be8a2ea7c4fc6dc8017da2ec5c28fa","controller_id":"old","failure":{"code":"broke","message":"step s1 failed on purpose","step":"s1"},"finished_at":"2026-12-01T14:45:29.774575Z","inputs":{},"parent":null,"paused_reason":null,"plan_id":"broken","recipe":"legacyfail","recipe_sha256":"9898c3b6fc0955f690198bec7c3dc84d8ebe0adaad62530b73ceeebdcbaa04b0","recipe_version":1,"runner":{"boot_id":"5a72a3b7-9cb7-4049-afbc-fbe6aca9cd1c","host":"vm","pid":17146,"start_time":2118124},"steps":{"s0":{"at":"2026-12-01T14:45:29.753708Z","attempt":1,"do":"flow.pass","outputs":{"n":1},"seconds":0.012,"state":"succeeded"},"s1":{"at":"2026-12-01T14:45:29.765770Z","attempt":1,"do":"flow.fail","error":{"code":"broke","message":"step s1 failed on purpose"},"seconds":0.009,"state":"failed"}},"submitted_at":"2026-12-01T14:45:29.725951Z","waiting_on":null}','2026-12-01T14:45:29.725951Z','2026-12-01T14:45:29.774575Z');
CREATE INDEX instances_by_machine_state ON instances (machine, state);
CREATE INDEX events_by_instance ON events (instance_id, seq);
CREATE TRIGGER events_no_update BEFORE UPDATE ON events
        BEGIN SELECT RAISE(ABORT, 'the event log is append-only'); END;
CREATE TRIGGER events_no_delete BEFORE DELETE ON events
        BEGIN SELECT RAISE(ABORT, 'the event log is append-only'); END;
DELETE FROM "sqlite_sequence";
INSERT INTO "sqlite_sequence" VALUES('events',12);
