-- relstorage schema version 1, history-free, for PostgreSQL.
-- Only the current revision of each object is kept.

-- Which schema this database holds.
CREATE TABLE schema_version (
    version         INTEGER NOT NULL,
    keep_history    BOOLEAN NOT NULL
);

-- One row: the id of the last committed transaction; its row lock is the
-- commit lock.
CREATE TABLE commit_row (
    id              INTEGER PRIMARY KEY CHECK (id = 0),
    tid             BIGINT NOT NULL
);
INSERT INTO commit_row (id, tid) VALUES (0, 0);

-- Object ids are handed out in blocks of 100 (nextval gives a block's first
-- id).
CREATE SEQUENCE zoid_seq START WITH 1 INCREMENT BY 100;

-- The current state of each object.  state is NULL for a deleted object
-- (deleteObject); pack removes such rows.  Committers lock rows here at
-- vote.
CREATE TABLE object_state (
    zoid            BIGINT PRIMARY KEY,
    tid             BIGINT NOT NULL,
    state           BYTEA,
    state_size      BIGINT NOT NULL
);
CREATE INDEX object_state_tid ON object_state (tid);

INSERT INTO schema_version (version, keep_history) VALUES (1, FALSE);
