"""Object id allocation for PostgreSQL (the OID allocator role): a sequence
that steps by the block size."""
from relstorage.adapters.oids import OIDAllocator


class PostgreSQLOIDAllocator(OIDAllocator):

    # The sequence was created with INCREMENT BY 100 (= BLOCK).  setval(v)
    # makes the next block start at v + BLOCK, beyond ``oid``.
    ENSURE_ABOVE = """
        SELECT setval('zoid_seq', %s)
        WHERE (SELECT last_value FROM zoid_seq) <= %s"""

    def new_oids(self, cursor):
        cursor.execute("SELECT nextval('zoid_seq')")
        first = cursor.fetchone()[0]
        return list(range(first, first + self.BLOCK))
