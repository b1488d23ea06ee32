"""The SQL of packing for PostgreSQL (the packer role).

The helper tables are TEMP tables of the pack's own session.  Deletions
take whole batches as arrays, and references reach pack_ref by COPY, so a
batch is one round trip, not one per object.
"""
from relstorage.adapters.pack import Packer


class _PostgreSQLPacker(Packer):

    PARAM = '%s'
    CREATE_HELPERS = (
        """CREATE TEMP TABLE IF NOT EXISTS pack_object (
               zoid        BIGINT PRIMARY KEY,
               keep_tid    BIGINT NOT NULL,
               keep_null   BOOLEAN NOT NULL,
               has_older   BOOLEAN NOT NULL
           )""",
        """CREATE TEMP TABLE IF NOT EXISTS pack_ref (
               zoid        BIGINT NOT NULL,
               to_zoid     BIGINT NOT NULL
           )""",
        'CREATE INDEX IF NOT EXISTS pack_ref_zoid ON pack_ref (zoid)',
        """CREATE TEMP TABLE IF NOT EXISTS pack_garbage (
               zoid        BIGINT PRIMARY KEY
           )""",
    )
    CLEAR_HELPERS = ('TRUNCATE pack_object, pack_ref, pack_garbage',)
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
    REFS_OF = 'SELECT to_zoid FROM pack_ref WHERE zoid = ANY(%s)'
    PACK_OIDS = """
        SELECT zoid, keep_null FROM pack_object
        WHERE zoid > %s
        ORDER BY zoid
        LIMIT %s"""
    ADD_GARBAGE = """
        INSERT INTO pack_garbage (zoid) SELECT unnest(%s::bigint[])
        ON CONFLICT DO NOTHING"""
    GARBAGE = """
        SELECT zoid FROM pack_garbage
        WHERE zoid > %s
        ORDER BY zoid
        LIMIT %s"""

    def __init__(self, driver):
        self.driver = driver

    def add_refs(self, cursor, refs):
        if refs:
            self.driver.copy_in(cursor, 'pack_ref', ('zoid', 'to_zoid'), refs)

    def refs_of(self, cursor, zoids):
        cursor.execute(self.REFS_OF, (list(zoids),))
        return [row[0] for row in cursor.fetchall()]

    def add_garbage(self, cursor, zoids):
        if zoids:
            cursor.execute(self.ADD_GARBAGE, (list(zoids),))

    def delete_garbage(self, cursor, zoids, pack_tid):
        cursor.execute(self.LOCK_GARBAGE, (list(zoids),))
        zoids = [row[0] for row in cursor.fetchall()]
        if not zoids:
            return
        for stmt in self.DELETE_GARBAGE:
            cursor.execute(stmt, (zoids, pack_tid))

    def delete_old_revisions(self, cursor, rows):
        if self.DELETE_OLD is not None and rows:
            params = ([zoid for zoid, _ in rows], [tid for _, tid in rows])
            cursor.execute(self.DELETE_OLD, params)
            cursor.execute(self.DELETE_OLD_BLOBS, params)


class HistoryPreservingPacker(_PostgreSQLPacker):

    LOCK_GARBAGE = """
        SELECT zoid FROM current_object WHERE zoid = ANY(%s)
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
        'DELETE FROM object_state WHERE zoid = ANY(%s) AND tid <= %s',
        'DELETE FROM object_blob WHERE zoid = ANY(%s) AND tid <= %s',
        # Its current revision is at or before the pack tid, and no
        # revision is left: the object is gone.
        """DELETE FROM current_object c
           WHERE c.zoid = ANY(%s) AND c.tid <= %s
             AND NOT EXISTS (SELECT 1 FROM object_state o
                             WHERE o.zoid = c.zoid)""",
    )
    OLD_REVISIONS = """
        SELECT p.zoid, p.keep_tid
        FROM pack_object p
        LEFT JOIN pack_garbage g ON g.zoid = p.zoid
        WHERE p.zoid > %s AND p.has_older AND g.zoid IS NULL
        ORDER BY p.zoid
        LIMIT %s"""
    DELETE_OLD = """
        DELETE FROM object_state o
        USING unnest(%s::bigint[], %s::bigint[]) AS k(zoid, keep_tid)
        WHERE o.zoid = k.zoid AND o.tid < k.keep_tid"""
    DELETE_OLD_BLOBS = """
        DELETE FROM object_blob b
        USING unnest(%s::bigint[], %s::bigint[]) AS k(zoid, keep_tid)
        WHERE b.zoid = k.zoid AND b.tid < k.keep_tid"""
    FINISH = (
        'UPDATE transaction_log SET packed = TRUE WHERE tid <= %s AND NOT packed',
        """DELETE FROM transaction_log t
           WHERE t.tid <= %s
             AND NOT EXISTS (SELECT 1 FROM object_state o
                             WHERE o.tid = t.tid)""",
        """DELETE FROM superseded_state s
           WHERE s.tid <= %s
             AND NOT EXISTS (SELECT 1 FROM object_state o
                             WHERE o.zoid = s.zoid AND o.tid = s.tid)""",
    )


class HistoryFreePacker(_PostgreSQLPacker):

    LOCK_GARBAGE = """
        SELECT zoid FROM object_state WHERE zoid = ANY(%s)
        FOR UPDATE SKIP LOCKED"""

    FILL = """
        INSERT INTO pack_object (zoid, keep_tid, keep_null, has_older)
        SELECT zoid, tid, state IS NULL, FALSE
        FROM object_state
        WHERE tid <= %s"""
    DELETE_GARBAGE = (
        'DELETE FROM object_state WHERE zoid = ANY(%s) AND tid <= %s',
        'DELETE FROM object_blob WHERE zoid = ANY(%s) AND tid <= %s',
    )
