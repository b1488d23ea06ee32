-- relstorage schema version 8 (from 7), for MySQL and MariaDB, both
-- history modes: how slow the clients' commits are, as the last ordinary
-- commit recorded it (see postgresql.sql).  relstorage-migrate passes
-- over "Duplicate column name" (MySQL has no ADD COLUMN IF NOT EXISTS),
-- so that a run stopped before the version was set is completed by the
-- next, as with the steps before it.
ALTER TABLE commit_row ADD COLUMN commit_seconds DOUBLE NULL;

UPDATE schema_version SET version = 8 WHERE version = 7;
