"""Shared default of the connection-manager role
(see interfaces.IConnectionManager)."""
import contextlib
import time

from relstorage.errors import DisconnectedError


class ConnectionManager:
    """Subclasses provide ``driver``, ``connect``, ``begin_store``,
    ``begin_write`` and ``_in_transaction``."""

    driver = None
    lock_timeout = 0
    #: The server's ids of the sessions this manager has open (see
    #: ``session_id``), or None before the first.
    sessions = None

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
                if not is_full(e) or time.monotonic() + pause > deadline:
                    raise DisconnectedError(
                        f'cannot connect to {describe}: {e}') from None
            time.sleep(pause)
            pause = min(pause * 2, 0.5)

    def _in_transaction(self, conn):
        raise NotImplementedError

    def rollback(self, conn, cursor):
        try:
            if self._in_transaction(conn):
                conn.cursor().execute('ROLLBACK')
        except self.driver.Error:
            pass

    def begin_analysis(self, conn, cursor):
        """Start the read transaction of a pack's analysis (by default a
        snapshot like any other)."""
        self.begin_snapshot(conn, cursor)

    def commit(self, conn, cursor):
        cursor.execute('COMMIT')

    def close(self, conn, cursor):
        if self.sessions:
            try:
                self.sessions.discard(self.session_id(conn))
            except Exception:   # a broken connection may not say
                pass
        try:
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
