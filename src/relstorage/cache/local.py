"""A process-wide cache of object states, shared by a storage's instances.

Every ZODB Connection of a process has its own storage instance, and all of
them read the same database.  This cache lets one instance answer a load
with a state another instance (or an earlier run, through the file written
by :meth:`LocalCache.save`) has already fetched.  It never talks to the
database: the storage tells it what it loaded, what it committed and what
its polls reported changed.

Correctness (MVCC).  The cache holds at most one revision per oid, with
``known``, the last snapshot through which that revision is known to be
current, and a ``live`` flag.  The cache's *horizon* G is the tid up to which
it has applied every change list.  A live entry has had no change reported
in ``(known, G]``, so it is current through ``max(known, G)``; a frozen one
only through ``known``.  A reader at snapshot S may use an entry iff
``entry.tid <= S <= end``.  Hence an older snapshot never sees a newer
revision (``tid <= S``) and a newer snapshot never sees a stale one (a
reported change freezes the entry before G moves past it).

Memory.  An entry is one bytes object, a 17-byte header (tid, known,
flags) followed by the stored state, kept in one dict by oid: no object
per entry beyond the bytes and the oid.  Each entry costs the length of its
stored payload plus :data:`ENTRY_OVERHEAD`, and the dict and the two queues
below count for what they hold (their ``sys.getsizeof`` and the blocks a
deque keeps for reuse); the sum never exceeds ``limit_bytes`` after a
call.

Eviction is a segmented LRU approximated the way CLOCK approximates LRU,
so that a hit only sets a flag and no link list is kept per entry.  Each
oid sits in one of two FIFO queues (deques of the oids, 8 bytes an entry).
New entries join probation.  A hit marks an entry *referenced*.  Eviction
looks at probation's oldest: referenced, it moves to the protected queue
(its flag cleared); otherwise it is evicted.  Protected holds at most
:data:`PROTECTED_SHARE` of the room; when it holds more, its oldest
referenced entries go round again (flag cleared) and the first one not
referenced is demoted to probation's young end.  A scan of objects read
once therefore only churns probation, and an entry read again since the
queue last passed it survives.  Two ordered dicts (a true segmented LRU)
cost 40-190 bytes per entry more than this dict and its queues.

Loops.  A loop over more objects than the cache holds (every object of a
large container, read again and again) defeats any LRU: each entry is
evicted just before it is asked for again, and no read ever hits.  A cache
of at least :data:`LOOP_WATCH_MIN` bytes remembers the oids it evicted in a
bitmap; when most new entries are oids it evicted recently, it is looping,
and it then admits only one new entry in :data:`LOOP_ADMIT`, keeping the
rest of what it holds: the loop then hits in the share of the objects that
fit.  New entries that were not evicted before (the application moved on)
end that state after a few dozen loads.
"""
import struct
import sys
import threading
import zlib
from collections import deque
from itertools import chain
from types import SimpleNamespace

from relstorage.cache.file import identity_bytes
from relstorage.cache.warm import fill_empty
from relstorage.cache.warm import restore_file
from relstorage.cache.file import write_file

#: Bytes charged per entry on top of its stored state, outside the dict
#: and the queues: the header (17), the bytes object's own (33), the oid
#: int (32) and the allocator's rounding (up to 15).  The dict and the
#: queues are counted as they are (``_tables``): their share per entry
#: moves between about 36 and 70 bytes as the dict's table doubles (see
#: _SPARSE_DICT).
#: tracemalloc on CPython 3.11 found the memory used within the limit in
#: full caches under churn (tests/test_localcache.py checks 2 MB).
ENTRY_OVERHEAD = 90
#: Caches of this size or more watch for loops (see the module's doc).
LOOP_WATCH_MIN = 1 << 20
#: While looping, one new entry in this many is admitted.
LOOP_ADMIT = 32
#: The bitmap of evicted oids takes 1/LOOP_SHARE of ``limit_bytes`` (at
#: most 1 MiB, rounded down to a power of two), counted in the limit.
LOOP_SHARE = 128
_LOOP_BITMAP_MAX = 1 << 20
_FIBONACCI = 0x9E3779B97F4A7C15     # 2**64 / golden ratio, to spread oids
#: Share of the room left by the dict and queues that the protected queue's
#: entries may hold.
PROTECTED_SHARE = 0.8
#: With compression on, states shorter than this are stored as they are.
COMPRESS_MIN = 128
#: zlib level 1, 16 KiB window, memLevel 4: same output size for states up
#: to 16 KiB.  zlib's defaults allocate ~256 KiB per call, which glibc may
#: serve by mmap each time: a 250-byte pickle then took 55 us, not 3.5 us.
_ZLIB_ARGS = (1, zlib.DEFLATED, 14, 4)

# An entry's header: tid, known (the last snapshot through which the
# revision is known current), flags.
_META = struct.Struct('<QQB')
_META_SIZE = _META.size
_FLAGS = _META_SIZE - 1             # the flags' offset
_unpack_meta = _META.unpack_from
_pack_meta = _META.pack
_LIVE, _ZIPPED, _DELETED_STATE = 1, 2, 4
_NOT_AS_IS = _ZIPPED | _DELETED_STATE   # the payload is not the state
# Where an entry stands in the eviction order: read since the queue last
# passed it; in the protected queue (else in probation).
_REFERENCED, _PROTECTED = 8, 16
#: What an entry costs beyond its bytes object's length.
_FIXED_COST = ENTRY_OVERHEAD - _META_SIZE
#: What restoring a saved cache plans per entry for the dict's and the
#: queues' growth.
_TABLE_ALLOWANCE = 72
LAYOUT = SimpleNamespace(       # what relstorage.cache.warm needs
    ENTRY_OVERHEAD=ENTRY_OVERHEAD, _TABLE_ALLOWANCE=_TABLE_ALLOWANCE,
    _pack_meta=_pack_meta, _LIVE=_LIVE, _ZIPPED=_ZIPPED,
    _DELETED_STATE=_DELETED_STATE)

def _deque_block():
    """The size of a deque's block of oids, as its ``__sizeof__`` grows."""
    queue = deque()
    empty = queue.__sizeof__()
    while queue.__sizeof__() == empty:
        queue.append(None)
    return queue.__sizeof__() - empty


#: What ``__sizeof__`` leaves out of the dict and the two queues: the
#: garbage collector's header of each (``sys.getsizeof`` adds it).
_GC_HEADS = 3 * (sys.getsizeof({}) - {}.__sizeof__())
#: A deque keeps up to 16 emptied blocks for reuse (CPython's
#: MAXFREEBLOCKS), which neither ``__sizeof__`` nor ``sys.getsizeof``
#: counts: tracemalloc saw 9,240 bytes held by an emptied deque whose
#: ``sys.getsizeof`` was 760.  Each queue is charged for as many as it may
#: hold: the blocks it had at its largest and no longer uses, at most 16.
_SPARE_BLOCKS = 16 * _deque_block()
#: A dict larger than this many bytes per key is rebuilt.  Under churn (a
#: key deleted for each one added) CPython grows a dict to three times its
#: keys when its table fills with deleted slots: a full 10 MB cache's dict
#: of 22,000 keys took 117 bytes per key, rebuilt 59 (in 1 ms).  A dict
#: built one key at a time takes at most 60, so a rebuild never repeats.
_SPARSE_DICT = 64


def _payload(blob, flags):
    """The state an entry holds (a new bytes object), or None."""
    if flags & _DELETED_STATE:
        return None
    if flags & _ZIPPED:
        return zlib.decompress(memoryview(blob)[_META_SIZE:])
    return blob[_META_SIZE:]


def entry_state(blob):
    """The state of a cache entry handed to ``LocalCache.replaced``."""
    return _payload(blob, blob[_FLAGS])


def _reheaded(blob, tid, known, flags):
    """``blob`` with a new header; same length, so same cost."""
    return _pack_meta(tid, known, flags) + blob[_META_SIZE:]


def _reflagged(blob, flags):
    """``blob`` with new flags; same length, so same cost."""
    return blob[:_FLAGS] + bytes((flags,)) + blob[_META_SIZE:]


class LocalCache:
    """The shared, thread-safe, size-bounded cache of object states.

    ``limit_bytes`` (>= 0) bounds the accounted size; ``object_max`` is the
    largest state worth keeping; ``compression`` is ``'none'`` or
    ``'zlib'``.  Raises ValueError for any other value.  Oids and tids are
    ints, a state is bytes or None (the object was deleted).
    """

    def __init__(self, limit_bytes, object_max=16384, compression='none'):
        if compression not in ('none', 'zlib'):
            raise ValueError(
                f"cache compression must be 'none' or 'zlib', "
                f"not {compression!r}")
        if limit_bytes < 0 or object_max < 0:
            raise ValueError('cache sizes must not be negative')
        self.limit_bytes = limit_bytes
        self.object_max = object_max
        self.compression = compression
        self._compress = compression == 'zlib'
        self._evicted = None
        self._entry_limit = limit_bytes
        self._known_tables = 0
        if limit_bytes >= LOOP_WATCH_MIN:
            size = 1 << ((min(limit_bytes // LOOP_SHARE,
                              _LOOP_BITMAP_MAX)).bit_length() - 1)
            self._evicted = bytearray(size)
            self._evicted_shift = 64 - (size * 8).bit_length() + 1
            # Emptied after this many evictions: at most a quarter of the
            # bits set, so at most a quarter of false "evicted before".
            self._evicted_room = size * 2
            self._evicted_count = 0
            self._loop_score = 0        # 0..256: share of recent new
            self._bypassed = 0          # entries that were evicted before
            self._entry_limit = limit_bytes - size
        self._entries = {}
        self._probation = deque()       # oids, oldest first
        self._protected = deque()
        self._probation_peak = self._protected_peak = 0
        self._tables()
        self._size = 0
        self._protected_size = 0
        self._horizon = None
        self._lock = threading.Lock()
        self.hits = self.misses = self.emptied = 0
        #: Called as ``replaced(oid, tid, entry)`` (under the cache's lock)
        #: when a newer revision replaces a cached one, so that a caller
        #: may keep the old state elsewhere (conflict resolution needs it);
        #: :func:`entry_state` gives the state of ``entry`` when needed.
        self.replaced = None

    @property
    def horizon(self):
        """G: the tid through which every change list was applied, or None."""
        return self._horizon

    def __len__(self):
        return len(self._entries)

    def stats(self):
        """Counters and sizes, as a new dict."""
        with self._lock:
            return {'hits': self.hits, 'misses': self.misses,
                    'count': len(self),
                    'size_bytes': self._size + self._tables(),
                    'entry_bytes': self._size, 'limit_bytes': self.limit_bytes,
                    'protected_bytes': self._protected_size,
                    'loop_watch_bytes': self.limit_bytes - self._entry_limit,
                    'looping': self._looping(), 'horizon': self._horizon}

    # Reading

    def get(self, oid, snapshot, before=None):
        """``(state, tid)`` of ``oid`` as a reader at ``snapshot`` sees it,
        or None when no usable entry is cached.  With ``before`` (see
        :meth:`get_before`) the revision must also be older than that.
        Counts a hit or a miss."""
        newest = snapshot if before is None else before - 1
        with self._lock:
            blob = self._entries.get(oid)
            if blob is None:
                self.misses += 1
                return None
            tid, known, flags = _unpack_meta(blob)
            if (tid > newest or newest > snapshot or (snapshot > known and not (
                    flags & _LIVE and snapshot <= self._horizon))):
                self.misses += 1
                return None
            self.hits += 1
            if not flags & _NOT_AS_IS:
                state = blob[_META_SIZE:]
                if not flags & _REFERENCED:
                    # Same length: the accounting holds.
                    self._entries[oid] = _pack_meta(
                        tid, known, flags | _REFERENCED) + state
                return state, tid
            if not flags & _REFERENCED:
                self._entries[oid] = _reheaded(blob, tid, known,
                                               flags | _REFERENCED)
        return _payload(blob, flags), tid

    def get_before(self, oid, before, snapshot):
        """For ``loadBefore(oid, before)`` by a reader at ``snapshot``:
        ``(state, tid)`` when the cached revision is usable at ``snapshot``
        and was current at ``before - 1`` (``tid < before <= snapshot + 1``),
        else None.  Counts a hit or a miss like :meth:`get`."""
        return self.get(oid, snapshot, before)

    def has(self, oid, snapshot):
        """True if :meth:`get` would find ``oid`` for ``snapshot``; neither
        counts nor reorders."""
        with self._lock:
            blob = self._entries.get(oid)
            if blob is None:
                return False
            tid, known, flags = _unpack_meta(blob)
            return not (tid > snapshot or (snapshot > known and not (
                flags & _LIVE and snapshot <= self._horizon)))

    def get_revision(self, oid, tid):
        """The state of revision ``(oid, tid)`` if that exact revision is
        cached (revisions never change), else None.  A cached deletion also
        gives None.  Does not count or reorder."""
        with self._lock:
            blob = self._entries.get(oid)
        if blob is None:
            return None
        cached_tid, _, flags = _unpack_meta(blob)
        return _payload(blob, flags) if cached_tid == tid else None

    # Filling

    def store_loaded(self, oid, tid, state, snapshot):
        """Remember that a load at ``snapshot`` returned ``(state, tid)``.

        Ignored when the state is larger than ``object_max`` or an entry
        with a higher tid is cached."""
        if state is not None and len(state) > self.object_max:
            return
        if self._compress:
            # Spare compressing a revision already cached (or superseded).
            with self._lock:
                horizon = self._horizon
                blob = self._entries.get(oid)
                if self._merge_into(blob, oid, tid, snapshot,
                                    horizon is not None
                                    and snapshot >= horizon):
                    self._superseded(oid, blob, tid, snapshot, state, False)
                    return
            stored, zipped = self._pack(state)
        else:
            stored, zipped = state, False
        with self._lock:
            horizon = self._horizon
            self._put(oid, tid, stored, zipped, snapshot,
                      horizon is not None and snapshot >= horizon)

    def store_committed(self, tid, states):
        """Remember the revisions this process just committed at ``tid``;
        ``states`` maps oid to state (or None for a deletion)."""
        object_max = self.object_max
        packed = [(oid, self._pack(state)) for oid, state in states.items()
                  if state is None or len(state) <= object_max]
        with self._lock:
            horizon = self._horizon
            live = horizon is not None and tid >= horizon
            put = self._put
            for oid, (stored, zipped) in packed:
                put(oid, tid, stored, zipped, tid, live)

    # Keeping up with the database

    def advance(self, from_tid, to_tid, changes):
        """Apply a poll's change list and move the horizon to ``to_tid``.

        ``changes`` holds ``(oid, tid)`` for every object changed in
        ``(from_tid, to_tid]``, each oid with its latest tid there.  Returns
        True when applied or when ``to_tid <= G`` (nothing to do); False,
        changing nothing, when G is None or ``from_tid > G``: the caller
        must then supply the changes of ``(G, to_tid]`` or call
        :meth:`set_horizon` after :meth:`invalidate_all`."""
        with self._lock:
            horizon = self._horizon
            if horizon is None or from_tid > horizon:
                return False
            if to_tid <= horizon:
                return True
            entries = self._entries
            get = entries.get
            for oid, tid in changes:
                blob = get(oid)
                if blob is None:
                    continue
                cached_tid, known, flags = _unpack_meta(blob)
                if flags & _LIVE and cached_tid < tid:
                    # A change at or before G (only in an overlapping list)
                    # bounds the entry at tid - 1; G itself otherwise.
                    end = horizon if tid > horizon else tid - 1
                    entries[oid] = _reheaded(blob, cached_tid, max(end, known),
                                             flags & ~_LIVE)
            self._horizon = to_tid
            return True

    def set_horizon(self, tid):
        """Start tracking changes from ``tid`` (the first snapshot).

        Raises ValueError unless the horizon is None.  Entries stored while
        it was None are frozen and stay so."""
        with self._lock:
            if self._horizon is not None:
                raise ValueError(
                    f'cache horizon already set to {self._horizon}')
            self._horizon = tid

    def invalidate_all(self):
        """Drop every entry and forget the horizon (the counters remain;
        ``emptied`` counts the calls)."""
        with self._lock:
            self.emptied += 1
            self._entries.clear()
            self._probation.clear()
            self._protected.clear()
            self._tables()
            self._size = self._protected_size = 0
            self._horizon = None

    clear = invalidate_all

    def discard(self, oids):
        """Drop the entries of ``oids`` (any iterable), if cached.  Takes
        time in proportion to the number of entries per oid dropped (each
        is looked for in its queue): meant for a few oids."""
        with self._lock:
            for oid in oids:
                blob = self._entries.pop(oid, None)
                if blob is None:
                    continue
                cost = len(blob) + _FIXED_COST
                self._size -= cost
                if blob[_FLAGS] & _PROTECTED:
                    self._protected.remove(oid)
                    self._protected_size -= cost
                else:
                    self._probation.remove(oid)

    # The persistent cache

    def save(self, path, identity):
        """Write the entries usable at G to ``path``, most valuable first.

        ``identity`` (a str) names the database.  The file is replaced
        atomically, so a crash leaves the previous one.  Returns how many
        entries were written; writes nothing and returns 0 when the
        horizon is None.  Raises OSError when the file cannot be written,
        ValueError when ``identity`` is longer than 65535 bytes in UTF-8."""
        name = identity_bytes(identity)
        with self._lock:
            horizon = self._horizon
            if horizon is None:
                return 0
            # Most valuable first: the protected queue, then probation's
            # entries read since they joined it, then the others; the
            # youngest first in each.
            kept, read, unread = [], [], []
            entries = self._entries
            for oid in chain(reversed(self._protected),
                             reversed(self._probation)):
                blob = entries[oid]
                tid, known, flags = _unpack_meta(blob)
                if tid > horizon or not (flags & _LIVE or horizon <= known):
                    continue
                (kept if flags & _PROTECTED else
                 read if flags & _REFERENCED else unread).append(
                    (oid, tid, flags, blob))
            records = kept + read + unread
        write_file(path, name, horizon, len(records), (
            (oid, tid, None if flags & _DELETED_STATE
             else memoryview(blob)[_META_SIZE:], flags & _ZIPPED)
            for oid, tid, flags, blob in records))
        return len(records)

    def restore(self, saved_horizon, entries, current_tid, changed_oids):
        """Fill the cache from :func:`relstorage.cache.file.read_file`'s
        result.

        ``changed_oids`` must hold every oid changed in
        ``(saved_horizon, current_tid]``; their entries are dropped, the
        others are current at ``current_tid``.  If the horizon is None it
        becomes ``current_tid``.  Nothing is restored when ``current_tid <
        saved_horizon`` (the database went back in time or is another one).
        Entries are taken in order until the free space is used up.  Returns
        how many were restored."""
        if not isinstance(changed_oids, (set, frozenset, dict)):
            changed_oids = set(changed_oids)
        if current_tid < saved_horizon:
            entries = ()
        with self._lock:
            budget = self._entry_limit - self._size - self._tables()
        chosen = []
        for oid, tid, state in entries:
            if oid in changed_oids or tid > saved_horizon or (
                    state is not None and len(state) > self.object_max):
                continue
            stored, zipped = self._pack(state)
            cost = ENTRY_OVERHEAD + _TABLE_ALLOWANCE + (
                0 if stored is None else len(stored))
            if cost > budget:
                break
            budget -= cost
            chosen.append((oid, tid, stored, zipped))
        with self._lock:
            if self._horizon is None:
                self._horizon = current_tid
            live = current_tid >= self._horizon
            if not self._entries:
                # At start-up, into an empty cache: the entries go in as
                # _put would put them, without its per-entry checks (the
                # budget above kept them within the limit).
                fill_empty(self, LAYOUT, chosen, current_tid, live)
                return len(chosen)
            put = self._put
            # Least valuable first, so the first entries end up most recent.
            for oid, tid, stored, zipped in reversed(chosen):
                if type(stored) is memoryview:
                    stored = bytes(stored)  # (a view of the file)
                put(oid, tid, stored, zipped, current_tid, live)
        return len(chosen)

    def restore_file(self, found, current_tid, changed_oids):
        """``restore`` from a CacheFile (cache.file.open_file); into an
        empty cache, in one pass over the file (cache.warm)."""
        with self._lock:
            empty = not self._entries
        if not empty or self._compress:
            return self.restore(found.horizon, found.records(), current_tid,
                                changed_oids)
        return restore_file(self, LAYOUT, found, current_tid, changed_oids)

    # Internals; the lock is held by the caller where it matters.

    def _pack(self, state):
        """``(stored state, zipped)``; needs no lock."""
        if state is None:
            return None, False
        if self._compress and len(state) >= COMPRESS_MIN:
            packer = zlib.compressobj(*_ZLIB_ARGS)
            packed = packer.compress(state) + packer.flush()
            if len(packed) < len(state):
                return packed, True
        return state, False

    def _put(self, oid, tid, stored, zipped, known, live):
        if stored is None:
            flags, cost = _DELETED_STATE, ENTRY_OVERHEAD
        else:
            flags, cost = (_ZIPPED if zipped else 0), (
                len(stored) + ENTRY_OVERHEAD)
        entries = self._entries
        old = entries.get(oid)
        if cost > self._entry_limit:
            return
        if old is not None and self._merge_into(old, oid, tid, known, live):
            self._superseded(oid, old, tid, known, stored, zipped)
            return
        if live:
            flags |= _LIVE
        if old is None:
            blob = _pack_meta(tid, known, flags)
            if stored is not None:
                blob += stored
            entries[oid] = blob
            probation = self._probation
            probation.append(oid)
            self._size += cost
            # The one place where the dict and the queues grow (the
            # measure written out: sys.getsizeof costs three times more).
            table = entries.__sizeof__()
            if table > _SPARSE_DICT * len(entries) + 1024:
                self._entries = entries = {k: v for k, v in entries.items()}
                table = entries.__sizeof__()
            tables = self._tables(table)
            if self._size + tables > self._entry_limit:
                if not self._admit(oid):
                    # Refused: counted as evicted, so that the loop goes on
                    # being recognised.
                    del entries[oid]
                    self._probation.pop()
                    self._size -= cost
                    self._note_evicted(oid)
                    return
                self._evict(tables)
            return
        old_tid, _, old_flags = _unpack_meta(old)
        if self.replaced is not None and not old_flags & _DELETED_STATE:
            self.replaced(oid, old_tid, old)
        # A new revision keeps its place in the queues and counts as read.
        flags |= old_flags & _PROTECTED | _REFERENCED
        blob = _pack_meta(tid, known, flags)
        if stored is not None:
            blob += stored
        delta = len(blob) - len(old)
        entries[oid] = blob
        self._size += delta
        if flags & _PROTECTED:
            self._protected_size += delta
            if self._protected_size > self._protected_limit():
                self._demote()
        # Replacing a value grows neither the dict nor a queue: the last
        # measure of the tables holds.
        if self._size + self._known_tables > self._entry_limit:
            self._evict()

    def _protected_limit(self):
        """What the protected queue's entries may take: a share of what the
        dict and the queues leave of the limit (as last measured)."""
        return PROTECTED_SHARE * (self._entry_limit - self._known_tables)

    def _tables(self, table=None):
        """Bytes held by the dict and the two queues; ``table``: the
        dict's ``__sizeof__()`` if just taken.  (``__sizeof__`` written
        out: ``sys.getsizeof`` costs three times more.)"""
        if table is None:
            table = self._entries.__sizeof__()
        probation = self._probation.__sizeof__()
        protected = self._protected.__sizeof__()
        # The spare blocks: conditions, not min(), on the store's path.
        spare = self._probation_peak - probation
        if spare <= 0:
            self._probation_peak = probation
        elif spare > _SPARE_BLOCKS:
            table += _SPARE_BLOCKS
        else:
            table += spare
        spare = self._protected_peak - protected
        if spare <= 0:
            self._protected_peak = protected
        elif spare > _SPARE_BLOCKS:
            table += _SPARE_BLOCKS
        else:
            table += spare
        self._known_tables = tables = (
            table + probation + protected + _GC_HEADS)
        return tables

    def _admit(self, oid):
        """Whether a new entry may evict others to get in (see Loops in
        the module's doc)."""
        evicted = self._evicted
        if evicted is None:
            return True
        bit = self._evicted_bit(oid)
        seen = evicted[bit >> 3] >> (bit & 7) & 1
        # A moving average over the last few dozen new entries.
        self._loop_score += ((seen << 8) - self._loop_score) >> 4
        if not self._looping():
            return True
        self._bypassed += 1
        return self._bypassed % LOOP_ADMIT == 0

    def _looping(self):
        return self._evicted is not None and self._loop_score >= 128

    def _note_evicted(self, oid):
        if self._evicted_count >= self._evicted_room:
            self._evicted = bytearray(len(self._evicted))
            self._evicted_count = 0
        bit = self._evicted_bit(oid)
        self._evicted[bit >> 3] |= 1 << (bit & 7)
        self._evicted_count += 1

    def _evicted_bit(self, oid):
        """The bit of ``oid`` in the bitmap of evicted oids."""
        return ((oid * _FIBONACCI) & 0xFFFFFFFFFFFFFFFF) >> self._evicted_shift

    def _merge_into(self, blob, oid, tid, known, live):
        """True when the entry ``blob`` of ``oid`` (None: not cached) is of
        ``tid`` or later, which makes a store of ``tid`` needless; the same
        revision then gets the later ``known``/``live``."""
        if blob is None:
            return False
        cached_tid, cached_known, flags = _unpack_meta(blob)
        if cached_tid < tid:
            return False
        if cached_tid == tid:
            new_flags = flags | _LIVE if live else flags
            if known > cached_known or new_flags != flags:
                self._entries[oid] = _reheaded(
                    blob, tid, max(known, cached_known), new_flags)
        return True

    def _superseded(self, oid, blob, tid, known, stored, zipped):
        """A store of revision ``tid`` refused because the entry ``blob``
        holds a later one (a load at a snapshot older than a commit this
        process made or saw): ``replaced`` gets it as if that later
        revision had just replaced it.  History-free, it may be the state
        a transaction started from, which conflict resolution asks for,
        and which neither the database nor the cache holds any more."""
        if self.replaced is None or stored is None:
            return
        if _unpack_meta(blob)[0] > tid:
            self.replaced(oid, tid, _pack_meta(
                tid, known, _ZIPPED if zipped else 0) + stored)

    def _demote(self):
        """Bring the protected queue's entries back within their share.

        Its oldest entry, if read since the queue last passed it, goes
        round again with its flag cleared; if not, it moves to probation's
        young end.  Each entry goes round at most once per call."""
        entries = self._entries
        protected = self._protected
        probation = self._probation
        limit = self._protected_limit()
        while self._protected_size > limit and protected:
            oid = protected.popleft()
            blob = entries[oid]
            flags = blob[_FLAGS]
            if flags & _REFERENCED:
                entries[oid] = _reflagged(blob, flags & ~_REFERENCED)
                protected.append(oid)
            else:
                entries[oid] = _reflagged(blob, flags & ~_PROTECTED)
                self._protected_size -= len(blob) + _FIXED_COST
                probation.append(oid)
        # The queues may have taken or freed a block.
        self._tables()

    def _evict(self, tables=None):
        """Evict until within the limit; ``tables``: the dict's and the
        queues' size if just measured.

        Probation's oldest entry moves to the protected queue if it was
        read since it joined (or was demoted), else it is evicted; with
        probation empty, the protected queue's oldest is evicted."""
        entries = self._entries
        probation = self._probation
        protected = self._protected
        watch = self._evicted is not None
        limit = self._entry_limit
        if tables is None:
            tables = self._tables()
        while self._size + tables > limit:
            if probation:
                oid = probation.popleft()
                blob = entries[oid]
                flags = blob[_FLAGS]
                if flags & _REFERENCED:
                    entries[oid] = _reflagged(
                        blob, flags & ~_REFERENCED | _PROTECTED)
                    protected.append(oid)
                    self._protected_size += len(blob) + _FIXED_COST
                    if self._protected_size > self._protected_limit():
                        self._demote()
                    # A queue may have taken a new block.
                    tables = self._tables()
                    continue
            elif protected:
                oid = protected.popleft()
                blob = entries[oid]
                self._protected_size -= len(blob) + _FIXED_COST
            else:
                break
            del entries[oid]
            self._size -= len(blob) + _FIXED_COST
            if watch:
                self._note_evicted(oid)
            if self._size + tables > limit:
                # Popping may have freed a block of a queue (the dict never
                # shrinks): measured only when it decides another eviction.
                tables = self._tables()
        self._known_tables = tables


class NullCache:
    """The disabled cache (``limit_bytes`` 0): same API, keeping nothing."""

    limit_bytes = 0
    horizon = None
    hits = misses = 0

    def __len__(self):
        return 0

    def stats(self):
        return {'hits': 0, 'misses': 0, 'count': 0, 'size_bytes': 0,
                'entry_bytes': 0,
                'limit_bytes': 0, 'protected_bytes': 0,
                'loop_watch_bytes': 0, 'looping': False, 'horizon': None}

    def get(self, oid, snapshot):
        return None

    def has(self, oid, snapshot):
        return False

    def get_before(self, oid, before, snapshot):
        return None

    def get_revision(self, oid, tid):
        return None

    def store_loaded(self, oid, tid, state, snapshot):
        pass

    def store_committed(self, tid, states):
        pass

    def advance(self, from_tid, to_tid, changes):
        return True

    def set_horizon(self, tid):
        pass

    def invalidate_all(self):
        pass

    clear = invalidate_all

    def discard(self, oids):
        pass

    def save(self, path, identity):
        return 0

    def restore(self, saved_horizon, entries, current_tid, changed_oids):
        return 0

    def restore_file(self, found, current_tid, changed_oids):
        return 0


def make_cache(limit_bytes, object_max=16384, compression='none'):
    """A :class:`LocalCache`, or a :class:`NullCache` when ``limit_bytes`` is
    0.  Raises ValueError for a negative size or an unknown compression."""
    cache = LocalCache(limit_bytes, object_max, compression)
    return cache if limit_bytes else NullCache()
