"""The SQL of packing for MySQL (the packer role).

The helper tables are TEMPORARY tables of the pack's own session.  Before
8.0.21 MySQL cannot turn ``[NOT] IN (SELECT ...)`` or ``[NOT] EXISTS`` in a
single-table DELETE into a semi-join (MySQL reference manual, "Optimizing
IN and EXISTS Subquery Predicates with Semijoin Transformations"): the
sub-query runs once per row of the table being deleted from.  So every
delete here is a multi-table DELETE joined against the helper tables, or
takes an IN list of constants.  (Only MariaDB 10.11 was at hand to test;
the statements are the forms both servers plan well.)
"""
from relstorage.adapters.pack import Packer


class _MySQLPacker(Packer):

    PARAM = '%s'
    CREATE_HELPERS = (
        """CREATE TEMPORARY TABLE IF NOT EXISTS pack_object (
               zoid        BIGINT NOT NULL PRIMARY KEY,
               keep_tid    BIGINT NOT NULL,
               keep_null   BOOLEAN NOT NULL,
               has_older   BOOLEAN NOT NULL
           ) ENGINE = InnoDB""",
        """CREATE TEMPORARY TABLE IF NOT EXISTS pack_ref (
               zoid        BIGINT NOT NULL,
               to_zoid     BIGINT NOT NULL,
               KEY (zoid)
           ) ENGINE = InnoDB""",
        """CREATE TEMPORARY TABLE IF NOT EXISTS pack_garbage (
               zoid        BIGINT NOT NULL PRIMARY KEY
           ) ENGINE = InnoDB""",
    )
    CLEAR_HELPERS = (
        'DELETE FROM pack_object',
        'DELETE FROM pack_ref',
        'DELETE FROM pack_garbage',
    )
    KEPT_STATES = """
        SELECT p.zoid, o.state
        FROM pack_object p
        JOIN object_state o ON o.zoid = p.zoid AND o.tid = p.keep_tid
        WHERE p.zoid > %s AND o.state IS NOT NULL
        ORDER BY p.zoid
        LIMIT %s"""
    NEWER_STATES = """
        SELECT zoid, tid, state FROM object_state
        WHERE tid > %s AND (zoid > %s OR (zoid = %s AND tid > %s))
        ORDER BY zoid, tid
        LIMIT %s"""
    ADD_REF = 'INSERT INTO pack_ref (zoid, to_zoid) VALUES (%s, %s)'
    REFS_OF = 'SELECT to_zoid FROM pack_ref WHERE zoid IN ({in_list})'
    PACK_OIDS = """
        SELECT zoid, keep_null FROM pack_object
        WHERE zoid > %s
        ORDER BY zoid
        LIMIT %s"""
    ADD_GARBAGE = 'INSERT IGNORE INTO pack_garbage (zoid) VALUES (%s)'
    GARBAGE = """
        SELECT zoid FROM pack_garbage
        WHERE zoid > %s
        ORDER BY zoid
        LIMIT %s"""

    def _in(self, values):
        return ', '.join(['%s'] * len(values))

    def delete_garbage(self, cursor, zoids, pack_tid):
        # Lock (never waiting) the rows committers lock at vote, then
        # delete them one key at a time.  We hold the commit lock here, and
        # a committer that holds row locks from its vote waits for it: so
        # this must not wait for any row.  A DELETE with a long IN list is
        # planned by InnoDB as a scan of the primary key on small tables
        # (even with FORCE INDEX), and a locking scan waits for every
        # locked row it passes: a deadlock, seen with ZODB's
        # PackLotsWhileWriting test on MariaDB 10.11 (SHOW ENGINE INNODB
        # STATUS showed the DELETE waiting for a row outside its IN list).
        # An equality on the key is always a lookup.
        cursor.execute(self.LOCK_GARBAGE.format(in_list=self._in(zoids)),
                       list(zoids) + [pack_tid])
        locked = [row[0] for row in cursor.fetchall()]
        for stmt in self.DELETE_GARBAGE:
            cursor.executemany(stmt, [(zoid, pack_tid) for zoid in locked])

    def delete_old_revisions(self, cursor, rows):
        if self.DELETE_OLD is not None and rows:
            zoids = [zoid for zoid, _ in rows]
            for stmt in (self.DELETE_OLD, self.DELETE_OLD_BLOBS):
                cursor.execute(stmt.format(in_list=self._in(zoids)), zoids)


class HistoryPreservingPacker(_MySQLPacker):

    # SKIP LOCKED: MariaDB 10.6+ and MySQL 8.
    LOCK_GARBAGE = """
        SELECT zoid FROM current_object
        WHERE zoid IN ({in_list}) AND tid <= %s
        FOR UPDATE SKIP LOCKED"""

    FILL = """
        INSERT INTO pack_object (zoid, keep_tid, keep_null, has_older)
        SELECT o.zoid, o.tid, o.state IS NULL, k.revisions > 1
        FROM (SELECT zoid, MAX(tid) AS tid, COUNT(*) AS revisions
              FROM object_state
              WHERE tid <= %s
              GROUP BY zoid) k
        JOIN object_state o ON o.zoid = k.zoid AND o.tid = k.tid"""
    DELETE_GARBAGE = (
        'DELETE FROM object_state WHERE zoid = %s AND tid <= %s',
        'DELETE FROM object_blob WHERE zoid = %s AND tid <= %s',
        # The object's current revision is at or before the pack tid and
        # no revision is left: it is gone.  (A join, not NOT EXISTS.)
        """DELETE c FROM current_object c
           LEFT JOIN object_state o ON o.zoid = c.zoid
           WHERE c.zoid = %s AND c.tid <= %s AND o.zoid IS NULL""",
    )
    OLD_REVISIONS = """
        SELECT p.zoid, p.keep_tid
        FROM pack_object p
        LEFT JOIN pack_garbage g ON g.zoid = p.zoid
        WHERE p.zoid > %s AND p.has_older AND g.zoid IS NULL
        ORDER BY p.zoid
        LIMIT %s"""
    DELETE_OLD = """
        DELETE o FROM object_state o
        JOIN pack_object p ON p.zoid = o.zoid
        WHERE p.zoid IN ({in_list}) AND o.tid < p.keep_tid"""
    DELETE_OLD_BLOBS = """
        DELETE b FROM object_blob b
        JOIN pack_object p ON p.zoid = b.zoid
        WHERE p.zoid IN ({in_list}) AND b.tid < p.keep_tid"""
    FINISH = (
        'UPDATE transaction_log SET packed = TRUE WHERE tid <= %s AND NOT packed',
        """DELETE t FROM transaction_log t
           LEFT JOIN object_state o ON o.tid = t.tid
           WHERE t.tid <= %s AND o.tid IS NULL""",
        """DELETE s FROM superseded_state s
           LEFT JOIN object_state o ON o.zoid = s.zoid AND o.tid = s.tid
           WHERE s.tid <= %s AND o.zoid IS NULL""",
    )


class HistoryFreePacker(_MySQLPacker):

    LOCK_GARBAGE = """
        SELECT zoid FROM object_state
        WHERE zoid IN ({in_list}) AND tid <= %s
        FOR UPDATE SKIP LOCKED"""

    FILL = """
        INSERT INTO pack_object (zoid, keep_tid, keep_null, has_older)
        SELECT zoid, tid, state IS NULL, FALSE
        FROM object_state
        WHERE tid <= %s"""
    # The rows are locked and at or before the pack tid (LOCK_GARBAGE).
    # The rows are locked and at or before the pack tid (LOCK_GARBAGE).
    DELETE_GARBAGE = (
        'DELETE FROM object_state WHERE zoid = %s AND tid <= %s',
        'DELETE FROM object_blob WHERE zoid = %s AND tid <= %s',
    )