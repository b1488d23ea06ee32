"""Invalidation polling for MySQL (the poller role).

A snapshot starts with one round trip: the ROLLBACK of the previous one
if it is still open, the isolation level, START TRANSACTION and the poll
(last tid and changes, ``poll.POLL``) in one batch (on a Galera node, with
the wait for the cluster's commits: ``connection.GALERA_SNAPSHOT_BEGIN``).
"""
from relstorage.adapters.poll import NO_CHANGES
from relstorage.adapters.poll import POLL
from relstorage.adapters.poll import Poller
from relstorage.adapters.poll import split_poll

from .connection import SNAPSHOT_BEGIN
from .connection import run_batch


class _MySQLPoller(Poller):
    LAST_TID = 'SELECT tid FROM commit_row WHERE id = 0'
    SNAPSHOT_BEGIN = SNAPSHOT_BEGIN

    def poll_after_commit(self, connmanager, after_tid):
        if connmanager.galera:
            # A snapshot on a Galera node first waits for the cluster's
            # commits (connection.GALERA_SNAPSHOT_BEGIN), a wait that may
            # time out: never after a COMMIT whose success the caller has
            # not heard yet.
            return None
        return super().poll_after_commit(connmanager, after_tid)

    def begin_and_poll(self, connmanager, conn, cursor, after_tid,
                       end_previous=False):
        rollback = 'ROLLBACK; ' if end_previous else ''
        results = run_batch(
            cursor,
            rollback + connmanager.snapshot_statements(self.POLL),
            (NO_CHANGES if after_tid is None else after_tid,))
        return split_poll(results[-1])


class HistoryPreservingPoller(_MySQLPoller):
    CHANGES = """
        SELECT zoid, tid FROM current_object WHERE tid > %s AND tid <= %s"""
    POLL = POLL.format(table='current_object')


class HistoryFreePoller(_MySQLPoller):
    CHANGES = """
        SELECT zoid, tid FROM object_state WHERE tid > %s AND tid <= %s"""
    POLL = POLL.format(table='object_state')
