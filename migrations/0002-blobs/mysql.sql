-- relstorage schema version 2 (from 1), for MySQL and MariaDB, both
-- history modes: blob data kept in the database (shared-blob-dir false).
--
-- A blob is written in chunks of blob-chunk-size under a blob_id of its
-- own while its transaction is being voted, before the transaction's tid
-- is known; when the transaction commits, object_blob ties the revision
-- (zoid, tid) to it.  A blob_id belongs to exactly one revision: undo
-- copies the chunks rather than sharing them, so removing a revision's
-- blob never has to ask who else uses it.
--
-- Every statement is idempotent, like those of version 1.  A chunk travels
-- in one statement, so blob-chunk-size must fit the server's
-- max_allowed_packet (checked when the storage opens).

CREATE TABLE IF NOT EXISTS blob_chunk (
    blob_id         BIGINT NOT NULL,
    chunk_num       INTEGER NOT NULL,
    data            LONGBLOB NOT NULL,
    PRIMARY KEY (blob_id, chunk_num)
) ENGINE = InnoDB;

-- The blob of each object revision that has one; blob_size is the whole
-- blob's length in bytes.
CREATE TABLE IF NOT EXISTS object_blob (
    zoid            BIGINT NOT NULL,
    tid             BIGINT NOT NULL,
    blob_id         BIGINT NOT NULL,
    blob_size       BIGINT NOT NULL,
    PRIMARY KEY (zoid, tid),
    UNIQUE KEY object_blob_blob_id (blob_id)
) ENGINE = InnoDB;

UPDATE schema_version SET version = 2 WHERE version = 1;
