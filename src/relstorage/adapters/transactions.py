"""Shared default of the transaction-control role
(see interfaces.ITransactionControl)."""
import time

from relstorage.adapters.interfaces import ITransactionControl
from zope.interface import implementer


@implementer(ITransactionControl)
class TransactionControl:

    #: (tid,): move the last-committed-tid marker.
    UPDATE_LAST_TID = None
    #: (tid, packed, user, description, extension); None in history-free
    #: mode, which keeps no transaction metadata.
    INSERT_TRANSACTION = None
    #: () -> seconds since the epoch, from the database server's clock.
    NOW = None

    def now(self, cursor):
        if self.NOW is None:
            # An embedded database runs in this process: its clock is ours.
            return time.time()
        cursor.execute(self.NOW)
        return float(cursor.fetchone()[0])

    def record_transaction(self, cursor, tid, user, description, extension,
                           status):
        cursor.execute(self.UPDATE_LAST_TID, (tid,))
        if self.INSERT_TRANSACTION is not None:
            cursor.execute(self.INSERT_TRANSACTION, (
                tid, status == 'p', user, description, extension))
