-- Schema version 4 (Oracle): leases (see mysql.sql; a Galera cluster's
-- pack lock is the lease named 'pack').  Oracle's pack lock is
-- not a lease: the table is here so that every database has the same
-- version 4.  Idempotent as relstorage runs it ("already exists" passed
-- over).
CREATE TABLE lease (
    name            VARCHAR2(64) NOT NULL PRIMARY KEY,
    holder          VARCHAR2(64) NOT NULL,
    expires         NUMBER(20) NOT NULL
);

UPDATE schema_version SET version = 4 WHERE version = 3;
