-- relstorage schema version 4 (from 3), for PostgreSQL, both history
-- modes: leases.
--
-- A lease is held by one process until it gives it back or until it
-- expires (seconds since the epoch, the server's clock), renewed while the
-- work goes on.  A Galera cluster's pack lock is the lease named 'pack';
-- PostgreSQL's pack lock is still an advisory lock, and the table is here
-- so that every database has the same version 4.
CREATE TABLE lease (
    name            VARCHAR(64) NOT NULL PRIMARY KEY,
    holder          VARCHAR(64) NOT NULL,
    expires         BIGINT NOT NULL
);

UPDATE schema_version SET version = 4;
