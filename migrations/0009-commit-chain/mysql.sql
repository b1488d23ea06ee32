-- relstorage schema version 9 (from 8), for MySQL and MariaDB, both
-- history modes: the commit chain, by which a read snapshot tells whether
-- it holds every commit up to the last tid it sees.
--
-- InnoDB makes a snapshot by going through the running transactions while
-- commits go on, so a snapshot can count a commit as still running and a
-- later commit, which took the commit lock after the first let go of it,
-- as done: it sees the later tid in commit_row without the earlier
-- commit's rows, and a poll of "what changed up to the last tid" would
-- never report them.  (Measured on MariaDB 10.11 under load: about one
-- snapshot in 100,000 polls; benchmarks/poll_check.py.)
--
-- Every commit counts itself in commit_row.commit_seq (under the commit
-- lock, so the numbers have no gaps) and inserts (commit_seq, tid) here in
-- the same transaction; the 10,000 most recent rows are kept.  A snapshot
-- that sees commit_seq = N and fewer than N - M rows above M (the last
-- poll's number, or N - 1,000 for a first read) is missing a commit: it
-- is ended and another begun (relstorage/adapters/mysql/poll.py).
--
-- relstorage-migrate passes over "Duplicate column name", so that a run
-- stopped before the version was set is completed by the next.
ALTER TABLE commit_row ADD COLUMN commit_seq BIGINT NOT NULL DEFAULT 0;

CREATE TABLE IF NOT EXISTS commit_chain (
    seq             BIGINT NOT NULL PRIMARY KEY,
    tid             BIGINT NOT NULL,
    UNIQUE KEY commit_chain_tid (tid)
) ENGINE = InnoDB;

UPDATE schema_version SET version = 9 WHERE version = 8;
