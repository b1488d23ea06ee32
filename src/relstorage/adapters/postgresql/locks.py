"""Commit locking for PostgreSQL (the locker role).

At vote, the rows of every object the transaction writes are locked
``FOR UPDATE`` in oid order (so two committers cannot deadlock each other),
then the rows of read-current objects ``FOR SHARE`` without waiting (a
committer about to change one makes the vote fail at once with
ReadConflictError), both in one statement.
Row locks live in the rows, not in the shared lock table, so a transaction
of a million objects does not exhaust max_locks_per_transaction.

At finish, the commit lock is the row lock on ``commit_row``; it is held
only while the tid is chosen and the staged rows are moved into place.
Every wait is bounded by ``lock_timeout`` (commit-lock-timeout).
"""
from ZODB.POSException import ReadConflictError
from ZODB.utils import p64

from relstorage.adapters.locks import RowLocker

from .drivers import oid_array


#: The rows written locked FOR UPDATE, then the read-current rows FOR
#: SHARE SKIP LOCKED, in one statement: the UNION ALL reads its first branch
#: to the end before the second (no parallel plan with row locks), so the
#: locks are taken in that order.  ``written`` says which rows are which.
_LOCK_BOTH = """
    WITH written AS (
        SELECT zoid, tid FROM {table}
        WHERE zoid = ANY(%s::bigint[])
        ORDER BY zoid
        FOR UPDATE),
    current AS (
        SELECT zoid, tid FROM {table}
        WHERE zoid = ANY(%s::bigint[])
        ORDER BY zoid
        FOR SHARE SKIP LOCKED)
    SELECT TRUE, zoid, tid FROM written
    UNION ALL
    SELECT FALSE, zoid, tid FROM current"""


class PostgreSQLLocker(RowLocker):

    LOCK_OBJECTS = None
    LOCK_BOTH = None
    # The lock, the last tid and the server's clock in one round trip.
    COMMIT_LOCK = """
        SELECT tid, EXTRACT(EPOCH FROM clock_timestamp())
        FROM commit_row WHERE id = 0
        FOR UPDATE"""

    def _lock_objects(self, cursor, oids, staged):
        cursor.execute(self.LOCK_OBJECTS, (oid_array(oids),))
        return dict(cursor.fetchall())

    def _lock_both(self, cursor, oids, read_current_oids, staged):
        # One statement: a shared lock refused at once would raise the same
        # SQLSTATE as a lock wait past lock_timeout, so the read-current
        # rows skip what they cannot lock, and a row missing says it.
        cursor.execute(self.LOCK_BOTH, (oid_array(oids),
                                        oid_array(read_current_oids)))
        locked, current = {}, {}
        for written, oid, tid in cursor.fetchall():
            (locked if written else current)[oid] = tid
        for oid in read_current_oids:
            if oid not in current:
                raise ReadConflictError(
                    'an object this transaction read with readCurrent is '
                    'being changed by a concurrent commit, or is gone',
                    oid=p64(oid))
        return locked, current


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
    LOCK_BOTH = _LOCK_BOTH.format(table='current_object')


class HistoryFreeLocker(PostgreSQLLocker):
    LOCK_OBJECTS = """
        SELECT zoid, tid FROM object_state
        WHERE zoid = ANY(%s::bigint[])
        ORDER BY zoid
        FOR UPDATE"""
    LOCK_BOTH = _LOCK_BOTH.format(table='object_state')
