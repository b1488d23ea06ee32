"""Object id allocation for SQLite (the OID allocator role)."""
from relstorage.adapters.oids import OIDAllocator


class SQLiteOIDAllocator(OIDAllocator):

    ENSURE_ABOVE = (
        'UPDATE oid_counter SET next_oid = ? WHERE next_oid <= ?')

    def __init__(self, connmanager):
        self.connmanager = connmanager

    def new_oids(self, cursor, blocks=1):
        cm = self.connmanager
        # This small commit need not wait for fsync: an oid only matters
        # once a commit that stores it is durable, and that commit syncs
        # the write-ahead log, with this commit's frames before it.  Lost
        # in a crash before that, the block was never used.
        cursor.execute('PRAGMA synchronous = OFF')
        cm.begin_write(cursor, 'allocating object ids')
        try:
            cursor.execute('SELECT next_oid FROM oid_counter')
            first = cursor.fetchone()[0]
            cursor.execute('UPDATE oid_counter SET next_oid = ?',
                           (first + self.BLOCK * blocks,))
            cursor.execute('COMMIT')
        except BaseException:
            cm.rollback(cursor.connection, cursor)
            raise
        return list(range(first, first + self.BLOCK * blocks))
