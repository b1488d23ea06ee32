"""Shared default of the transaction-control role
(see interfaces.ITransactionControl)."""
from relstorage.adapters.interfaces import ITransactionControl
from zope.interface import implementer


@implementer(ITransactionControl)
class TransactionControl:

    #: (tid,): move the last-committed-tid marker.
    UPDATE_LAST_TID = None
    #: (tid, seconds): the same, and record how slow the client's commits
    #: are now (``commit_row.commit_seconds``, which a pack's watch reads:
    #: relstorage.pack.watch).
    UPDATE_LAST_TID_TIMED = None
    #: (tid, packed, user, description, extension); None in history-free
    #: mode, which keeps no transaction metadata.
    INSERT_TRANSACTION = None
    #: The whole last step of a commit in one call, where the database
    #: allows it (see ITransactionControl); None: the core runs the steps.
    finish_and_commit = None
    #: ``(rows, bytes)``: the largest commit whose rows finish_and_commit
    #: takes as an argument instead of from the staging table; None: it
    #: never does.
    inline_limit = None
    #: The last step of a restore (the caller's tid) in one call, without
    #: the COMMIT, where the database allows it (see ITransactionControl);
    #: None: the core runs the steps.
    finish_restore = None

    def _move_last_tid(self, cursor, tid, seconds=None):
        """Move the last-tid marker to ``tid``, with ``seconds`` (see
        ITransactionControl.record_transaction) where given."""
        if seconds is None:
            cursor.execute(self.UPDATE_LAST_TID, (tid,))
        else:
            cursor.execute(self.UPDATE_LAST_TID_TIMED, (tid, seconds))

    def record_transaction(self, cursor, tid, user, description, extension,
                           status, seconds=None):
        self._move_last_tid(cursor, tid, seconds)
        if self.INSERT_TRANSACTION is not None:
            cursor.execute(self.INSERT_TRANSACTION, (
                tid, status == 'p', user, description, extension))
