-- relstorage schema version 1, history-preserving, for Oracle 12.2 and
-- later.  Every revision of every object is kept until a pack removes it.
--
-- Plain SQL, one statement per ";".  relstorage runs the statements one by
-- one and passes over "already exists" (ORA-00955) and "unique constraint"
-- (ORA-00001) errors, so that several processes may create the schema at
-- once and a creation stopped half-way is completed by the next (DDL
-- commits by itself in Oracle).  A DBA may run the file with SQL*Plus.
--
-- Oracle has no BOOLEAN column type before 23ai: NUMBER(1), 0 or 1.
-- Metadata columns are nullable BLOBs: Oracle stores an empty byte string
-- as NULL, and relstorage reads NULL back as empty.

-- Which schema this database holds.
CREATE TABLE schema_version (
    id              NUMBER(3) NOT NULL PRIMARY KEY,
    version         NUMBER(10) NOT NULL,
    keep_history    NUMBER(1) NOT NULL
);

-- One row: the id of the last committed transaction.  A committer locks it
-- (SELECT ... FOR UPDATE WAIT n) while choosing a tid and publishing: that
-- row lock is the commit lock.
CREATE TABLE commit_row (
    id              NUMBER(3) NOT NULL PRIMARY KEY,
    tid             NUMBER(20) NOT NULL
);
INSERT INTO commit_row (id, tid) VALUES (0, 0);

-- Object ids come in blocks of 100: each value of the sequence starts a
-- block.  NOCACHE: on RAC, an instance's cached values could otherwise lie
-- below an oid that a restore moved the sequence past.
CREATE SEQUENCE zoid_seq START WITH 1 INCREMENT BY 100 NOCACHE;

-- Transaction metadata.  packed (0 or 1) once a pack removed some of its
-- data; such a transaction can no longer be undone.
CREATE TABLE transaction_log (
    tid             NUMBER(20) NOT NULL PRIMARY KEY,
    packed          NUMBER(1) DEFAULT 0 NOT NULL,
    username        BLOB,
    description     BLOB,
    extension       BLOB
);

-- Object revisions.  state is NULL when the revision deletes the object
-- (an undone creation, or deleteObject).  data_txn is the transaction whose
-- data this revision copies (an undo or a restored back-pointer), else 0.
-- ord keeps the order in which a transaction stored its objects.
CREATE TABLE object_state (
    zoid            NUMBER(20) NOT NULL,
    tid             NUMBER(20) NOT NULL,
    state           BLOB,
    state_size      NUMBER(20) NOT NULL,
    data_txn        NUMBER(20) DEFAULT 0 NOT NULL,
    ord             NUMBER(10) DEFAULT 0 NOT NULL,
    CONSTRAINT object_state_pk PRIMARY KEY (zoid, tid)
);
CREATE INDEX object_state_tid ON object_state (tid);

-- Records a restored transaction wrote for an object before its last record
-- of that object (a copied FileStorage transaction can hold several).  No
-- load sees them; the iterator returns them so that a copy is faithful.
CREATE TABLE superseded_state (
    zoid            NUMBER(20) NOT NULL,
    tid             NUMBER(20) NOT NULL,
    state           BLOB,
    state_size      NUMBER(20) NOT NULL,
    data_txn        NUMBER(20) DEFAULT 0 NOT NULL,
    ord             NUMBER(10) NOT NULL
);
CREATE INDEX superseded_state_tid ON superseded_state (tid);

-- The current revision of each object.  Committers lock these rows
-- (FOR UPDATE WAIT n) at vote; read-current checks lock them with NOWAIT.
CREATE TABLE current_object (
    zoid            NUMBER(20) NOT NULL PRIMARY KEY,
    tid             NUMBER(20) NOT NULL
);
CREATE INDEX current_object_tid ON current_object (tid);

-- A commit's rows before they are published.  Each session sees only its
-- own rows, and a commit or rollback empties them.
CREATE GLOBAL TEMPORARY TABLE temp_store (
    zoid            NUMBER(20) NOT NULL PRIMARY KEY,
    prev_tid        NUMBER(20),
    state           BLOB,
    state_size      NUMBER(20) NOT NULL,
    data_txn        NUMBER(20) NOT NULL,
    ord             NUMBER(20) NOT NULL
) ON COMMIT DELETE ROWS;

INSERT INTO schema_version (id, version, keep_history) VALUES (0, 1, 1);
