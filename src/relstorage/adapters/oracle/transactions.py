"""Transaction records for Oracle (the transaction-control role).

The last step of an ordinary commit (take the commit lock, choose the tid
from the server's clock, record the transaction, move the staged rows,
move the last-tid marker, COMMIT) is one anonymous PL/SQL block: one
round trip.  Its body is made from the statements the step-by-step path
runs (``MOVE_FROM_TEMP``, ``INSERT_TRANSACTION``, ``UPDATE_LAST_TID``),
with the block's variable in place of their ``:tid``; the database holds
no stored code that another relstorage version would have to migrate.
Restores and commits with blobs take the step-by-step path.
"""
import re

from relstorage.adapters.transactions import TransactionControl

# A ZODB tid from a UTC timestamp: 32 bits of minutes since 1900 (months
# counted as 31 days), 32 bits of the fraction of the minute (persistent's
# TimeStamp).  EXTRACT(SECOND ...) of a TIMESTAMP has the fraction.
TID_OF_NOW = """
    ((((((EXTRACT(YEAR FROM now_utc) - 1900) * 12
          + EXTRACT(MONTH FROM now_utc) - 1) * 31
         + EXTRACT(DAY FROM now_utc) - 1) * 24
        + EXTRACT(HOUR FROM now_utc)) * 60
       + EXTRACT(MINUTE FROM now_utc)) * 4294967296
     + FLOOR(EXTRACT(SECOND FROM now_utc) * 4294967296 / 60))"""

FINISH = """
DECLARE
    last_tid NUMBER(20);
    now_utc TIMESTAMP(6);
    new_tid NUMBER(20);
BEGIN
    SELECT tid, SYS_EXTRACT_UTC(SYSTIMESTAMP)
    INTO last_tid, now_utc
    FROM commit_row WHERE id = 0
    FOR UPDATE WAIT {wait};
    new_tid := GREATEST({tid_of_now}, last_tid + 1);
{statements}
    COMMIT;
    :new_tid := new_tid;
END;"""

_TID_BIND = re.compile(r':tid\b')


def with_variable(statement):
    """``statement`` of the step-by-step path as a statement of the block:
    the block's variable ``new_tid`` in place of its ``:tid``; its other
    binds stay binds of the block."""
    statement = statement.strip()
    return '    ' + _TID_BIND.sub('new_tid', statement) + ';'


class _OracleTransactionControl(TransactionControl):
    UPDATE_LAST_TID = 'UPDATE commit_row SET tid = :tid WHERE id = 0'
    UPDATE_LAST_TID_TIMED = '''
        UPDATE commit_row SET tid = :tid, commit_seconds = :commit_seconds
        WHERE id = 0'''

    def __init__(self, connmanager, move_statements):
        self.connmanager = connmanager
        statements = []
        if self.INSERT_TRANSACTION is not None:
            statements.append(with_variable(self.INSERT_TRANSACTION))
        statements += [with_variable(s) for s in move_statements]
        statements.append(with_variable(self.UPDATE_LAST_TID_TIMED))
        #: The block, with ``{wait}`` still to fill in.
        self.finish_block = FINISH.replace(
            '{tid_of_now}', TID_OF_NOW.strip()).replace(
            '{statements}', '\n'.join(statements))
        self.finish_and_commit = self._finish_and_commit

    def _metadata(self, cursor, values):
        """Types for transaction metadata bound in the PL/SQL block: RAW
        where it fits a PL/SQL RAW (32767 bytes), else a BLOB."""
        driver = self.connmanager.driver
        return [driver.RAW if len(v or b'') <= 32767 else driver.BLOB
                for v in values]

    def _finish_and_commit(self, cursor, user, description, extension,
                           status, rows=None, before=(), seconds=None):
        """The whole last step and the COMMIT; returns the tid."""
        assert rows is None, 'Oracle stages every commit (no inline_limit)'
        assert not before, 'Oracle keeps no JSON mirror (json_mirror False)'
        # An int variable: a tid has 19 digits, more than a float keeps.
        new_tid = cursor.var(int)
        params = {'new_tid': new_tid, 'commit_seconds': seconds}
        if self.INSERT_TRANSACTION is not None:
            params.update(packed=int(status == 'p'), username=user,
                          description=description, extension=extension)
            raw = self._metadata(cursor, (user, description, extension))
            cursor.setinputsizes(username=raw[0], description=raw[1],
                                 extension=raw[2])
        cursor.execute(self.finish_block.format(
            wait=self.connmanager.wait_seconds), params)
        return int(new_tid.getvalue())

    def record_transaction(self, cursor, tid, user, description, extension,
                           status, seconds=None):
        self._move_last_tid(cursor, tid, seconds)
        if self.INSERT_TRANSACTION is not None:
            # Oracle SQL has no BOOLEAN before 23ai: packed is 0 or 1.  The
            # metadata as LONG RAW: in SQL a RAW bind stops at 2000 bytes.
            binary = self.connmanager.driver.LONG_BINARY
            cursor.setinputsizes(None, None, binary, binary, binary)
            cursor.execute(self.INSERT_TRANSACTION, (
                tid, int(status == 'p'), user, description, extension))


class HistoryPreservingTransactionControl(_OracleTransactionControl):
    INSERT_TRANSACTION = """
        INSERT INTO transaction_log
            (tid, packed, username, description, extension)
        VALUES (:tid, :packed, :username, :description, :extension)"""


class HistoryFreeTransactionControl(_OracleTransactionControl):
    pass
