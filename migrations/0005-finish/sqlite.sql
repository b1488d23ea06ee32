-- relstorage schema version 5 (from 4), for SQLite, both
-- history modes: nothing changes.  Version 5 gives PostgreSQL's schema
-- the functions of a commit's last step (postgresql-*.sql); every
-- database has the same version.
UPDATE schema_version SET version = 5;
