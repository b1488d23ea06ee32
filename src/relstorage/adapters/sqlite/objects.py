"""Reading and writing object states in SQLite (the object-mover role)."""
from relstorage.adapters.objects import ObjectMover


class _SQLiteMover(ObjectMover):
    PARAM = '?'
    CLEAR_TEMP = 'DELETE FROM temp_store'
    UPLOAD_TEMP = """
        INSERT OR REPLACE INTO temp_store
            (zoid, prev_tid, state, state_size, data_txn, ord)
        VALUES (?, ?, ?, ?, ?, ?)"""
    REPLACE_TEMP = """
        UPDATE temp_store SET prev_tid = ?, state = ?, state_size = ?,
            data_txn = 0
        WHERE zoid = ?"""
    LOAD_TEMP = (
        'SELECT prev_tid, state, data_txn FROM temp_store WHERE zoid = ?')


class HistoryPreservingMover(_SQLiteMover):

    STORE_SUPERSEDED = """
        INSERT INTO superseded_state
            (zoid, tid, state, state_size, data_txn, ord)
        VALUES (?, ?, ?, ?, ?, ?)"""

    LOAD_CURRENT = """
        SELECT o.state, o.tid
        FROM current_object c
        JOIN object_state o ON o.zoid = c.zoid AND o.tid = c.tid
        WHERE c.zoid = ?"""
    LOAD_CURRENTS = """
        SELECT o.zoid, o.state, o.tid
        FROM current_object c
        JOIN object_state o ON o.zoid = c.zoid AND o.tid = c.tid
        WHERE c.zoid IN ({in_list})"""
    LOAD_REVISION = 'SELECT state FROM object_state WHERE zoid = ? AND tid = ?'
    LOAD_REVISIONS = """
        SELECT zoid, tid, state FROM object_state
        WHERE zoid IN ({oids}) AND tid IN ({tids})"""
    LOAD_BEFORE = """
        SELECT state, tid FROM object_state
        WHERE zoid = ? AND tid < ?
        ORDER BY tid DESC LIMIT 1"""
    NEXT_REVISION = """
        SELECT tid FROM object_state
        WHERE zoid = ? AND tid > ?
        ORDER BY tid LIMIT 1"""
    EXISTS = 'SELECT 1 FROM object_state WHERE zoid = ? LIMIT 1'
    CURRENT_TIDS = (
        'SELECT zoid, tid FROM current_object WHERE zoid IN ({in_list})')
    DETECT_CONFLICTS = """
        SELECT t.zoid, COALESCE(c.tid, 0), t.prev_tid, t.state
        FROM temp_store t
        LEFT JOIN current_object c ON c.zoid = t.zoid
        WHERE t.prev_tid IS NOT NULL AND t.prev_tid <> COALESCE(c.tid, 0)"""
    MOVE_FROM_TEMP = (
        """INSERT INTO object_state
               (zoid, tid, state, state_size, data_txn, ord)
           SELECT zoid, ?1, state, state_size, data_txn, ord
           FROM temp_store""",
        # "WHERE true" tells SQLite's parser that ON CONFLICT belongs to
        # the INSERT, not to a join in the SELECT.
        """INSERT INTO current_object (zoid, tid)
           SELECT zoid, ?1 FROM temp_store WHERE true
           ON CONFLICT (zoid) DO UPDATE SET tid = excluded.tid""",
    )
    OBJECT_COUNT = """
        SELECT COUNT(*)
        FROM current_object c
        JOIN object_state o ON o.zoid = c.zoid AND o.tid = c.tid
        WHERE o.state IS NOT NULL"""
    ITER_CURRENT = """
        SELECT o.zoid, o.tid, o.state
        FROM current_object c
        JOIN object_state o ON o.zoid = c.zoid AND o.tid = c.tid
        WHERE c.zoid >= ? AND o.state IS NOT NULL
        ORDER BY c.zoid LIMIT ?"""


class HistoryFreeMover(_SQLiteMover):

    LOAD_CURRENT = 'SELECT state, tid FROM object_state WHERE zoid = ?'
    LOAD_CURRENTS = (
        'SELECT zoid, state, tid FROM object_state WHERE zoid IN ({in_list})')
    LOAD_REVISION = 'SELECT state FROM object_state WHERE zoid = ? AND tid = ?'
    LOAD_BEFORE = 'SELECT state, tid FROM object_state WHERE zoid = ? AND tid < ?'
    NEXT_REVISION = 'SELECT tid FROM object_state WHERE zoid = ? AND tid > ?'
    EXISTS = 'SELECT 1 FROM object_state WHERE zoid = ?'
    CURRENT_TIDS = (
        'SELECT zoid, tid FROM object_state WHERE zoid IN ({in_list})')
    DETECT_CONFLICTS = """
        SELECT t.zoid, COALESCE(c.tid, 0), t.prev_tid, t.state
        FROM temp_store t
        LEFT JOIN object_state c ON c.zoid = t.zoid
        WHERE t.prev_tid IS NOT NULL AND t.prev_tid <> COALESCE(c.tid, 0)"""
    MOVE_FROM_TEMP = (
        """INSERT INTO object_state (zoid, tid, state, state_size)
           SELECT zoid, CASE WHEN data_txn > 0 THEN data_txn ELSE ?1 END,
               state, state_size
           FROM temp_store WHERE true
           ON CONFLICT (zoid) DO UPDATE SET
               tid = excluded.tid,
               state = excluded.state,
               state_size = excluded.state_size""",
    )
    OBJECT_COUNT = 'SELECT COUNT(*) FROM object_state WHERE state IS NOT NULL'
    ITER_CURRENT = """
        SELECT zoid, tid, state FROM object_state
        WHERE zoid >= ? AND state IS NOT NULL
        ORDER BY zoid LIMIT ?"""
