-- Schema version 8 (Oracle): the seconds the last ordinary commit took
-- (see postgresql.sql).  Idempotent as relstorage runs it ("column
-- already exists", ORA-01430, passed over).
ALTER TABLE commit_row ADD (commit_seconds BINARY_DOUBLE);

UPDATE schema_version SET version = 8 WHERE version = 7;
