"""Undo, history and iteration queries for MySQL (the history role)."""
from relstorage.adapters.history import History


class HistoryPreservingHistory(History):

    UNDO_LOG = """
        SELECT tid, username, description, extension
        FROM transaction_log
        WHERE NOT packed
        ORDER BY tid DESC
        LIMIT %s OFFSET %s"""
    OBJECT_HISTORY = """
        SELECT o.tid, o.state_size, t.username, t.description, t.extension
        FROM object_state o
        JOIN transaction_log t ON t.tid = o.tid
        WHERE o.zoid = %s
        ORDER BY o.tid DESC
        LIMIT %s"""
    UNDOABLE_RECORDS = """
        SELECT o.zoid, c.tid,
            (SELECT MAX(p.tid) FROM object_state p
             WHERE p.zoid = o.zoid AND p.tid < o.tid)
        FROM object_state o
        JOIN transaction_log t ON t.tid = o.tid
        JOIN current_object c ON c.zoid = o.zoid
        WHERE o.tid = %s AND NOT t.packed
        ORDER BY o.ord, o.zoid"""
    TRANSACTIONS = """
        SELECT tid, CASE WHEN packed THEN 'p' ELSE ' ' END,
            username, description, extension
        FROM transaction_log
        WHERE tid >= %s AND tid <= %s
        ORDER BY tid
        LIMIT %s"""
    # MariaDB and MySQL 8 push the condition on tid into both branches.
    RECORDS = """
        SELECT zoid, state, data_txn, ord FROM (
            SELECT zoid, tid, state, data_txn, ord FROM object_state
            UNION ALL
            SELECT zoid, tid, state, data_txn, ord FROM superseded_state
        ) r
        WHERE r.tid = %s
        ORDER BY ord, zoid"""


class HistoryFreeHistory(History):

    OBJECT_HISTORY = """
        SELECT tid, state_size, X'', X'', NULL FROM object_state
        WHERE zoid = %s AND state IS NOT NULL
        LIMIT %s"""
    TRANSACTIONS = """
        SELECT DISTINCT tid, ' ', X'', X'', NULL FROM object_state
        WHERE tid >= %s AND tid <= %s
        ORDER BY tid
        LIMIT %s"""
    RECORDS = """
        SELECT zoid, state, 0, 0 FROM object_state
        WHERE tid = %s
        ORDER BY zoid"""
