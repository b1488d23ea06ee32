"""Object id allocation for Oracle (the OID allocator role): a sequence
that steps by the block size (INCREMENT BY 100, NOCACHE)."""
from relstorage.adapters.oids import OIDAllocator

#: Blocks taken one NEXTVAL at a time by ensure_above; a longer jump moves
#: the sequence with ALTER SEQUENCE instead.
STEP_LIMIT = 10000


class OracleOIDAllocator(OIDAllocator):

    # Moving the sequence is DDL (it commits by itself): on the id pool's
    # own connection, never inside a commit's transaction.
    ensure_above_own_connection = True

    NEW_OIDS = 'SELECT zoid_seq.NEXTVAL FROM dual CONNECT BY LEVEL <= :n'
    #: The next value the sequence gives (exact for a NOCACHE sequence).
    NEXT_VALUE = """
        SELECT last_number FROM user_sequences
        WHERE sequence_name = 'ZOID_SEQ'"""
    ALTER_INCREMENT = 'ALTER SEQUENCE zoid_seq INCREMENT BY {step:d}'
    NEXTVAL = 'SELECT zoid_seq.NEXTVAL FROM dual'

    def new_oids(self, cursor, blocks=1):
        # Several values of the sequence in one statement; each starts a
        # block (concurrent allocators may interleave theirs).
        cursor.execute(self.NEW_OIDS, (blocks,))
        oids = []
        for (first,) in sorted(cursor.fetchall()):
            oids.extend(range(first, first + self.BLOCK))
        return oids

    def ensure_above(self, cursor, oid):
        cursor.execute(self.NEXT_VALUE)
        upcoming = cursor.fetchone()[0]
        if upcoming > oid:
            return
        # Values upcoming, upcoming + BLOCK, ... up to the first above oid.
        blocks = (oid - upcoming) // self.BLOCK + 1
        if blocks <= STEP_LIMIT:
            cursor.execute(self.NEW_OIDS, (blocks,))
            cursor.fetchall()
            return
        # A long jump (a restore of far higher oids): one step of the
        # whole distance.  Another process's NEXTVAL in between takes a
        # value of the long step: ids skipped, none given twice.
        cursor.execute(self.ALTER_INCREMENT.format(
            step=blocks * self.BLOCK))
        try:
            cursor.execute(self.NEXTVAL)
            cursor.fetchall()
        finally:
            cursor.execute(self.ALTER_INCREMENT.format(step=self.BLOCK))
