"""Object id allocation for MySQL (the OID allocator role): an
AUTO_INCREMENT table, one row per block of 100 ids."""
from relstorage.adapters.oids import OIDAllocator


class MySQLOIDAllocator(OIDAllocator):

    # Block n holds the ids (n - 1) * 100 + 1 .. n * 100.  Inserting the
    # block of ``oid`` moves AUTO_INCREMENT past it (params: block, ignored).
    ENSURE_ABOVE = 'INSERT IGNORE INTO new_oid (block) VALUES (%s)'

    def new_oids(self, cursor, blocks=1):
        # One block per call: the ids of a multi-row INSERT are consecutive
        # only in some innodb_autoinc_lock_mode settings.
        cursor.execute('INSERT INTO new_oid () VALUES ()')
        block = cursor.lastrowid
        if block % 100 == 0:
            # Keep the table small; AUTO_INCREMENT keeps counting.
            cursor.execute('DELETE FROM new_oid WHERE block < %s', (block,))
        first = (block - 1) * self.BLOCK + 1
        return list(range(first, first + self.BLOCK))

    def ensure_above(self, cursor, oid):
        cursor.execute(self.ENSURE_ABOVE, (oid // self.BLOCK + 1,))
