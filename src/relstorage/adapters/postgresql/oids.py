"""Object id allocation for PostgreSQL (the OID allocator role): a sequence
that steps by the block size."""
from relstorage.adapters.oids import OIDAllocator


class PostgreSQLOIDAllocator(OIDAllocator):

    # The sequence was created with INCREMENT BY 100 (= BLOCK).  setval(v)
    # makes the next block start at v + BLOCK, beyond ``oid``.
    ENSURE_ABOVE = """
        SELECT setval('zoid_seq', %s)
        WHERE (SELECT last_value FROM zoid_seq) <= %s"""

    def new_oids(self, cursor, blocks=1):
        # Several values of the sequence in one statement; each starts a
        # block (concurrent allocators may interleave theirs).
        cursor.execute(
            "SELECT nextval('zoid_seq') FROM generate_series(1, %s)",
            (blocks,))
        oids = []
        for (first,) in sorted(cursor.fetchall()):
            oids.extend(range(first, first + self.BLOCK))
        return oids
