"""Transaction records for PostgreSQL (the transaction-control role).

The last step of a commit (take the commit lock, choose the tid from the
server's clock, record the transaction, move the staged rows, move the
last-tid marker) runs as one call of a function, and the COMMIT travels
in the same round trip (with psycopg 3 through a client-binding cursor),
followed, where the core asks, by the next snapshot's BEGIN and its poll
(IPoller.poll_after_commit).  The functions belong to the schema
(migration steps 0005-finish and 0008-commit-time, whose SQL is
``functions()``'s, as a test checks): a session keeps nothing of them,
which a transaction pooler (PgBouncer) needs, and opening a store session
runs nothing for them.  Their bodies are made from the same statements
the step-by-step path runs (``MOVE_FROM_TEMP``, ``INSERT_TRANSACTION``,
``UPDATE_LAST_TID`` or, with the commit's seconds,
``UPDATE_LAST_TID_TIMED``); a change to those is a new migration step.

A small commit does not stage its rows: they travel as array arguments of
a second function, which moves them from ``unnest()`` of the arrays.  The
staging table is ON COMMIT DELETE ROWS, and a commit that wrote to it
truncates it (heap, primary key, TOAST table and index) while it still
holds the commit lock.  Measured through the storage (history-free, states
of 250 bytes, per commit): 1 object 1.60 ms staged, 0.82 ms as arguments;
50 objects 2.05 and 1.63 ms; 100 objects 2.79 and 2.60 ms.  But the server
parses the arguments as SQL text, about 13 ns per byte of a state written
as hex (a 250 KB bytea took 3.3 ms), where the binary COPY parses nothing:
300 objects 6.5 and 6.9 ms, 1,000 objects 15.2 and 18.1 ms.  Hence
``INLINE_LIMIT``.
"""
from relstorage.adapters.transactions import TransactionControl

from .drivers import RESULT
from .drivers import bigint_array
from .drivers import bytea_array
from .drivers import oid_array

# A ZODB tid from a UTC timestamp: 32 bits of minutes since 1900 (months
# counted as 31 days), 32 bits of the fraction of the minute (persistent's
# TimeStamp).  EXTRACT(SECOND ...) gives the seconds with microseconds.
_TID_OF_NOW = """
    ((((((EXTRACT(YEAR FROM now_utc)::BIGINT - 1900) * 12
          + EXTRACT(MONTH FROM now_utc)::BIGINT - 1) * 31
         + EXTRACT(DAY FROM now_utc)::BIGINT - 1) * 24
        + EXTRACT(HOUR FROM now_utc)::BIGINT) * 60
       + EXTRACT(MINUTE FROM now_utc)::BIGINT) * 4294967296
     + FLOOR(EXTRACT(SECOND FROM now_utc) * 4294967296 / 60)::BIGINT)"""

_FINISH = """
CREATE OR REPLACE FUNCTION {name}(
    p_user BYTEA, p_description BYTEA, p_extension BYTEA, p_packed BOOLEAN,
    p_seconds DOUBLE PRECISION{args})
RETURNS BIGINT LANGUAGE plpgsql AS $body$
DECLARE
    last_tid BIGINT;
    now_utc TIMESTAMP;
    new_tid BIGINT;
BEGIN
    SELECT tid, clock_timestamp() AT TIME ZONE 'UTC'
    INTO last_tid, now_utc
    FROM commit_row WHERE id = 0 FOR UPDATE;
    new_tid := GREATEST({tid_of_now}, last_tid + 1);
{statements}
    RETURN new_tid;
END
$body$"""

# The same step for a restore (zodbconvert): the tid is the caller's, and
# must follow the last one; no COMMIT (a restore batch goes on).
_RESTORE = """
CREATE OR REPLACE FUNCTION {name}(
    new_tid BIGINT, p_user BYTEA, p_description BYTEA, p_extension BYTEA,
    p_packed BOOLEAN{args})
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
{statements}
    RETURN new_tid;
END
$body$"""

# The rows of a small commit as the move statements' source: the columns
# of the staging table, from the function's arrays (in store order).
_ROW_ARGS = (', p_oids BIGINT[], p_prev_tids BIGINT[], p_states BYTEA[], '
             'p_data_txns BIGINT[]')
_ROWS = """(
        SELECT zoid, prev_tid, state,
            COALESCE(octet_length(state), 0)::BIGINT AS state_size,
            data_txn, ord
        FROM unnest(p_oids, p_prev_tids, p_states, p_data_txns)
            WITH ORDINALITY AS args(zoid, prev_tid, state, data_txn, ord)
        ) AS staged"""


#: The functions of migration step 0005-finish (drop_all drops them); step
#: 0008-commit-time gave the first two their ``p_seconds``.
FUNCTIONS = ('relstorage_finish', 'relstorage_finish_rows',
             'relstorage_restore', 'relstorage_restore_rows')

#: The key of the tid's row among a poll's rows (the last tid's is -1,
#: changes' are oids).
_TID_KEY = -2


def _as_function(statement, *names):
    """One statement of the step-by-step path, with its ``%s`` parameters
    replaced by the function's variables ``names``, in order."""
    for name in names:
        assert '%s' in statement, statement
        statement = statement.replace('%s', name, 1)
    assert '%s' not in statement, statement
    return f'    {statement.strip()};'


class _PostgreSQLTransactionControl(TransactionControl):
    #: What reads the tid after the COMMIT (None: the driver's RESULT);
    #: behind a transaction pooler RESULT_EMPTIED (set by the adapter).
    read_result = None
    UPDATE_LAST_TID = 'UPDATE commit_row SET tid = %s WHERE id = 0'
    UPDATE_LAST_TID_TIMED = (
        'UPDATE commit_row SET tid = %s, commit_seconds = %s WHERE id = 0')
    FINISH_CALL = ('SELECT relstorage_finish(%s, %s, %s, %s, '
                   '%s::double precision)')
    FINISH_ROWS_CALL = (
        'SELECT relstorage_finish_rows(%s, %s, %s, %s, %s::double precision, '
        '%s::bigint[], %s::bigint[], %s::bytea[], %s::bigint[])')
    RESTORE_CALL = 'SELECT relstorage_restore(%s, %s, %s, %s, %s)'
    RESTORE_ROWS_CALL = (
        'SELECT relstorage_restore_rows(%s, %s, %s, %s, %s, '
        '%s::bigint[], %s::bigint[], %s::bytea[], %s::bigint[])')

    #: The largest commit (rows, pickle bytes) that finishes without the
    #: staging table (see the module's docstring).
    INLINE_LIMIT = (200, 40 * 1024)

    def __init__(self, driver, move_statements):
        """``move_statements`` take the staged rows from ``{staged}``."""
        self.driver = driver
        self.inline_limit = self.INLINE_LIMIT
        self._functions = [
            self._function('relstorage_finish', '', move_statements,
                           'temp_store'),
            self._function('relstorage_finish_rows', _ROW_ARGS,
                           move_statements, _ROWS),
            self._function('relstorage_restore', '', move_statements,
                           'temp_store', _RESTORE),
            self._function('relstorage_restore_rows', _ROW_ARGS,
                           move_statements, _ROWS, _RESTORE)]

    def functions(self):
        """The CREATE statements of the four functions, as the newest step
        that creates each has them (0008-commit-time: the first two;
        0005-finish: the others) for this history mode."""
        return list(self._functions)

    def _function(self, name, args, move_statements, staged,
                  template=_FINISH):
        statements = []
        if self.INSERT_TRANSACTION is not None:
            statements.append(_as_function(
                self.INSERT_TRANSACTION, 'new_tid', 'p_packed', 'p_user',
                'p_description', 'p_extension'))
        statements += [_as_function(s.format(staged=staged), 'new_tid')
                       for s in move_statements]
        if template is _FINISH:
            statements.append(_as_function(self.UPDATE_LAST_TID_TIMED,
                                           'new_tid', 'p_seconds'))
        else:
            statements.append(_as_function(self.UPDATE_LAST_TID, 'new_tid'))
        return template.format(
            name=name, args=args, tid_of_now=_TID_OF_NOW,
            statements='\n'.join(statements))

    def finish_and_commit(self, cursor, user, description, extension,
                          status, rows=None, then=None, before=(),
                          seconds=None):
        """The whole last step and the COMMIT; returns the tid, or with
        ``then`` (``(begin, select, params)``, see ITransactionControl) the
        tid and ``select``'s rows, all in one round trip."""
        params = (user, description, extension, status == 'p', seconds)
        call = self.FINISH_CALL
        if rows is not None:
            call = self.FINISH_ROWS_CALL
            params += (oid_array([row[0] for row in rows]),
                       bigint_array([row[1] for row in rows]),
                       bytea_array([row[2] for row in rows]),
                       oid_array([row[3] for row in rows]))
        if then is None:
            if self.read_result is not None:
                found = self.driver.call_and_commit(
                    cursor, call, params, self.read_result, before=before)
            else:
                found = self.driver.call_and_commit(cursor, call, params,
                                                    before=before)
            return int(found[0][0])
        begin, select, then_params = then
        # psycopg2 returns only the last statement's rows: the tid rides
        # with ``select``'s, tagged with a key no oid has.
        found = self.driver.call_and_commit(
            cursor, call, params,
            f'{begin}; SELECT {_TID_KEY}, {RESULT} UNION ALL {select}',
            then_params, before=before)
        tid = next(row[1] for row in found if row[0] == _TID_KEY)
        return tid, [row for row in found if row[0] != _TID_KEY]


    def finish_restore(self, cursor, tid, user, description, extension,
                       status, rows=None, before=()):
        """The last step of a restore at ``tid`` (the rows staged, or
        ``rows``), without the COMMIT; returns the tid."""
        params = (tid, user, description, extension, status == 'p')
        try:
            if rows is None:
                cursor.execute(self.RESTORE_CALL, params)
            else:
                cursor.execute(self.RESTORE_ROWS_CALL, params + (
                    oid_array([row[0] for row in rows]),
                    bigint_array([row[1] for row in rows]),
                    bytea_array([row[2] for row in rows]),
                    oid_array([row[3] for row in rows])))
        except self.driver.Error as e:
            if getattr(e, 'pgcode', None) != 'RS001' and getattr(
                    getattr(e, 'diag', None), 'sqlstate', None) != 'RS001':
                raise
            from ZODB.POSException import StorageTransactionError
            raise StorageTransactionError(
                str(getattr(e, 'diag', None) and e.diag.message_primary
                    or e).strip()) from None
        tid = cursor.fetchone()[0]
        for sql, more in before:
            cursor.execute(sql, more)
        return tid


class HistoryPreservingTransactionControl(_PostgreSQLTransactionControl):
    INSERT_TRANSACTION = """
        INSERT INTO transaction_log
            (tid, packed, username, description, extension)
        VALUES (%s, %s, %s, %s, %s)"""


class HistoryFreeTransactionControl(_PostgreSQLTransactionControl):
    pass
