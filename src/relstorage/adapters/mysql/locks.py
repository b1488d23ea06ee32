"""Commit locking for MySQL and MariaDB (the locker role).

At vote, the rows of every object the transaction writes are locked
``FOR UPDATE`` in primary-key order, then read-current rows get shared
locks with NOWAIT (MySQL 8: ``FOR SHARE NOWAIT``; MariaDB:
``LOCK IN SHARE MODE NOWAIT``), a second statement of the same batch and
round trip, so that a vote never waits behind a committer
that is about to change an object it relies on.  At finish, the commit
lock is the row lock on ``commit_row``: a row lock, not GET_LOCK, so that
it works on Galera clusters.  Every wait is bounded by
innodb_lock_wait_timeout (commit-lock-timeout); InnoDB deadlocks become
ConflictError.
"""
from relstorage.adapters.locks import RowLocker

from .connection import ER_LOCK_NOWAIT
from .connection import ER_LOCK_WAIT_TIMEOUT
from .drivers import error_number
from .objects import in_list


class MySQLLocker(RowLocker):

    LOCK_OBJECTS = None               # joins temp_store
    LOCK_LISTED = None                # format with {in_list}
    READ_CURRENT = None               # format with {in_list} and {share}
    # The lock, the last tid and the server's clock in one round trip.
    COMMIT_LOCK = """
        SELECT tid, UNIX_TIMESTAMP(SYSDATE(6))
        FROM commit_row WHERE id = 0
        FOR UPDATE"""

    def _lock_objects_sql(self, oids, staged):
        if staged:
            # The staged rows are the oids: the statement joins temp_store.
            return self.LOCK_OBJECTS
        # A small commit that did not stage its rows (at most inline_limit
        # oids).
        return self.LOCK_LISTED.format(in_list=in_list(oids))

    def _read_current_sql(self, oids):
        share = ('LOCK IN SHARE MODE NOWAIT' if self.connmanager.is_mariadb
                 else 'FOR SHARE NOWAIT')
        return self.READ_CURRENT.format(in_list=in_list(list(oids)),
                                        share=share)

    def _lock_objects(self, cursor, oids, staged):
        cursor.execute(self._lock_objects_sql(oids, staged))
        return dict(cursor.fetchall())

    def _lock_read_current(self, cursor, oids):
        cursor.execute(self._read_current_sql(oids))
        return dict(cursor.fetchall())

    def _lock_both(self, cursor, oids, read_current_oids, staged):
        if not oids:
            return super()._lock_both(cursor, oids, read_current_oids, staged)
        # Both statements in one round trip; a refused shared lock is the
        # second statement's error, raised when its result is reached.
        cursor.execute(f'{self._lock_objects_sql(oids, staged)}; '
                       f'{self._read_current_sql(read_current_oids)}')
        locked = dict(cursor.fetchall())
        with self._refusal_is_conflict():
            cursor.nextset()
        return locked, dict(cursor.fetchall())

    def _lock_refused(self, error):
        return error_number(error) in (ER_LOCK_NOWAIT, ER_LOCK_WAIT_TIMEOUT)


class HistoryPreservingLocker(MySQLLocker):
    # STRAIGHT_JOIN drives the join from the (small) staging table, so
    # InnoDB locks by key lookups; a scan of current_object would lock, and
    # wait for, every row it passes.
    LOCK_OBJECTS = """
        SELECT c.zoid, c.tid FROM temp_store t
        STRAIGHT_JOIN current_object c ON c.zoid = t.zoid
        ORDER BY c.zoid
        FOR UPDATE"""
    LOCK_LISTED = """
        SELECT zoid, tid FROM current_object
        WHERE zoid IN ({in_list})
        ORDER BY zoid
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
    LOCK_LISTED = """
        SELECT zoid, tid FROM object_state
        WHERE zoid IN ({in_list})
        ORDER BY zoid
        FOR UPDATE"""
    READ_CURRENT = """
        SELECT zoid, tid FROM object_state
        WHERE zoid IN ({in_list})
        ORDER BY zoid
        {share}"""
