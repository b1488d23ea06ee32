"""Reading and writing object states in MySQL (the object-mover role).

Staged rows go in multi-row REPLACE statements, as few as
max_allowed_packet allows.  A state larger than max_allowed_packet can
never reach the server, so ``check_state_size`` refuses it at store(),
naming the setting.

The rows of new objects (stored with serial 0) move with a plain INSERT,
not REPLACE or an upsert: the vote locked every staged oid's row and
compared the tid of any that existed with the serial, so a row still
expecting 0 had none; only an explicit oid stored concurrently could have
made one since, and the INSERT then fails on the key (a
LockConflictError, retried) rather than overwriting the other's.
"""
from ZODB.POSException import StorageError

from relstorage.adapters.objects import ObjectMover

def in_list(oids):
    """The text inside ``IN (...)`` for ``oids``, which must be ints.

    Written out rather than as parameters: MySQL drivers put parameters
    into the statement's text on the client anyway, escaping each value
    (mysqlclient: 1.3 ms for a statement with 1,000 oids, 0.66 ms with
    this text).  ``str`` of an int is only digits and a sign."""
    for oid in oids:
        if type(oid) is not int:
            raise TypeError(f'oid {oid!r} is not an int')
    return ','.join(map(str, oids))


def _literal(state):
    """A state as a hexadecimal literal (only digits: nothing to escape),
    or NULL."""
    return 'NULL' if state is None else "X'%s'" % state.hex()


#: Room left in a packet for the statement around one state.
_PACKET_OVERHEAD = 1024


class _MySQLMover(ObjectMover):
    PARAM = '%s'
    UPLOAD_TEMP = """
        REPLACE INTO temp_store
            (zoid, prev_tid, state, state_size, data_txn, ord)
        VALUES (%s, %s, %s, %s, %s, %s)"""
    REPLACE_TEMP = """
        UPDATE temp_store SET prev_tid = %s, state = %s, state_size = %s,
            data_txn = 0
        WHERE zoid = %s"""
    LOAD_TEMP = 'SELECT prev_tid, state, data_txn FROM temp_store WHERE zoid = %s'

    #: States up to this size travel as hexadecimal literals (below).
    HEX_MAX = 1 << 16

    def __init__(self, connmanager):
        self.connmanager = connmanager

    def _in_list(self, oids):
        return in_list(oids), None

    def clear_temp(self, cursor):
        # The connection manager's begin_store sends CLEAR_TEMP_STORE with
        # the statements that start the commit's transaction: one round
        # trip.
        pass

    def upload_temp(self, cursor, rows, replace=()):
        # The drivers bind parameters on the client anyway: they escape
        # each value into the statement text.  Writing the states as
        # hexadecimal literals ourselves (only digits, so nothing to
        # escape; ints as decimal) is three times faster for the server to
        # parse and for us to build.  Measured on MariaDB 10.11 with
        # mysqlclient, 1000 rows of 250 bytes: executemany 21-23 ms, one
        # statement of escaped strings 14 ms, of hex literals 7 ms.  Large
        # states (over HEX_MAX, doubled by hex) go through the driver.
        # REPLACE also replaces rows of oids staged before (``replace``).
        limit = (self.connmanager.max_allowed_packet or 1 << 20) // 2
        head = self.UPLOAD_TEMP.split('VALUES')[0] + 'VALUES '
        values, size, large = [], 0, []
        for oid, prev_tid, state, data_txn, ord_ in rows:
            if state is not None and len(state) > self.HEX_MAX:
                large.append((oid, prev_tid, state, len(state), data_txn,
                              ord_))
                continue
            value = '(%d,%s,%s,%d,%d,%d)' % (
                oid, 'NULL' if prev_tid is None else '%d' % prev_tid,
                _literal(state),
                0 if state is None else len(state), data_txn, ord_)
            if values and size + len(value) > limit:
                cursor.execute(head + ','.join(values))
                values, size = [], 0
            values.append(value)
            size += len(value) + 1
        if values:
            cursor.execute(head + ','.join(values))
        for row in large:
            cursor.execute(self.UPLOAD_TEMP, row)

    def move_rows(self, rows):
        """The statements that publish a small commit's rows ``[(oid,
        prev_tid, state, data_txn)]`` (store order) without the staging
        table: text for the finish batch, the tid as @relstorage_tid, the
        states as hexadecimal literals (the rows fit inline_limit, far
        below HEX_MAX)."""
        new, old = [], []
        for ord_, (oid, prev_tid, state, data_txn) in enumerate(rows):
            (new if prev_tid == 0 else old).append((
                oid, _literal(state),
                0 if state is None else len(state), data_txn, ord_))
        return self._move_rows(new, old)

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
    LOAD_REVISIONS = """
        SELECT zoid, tid, state FROM object_state
        WHERE zoid IN ({oids}) AND tid IN ({tids})"""
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
        # New objects without the upsert (see the module docstring).
        """INSERT INTO current_object (zoid, tid)
           SELECT zoid, %s FROM temp_store WHERE prev_tid = 0""",
        # VALUES(col) works on MySQL 8 and MariaDB alike (MySQL's newer
        # "AS new" alias is a syntax error on MariaDB).
        """INSERT INTO current_object (zoid, tid)
           SELECT zoid, %s FROM temp_store
           WHERE prev_tid IS NULL OR prev_tid <> 0
           ON DUPLICATE KEY UPDATE tid = VALUES(tid)""",
    )
    def _move_rows(self, new, old):
        if not new and not old:
            return []
        statements = ['INSERT INTO object_state '
                      '(zoid, tid, state, state_size, data_txn, ord) VALUES '
                      + ','.join('(%d,@relstorage_tid,%s,%d,%d,%d)' % row
                                 for row in new + old)]
        if new:
            statements.append(
                'INSERT INTO current_object (zoid, tid) VALUES '
                + ','.join('(%d,@relstorage_tid)' % row[0] for row in new))
        if old:
            statements.append(
                'INSERT INTO current_object (zoid, tid) VALUES '
                + ','.join('(%d,@relstorage_tid)' % row[0] for row in old)
                + ' ON DUPLICATE KEY UPDATE tid = VALUES(tid)')
        return statements

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
    # REPLACE rather than INSERT ... ON DUPLICATE KEY UPDATE: every column
    # is replaced anyway, and InnoDB does it with less work (1000 rows of
    # 250 bytes on MariaDB 10.11: 7.7 ms against 9.3 ms).
    MOVE_FROM_TEMP = (
        # New objects without REPLACE (see the module docstring).
        """INSERT INTO object_state (zoid, tid, state, state_size)
           SELECT zoid, IF(data_txn > 0, data_txn, %s), state, state_size
           FROM temp_store
           WHERE prev_tid = 0""",
        """REPLACE INTO object_state (zoid, tid, state, state_size)
           SELECT zoid, IF(data_txn > 0, data_txn, %s), state, state_size
           FROM temp_store
           WHERE prev_tid IS NULL OR prev_tid <> 0""",
    )
    OBJECT_COUNT = 'SELECT COUNT(*) FROM object_state WHERE state IS NOT NULL'
    ITER_CURRENT = """
        SELECT zoid, tid, state FROM object_state
        WHERE zoid >= %s AND state IS NOT NULL
        ORDER BY zoid LIMIT %s"""

    def _move_rows(self, new, old):
        statements = []
        for verb, rows in (('INSERT', new), ('REPLACE', old)):
            if rows:
                statements.append(
                    f'{verb} INTO object_state (zoid, tid, state, state_size)'
                    ' VALUES ' + ','.join(
                        '(%d,%s,%s,%d)' % (
                            oid, own_tid or '@relstorage_tid', state, size)
                        for oid, state, size, own_tid, _ in rows))
        return statements
