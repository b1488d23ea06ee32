"""Commit locking for Oracle (the locker role).

At vote, the rows of every object the transaction writes are locked
``FOR UPDATE WAIT n`` (n: commit-lock-timeout in whole seconds); Oracle
has no shared row locks, so read-current rows are locked ``FOR UPDATE
NOWAIT``: a vote never waits behind a committer about to change an object
it relies on (two transactions that both read-current one object are a
ReadConflictError for the second, which the retry clears).  At finish the
commit lock is the row lock on ``commit_row``.  Deadlocks (ORA-00060)
become ConflictError.
"""
from relstorage.adapters.locks import RowLocker
from relstorage.adapters.objects import batched

from .binds import in_binds
from .drivers import error_code

#: The server's clock in seconds since the epoch (UTC), with microseconds.
EPOCH_SECONDS = """
    (CAST(SYS_EXTRACT_UTC(SYSTIMESTAMP) AS DATE) - DATE '1970-01-01') * 86400
    + MOD(EXTRACT(SECOND FROM SYSTIMESTAMP), 1)"""


class OracleLocker(RowLocker):

    #: How many oids one locking statement names.
    BATCH = 500
    LOCK_STAGED = None       # format with {wait}: the staged oids
    LOCK_LISTED = None       # format with {in_list}, {wait}
    READ_CURRENT = None      # format with {in_list}
    # The lock, the last tid and the server's clock in one round trip.
    COMMIT_LOCK = f"""
        SELECT tid, {EPOCH_SECONDS.strip()}
        FROM commit_row WHERE id = 0
        FOR UPDATE WAIT {{wait}}"""

    def _wait(self):
        return self.connmanager.wait_seconds

    def _lock_objects(self, cursor, oids, staged):
        if staged:
            cursor.execute(self.LOCK_STAGED.format(wait=self._wait()))
            return dict(cursor.fetchall())
        locked = {}
        for chunk in batched(oids, self.BATCH):
            text, params = in_binds(chunk)
            cursor.execute(self.LOCK_LISTED.format(
                in_list=text, wait=self._wait()), params)
            locked.update(cursor.fetchall())
        return locked

    def _lock_read_current(self, cursor, oids):
        current = {}
        for chunk in batched(oids, self.BATCH):
            text, params = in_binds(chunk)
            cursor.execute(self.READ_CURRENT.format(in_list=text), params)
            current.update(cursor.fetchall())
        return current

    def _lock_refused(self, error):
        return error_code(error) in ('ORA-00054', 'ORA-30006')

    def hold_commit_lock(self, cursor):
        cursor.execute(self.COMMIT_LOCK.format(wait=self._wait()))
        last_tid, now = cursor.fetchone()
        return last_tid, float(now)


class HistoryPreservingLocker(OracleLocker):
    LOCK_STAGED = """
        SELECT c.zoid, c.tid FROM current_object c
        WHERE c.zoid IN (SELECT t.zoid FROM temp_store t)
        ORDER BY c.zoid
        FOR UPDATE WAIT {wait}"""
    LOCK_LISTED = """
        SELECT zoid, tid FROM current_object
        WHERE zoid IN ({in_list})
        ORDER BY zoid
        FOR UPDATE WAIT {wait}"""
    READ_CURRENT = """
        SELECT zoid, tid FROM current_object
        WHERE zoid IN ({in_list})
        ORDER BY zoid
        FOR UPDATE NOWAIT"""


class HistoryFreeLocker(OracleLocker):
    LOCK_STAGED = """
        SELECT o.zoid, o.tid FROM object_state o
        WHERE o.zoid IN (SELECT t.zoid FROM temp_store t)
        ORDER BY o.zoid
        FOR UPDATE WAIT {wait}"""
    LOCK_LISTED = """
        SELECT zoid, tid FROM object_state
        WHERE zoid IN ({in_list})
        ORDER BY zoid
        FOR UPDATE WAIT {wait}"""
    READ_CURRENT = """
        SELECT zoid, tid FROM object_state
        WHERE zoid IN ({in_list})
        ORDER BY zoid
        FOR UPDATE NOWAIT"""
