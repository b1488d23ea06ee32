"""The store connection of a storage instance: opening it, starting a
commit's transaction on it (``_begin_store``: its BEGIN travels with the
commit's first statement where a round trip costs), reading the latest
committed data outside a commit, and reopening it when the database
dropped it, where that is safe.

A mixin of ``relstorage.storage.RelStorage``, whose ``_init_instance``
sets the attributes used here.
"""
import logging

from relstorage.adapters.connection import BeginningCursor
from relstorage.storage.reconnect import retry_if_disconnected

# The storage's logger (see snapshot.py).
log = logging.getLogger('relstorage.storage')


class StoreConnectionMethods:

    def _drop_store_connection(self):
        if self._store_conn is not None:
            self._adapter.connmanager.close(
                self._store_conn, self._store_cursor)
            self._store_conn = self._store_cursor = None

    def _reopen_store(self):
        self._drop_store_connection()
        self._writer_cursor()
        return self._store_conn, self._store_cursor

    def _reopen_unbegun(self):
        """A new store connection for a commit whose first statement found
        the connection gone (nothing of it reached the server):
        ``(cursor, statements that start its transaction)``."""
        log.info('%s: the database dropped the connection; reconnecting',
                 self._name)
        conn, cursor = self._reopen_store()
        if self._txn is not None:
            self._txn.conn = conn
        self._adapter.mover.clear_temp(cursor)
        return cursor, self._adapter.connmanager.store_begin_statements(
            conn, cursor)

    def _writer_cursor(self):
        """The cursor of the committing connection.  Outside a commit it
        reads the latest committed data."""
        self._check_open()
        if self._store_conn is None:
            self._store_conn, self._store_cursor = (
                self._adapter.connmanager.open_store())
        return self._store_cursor

    def _read_latest(self, what, read):
        """``read(cursor)`` on the committing connection; outside a commit a
        connection the database dropped is reopened once."""
        return retry_if_disconnected(
            self._adapter.connmanager, what,
            lambda: read(self._writer_cursor()), self._drop_store_connection,
            may_retry=lambda: self._txn is None)

    def _begin_store(self):
        """Start the database transaction of a commit; a connection the
        database dropped since the last commit is reopened once."""
        def begin():
            if (self._store_conn is not None
                    and self._adapter.connmanager.replaced(self._store_conn)):
                # Its replica file prefers another server now.
                self._drop_store_connection()
            cursor = self._writer_cursor()
            # Before the transaction starts: emptying may end one (MySQL's
            # TRUNCATE).
            self._adapter.mover.clear_temp(cursor)
            cm = self._adapter.connmanager
            statements = cm.store_begin_statements(self._store_conn, cursor)
            if statements is None:
                cm.begin_store(self._store_conn, cursor)
                return cursor
            # Sent with the commit's first statement: a round trip less.
            return BeginningCursor(cm, cursor, statements,
                                   self._reopen_unbegun)

        return retry_if_disconnected(
            self._adapter.connmanager, 'starting a commit', begin,
            self._drop_store_connection)
