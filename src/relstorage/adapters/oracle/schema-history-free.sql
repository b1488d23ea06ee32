-- relstorage schema version 1, history-free, for Oracle 12.2 and later.
-- Only the current revision of each object is kept.
--
-- Plain SQL, one statement per ";", run as schema-history-preserving.sql
-- says (idempotently: "already exists" is passed over).

-- Which schema this database holds.
CREATE TABLE schema_version (
    id              NUMBER(3) NOT NULL PRIMARY KEY,
    version         NUMBER(10) NOT NULL,
    keep_history    NUMBER(1) NOT NULL
);

-- One row: the id of the last committed transaction, locked by committers
-- while they choose a tid and publish (the commit lock).
CREATE TABLE commit_row (
    id              NUMBER(3) NOT NULL PRIMARY KEY,
    tid             NUMBER(20) NOT NULL
);
INSERT INTO commit_row (id, tid) VALUES (0, 0);

-- Object ids in blocks of 100 (see schema-history-preserving.sql).
CREATE SEQUENCE zoid_seq START WITH 1 INCREMENT BY 100 NOCACHE;

-- The current state of each object; committers lock its row at vote.
CREATE TABLE object_state (
    zoid            NUMBER(20) NOT NULL PRIMARY KEY,
    tid             NUMBER(20) NOT NULL,
    state           BLOB,
    state_size      NUMBER(20) NOT NULL
);
CREATE INDEX object_state_tid ON object_state (tid);

-- A commit's rows before they are published (per session, emptied at
-- commit or rollback).
CREATE GLOBAL TEMPORARY TABLE temp_store (
    zoid            NUMBER(20) NOT NULL PRIMARY KEY,
    prev_tid        NUMBER(20),
    state           BLOB,
    state_size      NUMBER(20) NOT NULL,
    data_txn        NUMBER(20) NOT NULL,
    ord             NUMBER(20) NOT NULL
) ON COMMIT DELETE ROWS;

INSERT INTO schema_version (id, version, keep_history) VALUES (0, 1, 0);
