-- relstorage schema version 8 (from 7), for PostgreSQL, both history
-- modes: each ordinary commit writes, beside the last tid, how slow its
-- client's commits are (seconds: the longer of its own time from
-- tpc_begin to its last step and the whole time of the client's previous
-- commit, if recent), and a pack reads it to tell whether its deletions
-- slow the writers down (docs/operations.rst, "Packing").  NULL until
-- the first commit after the upgrade.
ALTER TABLE commit_row ADD COLUMN IF NOT EXISTS commit_seconds DOUBLE PRECISION;

UPDATE schema_version SET version = 8;
