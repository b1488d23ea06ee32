"""Reading and writing object states in PostgreSQL (the object-mover role).

Staged rows reach the server with COPY in binary format (one round trip
for the whole batch); lists of oids travel as one array parameter
(see ``oid_array``).

The move statements insert the rows of new objects (stored with serial 0)
without ON CONFLICT: at vote every staged oid's row was locked and, if it
existed, its tid compared with the serial, so a row still expecting 0 had
none; only an explicit oid stored concurrently could have made one since,
and the insert then fails on the key (a LockConflictError, retried) rather
than overwriting the other's.  An upsert's speculative insertion costs
more: 100 new rows of 270 bytes took 1.05-1.09 ms as an upsert, 0.90-0.91
ms as an INSERT.
"""
from relstorage.adapters.objects import ObjectMover
from relstorage.adapters.objects import _bytes

from .connection import TEMP_STORE_IN_TRANSACTION
from .drivers import Prepared
from .drivers import oid_array

TEMP_COLUMNS = ('zoid', 'prev_tid', 'state', 'state_size', 'data_txn', 'ord')


class _PostgreSQLMover(ObjectMover):
    PARAM = '%s'
    DELETE_TEMP = 'DELETE FROM temp_store WHERE zoid = ANY(%s::bigint[])'
    REPLACE_TEMP = """
        UPDATE temp_store SET prev_tid = %s, state = %s, state_size = %s,
            data_txn = 0
        WHERE zoid = %s"""
    LOAD_TEMP = 'SELECT prev_tid, state, data_txn FROM temp_store WHERE zoid = %s'
    #: Behind a transaction pooler: the staging table is the transaction's
    #: own, made by its first upload (the other statements on temp_store
    #: run only after one).
    staging_per_transaction = False

    def __init__(self, driver):
        self.driver = driver
        self._load_current = Prepared(
            'rs_load_current', ['bigint'], self.LOAD_CURRENT)
        self._load_currents = Prepared(
            'rs_load_currents', ['bigint[]'], self.LOAD_CURRENTS)
        self._load_revision = Prepared(
            'rs_load_revision', ['bigint', 'bigint'], self.LOAD_REVISION)

    def prepared(self):
        """The statements to prepare in each session."""
        return [self._load_current, self._load_currents, self._load_revision]

    def load_current(self, cursor, oid):
        self.driver.execute_prepared(cursor, self._load_current, (oid,))
        row = cursor.fetchone()
        if row is None:
            return None
        return _bytes(row[0]), row[1]

    def load_revision(self, cursor, oid, tid):
        self.driver.execute_prepared(cursor, self._load_revision, (oid, tid))
        row = cursor.fetchone()
        return None if row is None else _bytes(row[0])

    def clear_temp(self, cursor):
        # temp_store is ON COMMIT DELETE ROWS, and a rollback removes what
        # an aborted commit staged: it is empty at every tpc_begin.
        pass

    def empty_temp(self, cursor):
        if self.staging_per_transaction:
            # The transaction's own table, if an upload made one (its
            # schema named: no other table of that name may go).
            cursor.execute('DROP TABLE IF EXISTS pg_temp.temp_store')
            return
        # TRUNCATE (transactional here): a DELETE would leave dead rows
        # that every later statement of a long restore batch scans again
        # (each one went from about 0.1 to 0.5 ms over 800 commits).
        cursor.execute('TRUNCATE temp_store')

    def load_currents(self, cursor, oids):
        self.driver.execute_prepared(
            cursor, self._load_currents, (oid_array(oids),))
        return {oid: (_bytes(state), tid)
                for oid, state, tid in cursor.fetchall()}

    def load_revisions(self, cursor, revisions):
        wanted = set(revisions)
        cursor.execute(self.LOAD_REVISIONS, (
            oid_array(sorted({oid for oid, _ in wanted})),
            oid_array(sorted({tid for _, tid in wanted}))))
        return {(oid, tid): _bytes(state)
                for oid, tid, state in cursor.fetchall()
                if (oid, tid) in wanted}

    def current_tids(self, cursor, oids):
        cursor.execute(self.CURRENT_TIDS, (oid_array(oids),))
        return dict(cursor.fetchall())

    def upload_temp(self, cursor, rows, replace=()):
        if self.staging_per_transaction:
            cursor.execute(TEMP_STORE_IN_TRANSACTION)
        if replace:
            cursor.execute(self.DELETE_TEMP, (oid_array(replace),))
        self.driver.copy_in(cursor, 'temp_store', TEMP_COLUMNS, [
            (oid, prev_tid, state, 0 if state is None else len(state),
             data_txn, ord_)
            for oid, prev_tid, state, data_txn, ord_ in rows])


class HistoryPreservingMover(_PostgreSQLMover):

    LOAD_CURRENT = """
        SELECT o.state, o.tid
        FROM current_object c
        JOIN object_state o ON o.zoid = c.zoid AND o.tid = c.tid
        WHERE c.zoid = %s"""
    LOAD_CURRENTS = """
        SELECT o.zoid, o.state, o.tid
        FROM current_object c
        JOIN object_state o ON o.zoid = c.zoid AND o.tid = c.tid
        WHERE c.zoid = ANY(%s::bigint[])"""
    LOAD_REVISION = 'SELECT state FROM object_state WHERE zoid = %s AND tid = %s'
    LOAD_REVISIONS = """
        SELECT zoid, tid, state FROM object_state
        WHERE zoid = ANY(%s::bigint[]) AND tid = ANY(%s::bigint[])"""
    LOAD_BEFORE = """
        SELECT state, tid FROM object_state
        WHERE zoid = %s AND tid < %s
        ORDER BY tid DESC LIMIT 1"""
    NEXT_REVISION = """
        SELECT tid FROM object_state
        WHERE zoid = %s AND tid > %s
        ORDER BY tid LIMIT 1"""
    EXISTS = 'SELECT 1 FROM object_state WHERE zoid = %s LIMIT 1'
    CURRENT_TIDS = '''
        SELECT zoid, tid FROM current_object
        WHERE zoid = ANY(%s::bigint[])'''
    # A scalar sub-query per staged row is an index lookup each; a join
    # with the staging table (which has no statistics) was planned as a
    # scan of current_object.
    DETECT_CONFLICTS = """
        SELECT zoid, committed, prev_tid, state FROM (
            SELECT t.zoid, t.prev_tid, t.state,
                COALESCE((SELECT c.tid FROM current_object c
                          WHERE c.zoid = t.zoid), 0) AS committed
            FROM temp_store t
            WHERE t.prev_tid IS NOT NULL) staged
        WHERE prev_tid <> committed"""
    MOVE_STAGED = (
        """INSERT INTO object_state
               (zoid, tid, state, state_size, data_txn, ord)
           SELECT zoid, %s, state, state_size, data_txn, ord
           FROM {staged}""",
        # New objects without the upsert (see the module docstring).
        """INSERT INTO current_object (zoid, tid)
           SELECT zoid, %s FROM {staged} WHERE prev_tid = 0""",
        """INSERT INTO current_object (zoid, tid)
           SELECT zoid, %s FROM {staged} WHERE prev_tid IS DISTINCT FROM 0
           ON CONFLICT (zoid) DO UPDATE SET tid = excluded.tid""",
    )
    MOVE_FROM_TEMP = tuple(s.format(staged='temp_store') for s in MOVE_STAGED)
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


class HistoryFreeMover(_PostgreSQLMover):

    LOAD_CURRENT = 'SELECT state, tid FROM object_state WHERE zoid = %s'
    LOAD_CURRENTS = (
        'SELECT zoid, state, tid FROM object_state '
        'WHERE zoid = ANY(%s::bigint[])')
    LOAD_REVISION = 'SELECT state FROM object_state WHERE zoid = %s AND tid = %s'
    LOAD_BEFORE = (
        'SELECT state, tid FROM object_state WHERE zoid = %s AND tid < %s')
    NEXT_REVISION = 'SELECT tid FROM object_state WHERE zoid = %s AND tid > %s'
    EXISTS = 'SELECT 1 FROM object_state WHERE zoid = %s'
    CURRENT_TIDS = '''
        SELECT zoid, tid FROM object_state
        WHERE zoid = ANY(%s::bigint[])'''
    DETECT_CONFLICTS = """
        SELECT zoid, committed, prev_tid, state FROM (
            SELECT t.zoid, t.prev_tid, t.state,
                COALESCE((SELECT c.tid FROM object_state c
                          WHERE c.zoid = t.zoid), 0) AS committed
            FROM temp_store t
            WHERE t.prev_tid IS NOT NULL) staged
        WHERE prev_tid <> committed"""
    MOVE_STAGED = (
        # New objects without the upsert (see the module docstring).
        """INSERT INTO object_state (zoid, tid, state, state_size)
           SELECT zoid, CASE WHEN data_txn > 0 THEN data_txn ELSE %s END,
               state, state_size
           FROM {staged}
           WHERE prev_tid = 0""",
        """INSERT INTO object_state (zoid, tid, state, state_size)
           SELECT zoid, CASE WHEN data_txn > 0 THEN data_txn ELSE %s END,
               state, state_size
           FROM {staged}
           WHERE prev_tid IS DISTINCT FROM 0
           ON CONFLICT (zoid) DO UPDATE SET
               tid = excluded.tid,
               state = excluded.state,
               state_size = excluded.state_size""",
    )
    MOVE_FROM_TEMP = tuple(s.format(staged='temp_store') for s in MOVE_STAGED)
    OBJECT_COUNT = 'SELECT COUNT(*) FROM object_state WHERE state IS NOT NULL'
    ITER_CURRENT = """
        SELECT zoid, tid, state FROM object_state
        WHERE zoid >= %s AND state IS NOT NULL
        ORDER BY zoid LIMIT %s"""
