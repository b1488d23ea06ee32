-- relstorage schema version 8 (from 7), for SQLite, both history modes:
-- how slow the clients' commits are, as the last ordinary commit
-- recorded it (see postgresql.sql).  The step runs in one transaction.
ALTER TABLE commit_row ADD COLUMN commit_seconds REAL;

UPDATE schema_version SET version = 8;
