-- Schema version 3 (Oracle): the tables of packing.  Idempotent as
-- relstorage runs it ("already exists" passed over).  Booleans are
-- NUMBER(1), 0 or 1.

-- The references of analysed revisions, kept between packs.
CREATE TABLE object_ref (
    zoid            NUMBER(20) NOT NULL,
    tid             NUMBER(20) NOT NULL,
    to_zoid         NUMBER(20) NOT NULL,
    CONSTRAINT object_ref_pk PRIMARY KEY (zoid, tid, to_zoid)
);

-- How far the reference analysis has got.
CREATE TABLE pack_state (
    id              NUMBER(3) NOT NULL PRIMARY KEY,
    refs_tid        NUMBER(20) NOT NULL,
    refs_zoid       NUMBER(20) NOT NULL,
    scan_tid        NUMBER(20) NOT NULL,
    scan_zoid       NUMBER(20) NOT NULL
);

-- The pack being run (or the last one that finished).
CREATE TABLE pack_run (
    id              NUMBER(3) NOT NULL PRIMARY KEY,
    format          NUMBER(10) NOT NULL,
    pack_tid        NUMBER(20) NOT NULL,
    gc              NUMBER(1) NOT NULL,
    refs_tid        NUMBER(20) NOT NULL,
    objects         NUMBER(20) NOT NULL,
    phase           NUMBER(10) NOT NULL,
    upto            NUMBER(20) NOT NULL
);

-- Every object with a revision at or before the pack tid.
CREATE TABLE pack_object (
    zoid            NUMBER(20) NOT NULL PRIMARY KEY,
    keep_tid        NUMBER(20) NOT NULL,
    keep_null       NUMBER(1) NOT NULL,
    has_older       NUMBER(1) NOT NULL
);

-- The objects the walk from the root reached, by depth.
CREATE TABLE pack_reached (
    zoid            NUMBER(20) NOT NULL PRIMARY KEY,
    depth           NUMBER(10) NOT NULL
);
CREATE INDEX pack_reached_depth ON pack_reached (depth);

UPDATE schema_version SET version = 3 WHERE version = 2;
