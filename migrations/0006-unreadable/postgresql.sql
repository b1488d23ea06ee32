-- relstorage schema version 6 (from 5), for PostgreSQL, both history
-- modes: the revisions whose references a pack could not read.
--
-- A revision whose pickles neither ZODB's referencesf nor a walk of their
-- opcodes can read (damaged, truncated) is listed here with the reason,
-- by the analysis that met it.  While one of them is still stored, a pack
-- removes no garbage (what it refers to is unknown), only old revisions;
-- a row whose revision is gone (replaced, or packed away) is dropped by
-- the next pack.
CREATE TABLE pack_unreadable (
    zoid            BIGINT NOT NULL,
    tid             BIGINT NOT NULL,
    reason          VARCHAR(200) NOT NULL,
    PRIMARY KEY (zoid, tid)
);

UPDATE schema_version SET version = 6;
