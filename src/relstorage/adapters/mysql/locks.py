"""Commit locking for MySQL and MariaDB (the locker role).

At vote, the rows of every object the transaction writes are locked
``FOR UPDATE`` in primary-key order, then read-current rows get shared
locks with NOWAIT (MySQL 8: ``FOR SHARE NOWAIT``; MariaDB:
``LOCK IN SHARE MODE NOWAIT``), so a vote never waits behind a committer
that is about to change an object it relies on.  At finish, the commit
lock is the row lock on ``commit_row``: a row lock, not GET_LOCK, so that
it works on Galera clusters.  Every wait is bounded by
innodb_lock_wait_timeout (commit-lock-timeout); InnoDB deadlocks become
ConflictError.
"""
from ZODB.POSException import ReadConflictError

from relstorage.adapters.interfaces import ILocker
from zope.interface import implementer

from .connection import ER_LOCK_NOWAIT
from .connection import ER_LOCK_WAIT_TIMEOUT
from .drivers import error_number


@implementer(ILocker)
class MySQLLocker:

    LOCK_OBJECTS = None
    READ_CURRENT = None               # format with {in_list} and {share}
    # The lock, the last tid and the server's clock in one round trip.
    COMMIT_LOCK = """
        SELECT tid, UNIX_TIMESTAMP(SYSDATE(6))
        FROM commit_row WHERE id = 0
        FOR UPDATE"""

    def __init__(self, connmanager):
        self.connmanager = connmanager

    def lock_for_vote(self, cursor, oids, read_current_oids):
        cursor.execute(self.LOCK_OBJECTS)
        locked = dict(cursor.fetchall())
        if not read_current_oids:
            return locked, {}
        oids = list(read_current_oids)
        share = ('LOCK IN SHARE MODE NOWAIT' if self.connmanager.is_mariadb
                 else 'FOR SHARE NOWAIT')
        stmt = self.READ_CURRENT.format(
            in_list=', '.join(['%s'] * len(oids)), share=share)
        try:
            cursor.execute(stmt, oids)
            current = dict(cursor.fetchall())
        except self.connmanager.driver.Error as e:
            if error_number(e) not in (ER_LOCK_NOWAIT, ER_LOCK_WAIT_TIMEOUT):
                raise
            raise ReadConflictError(
                'an object this transaction read with readCurrent is being '
                'changed by a concurrent commit') from e
        return locked, current

    def hold_commit_lock(self, cursor):
        cursor.execute(self.COMMIT_LOCK)
        last_tid, now = cursor.fetchone()
        return last_tid, float(now)


class HistoryPreservingLocker(MySQLLocker):
    # STRAIGHT_JOIN drives the join from the (small) staging table, so
    # InnoDB locks by key lookups; a scan of current_object would lock, and
    # wait for, every row it passes.
    LOCK_OBJECTS = """
        SELECT c.zoid, c.tid FROM temp_store t
        STRAIGHT_JOIN current_object c ON c.zoid = t.zoid
        ORDER BY c.zoid
        FOR UPDATE"""
    READ_CURRENT = """
        SELECT zoid, tid FROM current_object
        WHERE zoid IN ({in_list})
        ORDER BY zoid
        {share}"""


class HistoryFreeLocker(MySQLLocker):
    LOCK_OBJECTS = """
        SELECT o.zoid, o.tid FROM temp_store t
        STRAIGHT_JOIN object_state o ON o.zoid = t.zoid
        ORDER BY o.zoid
        FOR UPDATE"""
    READ_CURRENT = """
        SELECT zoid, tid FROM object_state
        WHERE zoid IN ({in_list})
        ORDER BY zoid
        {share}"""
