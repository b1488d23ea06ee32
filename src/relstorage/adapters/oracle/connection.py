"""Connections to Oracle (the connection-manager role).

Oracle starts a transaction at the first statement of a session and has no
BEGIN; connections are not in autocommit mode and every transaction ends
with the driver's commit() or rollback().  A snapshot is a ``SET
TRANSACTION READ ONLY`` transaction (transaction-level read consistency:
every query sees the database as of its start); a commit runs at Oracle's
default READ COMMITTED, so that conflict checks see the latest committed
rows, and bounds every lock wait with ``FOR UPDATE WAIT n`` where n is
commit-lock-timeout in whole seconds.

Replica files are refused at start-up: Oracle clients fail over by their
connect descriptor (an ADDRESS_LIST with FAILOVER, or a RAC/Data Guard
service), which the ``dsn`` option takes as it is.
"""
import contextlib
import math

from relstorage.adapters.connection import ConnectionManager
from relstorage.adapters.connection import _first_line
from relstorage.adapters.interfaces import IConnectionManager
from relstorage.errors import CommitLockTimeoutError
from relstorage.errors import DatabaseFullError
from relstorage.errors import DisconnectedError
from relstorage.errors import LockConflictError
from ZODB.POSException import ReadConflictError
from zope.interface import implementer

from .drivers import error_code

#: "resource busy and acquire with NOWAIT specified or timeout expired",
#: "resource busy; acquire with WAIT timeout expired".
LOCK_NOT_AVAILABLE = {'ORA-00054', 'ORA-30006'}
#: Deadlock detected; cannot serialize access.
GIVE_WAY = {'ORA-00060', 'ORA-08177'}
#: Unique constraint violated.
UNIQUE_VIOLATION = 'ORA-00001'
#: Snapshot too old: the undo the read snapshot needs was overwritten.
SNAPSHOT_TOO_OLD = 'ORA-01555'
#: Out of space: unable to extend a table, index, LOB segment, temporary or
#: undo segment; tablespace quota exceeded.
OUT_OF_SPACE = {'ORA-01653', 'ORA-01654', 'ORA-01688', 'ORA-01691',
                'ORA-01652', 'ORA-30036', 'ORA-01536', 'ORA-01659'}
#: No session free: maximum sessions or processes exceeded, sessions per
#: user exceeded, the listener has no handler free.
FULL = {'ORA-00018', 'ORA-00020', 'ORA-02391', 'ORA-12516', 'ORA-12519',
        'ORA-12520'}
#: The session is gone (or the server cannot be reached): end-of-file on
#: the channel, not connected, lost contact, not logged on, session
#: killed, shutdown or startup in progress, Oracle not available, no
#: listener, timeouts of the network layer, idle time exceeded; and the
#: drivers' own words for a closed connection.
GONE = {'ORA-03113', 'ORA-03114', 'ORA-03135', 'ORA-01012', 'ORA-00028',
        'ORA-01089', 'ORA-01033', 'ORA-01034', 'ORA-01092', 'ORA-12514',
        'ORA-12541', 'ORA-12170', 'ORA-12537', 'ORA-12547', 'ORA-02396',
        'ORA-25408', 'DPY-1001', 'DPY-4011', 'DPY-6005', 'DPI-1080',
        'DPI-1010'}

#: Starts a read snapshot: the first statement of the transaction.
SNAPSHOT_BEGIN = 'SET TRANSACTION READ ONLY'


def describe_target(user, dsn):
    """Where the database is, for messages: the user and the connect
    string, never the password."""
    return f'oracle:{user}@{dsn}'


@implementer(IConnectionManager)
class OracleConnectionManager(ConnectionManager):

    def __init__(self, driver, user, password, dsn, lock_timeout):
        self.driver = driver
        self._user = user
        self._password = password
        self._dsn = dsn
        self.lock_timeout = lock_timeout
        self._description = describe_target(user, dsn)

    def describe(self):
        return self._description

    def __repr__(self):
        return f'<OracleConnectionManager {self._description}>'

    @property
    def wait_seconds(self):
        """commit-lock-timeout as ``FOR UPDATE WAIT n`` takes it: whole
        seconds, at least 1 (0 would mean NOWAIT)."""
        return max(1, math.ceil(self.lock_timeout))

    def use_replicas(self, replicas, ro_replicas):
        if replicas is not None or ro_replicas is not None:
            from relstorage.errors import ConfigurationError
            option = 'replica-conf' if replicas is not None else (
                'ro-replica-conf')
            raise ConfigurationError(
                f'{option}: the Oracle adapter takes no replica files; '
                f'give the dsn option a connect descriptor that fails over '
                f'(ADDRESS_LIST with FAILOVER=on, or a RAC or Data Guard '
                f'service)')
        super().use_replicas(None, None)

    def _connect_server(self, server, read_only):
        return self.driver.connect(self._user, self._password, self._dsn)

    def _is_full(self, error):
        return error_code(error) in FULL

    def session_id(self, conn):
        # python-oracledb knows its session's SID without a round trip.
        return getattr(conn, 'session_id', None)

    def open_load(self):
        conn = self.connect(read_only=True)
        return conn, conn.cursor()

    def open_store(self):
        # temp_store is a global temporary table of the schema: each
        # session sees its own rows, emptied at every commit.
        conn = self.connect()
        return conn, conn.cursor()

    def begin_store(self, conn, cursor):
        # Oracle begins at the first statement, READ COMMITTED; lock waits
        # are bounded in the locking statements themselves (WAIT n).
        pass

    def begin_write(self, cursor, what):
        pass

    def begin_snapshot(self, conn, cursor):
        cursor.execute(SNAPSHOT_BEGIN)

    def begin_analysis(self, conn, cursor):
        # The analysis writes its helper tables: not a READ ONLY
        # transaction.  READ COMMITTED reads without locks.
        pass

    def _in_transaction(self, conn):
        return True

    def rollback(self, conn, cursor):
        # Always: a READ ONLY snapshot must be ended before the next SET
        # TRANSACTION, whatever the driver believes is in progress.
        try:
            conn.rollback()
        except self.driver.Error:
            pass

    def commit(self, conn, cursor):
        conn.commit()

    @contextlib.contextmanager
    def translate(self, what='committing'):
        driver = self.driver
        try:
            yield
        except driver.Error as e:
            code = error_code(e)
            if code in LOCK_NOT_AVAILABLE:
                raise CommitLockTimeoutError(
                    f'{what}: waited longer than commit-lock-timeout '
                    f'({self.lock_timeout:g}s, as FOR UPDATE WAIT '
                    f'{self.wait_seconds}) for a lock another transaction '
                    f'holds') from e
            if code in GIVE_WAY:
                raise LockConflictError(
                    f'{what}: Oracle chose this transaction to give way to '
                    f'a concurrent one ({_first_line(e)})') from e
            if code == UNIQUE_VIOLATION:
                raise LockConflictError(
                    f'{what}: a concurrent transaction stored an object with '
                    f'the same oid ({_first_line(e)})') from e
            if code == SNAPSHOT_TOO_OLD:
                raise ReadConflictError(
                    f'{what}: the read snapshot is older than Oracle kept '
                    f'undo for (ORA-01555; raise UNDO_RETENTION): retry '
                    f'the transaction') from e
            if code in OUT_OF_SPACE:
                raise DatabaseFullError(
                    f'{what}: the Oracle database {self._description} is '
                    f'out of space (a tablespace full or a quota reached); '
                    f'nothing of this transaction was committed '
                    f'({_first_line(e)})') from e
            if code in GONE or (code is None and isinstance(
                    e, (driver.OperationalError, driver.InterfaceError))):
                raise DisconnectedError(
                    f'{what}: lost the connection to {self._description}; '
                    f'nothing of this transaction was committed '
                    f'({_first_line(e)})') from e
            raise
