-- relstorage schema version 4 (from 3), for SQLite, both history modes:
-- leases (see mysql.sql; a Galera cluster's pack lock is the lease named
-- 'pack').  SQLite's pack lock is not a lease: the table is
-- here so that every database has the same version 4.
CREATE TABLE IF NOT EXISTS lease (
    name            TEXT NOT NULL PRIMARY KEY,
    holder          TEXT NOT NULL,
    expires         INTEGER NOT NULL
);

UPDATE schema_version SET version = 4;
