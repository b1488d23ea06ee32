"""Filling an empty LocalCache from its persistent file at start-up, in
one pass over the file's bytes: no list of its entries, one copy of each
state (relstorage.cache.local.LocalCache.restore_file).

Works on the cache's internals, as LocalCache's own methods do, with the
layout of its entries (``layout``: relstorage.cache.local.LAYOUT).
"""
import zlib

from relstorage.cache.file import DELETED
from relstorage.cache.file import RAW
from relstorage.cache.file import RECORD
from relstorage.cache.file import ZLIB


def restore_file(cache, layout, found, current_tid, changed_oids):
    """Put the entries of the CacheFile ``found`` that are still current
    into the empty ``cache`` (which does not compress), as
    LocalCache.restore would; returns how many.  Raises ValueError (or
    struct.error) when the file's records do not parse, leaving the
    cache empty."""
    if not isinstance(changed_oids, (set, frozenset, dict)):
        changed_oids = set(changed_oids)
    with cache._lock:
        if cache._horizon is None:
            cache._horizon = current_tid
        if current_tid < found.horizon:
            return 0
        try:
            restored, pos, full = restore_step(
                cache, layout, found, found.start, found.count, current_tid,
                changed_oids, current_tid >= cache._horizon)
            if not full and pos != found.end:
                raise ValueError('record lengths do not add up')
        except BaseException:
            # A damaged file: nothing of it stays.
            cache._entries.clear()
            cache._probation.clear()
            cache._size = 0
            raise
    return restored


def restore_step(cache, layout, found, pos, count, known, changed_oids,
                 live):
    """Put up to ``count`` records of ``found`` from offset ``pos`` into
    ``cache`` (its lock held by the caller), each current through
    ``known`` (``live``: and through the cache's horizon, no change having
    been reported for it since), skipping those of ``changed_oids``, newer
    than the file's horizon or cached already.  Returns ``(restored,
    pos, full)``: ``pos`` where the next record starts, ``full`` when the
    cache's room ran out."""
    saved = found.horizon
    live_flag = layout._LIVE if live else 0
    budget = cache._entry_limit - cache._size - cache._tables()
    data = found.data
    view = memoryview(data)
    unpack, step = RECORD.unpack_from, RECORD.size
    entries, probation = cache._entries, cache._probation
    object_max, size, restored, full = cache.object_max, 0, 0, False
    try:
        for _ in range(count):
            oid, tid, kind, length = unpack(data, pos)
            start = pos + step
            pos = start + length
            if (oid in changed_oids or tid > saved or length > object_max
                    or oid in entries):
                continue
            if kind == RAW:
                stored, flags = view[start:pos], live_flag
            elif kind == DELETED:
                stored, flags = None, layout._DELETED_STATE | live_flag
            elif kind == ZLIB:
                stored = zlib.decompress(view[start:pos])
                flags = live_flag
                if len(stored) > object_max:
                    continue
            else:
                raise ValueError(f'unknown record kind {kind}')
            length = 0 if stored is None else len(stored)
            cost = layout.ENTRY_OVERHEAD + layout._TABLE_ALLOWANCE + length
            if cost > budget:
                full = True
                break
            budget -= cost
            meta = layout._pack_meta(tid, known, flags)
            # (bytes + a view of the file: one copy.)
            entries[oid] = meta if stored is None else meta + stored
            # The file's first entries are its most valuable: the most
            # recent on probation.
            probation.appendleft(oid)
            size += length + layout.ENTRY_OVERHEAD
            restored += 1
    finally:
        cache._size += size
    return restored, pos, full


def fill_empty(cache, layout, chosen, known, live):
    """Put ``chosen`` (most valuable first) into the empty cache, on
    probation, the most valuable the most recent; the lock is held."""
    entries, probation = cache._entries, cache._probation
    live_flag = layout._LIVE if live else 0
    size = 0
    for oid, tid, stored, zipped in reversed(chosen):
        if stored is None:
            entries[oid] = layout._pack_meta(
                tid, known, layout._DELETED_STATE | live_flag)
            size += layout.ENTRY_OVERHEAD
        else:
            # (bytes + a memoryview of the file: one copy.)
            entries[oid] = layout._pack_meta(
                tid, known, (layout._ZIPPED if zipped else 0) | live_flag
            ) + stored
            size += len(stored) + layout.ENTRY_OVERHEAD
        probation.append(oid)
    cache._size += size
