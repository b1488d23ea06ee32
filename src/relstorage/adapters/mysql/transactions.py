"""Transaction records for MySQL (the transaction-control role).

The last step of a commit runs as one batch of statements in one round
trip (the connections allow multi-statement queries): the UPDATE of
``commit_row`` takes the commit lock, chooses the tid from the server's
clock and counts the commit in the same statement, the tid travels to the
following statements in a session variable with the commit's link in the
commit chain (chain.py), and the guarded COMMIT (connection.py's
``guarded_commit``) ends the batch before the tid is read back, with what
says the COMMIT committed this transaction.  The batch is made from the
statements the step-by-step path runs (``MOVE_FROM_TEMP``,
``INSERT_TRANSACTION``).
"""
from relstorage.adapters.transactions import TransactionControl

from .chain import LINK
from .connection import run_batch

# A ZODB tid from the session's clock (sessions run in UTC): 32 bits of
# minutes since 1900 (months counted as 31 days), 32 bits of the fraction
# of the minute, as persistent's TimeStamp encodes them.
_TID_OF_NOW = """
    ((((((YEAR(SYSDATE(6)) - 1900) * 12 + MONTH(SYSDATE(6)) - 1) * 31
        + DAYOFMONTH(SYSDATE(6)) - 1) * 24 + HOUR(SYSDATE(6))) * 60
      + MINUTE(SYSDATE(6))) * 4294967296
     + FLOOR((SECOND(SYSDATE(6)) + MICROSECOND(SYSDATE(6)) / 1000000)
             * 4294967296 / 60))"""


def _with_tid(statement, count=1):
    for _ in range(count):
        assert '%s' in statement, statement
        statement = statement.replace('%s', '@relstorage_tid', 1)
    return statement.strip()


class _MySQLTransactionControl(TransactionControl):
    UPDATE_LAST_TID = ('UPDATE commit_row SET tid = %s, '
                       'commit_seq = commit_seq + 1 WHERE id = 0')
    UPDATE_LAST_TID_TIMED = (
        'UPDATE commit_row SET tid = %s, commit_seconds = %s, '
        'commit_seq = commit_seq + 1 WHERE id = 0')
    # The row lock of commit_row is the commit lock (see locks.py); the
    # parameter is the commit's seconds (ITransactionControl).
    CHOOSE_TID = f"""
        UPDATE commit_row SET tid = GREATEST({_TID_OF_NOW}, tid + 1),
            commit_seconds = %s, commit_seq = commit_seq + 1
        WHERE id = 0"""

    #: The largest commit (rows, pickle bytes) that finishes without the
    #: staging table: its rows go in the finish batch as hexadecimal
    #: literals, which saves the round trip that stages them and the
    #: staging table's insert and read.  The server parses them while the
    #: batch holds the commit lock, hence the small limit.
    INLINE_LIMIT = (200, 64 * 1024)

    def __init__(self, connmanager, move_statements, move_rows):
        """``move_rows(rows)``: the statements that publish rows given to
        finish_and_commit (``mover.move_rows``)."""
        self._connmanager = connmanager
        self._head = [self.CHOOSE_TID.strip(), *LINK]
        if self.INSERT_TRANSACTION is not None:
            self._head.append(_with_tid(self.INSERT_TRANSACTION))
        self._moves = [_with_tid(s) for s in move_statements]
        # The batch with the staged rows, per kind of guard (the connection
        # manager knows which once it has connected).
        self._finish = {}
        self._move_rows = move_rows
        self.inline_limit = self.INLINE_LIMIT
        # A restore (finish_restore): the caller's tid, no COMMIT.  The
        # commit lock's row is read first; a tid that does not follow it
        # fails after the batch, and the caller's rollback undoes it.
        self._restore_head = [
            'SELECT tid FROM commit_row WHERE id = 0 FOR UPDATE',
            'SET @relstorage_tid = %s']
        if self.INSERT_TRANSACTION is not None:
            self._restore_head.append(_with_tid(self.INSERT_TRANSACTION))
        self._restore_tail = [_with_tid(self.UPDATE_LAST_TID), *LINK]
        self._restore = ';\n'.join(
            self._restore_head + [_with_tid(s) for s in move_statements]
            + self._restore_tail)

    def _move_last_tid(self, cursor, tid, seconds=None):
        """The step-by-step path's move of the tid (see TransactionControl),
        with the commit's link, in one round trip."""
        if seconds is None:
            sql, params = self.UPDATE_LAST_TID, (tid,)
        else:
            sql, params = self.UPDATE_LAST_TID_TIMED, (tid, seconds)
        run_batch(cursor, ';\n'.join([sql, *LINK]), params)

    def finish_and_commit(self, cursor, user, description, extension,
                          status, rows=None, then=None, before=(),
                          seconds=None):
        """The whole last step and the COMMIT in one round trip; returns
        the tid, or with ``then`` (``(begin, select, params)``, see
        ITransactionControl) the tid and ``select``'s rows, in the same
        round trip."""
        params = (seconds,)
        if self.INSERT_TRANSACTION is not None:
            params += (status == 'p', user, description, extension)
        guard, committed = self._connmanager.guarded_commit()
        tail = [*guard, f'SELECT @relstorage_tid, {committed}']
        if rows is not None or before:
            moves = (self._moves if rows is None
                     else self._move_rows(rows))
            batch = ';\n'.join(self._head + moves
                               + [sql for sql, _ in before] + tail)
            for _, more in before:
                params += tuple(more)
        else:
            batch = self._finish.get(guard)
            if batch is None:
                batch = self._finish[guard] = ';\n'.join(
                    self._head + self._moves + tail)
        if then is not None:
            begin, select, then_params = then
            # A failed guard or COMMIT stops the batch before these.
            batch = f'{batch};\n{begin};\n{select}'
            params += tuple(then_params)
        results = run_batch(cursor, batch, params)
        found = None
        if then is not None:
            found = results.pop()
        tid, committed = results[-1][0]
        self._connmanager.ended(cursor.connection, committed)
        return int(tid) if then is None else (int(tid), list(found))


    def finish_restore(self, cursor, tid, user, description, extension,
                       status, rows=None, before=()):
        """The last step of a restore at ``tid`` in one round trip, without
        the COMMIT; returns the tid."""
        params = (tid,)
        if self.INSERT_TRANSACTION is not None:
            params += (status == 'p', user, description, extension)
        batch = self._restore if rows is None else ';\n'.join(
            self._restore_head + self._move_rows(rows) + self._restore_tail)
        if before:
            batch = ';\n'.join([batch] + [sql for sql, _ in before])
            for _, more in before:
                params += tuple(more)
        last = int(run_batch(cursor, batch, params)[0][0][0])
        if tid <= last:
            from ZODB.POSException import StorageTransactionError
            raise StorageTransactionError(
                f'cannot commit with tid {tid}: it is not later than the '
                f'last committed tid {last}')
        return tid


class HistoryPreservingTransactionControl(_MySQLTransactionControl):
    INSERT_TRANSACTION = """
        INSERT INTO transaction_log
            (tid, packed, username, description, extension)
        VALUES (%s, %s, %s, %s, %s)"""


class HistoryFreeTransactionControl(_MySQLTransactionControl):
    pass
