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

    def _drop_store_connection(self, rollback=True):
        if self._store_conn is not None:
            self._pool.discard(self._store_conn, self._store_cursor,
                               rollback)
            self._store_conn = self._store_cursor = None
        self._store_rollback_due = False

    def _drop_gone_store(self):
        """Drop a store connection the database dropped (and the idle
        ones of a bounded pool: see _drop_gone_load)."""
        self._drop_store_connection()
        self._pool.close_idle()

    def _reopen_store(self):
        self._drop_gone_store()
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

    def _writer_cursor(self, rollback_later=False, short=False):
        """The cursor of the committing connection.  Outside a commit it
        reads the latest committed data.  The connection may have been the
        load connection until the last commit (``_take_commit_snapshot``):
        its snapshot ends here, unless ``rollback_later`` (the caller's
        first statement carries the ROLLBACK), and it gets the staging
        table once.  ``short``: a read that gives a connection it takes
        from a bounded pool back at once, waiting for nothing else."""
        self._check_open()
        cm = self._adapter.connmanager
        if self._store_conn is None:
            self._take_store(short)
        if not self._store_staged:
            # (With the ROLLBACK still due, in the same round trip.)
            cm.prepare_store(self._store_conn, self._store_cursor,
                             rollback=self._store_rollback_due)
            self._store_rollback_due = False
            self._store_staged = True
        elif not rollback_later:
            self._end_store_snapshot()
        return self._store_cursor

    def _end_store_snapshot(self):
        """Send the ROLLBACK still due on the store connection: the end of
        the snapshot it held as the load connection."""
        if self._store_rollback_due:
            self._store_rollback_due = False
            self._adapter.connmanager.rollback(
                self._store_conn, self._store_cursor)

    def _read_latest(self, what, read):
        """``read(cursor)`` on the committing connection; outside a commit a
        connection the database dropped is reopened once."""
        try:
            return retry_if_disconnected(
                self._adapter.connmanager, what,
                lambda: read(self._writer_cursor(short=True)),
                self._drop_gone_store,
                may_retry=lambda: self._txn is None)
        finally:
            # (Outside a commit, back to a bounded pool.)
            self._give_store()

    def _begin_store(self):
        """Start the database transaction of a commit; a connection the
        database dropped since the last commit is reopened once."""
        def begin():
            if (self._store_conn is not None
                    and self._adapter.connmanager.replaced(self._store_conn)):
                # Its replica file prefers another server now.
                self._drop_store_connection()
            cursor = self._writer_cursor(rollback_later=True)
            cm = self._adapter.connmanager
            statements = cm.store_begin_statements(self._store_conn, cursor)
            if statements is None:
                self._end_store_snapshot()
            # Before the transaction starts: emptying may end one.  (Where
            # the first statement carries the start, PostgreSQL and MySQL,
            # this sends nothing: the start empties the staging table.)
            self._adapter.mover.clear_temp(cursor)
            if statements is None:
                cm.begin_store(self._store_conn, cursor)
                return cursor
            if self._store_rollback_due:
                # The end of the snapshot the connection held as the load
                # connection goes first.
                self._store_rollback_due = False
                statements = ['ROLLBACK', *statements]
            # Sent with the commit's first statement: a round trip less.
            return BeginningCursor(cm, cursor, statements,
                                   self._reopen_unbegun)

        return retry_if_disconnected(
            self._adapter.connmanager, 'starting a commit', begin,
            self._drop_gone_store)
