-- Schema version 6 (Oracle): the revisions whose references a pack could
-- not read (see postgresql.sql).  Idempotent as relstorage runs it
-- ("already exists" passed over).
CREATE TABLE pack_unreadable (
    zoid            NUMBER(20) NOT NULL,
    tid             NUMBER(20) NOT NULL,
    reason          VARCHAR2(200) NOT NULL,
    PRIMARY KEY (zoid, tid)
);

UPDATE schema_version SET version = 6 WHERE version = 5;
