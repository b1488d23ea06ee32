-- relstorage schema version 6 (from 5), for SQLite, both history modes:
-- the revisions whose references a pack could not read (see
-- postgresql.sql).
CREATE TABLE IF NOT EXISTS pack_unreadable (
    zoid            INTEGER NOT NULL,
    tid             INTEGER NOT NULL,
    reason          TEXT NOT NULL,
    PRIMARY KEY (zoid, tid)
);

UPDATE schema_version SET version = 6;
