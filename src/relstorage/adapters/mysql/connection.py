"""Connections to MySQL and MariaDB (the connection-manager role).

Connections run in autocommit mode, in UTC, and relstorage starts
transactions itself: a snapshot is a REPEATABLE READ ``START TRANSACTION
WITH CONSISTENT SNAPSHOT, READ ONLY``; a commit is READ COMMITTED (so that
conflict checks see the latest committed rows) with
``innodb_lock_wait_timeout`` from commit-lock-timeout.

A commit is *guarded*.  The server may end a transaction in the middle of
a batch of statements: a Galera node aborts one that lost certification
to another node's write set.  The statements after that point do not
fail: in autocommit mode each one commits on its own, and out of it they
open a new implicit transaction.  A commit's batch would then publish
part of its objects without its locks, or move the last tid without its
objects.  So a commit's transaction runs with autocommit off, and the
statement before its COMMIT fails when the transaction it began is gone,
which ends the batch before the COMMIT; the caller's ROLLBACK discards
whatever ran after the abort.  Two ways:

- on a single server, a SAVEPOINT set when the transaction begins and
  released before COMMIT (error 1305 once the transaction is gone).
  Nothing there ends a transaction between two statements of a batch
  without an error that stops the batch; the guard costs nothing
  measurable.
- on a Galera node, a marker row in a temporary table (``temp_commit``;
  InnoDB undoes it with the transaction, and no other session sees it),
  checked before COMMIT, and after it: the abort can land between the
  check and the COMMIT, which then commits an empty transaction and says
  OK (seen once in the tests), and only the marker tells.  A write to a
  temporary table costs about 0.2 ms per transaction (MariaDB 10.11),
  little beside a cluster's commit.
"""
import contextlib
import math
import weakref

from relstorage.adapters.connection import ConnectionManager
from relstorage.adapters.interfaces import IConnectionManager
from relstorage.errors import CommitLockTimeoutError
from relstorage.errors import DatabaseFullError
from relstorage.errors import DisconnectedError
from relstorage.errors import LockConflictError
from ZODB.POSException import StorageError
from zope.interface import implementer

from relstorage.adapters.poll import NO_CHANGES

from .chain import CHECK
from .chain import begin_whole
from .drivers import error_number

# Server error numbers.
ER_LOCK_WAIT_TIMEOUT = 1205
ER_LOCK_DEADLOCK = 1213
ER_LOCK_NOWAIT = 3572             # MySQL 8's NOWAIT failure
ER_DUP_ENTRY = 1062
ER_NET_PACKET_TOO_LARGE = 1153
ER_CON_COUNT = 1040               # too many connections
#: Galera's "Maximum writeset size exceeded" (at COMMIT) has no number of
#: its own.
ER_UNKNOWN_ERROR = 1105
#: "Disk full ... waiting for someone to free space", "The table is full"
#: (InnoDB out of space in its file), "Got error 28 (ENOSPC) from storage
#: engine": out of space, each in its way.
ER_DISK_FULL = 1021
ER_RECORD_FILE_FULL = 1114
ER_GET_ERRNO = 1030
#: Galera, on a node that left the cluster's primary component: "Error
#: while appending streaming replication fragment (provider status: Not
#: connected to Primary Component)", "Got error 6 ... during COMMIT".  A
#: node outside the primary component commits nothing.
ER_ERROR_DURING_COMMIT = 1180
# The session is gone: server gone away, lost connection, killed,
# shut down, and MySQL 8's "disconnected by the server".
_GONE = {2006, 2013, 2055, 1927, 1053, 4031}

TEMP_STORE = """
    CREATE TEMPORARY TABLE IF NOT EXISTS temp_store (
        zoid        BIGINT NOT NULL PRIMARY KEY,
        prev_tid    BIGINT,
        state       LONGBLOB,
        state_size  BIGINT NOT NULL,
        data_txn    BIGINT NOT NULL,
        ord         BIGINT NOT NULL
    ) ENGINE = InnoDB"""


TEMP_COMMIT = """
    CREATE TEMPORARY TABLE IF NOT EXISTS temp_commit (
        marker      TINYINT NOT NULL
    ) ENGINE = InnoDB"""

#: The start of a guarded transaction, with the marker row (Galera), or
#: with the savepoint.  The marker's DELETE runs in autocommit mode,
#: before the transaction.
MARKER_BEGIN = ('DELETE FROM temp_commit; SET autocommit = 0; '
                'START TRANSACTION; INSERT INTO temp_commit VALUES (1)')
SAVEPOINT_BEGIN = ('SET autocommit = 0; START TRANSACTION; '
                   'SAVEPOINT relstorage_guard')
#: Fails (BIGINT UNSIGNED out of range, error 1690, whatever the sql_mode)
#: when the guarded transaction lost its marker row, that is when the
#: server ended the transaction the commit began.
MARKER_GUARD = ('SELECT 18446744073709551615 + '
                '(1 - (SELECT COUNT(*) FROM temp_commit))')
SAVEPOINT_GUARD = 'RELEASE SAVEPOINT relstorage_guard'
ER_DATA_OUT_OF_RANGE = 1690
ER_SP_DOES_NOT_EXIST = 1305
#: 1 after a guarded COMMIT that committed the commit's own transaction
#: (with the savepoint, nothing to read: always 1).
MARKER_COMMITTED = '(SELECT COUNT(*) FROM temp_commit)'
SAVEPOINT_COMMITTED = '1'


# Empties the staging table.  Not DELETE: once a large commit has filled
# the table, InnoDB keeps its emptied pages, and DELETE (and the vote's
# join, which scans the table) walked them at every later commit: 1.8 ms
# each for a one-object commit after 1000-object ones, on MariaDB 10.11.
# TRUNCATE gives the pages back.
CLEAR_TEMP_STORE = 'TRUNCATE TABLE temp_store'

#: Starts a read snapshot (poll.py sends it with the poll, in one batch).
SNAPSHOT_BEGIN = ('SET TRANSACTION ISOLATION LEVEL REPEATABLE READ; '
                  'START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY')

#: The same on a Galera node, which may not have applied every commit the
#: cluster acknowledged yet (a commit made through another node: a client
#: that failed over, or reads from ro-replica-conf's nodes).  A read with
#: wsrep_sync_wait = 1 first waits until the node has applied all of them.
#: The snapshot is fixed by the first read (no CONSISTENT SNAPSHOT, which
#: would fix it before any wait), which must follow this in the same batch
#: and be followed by SYNC_WAIT_OFF: the snapshot's later reads need no
#: wait.
SYNC_WAIT_ON = 'SET SESSION wsrep_sync_wait = 1'
SYNC_WAIT_OFF = 'SET SESSION wsrep_sync_wait = 0'
GALERA_SNAPSHOT_BEGIN = (f'{SYNC_WAIT_ON}; '
                         f'SET TRANSACTION ISOLATION LEVEL REPEATABLE READ; '
                         f'START TRANSACTION READ ONLY')
#: A read of the commit lock's row, the first read where there is none.
READ_LAST_TID = 'SELECT tid FROM commit_row WHERE id = 0'


def describe_params(params):
    """Where the server is, without the password, for messages."""
    shown = ' '.join(f'{k}={v}' for k, v in sorted(params.items())
                     if k not in ('passwd', 'password', 'compress',
                                  'named_pipe'))
    return f'mysql:{shown}'


@implementer(IConnectionManager)
class MySQLConnectionManager(ConnectionManager):

    def __init__(self, driver, params, lock_timeout):
        self.driver = driver
        self._params = params
        self.lock_timeout = lock_timeout
        self._description = describe_params(params)
        self.is_mariadb = None          # learnt at the first connection
        self.max_allowed_packet = None
        #: Whether the server is a node of a Galera cluster (wsrep_on).
        self.galera = None
        #: Whether commits are guarded by the marker row (else by the
        #: savepoint; see the module's docstring): None, as ``galera``.
        self.marker_guard = None
        #: Snapshots begun again because they lacked a commit (chain.py).
        self.torn_snapshots = 0
        # Store connections (with the temporary tables), and those of them
        # inside a guarded transaction.
        self._staging = weakref.WeakSet()
        self._guarded = weakref.WeakSet()

    def describe(self):
        return self._description

    def __repr__(self):
        return f'<MySQLConnectionManager {self._description}>'

    def _server_params(self, server):
        if server is None:
            return self._params
        host, port = server
        params = dict(self._params, host=host)
        if port is not None:
            params['port'] = port
        return params

    def _connect_server(self, server, read_only):
        conn = self.driver.connect(self._server_params(server))
        try:
            cursor = conn.cursor()
            # InnoDB takes whole seconds, at least 1.
            seconds = max(1, math.ceil(self.lock_timeout))
            cursor.execute(f"SET time_zone = '+00:00', "
                           f"innodb_lock_wait_timeout = {seconds}")
            if server is not None and not read_only:
                # A replica of a replica list is skipped for writes.
                cursor.execute('SELECT @@read_only')
                if int(cursor.fetchone()[0]):
                    raise DisconnectedError(
                        f'cannot connect to {self._describe_server(server)}'
                        f': the server is read-only (@@read_only)')
            if self.is_mariadb is None:
                # SHOW, not @@wsrep_on: servers built without Galera (MySQL)
                # have no such variable.
                (((version, packet),), wsrep) = run_batch(
                    cursor, "SELECT VERSION(), @@max_allowed_packet; "
                            "SHOW VARIABLES LIKE 'wsrep_on'")
                self.galera = any(value.upper() == 'ON'
                                  for _, value in wsrep)
                self.is_mariadb = 'mariadb' in version.lower()
                self.max_allowed_packet = int(packet)
            cursor.close()
        except BaseException:
            try:
                conn.close()
            except self.driver.Error:
                pass
            raise
        return conn

    def _is_full(self, error):
        return error_number(error) == ER_CON_COUNT

    def _describe_server(self, server):
        return describe_params(self._server_params(server))

    def session_id(self, conn):
        # From the server's handshake (both drivers).
        return conn.thread_id()

    def open_load(self):
        conn = self.connect(read_only=True)
        return conn, conn.cursor()

    def open_store(self):
        conn = self.connect()
        cursor = conn.cursor()
        self.prepare_store(conn, cursor)
        return conn, cursor

    def prepare_store(self, conn, cursor, rollback=False):
        # READ COMMITTED for the whole session (every transaction of a
        # store connection reads the latest rows; snapshots say REPEATABLE
        # READ themselves): one statement less in every commit's batch.
        run_batch(cursor, ('ROLLBACK; ' if rollback else '')
                  + f'{TEMP_STORE}; {TEMP_COMMIT}; SET SESSION '
                    f'TRANSACTION ISOLATION LEVEL READ COMMITTED')
        self._staging.add(conn)

    def _in_transaction(self, conn):
        # Neither driver reports it portably; ROLLBACK outside a
        # transaction is harmless.
        return True

    def begin_store(self, conn, cursor):
        # A commit (``conn`` given: a store connection, which has the
        # staging table) first empties the staging table, in the same round
        # trip; TRUNCATE commits implicitly, so it comes before the
        # transaction.  The mover's clear_temp leaves it to this batch.
        # Without ``conn`` (a restore batch that goes on after committing
        # its part, or a write session) what is staged stays.
        run_batch(cursor, '; '.join(self._begin_statements(conn, cursor)))

    def _begin_statements(self, conn, cursor):
        """The statements of ``begin_store``, one by one (the constants
        hold no semicolon but their separators)."""
        clear = [CLEAR_TEMP_STORE] if conn is not None else []
        conn = cursor.connection
        if conn not in self._staging:
            return clear + ['SET TRANSACTION ISOLATION LEVEL READ COMMITTED',
                            'START TRANSACTION']
        # The guard (see the module's docstring).
        begin = MARKER_BEGIN if self._marker() else SAVEPOINT_BEGIN
        self._guarded.add(conn)
        return clear + begin.split('; ')

    def store_begin_statements(self, conn, cursor):
        return self._begin_statements(conn, cursor)

    def execute_after(self, cursor, statements, sql, params=None):
        # One multi-statement query; the cursor steps over the results of
        # ``statements`` (none has rows) to ``sql``'s.
        cursor.execute('; '.join([*statements, sql]), params)
        for _ in statements:
            cursor.nextset()

    def begin_deferred(self, cursor, statements):
        run_batch(cursor, '; '.join(statements))

    def _marker(self):
        return self.galera if self.marker_guard is None else \
            self.marker_guard

    def guarded_commit(self):
        """``(statements, committed)``: the statements that end a guarded
        transaction, its COMMIT among them, and the expression that reads
        1 after them if the COMMIT committed that transaction (for
        ``ended``)."""
        if self._marker():
            return ((MARKER_GUARD, 'COMMIT', 'SET autocommit = 1'),
                    MARKER_COMMITTED)
        return ((SAVEPOINT_GUARD, 'COMMIT', 'SET autocommit = 1'),
                SAVEPOINT_COMMITTED)

    def ended(self, conn, committed):
        """After a guarded COMMIT: ``committed`` is what ``COMMITTED`` read
        after it.  Raises LockConflictError if the COMMIT did not end the
        commit's own transaction."""
        self._guarded.discard(conn)
        if int(committed) != 1:
            raise LockConflictError(
                'committing: the server ended the transaction before its '
                'COMMIT (a Galera certification failure or a deadlock), '
                'and nothing of it was committed')

    def commit(self, conn, cursor):
        if conn not in self._guarded:
            cursor.execute('COMMIT')
            return
        statements, committed = self.guarded_commit()
        with self.translate():
            rows = run_batch(cursor, '; '.join(
                statements + (f'SELECT {committed}',)))
        self.ended(conn, rows[-1][0][0])

    def rollback(self, conn, cursor):
        if conn not in self._guarded:
            super().rollback(conn, cursor)
            return
        self._guarded.discard(conn)
        cursor = conn.cursor()
        # After Galera aborted the transaction, the next statement (this
        # ROLLBACK) returns the abort's error 1213, and a batch stops
        # there: autocommit would stay off.  Once said, the error is gone.
        for _ in range(2):
            try:
                run_batch(cursor, 'ROLLBACK; SET autocommit = 1')
                return
            except self.driver.Error as e:
                if error_number(e) in _GONE:
                    return

    def begin_write(self, cursor, what):
        if self._marker():
            # A Galera node: guarded too, when on a store connection (a
            # pack's batches, whose locks keep committers off what they
            # delete).
            self.begin_store(None, cursor)
        else:
            run_batch(cursor, 'SET TRANSACTION ISOLATION LEVEL READ '
                              'COMMITTED; START TRANSACTION')

    def snapshot_statements(self, first_read):
        """The statements that begin a snapshot and run ``first_read`` in
        it, as one batch."""
        if self.galera:
            return f'{GALERA_SNAPSHOT_BEGIN}; {first_read}; {SYNC_WAIT_OFF}'
        return f'{SNAPSHOT_BEGIN}; {first_read}'

    def begin_snapshot(self, conn, cursor):
        # The first read checks that the snapshot lacks no commit
        # (chain.py), in the round trip that begins it.
        statements = self.snapshot_statements(CHECK)

        def begin(again):
            rows = run_batch(cursor, ('ROLLBACK; ' if again else '')
                             + statements, (NO_CHANGES,))[-1]
            return rows[0][1] > 0, None

        self.torn_snapshots += begin_whole(begin)[1]

    def cluster_view(self, cursor):
        if not self.galera:
            return None
        cursor.execute("SHOW STATUS LIKE 'wsrep_cluster_conf_id'")
        rows = cursor.fetchall()
        return rows[0][1] if rows else None

    def sync(self, cursor):
        if self.galera:
            run_batch(cursor,
                      f'{SYNC_WAIT_ON}; {READ_LAST_TID}; {SYNC_WAIT_OFF}')

    def begin_analysis(self, conn, cursor):
        # Under REPEATABLE READ InnoDB reads the source of an
        # INSERT ... SELECT with shared locks (for statement-based binary
        # logs), which committers' inserts then wait for: a deadlock with a
        # pack, seen on MariaDB 10.11 in ZODB's PackLotsWhileWriting.
        # Under READ COMMITTED it reads without locks.
        run_batch(cursor, 'SET TRANSACTION ISOLATION LEVEL READ COMMITTED; '
                          'START TRANSACTION')

    @contextlib.contextmanager
    def translate(self, what='committing'):
        driver = self.driver
        try:
            yield
        except driver.Error as e:
            number = error_number(e)
            if number in (ER_LOCK_WAIT_TIMEOUT, ER_LOCK_NOWAIT):
                raise CommitLockTimeoutError(
                    f'{what}: waited longer than commit-lock-timeout '
                    f'({self.lock_timeout:g}s, innodb_lock_wait_timeout) for '
                    f'a lock another transaction holds') from e
            if number == ER_LOCK_DEADLOCK:
                raise LockConflictError(
                    f'{what}: the server ended this transaction: InnoDB '
                    f'chose it as a deadlock victim, or a Galera node found '
                    f'it in conflict with another node\'s commit ({e})'
                ) from e
            if ((number == ER_DATA_OUT_OF_RANGE
                    and '18446744073709551615' in str(e))
                    or (number == ER_SP_DOES_NOT_EXIST
                        and 'relstorage_guard' in str(e))):
                raise LockConflictError(
                    f'{what}: the server ended this transaction before its '
                    f'COMMIT (a Galera certification failure or a '
                    f'deadlock), and nothing of it was committed') from e
            if number == ER_DUP_ENTRY:
                # New objects with the same oid, or a transaction row whose
                # tid another commit took.
                raise LockConflictError(
                    f'{what}: a concurrent transaction wrote a row with the '
                    f'same key ({e})') from e
            if number == ER_NET_PACKET_TOO_LARGE:
                raise StorageError(
                    f'{what}: a statement exceeded the server\'s '
                    f'max_allowed_packet ({self.max_allowed_packet} bytes); '
                    f'raise max_allowed_packet') from e
            if (number == ER_UNKNOWN_ERROR
                    and 'writeset size' in str(e).lower()):
                raise StorageError(
                    f'{what}: the transaction is larger than the Galera '
                    f'cluster accepts (wsrep_max_ws_size, at most 2 GiB; '
                    f'blob data counts about twice); nothing of it was '
                    f'committed.  Keep blobs out of the database with a '
                    f'shared blob directory (shared-blob-dir true), commit '
                    f'in smaller transactions, or raise wsrep_max_ws_size '
                    f'({e})') from e
            if number in (ER_DISK_FULL, ER_RECORD_FILE_FULL) or (
                    number == ER_GET_ERRNO and ' 28 ' in str(e)):
                raise DatabaseFullError(
                    f'{what}: the MySQL server {self._description} is out of '
                    f'space for this database (disk full, or a table at its '
                    f'size limit); nothing of this transaction was '
                    f'committed ({e})') from e
            if (number == ER_ERROR_DURING_COMMIT
                    and 'primary component' in str(e).lower()):
                raise DisconnectedError(
                    f'{what}: the Galera node {self._description} is not in '
                    f'the cluster\'s primary component; nothing of this '
                    f'transaction was committed ({e})') from e
            if number in _GONE or isinstance(e, driver.InterfaceError):
                raise DisconnectedError(
                    f'{what}: lost the connection to {self._description}; '
                    f'nothing of this transaction was committed ({e})') from e
            raise


def run_batch(cursor, statements, params=None):
    """Run several statements in one round trip (the connections allow
    multi-statement queries) and read every result, as the protocol
    requires before the next query.  Returns the rows of each statement
    that has rows, in order; an error in any statement is raised when its
    result is reached."""
    cursor.execute(statements, params)
    results = []
    while True:
        if cursor.description is not None:
            results.append(cursor.fetchall())
        if not cursor.nextset():
            return results
