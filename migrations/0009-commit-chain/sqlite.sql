-- relstorage schema version 9 (from 8), for SQLite, both history
-- modes: nothing changes.  Version 9 gives MySQL and MariaDB the commit
-- chain (mysql.sql), which SQLite does not need: its one writer at a
-- time commits in order, and a snapshot sees a prefix of them.
-- Every database has the same version.
UPDATE schema_version SET version = 9 WHERE version = 8;
