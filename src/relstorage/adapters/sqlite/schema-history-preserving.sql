-- relstorage schema version 1, history-preserving, for SQLite.
-- Every revision of every object is kept until a pack removes it.

-- Which schema this database holds.
CREATE TABLE schema_version (
    version         INTEGER NOT NULL,
    keep_history    INTEGER NOT NULL
);

-- One row: the id of the last committed transaction.  Polling compares it
-- with the tid a snapshot last saw.
CREATE TABLE commit_row (
    id              INTEGER PRIMARY KEY CHECK (id = 0),
    tid             INTEGER NOT NULL
);
INSERT INTO commit_row (id, tid) VALUES (0, 0);

-- One row: the next object id the allocator hands out (oid 0 is the root).
CREATE TABLE oid_counter (
    id              INTEGER PRIMARY KEY CHECK (id = 0),
    next_oid        INTEGER NOT NULL
);
INSERT INTO oid_counter (id, next_oid) VALUES (0, 1);

-- Transaction metadata.  packed = 1 once a pack removed some of its data;
-- such a transaction can no longer be undone.
CREATE TABLE transaction_log (
    tid             INTEGER PRIMARY KEY,
    packed          INTEGER NOT NULL DEFAULT 0,
    username        BLOB NOT NULL,
    description     BLOB NOT NULL,
    extension       BLOB
);

-- Object revisions.  state is NULL when the revision deletes the object
-- (an undone creation, or deleteObject).  data_txn is the transaction whose
-- data this revision copies (an undo or a restored back-pointer), else 0.
-- ord keeps the order in which a transaction stored its objects.
CREATE TABLE object_state (
    zoid            INTEGER NOT NULL,
    tid             INTEGER NOT NULL,
    state           BLOB,
    state_size      INTEGER NOT NULL,
    data_txn        INTEGER NOT NULL DEFAULT 0,
    ord             INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (zoid, tid)
);
CREATE INDEX object_state_tid ON object_state (tid);

-- Records a restored transaction wrote for an object before its last record
-- of that object (a copied FileStorage transaction can hold several).  No
-- load sees them; the iterator returns them so that a copy is faithful.
CREATE TABLE superseded_state (
    zoid            INTEGER NOT NULL,
    tid             INTEGER NOT NULL,
    state           BLOB,
    state_size      INTEGER NOT NULL,
    data_txn        INTEGER NOT NULL DEFAULT 0,
    ord             INTEGER NOT NULL
);
CREATE INDEX superseded_state_tid ON superseded_state (tid);

-- The current revision of each object.
CREATE TABLE current_object (
    zoid            INTEGER PRIMARY KEY,
    tid             INTEGER NOT NULL
);
CREATE INDEX current_object_tid ON current_object (tid);

INSERT INTO schema_version (version, keep_history) VALUES (1, 1);
