"""Shared default of the connection-manager role
(see interfaces.IConnectionManager)."""
import contextlib
import functools
import time

from relstorage.config.replicas import server_text
from relstorage.errors import DisconnectedError


class ConnectionManager:
    """Subclasses provide ``driver``, ``_connect_server``, ``_is_full``,
    ``_describe_server``, ``describe``, ``begin_store``, ``begin_write``
    and ``_in_transaction``."""

    driver = None
    lock_timeout = 0
    #: Behind a transaction pooler, which holds a server session for a
    #: client connection only while it is inside a transaction: a commit
    #: runs on the connection of the snapshot it ended at its vote
    #: (relstorage.storage.store's _commit_on_snapshot_connection), and
    #: its last round trip begins no snapshot (a client always inside a
    #: transaction would keep its server session from every other).
    transaction_pooler = False
    #: The server's ids of the sessions this manager has open (see
    #: ``session_id``), or None before the first.
    sessions = None
    #: ReplicaLists (relstorage.config.replicas): replica-conf's, used by every
    #: connection, and ro-replica-conf's, used by load connections; None
    #: where not configured.
    replicas = None
    ro_replicas = None

    def use_replicas(self, replicas, ro_replicas):
        self.replicas = replicas
        self.ro_replicas = ro_replicas
        # id(connection) -> (ReplicaList, server) of connections to a
        # server of a replica list.
        self._servers = {}

    @property
    def uses_replicas(self):
        return self.replicas is not None or self.ro_replicas is not None

    def _connect_server(self, server, read_only):
        """A new driver connection to ``server`` (``(host, port)``, port
        possibly None) or, with None, to the configured server.  Read-write
        connections (``read_only`` false) refuse a server that does not
        accept writes where the database can tell."""
        raise NotImplementedError

    def _is_full(self, error):
        """Whether the driver error says the server has no connection slot
        free."""
        return False

    def _describe_server(self, server):
        return self.describe()

    def connect(self, read_only=False):
        """A new connection: to the first server of the replica list that
        answers (ro-replica-conf's for ``read_only`` ones, else
        replica-conf's), else to the configured server.  Raises
        DisconnectedError when none answers."""
        replicas = self.replicas
        if read_only and self.ro_replicas is not None:
            replicas = self.ro_replicas
        if replicas is None:
            return self._connect_when_free(
                lambda: self._connect_server(None, read_only),
                self._is_full, self.describe())
        failures = []
        for server in replicas.candidates():
            try:
                conn = self._connect_when_free(
                    functools.partial(self._connect_server, server, read_only),
                    self._is_full, self._describe_server(server))
            except DisconnectedError as e:
                failures.append(str(e))
                continue
            replicas.answered(server)
            self._servers[id(conn)] = (replicas, server)
            return conn
        raise DisconnectedError(
            f'no server of {replicas.option} ({replicas.path}) answered: '
            + '; '.join(failures))

    def server_of(self, conn):
        """``host[:port]`` of the replica-list server ``conn`` is
        connected to, or None when it went to the configured server."""
        entry = self._servers.get(id(conn)) if self.uses_replicas else None
        return None if entry is None else server_text(entry[1])

    def replaced(self, conn):
        """Whether ``conn`` should give way to a new connection between
        transactions: its replica list prefers another server now (the
        file changed, or replica-timeout ran out off its first server)."""
        if not self.uses_replicas:
            return False
        entry = self._servers.get(id(conn))
        return entry is not None and entry[0].stale(entry[1])

    def session_id(self, conn):
        """The server's id of the session of ``conn`` (known to the driver
        without a round trip), or None where the database has none."""
        return None

    def _opened(self, conn):
        session = self.session_id(conn)
        if session is not None:
            if self.sessions is None:
                self.sessions = set()
            self.sessions.add(session)
        return conn

    def _connect_when_free(self, connect, is_full, describe):
        """``connect()``, waiting (at most the lock timeout, with growing
        pauses) while the server refuses because all its connection slots
        are taken: other clients usually give one back soon."""
        deadline = time.monotonic() + self.lock_timeout
        pause = 0.02
        while True:
            try:
                return self._opened(connect())
            except self.driver.Error as e:
                if not is_full(e):
                    raise DisconnectedError(
                        f'cannot connect to {describe}: {e}') from None
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise DisconnectedError(
                        f'cannot connect to {describe}: the server had no '
                        f'connection slot free for {self.lock_timeout:g}s '
                        f'(commit-lock-timeout); raise its connection limit '
                        f'or open fewer connections ({_first_line(e)})'
                    ) from None
            time.sleep(min(pause, remaining))
            pause = min(pause * 2, 0.5)

    def _in_transaction(self, conn):
        raise NotImplementedError

    def is_gone(self, error):
        """Whether the driver ``error`` says the connection is gone (what
        ``translate`` turns into DisconnectedError)."""
        try:
            with self.translate():
                raise error
        except DisconnectedError:
            return True
        except Exception:
            return False

    def store_begin_statements(self, conn, cursor):
        """The statements that start a commit's transaction on the store
        connection ``conn`` (what ``begin_store`` runs), for the commit's
        first statement to carry (``BeginningCursor``); None where the
        transaction must start at once (SQLite, whose BEGIN takes the
        database's write lock)."""
        return None

    def execute_after(self, cursor, statements, sql, params=None):
        """``statements`` (without results), then ``sql`` with ``params``,
        in one round trip where the driver allows; the cursor then holds
        ``sql``'s results.  By default one after the other."""
        for statement in statements:
            cursor.execute(statement)
        cursor.execute(sql, params)

    def begin_deferred(self, cursor, statements):
        """Run ``statements`` alone: what ``store_begin_statements`` gave,
        when the commit's first use of its cursor cannot carry them."""
        for statement in statements:
            cursor.execute(statement)

    def rollback(self, conn, cursor):
        try:
            if self._in_transaction(conn):
                conn.cursor().execute('ROLLBACK')
        except self.driver.Error:
            pass

    def sync(self, cursor):
        """See IConnectionManager.sync: nothing to wait for by default."""

    def cluster_view(self, cursor):
        """See IConnectionManager.cluster_view: None, no cluster."""
        return None

    def begin_analysis(self, conn, cursor):
        """Start the read transaction of a pack's analysis (by default a
        snapshot like any other)."""
        self.begin_snapshot(conn, cursor)

    def commit(self, conn, cursor):
        cursor.execute('COMMIT')

    def close(self, conn, cursor, rollback=True):
        if self.uses_replicas:
            self._servers.pop(id(conn), None)
        if self.sessions:
            try:
                self.sessions.discard(self.session_id(conn))
            except Exception:   # a broken connection may not say
                pass
        try:
            if rollback:
                self.rollback(conn, cursor)
            conn.close()
        except self.driver.Error:
            pass

    @contextlib.contextmanager
    def write_session(self, what):
        """A new connection inside a write transaction (``what`` names the
        work for lock-timeout messages), committed on success."""
        conn = self.connect()
        cursor = conn.cursor()
        try:
            self.begin_write(cursor, what)
            yield cursor
            self.commit(conn, cursor)
        finally:
            self.close(conn, cursor)


def _first_line(error):
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


class BeginningCursor:
    """The store cursor of a commit whose transaction has not started on
    the server yet.  The first ``execute`` sends the statements that start
    it in the same round trip (``connmanager.execute_after``); any other
    first use (COPY, ``executemany``...) sends them alone before it.  On a
    network this saves the round trip of ``tpc_begin``: in a small commit
    the row locks of the vote are the first statement.

    ``begun`` says whether the transaction has started; nothing needs to
    roll back one that has not.  When the connection turns out to be gone
    at that first statement, the server knows nothing of the commit yet:
    ``reopen()`` gives a new cursor and its statements, and the statement
    is sent once more (as a commit that began at tpc_begin reconnected
    there)."""

    def __init__(self, connmanager, cursor, statements, reopen=None):
        self._connmanager = connmanager
        self._cursor = cursor
        self._begin = list(statements)
        self._reopen = reopen

    def _first(self, send):
        """``send(cursor, statements)``, once more on a new connection if
        the first turns out to be gone."""
        begin, self._begin = self._begin, None
        cm = self._connmanager
        try:
            return send(self._cursor, begin)
        except cm.driver.Error as e:
            if self._reopen is None or not cm.is_gone(e):
                raise
        self._cursor, begin = self._reopen()
        return send(self._cursor, begin)

    @property
    def begun(self):
        return self._begin is None

    @property
    def raw(self):
        """The driver's cursor, its transaction started."""
        self._send_begin()
        return self._cursor

    def _send_begin(self):
        if self._begin is not None:
            self._first(self._connmanager.begin_deferred)

    def execute(self, sql, params=None, **options):
        if self._begin is None:
            return self._cursor.execute(sql, params, **options)
        if options:
            # Driver options (psycopg's prepare): not through execute_after.
            self._send_begin()
            return self._cursor.execute(sql, params, **options)
        return self._first(lambda cursor, begin: (
            self._connmanager.execute_after(cursor, begin, sql, params)))

    def __getattr__(self, name):
        # Everything but execute is the driver cursor's, once begun.
        self._send_begin()
        return getattr(self._cursor, name)

    def __iter__(self):
        self._send_begin()
        return iter(self._cursor)
