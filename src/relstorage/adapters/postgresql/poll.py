"""Invalidation polling for PostgreSQL (the poller role).

The statements run at every ZODB transaction, so they are prepared.  A
snapshot starts with one round trip (with psycopg2): the ROLLBACK of the
previous one if it is still open, BEGIN and the poll (the last tid and the
changes, ``poll.POLL``) as one query.

Behind a transaction pooler (``tags_sessions``) the poll also says which
server session the snapshot's transaction runs in and when it began
(``SESSION_ROWS``), which the connection manager keeps for the pack's
check of other clients' open transactions (pack.oldest_transaction): the
session ids the driver knows are then the pooler's, not the server's.
"""
from relstorage.adapters.poll import NO_CHANGES
from relstorage.adapters.poll import POLL
from relstorage.adapters.poll import Poller
from relstorage.adapters.poll import split_poll

from .connection import SNAPSHOT_BEGIN
from .drivers import Prepared


#: Rows -2 and -3 ahead of POLL's: the server session (its backend pid)
#: and the start of its transaction in microseconds (now() is the
#: transaction's start, pg_stat_activity's xact_start).
SESSION_ROWS = """
    SELECT -2, pg_backend_pid()::bigint
    UNION ALL
    SELECT -3, (EXTRACT(EPOCH FROM now()) * 1000000)::bigint
    UNION ALL"""


class _PostgreSQLPoller(Poller):
    LAST_TID = 'SELECT tid FROM commit_row WHERE id = 0'
    SNAPSHOT_BEGIN = SNAPSHOT_BEGIN
    #: Whether a snapshot's poll tells its session (set by the adapter in
    #: its transaction-pooler mode).
    tags_sessions = False

    def __init__(self, driver):
        self.driver = driver
        self._last_tid = Prepared('rs_last_tid', [], self.LAST_TID)
        self._changes = Prepared(
            'rs_changes', ['bigint', 'bigint'], self.CHANGES)
        self._poll = Prepared('rs_poll', ['bigint'], self.POLL)
        self._tagged_poll = Prepared('rs_tagged_poll', ['bigint'],
                                     SESSION_ROWS + self.POLL)

    def prepared(self):
        return [self._last_tid, self._changes, self._poll]

    def last_tid(self, cursor):
        self.driver.execute_prepared(cursor, self._last_tid, ())
        row = cursor.fetchone()
        return row[0] if row and row[0] is not None else 0

    def changes(self, cursor, after_tid, last_tid):
        self.driver.execute_prepared(
            cursor, self._changes, (after_tid, last_tid))
        return cursor.fetchall()

    def begin_and_poll(self, connmanager, conn, cursor, after_tid,
                       end_previous=False):
        first = f'ROLLBACK; {self.SNAPSHOT_BEGIN}' if end_previous else (
            self.SNAPSHOT_BEGIN)
        params = (NO_CHANGES if after_tid is None else after_tid,)
        if not self.tags_sessions:
            return split_poll(self.driver.execute_prepared_after(
                cursor, first, self._poll, params))
        rows = self.driver.execute_prepared_after(
            cursor, first, self._tagged_poll, params)
        tags = {oid: value for oid, value in rows if oid < -1}
        connmanager.note_snapshot(conn, tags[-2], tags[-3])
        return split_poll(row for row in rows if row[0] >= -1)


class HistoryPreservingPoller(_PostgreSQLPoller):
    CHANGES = """
        SELECT zoid, tid FROM current_object WHERE tid > %s AND tid <= %s"""
    POLL = POLL.format(table='current_object')


class HistoryFreePoller(_PostgreSQLPoller):
    CHANGES = """
        SELECT zoid, tid FROM object_state WHERE tid > %s AND tid <= %s"""
    POLL = POLL.format(table='object_state')
