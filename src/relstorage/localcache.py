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

Memory.  Each entry costs the length of its stored payload plus
:data:`ENTRY_OVERHEAD`; the sum never exceeds ``limit_bytes`` after a call.
Eviction is a segmented LRU: new entries enter a probation segment, an
entry hit there moves to a protected segment (at most
:data:`PROTECTED_SHARE` of the limit, its overflow demoted back to
probation), and eviction takes probation's least recently used first.  A
scan of objects read once therefore only churns probation.
"""
import logging
import os
import struct
import tempfile
import threading
import zlib
from collections import OrderedDict

log = logging.getLogger(__name__)

#: Bytes charged per entry on top of its payload: the entry object, its
#: OrderedDict slot and link node, the oid and tid ints and the bytes header.
#: tracemalloc on CPython 3.11 showed 275-300 bytes for 30k-150k entries
#: without the tid int (32) and the bytes header (33).
ENTRY_OVERHEAD = 350
#: Share of ``limit_bytes`` the protected segment may hold.
PROTECTED_SHARE = 0.8
#: With compression on, states shorter than this are stored as they are.
COMPRESS_MIN = 128
#: zlib level 1, 16 KiB window, memLevel 4: same output size for states up
#: to 16 KiB.  zlib's defaults allocate ~256 KiB per call, which glibc may
#: serve by mmap each time: a 250-byte pickle then took 55 us, not 3.5 us.
_ZLIB_ARGS = (1, zlib.DEFLATED, 14, 4)

# The file: _HEAD, the identity in UTF-8, _HORIZON, then per entry a _RECORD
# and its payload, then the CRC-32 of everything before it.  No pickles, so
# loading a file cannot run code.
_MAGIC = b'RSLCACHE'
_VERSION = 1
_HEAD = struct.Struct('>8sHH')      # magic, version, identity length
_HORIZON = struct.Struct('>QQ')     # saved horizon, number of records
_RECORD = struct.Struct('>QQBI')    # oid, tid, kind, payload length
_CRC = struct.Struct('>I')
_RAW, _ZLIB, _DELETED = 0, 1, 2


class _Entry:
    """One cached revision; ``hot`` says it is in the protected segment."""
    __slots__ = ('state', 'tid', 'known', 'live', 'zipped', 'cost', 'hot')

    def __init__(self, state, tid, known, live, zipped, cost):
        self.state = state
        self.tid = tid
        self.known = known
        self.live = live
        self.zipped = zipped
        self.cost = cost
        self.hot = False


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
        self._protected_limit = int(limit_bytes * PROTECTED_SHARE)
        self._probation = OrderedDict()
        self._protected = OrderedDict()
        self._size = 0
        self._protected_size = 0
        self._horizon = None
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        #: Called as ``replaced(oid, tid, state)`` (under the cache's lock)
        #: when a newer revision replaces a cached one, so that a caller
        #: may keep the old state elsewhere (conflict resolution needs it).
        self.replaced = None

    @property
    def horizon(self):
        """G: the tid through which every change list was applied, or None."""
        return self._horizon

    def __len__(self):
        return len(self._probation) + len(self._protected)

    def stats(self):
        """Counters and sizes, as a new dict."""
        with self._lock:
            return {'hits': self.hits, 'misses': self.misses,
                    'count': len(self), 'size_bytes': self._size,
                    'limit_bytes': self.limit_bytes,
                    'protected_bytes': self._protected_size,
                    'horizon': self._horizon}

    # Reading

    def get(self, oid, snapshot, before=None):
        """``(state, tid)`` of ``oid`` as a reader at ``snapshot`` sees it,
        or None when no usable entry is cached.  With ``before`` (see
        :meth:`get_before`) the revision must also be older than that.
        Counts a hit or a miss."""
        newest = snapshot if before is None else before - 1
        with self._lock:
            entry = self._protected.get(oid)
            if entry is None:
                entry = self._probation.get(oid)
            if (entry is None or entry.tid > newest or newest > snapshot
                    or (snapshot > entry.known and not (
                        entry.live and snapshot <= self._horizon))):
                self.misses += 1
                return None
            if entry.hot:
                self._protected.move_to_end(oid)
            else:
                self._promote(oid, entry)
            self.hits += 1
            state = entry.state
            tid = entry.tid
            zipped = entry.zipped
        if zipped:
            state = zlib.decompress(state)
        return state, tid

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
            entry = self._protected.get(oid)
            if entry is None:
                entry = self._probation.get(oid)
            return not (entry is None or entry.tid > snapshot or (
                snapshot > entry.known and not (
                    entry.live and snapshot <= self._horizon)))

    def get_revision(self, oid, tid):
        """The state of revision ``(oid, tid)`` if that exact revision is
        cached (revisions never change), else None.  A cached deletion also
        gives None.  Does not count or reorder."""
        with self._lock:
            entry = self._protected.get(oid) or self._probation.get(oid)
            if entry is None or entry.tid != tid:
                return None
            state = entry.state
            zipped = entry.zipped
        return zlib.decompress(state) if zipped else state

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
                if self._merge(oid, tid, snapshot, horizon is not None
                               and snapshot >= horizon):
                    return
        stored, zipped, cost = self._pack(state)
        with self._lock:
            horizon = self._horizon
            self._put(oid, tid, stored, zipped, cost, snapshot,
                      horizon is not None and snapshot >= horizon)

    def store_committed(self, tid, states):
        """Remember the revisions this process just committed at ``tid``;
        ``states`` maps oid to state (or None for a deletion)."""
        packed = [(oid, self._pack(state)) for oid, state in states.items()
                  if state is None or len(state) <= self.object_max]
        with self._lock:
            horizon = self._horizon
            live = horizon is not None and tid >= horizon
            for oid, (stored, zipped, cost) in packed:
                self._put(oid, tid, stored, zipped, cost, tid, live)

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
            protected = self._protected
            probation = self._probation
            for oid, tid in changes:
                entry = protected.get(oid) or probation.get(oid)
                if entry is not None and entry.live and entry.tid < tid:
                    entry.live = False
                    # A change at or before G (only in an overlapping list)
                    # bounds the entry at tid - 1; G itself otherwise.
                    end = horizon if tid > horizon else tid - 1
                    if end > entry.known:
                        entry.known = end
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
        """Drop every entry and forget the horizon (the counters remain)."""
        with self._lock:
            self._probation.clear()
            self._protected.clear()
            self._size = self._protected_size = 0
            self._horizon = None

    clear = invalidate_all

    def discard(self, oids):
        """Drop the entries of ``oids`` (any iterable), if cached."""
        with self._lock:
            for oid in oids:
                entry = (self._protected.pop(oid, None)
                         or self._probation.pop(oid, None))
                if entry is not None:
                    self._size -= entry.cost
                    if entry.hot:
                        self._protected_size -= entry.cost

    # The persistent cache

    def save(self, path, identity):
        """Write the entries usable at G to ``path``, most valuable first.

        ``identity`` (a str) names the database.  The file is replaced
        atomically, so a crash leaves the previous one.  Returns how many
        entries were written; writes nothing and returns 0 when the
        horizon is None.  Raises OSError when the file cannot be written,
        ValueError when ``identity`` is longer than 65535 bytes in UTF-8."""
        name = identity.encode('utf-8')
        if len(name) > 0xFFFF:
            raise ValueError('cache file identity longer than 65535 bytes')
        with self._lock:
            horizon = self._horizon
            if horizon is None:
                return 0
            records = [
                (oid, entry.tid, entry.state, entry.zipped)
                for segment in (self._protected, self._probation)
                for oid, entry in reversed(segment.items())
                if entry.tid <= horizon and (
                    entry.live or horizon <= entry.known)]
        parts = [_HEAD.pack(_MAGIC, _VERSION, len(name)), name,
                 _HORIZON.pack(horizon, len(records))]
        append = parts.append
        pack = _RECORD.pack
        for oid, tid, state, zipped in records:
            if state is None:
                append(pack(oid, tid, _DELETED, 0))
            else:
                append(pack(oid, tid, _ZLIB if zipped else _RAW, len(state)))
                append(state)
        body = b''.join(parts)
        directory, base = os.path.split(os.path.abspath(path))
        fd, temp = tempfile.mkstemp(prefix=base + '.', suffix='.tmp',
                                    dir=directory)
        try:
            with os.fdopen(fd, 'wb') as f:
                f.write(body)
                f.write(_CRC.pack(zlib.crc32(body)))
                f.flush()
                os.fsync(f.fileno())
            os.replace(temp, path)
        except BaseException:
            try:
                os.unlink(temp)
            except OSError:
                pass
            raise
        return len(records)

    def restore(self, saved_horizon, entries, current_tid, changed_oids):
        """Fill the cache from :func:`read_file`'s result.

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
            budget = self.limit_bytes - self._size
        chosen = []
        for oid, tid, state in entries:
            if oid in changed_oids or tid > saved_horizon or (
                    state is not None and len(state) > self.object_max):
                continue
            stored, zipped, cost = self._pack(state)
            if cost > budget:
                break
            budget -= cost
            chosen.append((oid, tid, stored, zipped, cost))
        with self._lock:
            if self._horizon is None:
                self._horizon = current_tid
            live = current_tid >= self._horizon
            put = self._put
            # Least valuable first, so the first entries end up most recent.
            for oid, tid, stored, zipped, cost in reversed(chosen):
                put(oid, tid, stored, zipped, cost, current_tid, live)
        return len(chosen)

    # Internals; the lock is held by the caller where it matters.

    def _pack(self, state):
        """``(stored state, zipped, cost)``; needs no lock."""
        if state is None:
            return None, False, ENTRY_OVERHEAD
        if self._compress and len(state) >= COMPRESS_MIN:
            packer = zlib.compressobj(*_ZLIB_ARGS)
            packed = packer.compress(state) + packer.flush()
            if len(packed) < len(state):
                return packed, True, len(packed) + ENTRY_OVERHEAD
        return state, False, len(state) + ENTRY_OVERHEAD

    def _put(self, oid, tid, stored, zipped, cost, known, live):
        if cost > self.limit_bytes or self._merge(oid, tid, known, live):
            return
        entry = self._protected.get(oid) or self._probation.get(oid)
        if entry is None:
            self._probation[oid] = _Entry(stored, tid, known, live, zipped,
                                          cost)
            self._size += cost
        else:
            if self.replaced is not None and entry.state is not None:
                old = entry.state
                self.replaced(oid, entry.tid,
                              zlib.decompress(old) if entry.zipped else old)
            delta = cost - entry.cost
            entry.state = stored
            entry.tid = tid
            entry.known = known
            entry.live = live
            entry.zipped = zipped
            entry.cost = cost
            self._size += delta
            if entry.hot:
                self._protected_size += delta
                self._protected.move_to_end(oid)
                if self._protected_size > self._protected_limit:
                    self._demote()
            else:
                self._probation.move_to_end(oid)
        if self._size > self.limit_bytes:
            self._evict()

    def _merge(self, oid, tid, known, live):
        """True when an entry of ``tid`` or later makes a store of ``tid``
        needless; the same revision then gets the later ``known``/``live``."""
        entry = self._protected.get(oid) or self._probation.get(oid)
        if entry is None or entry.tid < tid:
            return False
        if entry.tid == tid:
            if known > entry.known:
                entry.known = known
            if live:
                entry.live = True
        return True

    def _promote(self, oid, entry):
        del self._probation[oid]
        self._protected[oid] = entry
        entry.hot = True
        self._protected_size += entry.cost
        if self._protected_size > self._protected_limit:
            self._demote()

    def _demote(self):
        protected = self._protected
        probation = self._probation
        while self._protected_size > self._protected_limit:
            oid, entry = protected.popitem(last=False)
            entry.hot = False
            self._protected_size -= entry.cost
            probation[oid] = entry

    def _evict(self):
        probation = self._probation
        while self._size > self.limit_bytes:
            if probation:
                _, entry = probation.popitem(last=False)
            else:
                _, entry = self._protected.popitem(last=False)
                self._protected_size -= entry.cost
            self._size -= entry.cost


class NullCache:
    """The disabled cache (``limit_bytes`` 0): same API, keeping nothing."""

    limit_bytes = 0
    horizon = None
    hits = misses = 0

    def __len__(self):
        return 0

    def stats(self):
        return {'hits': 0, 'misses': 0, 'count': 0, 'size_bytes': 0,
                'limit_bytes': 0, 'protected_bytes': 0, 'horizon': None}

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


def make_cache(limit_bytes, object_max=16384, compression='none'):
    """A :class:`LocalCache`, or a :class:`NullCache` when ``limit_bytes`` is
    0.  Raises ValueError for a negative size or an unknown compression."""
    cache = LocalCache(limit_bytes, object_max, compression)
    return cache if limit_bytes else NullCache()


class _BadFile(Exception):
    pass


def read_file(path, identity):
    """``(saved_horizon, [(oid, tid, state), ...])`` from a file written by
    :meth:`LocalCache.save` for ``identity``, most valuable first.

    Returns None, never raising, when the file is missing, unreadable,
    damaged, truncated, of another format version or another identity;
    all but a missing file are logged as warnings."""
    try:
        with open(path, 'rb') as f:
            data = f.read()
    except FileNotFoundError:
        log.debug('No persistent cache file %s', path)
        return None
    except OSError as e:
        log.warning('Ignoring persistent cache file %s: %s', path, e)
        return None
    try:
        return _parse(data, identity)
    except (_BadFile, struct.error, zlib.error, UnicodeError) as e:
        log.warning('Ignoring persistent cache file %s: %s', path, e)
        return None


def _parse(data, identity):
    if len(data) < _HEAD.size + _HORIZON.size + _CRC.size:
        raise _BadFile('too short')
    magic, version, name_len = _HEAD.unpack_from(data)
    if magic != _MAGIC:
        raise _BadFile('not a cache file')
    if version != _VERSION:
        raise _BadFile(f'format version {version}, expected {_VERSION}')
    end = len(data) - _CRC.size
    if zlib.crc32(memoryview(data)[:end]) != _CRC.unpack_from(data, end)[0]:
        raise _BadFile('checksum mismatch (truncated or damaged)')
    pos = _HEAD.size
    name = data[pos:pos + name_len].decode('utf-8')
    if name != identity:
        raise _BadFile(f'written for {name!r}, not {identity!r}')
    horizon, count = _HORIZON.unpack_from(data, pos + name_len)
    pos += name_len + _HORIZON.size
    unpack = _RECORD.unpack_from
    step = _RECORD.size
    decompress = zlib.decompress
    entries = []
    append = entries.append
    for _ in range(count):
        oid, tid, kind, length = unpack(data, pos)
        pos += step
        if kind == _DELETED:
            state = None
        else:
            state = data[pos:pos + length]
            pos += length
            if kind == _ZLIB:
                state = decompress(state)
            elif kind != _RAW:
                raise _BadFile(f'unknown record kind {kind}')
        append((oid, tid, state))
    if pos != end:
        raise _BadFile('record lengths do not add up')
    return horizon, entries
