"""The SQL of packing for SQLite (the packer role).

SQLite has one writer at a time, so a deletion batch holds the database's
write lock while it runs (commits wait for it, at most the
commit-lock-timeout): the pack's duty cycle is what leaves them room.
There are no row locks to take, and no other session's transactions to
see (``oldest_transaction`` cannot tell).  The pack lock is an flock on a
file beside the database, released when the pack's process ends however
it ends.
"""
import fcntl
import os

from relstorage.adapters.pack import HistoryFreeMixin
from relstorage.adapters.pack import HistoryPreservingMixin
from relstorage.adapters.pack import Packer


class _SQLitePacker(Packer):
    # A commit during a batch waits for it (one writer at a time): the
    # throttle counts commits, without a watch (relstorage.pack.throttle).
    watches_commits = False

    def try_lock(self, conn, cursor):
        path = self.connmanager.path + '-pack.lock'
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        return lambda: os.close(fd)

    def reclaim_space(self, connmanager):
        conn = connmanager.connect()
        try:
            # VACUUM rewrites the file; it needs the write lock throughout.
            conn.execute('VACUUM')
        finally:
            conn.close()
        return 'VACUUM'


class HistoryPreservingPacker(HistoryPreservingMixin, _SQLitePacker):

    DELETE_GARBAGE = (
        'DELETE FROM object_state WHERE zoid IN ({in_list}) AND tid <= ?',
        'DELETE FROM object_ref WHERE zoid IN ({in_list}) AND tid <= ?',
        'DELETE FROM object_blob WHERE zoid IN ({in_list}) AND tid <= ?',
        # Its current revision is at or before the pack tid, and no
        # revision is left: the object is gone.
        """DELETE FROM current_object
           WHERE zoid IN ({in_list}) AND tid <= ?
             AND NOT EXISTS (SELECT 1 FROM object_state o
                             WHERE o.zoid = current_object.zoid)""",
    )
    DELETE_OLD = (
        'DELETE FROM object_state WHERE zoid = ? AND tid < ?',
        'DELETE FROM object_ref WHERE zoid = ? AND tid < ?',
        'DELETE FROM object_blob WHERE zoid = ? AND tid < ?',
    )


class HistoryFreePacker(HistoryFreeMixin, _SQLitePacker):

    DELETE_GARBAGE = (
        'DELETE FROM object_state WHERE zoid IN ({in_list}) AND tid <= ?',
        'DELETE FROM object_ref WHERE zoid IN ({in_list}) AND tid <= ?',
        'DELETE FROM object_blob WHERE zoid IN ({in_list}) AND tid <= ?',
    )
