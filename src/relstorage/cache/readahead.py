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

An application that reads a few scattered objects (a request looking up
keys in a BTree) misses twice in many a bucket without wanting the rest of
it: reading ahead there loads rows nobody asks for.  So the misses a
family needs before it is read ahead depend on how much of what was read
ahead for its kind of container (the class of the object whose
references make the family) was asked for in the same transaction
(``Usefulness``): two while at least half of it was, then four, then
eight.  A process learns per class: the items of BTree buckets read in
key order keep two; looked up at random they soon need eight, which a
bucket rarely sees, while the buckets under a BTree node, most of which a
random sample reaches, keep being read ahead.
"""
import pickletools
import re
import struct
from collections import deque

from relstorage.tids import MAX_ID

#: Objects referring to more than this many others are not read ahead.
#: The internal nodes of BTrees are the families that matter most: an
#: OOBTree's node (max_internal_size 250) was seen with 333 children, an
#: IOBTree's may hold 500 and more.  With 256, the buckets under a node of
#: 333 were never read ahead: a cold lookup of 500 random keys among
#: 10,000 objects took 1.75 round trips a key (a bucket, then the item)
#: and 80-97 ms on PostgreSQL on loopback; with the node's buckets read
#: ahead at the second miss, 1.02 and 58-61 ms.  A family that large read
#: ahead for nothing teaches ``Usefulness`` to wait for more misses.
FAMILY_MAX = 1024
#: At most this many children are remembered per transaction.
MEMORY = 100000
#: How many cache hits with references wait for the next miss.  A miss is
#: usually a child of a container loaded a few loads before.
DEFERRED = 16
#: (share of read-ahead rows asked for, misses a family needs): the first
#: level whose share is reached applies.
LEVELS = ((0.5, 2), (0.25, 4), (0.0, 8))
#: Rows read ahead for a kind of container before its share counts.
EVIDENCE = 64
#: Past this many rows read ahead for a kind, its counts are halved: what
#: the application did lately weighs most.
HORIZON = 4096


#: An oid in a persistent reference as ZODB pickles it: 8 bytes as
#: SHORT_BINBYTES (protocol 3), or SHORT_BINSTRING (protocol 2, databases
#: written by Python 2; tried when the first finds none in a record that
#: is not protocol 3).  Scanning for it is ten times faster than ZODB's
#: ``referencesf``, which unpickles (10 us against 1 us for a bucket of
#: 16 items); one pattern per opcode, since a pattern that starts with a
#: literal byte is searched for as a string while a class of two bytes is
#: tried at every position (half the time for a bucket).  It may also
#: match 8 bytes of an object's own data: a row read ahead for nothing,
#: or none found, never a wrong load (and past the range of oids,
#: nothing asked for: oid_ints).
_OID = re.compile(rb'C\x08(.{8})', re.DOTALL)
_OID_PROTOCOL_2 = re.compile(rb'U\x08(.{8})', re.DOTALL)
_OIDS = struct.Struct('>Q')


def oid_ints(refs):
    """The 8-byte oids ``refs`` as integers, leaving out what cannot be
    an oid."""
    # 8 bytes of an object's own data that _OID matched may be past what
    # a signed 64-bit column holds, where no oid is.
    return [oid for (oid,) in _OIDS.iter_unpack(b''.join(refs))
            if oid <= MAX_ID]


def kind_of(state):
    """The kind of container ``state`` is: the bytes of its first pickle,
    which names its class (b'' if that cannot be read)."""
    if state[:3] in (b'\x80\x03c', b'\x80\x02c'):
        # The usual record: GLOBAL "module\nname\n" (no parse needed).
        first = state.find(b'\n', 3)
        end = state.find(b'\n', first + 1) if first > 0 else -1
        if 0 < end < 200:
            return state[:end]
    try:
        for opcode, _, position in pickletools.genops(state):
            if opcode.name == 'STOP':
                return state[:position] if position < 200 else b''
    except Exception:
        pass
    return b''


class Usefulness:
    """Per kind of container: the rows read ahead, and those of them that
    were asked for in the transaction that read them.  Shared by the
    instances of one root storage (a process learns how its application
    reads) and updated without a lock: a lost increment only nudges a
    share."""

    def __init__(self):
        self._kinds = {}        # kind -> [rows read ahead, rows asked for]

    def needed(self, kind):
        """The misses a family of ``kind`` needs before it is read ahead."""
        counts = self._kinds.get(kind)
        if counts is None or counts[0] < EVIDENCE:
            return LEVELS[0][1]
        share = counts[1] / counts[0]
        for floor, misses in LEVELS:
            if share >= floor:
                return misses
        return LEVELS[-1][1]

    def loaded(self, kind, rows):
        counts = self._kinds.get(kind)
        if counts is None:
            counts = self._kinds[kind] = [0, 0]
        counts[0] += rows
        if counts[0] > HORIZON:
            counts[0] //= 2
            counts[1] //= 2

    def used(self, kind):
        counts = self._kinds.get(kind)
        if counts is not None:
            counts[1] += 1

    def shares(self):
        """``{kind: (rows read ahead, rows asked for)}`` (decayed)."""
        return {kind: tuple(counts) for kind, counts in self._kinds.items()}


class Families:
    """The families of one storage instance's current transaction, by the
    8-byte oids of their members (as ZODB passes them to ``load`` and
    pickles them: no conversion for the many families never read ahead)."""

    def __init__(self, usefulness=None):
        self._families = {}     # child oid -> [siblings, misses, kind]
        self._deferred = deque(maxlen=DEFERRED)
        self.usefulness = usefulness or Usefulness()

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
        # (b'Q'); most leaf objects have no such byte and skip the scan.
        if not state or b'Q' not in state:
            return
        refs = _OID.findall(state)
        if not refs and not state.startswith(b'\x80\x03'):
            # Python 3 never pickles SHORT_BINSTRING at protocol 3.
            refs = _OID_PROTOCOL_2.findall(state)
        if len(refs) < 2 or len(refs) > FAMILY_MAX:
            return
        families = self._families
        if len(families) + len(refs) > MEMORY:
            families.clear()
        families.update(dict.fromkeys(refs, [refs, 0, kind_of(state)]))

    def siblings(self, oid):
        """``(the whole family of oid as integers, its kind)`` (the family
        forgotten from now on) if this miss of ``oid`` (8 bytes) is the one
        its kind needs (two, while reading ahead pays: ``Usefulness``);
        None otherwise."""
        deferred = self._deferred
        while deferred:
            self.note(deferred.popleft())
        family = self._families.get(oid)
        if family is None:
            return None
        family[1] += 1
        if family[1] < self.usefulness.needed(family[2]):
            return None
        refs = family[0]
        pop = self._families.pop
        for ref in refs:
            pop(ref, None)
        return oid_ints(refs), family[2]
