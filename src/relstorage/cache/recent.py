"""Recently seen object states, shared by the instances of one storage.

A history-free database keeps only the current state of an object, but
conflict resolution needs the state a transaction started from.  This
bounded memory of ``(oid, tid) -> state`` pairs, filled by loads and
commits, lets ``loadSerial`` answer for recent revisions that the database
has already overwritten.  When an entry has been forgotten, resolution
simply fails and the caller sees the ConflictError it would otherwise get.

With the shared cache on it is written to on every history-free commit
(each replaced revision of a cached object comes here) and read only when
a conflict is resolved, so adding is what must be cheap:

- two generations instead of a least-recently-used order: entries go into
  the young dict; when that holds half the limit it becomes the old one
  and the previous old one is dropped whole; a read moves an old entry
  back into the young dict;
- the key is one integer (``oid << 64 | tid``) and the value the bytes
  object as given, neither of which the garbage collector tracks;
- the cache hands over its entry as it is (``decode`` gives the state when
  asked, a copy or a decompression that most entries never need).

Measured on the cache's store of 1,000-object commits of 230-byte states
replacing cached revisions: with an OrderedDict of (oid, tid) keys, evicting
one entry at a time, of the sliced state, the store took 1.9-3.0 ms per
commit (9,000 more instructions per object than with nothing remembered);
with two generations of tuple keys 6,100 instructions (the garbage collector
traversing them); as now 5,100, and 1.25 ms per commit against 1.1-1.2 with
nothing remembered.
"""
import threading

#: What an entry costs beyond its state's length: the key, the dict's slot
#: (an approximation).
ENTRY_OVERHEAD = 100
#: At most this many deletions are remembered for loadBefore (below).
MAX_DELETIONS = 10000


class RecentStates:

    def __init__(self, limit_bytes=8 * 1024 * 1024, decode=None):
        """``decode``: turns what was remembered into the state; None when
        states are remembered as they are."""
        self._half = limit_bytes // 2
        self._largest = limit_bytes // 4    # a larger state is not kept
        self._decode = decode
        self._young = {}        # oid << 64 | tid -> what was remembered
        self._old = {}
        self._young_bytes = 0
        # oid -> (tid, end): the revision of oid at tid that a deletion
        # committed by this process at end replaced.
        self._deleted = {}
        self._lock = threading.Lock()

    def remember(self, oid, tid, value):
        """Remember the state of ``oid`` at ``tid``: ``value`` is the state,
        or what ``decode`` reads; None is not remembered."""
        if value is None:
            return
        size = ENTRY_OVERHEAD + len(value)
        if size > self._largest:
            return
        key = oid << 64 | tid
        with self._lock:
            # A key remembered twice is counted twice: the generation only
            # turns over a little early.
            self._young[key] = value
            self._young_bytes += size
            if self._young_bytes > self._half:
                self._old = self._young
                self._young = {}
                self._young_bytes = 0

    def get(self, oid, tid):
        key = oid << 64 | tid
        with self._lock:
            value = self._young.get(key)
            if value is None:
                value = self._old.pop(key, None)
                if value is None:
                    return None
                moved = True
            else:
                moved = False
        if moved:
            self.remember(oid, tid, value)
        return value if self._decode is None else self._decode(value)

    def deleted(self, oid, tid, end):
        """``oid``'s revision at ``tid`` was current until this process
        deleted the object at ``end``.  History-free loadBefore answers
        from what is remembered of it (``before``): the database no longer
        holds it, but ZODB's external garbage collection expects to read it
        until a pack."""
        with self._lock:
            if len(self._deleted) >= MAX_DELETIONS:
                self._deleted = {}
            self._deleted[oid] = (tid, end)

    def before(self, oid, tid):
        """``(state, start, end)`` of a deleted revision of ``oid`` that was
        current just before ``tid``, if it is remembered; else None."""
        with self._lock:
            span = self._deleted.get(oid)
        if span is None or not span[0] < tid <= span[1]:
            return None
        state = self.get(oid, span[0])
        return None if state is None else (state, span[0], span[1])

    def clear(self):
        with self._lock:
            self._young = {}
            self._old = {}
            self._young_bytes = 0
            self._deleted = {}

    def size_bytes(self):
        """What the remembered entries cost, as counted against the limit
        (at most the limit and one entry)."""
        with self._lock:
            return self._young_bytes + sum(
                ENTRY_OVERHEAD + len(value) for value in self._old.values())
