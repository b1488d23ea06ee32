"""The SQL of packing for PostgreSQL (the packer role).

pack_run, pack_object and pack_reached are UNLOGGED (migration 0003): a
pack's analysis is not worth the WAL, and a crash empties all three
together, which the pack reads as "no analysis" and starts again.
References reach object_ref by binary COPY; lists of zoids travel as
arrays, so a batch is one statement whatever its size.  The pack lock is
a session advisory lock, which the server releases when the pack's
session ends, however it ends; behind a transaction pooler, where the
next statement may run in another session, it is the lease named
``pack`` (relstorage.adapters.lease).
"""
from relstorage.adapters import lease
from relstorage.adapters.interfaces import IPagePacker
from relstorage.adapters.pack import HistoryFreeMixin
from relstorage.adapters.pack import HistoryPreservingMixin
from relstorage.adapters.pack import Packer
from zope.interface import implementer

from .drivers import oid_array

#: The advisory lock key of packing (an arbitrary constant, 'RSPACK').
PACK_LOCK = 0x5253_5041_434b

#: A step of the walk from at least this many objects runs with hash
#: joins (see _PostgreSQLPacker.walk_step).
WALK_BIG_FRONTIER = 100_000


#: The server's clock, in whole seconds since the epoch (the lease's).
_NOW = 'EXTRACT(EPOCH FROM clock_timestamp())::BIGINT'


class PackLease(lease.PackLease):
    """The pack lock behind a transaction pooler (see
    relstorage.adapters.lease)."""

    # Takes the row when it is free or expired, else leaves it alone.
    TAKE = f"""
        INSERT INTO lease (name, holder, expires)
        VALUES (%s, %s, {_NOW} + %s)
        ON CONFLICT (name) DO UPDATE
            SET holder = excluded.holder, expires = excluded.expires
            WHERE lease.expires < {_NOW}"""
    HELD = f'SELECT holder, expires - {_NOW} FROM lease WHERE name = %s'
    RENEW = f"""
        UPDATE lease SET expires = {_NOW} + %s
        WHERE name = %s AND holder = %s"""

    def _take_row(self, cursor):
        # Two statements (psycopg 3 binds one at a time): taking the lease
        # is once a pack.
        cursor.execute(self.TAKE, (self.NAME, self.holder, self.seconds))
        cursor.execute(self.HELD, (self.NAME,))
        holder, remaining = cursor.fetchone()
        return holder, remaining


class _PostgreSQLPacker(Packer):

    PARAM = '%s'
    DELETE_MIRROR = ('DELETE FROM object_json WHERE zoid = ANY(%s) '
                     'AND tid <= %s')
    CLEAR_REFS = 'TRUNCATE object_ref'
    CLEAR_RUN = ('TRUNCATE pack_run, pack_object, pack_reached',)
    DROP_REFS = 'DELETE FROM object_ref WHERE zoid = ANY(%s)'
    RESCUE = """
        INSERT INTO pack_reached (zoid, depth)
        SELECT p.zoid, %s
        FROM pack_object p
        LEFT JOIN pack_reached x ON x.zoid = p.zoid
        WHERE p.zoid = ANY(%s) AND x.zoid IS NULL"""
    # Sessions of other clients of this database inside a transaction
    # (pg_stat_activity shows xact_start to superusers, the session's own
    # role and members of pg_read_all_stats; for other roles' sessions it
    # is NULL, and they are not seen).
    OLDEST_TRANSACTION = """
        SELECT EXTRACT(EPOCH FROM MIN(xact_start))
        FROM pg_stat_activity
        WHERE datname = current_database()
          AND pid <> pg_backend_pid()
          AND NOT (pid = ANY(%s))
          AND backend_type = 'client backend'
          AND xact_start IS NOT NULL"""

    #: The same behind a transaction pooler, where the sessions the driver
    #: knows are the pooler's: this process's snapshots are left out by
    #: server session and start (PostgreSQLConnectionManager.snapshots).
    #: Its other transactions (a commit's, the pack's own) count as
    #: others', which can only move the pack time back or make a
    #: history-free pack wait for them.
    OLDEST_TRANSACTION_POOLED = """
        SELECT EXTRACT(EPOCH FROM MIN(a.xact_start))
        FROM pg_stat_activity a
        WHERE a.datname = current_database()
          AND a.pid <> pg_backend_pid()
          AND a.backend_type = 'client backend'
          AND a.xact_start IS NOT NULL
          AND NOT EXISTS (
              SELECT 1 FROM unnest(%s::integer[], %s::bigint[])
                  AS own (pid, started)
              WHERE own.pid = a.pid
                AND own.started =
                    (EXTRACT(EPOCH FROM a.xact_start) * 1000000)::bigint)"""

    #: The pack lock is a PackLease (the adapter's transaction-pooler).
    lease_lock = False

    def try_lock(self, conn, cursor):
        if self.lease_lock:
            # Another pack's lease raises PackError, which says for how
            # long.
            return PackLease(self.connmanager).take()
        cursor.execute('SELECT pg_try_advisory_lock(%s)', (PACK_LOCK,))
        if not cursor.fetchone()[0]:
            return None

        def release():
            cursor.execute('SELECT pg_advisory_unlock(%s)', (PACK_LOCK,))
        return release

    #: The server's version (server_version_num), read by
    #: prepare_session.
    server_version = 0

    def prepare_session(self, cursor):
        cursor.execute("SELECT current_setting('server_version_num')::int")
        self.server_version = cursor.fetchone()[0]
        # No JIT compilation for the pack's session: its statements are
        # many short ones, which PostgreSQL 15 (jit on by default) may
        # estimate above jit_above_cost, and then compiles each time, on
        # the CPUs the writers need.  200,000 documents, deletions after
        # the same analysis: 9.3 s instead of 13.3 and 13.5, the analysis
        # unchanged within this machine's spread (5.6-5.8 s, 4.8-5.9 with
        # JIT).  Behind a transaction pooler a session setting would stay
        # with a server session of the pooler's: the database's or role's
        # own (ALTER ROLE ... SET jit = off) serves there.
        if not self.lease_lock:
            cursor.execute('SET jit = off')
            self._compress_wal(cursor)
            self._flush_early(cursor)

    #: What the pack's session writes to the server's files (the spill of
    #: the fill's grouping, pages it dirtied and has to give back) stays
    #: in the kernel's cache with backend_flush_after at its default of 0
    #: until the kernel writes it out, 30 seconds later on Linux, all at
    #: once: at 1,000,000 documents 450 MB, dirtied while pack_object was
    #: filled, went to the disk in one second during the deletions, and
    #: every other client's commit waited for its log's flush behind it
    #: (a second of commits of 30-240 ms, which set the writer's p99 of
    #: the pass by page: 21-41 ms, 13-17 with this setting;
    #: docs/performance.rst, "WAL-sized batches").  Asking the kernel to
    #: write as it goes spreads that out.  Left alone where the server or
    #: role sets it.
    FLUSH_AFTER = '256kB'

    def _flush_early(self, cursor):
        cursor.execute("SELECT current_setting('backend_flush_after')")
        if cursor.fetchone()[0] == '0':
            cursor.execute("SELECT set_config('backend_flush_after', %s, "
                           "false)", (self.FLUSH_AFTER,))

    #: Compresses the full-page images of the pack's session's WAL with
    #: lz4 where the server has it (PostgreSQL 15 and later, built with
    #: it), the role may set it (a superuser, or granted SET on it), and
    #: the server does not compress already.  The deletions' WAL is
    #: mostly page images, and other clients' commits wait for the log
    #: to reach the disk: at 1,000,000 documents, on copies of one
    #: database, 3,023 MB of WAL instead of 3,883-3,891 and 6 checkpoints
    #: instead of 8, a writer's p99 during the deletions 25.5-29.4 ms
    #: instead of 34.3-37.8 (docs/performance.rst, "The fill's spill, and
    #: the analysis paced").  Only the pack's own records are compressed.
    WAL_COMPRESSION = """
        SELECT s.setting = 'off'
               AND 'lz4' = ANY(s.enumvals)
               AND has_parameter_privilege('wal_compression', 'SET')
        FROM pg_settings s
        WHERE s.name = 'wal_compression'"""
    #: The first version that has lz4 for the WAL (and
    #: has_parameter_privilege).
    WAL_LZ4 = 150000

    def _compress_wal(self, cursor):
        if self.server_version < self.WAL_LZ4:
            return
        cursor.execute(self.WAL_COMPRESSION)
        row = cursor.fetchone()
        if row and row[0]:
            cursor.execute("SET wal_compression = 'lz4'")

    def walk_step(self, cursor, depth, frontier=None):
        # The pack's tables have no statistics (nothing analyses them; an
        # ANALYZE would also change the plans of the deletions that
        # follow), so PostgreSQL takes any step's frontier for a few
        # hundred rows and looks each of its objects up in pack_object,
        # object_ref and pack_reached by index: at 1,000,000 documents the
        # step from the 500,000 documents took 2.8 s to find nothing new.
        # Without nested loops it hashes instead: 1.1 s, and the walk 3.8-4
        # s against 5.5-5.6.  (ANALYZE of the three tables did as well,
        # 4.0-4.4 s.)  A small frontier keeps the index lookups.
        big = frontier is not None and frontier >= WALK_BIG_FRONTIER
        if big:
            cursor.execute('SET LOCAL enable_nestloop = off')
        count = super().walk_step(cursor, depth, frontier)
        if big:
            cursor.execute('SET LOCAL enable_nestloop = on')
        return count

    #: Sessions waiting for a lock this session's transaction holds (row
    #: locks included: a row's waiter waits for its transaction's lock),
    #: and where the WAL's insertion stands, in bytes.  No privilege
    #: needed (the pack runs on a primary).
    BATCH_END = """
        SELECT COUNT(*),
               pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::bigint
        FROM pg_stat_activity
        WHERE datname = current_database()
          AND pid <> pg_backend_pid()
          AND pg_backend_pid() = ANY(pg_blocking_pids(pid))"""
    counts_waiters = True

    def waiters(self, cursor):
        return self.batch_end(cursor)[0]

    def batch_end(self, cursor):
        cursor.execute(self.BATCH_END)
        waiters, logged = cursor.fetchone()
        return int(waiters), int(logged)

    def oldest_transaction(self, cursor):
        cm = self.connmanager
        if cm.transaction_pooler:
            cursor.execute(self.OLDEST_TRANSACTION_POOLED,
                           tuple(cm.own_snapshots()))
        else:
            cursor.execute(self.OLDEST_TRANSACTION,
                           (list(cm.sessions or ()),))
        started = cursor.fetchone()[0]
        return None if started is None else float(started)

    def drop_refs(self, cursor, zoids):
        if zoids:
            cursor.execute(self.DROP_REFS, (list(zoids),))

    def add_refs(self, cursor, refs):
        if refs:
            self.connmanager.driver.copy_in(
                cursor, 'object_ref', ('zoid', 'tid', 'to_zoid'), refs)

    def rescue(self, cursor, zoids, depth):
        if not zoids:
            return 0
        cursor.execute(self.RESCUE, (depth, list(set(zoids))))
        return cursor.rowcount

    def lock_garbage(self, cursor, zoids, pack_tid):
        cursor.execute(self.LOCK_GARBAGE, (list(zoids),))
        return [row[0] for row in cursor.fetchall()]

    def delete_garbage(self, cursor, zoids, pack_tid):
        zoids = self.lock_garbage(cursor, zoids, pack_tid)
        if zoids:
            for statement in self.garbage_statements():
                cursor.execute(statement, (zoids, pack_tid))
        return len(zoids)

    #: The planner settings of a deletion batch's transaction.  Each of
    #: its statements addresses the rows of the batch's objects by key (a
    #: few thousand objects at most): index lookups, whatever the tables'
    #: statistics say.  Without statistics (a database just filled, before
    #: autovacuum's ANALYZE, or with autovacuum off) PostgreSQL 15 took
    #: each object for 44,000 rows, and object_state whole instead (a hash
    #: join on a sequential scan): at 1,000,000 documents (3.2 million
    #: rows) DELETE_OLD for 20 objects took 1,076 ms against 0.3 with a
    #: nested loop over the primary key (EXPLAIN ANALYZE, 2026-11-28), and
    #: every batch, small or large, paid that scan.
    BATCH_PLAN = ('SET LOCAL enable_hashjoin = off; '
                  'SET LOCAL enable_mergejoin = off; '
                  'SET LOCAL enable_seqscan = off')

    def delete_doomed(self, cursor, rows, pack_tid):
        cursor.execute(self.BATCH_PLAN)
        return super().delete_doomed(cursor, rows, pack_tid)

    def delete_old_revisions(self, cursor, rows):
        if rows:
            params = ([zoid for zoid, _ in rows], [tid for _, tid in rows])
            for statement in self.DELETE_OLD:
                cursor.execute(statement, params)

    def reclaim_space(self, connmanager):
        conn = connmanager.connect()
        try:
            # Outside a transaction (autocommit).  Plain VACUUM marks the
            # space of removed rows reusable without locking out writers;
            # VACUUM FULL would give it back to the file system but holds
            # an exclusive lock on each table while it rewrites it.
            cursor = conn.cursor()
            cursor.execute('VACUUM (ANALYZE)')
        finally:
            connmanager.close(conn, None)
        return 'VACUUM (ANALYZE)'


# Deletions in batches, arrays of zoids and (zoid, keep_tid) pairs.
_DELETE_OLD = """
    DELETE FROM {table} o
    USING unnest(%s::bigint[], %s::bigint[]) AS k(zoid, keep_tid)
    WHERE o.zoid = k.zoid AND o.tid < k.keep_tid"""
# Garbage: every revision at or before the pack tid of the objects of an
# array.  A join with the array, not ``zoid = ANY(%s) AND tid <= %s``:
# without statistics PostgreSQL 15 planned that form, from 20 zoids on,
# as a scan of the tid index for ``tid <= pack tid``, which every row
# meets, and read the whole table for each batch: at 10,000,000 objects
# 20 s a batch of a few hundred garbage objects, against 5 ms for 500
# by key (EXPLAIN ANALYZE, 2026-11-29; tests/test_pack_plans.py).
_DELETE_GARBAGE = tuple(f"""
    DELETE FROM {table} o
    USING unnest(%s::bigint[]) AS g(zoid)
    WHERE o.zoid = g.zoid AND o.tid <= %s""" for table in (
    'object_state', 'object_ref', 'object_blob'))


# The revisions committed at one tid after a zoid, for the references'
# catch-up with what other clients committed during the pack (the
# portable TAIL_SAME).  Written as the portable one, PostgreSQL 15 on
# tables without statistics (a database just filled, or autovacuum off)
# takes ``tid = %s`` for 0.5 % of the rows and so walks the primary key
# from the zoid on, filtering on the tid, to find its page in zoid order:
# a cost that grows with the table.  At 10,000,000 objects each call read
# 576,000 buffers, 1.0 s (a parallel index scan), for the few rows a
# writer's commit leaves at a tid, or none; the pass by page, which
# catches up every few seconds (deletion.CATCH_UP_EVERY), went in bursts,
# 365 pages a second on average against 9,000 at a million, most likely
# because those reads slowed the writers the throttle waits for.  In a
# subquery the planner keeps (OFFSET 0) the rows of the tid are found
# first, through the index on tid, then sorted: 0.3 ms (EXPLAIN ANALYZE
# on that database, 2026-12-02; docs/performance.rst).
_TAIL_SAME = """
        SELECT {columns} FROM (
            SELECT {columns} FROM {table}
            WHERE tid = %s AND zoid > %s
            OFFSET 0) t
        ORDER BY zoid
        LIMIT %s"""


@implementer(IPagePacker)
class HistoryPreservingPacker(HistoryPreservingMixin, _PostgreSQLPacker):

    TAIL_SAME = f"""
        SELECT c.zoid, c.tid, o.state
        FROM ({_TAIL_SAME.format(columns='zoid, tid',
                                 table='current_object')}) c
        JOIN object_state o ON o.zoid = c.zoid AND o.tid = c.tid
        ORDER BY c.zoid"""

    # The kept revisions no longer current, in two steps: a page of the
    # objects changed after the pack tid, then those of them whose kept
    # revision has no references recorded.  As one statement (the
    # portable KEPT_UNANALYSED), without statistics on pack_object (just
    # filled) PostgreSQL 15 may walk pack_object in key order and read
    # each object's kept state, to find the few changed ones: at 200,000
    # documents that plan took 1.3 s against 0.05 for a hash join, and at
    # 1,000,000 the step took 5.1-7.7 s where it found nothing to read.
    # The changed objects come through current_object_tid, then sorted
    # (OFFSET 0 keeps the planner from walking the primary key in order
    # instead, reading every row: 70-100 ms at 200,000 documents against
    # 0.1).  Each page sorts all the changed objects after the last one:
    # cheap for the changes made since a pack time, which are few.
    KEPT_CHANGED = """
        SELECT zoid
        FROM (SELECT zoid FROM current_object
              WHERE tid > %s AND zoid > %s
              OFFSET 0) c
        ORDER BY zoid
        LIMIT %s"""
    KEPT_UNANALYSED_OF = """
        SELECT p.zoid, p.keep_tid, o.state
        FROM unnest(%s::bigint[]) AS c(zoid)
        JOIN pack_object p ON p.zoid = c.zoid
        JOIN object_state o ON o.zoid = p.zoid AND o.tid = p.keep_tid
        WHERE NOT EXISTS (SELECT 1 FROM object_ref r
                          WHERE r.zoid = p.zoid AND r.tid = p.keep_tid)
        ORDER BY p.zoid"""

    def kept_unanalysed(self, cursor, pack_tid, zoid, limit):
        while True:
            cursor.execute(self.KEPT_CHANGED, (pack_tid, zoid, limit))
            changed = [row[0] for row in cursor.fetchall()]
            if not changed:
                return []
            cursor.execute(self.KEPT_UNANALYSED_OF, (oid_array(changed),))
            rows = self._states(cursor)
            if rows:
                return rows
            # None of this page's needed reading: the next page.
            zoid = changed[-1]

    # pack_object's fill, as the portable FILL and FILL_SINCE, but with
    # whether a revision deletes its object worked out before the
    # grouping, in a subquery the planner keeps (OFFSET 0).  Written as
    # the portable one, PostgreSQL 15 carries each row whole, its state
    # included, into the grouping: a hash aggregate that outgrows work_mem
    # (a million objects do, at the default 4 MB) spills those rows to
    # temporary files in batches, and a sort for the grouping sorts them.
    # At 1,000,000 documents (3.2 million revisions, 2.4 GB) that was
    # 5.3 GB of temporary files written and 3.8 GB read, 13.4 s (a sort,
    # with statistics: 6.6 GB both ways, 13.0 s), the other clients'
    # commits waiting behind the disk meanwhile (a writer's p99 41-54 ms
    # during the fill, 18-19 during the references, 5-6 alone); with the
    # flag worked out first, 0.27 GB written, 5.5 s (5.9 with
    # statistics).  InnoDB and SQLite group in key order without a sort.
    FILL = """
        INSERT INTO pack_object (zoid, keep_tid, keep_null, has_older)
        SELECT zoid, MAX(tid),
               COALESCE(MAX(CASE WHEN gone THEN tid END) = MAX(tid), FALSE),
               COUNT(*) > 1
        FROM (SELECT zoid, tid, state IS NULL AS gone
              FROM object_state
              WHERE tid <= %s
              OFFSET 0) s
        GROUP BY zoid"""
    FILL_SINCE = """
        INSERT INTO pack_object (zoid, keep_tid, keep_null, has_older)
        SELECT zoid, tid, FALSE, FALSE
        FROM current_object
        WHERE tid <= %s
        UNION ALL
        SELECT zoid, MAX(tid),
               COALESCE(MAX(CASE WHEN gone THEN tid END) = MAX(tid), FALSE),
               COUNT(*) > 1
        FROM (SELECT s.zoid, s.tid, s.state IS NULL AS gone
              FROM current_object c
              JOIN object_state s ON s.zoid = c.zoid
              WHERE c.tid > %s AND s.tid <= %s
              OFFSET 0) s
        GROUP BY zoid"""

    LOCK_GARBAGE = """
        SELECT zoid FROM current_object WHERE zoid = ANY(%s)
        FOR UPDATE SKIP LOCKED"""
    DELETE_GARBAGE = _DELETE_GARBAGE + (
        # Its current revision is at or before the pack tid, and no
        # revision is left: the object is gone.
        """DELETE FROM current_object c
           USING unnest(%s::bigint[]) AS g(zoid)
           WHERE c.zoid = g.zoid AND c.tid <= %s
             AND NOT EXISTS (SELECT 1 FROM object_state o
                             WHERE o.zoid = c.zoid)""",
    )
    DELETE_OLD = tuple(_DELETE_OLD.format(table=table) for table in (
        'object_state', 'object_ref', 'object_blob'))

    # -- revisions by page -------------------------------------------------
    #
    # PostgreSQL keeps a table's rows where they were written, not in key
    # order (InnoDB does), so the revisions of one object lie wherever
    # each was committed: a BTree bucket changed in a thousand commits
    # has its revisions on a thousand pages.  Deleted by object, in zoid
    # order, revisions reach the same page again and again over the
    # pass, and each time after a checkpoint PostgreSQL logs the whole
    # page again (full_page_writes).  At 1,000,000 documents the
    # deletions wrote 6.1 GB of WAL for a 2.4 GB object_state (756,000
    # full-page images: each page 2.4 times; 4.5 GB of them by the
    # DELETEs, 1.2 GB by the pruning that reads do after them; with
    # max_wal_size 1 GB, eleven checkpoints in the pass): every commit of
    # another client waits for its share of that log to reach the disk,
    # and so does a replica.  So the revisions go first in the table's
    # physical order, a range of pages per batch (a TID range scan,
    # PostgreSQL 14 and later), each page changed in one batch: every
    # revision older than its object's kept one, of garbage and kept
    # objects alike (as by zoid, without locks: no commit writes them).
    # Then the pass by zoid over the garbage removes each garbage object
    # whole, as everywhere: its kept revision (one row each), its
    # current_object row.  A garbage object that a catch-up rescues
    # during the pass by page still has its kept revision.  Rows written
    # after the pack tid are never doomed, wherever they land; a row
    # moved by a concurrent VACUUM FULL to a page already passed stays,
    # an old revision left over, never a loss.
    #
    # Measured in docs/performance.rst ("Revisions by page").

    #: The first version of PostgreSQL with TID range scans.
    TID_RANGE_SCAN = 140000

    DOOMED_GARBAGE_GC = """
        SELECT p.zoid, p.keep_tid, 1
        FROM pack_object p
        LEFT JOIN pack_reached x ON x.zoid = p.zoid AND x.zoid > %s
        WHERE p.zoid > %s AND (x.zoid IS NULL OR p.keep_null)
        ORDER BY p.zoid
        LIMIT %s"""
    DOOMED_GARBAGE_NO_GC = """
        SELECT zoid, keep_tid, 1
        FROM pack_object
        WHERE zoid > %s AND keep_null
        ORDER BY zoid
        LIMIT %s"""
    COUNT_GARBAGE_AFTER_GC = """
        SELECT COUNT(*) FROM pack_object p
        LEFT JOIN pack_reached x ON x.zoid = p.zoid
        WHERE p.zoid > %s AND (x.zoid IS NULL OR p.keep_null)"""
    COUNT_GARBAGE_AFTER_NO_GC = """
        SELECT COUNT(*) FROM pack_object WHERE zoid > %s AND keep_null"""
    PAGES = ("SELECT pg_relation_size('object_state') / "
             "current_setting('block_size')::bigint")
    # The revisions on pages [first, end) older than their object's kept
    # one, with their references and blob rows (data-modifying WITH
    # queries always run to completion).
    DELETE_PAGES = """
        WITH gone AS (
            DELETE FROM object_state o
            USING pack_object p
            WHERE o.ctid >= %s::tid AND o.ctid < %s::tid
              AND p.zoid = o.zoid AND o.tid < p.keep_tid
            RETURNING o.zoid, o.tid),
        refs AS (
            DELETE FROM object_ref r USING gone g
            WHERE r.zoid = g.zoid AND r.tid = g.tid),
        blobs AS (
            DELETE FROM object_blob b USING gone g
            WHERE b.zoid = g.zoid AND b.tid = g.tid)
        SELECT COUNT(*) FROM gone"""

    def prepare_session(self, cursor):
        super().prepare_session(cursor)
        # (by_page: where the server scans a range of pages.)
        self.by_page = self.server_version >= self.TID_RANGE_SCAN

    def doomed(self, cursor, gc, after, limit):
        if not self.by_page:
            return super().doomed(cursor, gc, after, limit)
        if gc:
            cursor.execute(self.DOOMED_GARBAGE_GC, (after, after, limit))
        else:
            cursor.execute(self.DOOMED_GARBAGE_NO_GC, (after, limit))
        return [(zoid, keep_tid, True)
                for zoid, keep_tid, _ in cursor.fetchall()]

    def count_doomed(self, cursor, gc, after):
        if not self.by_page:
            return super().count_doomed(cursor, gc, after)
        cursor.execute(self.COUNT_GARBAGE_AFTER_GC if gc
                       else self.COUNT_GARBAGE_AFTER_NO_GC, (after,))
        return cursor.fetchone()[0]

    def pages(self, cursor):
        cursor.execute(self.PAGES)
        return cursor.fetchone()[0]

    def delete_pages(self, cursor, first, end):
        cursor.execute(self.BATCH_PLAN)
        cursor.execute(self.DELETE_PAGES, (f'({first},0)', f'({end},0)'))
        return cursor.fetchone()[0]


class HistoryFreePacker(HistoryFreeMixin, _PostgreSQLPacker):

    TAIL_SAME = _TAIL_SAME.format(columns='zoid, tid, state',
                                  table='object_state')

    LOCK_GARBAGE = """
        SELECT zoid FROM object_state WHERE zoid = ANY(%s)
        FOR UPDATE SKIP LOCKED"""
    DELETE_GARBAGE = _DELETE_GARBAGE
