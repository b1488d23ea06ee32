"""Read-ahead: which objects to load together with the one asked for.

When a loaded state refers to other objects (a BTree bucket, a folder), its
references are remembered as a *family* for the rest of the transaction.
The first member of a family that misses the caches is loaded alone (a
transaction that touches one child of a container loads nothing extra);
the second brings the members not loaded yet along, in one query.  The
storage does the loading (``RelStorage._read_ahead``); this module only
keeps the families.

A state served by the storage's cache names a family too: a bucket that
came in with its siblings is a cache hit when its turn comes, and its
items must still be read ahead.  Parsing the references of every hit
would tax warm reads, which never miss, so hits that may refer to others
are only queued (the last ``DEFERRED`` of them) and parsed at the next
miss.
"""
from collections import deque

from ZODB.serialize import referencesf
from ZODB.utils import u64

#: Objects referring to more than this many others are not read ahead.
FAMILY_MAX = 256
#: At most this many children are remembered per transaction.
MEMORY = 100000
#: How many cache hits with references wait for the next miss.  A miss is
#: usually a child of a container loaded a few loads before.
DEFERRED = 16


class Families:
    """The families of one storage instance's current transaction."""

    def __init__(self):
        self._families = {}     # child oid -> [siblings, misses]
        self._deferred = deque(maxlen=DEFERRED)

    def __bool__(self):
        return bool(self._families) or bool(self._deferred)

    def clear(self):
        self._families.clear()
        self._deferred.clear()

    def note_later(self, state):
        """Remember ``state``'s family when the next miss asks (a cache
        hit: most never will)."""
        if state and b'Q' in state:
            self._deferred.append(state)

    def note(self, state):
        """Remember the objects ``state`` refers to as one family."""
        # Every persistent reference is pickled with the BINPERSID opcode
        # (b'Q'); most leaf objects have no such byte and skip the parse.
        if not state or b'Q' not in state:
            return
        try:
            refs = [u64(ref) for ref in referencesf(state)]
        except Exception:
            # Not a pickle ZODB's reference scanner can read (an
            # application may store any bytes): nothing to read ahead.
            return
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
        deferred = self._deferred
        while deferred:
            self.note(deferred.popleft())
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
