"""Reading and writing object states in Oracle (the object-mover role).

Staged rows go to the global temporary table ``temp_store`` with array
binds (``executemany``).  The state column is bound as LONG RAW, which
carries any size to a BLOB column in one bind (a RAW bind stops at 2000
or 32767 bytes, and a BLOB bind makes a temporary LOB per row).  BLOB
columns are fetched as bytes (the drivers' output type handler, see
drivers.py), so a load is one round trip.

The rows of new objects (stored with serial 0) move with a plain INSERT,
not MERGE: the vote locked every staged oid's row and compared the tid of
any that existed with the serial, so a row still expecting 0 had none; only
an explicit oid stored concurrently could have made one since, and the
INSERT then fails on the key (a LockConflictError, retried) rather than
overwriting the other's.
"""
from relstorage.adapters.objects import ObjectMover

from .binds import in_binds


class _OracleMover(ObjectMover):

    IN_BATCH = 500
    CLEAR_TEMP = 'DELETE FROM temp_store'
    # The LONG RAW bind last: a bind after one may not be expanded
    # (ORA-24816).
    UPLOAD_TEMP = """
        INSERT INTO temp_store
            (zoid, prev_tid, state_size, data_txn, ord, state)
        VALUES (:zoid, :prev_tid, :state_size, :data_txn, :ord, :state)"""
    UNSTAGE = 'DELETE FROM temp_store WHERE zoid = :zoid'
    REPLACE_TEMP = """
        UPDATE temp_store SET prev_tid = :prev_tid, state_size = :state_size,
            data_txn = 0, state = :state
        WHERE zoid = :zoid"""
    LOAD_TEMP = """
        SELECT prev_tid, state, data_txn FROM temp_store WHERE zoid = :zoid"""

    def __init__(self, connmanager):
        self.connmanager = connmanager

    def _in_list(self, oids):
        return in_binds(oids)

    def clear_temp(self, cursor):
        # ON COMMIT DELETE ROWS: a commit or rollback emptied it already.
        pass

    def _state_type(self, cursor, position):
        """Bind the state parameter (at ``position``) as LONG RAW (see the
        module docstring)."""
        sizes = [None] * (position + 1)
        sizes[position] = self.connmanager.driver.LONG_BINARY
        cursor.setinputsizes(*sizes)

    def upload_temp(self, cursor, rows, replace=()):
        if replace:
            cursor.executemany(self.UNSTAGE, [(oid,) for oid in replace])
        rows = [(oid, prev_tid, 0 if state is None else len(state),
                 data_txn, ord_, state)
                for oid, prev_tid, state, data_txn, ord_ in rows]
        if rows:
            self._state_type(cursor, 5)
            cursor.executemany(self.UPLOAD_TEMP, rows)

    def replace_temp(self, cursor, oid, prev_tid, state):
        self._state_type(cursor, 2)
        cursor.execute(self.REPLACE_TEMP, (prev_tid, len(state), state, oid))

    def store_superseded(self, cursor, tid, rows):
        if self.STORE_SUPERSEDED is None:
            return
        self._state_type(cursor, 5)
        cursor.executemany(self.STORE_SUPERSEDED, [
            (oid, tid, 0 if state is None else len(state), data_txn, ord_,
             state)
            for oid, state, data_txn, ord_ in rows])


class HistoryPreservingMover(_OracleMover):

    LOAD_CURRENT = """
        SELECT o.state, o.tid
        FROM current_object c
        JOIN object_state o ON o.zoid = c.zoid AND o.tid = c.tid
        WHERE c.zoid = :oid"""
    LOAD_CURRENTS = """
        SELECT o.zoid, o.state, o.tid
        FROM current_object c
        JOIN object_state o ON o.zoid = c.zoid AND o.tid = c.tid
        WHERE c.zoid IN ({in_list})"""
    LOAD_REVISION = """
        SELECT state FROM object_state WHERE zoid = :oid AND tid = :tid"""
    LOAD_BEFORE = """
        SELECT state, tid FROM object_state
        WHERE zoid = :oid AND tid < :tid
        ORDER BY tid DESC
        FETCH FIRST 1 ROWS ONLY"""
    NEXT_REVISION = """
        SELECT tid FROM object_state
        WHERE zoid = :oid AND tid > :tid
        ORDER BY tid
        FETCH FIRST 1 ROWS ONLY"""
    EXISTS = """
        SELECT 1 FROM object_state WHERE zoid = :oid
        FETCH FIRST 1 ROWS ONLY"""
    CURRENT_TIDS = """
        SELECT zoid, tid FROM current_object WHERE zoid IN ({in_list})"""
    DETECT_CONFLICTS = """
        SELECT t.zoid, COALESCE(c.tid, 0), t.prev_tid, t.state
        FROM temp_store t
        LEFT JOIN current_object c ON c.zoid = t.zoid
        WHERE t.prev_tid IS NOT NULL AND t.prev_tid <> COALESCE(c.tid, 0)"""
    MOVE_FROM_TEMP = (
        """INSERT INTO object_state
               (zoid, tid, state, state_size, data_txn, ord)
           SELECT zoid, :tid, state, state_size, data_txn, ord
           FROM temp_store""",
        # New objects without MERGE (see the module docstring).
        """INSERT INTO current_object (zoid, tid)
           SELECT zoid, :tid FROM temp_store WHERE prev_tid = 0""",
        """MERGE INTO current_object c
           USING (SELECT zoid, :tid AS tid FROM temp_store
                  WHERE prev_tid IS NULL OR prev_tid <> 0) t
           ON (c.zoid = t.zoid)
           WHEN MATCHED THEN UPDATE SET c.tid = t.tid
           WHEN NOT MATCHED THEN INSERT (zoid, tid) VALUES (t.zoid, t.tid)""",
    )
    STORE_SUPERSEDED = """
        INSERT INTO superseded_state
            (zoid, tid, state_size, data_txn, ord, state)
        VALUES (:zoid, :tid, :state_size, :data_txn, :ord, :state)"""
    OBJECT_COUNT = """
        SELECT COUNT(*)
        FROM current_object c
        JOIN object_state o ON o.zoid = c.zoid AND o.tid = c.tid
        WHERE o.state IS NOT NULL"""
    ITER_CURRENT = """
        SELECT o.zoid, o.tid, o.state
        FROM current_object c
        JOIN object_state o ON o.zoid = c.zoid AND o.tid = c.tid
        WHERE c.zoid >= :start_oid AND o.state IS NOT NULL
        ORDER BY c.zoid
        FETCH FIRST :n ROWS ONLY"""


class HistoryFreeMover(_OracleMover):

    LOAD_CURRENT = 'SELECT state, tid FROM object_state WHERE zoid = :oid'
    LOAD_CURRENTS = """
        SELECT zoid, state, tid FROM object_state WHERE zoid IN ({in_list})"""
    LOAD_REVISION = """
        SELECT state FROM object_state WHERE zoid = :oid AND tid = :tid"""
    LOAD_BEFORE = """
        SELECT state, tid FROM object_state WHERE zoid = :oid AND tid < :tid"""
    NEXT_REVISION = """
        SELECT tid FROM object_state WHERE zoid = :oid AND tid > :tid"""
    EXISTS = 'SELECT 1 FROM object_state WHERE zoid = :oid'
    CURRENT_TIDS = """
        SELECT zoid, tid FROM object_state WHERE zoid IN ({in_list})"""
    DETECT_CONFLICTS = """
        SELECT t.zoid, COALESCE(c.tid, 0), t.prev_tid, t.state
        FROM temp_store t
        LEFT JOIN object_state c ON c.zoid = t.zoid
        WHERE t.prev_tid IS NOT NULL AND t.prev_tid <> COALESCE(c.tid, 0)"""
    MOVE_FROM_TEMP = (
        # New objects without MERGE (see the module docstring).
        """INSERT INTO object_state (zoid, tid, state, state_size)
           SELECT zoid, CASE WHEN data_txn > 0 THEN data_txn ELSE :tid END,
               state, state_size
           FROM temp_store
           WHERE prev_tid = 0""",
        """MERGE INTO object_state o
           USING (SELECT zoid,
                      CASE WHEN data_txn > 0 THEN data_txn ELSE :tid END
                          AS tid,
                      state, state_size
                  FROM temp_store
                  WHERE prev_tid IS NULL OR prev_tid <> 0) t
           ON (o.zoid = t.zoid)
           WHEN MATCHED THEN UPDATE SET
               o.tid = t.tid, o.state = t.state, o.state_size = t.state_size
           WHEN NOT MATCHED THEN INSERT (zoid, tid, state, state_size)
               VALUES (t.zoid, t.tid, t.state, t.state_size)""",
    )
    OBJECT_COUNT = 'SELECT COUNT(*) FROM object_state WHERE state IS NOT NULL'
    ITER_CURRENT = """
        SELECT zoid, tid, state FROM object_state
        WHERE zoid >= :start_oid AND state IS NOT NULL
        ORDER BY zoid
        FETCH FIRST :n ROWS ONLY"""
