-- relstorage schema version 5 (from 4), for PostgreSQL, history-free:
-- the functions that run the last step of a commit in one call.
--
-- relstorage_finish takes the commit lock (the row of commit_row),
-- chooses the tid from the server's clock, records the transaction and
-- moves the rows staged in the session's temp_store into place;
-- relstorage_finish_rows does the same for a small commit whose rows are
-- its array arguments.  relstorage_restore and relstorage_restore_rows
-- are the same step for a restore (zodbconvert), at the caller's tid.
-- Until version 4 each session created them as temporary functions
-- (pg_temp); in the schema, a session keeps nothing of them between
-- transactions, as a transaction pooler (PgBouncer) requires.

CREATE OR REPLACE FUNCTION relstorage_finish(
    p_user BYTEA, p_description BYTEA, p_extension BYTEA, p_packed BOOLEAN)
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
    INSERT INTO object_state (zoid, tid, state, state_size)
           SELECT zoid, CASE WHEN data_txn > 0 THEN data_txn ELSE new_tid END,
               state, state_size
           FROM temp_store
           WHERE prev_tid = 0;
    INSERT INTO object_state (zoid, tid, state, state_size)
           SELECT zoid, CASE WHEN data_txn > 0 THEN data_txn ELSE new_tid END,
               state, state_size
           FROM temp_store
           WHERE prev_tid IS DISTINCT FROM 0
           ON CONFLICT (zoid) DO UPDATE SET
               tid = excluded.tid,
               state = excluded.state,
               state_size = excluded.state_size;
    UPDATE commit_row SET tid = new_tid WHERE id = 0;
    RETURN new_tid;
END
$body$;

CREATE OR REPLACE FUNCTION relstorage_finish_rows(
    p_user BYTEA, p_description BYTEA, p_extension BYTEA, p_packed BOOLEAN, p_oids BIGINT[], p_prev_tids BIGINT[], p_states BYTEA[], p_data_txns BIGINT[])
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
    INSERT INTO object_state (zoid, tid, state, state_size)
           SELECT zoid, CASE WHEN data_txn > 0 THEN data_txn ELSE new_tid END,
               state, state_size
           FROM (
        SELECT zoid, prev_tid, state,
            COALESCE(octet_length(state), 0)::BIGINT AS state_size,
            data_txn, ord
        FROM unnest(p_oids, p_prev_tids, p_states, p_data_txns)
            WITH ORDINALITY AS args(zoid, prev_tid, state, data_txn, ord)
        ) AS staged
           WHERE prev_tid = 0;
    INSERT INTO object_state (zoid, tid, state, state_size)
           SELECT zoid, CASE WHEN data_txn > 0 THEN data_txn ELSE new_tid END,
               state, state_size
           FROM (
        SELECT zoid, prev_tid, state,
            COALESCE(octet_length(state), 0)::BIGINT AS state_size,
            data_txn, ord
        FROM unnest(p_oids, p_prev_tids, p_states, p_data_txns)
            WITH ORDINALITY AS args(zoid, prev_tid, state, data_txn, ord)
        ) AS staged
           WHERE prev_tid IS DISTINCT FROM 0
           ON CONFLICT (zoid) DO UPDATE SET
               tid = excluded.tid,
               state = excluded.state,
               state_size = excluded.state_size;
    UPDATE commit_row SET tid = new_tid WHERE id = 0;
    RETURN new_tid;
END
$body$;

CREATE OR REPLACE FUNCTION relstorage_restore(
    new_tid BIGINT, p_user BYTEA, p_description BYTEA, p_extension BYTEA,
    p_packed BOOLEAN)
RETURNS BIGINT LANGUAGE plpgsql AS $body$
DECLARE
    last_tid BIGINT;
BEGIN
    SELECT tid INTO last_tid FROM commit_row WHERE id = 0 FOR UPDATE;
    IF new_tid <= last_tid THEN
        RAISE EXCEPTION 'cannot commit with tid %: it is not later than '
            'the last committed tid %', new_tid, last_tid
            USING ERRCODE = 'RS001';
    END IF;
    INSERT INTO object_state (zoid, tid, state, state_size)
           SELECT zoid, CASE WHEN data_txn > 0 THEN data_txn ELSE new_tid END,
               state, state_size
           FROM temp_store
           WHERE prev_tid = 0;
    INSERT INTO object_state (zoid, tid, state, state_size)
           SELECT zoid, CASE WHEN data_txn > 0 THEN data_txn ELSE new_tid END,
               state, state_size
           FROM temp_store
           WHERE prev_tid IS DISTINCT FROM 0
           ON CONFLICT (zoid) DO UPDATE SET
               tid = excluded.tid,
               state = excluded.state,
               state_size = excluded.state_size;
    UPDATE commit_row SET tid = new_tid WHERE id = 0;
    RETURN new_tid;
END
$body$;

CREATE OR REPLACE FUNCTION relstorage_restore_rows(
    new_tid BIGINT, p_user BYTEA, p_description BYTEA, p_extension BYTEA,
    p_packed BOOLEAN, p_oids BIGINT[], p_prev_tids BIGINT[], p_states BYTEA[], p_data_txns BIGINT[])
RETURNS BIGINT LANGUAGE plpgsql AS $body$
DECLARE
    last_tid BIGINT;
BEGIN
    SELECT tid INTO last_tid FROM commit_row WHERE id = 0 FOR UPDATE;
    IF new_tid <= last_tid THEN
        RAISE EXCEPTION 'cannot commit with tid %: it is not later than '
            'the last committed tid %', new_tid, last_tid
            USING ERRCODE = 'RS001';
    END IF;
    INSERT INTO object_state (zoid, tid, state, state_size)
           SELECT zoid, CASE WHEN data_txn > 0 THEN data_txn ELSE new_tid END,
               state, state_size
           FROM (
        SELECT zoid, prev_tid, state,
            COALESCE(octet_length(state), 0)::BIGINT AS state_size,
            data_txn, ord
        FROM unnest(p_oids, p_prev_tids, p_states, p_data_txns)
            WITH ORDINALITY AS args(zoid, prev_tid, state, data_txn, ord)
        ) AS staged
           WHERE prev_tid = 0;
    INSERT INTO object_state (zoid, tid, state, state_size)
           SELECT zoid, CASE WHEN data_txn > 0 THEN data_txn ELSE new_tid END,
               state, state_size
           FROM (
        SELECT zoid, prev_tid, state,
            COALESCE(octet_length(state), 0)::BIGINT AS state_size,
            data_txn, ord
        FROM unnest(p_oids, p_prev_tids, p_states, p_data_txns)
            WITH ORDINALITY AS args(zoid, prev_tid, state, data_txn, ord)
        ) AS staged
           WHERE prev_tid IS DISTINCT FROM 0
           ON CONFLICT (zoid) DO UPDATE SET
               tid = excluded.tid,
               state = excluded.state,
               state_size = excluded.state_size;
    UPDATE commit_row SET tid = new_tid WHERE id = 0;
    RETURN new_tid;
END
$body$;

UPDATE schema_version SET version = 5;
