"""Invalidation polling for PostgreSQL (the poller role).

Both statements run at every ZODB transaction, so they are prepared.
"""
from relstorage.adapters.poll import Poller

from .drivers import Prepared


class _PostgreSQLPoller(Poller):
    LAST_TID = 'SELECT tid FROM commit_row WHERE id = 0'

    def __init__(self, driver):
        self.driver = driver
        self._last_tid = Prepared('rs_last_tid', [], self.LAST_TID)
        self._changes = Prepared(
            'rs_changes', ['bigint', 'bigint'], self.CHANGES)

    def prepared(self):
        return [self._last_tid, self._changes]

    def last_tid(self, cursor):
        self.driver.execute_prepared(cursor, self._last_tid, ())
        row = cursor.fetchone()
        return row[0] if row and row[0] is not None else 0

    def changes(self, cursor, after_tid, last_tid):
        self.driver.execute_prepared(
            cursor, self._changes, (after_tid, last_tid))
        return cursor.fetchall()


class HistoryPreservingPoller(_PostgreSQLPoller):
    CHANGES = """
        SELECT zoid, tid FROM current_object WHERE tid > %s AND tid <= %s"""


class HistoryFreePoller(_PostgreSQLPoller):
    CHANGES = """
        SELECT zoid, tid FROM object_state WHERE tid > %s AND tid <= %s"""
