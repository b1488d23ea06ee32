-- relstorage schema version 1, history-preserving, for PostgreSQL.
-- Every revision of every object is kept until a pack removes it.

-- Which schema this database holds.
CREATE TABLE schema_version (
    version         INTEGER NOT NULL,
    keep_history    BOOLEAN NOT NULL
);

-- One row: the id of the last committed transaction.  A committer locks
-- it (SELECT ... FOR UPDATE) while choosing a tid and publishing: that row
-- lock is the commit lock.  Polling reads it.
CREATE TABLE commit_row (
    id              INTEGER PRIMARY KEY CHECK (id = 0),
    tid             BIGINT NOT NULL
);
INSERT INTO commit_row (id, tid) VALUES (0, 0);

-- Object ids are handed out in blocks of 100: nextval gives a block's
-- first id.  Sequences are not transactional, so a rolled-back commit
-- never makes an id be handed out twice.
CREATE SEQUENCE zoid_seq START WITH 1 INCREMENT BY 100;

-- Transaction metadata.  packed once a pack removed some of its data;
-- such a transaction can no longer be undone.
CREATE TABLE transaction_log (
    tid             BIGINT PRIMARY KEY,
    packed          BOOLEAN NOT NULL DEFAULT FALSE,
    username        BYTEA NOT NULL,
    description     BYTEA NOT NULL,
    extension       BYTEA
);

-- Object revisions.  state is NULL when the revision deletes the object
-- (an undone creation, or deleteObject).  data_txn is the transaction whose
-- data this revision copies (an undo or a restored back-pointer), else 0.
-- ord keeps the order in which a transaction stored its objects.
CREATE TABLE object_state (
    zoid            BIGINT NOT NULL,
    tid             BIGINT NOT NULL,
    state           BYTEA,
    state_size      BIGINT NOT NULL,
    data_txn        BIGINT NOT NULL DEFAULT 0,
    ord             INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (zoid, tid)
);
CREATE INDEX object_state_tid ON object_state (tid);

-- Records a restored transaction wrote for an object before its last record
-- of that object (a copied FileStorage transaction can hold several).  No
-- load sees them; the iterator returns them so that a copy is faithful.
CREATE TABLE superseded_state (
    zoid            BIGINT NOT NULL,
    tid             BIGINT NOT NULL,
    state           BYTEA,
    state_size      BIGINT NOT NULL,
    data_txn        BIGINT NOT NULL DEFAULT 0,
    ord             INTEGER NOT NULL
);
CREATE INDEX superseded_state_tid ON superseded_state (tid);

-- The current revision of each object.  Committers lock these rows
-- (FOR UPDATE) at vote; readers that need an object to stay current take
-- FOR SHARE NOWAIT locks.
CREATE TABLE current_object (
    zoid            BIGINT PRIMARY KEY,
    tid             BIGINT NOT NULL
);
CREATE INDEX current_object_tid ON current_object (tid);

INSERT INTO schema_version (version, keep_history) VALUES (1, TRUE);
