"""The shared local cache: MVCC validity, eviction, accounting, the file."""
import logging
import os
import random
import struct
import sys
import threading
import zlib
from collections import deque

import pytest

from relstorage.cache.file import open_file
from relstorage.cache.file import read_file
from relstorage.cache.local import ENTRY_OVERHEAD
from relstorage.cache.local import LocalCache
from relstorage.cache.local import NullCache
from relstorage.cache.local import entry_state
from relstorage.cache.local import make_cache

BIG = 1 << 30


def cache_at(horizon, limit=BIG, **kw):
    cache = LocalCache(limit, **kw)
    cache.set_horizon(horizon)
    return cache


def tables(probation, protected=0):
    """What ``sys.getsizeof`` says the dict and the queues hold for
    ``probation`` + ``protected`` entries, all grown one by one (a deque
    starts in the middle of its first block)."""
    grown = {}
    queues = deque(), deque()
    for queue, count in zip(queues, (probation, protected)):
        for n in range(count):
            grown[10 ** 6 + len(grown)] = None
            queue.append(n)
    return sys.getsizeof(grown) + sum(map(sys.getsizeof, queues))


def entries(cache):
    """``{oid: (tid, known, live, zipped, stored payload or None)}``."""
    found = {}
    for oid, blob in cache._entries.items():
        tid, known, flags = struct.unpack_from('<QQB', blob)
        found[oid] = (tid, known, bool(flags & 1), bool(flags & 2),
                      None if flags & 4 else blob[17:])
    return found


def protected(cache):
    """The oids the protected queue holds, by their entries' flags."""
    return {oid for oid, blob in cache._entries.items() if blob[16] & 16}


def check_accounting(cache):
    """The accounted size is the sum of the entries' costs, within limit."""
    def cost(payload):
        return ENTRY_OVERHEAD + (0 if payload is None else len(payload))
    found = entries(cache)
    assert cache._size == sum(cost(e[4]) for e in found.values())
    assert cache._protected_size == sum(
        cost(found[oid][4]) for oid in cache._protected)
    # Every entry in exactly one queue, the one its flag names.
    assert sorted(cache._protected) == sorted(protected(cache))
    assert sorted(cache._probation) == sorted(set(found) - protected(cache))
    assert cache._size + cache._tables() <= cache._entry_limit
    assert cache._entry_limit <= cache.limit_bytes
    # Probation keeps room: protected takes a share of what the dicts
    # leave (checked at each promotion; a table growing since may shift it
    # by an entry or two).
    assert cache._protected_size <= cache._protected_limit() + 2500


# MVCC validity

@pytest.mark.parametrize('compression', ['none', 'zlib'])
def test_an_older_revision_refused_goes_to_replaced(compression):
    """A load at a snapshot older than the cached revision brings an older
    one, which the cache does not keep; ``replaced`` gets it, as it gets a
    revision that a newer one replaces (history-free conflict resolution
    may need either).  The same revision stored again, or a newer one, is
    not handed over as refused."""
    handed = []
    cache = cache_at(10, compression=compression)
    cache.replaced = lambda oid, tid, entry: handed.append(
        (oid, tid, entry_state(entry)))
    old_state, new_state = b'old ' * 200, b'new ' * 200
    cache.store_loaded(1, 20, new_state, 25)
    cache.store_loaded(1, 20, new_state, 30)        # the same revision
    assert handed == []
    cache.store_loaded(1, 15, old_state, 18)        # refused: 20 is cached
    assert handed == [(1, 15, old_state)]
    assert cache.get(1, 25) == (new_state, 20)
    cache.store_committed(12, {1: b'older still', 2: None})
    assert handed[1:] == [(1, 12, b'older still')]
    cache.store_committed(40, {1: b'newest'})       # replaces 20
    assert handed[2:] == [(1, 20, new_state)]
    check_accounting(cache)



def test_older_snapshot_never_sees_newer_state():
    cache = cache_at(10)
    cache.store_loaded(1, 20, b'new', 25)
    assert cache.get(1, 25) == (b'new', 20)
    assert cache.get(1, 20) == (b'new', 20)
    assert cache.get(1, 19) is None
    assert cache.get(1, 15) is None


def test_newer_snapshot_never_sees_stale_state():
    cache = cache_at(10)
    cache.store_loaded(1, 5, b'a', 10)
    assert cache.advance(10, 20, [(1, 15), (2, 12)])
    assert cache.get(1, 20) is None
    assert cache.get(1, 10) == (b'a', 5)
    # Valid through 14 in truth, but the cache only knows through G_old.
    assert cache.get(1, 12) is None
    cache.store_loaded(1, 15, b'b', 20)
    assert cache.get(1, 20) == (b'b', 15)
    assert cache.get(1, 10) is None      # one revision per oid: the newer


def test_live_entry_follows_the_horizon():
    cache = cache_at(10)
    cache.store_loaded(1, 5, b'a', 10)
    assert cache.get(1, 11) is None      # beyond both known and G
    assert cache.advance(10, 20, [(2, 15)])
    assert cache.get(1, 20) == (b'a', 5)
    assert cache.get(1, 21) is None
    assert cache.advance(20, 30, [])
    assert cache.get(1, 30) == (b'a', 5)
    assert cache.advance(30, 40, [(1, 35)])
    assert cache.get(1, 30) == (b'a', 5)  # frozen at the old horizon
    assert cache.get(1, 35) is None
    assert cache.get(1, 40) is None
    assert cache.advance(40, 50, [])      # frozen stays frozen
    assert cache.get(1, 30) == (b'a', 5)
    assert cache.get(1, 50) is None


def test_two_instances_at_different_snapshots():
    cache = cache_at(100)
    # Instance A reads at 100, object 1 revision 90.
    cache.store_loaded(1, 90, b'v90', 100)
    # Instance B polls to 120: object 1 changed at 110.
    assert cache.advance(100, 120, [(1, 110)])
    assert cache.get(1, 100) == (b'v90', 90)   # A still sees its revision
    assert cache.get(1, 120) is None           # B must load
    cache.store_loaded(1, 110, b'v110', 120)
    assert cache.get(1, 120) == (b'v110', 110)
    assert cache.get(1, 100) is None           # A must not see 110
    # A loads again at 100 and gets 90: the newer revision is kept.
    cache.store_loaded(1, 90, b'v90', 100)
    assert cache.get(1, 120) == (b'v110', 110)
    assert cache.get(1, 100) is None
    # A polls to 120 (nothing new for the cache) and now shares B's entry.
    assert cache.advance(100, 120, [(1, 110)])
    assert cache.get(1, 120) == (b'v110', 110)


def test_out_of_order_advance():
    cache = cache_at(10)
    cache.store_loaded(1, 5, b'a', 10)
    assert not cache.advance(20, 30, [(1, 25)])   # a gap (10, 20]
    assert cache.horizon == 10
    assert cache.get(1, 10) == (b'a', 5)
    assert cache.advance(10, 30, [(1, 25)])
    assert cache.horizon == 30
    assert cache.get(1, 10) == (b'a', 5)
    assert cache.get(1, 30) is None
    assert cache.advance(5, 8, [(1, 7)])          # already applied
    assert cache.advance(10, 30, [(1, 25)])       # replayed
    assert cache.horizon == 30


def test_overlapping_advance():
    cache = cache_at(20)
    cache.store_loaded(1, 5, b'a', 20)
    cache.store_loaded(2, 5, b'b', 20)
    # A poll from 10 covers (10, 20] again plus (20, 30].
    assert cache.advance(10, 30, [(1, 25), (3, 15)])
    assert cache.get(1, 20) == (b'a', 5)
    assert cache.get(1, 30) is None
    assert cache.get(2, 30) == (b'b', 5)


def test_advance_without_horizon_refuses():
    cache = LocalCache(BIG)
    assert not cache.advance(0, 10, [])
    assert cache.horizon is None


def test_store_below_the_horizon_is_frozen():
    cache = cache_at(20)
    cache.store_loaded(1, 5, b'a', 15)    # changes in (15, 20] not seen
    assert cache.get(1, 15) == (b'a', 5)
    assert cache.get(1, 16) is None
    assert cache.get(1, 20) is None
    assert cache.advance(20, 30, [])
    assert cache.get(1, 30) is None
    # A load at the horizon proves it current there: same tid merges.
    cache.store_loaded(1, 5, b'a', 30)
    assert cache.get(1, 30) == (b'a', 5)
    assert cache.get(1, 15) == (b'a', 5)
    assert cache.advance(30, 40, [])
    assert cache.get(1, 40) == (b'a', 5)


def test_same_tid_keeps_the_longer_validity():
    cache = cache_at(20)
    cache.store_loaded(1, 5, b'a', 25)
    cache.store_loaded(1, 5, b'a', 12)    # frozen load does not unfreeze
    assert cache.get(1, 25) == (b'a', 5)
    assert cache.advance(20, 30, [])
    assert cache.get(1, 30) == (b'a', 5)


def test_lower_tid_does_not_replace():
    cache = cache_at(10)
    cache.store_loaded(1, 8, b'new', 10)
    cache.store_loaded(1, 3, b'old', 5)
    assert cache.get(1, 10) == (b'new', 8)
    assert cache.get(1, 5) is None
    assert cache.get_revision(1, 3) is None


def test_store_committed():
    cache = cache_at(10)
    cache.store_loaded(1, 5, b'a', 10)
    cache.store_committed(15, {1: b'b', 2: b'c'})
    assert cache.get(1, 12) is None
    assert cache.get(1, 15) == (b'b', 15)
    assert cache.get(2, 15) == (b'c', 15)
    assert cache.get(2, 16) is None       # beyond known and G
    assert cache.advance(10, 15, [(1, 15), (2, 15)])   # its own commit
    assert cache.advance(15, 20, [(3, 18)])
    assert cache.get(1, 20) == (b'b', 15)
    assert cache.advance(20, 30, [(2, 25)])
    assert cache.get(2, 20) == (b'c', 15)
    assert cache.get(2, 30) is None


def test_store_committed_behind_the_horizon_is_frozen():
    cache = cache_at(30)
    cache.store_committed(25, {1: b'x'})
    assert cache.get(1, 25) == (b'x', 25)
    assert cache.get(1, 30) is None


def test_set_horizon():
    cache = LocalCache(BIG)
    cache.store_loaded(1, 5, b'a', 10)    # no horizon: frozen
    cache.store_committed(12, {2: b'b'})
    cache.set_horizon(10)
    assert cache.get(1, 10) == (b'a', 5)
    assert cache.advance(10, 20, [])
    assert cache.get(1, 20) is None
    assert cache.get(2, 12) == (b'b', 12)
    assert cache.get(2, 20) is None
    with pytest.raises(ValueError):
        cache.set_horizon(30)


def test_tombstones_are_cached():
    cache = cache_at(10)
    cache.store_loaded(1, 7, None, 10)
    assert cache.get(1, 10) == (None, 7)
    assert len(cache) == 1
    assert cache.stats()['entry_bytes'] == ENTRY_OVERHEAD
    cache.store_committed(12, {2: None})
    assert cache.get(2, 12) == (None, 12)


def test_get_revision():
    cache = cache_at(10)
    cache.store_loaded(1, 5, b'a', 10)
    assert cache.advance(10, 20, [(1, 15)])
    assert cache.get_revision(1, 5) == b'a'   # regardless of any snapshot
    assert cache.get_revision(1, 4) is None
    assert cache.get_revision(2, 5) is None


def test_get_before():
    cache = cache_at(10)
    cache.store_loaded(1, 5, b'a', 10)
    assert cache.get_before(1, 11, 10) == (b'a', 5)
    assert cache.get_before(1, 6, 10) == (b'a', 5)
    assert cache.get_before(1, 5, 10) is None    # wants an older revision
    assert cache.get_before(1, 12, 10) is None   # beyond the snapshot
    assert cache.advance(10, 20, [(1, 15)])
    assert cache.get_before(1, 11, 10) == (b'a', 5)
    assert cache.get_before(1, 16, 20) is None
    stats = cache.stats()
    assert (stats['hits'], stats['misses']) == (3, 3)


def test_invalidate_all_and_discard():
    cache = cache_at(10)
    for oid in range(5):
        cache.store_loaded(oid, 5, b'x' * oid, 10)
    cache.discard([1, 3, 99])
    assert len(cache) == 3
    assert cache.get(1, 10) is None
    assert cache.get(2, 10) == (b'xx', 5)
    check_accounting(cache)
    cache.invalidate_all()
    assert len(cache) == 0
    assert cache.horizon is None
    assert cache.stats()['entry_bytes'] == 0
    cache.set_horizon(3)
    cache.clear()
    assert cache.horizon is None


def test_stats_count_hits_and_misses():
    cache = cache_at(10)
    cache.store_loaded(1, 5, b'a', 10)
    cache.get(1, 10)
    cache.get(1, 10)
    cache.get(2, 10)
    assert cache.stats() == {
        'hits': 2, 'misses': 1, 'count': 1,
        'size_bytes': 1 + ENTRY_OVERHEAD + cache._tables(),
        'entry_bytes': 1 + ENTRY_OVERHEAD, 'limit_bytes': BIG,
        'protected_bytes': 0,       # moved there only to make room
        'loop_watch_bytes': 1 << 20, 'looping': False, 'horizon': 10}


# Memory and eviction

def test_object_max_and_oversized():
    cache = cache_at(10, object_max=100)
    cache.store_loaded(1, 5, b'x' * 101, 10)
    cache.store_committed(12, {2: b'x' * 101, 3: b'x' * 100})
    assert cache.get(1, 10) is None
    assert cache.get(2, 12) is None
    assert cache.get(3, 12) == (b'x' * 100, 12)
    tiny = cache_at(10, limit=ENTRY_OVERHEAD + 10 + tables(1, 0))
    tiny.store_loaded(1, 5, b'x' * 11, 10)
    assert len(tiny) == 0
    tiny.store_loaded(1, 5, b'x' * 10, 10)
    assert len(tiny) == 1


def test_limit_is_never_exceeded():
    rng = random.Random(42)
    limit = 60 * (ENTRY_OVERHEAD + 100)
    cache = cache_at(1000, limit=limit)
    for _step in range(5000):
        oid = rng.randrange(300)
        action = rng.random()
        if action < 0.5:
            cache.store_loaded(oid, rng.randrange(1, 1000),
                               b'x' * rng.randrange(300), 1000)
        elif action < 0.9:
            cache.get(oid, 1000)
        elif action < 0.95:
            cache.store_committed(1000, {oid: b'y' * rng.randrange(300)})
        else:
            cache.discard([oid])
        assert cache.stats()['size_bytes'] <= limit
    check_accounting(cache)
    assert len(cache) > 10


def test_limit_zero_stores_nothing():
    cache = cache_at(10, limit=0)
    cache.store_loaded(1, 5, None, 10)
    assert cache.get(1, 10) is None
    assert len(cache) == 0


def test_scan_does_not_flush_the_protected_segment():
    cache = cache_at(10, limit=100 * (ENTRY_OVERHEAD + 100) + tables(100, 0))
    hot = range(50)
    for oid in hot:
        cache.store_loaded(oid, 5, b'h' * 100, 10)
    for oid in hot:
        assert cache.get(oid, 10) is not None      # promoted
    for oid in range(1000, 11000):                 # a scan, each read once
        assert cache.get(oid, 10) is None
        cache.store_loaded(oid, 5, b's' * 100, 10)
    assert all(cache.get(oid, 10) == (b'h' * 100, 5) for oid in hot)
    check_accounting(cache)
    # Fewer than 100: the scan left probation's table at its largest.
    assert 60 <= len(cache) <= 100


def test_protected_overflow_is_demoted_then_evicted_last():
    cost = ENTRY_OVERHEAD + 1000
    cache = cache_at(10, limit=100 * cost + tables(100))
    for oid in range(100):
        cache.store_loaded(oid, 5, b'x' * 1000, 10)
        cache.get(oid, 10)                  # read: marked, still in probation
    assert len(cache) == 100 and not cache._protected
    cache.store_loaded(1000, 5, b'x' * 1000, 10)
    check_accounting(cache)
    # Making room moved the read entries, oldest first, to the protected
    # queue until it held its share; its oldest went back to probation,
    # unread, behind the new entry, the oldest unread and so the evicted.
    # (The queues' blocks may make it evict one more: the oldest demoted.)
    assert not cache.has(1000, 10)
    demoted = list(cache._probation)
    oldest, first = demoted[0], demoted[-1] + 1
    assert oldest <= 1 and 5 <= len(demoted) <= 40
    assert demoted == list(range(oldest, first))
    assert list(cache._protected) == list(range(first, 100))
    cache.store_loaded(1001, 5, b'x' * 1000, 10)
    assert not cache.has(oldest, 10)
    assert list(cache._probation) == demoted[1:] + [1001]
    # The oldest protected entry is read again, and so are the demoted
    # ones: making room now moves those back to the protected queue,
    # which overflows; its oldest goes round instead of being demoted.
    cache.get(first, 10)
    for oid in demoted[1:]:
        cache.get(oid, 10)
    cache.store_loaded(1002, 5, b'x' * 1000, 10)
    check_accounting(cache)
    assert not cache.has(1001, 10)          # probation's oldest unread
    assert first in cache._protected
    assert first + 1 in cache._probation    # demoted in its place
    assert set(demoted[1:]) <= set(cache._protected)


def test_replacement_updates_the_accounting():
    cache = cache_at(10)
    cache.store_loaded(1, 5, b'x' * 10, 10)
    cache.get(1, 10)
    cache.store_loaded(1, 8, b'x' * 1000, 10)
    check_accounting(cache)
    assert cache.stats()['entry_bytes'] == 1000 + ENTRY_OVERHEAD


def test_zlib_compression():
    cache = cache_at(10, compression='zlib')
    state = b'persistent mapping ' * 100
    noise = os.urandom(500)
    cache.store_loaded(1, 5, state, 10)
    cache.store_loaded(2, 5, noise, 10)
    cache.store_loaded(3, 5, b'short', 10)
    assert cache.get(1, 10) == (state, 5)
    assert cache.get_revision(1, 5) == state
    assert cache.get(2, 10) == (noise, 5)
    assert cache.get(3, 10) == (b'short', 5)
    size = cache.stats()['entry_bytes'] - 3 * ENTRY_OVERHEAD
    assert size < len(state) // 5 + len(noise) + 5
    check_accounting(cache)
    cache.store_loaded(1, 5, state, 20)       # same revision, no new work
    assert entries(cache)[1][1] == 20          # known


def test_bad_compression_and_sizes():
    with pytest.raises(ValueError):
        LocalCache(100, compression='lz4')
    with pytest.raises(ValueError):
        LocalCache(-1)
    with pytest.raises(ValueError):
        make_cache(10, compression='gzip')


def test_threads_keep_the_accounting_exact():
    limit = 200 * (ENTRY_OVERHEAD + 50)
    cache = cache_at(0, limit=limit)
    errors = []

    def reader(seed):
        rng = random.Random(seed)
        try:
            for _ in range(3000):
                oid = rng.randrange(500)
                snapshot = cache.horizon
                found = cache.get(oid, snapshot)
                if found is None:
                    cache.store_loaded(oid, 0, b'%d' % oid * 10, snapshot)
                elif found[0] != b'%d' % oid * 10:
                    errors.append(found)
        except Exception as e:        # pragma: no cover - reported below
            errors.append(e)

    def poller():
        for tid in range(1, 300):
            cache.advance(tid - 1, tid, [(tid % 7 + 1000, tid)])

    threads = [threading.Thread(target=reader, args=(n,)) for n in range(4)]
    threads.append(threading.Thread(target=poller))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    check_accounting(cache)


# The disabled cache

def test_null_cache_has_the_same_api():
    null = make_cache(0)
    assert isinstance(null, NullCache)
    assert isinstance(make_cache(10), LocalCache)
    public = {n for n in dir(LocalCache) if not n.startswith('_')}
    assert public - {'compression', 'object_max'} <= set(dir(null))
    null.set_horizon(10)
    null.store_loaded(1, 5, b'a', 10)
    null.store_committed(12, {1: b'b'})
    assert null.get(1, 12) is None
    assert null.get_before(1, 13, 12) is None
    assert null.get_revision(1, 12) is None
    assert null.advance(10, 20, [])
    assert len(null) == 0 and null.stats()['count'] == 0
    assert null.save('/nonexistent/x', 'db') == 0
    assert null.restore(1, [(1, 1, b'')], 2, ()) == 0


# The persistent cache

def test_save_and_restore(tmp_path):
    path = str(tmp_path / 'cache')
    cache = cache_at(100)
    cache.store_loaded(1, 50, b'one', 100)
    cache.store_loaded(2, 60, b'two', 100)
    cache.store_loaded(3, 70, None, 100)
    cache.store_loaded(4, 40, b'frozen', 90)      # frozen: not saved
    cache.store_committed(110, {5: b'after'})     # newer than G: not saved
    cache.get(2, 100)                             # most valuable
    assert cache.save(path, 'db-1') == 3
    saved = read_file(path, 'db-1')
    assert saved == (100, [(2, 60, b'two'), (3, 70, None), (1, 50, b'one')])

    fresh = LocalCache(BIG)
    assert fresh.restore(saved[0], saved[1], 130, {1}) == 2
    assert fresh.horizon == 130
    assert fresh.get(1, 130) is None              # changed since: dropped
    assert fresh.get(2, 130) == (b'two', 60)
    assert fresh.get(3, 130) == (None, 70)
    assert fresh.get(2, 59) is None
    assert fresh.advance(130, 140, [(2, 135)])
    assert fresh.get(2, 140) is None
    assert fresh.get(3, 140) == (None, 70)


def test_restore_after_going_back_in_time(tmp_path):
    path = str(tmp_path / 'cache')
    cache = cache_at(100)
    cache.store_loaded(1, 50, b'one', 100)
    cache.save(path, 'db')
    saved_horizon, entries = read_file(path, 'db')
    fresh = LocalCache(BIG)
    assert fresh.restore(saved_horizon, entries, 90, ()) == 0
    assert len(fresh) == 0
    assert fresh.horizon == 90


def test_restore_merges_into_a_running_cache():
    cache = cache_at(200)
    cache.store_loaded(1, 150, b'newer', 200)
    entries = [(1, 50, b'old'), (2, 60, b'two')]
    assert cache.restore(100, entries, 180, set()) == 2
    assert cache.get(1, 200) == (b'newer', 150)     # higher tid kept
    assert cache.get(2, 180) == (b'two', 60)
    assert cache.get(2, 190) is None                # behind G: frozen
    cache.restore(100, [(3, 60, b'three')], 220, set())
    assert cache.get(3, 220) == (b'three', 60)      # ahead of G: live


def test_restore_respects_the_limit(tmp_path):
    cost = ENTRY_OVERHEAD + 10
    big = cache_at(100)
    for oid in range(100):
        big.store_loaded(oid, 50, b'%010d' % oid, 100)
    for oid in range(10):
        big.get(oid, 100)                  # 9 .. 0 become the most valuable
    path = str(tmp_path / 'cache')
    assert big.save(path, 'db') == 100
    small = LocalCache(20 * cost + tables(20, 0))
    saved_horizon, entries = read_file(path, 'db')
    assert entries[0][0] == 9
    # Restore plans 110 bytes per entry for the tables: somewhat fewer.
    restored = small.restore(saved_horizon, entries, 100, ())
    assert 12 <= restored < 20
    assert len(small) == restored
    check_accounting(small)
    for oid in range(10):
        assert small.get(oid, 100) is not None


@pytest.mark.parametrize('compression', ['none', 'zlib'])
def test_save_and_load_100k(tmp_path, compression):
    path = str(tmp_path / 'cache')
    cache = cache_at(1000, compression=compression)
    rng = random.Random(7)
    expected = {}
    for oid in range(100000):
        state = (b'cpersistent\nPersistent\nq\x01.}q\x02(U\x04data'
                 + rng.randbytes(8) * 28)[:250]
        tid = 500 + oid % 400
        cache.store_loaded(oid, tid, state, 1000)
        expected[oid] = (state, tid)
    assert cache.save(path, 'db') == 100000
    saved_horizon, entries = read_file(path, 'db')
    assert saved_horizon == 1000
    assert {oid: (state, tid) for oid, tid, state in entries} == expected
    changed = set(range(0, 100000, 10))
    fresh = LocalCache(BIG, compression=compression)
    assert fresh.restore(saved_horizon, entries, 1200, changed) == 90000
    for oid in (1, 99, 50001, 99999):
        assert fresh.get(oid, 1200) == expected[oid]
    assert fresh.get(10, 1200) is None
    check_accounting(fresh)


def test_save_is_atomic(tmp_path, monkeypatch):
    path = str(tmp_path / 'cache')
    cache = cache_at(100)
    cache.store_loaded(1, 50, b'one', 100)
    cache.save(path, 'db')
    before = (tmp_path / 'cache').read_bytes()
    cache.store_loaded(2, 60, b'two', 100)

    def fail(fd):
        raise OSError('disk full')
    monkeypatch.setattr(os, 'fsync', fail)
    with pytest.raises(OSError):
        cache.save(path, 'db')
    assert (tmp_path / 'cache').read_bytes() == before
    assert os.listdir(tmp_path) == ['cache']


def test_save_without_horizon_writes_nothing(tmp_path):
    path = str(tmp_path / 'cache')
    assert LocalCache(BIG).save(path, 'db') == 0
    assert not os.path.exists(path)


def saved_file(tmp_path):
    path = str(tmp_path / 'cache')
    cache = cache_at(100, compression='zlib')
    cache.store_loaded(1, 50, b'one' * 100, 100)
    cache.store_loaded(2, 50, None, 100)
    cache.save(path, 'db')
    return path


def test_read_file_round_trips_compressed_states(tmp_path):
    assert read_file(saved_file(tmp_path), 'db') == (
        100, [(2, 50, None), (1, 50, b'one' * 100)])


def test_read_file_missing(tmp_path, caplog):
    assert read_file(str(tmp_path / 'none'), 'db') is None
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize('damage', [
    'truncated', 'flipped', 'empty', 'garbage', 'version', 'identity',
    'directory', 'bad kind', 'bad zlib'])
def test_read_file_rejects_bad_files(tmp_path, caplog, damage):
    path = saved_file(tmp_path)
    data = (tmp_path / 'cache').read_bytes()
    identity = 'db'
    if damage == 'truncated':
        data = data[:-30]
    elif damage == 'flipped':
        data = data[:40] + bytes([data[40] ^ 1]) + data[41:]
    elif damage == 'empty':
        data = b''
    elif damage == 'garbage':
        data = os.urandom(500)
    elif damage == 'version':
        data = data[:8] + struct.pack('>H', 99) + data[10:]
    elif damage == 'identity':
        identity = 'another-db'
    elif damage in ('bad kind', 'bad zlib'):
        # A well-formed file (valid checksum) with a bad record inside.
        start = 12 + 2 + 16
        record = struct.pack('>QQBI', 1, 50, 7 if damage == 'bad kind' else 1,
                             3) + b'abc'
        body = data[:start - 8] + struct.pack('>Q', 1) + record
        data = body + struct.pack('>I', zlib.crc32(body))
    if damage == 'directory':
        path = str(tmp_path)
    else:
        with open(path, 'wb') as f:
            f.write(data)
    with caplog.at_level(logging.WARNING, logger='relstorage.cache.file'):
        assert read_file(path, identity) is None
    assert any('Ignoring persistent cache file' in r.getMessage()
               for r in caplog.records)


def test_memory_used_stays_within_the_limit():
    # What the process really holds for the cache (tracemalloc), while
    # entries come and go (hits, misses, evictions, promotions: the dicts'
    # tables grow with the churn), stays within the limit.  With a fixed
    # per-entry charge for the dicts this reached 107-112 % of the limit.
    import tracemalloc
    limit = 2 * 1024 * 1024
    rng = random.Random(1)
    keys = 3 * limit // 475          # three times what fits
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        cache = cache_at(10, limit=limit)          # with its loop watch
        peak = 0
        for step in range(4 * keys):
            oid = 10 ** 6 + rng.randrange(keys)
            if rng.random() >= 0.7 or cache.get(oid, 10) is None:
                cache.store_loaded(oid, 5, os.urandom(rng.randrange(100, 400)),
                                   10)
            if step % 2000 == 0:
                peak = max(peak, tracemalloc.get_traced_memory()[0] - base)
        used = max(peak, tracemalloc.get_traced_memory()[0] - base)
    finally:
        tracemalloc.stop()
    check_accounting(cache)
    assert len(cache) > 3000
    assert cache.stats()['size_bytes'] > limit * 0.95
    assert used <= limit, (used, limit)


def loop_pass(cache, oids, size=100):
    """Read ``oids`` in order through the cache; returns the hits."""
    hits = 0
    for oid in oids:
        if cache.get(oid, 10) is not None:
            hits += 1
        else:
            cache.store_loaded(oid, 5, b'x' * size, 10)
    return hits


def test_a_loop_larger_than_the_cache_keeps_hitting():
    # A plain LRU hits nothing here: each object is evicted just before
    # the loop comes back to it.
    cache = cache_at(10, limit=2 * 1024 * 1024)
    assert cache.stats()['loop_watch_bytes'] == 16384
    loop = range(cache._entry_limit // (ENTRY_OVERHEAD + 100))
    assert loop_pass(cache, loop) == 0
    fit = len(cache)
    assert fit < 0.85 * len(loop)
    loop_pass(cache, loop)
    hits = loop_pass(cache, loop)
    assert cache.stats()['looping']
    assert hits > 0.6 * fit, (hits, fit)
    check_accounting(cache)
    # The application moves on to a few other objects, read repeatedly:
    # the cache stops holding on to the loop and takes them in.
    others = range(10 ** 6, 10 ** 6 + fit // 10)
    assert loop_pass(cache, others) == 0
    assert loop_pass(cache, others) > 0.9 * len(others)
    assert loop_pass(cache, others) == len(others)
    # A new loop, larger than the probation segment: it wins its place
    # over the passes (a plain segmented LRU would never hit it).
    others = range(10 ** 7, 10 ** 7 + fit // 2)
    hits = [loop_pass(cache, others) for _ in range(6)]
    assert hits[0] == 0 and hits[5] > hits[2] > 0.25 * len(others), hits
    check_accounting(cache)


def test_small_caches_do_not_watch_for_loops():
    cache = cache_at(10, limit=100 * (ENTRY_OVERHEAD + 100) + tables(100, 0))
    assert cache.stats()['loop_watch_bytes'] == 0
    loop = range(125)
    for _ in range(3):
        assert loop_pass(cache, loop) == 0
    assert 60 <= len(cache) <= 100


def test_the_dict_stays_compact_under_churn():
    # A key deleted for each one added: CPython lets such a dict grow to
    # 117 bytes per key here (three times its keys when its table fills
    # with deleted slots); the cache rebuilds it instead, and so holds
    # about 4,000 more states of 250 bytes in 10 MB.
    cache = cache_at(10, limit=10 * 1024 * 1024)
    state = bytes(250)
    for oid in range(100000):
        cache.store_loaded(oid, 5, state, 10)
    assert sys.getsizeof(cache._entries) <= 64 * len(cache) + 1024
    assert len(cache) > 26000
    check_accounting(cache)


def test_restoring_into_an_empty_cache_puts_entries_as_stores_do(tmp_path):
    """Start-up fills an empty cache in one pass: the same entries, sizes
    and order of eviction as the path that merges into a running cache."""
    source = cache_at(100)
    for oid in range(50):
        source.store_loaded(oid, 50 + oid, None if oid == 7 else
                            b'%04d' % oid * (oid % 5 + 1), 100)
    path = str(tmp_path / 'cache')
    source.save(path, 'db')
    saved_horizon, entries = read_file(path, 'db')
    empty, running = LocalCache(BIG), LocalCache(BIG)
    running.store_loaded(1000, 60, b'other', 100)
    assert empty.restore(saved_horizon, entries, 120, set()) == 50
    assert running.restore(saved_horizon, entries, 120, set()) == 50
    assert list(empty._probation) == [
        oid for oid in running._probation if oid != 1000]
    assert empty._size == running._size - (ENTRY_OVERHEAD + len(b'other'))
    for oid in range(50):
        assert empty.get(oid, 120) == running.get(oid, 120)
        found = empty.get(oid, 120)
        assert found is not None and (found[0] is None or
                                      type(found[0]) is bytes)


def _comparable(cache, oids, snapshot):
    return ([cache.get(oid, snapshot) for oid in oids], list(cache._probation),
            cache._size, cache.horizon)


@pytest.mark.parametrize('compressed', [False, True], ids=['raw', 'zlib'])
def test_restoring_from_the_file_at_start_up_is_restoring_its_records(
        tmp_path, compressed):
    """LocalCache.restore_file (one pass over the file's bytes, at start-up)
    restores what restore does from the parsed records: the same entries,
    order, sizes, changed objects dropped, the budget kept."""
    source = cache_at(100, compression='zlib' if compressed else 'none')
    for oid in range(60):
        source.store_loaded(oid, 40 + oid, None if oid % 13 == 0 else
                            b'state %d ' % oid * 20, 100)
    for oid in (5, 6, 7):
        source.get(oid, 100)
    path = str(tmp_path / 'cache')
    source.save(path, 'db')
    changed = {3, 9, 40}
    for limit in (BIG, 30 * (ENTRY_OVERHEAD + 200)):
        by_records, by_file = LocalCache(limit), LocalCache(limit)
        saved, entries = read_file(path, 'db')
        expected = by_records.restore(saved, entries, 130, changed)
        assert by_file.restore_file(open_file(path, 'db'), 130,
                                    changed) == expected
        assert _comparable(by_file, range(60), 130) == _comparable(
            by_records, range(60), 130)
    assert expected < 60 - len(changed)     # (the small budget's count)
    assert by_file.get(3, 130) is None and by_file.get(5, 130) is not None


def test_a_file_whose_records_do_not_add_up_restores_nothing(tmp_path):
    cache = cache_at(100)
    cache.store_loaded(1, 50, b'one', 100)
    cache.store_loaded(2, 60, b'two', 100)
    path = str(tmp_path / 'cache')
    cache.save(path, 'db')
    found = open_file(path, 'db')
    found.count += 1            # one record more than the file holds
    fresh = LocalCache(BIG)
    with pytest.raises((ValueError, struct.error)):
        fresh.restore_file(found, 120, set())
    assert len(fresh) == 0 and fresh._size == 0
