-- relstorage schema version 7 (from 6), for SQLite, both history modes:
-- the JSON mirror (see postgresql.sql).  The state is JSON text, read
-- with SQLite's JSON functions (json_extract, ->>).
CREATE TABLE IF NOT EXISTS object_json (
    zoid            INTEGER NOT NULL PRIMARY KEY,
    tid             INTEGER NOT NULL,
    class_module    TEXT,
    class_name      TEXT,
    state           TEXT
);
CREATE INDEX IF NOT EXISTS object_json_class
    ON object_json (class_name, class_module);

UPDATE schema_version SET version = 7;
