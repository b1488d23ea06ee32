"""Invalidation polling for PostgreSQL (the poller role).

The statements run at every ZODB transaction, so they are prepared.  A
snapshot starts with one round trip (with psycopg2): the ROLLBACK of the
previous one if it is still open, BEGIN and the poll (the last tid and the
changes, ``poll.POLL``) as one query.
"""
from relstorage.adapters.poll import NO_CHANGES
from relstorage.adapters.poll import POLL
from relstorage.adapters.poll import Poller
from relstorage.adapters.poll import split_poll

from .connection import SNAPSHOT_BEGIN
from .drivers import Prepared


class _PostgreSQLPoller(Poller):
    LAST_TID = 'SELECT tid FROM commit_row WHERE id = 0'
    SNAPSHOT_BEGIN = SNAPSHOT_BEGIN

    def __init__(self, driver):
        self.driver = driver
        self._last_tid = Prepared('rs_last_tid', [], self.LAST_TID)
        self._changes = Prepared(
            'rs_changes', ['bigint', 'bigint'], self.CHANGES)
        self._poll = Prepared('rs_poll', ['bigint'], self.POLL)

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
        return split_poll(self.driver.execute_prepared_after(
            cursor, first, self._poll,
            (NO_CHANGES if after_tid is None else after_tid,)))


class HistoryPreservingPoller(_PostgreSQLPoller):
    CHANGES = """
        SELECT zoid, tid FROM current_object WHERE tid > %s AND tid <= %s"""
    POLL = POLL.format(table='current_object')


class HistoryFreePoller(_PostgreSQLPoller):
    CHANGES = """
        SELECT zoid, tid FROM object_state WHERE tid > %s AND tid <= %s"""
    POLL = POLL.format(table='object_state')
