-- relstorage schema version 1, history-free, for SQLite.
-- Only the current revision of each object is kept.

-- Which schema this database holds.
CREATE TABLE schema_version (
    version         INTEGER NOT NULL,
    keep_history    INTEGER NOT NULL
);

-- One row: the id of the last committed transaction.
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

-- The current state of each object.  state is NULL for a deleted object
-- (deleteObject); pack removes such rows.
CREATE TABLE object_state (
    zoid            INTEGER PRIMARY KEY,
    tid             INTEGER NOT NULL,
    state           BLOB,
    state_size      INTEGER NOT NULL
);
CREATE INDEX object_state_tid ON object_state (tid);

INSERT INTO schema_version (version, keep_history) VALUES (1, 0);
