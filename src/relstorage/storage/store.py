"""The store connection of a storage instance: opening it, starting a
commit's transaction on it (``_begin_store``: its BEGIN travels with the
commit's first statement where a round trip costs), reading the latest
committed data outside a commit, and reopening it when the database
dropped it, where that is safe; object ids (``new_oid``), and behind a
transaction pooler the move of a commit onto its snapshot's connection.

A mixin of ``relstorage.storage.RelStorage``, whose ``_init_instance``
sets the attributes used here.
"""
import logging

from ZODB import POSException
from ZODB.utils import p64

from relstorage.adapters.connection import BeginningCursor
from relstorage.storage.reconnect import retry_if_disconnected

# The storage's logger (see snapshot.py).
log = logging.getLogger('relstorage.storage')


class StoreConnectionMethods:

    def new_oid(self):
        if self._options.read_only:
            raise POSException.ReadOnlyError()
        self._check_open()
        if self._adapter.connmanager.transaction_pooler:
            with self._lock:
                if self._snapshot_tid is not None:
                    # In the snapshot, on its connection: not on a second
                    # one, which would wait for a second session of the
                    # pooler's while this one holds the first.
                    return p64(self._oids.take(self._load_cursor))
        return p64(self._oids.take())

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

    def _commit_on_snapshot_connection(self, txn):
        """Behind a transaction pooler (the connection manager's
        ``transaction_pooler``), at the vote: the commit's
        transaction runs on the connection of the snapshot just ended, the
        snapshot's ROLLBACK first in the round trip of its BEGIN, where
        nothing was sent on the store connection yet.  A pooler holds a
        server session for a client connection inside a transaction: a
        commit that began beside its snapshot would hold two, and when
        every session of the pool is held by a snapshot whose commit waits
        for a second one, all of them wait until the pooler gives up."""
        cursor = txn.cursor
        if (self._load_conn is None or self._snapshot_tid is not None
                or self._adopted is not None
                or not isinstance(cursor, BeginningCursor) or cursor.begun):
            return
        cm = self._adapter.connmanager
        load_conn, load_cursor = self._load_conn, self._load_cursor
        rollback, staged = self._rollback_due, self._load_staged
        # The store connection (nothing sent on it for this commit; it may
        # still hold the snapshot it had as the load connection: its
        # ROLLBACK is due) takes the load connection's place.
        self._load_conn, self._load_cursor = (
            self._store_conn, self._store_cursor)
        self._load_staged = self._store_staged
        self._rollback_due = self._load_conn is not None
        self._store_conn, self._store_cursor = load_conn, load_cursor
        self._store_staged = staged
        self._store_rollback_due = False
        statements = cm.store_begin_statements(load_conn, load_cursor)
        if rollback:
            statements = ['ROLLBACK', *statements]
        txn.conn = load_conn
        txn.cursor = BeginningCursor(cm, load_cursor, statements,
                                     self._reopen_unbegun)

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
