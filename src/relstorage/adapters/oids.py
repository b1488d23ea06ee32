"""Shared default of the OID allocator role (see interfaces.IOIDAllocator)."""
from relstorage.adapters.interfaces import IOIDAllocator
from zope.interface import implementer


@implementer(IOIDAllocator)
class OIDAllocator:

    #: How many oids one round trip reserves.
    BLOCK = 100

    #: (next_oid, oid): raise the counter to ``next_oid`` if it is at or
    #: below ``oid``.
    ENSURE_ABOVE = None
    #: True: ensure_above runs on a connection of its own, outside the
    #: commit's transaction (the id pool's).
    ensure_above_own_connection = False

    def new_oids(self, cursor, blocks=1):
        raise NotImplementedError

    def ensure_above(self, cursor, oid):
        cursor.execute(self.ENSURE_ABOVE, (oid + 1, oid))
