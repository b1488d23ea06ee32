"""Shared default of the history role (see interfaces.IHistory)."""
from relstorage.adapters.interfaces import IHistory
from relstorage.adapters.objects import _bytes
from zope.interface import implementer


@implementer(IHistory)
class History:

    UNDO_LOG = None          # (limit, offset) -> tid, user, desc, ext
    OBJECT_HISTORY = None    # (oid, limit) -> tid, size, user, desc, ext
    UNDOABLE_RECORDS = None  # (tid,) -> oid, current_tid, before_tid
    TRANSACTIONS = None      # (start, stop, limit) -> tid, status, u, d, e
    RECORDS = None           # (tid,) -> oid, state, data_txn, ord

    def undo_log(self, cursor, offset, limit):
        if self.UNDO_LOG is None:
            return []
        cursor.execute(self.UNDO_LOG, (limit, offset))
        return [(tid, _bytes(u), _bytes(d), _bytes(e))
                for tid, u, d, e in cursor.fetchall()]

    def object_history(self, cursor, oid, limit):
        cursor.execute(self.OBJECT_HISTORY, (oid, limit))
        return [(tid, size, _bytes(u), _bytes(d), _bytes(e))
                for tid, size, u, d, e in cursor.fetchall()]

    def undoable_records(self, cursor, tid):
        cursor.execute(self.UNDOABLE_RECORDS, (tid,))
        return cursor.fetchall()

    def transactions(self, cursor, start, stop, limit):
        cursor.execute(self.TRANSACTIONS, (start, stop, limit))
        return [(tid, status, _bytes(u), _bytes(d), _bytes(e))
                for tid, status, u, d, e in cursor.fetchall()]

    def records(self, cursor, tid):
        cursor.execute(self.RECORDS, (tid,))
        return [(oid, _bytes(state), data_txn)
                for oid, state, data_txn, _ in cursor.fetchall()]
