"""Shared default of the locker role for databases with row locks
(see interfaces.ILocker).

At vote the rows of the objects a transaction writes are locked for
update in oid order, then the rows of its read-current objects get shared
locks that fail at once (NOWAIT) when a concurrent committer holds them:
that failure is a ReadConflictError.  Both statements return the committed
tids of the rows they lock.  The commit lock at finish is the row lock of
``commit_row``.  A subclass supplies the statements and says which driver
error means "the lock was not available".
"""
import contextlib

from ZODB.POSException import ReadConflictError

from relstorage.adapters.interfaces import ILocker
from zope.interface import implementer


@implementer(ILocker)
class RowLocker:

    #: () -> last tid, the server's clock in seconds; locks commit_row.
    COMMIT_LOCK = None

    def __init__(self, connmanager):
        self.connmanager = connmanager

    def _lock_objects(self, cursor, oids, staged):
        """Lock the rows of ``oids`` (sorted) for update; ``{oid: tid}``.
        ``staged``: the staging table holds the oids too."""
        raise NotImplementedError

    def _lock_read_current(self, cursor, oids):
        """Share-lock the rows of ``oids`` (sorted) without waiting;
        ``{oid: tid}``."""
        raise NotImplementedError

    def _lock_refused(self, error):
        """True if the driver ``error`` says a NOWAIT lock was taken."""
        raise NotImplementedError

    def lock_for_vote(self, cursor, oids, read_current_oids, staged=True):
        if not read_current_oids:
            return (self._lock_objects(cursor, oids, staged) if oids
                    else {}), {}
        return self._lock_both(cursor, oids, read_current_oids, staged)

    def _lock_both(self, cursor, oids, read_current_oids, staged):
        """``lock_for_vote`` with read-current objects, in as few round
        trips as the database allows; by default one statement after the
        other."""
        locked = self._lock_objects(cursor, oids, staged) if oids else {}
        with self._refusal_is_conflict():
            current = self._lock_read_current(cursor, read_current_oids)
        return locked, current

    @contextlib.contextmanager
    def _refusal_is_conflict(self):
        """A read-current lock refused inside is a ReadConflictError."""
        try:
            yield
        except self.connmanager.driver.Error as e:
            if not self._lock_refused(e):
                raise
            raise ReadConflictError(
                'an object this transaction read with readCurrent is being '
                'changed by a concurrent commit') from e

    def hold_commit_lock(self, cursor):
        cursor.execute(self.COMMIT_LOCK)
        last_tid, now = cursor.fetchone()
        return last_tid, float(now)
