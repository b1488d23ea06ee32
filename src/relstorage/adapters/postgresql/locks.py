"""Commit locking for PostgreSQL (the locker role).

At vote, the rows of every object the transaction writes are locked
``FOR UPDATE`` in oid order (so two committers cannot deadlock each other),
then the rows of read-current objects ``FOR SHARE NOWAIT`` (a committer
about to change one makes the vote fail at once with ReadConflictError).
Row locks live in the rows, not in the shared lock table, so a transaction
of a million objects does not exhaust max_locks_per_transaction.

At finish, the commit lock is the row lock on ``commit_row``; it is held
only while the tid is chosen and the staged rows are moved into place.
Every wait is bounded by ``lock_timeout`` (commit-lock-timeout).
"""
from relstorage.adapters.locks import RowLocker

from .connection import LOCK_NOT_AVAILABLE
from .drivers import oid_array


class PostgreSQLLocker(RowLocker):

    LOCK_OBJECTS = None
    LOCK_READ_CURRENT = None
    # The lock, the last tid and the server's clock in one round trip.
    COMMIT_LOCK = """
        SELECT tid, EXTRACT(EPOCH FROM clock_timestamp())
        FROM commit_row WHERE id = 0
        FOR UPDATE"""

    def _lock_objects(self, cursor, oids, staged):
        cursor.execute(self.LOCK_OBJECTS, (oid_array(oids),))
        return dict(cursor.fetchall())

    def _lock_read_current(self, cursor, oids):
        cursor.execute(self.LOCK_READ_CURRENT, (oid_array(oids),))
        return dict(cursor.fetchall())

    def _lock_refused(self, error):
        return self.connmanager.driver.sqlstate(error) == LOCK_NOT_AVAILABLE


class HistoryPreservingLocker(PostgreSQLLocker):
    # The oids travel as an array: the staging table has no statistics,
    # and a join with it was planned as a scan of current_object, whose
    # cost grows with the database (seen with EXPLAIN ANALYZE at 21,000
    # objects: 4 ms for a one-object commit).
    LOCK_OBJECTS = """
        SELECT zoid, tid FROM current_object
        WHERE zoid = ANY(%s::bigint[])
        ORDER BY zoid
        FOR UPDATE"""
    LOCK_READ_CURRENT = """
        SELECT zoid, tid FROM current_object
        WHERE zoid = ANY(%s::bigint[])
        ORDER BY zoid
        FOR SHARE NOWAIT"""


class HistoryFreeLocker(PostgreSQLLocker):
    LOCK_OBJECTS = """
        SELECT zoid, tid FROM object_state
        WHERE zoid = ANY(%s::bigint[])
        ORDER BY zoid
        FOR UPDATE"""
    LOCK_READ_CURRENT = """
        SELECT zoid, tid FROM object_state
        WHERE zoid = ANY(%s::bigint[])
        ORDER BY zoid
        FOR SHARE NOWAIT"""
