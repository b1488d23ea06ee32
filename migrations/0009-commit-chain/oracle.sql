-- Schema version 9 (Oracle): nothing changes.  Version 9 gives MySQL and
-- MariaDB the commit chain (mysql.sql); an Oracle snapshot (a system
-- change number) holds every commit made before it.  Every database has
-- the same version.
UPDATE schema_version SET version = 9 WHERE version = 8;
