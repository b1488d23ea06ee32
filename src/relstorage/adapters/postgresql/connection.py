"""Connections to PostgreSQL (the connection-manager role).

Every connection runs in autocommit mode, and relstorage issues BEGIN
itself: a snapshot is ``BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY``,
a commit ``BEGIN ISOLATION LEVEL READ COMMITTED`` with ``SET LOCAL
lock_timeout`` from commit-lock-timeout.  Between transactions a
connection is idle, never "idle in transaction", so it does not hold back
VACUUM.
"""
import contextlib

from relstorage.adapters.connection import ConnectionManager
from relstorage.adapters.connection import _first_line
from relstorage.adapters.interfaces import IConnectionManager
from relstorage.errors import CommitLockTimeoutError
from relstorage.errors import DatabaseFullError
from relstorage.errors import DisconnectedError
from relstorage.errors import LockConflictError
from zope.interface import implementer

# SQLSTATEs (PostgreSQL appendix A).
LOCK_NOT_AVAILABLE = '55P03'
DEADLOCK_DETECTED = '40P01'
SERIALIZATION_FAILURE = '40001'
UNIQUE_VIOLATION = '23505'
TOO_MANY_CONNECTIONS = '53300'
DISK_FULL = '53100'
# Connection exceptions (08...) and operator intervention (57P...:
# pg_terminate_backend, shutdown, crash) mean the session is gone.
_GONE_PREFIXES = ('08', '57P')

TEMP_STORE = """
    CREATE TEMP TABLE IF NOT EXISTS temp_store (
        zoid        BIGINT PRIMARY KEY,
        prev_tid    BIGINT,
        state       BYTEA,
        state_size  BIGINT NOT NULL,
        data_txn    BIGINT NOT NULL,
        ord         BIGINT NOT NULL
    ) ON COMMIT DELETE ROWS"""
# (Every integer column is BIGINT: binary COPY sends 8-byte integers.)

#: The same for one transaction (behind a transaction pooler: the next
#: transaction of the client connection may run in another session), made
#: by the first statement that stages rows.
TEMP_STORE_IN_TRANSACTION = TEMP_STORE.replace(
    'ON COMMIT DELETE ROWS', 'ON COMMIT DROP')


#: Starts a read snapshot (poll.py sends the poll in the same round trip).
SNAPSHOT_BEGIN = 'BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY'
#: The same behind a transaction pooler, not read-only: object ids are
#: reserved inside it (a sequence's nextval, which no rollback undoes),
#: where a second connection would need a second session of the pooler's
#: while this one holds its own.
SNAPSHOT_BEGIN_WRITABLE = 'BEGIN ISOLATION LEVEL REPEATABLE READ'


def describe_dsn(driver, dsn):
    """The DSN without its password, for messages."""
    try:
        params = driver.parse_dsn(dsn)
    except Exception:  # unparsable: say nothing that could leak
        return 'postgresql:(unparsable dsn)'
    shown = ' '.join(f'{k}={v}' for k, v in sorted(params.items())
                     if k not in ('password', 'passfile'))
    return f'postgresql:{shown}'


@implementer(IConnectionManager)
class PostgreSQLConnectionManager(ConnectionManager):

    def __init__(self, driver, dsn, lock_timeout):
        self.driver = driver
        self._dsn = dsn
        self.lock_timeout = lock_timeout
        self._description = describe_dsn(driver, dsn)
        #: Prepared statements of the other roles (set by the adapter),
        #: prepared in every load and store session.
        self.prepared = []
        #: Behind a transaction pooler, id(connection) -> (server session,
        #: start of its transaction in microseconds) of the last snapshot
        #: begun on each connection (``note_snapshot``).  An entry whose
        #: transaction has ended matches no session any more: the next
        #: transaction of that server session begins later.
        self.snapshots = {}

    def describe(self):
        return self._description

    def __repr__(self):
        return f'<PostgreSQLConnectionManager {self._description}>'

    def _server_dsn(self, server, read_only):
        if server is None:
            return self._dsn
        host, port = server
        params = {'host': host}
        if port is not None:
            params['port'] = port
        if not read_only and 'target_session_attrs' not in (
                self.driver.parse_dsn(self._dsn)):
            # libpq itself skips a standby (it asks the server).
            params['target_session_attrs'] = 'read-write'
        return self.driver.make_dsn(self._dsn, **params)

    def _connect_server(self, server, read_only):
        return self.driver.connect(self._server_dsn(server, read_only))

    def _is_full(self, error):
        return (self.driver.sqlstate(error) == TOO_MANY_CONNECTIONS
                or 'too many clients' in str(error))

    def _describe_server(self, server):
        return describe_dsn(self.driver, self._server_dsn(server, True))

    def session_id(self, conn):
        # libpq knows it (both drivers' conn.info.backend_pid).
        return conn.info.backend_pid

    def note_snapshot(self, conn, session, started):
        """The snapshot of ``conn`` runs in server session ``session``
        since ``started`` (see poll.SESSION_ROWS)."""
        self.snapshots[id(conn)] = (session, started)

    def own_snapshots(self):
        """``(sessions, starts)``: the snapshots of this manager's
        connections, as ``note_snapshot`` was told (copied in one step:
        other threads add theirs meanwhile)."""
        found = list(self.snapshots.copy().values())
        return [s for s, _ in found], [t for _, t in found]

    def close(self, conn, cursor, rollback=True):
        self.snapshots.pop(id(conn), None)
        super().close(conn, cursor, rollback)

    def open_load(self):
        conn = self.connect(read_only=True)
        cursor = conn.cursor()
        self.driver.prepare(cursor, self.prepared)
        return conn, cursor

    def open_store(self):
        conn = self.connect()
        cursor = conn.cursor()
        self.prepare_store(conn, cursor)
        self.driver.prepare(cursor, self.prepared)
        return conn, cursor

    def prepare_store(self, conn, cursor, rollback=False):
        # The staging table (with the ROLLBACK due, in one round trip:
        # psycopg 3 sends statements without parameters as one query too);
        # behind a transaction pooler a commit that stages rows makes its
        # own (TEMP_STORE_IN_TRANSACTION), not the session.
        statements = ['ROLLBACK'] * rollback + (
            [] if self.transaction_pooler else [TEMP_STORE])
        if statements:
            cursor.execute('; '.join(statements))

    def _lock_timeout_ms(self):
        # 0 would mean "wait forever" to PostgreSQL.
        return max(1, int(self.lock_timeout * 1000))

    def begin_store(self, conn, cursor):
        # Two statements, one round trip.
        cursor.execute(
            'BEGIN ISOLATION LEVEL READ COMMITTED; '
            f'SET LOCAL lock_timeout = {self._lock_timeout_ms()}')

    def store_begin_statements(self, conn, cursor):
        return ['BEGIN ISOLATION LEVEL READ COMMITTED',
                f'SET LOCAL lock_timeout = {self._lock_timeout_ms()}']

    def execute_after(self, cursor, statements, sql, params=None):
        self.driver.execute_after(cursor, statements, sql, params)

    def begin_write(self, cursor, what):
        self.begin_store(None, cursor)

    def begin_snapshot(self, conn, cursor):
        cursor.execute(SNAPSHOT_BEGIN_WRITABLE if self.transaction_pooler
                       else SNAPSHOT_BEGIN)

    def _in_transaction(self, conn):
        # psycopg2 and psycopg 3 both report libpq's status: 0 is IDLE.
        try:
            return int(conn.info.transaction_status) != 0
        except Exception:
            return True

    @contextlib.contextmanager
    def translate(self, what='committing'):
        driver = self.driver
        try:
            yield
        except driver.Error as e:
            code = driver.sqlstate(e)
            if code == LOCK_NOT_AVAILABLE:
                raise CommitLockTimeoutError(
                    f'{what}: waited longer than commit-lock-timeout '
                    f'({self.lock_timeout:g}s) for a lock another '
                    f'transaction holds') from e
            if code in (DEADLOCK_DETECTED, SERIALIZATION_FAILURE):
                raise LockConflictError(
                    f'{what}: PostgreSQL chose this transaction to give way '
                    f'to a concurrent one ({_first_line(e)})') from e
            if code == UNIQUE_VIOLATION:
                # Only explicit oids (restore) can collide: allocated ones
                # are unique.
                raise LockConflictError(
                    f'{what}: a concurrent transaction stored an object with '
                    f'the same oid ({_first_line(e)})') from e
            if code == DISK_FULL:
                raise DatabaseFullError(
                    f'{what}: the PostgreSQL server {self._description} is '
                    f'out of disk space; nothing of this transaction was '
                    f'committed ({_first_line(e)})') from e
            if (code is None and isinstance(
                    e, (driver.OperationalError, driver.InterfaceError))) or (
                    code and code.startswith(_GONE_PREFIXES)):
                raise DisconnectedError(
                    f'{what}: lost the connection to {self._description}; '
                    f'nothing of this transaction was committed '
                    f'({_first_line(e)})') from e
            raise
