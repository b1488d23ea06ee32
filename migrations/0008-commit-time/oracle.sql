-- Schema version 8 (Oracle): how slow the clients' commits are, as the
-- last ordinary commit recorded it (see postgresql.sql).  Idempotent as
-- relstorage runs it ("column being added already exists", ORA-01430,
-- passed over).
ALTER TABLE commit_row ADD (commit_seconds BINARY_DOUBLE);

UPDATE schema_version SET version = 8 WHERE version = 7;
