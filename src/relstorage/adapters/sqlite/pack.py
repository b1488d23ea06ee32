"""The SQL of packing for SQLite (the packer role).  The helper tables are
TEMP tables: private to the pack's connection and dropped with it."""
from relstorage.adapters.pack import Packer


class _SQLitePacker(Packer):

    CREATE_HELPERS = (
        """CREATE TEMP TABLE IF NOT EXISTS pack_object (
               zoid        INTEGER PRIMARY KEY,
               keep_tid    INTEGER NOT NULL,
               keep_null   INTEGER NOT NULL,
               has_older   INTEGER NOT NULL
           )""",
        """CREATE TEMP TABLE IF NOT EXISTS pack_ref (
               zoid        INTEGER NOT NULL,
               to_zoid     INTEGER NOT NULL
           )""",
        'CREATE INDEX IF NOT EXISTS temp.pack_ref_zoid ON pack_ref (zoid)',
        """CREATE TEMP TABLE IF NOT EXISTS pack_garbage (
               zoid        INTEGER PRIMARY KEY
           )""",
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
        WHERE p.zoid > ? AND o.state IS NOT NULL
        ORDER BY p.zoid
        LIMIT ?"""
    NEWER_STATES = """
        SELECT zoid, tid, state FROM object_state
        WHERE tid > ? AND (zoid > ? OR (zoid = ? AND tid > ?))
        ORDER BY zoid, tid
        LIMIT ?"""
    ADD_REF = 'INSERT INTO pack_ref (zoid, to_zoid) VALUES (?, ?)'
    REFS_OF = 'SELECT to_zoid FROM pack_ref WHERE zoid IN ({in_list})'
    PACK_OIDS = """
        SELECT zoid, keep_null FROM pack_object
        WHERE zoid > ?
        ORDER BY zoid
        LIMIT ?"""
    ADD_GARBAGE = 'INSERT OR IGNORE INTO pack_garbage (zoid) VALUES (?)'
    GARBAGE = """
        SELECT zoid FROM pack_garbage
        WHERE zoid > ?
        ORDER BY zoid
        LIMIT ?"""


class HistoryPreservingPacker(_SQLitePacker):

    FILL = """
        INSERT INTO pack_object (zoid, keep_tid, keep_null, has_older)
        SELECT o.zoid, o.tid, o.state IS NULL, k.revisions > 1
        FROM (SELECT zoid, MAX(tid) AS tid, COUNT(*) AS revisions
              FROM object_state
              WHERE tid <= ?
              GROUP BY zoid) k
        JOIN object_state o ON o.zoid = k.zoid AND o.tid = k.tid"""
    DELETE_GARBAGE = (
        'DELETE FROM object_state WHERE zoid = ?1 AND tid <= ?2',
        'DELETE FROM object_blob WHERE zoid = ?1 AND tid <= ?2',
        # Its current revision is at or before the pack tid, and no
        # revision is left: the object is gone.
        """DELETE FROM current_object
           WHERE zoid = ?1 AND tid <= ?2
             AND NOT EXISTS (SELECT 1 FROM object_state o
                             WHERE o.zoid = ?1)""",
    )
    OLD_REVISIONS = """
        SELECT p.zoid, p.keep_tid
        FROM pack_object p
        LEFT JOIN pack_garbage g ON g.zoid = p.zoid
        WHERE p.zoid > ? AND p.has_older AND g.zoid IS NULL
        ORDER BY p.zoid
        LIMIT ?"""
    DELETE_OLD = 'DELETE FROM object_state WHERE zoid = ? AND tid < ?'
    DELETE_OLD_BLOBS = 'DELETE FROM object_blob WHERE zoid = ? AND tid < ?'
    FINISH = (
        'UPDATE transaction_log SET packed = 1 WHERE tid <= ? AND packed = 0',
        """DELETE FROM transaction_log
           WHERE tid <= ?1
             AND NOT EXISTS (SELECT 1 FROM object_state o
                             WHERE o.tid = transaction_log.tid)""",
        """DELETE FROM superseded_state
           WHERE tid <= ?1
             AND NOT EXISTS (SELECT 1 FROM object_state o
                             WHERE o.zoid = superseded_state.zoid
                               AND o.tid = superseded_state.tid)""",
    )


class HistoryFreePacker(_SQLitePacker):

    FILL = """
        INSERT INTO pack_object (zoid, keep_tid, keep_null, has_older)
        SELECT zoid, tid, state IS NULL, 0
        FROM object_state
        WHERE tid <= ?"""
    DELETE_GARBAGE = (
        'DELETE FROM object_state WHERE zoid = ? AND tid <= ?',
        'DELETE FROM object_blob WHERE zoid = ? AND tid <= ?',
    )
