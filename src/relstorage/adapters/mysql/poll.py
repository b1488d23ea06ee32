"""Invalidation polling for MySQL (the poller role).

A snapshot starts with one round trip: the ROLLBACK of the previous one
if it is still open, the isolation level, START TRANSACTION and the poll
(last tid and changes, ``poll.POLL``, and whether the snapshot lacks a
commit up to that tid: ``chain.CHECK``) in one batch (on a Galera node,
with the wait for the cluster's commits:
``connection.GALERA_SNAPSHOT_BEGIN``).  A snapshot that lacks one is
ended and another begun (chain.py).
"""
from relstorage.adapters.poll import NO_CHANGES
from relstorage.adapters.poll import POLL
from relstorage.adapters.poll import TORN
from relstorage.adapters.poll import Poller
from relstorage.adapters.poll import split_poll

from .chain import CHECK
from .chain import begin_whole
from .connection import SNAPSHOT_BEGIN
from .connection import run_batch


class _MySQLPoller(Poller):
    LAST_TID = 'SELECT tid FROM commit_row WHERE id = 0'
    SNAPSHOT_BEGIN = SNAPSHOT_BEGIN

    def _params(self, after_tid):
        """POLL's parameters: the tid whose link CHECK starts from and the
        tid after which changes are read."""
        after = NO_CHANGES if after_tid is None else after_tid
        return (after, after)

    def poll_after_commit(self, connmanager, after_tid):
        if connmanager.galera:
            # A snapshot on a Galera node first waits for the cluster's
            # commits (connection.GALERA_SNAPSHOT_BEGIN), a wait that may
            # time out: never after a COMMIT whose success the caller has
            # not heard yet.
            return None
        # (A torn snapshot there is not taken: snapshot.py.)
        return (self.SNAPSHOT_BEGIN, self.POLL, self._params(after_tid))

    def begin_and_poll(self, connmanager, conn, cursor, after_tid,
                       end_previous=False):
        statements = connmanager.snapshot_statements(self.POLL)
        params = self._params(after_tid)

        def begin(again):
            rollback = 'ROLLBACK; ' if end_previous or again else ''
            rows = run_batch(cursor, rollback + statements, params)[-1]
            return split_poll(rows)[0] is None, rows

        rows, torn = begin_whole(begin)
        connmanager.torn_snapshots += torn
        # (Still torn after the wait, logged: its last tid, as before the
        # chain.)
        return split_poll(row for row in rows if row[0] != TORN)

def _poll(table):
    # CHECK goes last: the column types of a UNION follow its first part.
    return f'{POLL.format(table=table)}\n    UNION ALL{CHECK}'


class HistoryPreservingPoller(_MySQLPoller):
    CHANGES = """
        SELECT zoid, tid FROM current_object WHERE tid > %s AND tid <= %s"""
    POLL = _poll('current_object')


class HistoryFreePoller(_MySQLPoller):
    CHANGES = """
        SELECT zoid, tid FROM object_state WHERE tid > %s AND tid <= %s"""
    POLL = _poll('object_state')
