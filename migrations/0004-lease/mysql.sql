-- relstorage schema version 4 (from 3), for MySQL and MariaDB, both
-- history modes: leases.  Idempotent, like the steps before it.
--
-- A lease is held by one process until it gives it back or until it
-- expires (seconds since the epoch, the server's clock), renewed while the
-- work goes on.  Unlike GET_LOCK, which a Galera node keeps to itself (and
-- some MariaDB releases refuse on a cluster), a lease row is replicated and
-- certified like every write: two nodes cannot both take it.  On a
-- Galera cluster the pack lock is the lease named 'pack' (on a single
-- server it is still GET_LOCK, which the server gives back at once when
-- the pack's session ends).
CREATE TABLE IF NOT EXISTS lease (
    name            VARCHAR(64) NOT NULL PRIMARY KEY,
    holder          VARCHAR(64) NOT NULL,
    expires         BIGINT NOT NULL
) ENGINE = InnoDB;

UPDATE schema_version SET version = 4 WHERE version = 3;
