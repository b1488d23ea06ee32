"""Object id allocation for MySQL (the OID allocator role): an
AUTO_INCREMENT table, one row per block of 100 ids."""
from relstorage.adapters.oids import OIDAllocator

from .connection import run_batch


class MySQLOIDAllocator(OIDAllocator):

    # ensure_above runs on the id pool's own connection (autocommit), not
    # in the commit's transaction: a row of new_oid written there stayed
    # locked until that transaction ended, and a restore batch
    # (zodbconvert) lasts seconds, so the pool's clean-up DELETE waited
    # for it (SKIP LOCKED did not see the lock of a row just inserted).
    # AUTO_INCREMENT does not go back at a rollback anyway.
    ensure_above_own_connection = True

    # Block n holds the ids (n - 1) * 100 + 1 .. n * 100.  Inserting the
    # block of ``oid`` moves AUTO_INCREMENT past it (params: block, ignored).
    ENSURE_ABOVE = 'INSERT IGNORE INTO new_oid (block) VALUES (%s)'

    def new_oids(self, cursor, blocks=1):
        # One single-row INSERT per block (the ids of a multi-row INSERT
        # are consecutive only in some innodb_autoinc_lock_mode settings),
        # all in one multi-statement round trip, each followed by the id
        # it got.
        numbers = [rows[0][0] for rows in run_batch(cursor, '; '.join(
            ['INSERT INTO new_oid () VALUES (); SELECT LAST_INSERT_ID()']
            * blocks))]
        highest = max(numbers)
        if highest // 100 != (highest - len(numbers)) // 100:
            # Keep the table small; AUTO_INCREMENT keeps counting.
            cursor.execute('DELETE FROM new_oid WHERE block < %s',
                           (highest,))
        oids = []
        for block in sorted(numbers):
            first = (block - 1) * self.BLOCK + 1
            oids.extend(range(first, first + self.BLOCK))
        return oids

    def ensure_above(self, cursor, oid):
        # Ids start at 1: the root's oid 0 is in no block (reserving block
        # 1 for it would waste ids 1-100).
        if oid >= 1:
            cursor.execute(self.ENSURE_ABOVE, ((oid - 1) // self.BLOCK + 1,))
