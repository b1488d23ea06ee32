-- relstorage schema version 2 (from 1), for SQLite, both history modes:
-- blob data kept in the database (shared-blob-dir false).
--
-- A blob is written in chunks of blob-chunk-size under a blob_id of its
-- own while its transaction is being voted, before the transaction's tid
-- is known; when the transaction commits, object_blob ties the revision
-- (zoid, tid) to it.  A blob_id belongs to exactly one revision: undo
-- copies the chunks rather than sharing them, so removing a revision's
-- blob never has to ask who else uses it.

CREATE TABLE blob_chunk (
    blob_id         INTEGER NOT NULL,
    chunk_num       INTEGER NOT NULL,
    data            BLOB NOT NULL,
    PRIMARY KEY (blob_id, chunk_num)
);

-- The blob of each object revision that has one; blob_size is the whole
-- blob's length in bytes.
CREATE TABLE object_blob (
    zoid            INTEGER NOT NULL,
    tid             INTEGER NOT NULL,
    blob_id         INTEGER NOT NULL,
    blob_size       INTEGER NOT NULL,
    PRIMARY KEY (zoid, tid)
);
CREATE UNIQUE INDEX object_blob_blob_id ON object_blob (blob_id);

UPDATE schema_version SET version = 2;
