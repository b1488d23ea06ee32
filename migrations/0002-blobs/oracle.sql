-- Schema version 2 (Oracle): blob data kept in the database
-- (shared-blob-dir false), in chunks.  Idempotent as relstorage runs it
-- ("already exists" passed over).

-- The chunks of each blob, numbered from 0.
CREATE TABLE blob_chunk (
    blob_id         NUMBER(20) NOT NULL,
    chunk_num       NUMBER(10) NOT NULL,
    data            BLOB NOT NULL,
    CONSTRAINT blob_chunk_pk PRIMARY KEY (blob_id, chunk_num)
);

-- Which blob a revision holds.
CREATE TABLE object_blob (
    zoid            NUMBER(20) NOT NULL,
    tid             NUMBER(20) NOT NULL,
    blob_id         NUMBER(20) NOT NULL,
    blob_size       NUMBER(20) NOT NULL,
    CONSTRAINT object_blob_pk PRIMARY KEY (zoid, tid),
    CONSTRAINT object_blob_blob_id UNIQUE (blob_id)
);

UPDATE schema_version SET version = 2 WHERE version = 1;
