"""Invalidation polling for Oracle (the poller role).

A snapshot is ``SET TRANSACTION READ ONLY`` followed by the poll: the
last tid (as the row of oid -1) and what changed after the previous poll,
in one statement (``poll.POLL`` in Oracle's words).
"""
from relstorage.adapters.poll import NO_CHANGES
from relstorage.adapters.poll import Poller
from relstorage.adapters.poll import split_poll

#: The last tid and the changes after ``:after`` up to it.
POLL = """
    SELECT -1, tid FROM commit_row WHERE id = 0
    UNION ALL
    SELECT zoid, tid FROM {table}
    WHERE tid > :after AND tid <= (SELECT tid FROM commit_row WHERE id = 0)"""


class _OraclePoller(Poller):
    LAST_TID = 'SELECT tid FROM commit_row WHERE id = 0'

    def begin_and_poll(self, connmanager, conn, cursor, after_tid,
                       end_previous=False):
        if end_previous:
            connmanager.rollback(conn, cursor)
        connmanager.begin_snapshot(conn, cursor)
        cursor.execute(self.POLL, (
            NO_CHANGES if after_tid is None else after_tid,))
        return split_poll(cursor.fetchall())


class HistoryPreservingPoller(_OraclePoller):
    CHANGES = """
        SELECT zoid, tid FROM current_object
        WHERE tid > :after AND tid <= :last"""
    POLL = POLL.format(table='current_object')


class HistoryFreePoller(_OraclePoller):
    CHANGES = """
        SELECT zoid, tid FROM object_state
        WHERE tid > :after AND tid <= :last"""
    POLL = POLL.format(table='object_state')
