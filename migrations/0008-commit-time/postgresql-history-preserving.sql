-- relstorage schema version 8 (from 7), for PostgreSQL, history-preserving:
-- each ordinary commit writes, beside the last tid, how slow its client's
-- commits are (seconds: the longer of its own time from tpc_begin to its
-- last step and the whole time of the client's previous commit, if
-- recent), and a pack reads it to tell whether its deletions slow the
-- writers down (docs/operations.rst, "Packing").  NULL until the first
-- commit after the upgrade.
--
-- The functions of a commit's last step (step 0005-finish) take the
-- seconds as an argument and write them with the tid, in the UPDATE that
-- moves it: relstorage_finish and relstorage_finish_rows are replaced by
-- versions with p_seconds (the old ones are dropped: a function is known
-- by its arguments); the restore functions are unchanged.
ALTER TABLE commit_row ADD COLUMN IF NOT EXISTS commit_seconds DOUBLE PRECISION;

DROP FUNCTION IF EXISTS relstorage_finish(BYTEA, BYTEA, BYTEA, BOOLEAN);
DROP FUNCTION IF EXISTS relstorage_finish_rows(
    BYTEA, BYTEA, BYTEA, BOOLEAN, BIGINT[], BIGINT[], BYTEA[], BIGINT[]);

CREATE OR REPLACE FUNCTION relstorage_finish(
    p_user BYTEA, p_description BYTEA, p_extension BYTEA, p_packed BOOLEAN,
    p_seconds DOUBLE PRECISION)
RETURNS BIGINT LANGUAGE plpgsql AS $body$
DECLARE
    last_tid BIGINT;
    now_utc TIMESTAMP;
    new_tid BIGINT;
BEGIN
    SELECT tid, clock_timestamp() AT TIME ZONE 'UTC'
    INTO last_tid, now_utc
    FROM commit_row WHERE id = 0 FOR UPDATE;
    new_tid := GREATEST(
    ((((((EXTRACT(YEAR FROM now_utc)::BIGINT - 1900) * 12
          + EXTRACT(MONTH FROM now_utc)::BIGINT - 1) * 31
         + EXTRACT(DAY FROM now_utc)::BIGINT - 1) * 24
        + EXTRACT(HOUR FROM now_utc)::BIGINT) * 60
       + EXTRACT(MINUTE FROM now_utc)::BIGINT) * 4294967296
     + FLOOR(EXTRACT(SECOND FROM now_utc) * 4294967296 / 60)::BIGINT), last_tid + 1);
    INSERT INTO transaction_log
            (tid, packed, username, description, extension)
        VALUES (new_tid, p_packed, p_user, p_description, p_extension);
    INSERT INTO object_state
               (zoid, tid, state, state_size, data_txn, ord)
           SELECT zoid, new_tid, state, state_size, data_txn, ord
           FROM temp_store;
    INSERT INTO current_object (zoid, tid)
           SELECT zoid, new_tid FROM temp_store WHERE prev_tid = 0;
    INSERT INTO current_object (zoid, tid)
           SELECT zoid, new_tid FROM temp_store WHERE prev_tid IS DISTINCT FROM 0
           ON CONFLICT (zoid) DO UPDATE SET tid = excluded.tid;
    UPDATE commit_row SET tid = new_tid, commit_seconds = p_seconds WHERE id = 0;
    RETURN new_tid;
END
$body$;

CREATE OR REPLACE FUNCTION relstorage_finish_rows(
    p_user BYTEA, p_description BYTEA, p_extension BYTEA, p_packed BOOLEAN,
    p_seconds DOUBLE PRECISION, p_oids BIGINT[], p_prev_tids BIGINT[], p_states BYTEA[], p_data_txns BIGINT[])
RETURNS BIGINT LANGUAGE plpgsql AS $body$
DECLARE
    last_tid BIGINT;
    now_utc TIMESTAMP;
    new_tid BIGINT;
BEGIN
    SELECT tid, clock_timestamp() AT TIME ZONE 'UTC'
    INTO last_tid, now_utc
    FROM commit_row WHERE id = 0 FOR UPDATE;
    new_tid := GREATEST(
    ((((((EXTRACT(YEAR FROM now_utc)::BIGINT - 1900) * 12
          + EXTRACT(MONTH FROM now_utc)::BIGINT - 1) * 31
         + EXTRACT(DAY FROM now_utc)::BIGINT - 1) * 24
        + EXTRACT(HOUR FROM now_utc)::BIGINT) * 60
       + EXTRACT(MINUTE FROM now_utc)::BIGINT) * 4294967296
     + FLOOR(EXTRACT(SECOND FROM now_utc) * 4294967296 / 60)::BIGINT), last_tid + 1);
    INSERT INTO transaction_log
            (tid, packed, username, description, extension)
        VALUES (new_tid, p_packed, p_user, p_description, p_extension);
    INSERT INTO object_state
               (zoid, tid, state, state_size, data_txn, ord)
           SELECT zoid, new_tid, state, state_size, data_txn, ord
           FROM (
        SELECT zoid, prev_tid, state,
            COALESCE(octet_length(state), 0)::BIGINT AS state_size,
            data_txn, ord
        FROM unnest(p_oids, p_prev_tids, p_states, p_data_txns)
            WITH ORDINALITY AS args(zoid, prev_tid, state, data_txn, ord)
        ) AS staged;
    INSERT INTO current_object (zoid, tid)
           SELECT zoid, new_tid FROM (
        SELECT zoid, prev_tid, state,
            COALESCE(octet_length(state), 0)::BIGINT AS state_size,
            data_txn, ord
        FROM unnest(p_oids, p_prev_tids, p_states, p_data_txns)
            WITH ORDINALITY AS args(zoid, prev_tid, state, data_txn, ord)
        ) AS staged WHERE prev_tid = 0;
    INSERT INTO current_object (zoid, tid)
           SELECT zoid, new_tid FROM (
        SELECT zoid, prev_tid, state,
            COALESCE(octet_length(state), 0)::BIGINT AS state_size,
            data_txn, ord
        FROM unnest(p_oids, p_prev_tids, p_states, p_data_txns)
            WITH ORDINALITY AS args(zoid, prev_tid, state, data_txn, ord)
        ) AS staged WHERE prev_tid IS DISTINCT FROM 0
           ON CONFLICT (zoid) DO UPDATE SET tid = excluded.tid;
    UPDATE commit_row SET tid = new_tid, commit_seconds = p_seconds WHERE id = 0;
    RETURN new_tid;
END
$body$;

UPDATE schema_version SET version = 8;
