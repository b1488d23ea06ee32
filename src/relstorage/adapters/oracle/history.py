"""Undo, history and iteration queries for Oracle (the history role).

Oracle stores an empty byte string as NULL: user, description and
extension come back as empty bytes where they are NULL.
"""
from relstorage.adapters.history import History
from relstorage.adapters.objects import _bytes


def _meta(value):
    return b'' if value is None else _bytes(value)


class _OracleHistory(History):

    def undo_log(self, cursor, offset, limit):
        if self.UNDO_LOG is None:
            return []
        cursor.execute(self.UNDO_LOG, (offset, limit))
        return [(tid, _meta(u), _meta(d), _meta(e))
                for tid, u, d, e in cursor.fetchall()]

    def object_history(self, cursor, oid, limit):
        cursor.execute(self.OBJECT_HISTORY, (oid, limit))
        return [(tid, size, _meta(u), _meta(d), _meta(e))
                for tid, size, u, d, e in cursor.fetchall()]

    def transactions(self, cursor, start, stop, limit):
        cursor.execute(self.TRANSACTIONS, (start, stop, limit))
        return [(tid, status, _meta(u), _meta(d), _meta(e))
                for tid, status, u, d, e in cursor.fetchall()]


class HistoryPreservingHistory(_OracleHistory):

    UNDO_LOG = """
        SELECT tid, username, description, extension
        FROM transaction_log
        WHERE packed = 0
        ORDER BY tid DESC
        OFFSET :skip ROWS FETCH NEXT :n ROWS ONLY"""
    OBJECT_HISTORY = """
        SELECT o.tid, o.state_size, t.username, t.description, t.extension
        FROM object_state o
        JOIN transaction_log t ON t.tid = o.tid
        WHERE o.zoid = :oid
        ORDER BY o.tid DESC
        FETCH FIRST :n ROWS ONLY"""
    UNDOABLE_RECORDS = """
        SELECT o.zoid, c.tid,
            (SELECT MAX(p.tid) FROM object_state p
             WHERE p.zoid = o.zoid AND p.tid < o.tid)
        FROM object_state o
        JOIN transaction_log t ON t.tid = o.tid
        JOIN current_object c ON c.zoid = o.zoid
        WHERE o.tid = :tid AND t.packed = 0
        ORDER BY o.ord, o.zoid"""
    TRANSACTIONS = """
        SELECT tid, CASE WHEN packed = 1 THEN 'p' ELSE ' ' END,
            username, description, extension
        FROM transaction_log
        WHERE tid >= :start_tid AND tid <= :stop_tid
        ORDER BY tid
        FETCH FIRST :n ROWS ONLY"""
    RECORDS = """
        SELECT zoid, state, data_txn, ord FROM (
            SELECT zoid, tid, state, data_txn, ord FROM object_state
            UNION ALL
            SELECT zoid, tid, state, data_txn, ord FROM superseded_state
        ) r
        WHERE r.tid = :tid
        ORDER BY ord, zoid"""


class HistoryFreeHistory(_OracleHistory):

    OBJECT_HISTORY = """
        SELECT tid, state_size, NULL, NULL, NULL FROM object_state
        WHERE zoid = :oid AND state IS NOT NULL
        FETCH FIRST :n ROWS ONLY"""
    TRANSACTIONS = """
        SELECT tid, ' ', NULL, NULL, NULL FROM (
            SELECT DISTINCT tid FROM object_state
            WHERE tid >= :start_tid AND tid <= :stop_tid)
        ORDER BY tid
        FETCH FIRST :n ROWS ONLY"""
    RECORDS = """
        SELECT zoid, state, 0, 0 FROM object_state
        WHERE tid = :tid
        ORDER BY zoid"""
