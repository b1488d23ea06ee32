"""Read-ahead: which objects to load together with the one asked for.

When a loaded state refers to other objects (a BTree bucket, a folder), its
references are remembered as a *family* for the rest of the transaction.
The first member of a family that misses the caches is loaded alone (a
transaction that touches one child of a container loads nothing extra);
the second brings the members not loaded yet along, in one query.  The
storage does the loading (``RelStorage._read_ahead``); this module only
keeps the families.
"""
from ZODB.serialize import referencesf
from ZODB.utils import u64

#: Objects referring to more than this many others are not read ahead.
FAMILY_MAX = 256
#: At most this many children are remembered per transaction.
MEMORY = 100000


class Families:
    """The families of one storage instance's current transaction."""

    def __init__(self):
        self._families = {}     # child oid -> [siblings, misses]

    def __bool__(self):
        return bool(self._families)

    def clear(self):
        self._families.clear()

    def note(self, state):
        """Remember the objects ``state`` refers to as one family."""
        # Every persistent reference is pickled with the BINPERSID opcode
        # (b'Q'); most leaf objects have no such byte and skip the parse.
        if not state or b'Q' not in state:
            return
        refs = [u64(ref) for ref in referencesf(state)]
        if len(refs) < 2 or len(refs) > FAMILY_MAX:
            return
        families = self._families
        if len(families) + len(refs) > MEMORY:
            families.clear()
        family = [refs, 0]
        for ref in refs:
            families[ref] = family

    def siblings(self, oid):
        """The whole family of ``oid`` (forgotten from now on) if this is
        the second miss in it; None otherwise."""
        family = self._families.get(oid)
        if family is None:
            return None
        family[1] += 1
        if family[1] < 2:
            return None
        refs = family[0]
        for ref in refs:
            self._families.pop(ref, None)
        return refs
