"""Commit locking for SQLite (the locker role).

SQLite has a single write lock for the whole database file.  Taking it at
vote makes it both the object locks and the commit lock: from vote to
finish no other process can commit, and readers are never blocked (WAL).
Pickles were staged in the connection's private temp table before the lock
is taken, so the lock covers conflict checks and publishing only.
"""
import time

from relstorage.adapters.interfaces import ILocker
from zope.interface import implementer


@implementer(ILocker)
class SQLiteLocker:

    def __init__(self, connmanager):
        self.connmanager = connmanager

    def lock_for_vote(self, cursor, oids, read_current_oids, staged=True):
        self.connmanager.begin_write(cursor, 'taking the commit lock')
        # Reading the tids is a separate query here either way; the
        # caller's default queries do it.
        return None, None

    def hold_commit_lock(self, cursor):
        # The lock is held since lock_for_vote.  SQLite runs in this
        # process, so its clock is ours.
        cursor.execute('SELECT tid FROM commit_row')
        return cursor.fetchone()[0], time.time()
