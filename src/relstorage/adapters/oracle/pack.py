"""The SQL of packing for Oracle (the packer role).

The shared statements are written with ``?``; here each becomes a named
bind of its own (``:p1``, ``:p2``, ... in the order of the text), the
positional order the parameters come in.  What Oracle writes differently
is rewritten: the row-limiting clause (``FETCH FIRST n ROWS ONLY`` for
``LIMIT``), booleans (NUMBER(1) columns compared with 1, ``CASE`` where a
comparison is a value), and the deletions, which take IN lists of binds
(at most 500, under Oracle's 1000) that Oracle runs as index lookups.

The pack lock is the row lock of ``schema_version`` (``FOR UPDATE
NOWAIT``) held by a session of the pack's own until it ends: no privilege
beyond the schema's (DBMS_LOCK needs a grant), and the server releases it
when that session ends.  Readers never wait for a row lock in Oracle;
only a schema migration (which updates that row) waits for a pack.

Oracle lists no start time of the read-only snapshots other sessions hold
(a ``SET TRANSACTION READ ONLY`` transaction has no entry in
V$TRANSACTION until it writes), so ``oldest_transaction`` says nothing
(the adapter's capabilities say so too): pack to a time well before the
longest request (``docs/oracle.rst``).
"""
import functools
import logging
import re

from relstorage.adapters.pack import FORMAT
from relstorage.adapters.pack import HistoryFreeMixin
from relstorage.adapters.pack import HistoryPreservingMixin
from relstorage.adapters.pack import Packer

from .binds import in_binds
from .drivers import error_code

log = logging.getLogger(__name__)

_QUESTION = re.compile(r'\?')


_LIMIT = re.compile(r'\bLIMIT \?')


def numbered(statement):
    """``statement`` in Oracle's words: ``LIMIT ?`` as ``FETCH FIRST ? ROWS
    ONLY``, and each ``?`` replaced by ``:p1``, ``:p2``, ... (the
    statements contain no string literal with a question mark)."""
    statement = _LIMIT.sub('FETCH FIRST ? ROWS ONLY', statement)
    counter = iter(range(1, 1 << 16))
    return _QUESTION.sub(lambda m: f':p{next(counter)}', statement)



# Cached per statement, not per packer (a cache on the method would keep
# every packer alive).
_numbered = functools.lru_cache(maxsize=None)(numbered)

class _OraclePacker(Packer):

    MIRROR_IN_USE = 'SELECT 1 FROM object_json FETCH FIRST 1 ROWS ONLY'

    # Garbage skipped when a committer holds its row (see lock_garbage).
    LOCK_GARBAGE = None          # format with {in_list}
    DOOMED_GC = """
        SELECT p.zoid, p.keep_tid,
               CASE WHEN x.zoid IS NULL OR p.keep_null = 1 THEN 1 ELSE 0 END
        FROM pack_object p
        LEFT JOIN pack_reached x ON x.zoid = p.zoid AND x.zoid > ?
        WHERE p.zoid > ?
          AND (x.zoid IS NULL OR p.keep_null = 1 OR p.has_older = 1)
        ORDER BY p.zoid
        FETCH FIRST ? ROWS ONLY"""
    DOOMED_NO_GC = """
        SELECT zoid, keep_tid, keep_null
        FROM pack_object
        WHERE zoid > ? AND (keep_null = 1 OR has_older = 1)
        ORDER BY zoid
        FETCH FIRST ? ROWS ONLY"""
    COUNT_DOOMED_GC = """
        SELECT COUNT(*) FROM pack_object p
        LEFT JOIN pack_reached x ON x.zoid = p.zoid
        WHERE p.zoid > ?
          AND (x.zoid IS NULL OR p.keep_null = 1 OR p.has_older = 1)"""
    COUNT_DOOMED_NO_GC = """
        SELECT COUNT(*) FROM pack_object
        WHERE zoid > ? AND (keep_null = 1 OR has_older = 1)"""
    COUNT_GARBAGE_GC = """
        SELECT COUNT(*) FROM pack_object p
        LEFT JOIN pack_reached x ON x.zoid = p.zoid
        WHERE x.zoid IS NULL OR p.keep_null = 1"""
    COUNT_GARBAGE_NO_GC = (
        'SELECT COUNT(*) FROM pack_object WHERE keep_null = 1')
    COUNT_OLD_GC = """
        SELECT COUNT(*) FROM pack_object p
        JOIN pack_reached x ON x.zoid = p.zoid
        WHERE p.has_older = 1 AND p.keep_null = 0"""
    COUNT_OLD_NO_GC = """
        SELECT COUNT(*) FROM pack_object
        WHERE has_older = 1 AND keep_null = 0"""
    BROKEN_REFS = """
        SELECT r.zoid, r.to_zoid
        FROM pack_reached f
        JOIN pack_object p ON p.zoid = f.zoid
        JOIN object_ref r ON r.zoid = p.zoid AND r.tid = p.keep_tid
        LEFT JOIN pack_object q ON q.zoid = r.to_zoid
        WHERE q.zoid IS NULL OR q.keep_null = 1
        ORDER BY r.zoid, r.to_zoid
        FETCH FIRST ? ROWS ONLY"""
    PACK_LOCK = 'SELECT id FROM schema_version WHERE id = 0 FOR UPDATE NOWAIT'

    def _sql(self, statement):
        return _numbered(statement)

    def _in(self, values):
        return in_binds(values)

    # -- exclusion ---------------------------------------------------------

    def try_lock(self, conn, cursor):
        cm = self.connmanager
        holder = cm.connect()
        try:
            held = holder.cursor()
            try:
                held.execute(self.PACK_LOCK)
                held.fetchall()
            except cm.driver.Error as e:
                if error_code(e) in ('ORA-00054', 'ORA-30006'):
                    cm.close(holder, None)
                    return None
                raise
        except BaseException:
            cm.close(holder, None)
            raise

        def release():
            cm.close(holder, None)      # the rollback releases the row
        return release

    # -- booleans as 0 and 1 -------------------------------------------------

    def start_run(self, cursor, pack_tid, gc, refs_tid):
        self._run(cursor, self.START_RUN,
                  (FORMAT, pack_tid, int(bool(gc)), refs_tid))

    def stop_gc(self, cursor):
        self._run(cursor, self.STOP_GC, (0,))

    def done(self, cursor, run):
        self._run(cursor, self.DONE_RUN, (FORMAT, run.pack_tid,
                                          int(bool(run.gc)), run.refs_tid,
                                          run.objects))

    # -- deletion ----------------------------------------------------------

    def lock_garbage(self, cursor, zoids, pack_tid):
        # Lock, never waiting (SKIP LOCKED), the rows committers lock at
        # vote; a locked one is being written, so it is not garbage.
        locked = []
        for start in range(0, len(zoids), 500):
            text, params = in_binds(zoids[start:start + 500])
            cursor.execute(self.LOCK_GARBAGE.format(in_list=text), params)
            locked.extend(row[0] for row in cursor.fetchall())
        return locked

    # -- space -------------------------------------------------------------

    def reclaim_space(self, connmanager):
        """Shrink the tables that packing empties (online; needs row
        movement and a tablespace with automatic segment space
        management, the default)."""
        tables = ['object_state', 'object_ref', 'object_blob', 'blob_chunk']
        if self.keep_history:
            tables += ['transaction_log', 'current_object']
        conn = connmanager.connect()
        try:
            cursor = conn.cursor()
            for table in tables:
                try:
                    cursor.execute(f'ALTER TABLE {table} ENABLE ROW MOVEMENT')
                    cursor.execute(f'ALTER TABLE {table} SHRINK SPACE CASCADE')
                except connmanager.driver.Error as e:
                    log.warning('could not shrink %s: %s', table, e)
        finally:
            connmanager.close(conn, None)
        return 'ALTER TABLE ... SHRINK SPACE CASCADE'


#: Every revision up to the pack tid of one batch's objects.
_DELETE_GARBAGE = """
    DELETE FROM {table}
    WHERE zoid IN ({{in_list}}) AND tid <= ?"""

#: The revisions of one object older than the one kept.  (zoid, keep_tid)
_DELETE_OLD = 'DELETE FROM {table} WHERE zoid = ? AND tid < ?'


class HistoryPreservingPacker(HistoryPreservingMixin, _OraclePacker):

    FILL = """
        INSERT INTO pack_object (zoid, keep_tid, keep_null, has_older)
        SELECT zoid, MAX(tid),
               CASE WHEN MAX(CASE WHEN state IS NULL THEN tid END) = MAX(tid)
                    THEN 1 ELSE 0 END,
               CASE WHEN COUNT(*) > 1 THEN 1 ELSE 0 END
        FROM object_state
        WHERE tid <= ?
        GROUP BY zoid"""
    FILL_SINCE = """
        INSERT INTO pack_object (zoid, keep_tid, keep_null, has_older)
        SELECT zoid, tid, 0, 0
        FROM current_object
        WHERE tid <= ?
        UNION ALL
        SELECT s.zoid, MAX(s.tid),
               CASE WHEN MAX(CASE WHEN s.state IS NULL THEN s.tid END)
                         = MAX(s.tid) THEN 1 ELSE 0 END,
               CASE WHEN COUNT(*) > 1 THEN 1 ELSE 0 END
        FROM current_object c
        JOIN object_state s ON s.zoid = c.zoid
        WHERE c.tid > ? AND s.tid <= ?
        GROUP BY s.zoid"""
    UNPACKED = """
        SELECT tid FROM transaction_log
        WHERE tid <= ? AND packed = 0
        FETCH FIRST 1 ROWS ONLY"""
    MARK_PACKED = """
        UPDATE transaction_log SET packed = 1
        WHERE tid <= ? AND packed = 0"""
    LOCK_GARBAGE = """
        SELECT zoid FROM current_object
        WHERE zoid IN ({in_list})
        FOR UPDATE SKIP LOCKED"""
    DELETE_GARBAGE = tuple(_DELETE_GARBAGE.format(table=table) for table in (
        'object_state', 'object_ref', 'object_blob', 'current_object'))
    DELETE_OLD = tuple(_DELETE_OLD.format(table=table) for table in (
        'object_state', 'object_ref', 'object_blob'))


class HistoryFreePacker(HistoryFreeMixin, _OraclePacker):

    FILL = """
        INSERT INTO pack_object (zoid, keep_tid, keep_null, has_older)
        SELECT zoid, tid, CASE WHEN state IS NULL THEN 1 ELSE 0 END, 0
        FROM object_state
        WHERE tid <= ?"""
    LOCK_GARBAGE = """
        SELECT zoid FROM object_state
        WHERE zoid IN ({in_list})
        FOR UPDATE SKIP LOCKED"""
    DELETE_GARBAGE = tuple(_DELETE_GARBAGE.format(table=table) for table in (
        'object_state', 'object_ref', 'object_blob'))
