-- relstorage schema version 1, history-preserving, for MySQL 8 and
-- MariaDB 10.6+ (InnoDB).  Every revision of every object is kept until a
-- pack removes it.
--
-- Every statement is idempotent (IF NOT EXISTS, INSERT IGNORE), so several
-- processes may create the schema at once without a lock.  Indexes are
-- declared inside CREATE TABLE (MySQL 8 has no CREATE INDEX IF NOT EXISTS);
-- there are no foreign keys.

-- Which schema this database holds.
CREATE TABLE IF NOT EXISTS schema_version (
    id              TINYINT NOT NULL PRIMARY KEY,
    version         INTEGER NOT NULL,
    keep_history    BOOLEAN NOT NULL
) ENGINE = InnoDB;

-- One row: the id of the last committed transaction.  A committer locks it
-- (SELECT ... FOR UPDATE) while choosing a tid and publishing: that row
-- lock is the commit lock (no GET_LOCK, which Galera does not replicate).
CREATE TABLE IF NOT EXISTS commit_row (
    id              TINYINT NOT NULL PRIMARY KEY,
    tid             BIGINT NOT NULL
) ENGINE = InnoDB;
INSERT IGNORE INTO commit_row (id, tid) VALUES (0, 0);

-- Object ids come in blocks of 100: each row inserted here reserves the
-- block ending at 100 times its id.  AUTO_INCREMENT values are not handed
-- out twice, even when the inserting transaction rolls back.
CREATE TABLE IF NOT EXISTS new_oid (
    block           BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY
) ENGINE = InnoDB;

-- Transaction metadata.  packed once a pack removed some of its data;
-- such a transaction can no longer be undone.
CREATE TABLE IF NOT EXISTS transaction_log (
    tid             BIGINT NOT NULL PRIMARY KEY,
    packed          BOOLEAN NOT NULL DEFAULT FALSE,
    username        BLOB NOT NULL,
    description     BLOB NOT NULL,
    extension       BLOB
) ENGINE = InnoDB;

-- Object revisions.  state is NULL when the revision deletes the object
-- (an undone creation, or deleteObject).  data_txn is the transaction whose
-- data this revision copies (an undo or a restored back-pointer), else 0.
-- ord keeps the order in which a transaction stored its objects.
CREATE TABLE IF NOT EXISTS object_state (
    zoid            BIGINT NOT NULL,
    tid             BIGINT NOT NULL,
    state           LONGBLOB,
    state_size      BIGINT NOT NULL,
    data_txn        BIGINT NOT NULL DEFAULT 0,
    ord             INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (zoid, tid),
    KEY object_state_tid (tid)
) ENGINE = InnoDB;

-- Records a restored transaction wrote for an object before its last record
-- of that object (a copied FileStorage transaction can hold several).  No
-- load sees them; the iterator returns them so that a copy is faithful.
CREATE TABLE IF NOT EXISTS superseded_state (
    zoid            BIGINT NOT NULL,
    tid             BIGINT NOT NULL,
    state           LONGBLOB,
    state_size      BIGINT NOT NULL,
    data_txn        BIGINT NOT NULL DEFAULT 0,
    ord             INTEGER NOT NULL,
    KEY superseded_state_tid (tid)
) ENGINE = InnoDB;

-- The current revision of each object.  Committers lock these rows
-- (FOR UPDATE) at vote; read-current checks take shared locks with NOWAIT.
CREATE TABLE IF NOT EXISTS current_object (
    zoid            BIGINT NOT NULL PRIMARY KEY,
    tid             BIGINT NOT NULL,
    KEY current_object_tid (tid)
) ENGINE = InnoDB;

INSERT IGNORE INTO schema_version (id, version, keep_history)
VALUES (0, 1, TRUE);
