"""Shared default of the poller role (see interfaces.IPoller)."""
from relstorage.adapters.interfaces import IPoller
from zope.interface import implementer

#: For a database where a round trip costs: the last tid (as the row of oid
#: -1) and what changed after ``%s`` up to it, in one statement that can
#: follow the snapshot's BEGIN in the same round trip.  ``{table}`` holds
#: the current tids.
POLL = """
    SELECT -1, tid FROM commit_row WHERE id = 0
    UNION ALL
    SELECT zoid, tid FROM {table}
    WHERE tid > %s AND tid <= (SELECT tid FROM commit_row WHERE id = 0)"""

#: POLL's parameter when no changes are wanted (the first poll).
NO_CHANGES = 2 ** 63 - 1

#: The oid of a row ``(TORN, n)`` in a poll's rows where a database can
#: show a snapshot a commit without the commits before it (MySQL's commit
#: chain, mysql/poll.py): ``n`` commits up to the last tid are missing.
TORN = -9


def split_poll(rows):
    """``(last_tid, changes)`` from the rows of POLL; ``(None, [])`` if
    the snapshot lacks a commit up to its last tid (a row ``(TORN, n)``
    with ``n`` above 0): it must be ended and another begun."""
    last, changes, torn = 0, [], False
    for oid, tid in rows:
        if oid == -1:
            last = tid
        elif oid == TORN:
            torn = tid > 0
        else:
            changes.append((oid, tid))
    return (None, []) if torn else (last, changes)


@implementer(IPoller)
class Poller:

    LAST_TID = None   # () -> tid
    CHANGES = None    # (after_tid, last_tid) -> oid, tid
    #: Statements (no parameters, no rows) that start a snapshot before
    #: ``POLL``; None where a snapshot cannot follow a commit's COMMIT in
    #: its round trip (poll_after_commit).
    SNAPSHOT_BEGIN = None
    POLL = None       # (after_tid or NO_CHANGES) -> rows for split_poll

    def last_tid(self, cursor):
        cursor.execute(self.LAST_TID)
        row = cursor.fetchone()
        return row[0] if row and row[0] is not None else 0

    def changes(self, cursor, after_tid, last_tid):
        cursor.execute(self.CHANGES, (after_tid, last_tid))
        return cursor.fetchall()

    def poll_after_commit(self, connmanager, after_tid):
        """See IPoller.poll_after_commit: None without SNAPSHOT_BEGIN."""
        if self.SNAPSHOT_BEGIN is None:
            return None
        return (self.SNAPSHOT_BEGIN, self.POLL,
                (NO_CHANGES if after_tid is None else after_tid,))

    def begin_and_poll(self, connmanager, conn, cursor, after_tid,
                       end_previous=False):
        if end_previous:
            connmanager.rollback(conn, cursor)
        connmanager.begin_snapshot(conn, cursor)
        last = self.last_tid(cursor)
        if after_tid is None or last <= after_tid:
            return last, []
        return last, self.changes(cursor, after_tid, last)
