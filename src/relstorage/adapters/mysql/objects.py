"""Reading and writing object states in MySQL (the object-mover role).

Staged rows go in multi-row INSERT statements (both drivers turn
``executemany`` of an INSERT ... VALUES into as few statements as
max_allowed_packet allows).  A state larger than max_allowed_packet can
never reach the server, so ``check_state_size`` refuses it at store(),
naming the setting.
"""
from ZODB.POSException import StorageError

from relstorage.adapters.objects import ObjectMover

#: Room left in a packet for the statement around one state.
_PACKET_OVERHEAD = 1024


class _MySQLMover(ObjectMover):
    PARAM = '%s'
    CLEAR_TEMP = 'DELETE FROM temp_store'
    UPLOAD_TEMP = """
        REPLACE INTO temp_store
            (zoid, prev_tid, state, state_size, data_txn, ord)
        VALUES (%s, %s, %s, %s, %s, %s)"""
    REPLACE_TEMP = """
        UPDATE temp_store SET prev_tid = %s, state = %s, state_size = %s,
            data_txn = 0
        WHERE zoid = %s"""
    LOAD_TEMP = 'SELECT prev_tid, state, data_txn FROM temp_store WHERE zoid = %s'

    def __init__(self, connmanager):
        self.connmanager = connmanager

    def check_state_size(self, oid, size):
        limit = self.connmanager.max_allowed_packet
        if limit and size > limit - _PACKET_OVERHEAD:
            raise StorageError(
                f'the state of oid {oid!r} is {size} bytes; the server\'s '
                f'max_allowed_packet ({limit} bytes) cannot carry it: raise '
                f'max_allowed_packet on the server')


class HistoryPreservingMover(_MySQLMover):

    LOAD_CURRENT = """
        SELECT o.state, o.tid
        FROM current_object c
        JOIN object_state o ON o.zoid = c.zoid AND o.tid = c.tid
        WHERE c.zoid = %s"""
    LOAD_CURRENTS = """
        SELECT o.zoid, o.state, o.tid
        FROM current_object c
        JOIN object_state o ON o.zoid = c.zoid AND o.tid = c.tid
        WHERE c.zoid IN ({in_list})"""
    LOAD_REVISION = 'SELECT state FROM object_state WHERE zoid = %s AND tid = %s'
    LOAD_BEFORE = """
        SELECT state, tid FROM object_state
        WHERE zoid = %s AND tid < %s
        ORDER BY tid DESC LIMIT 1"""
    NEXT_REVISION = """
        SELECT tid FROM object_state
        WHERE zoid = %s AND tid > %s
        ORDER BY tid LIMIT 1"""
    EXISTS = 'SELECT 1 FROM object_state WHERE zoid = %s LIMIT 1'
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
           SELECT zoid, %s, state, state_size, data_txn, ord
           FROM temp_store""",
        # VALUES(col) works on MySQL 8 and MariaDB alike (MySQL's newer
        # "AS new" alias is a syntax error on MariaDB).
        """INSERT INTO current_object (zoid, tid)
           SELECT zoid, %s FROM temp_store
           ON DUPLICATE KEY UPDATE tid = VALUES(tid)""",
    )
    STORE_SUPERSEDED = """
        INSERT INTO superseded_state
            (zoid, tid, state, state_size, data_txn, ord)
        VALUES (%s, %s, %s, %s, %s, %s)"""
    OBJECT_COUNT = """
        SELECT COUNT(*)
        FROM current_object c
        JOIN object_state o ON o.zoid = c.zoid AND o.tid = c.tid
        WHERE o.state IS NOT NULL"""
    ITER_CURRENT = """
        SELECT o.zoid, o.tid, o.state
        FROM current_object c
        JOIN object_state o ON o.zoid = c.zoid AND o.tid = c.tid
        WHERE c.zoid >= %s AND o.state IS NOT NULL
        ORDER BY c.zoid LIMIT %s"""


class HistoryFreeMover(_MySQLMover):

    LOAD_CURRENT = 'SELECT state, tid FROM object_state WHERE zoid = %s'
    LOAD_CURRENTS = (
        'SELECT zoid, state, tid FROM object_state WHERE zoid IN ({in_list})')
    LOAD_REVISION = 'SELECT state FROM object_state WHERE zoid = %s AND tid = %s'
    LOAD_BEFORE = (
        'SELECT state, tid FROM object_state WHERE zoid = %s AND tid < %s')
    NEXT_REVISION = 'SELECT tid FROM object_state WHERE zoid = %s AND tid > %s'
    EXISTS = 'SELECT 1 FROM object_state WHERE zoid = %s'
    CURRENT_TIDS = (
        'SELECT zoid, tid FROM object_state WHERE zoid IN ({in_list})')
    DETECT_CONFLICTS = """
        SELECT t.zoid, COALESCE(c.tid, 0), t.prev_tid, t.state
        FROM temp_store t
        LEFT JOIN object_state c ON c.zoid = t.zoid
        WHERE t.prev_tid IS NOT NULL AND t.prev_tid <> COALESCE(c.tid, 0)"""
    MOVE_FROM_TEMP = (
        """INSERT INTO object_state (zoid, tid, state, state_size)
           SELECT zoid, %s, state, state_size FROM temp_store
           ON DUPLICATE KEY UPDATE
               tid = VALUES(tid),
               state = VALUES(state),
               state_size = VALUES(state_size)""",
    )
    OBJECT_COUNT = 'SELECT COUNT(*) FROM object_state WHERE state IS NOT NULL'
    ITER_CURRENT = """
        SELECT zoid, tid, state FROM object_state
        WHERE zoid >= %s AND state IS NOT NULL
        ORDER BY zoid LIMIT %s"""
