"""Transaction records for PostgreSQL (the transaction-control role).

The last step of a commit (take the commit lock, choose the tid from the
server's clock, record the transaction, move the staged rows, move the
last-tid marker) runs as one call of a function, and with psycopg2 the
COMMIT travels in the same round trip.  The function is temporary
(``pg_temp``): each store session creates its own when it opens, so the
database holds no code that another relstorage version would have to
migrate.  Its body is made from the same statements the step-by-step path
runs (``MOVE_FROM_TEMP``, ``INSERT_TRANSACTION``, ``UPDATE_LAST_TID``).
"""
from relstorage.adapters.transactions import TransactionControl

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
CREATE OR REPLACE FUNCTION pg_temp.relstorage_finish(
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
    new_tid := GREATEST({tid_of_now}, last_tid + 1);
{statements}
    RETURN new_tid;
END
$body$"""


def _as_function(statement, *names):
    """One statement of the step-by-step path, with its ``%s`` parameters
    replaced by the function's variables ``names``, in order."""
    for name in names:
        assert '%s' in statement, statement
        statement = statement.replace('%s', name, 1)
    assert '%s' not in statement, statement
    return f'    {statement.strip()};'


class _PostgreSQLTransactionControl(TransactionControl):
    UPDATE_LAST_TID = 'UPDATE commit_row SET tid = %s WHERE id = 0'
    FINISH_CALL = 'SELECT pg_temp.relstorage_finish(%s, %s, %s, %s)'

    def __init__(self, driver, move_statements):
        self.driver = driver
        statements = []
        if self.INSERT_TRANSACTION is not None:
            statements.append(_as_function(
                self.INSERT_TRANSACTION, 'new_tid', 'p_packed', 'p_user',
                'p_description', 'p_extension'))
        statements += [_as_function(s, 'new_tid') for s in move_statements]
        statements.append(_as_function(self.UPDATE_LAST_TID, 'new_tid'))
        #: Run by every store session when it opens.
        self.session_setup = _FINISH.format(
            tid_of_now=_TID_OF_NOW, statements='\n'.join(statements))

    def finish_and_commit(self, cursor, user, description, extension,
                          status):
        """The whole last step and the COMMIT; returns the tid."""
        return self.driver.call_and_commit(
            cursor, self.FINISH_CALL,
            (user, description, extension, status == 'p'))


class HistoryPreservingTransactionControl(_PostgreSQLTransactionControl):
    INSERT_TRANSACTION = """
        INSERT INTO transaction_log
            (tid, packed, username, description, extension)
        VALUES (%s, %s, %s, %s, %s)"""


class HistoryFreeTransactionControl(_PostgreSQLTransactionControl):
    pass
