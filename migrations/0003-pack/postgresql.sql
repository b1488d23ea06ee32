-- relstorage schema version 3 (from 2), for PostgreSQL, both history
-- modes: what packing keeps between runs (relstorage/pack.py).
--
-- object_ref holds the references of every analysed object revision: the
-- revision (zoid, tid) refers to to_zoid.  A pack adds the revisions
-- written since the previous one and the deletions of a pack take the rows
-- of the revisions they remove, so the references of a revision are read
-- from its pickle once, not at every pack.
CREATE TABLE object_ref (
    zoid            BIGINT NOT NULL,
    tid             BIGINT NOT NULL,
    to_zoid         BIGINT NOT NULL,
    PRIMARY KEY (zoid, tid, to_zoid)
);

-- How far the analysis has got (at most one row), updated in the
-- transaction that adds the rows it accounts for, so the two never
-- disagree.  The analysis reads current revisions (and, at a pack, kept
-- ones that are no longer current): every current revision whose
-- (tid, zoid) is at or below (refs_tid, refs_zoid) has its rows in
-- object_ref.  A first analysis reads the current revisions up to
-- scan_tid in key order instead (cheaper than tid order on a large
-- table), and has got to scan_zoid when scan_tid is not 0.  No row:
-- nothing analysed.
CREATE TABLE pack_state (
    id              INTEGER PRIMARY KEY CHECK (id = 0),
    refs_tid        BIGINT NOT NULL,
    refs_zoid       BIGINT NOT NULL,
    scan_tid        BIGINT NOT NULL,
    scan_zoid       BIGINT NOT NULL
);

-- One pack's analysis, kept until its deletions are done so that a pack
-- that was stopped can go on (pack-skip-prepack, zodbpack
-- --use-prepack-state).  UNLOGGED: not written to the WAL, and emptied
-- after a crash, all three together; a pack that finds no pack_run starts
-- its analysis again.
--   format      the layout of these tables (other values are not used)
--   pack_tid    the pack removes what is gone as of this tid
--   gc          whether unreachable objects go (pack-gc)
--   refs_tid    the analysis covered the references of revisions up to
--               here; later ones are added by the deletion phase
--   objects     rows of pack_object when the analysis ended
--   phase       1 analysed, 2 garbage removed, 3 old revisions removed
--   upto        the last zoid the current deletion phase has done
CREATE UNLOGGED TABLE pack_run (
    id              INTEGER PRIMARY KEY CHECK (id = 0),
    format          INTEGER NOT NULL,
    pack_tid        BIGINT NOT NULL,
    gc              BOOLEAN NOT NULL,
    refs_tid        BIGINT NOT NULL,
    objects         BIGINT NOT NULL,
    phase           INTEGER NOT NULL,
    upto            BIGINT NOT NULL
);

-- Every object with a revision at or before the pack tid: its newest such
-- revision (keep_tid), whether that revision deletes it (keep_null), and
-- whether it has older ones (history-preserving).
CREATE UNLOGGED TABLE pack_object (
    zoid            BIGINT PRIMARY KEY,
    keep_tid        BIGINT NOT NULL,
    keep_null       BOOLEAN NOT NULL,
    has_older       BOOLEAN NOT NULL
);

-- The objects of pack_object found reachable, with the step of the walk
-- that reached them (the frontier of the next step).
CREATE UNLOGGED TABLE pack_reached (
    zoid            BIGINT PRIMARY KEY,
    depth           INTEGER NOT NULL
);
CREATE INDEX pack_reached_depth ON pack_reached (depth);

UPDATE schema_version SET version = 3;
