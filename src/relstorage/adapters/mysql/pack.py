"""The SQL of packing for MySQL and MariaDB (the packer role).

Before 8.0.21 MySQL cannot turn ``[NOT] IN (SELECT ...)`` or ``[NOT]
EXISTS`` in a single-table DELETE into a semi-join (MySQL reference
manual, "Optimizing IN and EXISTS Subquery Predicates with Semijoin
Transformations"): the sub-query runs once per row of the table being
deleted from.  So every delete here is a multi-table DELETE joined against
the pack tables, or takes an IN list of constants (written out, as the
object mover's are), or (history-preserving object_state) is bounded to
one batch's key range, where a sub-query per row is a key lookup in the
batch's own small table.  The pack runs READ COMMITTED (begin_write), so its deletes
take no gap locks that an insert of a new object could wait for.  The
pack lock is a GET_LOCK named after the database, which the server
releases when the pack's session ends; on a Galera node, which keeps
GET_LOCK to itself (two packs through two nodes would both run), it is the
lease named ``pack`` instead (``PackLease``), which the cluster
replicates.  (Only MariaDB 10.11 was at hand to test.)
"""
from relstorage.adapters import lease
from relstorage.adapters.pack import HistoryFreeMixin
from relstorage.adapters.pack import HistoryPreservingMixin
from relstorage.adapters.pack import Packer


from .connection import ER_LOCK_DEADLOCK
from .connection import run_batch
from .drivers import error_number
from .objects import in_list

class PackLease(lease.PackLease):
    """The lease of a Galera cluster (see relstorage.adapters.lease)."""

    # Takes the row when it is free or expired, else leaves it alone.
    # MySQL assigns ON DUPLICATE KEY UPDATE's columns left to right: by the
    # second, ``holder`` is already the new one when the row was taken.
    TAKE = """
        INSERT INTO lease (name, holder, expires)
        VALUES (%s, %s, UNIX_TIMESTAMP() + %s)
        ON DUPLICATE KEY UPDATE
            holder = IF(expires < UNIX_TIMESTAMP(), VALUES(holder), holder),
            expires = IF(holder = VALUES(holder), VALUES(expires), expires)"""
    HELD = """
        SELECT holder, expires - UNIX_TIMESTAMP() FROM lease
        WHERE name = %s"""
    RENEW = """
        UPDATE lease SET expires = UNIX_TIMESTAMP() + %s
        WHERE name = %s AND holder = %s"""

    def _take_row(self, cursor):
        try:
            (((holder, remaining),),) = run_batch(
                cursor, f'{self.TAKE}; {self.HELD}',
                (self.NAME, self.holder, self.seconds, self.NAME))
        except self.connmanager.driver.Error as e:
            if error_number(e) != ER_LOCK_DEADLOCK:
                raise
            # Taken through another node of a Galera cluster at the
            # same moment: that one won.
            holder, remaining = None, self.seconds
        return holder, remaining


#: Rows per multi-row INSERT of references.
_REFS_PER_INSERT = 2000


class _MySQLPacker(Packer):

    PARAM = '%s'
    # TRUNCATE, not DELETE: InnoDB deletes row by row with undo records
    # (a million rows of pack_object took seconds).  It commits the
    # transaction it is in (DDL), and what follows in the same call of
    # _Session.write runs outside it, at the session's isolation level
    # (READ COMMITTED on a store connection today; it was REPEATABLE READ,
    # where an INSERT ... SELECT reads its source with shared next-key
    # locks: a FILL after the TRUNCATEs held 4.5 million on object_state
    # for the minute it ran, at 1,000,000 documents, and a committer
    # deadlocked with it in tpc_finish).  So the pipeline empties these
    # tables last in a transaction, or in one of their own.
    CLEAR_RUN = (
        'TRUNCATE pack_run',
        'TRUNCATE pack_object',
        'TRUNCATE pack_reached',
    )
    CLEAR_REFS = 'TRUNCATE object_ref'
    # Measured on MariaDB 10.11 (O_DIRECT, a 128 MB buffer pool), 200,000
    # documents packed, grown by 10 % (a third of the objects written):
    # FILL_SINCE read the 41,565 objects written since at about 63 us each
    # (a random page read each), FILL every revision in key order at about
    # 8 us a row (1.46 s against 2.8).  Past about a tenth, FILL.
    FILL_SINCE_SHARE = 0.1
    # InnoDB lists read-only snapshots too (trx_is_read_only); trx_started
    # has whole seconds (the caller allows for that).
    OLDEST_TRANSACTION = """
        SELECT UNIX_TIMESTAMP(MIN(t.trx_started))
        FROM information_schema.innodb_trx t
        JOIN information_schema.processlist p
          ON p.id = t.trx_mysql_thread_id
        WHERE p.db = DATABASE() AND t.trx_mysql_thread_id <> CONNECTION_ID()
          AND t.trx_mysql_thread_id NOT IN ({in_list})"""
    def _in(self, values):
        return in_list(values), []

    def try_lock(self, conn, cursor):
        if self.connmanager.galera:
            # Another pack's lease raises PackError, which says for how
            # long.
            return PackLease(self.connmanager).take()
        # A single server: GET_LOCK, which the server gives back the
        # moment the session ends (a pack killed with SIGKILL holds
        # nothing up).
        cursor.execute(
            "SELECT GET_LOCK(CONCAT('relstorage.pack.', DATABASE()), 0)")
        if cursor.fetchone()[0] != 1:
            return None

        def release():
            cursor.execute(
                "SELECT RELEASE_LOCK(CONCAT('relstorage.pack.', DATABASE()))")
        return release

    #: At the end of a batch, in one statement: the sessions waiting for
    #: a lock this session's transaction holds (MariaDB and MySQL 5.7:
    #: information_schema; MySQL 8: performance_schema), and where InnoDB's
    #: redo log stands (MariaDB's ``Innodb_lsn_current``, in bytes; MySQL
    #: has no such status variable: NULL, or an error where
    #: information_schema.GLOBAL_STATUS is gone, and the next form).  The
    #: waiters need the PROCESS privilege; without it, or where none of
    #: these tables exists, the throttle goes by commits.  The log's
    #: position sizes the batches as on PostgreSQL (relstorage.pack.
    #: throttle.LOG_TARGET): another client's commit flushes the redo
    #: written before its own, and a batch's redo stays in the log buffer
    #: until the batch commits or the server's once-a-second flush.
    #: Measured at 1,000,000 documents with a buffer pool that holds the
    #: database: the writer's p99 during the pack 21-22 ms instead of 26,
    #: the pack as fast; at the server's defaults (a 128 MB pool, where
    #: the writer waits for page reads) no gain and no loss
    #: (docs/performance.rst, "MariaDB with a buffer pool that holds the
    #: database").
    _WAITING = """(SELECT COUNT(*) FROM information_schema.innodb_lock_waits w
           JOIN information_schema.innodb_trx b
             ON b.trx_id = w.blocking_trx_id
           WHERE b.trx_mysql_thread_id = CONNECTION_ID())"""
    BATCH_END = (
        'SELECT ' + _WAITING + """,
           (SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS
            WHERE VARIABLE_NAME = 'INNODB_LSN_CURRENT')""",
        'SELECT ' + _WAITING + ', NULL',
        """SELECT COUNT(*), NULL FROM performance_schema.data_lock_waits w
           JOIN information_schema.innodb_trx b
             ON b.trx_id = w.blocking_engine_transaction_id
           WHERE b.trx_mysql_thread_id = CONNECTION_ID()""",
    )
    counts_waiters = True

    def waiters(self, cursor):
        return self.batch_end(cursor)[0]

    def batch_end(self, cursor):
        # (A failed statement does not end a MySQL transaction.)
        while self.BATCH_END:
            try:
                cursor.execute(self.BATCH_END[0])
                waiters, logged = cursor.fetchone()
            except self.connmanager.driver.Error:
                # Not here, or not allowed: the next form, for good.
                self.BATCH_END = self.BATCH_END[1:]
                continue
            return int(waiters), None if logged is None else int(logged)
        self.counts_waiters = False
        return None, None

    def oldest_transaction(self, cursor):
        own = in_list(sorted(self.connmanager.sessions or ())) or '0'
        cursor.execute(self.OLDEST_TRANSACTION.format(in_list=own))
        started = cursor.fetchone()[0]
        if started is None:
            return None
        # trx_started has whole seconds.  Taken as the end of its second:
        # rounding down would move every pack to "now" back by up to a
        # second whenever any client has a snapshot open (ZODB opens one
        # as each transaction ends), and leave what the last second
        # removed; the price is a window of under a second in which a
        # transaction that began just before a removal is taken to have
        # begun after it (docs/operations.rst).
        return float(started) + 0.999

    def add_refs(self, cursor, refs):
        # Written out: three ints a row (see objects.in_list).
        for start in range(0, len(refs), _REFS_PER_INSERT):
            values = ','.join(
                '(%d,%d,%d)' % row
                for row in refs[start:start + _REFS_PER_INSERT])
            cursor.execute(
                'INSERT INTO object_ref (zoid, tid, to_zoid) VALUES ' + values)

    def lock_garbage(self, cursor, zoids, pack_tid):
        # Lock (never waiting: SKIP LOCKED, MariaDB 10.6+ and MySQL 8) the
        # rows committers lock at vote; a locked one is being written, so
        # it is not garbage.
        in_text, _ = self._in(zoids)
        cursor.execute(self.LOCK_GARBAGE.format(in_list=in_text))
        return [row[0] for row in cursor.fetchall()]

    def _batch(self, cursor, rows):
        """Put ``rows``, ``(zoid, below, gone)`` in zoid order, into
        pack_batch (the session's own table): the batch's statements
        remove the revisions of each object older than ``below``, and
        ``gone`` ones whole.  Where they join it, it is read first
        (STRAIGHT_JOIN): every row they delete is then found by its key,
        and they lock nothing else.  A DELETE with an IN list was planned
        by InnoDB as a scan of the primary key on small tables (even with
        FORCE INDEX), and a deleting scan waits for every row a committer
        has locked, then holds what it deleted: a deadlock with a
        committer that writes an object this batch deletes (ZODB's
        PackNowWhileWriting on MariaDB 10.11 with PyMySQL).  (UPDATE reads
        locked rows semi-consistently in READ COMMITTED; DELETE does not.)

        The price: the server deletes the rows of a table that is not the
        first of a multi-table DELETE's join afterwards, each found again
        by its key.  Measured on MariaDB 10.11 (200,000 documents): 24 us
        a revision row, against 14 for a single-table DELETE over the
        batch's key range that looks each row's object up in pack_batch;
        in a whole pack, deletions of 18.7 s against 16.2.  That range
        holds objects outside the batch, whose rows such a DELETE reads
        and locks: history-preserving takes it for object_state, where no
        committer holds a row it did not insert (see
        HistoryPreservingPacker.delete_doomed); history-free, whose
        committers lock their objects' rows of object_state at vote, does
        not (with a committer that writes a garbage object it could
        deadlock).  Also measured there (2026-11-26), and not taken: for
        garbage, ``DELETE FROM object_state WHERE zoid IN (...)`` without a
        tid bound (equality ranges, which lock no row past their end)
        deleted at 15 us a row against 18 for the join, under load; for old
        revisions, ``(zoid = z AND tid < k) OR ...`` took 1 ms a pair at
        250 pairs a statement and was planned as a table scan at 1,000."""
        cursor.execute(_PACK_BATCH)
        cursor.execute('DELETE FROM pack_batch')
        for start in range(0, len(rows), _REFS_PER_INSERT):
            cursor.execute(
                'INSERT INTO pack_batch (zoid, below, gone) VALUES '
                + ','.join('(%d,%d,%d)' % (zoid, below, bool(gone))
                           for zoid, below, gone
                           in rows[start:start + _REFS_PER_INSERT]))

    def delete_garbage(self, cursor, zoids, pack_tid):
        zoids = self.lock_garbage(cursor, zoids, pack_tid)
        if zoids:
            self._batch(cursor, [(zoid, pack_tid + 1, True)
                                 for zoid in zoids])
            for statement in self.garbage_statements():
                cursor.execute(statement)
        return len(zoids)

    def reclaim_space(self, connmanager):
        conn = connmanager.connect()
        try:
            cursor = conn.cursor()
            # InnoDB rebuilds each table (ALTER TABLE ... FORCE) online:
            # writers go on, but the rebuild needs room for a second copy.
            tables = ('object_state', 'object_ref', 'object_blob',
                      'blob_chunk', 'transaction_log')
            if self.keep_history:
                tables += ('current_object',)
            cursor.execute('OPTIMIZE TABLE ' + ', '.join(tables))
            cursor.fetchall()
        finally:
            connmanager.close(conn, None)
        return 'OPTIMIZE TABLE'


#: The zoids of one deletion batch (see _MySQLPacker._batch).
_PACK_BATCH = """
    CREATE TEMPORARY TABLE IF NOT EXISTS pack_batch (
        zoid        BIGINT NOT NULL PRIMARY KEY,
        below       BIGINT NOT NULL,
        gone        BOOLEAN NOT NULL
    ) ENGINE = MEMORY"""

# The revisions of the batch's objects older than their bound: for garbage
# every one up to the pack tid, for a kept object those older than the
# kept one.
_DELETE_BELOW = """
    DELETE o FROM pack_batch b
    STRAIGHT_JOIN {table} o ON o.zoid = b.zoid
    WHERE o.tid < b.below"""

# The JSON mirror keeps no old revisions: only garbage has rows to lose.
_DELETE_MIRROR = """
    DELETE o FROM pack_batch b
    STRAIGHT_JOIN object_json o ON o.zoid = b.zoid
    WHERE b.gone AND o.tid < b.below"""


class HistoryPreservingPacker(HistoryPreservingMixin, _MySQLPacker):

    LOCK_GARBAGE = """
        SELECT zoid FROM current_object
        WHERE zoid IN ({in_list})
        FOR UPDATE SKIP LOCKED"""
    DELETE_MIRROR = _DELETE_MIRROR
    # object_state over the batch's key range, each row's bound looked up
    # in pack_batch (see delete_doomed).  (first zoid, last zoid)
    DELETE_STATE_RANGE = """
        DELETE FROM object_state
        WHERE zoid BETWEEN %s AND %s
          AND tid < (SELECT b.below FROM pack_batch b
                     WHERE b.zoid = object_state.zoid)"""
    DELETE_STATE = _DELETE_BELOW.format(table='object_state')
    DELETE_REST = tuple(_DELETE_BELOW.format(table=table) for table in (
        'object_ref', 'object_blob')) + (
        # A garbage object's current revision, the newest, is at or before
        # the pack tid: the statements before removed every revision, so
        # the object is gone.  (Its row is locked since lock_garbage: no
        # commit moved it meanwhile.  No join with object_state, whose
        # rows committers write.)
        """DELETE c FROM pack_batch b
           STRAIGHT_JOIN current_object c ON c.zoid = b.zoid
           WHERE b.gone AND c.tid < b.below""",
    )
    #: object_state goes over the batch's key range when the batch holds
    #: at least one object in RANGE_SPAN of the zoids the range spans
    #: (zoids are handed out in blocks, so that is about one object in
    #: RANGE_SPAN); a sparser batch (a later pack with few objects
    #: changed, all over the table) would read far more rows than it
    #: removes, and joins instead.
    RANGE_SPAN = 4

    def delete_doomed(self, cursor, rows, pack_tid):
        """Both kinds in one batch table: garbage (those lock_garbage
        could lock) below the pack tid + 1, kept objects below their kept
        revision.  object_state's rows go over the batch's key range
        (``_batch`` says what that saves).  Such a DELETE reads and locks
        every row of the range, other objects' too, and waits for those a
        committer holds; here that is only the new revisions a committer
        inserts in tpc_finish, after it took every lock it needs (its
        objects' rows of current_object at vote, the commit row at
        finish), so the wait is short and cannot close a circle; existing
        revisions are never written or locked by committers."""
        garbage = [zoid for zoid, _, gone in rows if gone]
        locked = set(self.lock_garbage(cursor, garbage, pack_tid)
                     if garbage else ())
        batch = [(zoid, pack_tid + 1, True) if gone
                 else (zoid, keep_tid, False)
                 for zoid, keep_tid, gone in rows
                 if not gone or zoid in locked]
        if not batch:
            return 0
        self._batch(cursor, batch)
        first, last = batch[0][0], batch[-1][0]
        if last - first < self.RANGE_SPAN * len(batch):
            cursor.execute(self.DELETE_STATE_RANGE, (first, last))
        else:
            cursor.execute(self.DELETE_STATE)
        for statement in self.DELETE_REST:
            cursor.execute(statement)
        if self.mirror_in_use:
            cursor.execute(self.DELETE_MIRROR)
        return len(batch)

    FINISH = (
        """DELETE t FROM transaction_log t
           LEFT JOIN object_state o ON o.tid = t.tid
           WHERE t.tid <= %s AND o.tid IS NULL""",
        """DELETE s FROM superseded_state s
           LEFT JOIN object_state o ON o.zoid = s.zoid AND o.tid = s.tid
           WHERE s.tid <= %s AND o.zoid IS NULL""",
    )


class HistoryFreePacker(HistoryFreeMixin, _MySQLPacker):

    LOCK_GARBAGE = """
        SELECT zoid FROM object_state
        WHERE zoid IN ({in_list})
        FOR UPDATE SKIP LOCKED"""
    DELETE_MIRROR = _DELETE_MIRROR
    DELETE_GARBAGE = tuple(_DELETE_BELOW.format(table=table) for table in (
        'object_state', 'object_ref', 'object_blob'))
