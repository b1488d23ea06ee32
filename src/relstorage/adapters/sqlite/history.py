"""Undo, history and iteration queries for SQLite (the history role)."""
from relstorage.adapters.history import History


class HistoryPreservingHistory(History):

    UNDO_LOG = """
        SELECT tid, username, description, extension
        FROM transaction_log
        WHERE packed = 0
        ORDER BY tid DESC
        LIMIT ? OFFSET ?"""
    OBJECT_HISTORY = """
        SELECT o.tid, o.state_size, t.username, t.description, t.extension
        FROM object_state o
        JOIN transaction_log t ON t.tid = o.tid
        WHERE o.zoid = ?
        ORDER BY o.tid DESC
        LIMIT ?"""
    UNDOABLE_RECORDS = """
        SELECT o.zoid, c.tid,
            (SELECT MAX(p.tid) FROM object_state p
             WHERE p.zoid = o.zoid AND p.tid < o.tid)
        FROM object_state o
        JOIN transaction_log t ON t.tid = o.tid
        JOIN current_object c ON c.zoid = o.zoid
        WHERE o.tid = ? AND t.packed = 0
        ORDER BY o.ord, o.zoid"""
    TRANSACTIONS = """
        SELECT tid, CASE WHEN packed THEN 'p' ELSE ' ' END,
            username, description, extension
        FROM transaction_log
        WHERE tid >= ? AND tid <= ?
        ORDER BY tid
        LIMIT ?"""
    RECORDS = """
        SELECT zoid, state, data_txn, ord FROM object_state
        WHERE tid = ?1
        UNION ALL
        SELECT zoid, state, data_txn, ord FROM superseded_state
        WHERE tid = ?1
        ORDER BY 4, 1"""


class HistoryFreeHistory(History):

    OBJECT_HISTORY = """
        SELECT tid, state_size, X'', X'', NULL FROM object_state
        WHERE zoid = ? AND state IS NOT NULL
        LIMIT ?"""
    TRANSACTIONS = """
        SELECT DISTINCT tid, ' ', X'', X'', NULL FROM object_state
        WHERE tid >= ? AND tid <= ?
        ORDER BY tid
        LIMIT ?"""
    RECORDS = """
        SELECT zoid, state, 0, 0 FROM object_state
        WHERE tid = ?
        ORDER BY zoid"""
