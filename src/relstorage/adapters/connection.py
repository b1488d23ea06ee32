"""Shared default of the connection-manager role
(see interfaces.IConnectionManager)."""
import contextlib


class ConnectionManager:
    """Subclasses provide ``driver``, ``connect``, ``begin_store``,
    ``begin_write`` and ``_in_transaction``."""

    driver = None

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
