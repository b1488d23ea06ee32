-- relstorage schema version 1, history-free, for MySQL 8 and MariaDB 10.6+
-- (InnoDB).  Only the current revision of each object is kept.
--
-- Every statement is idempotent (IF NOT EXISTS, INSERT IGNORE), so several
-- processes may create the schema at once without a lock.

-- Which schema this database holds.
CREATE TABLE IF NOT EXISTS schema_version (
    id              TINYINT NOT NULL PRIMARY KEY,
    version         INTEGER NOT NULL,
    keep_history    BOOLEAN NOT NULL
) ENGINE = InnoDB;

-- One row: the id of the last committed transaction; its row lock is the
-- commit lock.
CREATE TABLE IF NOT EXISTS commit_row (
    id              TINYINT NOT NULL PRIMARY KEY,
    tid             BIGINT NOT NULL
) ENGINE = InnoDB;
INSERT IGNORE INTO commit_row (id, tid) VALUES (0, 0);

-- Object ids come in blocks of 100 (see the history-preserving schema).
CREATE TABLE IF NOT EXISTS new_oid (
    block           BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY
) ENGINE = InnoDB;

-- The current state of each object.  state is NULL for a deleted object
-- (deleteObject); pack removes such rows.  Committers lock rows here at
-- vote.
CREATE TABLE IF NOT EXISTS object_state (
    zoid            BIGINT NOT NULL PRIMARY KEY,
    tid             BIGINT NOT NULL,
    state           LONGBLOB,
    state_size      BIGINT NOT NULL,
    KEY object_state_tid (tid)
) ENGINE = InnoDB;

INSERT IGNORE INTO schema_version (id, version, keep_history)
VALUES (0, 1, FALSE);
