-- relstorage schema version 2 (from 1), for PostgreSQL, both history
-- modes: blob data kept in the database (shared-blob-dir false).
--
-- A blob is written in chunks of blob-chunk-size under a blob_id of its
-- own while its transaction is being voted, before the transaction's tid
-- is known; when the transaction commits, object_blob ties the revision
-- (zoid, tid) to it.  A blob_id belongs to exactly one revision: undo
-- copies the chunks rather than sharing them, so removing a revision's
-- blob never has to ask who else uses it.
--
-- Chunks are bytea rows, not large objects: ordinary rows that a DELETE
-- and a rollback remove, so no large object can be orphaned
-- (docs/postgresql.rst has the measurements behind the choice).  STORAGE
-- EXTERNAL keeps them out of line without trying to compress them: blobs
-- are mostly compressed already (images, PDF, video).

CREATE TABLE blob_chunk (
    blob_id         BIGINT NOT NULL,
    chunk_num       INTEGER NOT NULL,
    data            BYTEA NOT NULL,
    PRIMARY KEY (blob_id, chunk_num)
);
ALTER TABLE blob_chunk ALTER COLUMN data SET STORAGE EXTERNAL;

-- The blob of each object revision that has one; blob_size is the whole
-- blob's length in bytes.
CREATE TABLE object_blob (
    zoid            BIGINT NOT NULL,
    tid             BIGINT NOT NULL,
    blob_id         BIGINT NOT NULL,
    blob_size       BIGINT NOT NULL,
    PRIMARY KEY (zoid, tid)
);
CREATE UNIQUE INDEX object_blob_blob_id ON object_blob (blob_id);

UPDATE schema_version SET version = 2;
