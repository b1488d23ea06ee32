-- relstorage schema version 9 (from 8), for PostgreSQL, both history
-- modes: nothing changes.  Version 9 gives MySQL and MariaDB the commit
-- chain (mysql.sql), which PostgreSQL does not need: a snapshot there
-- never sees a commit without the commits that took the commit lock
-- before it.  Every database has the same version.
UPDATE schema_version SET version = 9 WHERE version = 8;
