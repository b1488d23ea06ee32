-- relstorage schema version 6 (from 5), for MySQL and MariaDB, both
-- history modes: the revisions whose references a pack could not read
-- (see postgresql.sql).  Idempotent, like the steps before it.
CREATE TABLE IF NOT EXISTS pack_unreadable (
    zoid            BIGINT NOT NULL,
    tid             BIGINT NOT NULL,
    reason          VARCHAR(200) NOT NULL,
    PRIMARY KEY (zoid, tid)
) ENGINE = InnoDB;

UPDATE schema_version SET version = 6 WHERE version = 5;
