"""The shared local cache inside a storage: MVCC across instances, what
fills it, options, and the persistent file (cache-local-dir)."""
import os

import pytest
import transaction
import ZODB
from persistent import Persistent
from persistent.mapping import PersistentMapping
from ZODB.POSException import ConflictError
from ZODB.POSException import POSKeyError
from ZODB.utils import p64

from relstorage.cache import persistent as persistentcache
from relstorage.cache.recent import ENTRY_OVERHEAD
from relstorage.cache.recent import RecentStates
from relstorage.config.options import ConfigurationError
from relstorage.config.options import Options


def _commit_value(db, key, value):
    tm = transaction.TransactionManager()
    conn = db.open(tm)
    root = conn.root()
    if key in root:
        root[key]['v'] = value
    else:
        root[key] = PersistentMapping(v=value)
    tm.commit()
    oid = root[key]._p_oid
    conn.close()
    return oid


def _value(instance, oid):
    from ZODB._compat import PersistentUnpickler
    import io
    state, tid = instance.load(oid)
    unpickler = PersistentUnpickler(None, lambda ref: None, io.BytesIO(state))
    unpickler.load()   # the class
    return unpickler.load()['data']['v'], tid


def _stats(storage):
    return storage._cache.stats()


def test_instances_share_what_one_loaded(open_storage):
    storage = open_storage()
    db = ZODB.DB(storage)
    oid = _commit_value(db, 'x', 1)
    storage._cache.invalidate_all()
    a, b = storage.new_instance(), storage.new_instance()
    a.poll_invalidations()
    b.poll_invalidations()
    before = _stats(storage)
    assert _value(a, oid)[0] == 1
    assert _value(b, oid)[0] == 1
    after = _stats(storage)
    assert after['misses'] - before['misses'] == 1
    assert after['hits'] - before['hits'] == 1
    a.release()
    b.release()
    db.close()


def test_no_instance_sees_a_state_of_another_snapshot(open_storage):
    storage = open_storage()
    db = ZODB.DB(storage)
    oid = _commit_value(db, 'x', 1)
    old = storage.new_instance()
    old.poll_invalidations()
    assert _value(old, oid)[0] == 1          # now cached: v1
    _commit_value(db, 'x', 2)
    new = storage.new_instance()
    new.poll_invalidations()
    assert _value(new, oid)[0] == 2          # not the cached v1
    # The older snapshot keeps seeing v1, although v2 is what is cached.
    assert _value(old, oid)[0] == 1
    assert list(old.poll_invalidations()) == [oid]
    assert _value(old, oid)[0] == 2
    old.release()
    new.release()
    db.close()


def _two_processes(open_storage):
    """Two storages of the test's database, each with its own cache as
    two processes have, their DBs, and an object committed by the first:
    ``(storage, other, db, other_db, oid)``."""
    storage = open_storage()
    other = open_storage()
    db = ZODB.DB(storage)
    other_db = ZODB.DB(other)
    return storage, other, db, other_db, _commit_value(db, 'x', 1)


def test_a_commit_by_another_process_is_never_served_stale(open_storage):
    storage, other, db, other_db, oid = _two_processes(open_storage)
    reader = storage.new_instance()
    reader.poll_invalidations()
    assert _value(reader, oid)[0] == 1
    _commit_value(other_db, 'x', 2)
    # Until it polls, the reader's snapshot gives v1; after, v2, although
    # nothing in this process loaded or committed v2.
    assert _value(reader, oid)[0] == 1
    reader.poll_invalidations()
    assert _value(reader, oid)[0] == 2
    reader.release()
    other_db.close()
    db.close()


def test_a_conflict_drops_a_cached_revision_the_cache_missed_a_change_of(
        open_storage, caplog):
    """When a poll's change list lacks a change (MariaDB can show a
    snapshot with a later commit and without an earlier one: docs/
    performance.rst, "Soak"), the shared cache serves the old revision as
    current until the object changes again, and a transaction that
    writes it conflicts at every retry.  The vote's conflict drops the
    entry and says so: the retry reads the database."""
    storage, other, db, other_db, oid = _two_processes(open_storage)
    tm = transaction.TransactionManager()
    conn = db.open(tm)
    assert conn.root()['x']['v'] == 1       # cached, current
    _commit_value(other_db, 'x', 2)
    cache = storage._cache
    # The change missed: the horizon moves past it, the entry stays live.
    last = _value(other.new_instance(), oid)[1]
    assert cache.advance(cache.horizon, int.from_bytes(last, 'big'), [])
    tm.begin()
    conn.root()['x']['v'] = 3
    with caplog.at_level('ERROR', logger='relstorage.storage'):
        with pytest.raises(ConflictError):
            tm.commit()
    tm.abort()
    assert any('a change no poll reported' in r.getMessage()
               for r in caplog.records)
    tm.begin()
    assert conn.root()['x']['v'] == 2
    conn.root()['x']['v'] = 3
    tm.commit()
    conn.close()
    assert _commit_value(other_db, 'x', 4) == oid
    other_db.close()
    db.close()


def test_committed_states_are_cached(open_storage):
    storage = open_storage()
    db = ZODB.DB(storage)
    oid = _commit_value(db, 'x', 1)
    _commit_value(db, 'x', 7)
    reader = storage.new_instance()
    reader.poll_invalidations()
    before = _stats(storage)['hits']
    value, tid = _value(reader, oid)
    assert value == 7
    assert _stats(storage)['hits'] == before + 1
    # History-preserving, loadSerial of that revision is answered from the
    # cache too; history-free it asks the database (the only one that
    # knows whether the revision is still current).
    mover = storage._adapter.mover
    asked = []
    real = mover.load_revision
    mover.load_revision = lambda *args: asked.append(args) or real(*args)
    try:
        assert reader.loadSerial(oid, tid) == reader.load(oid)[0]
    finally:
        del mover.load_revision
    assert len(asked) == (0 if storage.supportsUndo() else 1)
    reader.release()
    db.close()


def test_history_free_load_serial_of_a_replaced_revision_raises(
        open_storage):
    """History-free, only the current revision exists: loadSerial of one
    that a later commit replaced is a POSKeyError, although this process
    loaded it (the shared cache and the memory of recent states hold it),
    and whichever process replaced it."""
    storage = open_storage()
    other = open_storage()              # another process, its own cache
    db, other_db = ZODB.DB(storage), ZODB.DB(other)
    oid = _commit_value(db, 'x', 1)
    reader = storage.new_instance()
    reader.poll_invalidations()
    first = _value(reader, oid)[1]
    assert reader.loadSerial(oid, first) == reader.load(oid)[0]
    _commit_value(db, 'x', 2)               # replaced here
    reader.poll_invalidations()
    second = _value(reader, oid)[1]
    _commit_value(other_db, 'x', 3)         # and there
    for tid in (first, second):
        if storage.supportsUndo():
            assert reader.loadSerial(oid, tid) == storage.loadSerial(oid, tid)
        else:
            with pytest.raises(POSKeyError):
                reader.loadSerial(oid, tid)
            with pytest.raises(POSKeyError):
                storage.loadSerial(oid, tid)
    reader.poll_invalidations()
    current = _value(reader, oid)
    assert current[0] == 3
    assert reader.loadSerial(oid, current[1]) == reader.load(oid)[0]
    reader.release()
    other_db.close()
    db.close()


def test_load_before_is_answered_from_the_cache(open_storage):
    storage = open_storage()
    db = ZODB.DB(storage)
    oid = _commit_value(db, 'x', 1)
    reader = storage.new_instance()
    reader.poll_invalidations()
    state, tid = reader.load(oid)
    last = reader.lastTransaction()
    hits = _stats(storage)['hits']
    before = p64(int.from_bytes(last, 'big') + 1)
    assert reader.loadBefore(oid, before) == (state, tid, None)
    assert _stats(storage)['hits'] == hits + 1
    reader.release()
    db.close()


def test_prefetch_fills_the_cache_in_one_call(open_storage):
    storage = open_storage()
    db = ZODB.DB(storage)
    oids = [_commit_value(db, f'k{i}', i) for i in range(5)]
    storage._cache.invalidate_all()
    reader = storage.new_instance()
    reader.poll_invalidations()
    reader.prefetch(oids)
    other = storage.new_instance()
    other.poll_invalidations()
    hits = _stats(storage)['hits']
    assert [_value(other, oid)[0] for oid in oids] == list(range(5))
    assert _stats(storage)['hits'] == hits + 5
    reader.release()
    other.release()
    db.close()


def test_a_cache_of_zero_megabytes_is_off(open_storage):
    storage = open_storage(cache_local_mb=0)
    db = ZODB.DB(storage)
    oid = _commit_value(db, 'x', 1)
    a, b = storage.new_instance(), storage.new_instance()
    for inst in (a, b):
        inst.poll_invalidations()
        assert _value(inst, oid)[0] == 1
        inst.release()
    assert _stats(storage)['count'] == 0
    db.close()


def test_a_pack_empties_the_cache(open_storage, keep_history):
    storage = open_storage()
    db = ZODB.DB(storage)
    oid = _commit_value(db, 'x', 1)
    tm = transaction.TransactionManager()
    conn = db.open(tm)
    del conn.root()['x']
    tm.commit()
    conn.close()
    assert len(storage._cache) > 0
    db.pack()
    assert len(storage._cache) == 0
    reader = storage.new_instance()
    reader.poll_invalidations()
    with pytest.raises(POSKeyError):
        reader.load(oid)
    reader.release()
    db.close()


@pytest.mark.parametrize('key, value', [
    ('cache_local_mb', '-1'),
    ('cache_local_mb', 'ten'),
    ('cache_local_object_max', '-5'),
    ('cache_local_compression', 'lz4'),
])
def test_bad_cache_options_name_the_key(key, value):
    with pytest.raises(ConfigurationError) as info:
        Options(**{key: value})
    assert key.replace('_', '-') in str(info.value)


def test_the_cache_file_brings_a_restarted_process_back_warm(
        open_storage, tmp_path):
    directory = str(tmp_path / 'cache')
    storage = open_storage(cache_local_dir=directory)
    db = ZODB.DB(storage)
    oids = [_commit_value(db, f'k{i}', i) for i in range(20)]
    db.close()
    path = persistentcache.path_for(storage)
    assert os.path.exists(path)
    # While no process has the file open, another one changes an object.
    other = open_storage()
    other_db = ZODB.DB(other)
    _commit_value(other_db, 'k3', 33)
    other_db.close()

    again = open_storage(cache_local_dir=directory)
    assert len(again._cache) >= 19
    reader = again.new_instance()
    reader.poll_invalidations()
    hits = _stats(again)['hits']
    values = [_value(reader, oid)[0] for oid in oids]
    assert values == [33 if i == 3 else i for i in range(20)]
    # All but the changed object came from the file.
    assert _stats(again)['hits'] - hits == 19
    reader.release()
    again.close()


def test_a_damaged_cache_file_is_ignored(open_storage, tmp_path):
    directory = str(tmp_path / 'cache')
    storage = open_storage(cache_local_dir=directory)
    db = ZODB.DB(storage)
    oid = _commit_value(db, 'x', 1)
    db.close()
    path = persistentcache.path_for(storage)
    with open(path, 'r+b') as f:
        f.seek(40)
        f.write(b'\xff' * 16)
    again = open_storage(cache_local_dir=directory)
    assert len(again._cache) == 0
    reader = again.new_instance()
    reader.poll_invalidations()
    assert _value(reader, oid)[0] == 1
    reader.release()
    again.close()


def test_a_cache_file_of_another_database_is_not_used(
        open_storage, tmp_path):
    """A file whose entries disagree with the database about objects that
    did not change since its horizon (a database recreated under the same
    name): the sampled check refuses the whole file."""
    from relstorage.cache.local import LocalCache
    directory = str(tmp_path / 'cache')
    storage = open_storage(cache_local_dir=directory)
    db = ZODB.DB(storage)
    oids = [_commit_value(db, f'k{i}', i) for i in range(10)]
    last = int.from_bytes(storage.lastTransaction(), 'big')
    wrong = storage.new_instance()
    wrong.poll_invalidations()
    bogus_state = wrong.load(oids[0])[0]
    wrong.release()
    db.close()
    forged = LocalCache(1 << 20)
    forged.set_horizon(last)
    for oid in oids:
        forged.store_loaded(int.from_bytes(oid, 'big'), last - 1000,
                            bogus_state, last)
    forged.save(persistentcache.path_for(storage),
                persistentcache.identity(storage))
    again = open_storage(cache_local_dir=directory)
    assert len(again._cache) == 0
    reader = again.new_instance()
    reader.poll_invalidations()
    assert [_value(reader, oid)[0] for oid in oids] == list(range(10))
    reader.release()
    again.close()


def _count_calls(monkeypatch, mover):
    calls = {'load_current': 0, 'load_currents': 0}
    for name in calls:
        original = getattr(mover, name)

        def counting(*args, _name=name, _original=original):
            calls[_name] += 1
            return _original(*args)
        monkeypatch.setattr(mover, name, counting)
    return calls


def _family(db, children):
    tm = transaction.TransactionManager()
    conn = db.open(tm)
    folder = conn.root()['folder'] = PersistentMapping()
    for i in range(children):
        folder[i] = PersistentMapping(v=i)
    tm.commit()
    oids = (folder._p_oid, [folder[i]._p_oid for i in range(children)])
    conn.close()
    return oids


@pytest.mark.parametrize('read_ahead', [True, False])
def test_read_ahead_brings_the_siblings_of_a_second_miss(
        open_storage, monkeypatch, read_ahead):
    storage = open_storage(read_ahead=read_ahead, cache_local_mb=0)
    db = ZODB.DB(storage)
    folder, children = _family(db, 10)
    # Another process changes a child; the reader's snapshot predates it.
    reader = storage.new_instance()
    reader.poll_invalidations()
    calls = _count_calls(monkeypatch, storage._adapter.mover)
    reader.load(folder)
    assert _value(reader, children[0])[0] == 0
    assert calls == {'load_current': 2, 'load_currents': 0}
    tm = transaction.TransactionManager()
    conn = db.open(tm)
    conn.root()['folder'][5]['v'] = 55
    tm.commit()
    conn.close()
    values = [_value(reader, oid)[0] for oid in children[1:]]
    # Read from the reader's snapshot, with or without read-ahead.
    assert values == list(range(1, 10))
    if read_ahead and storage._adapter.capabilities.network_round_trips:
        assert calls == {'load_current': 2, 'load_currents': 1}
    else:
        assert calls == {'load_current': 11, 'load_currents': 0}
    reader.release()
    db.close()


def test_the_buckets_under_a_big_btree_node_are_read_ahead(
        open_storage, monkeypatch):
    """An OOBTree whose node holds more than 256 buckets (5,000 keys
    appended in order): looking up keys in two of its buckets brings the
    others along at the second miss, and the lookups after that make no
    round trip (before, a node that large was never read ahead: a
    round trip for every bucket)."""
    from BTrees.OOBTree import OOBTree
    writer = ZODB.DB(open_storage())
    with writer.transaction() as conn:
        tree = conn.root()['tree'] = OOBTree()
        for i in range(5000):
            tree[f'k{i:05d}'] = i
    writer.close()
    storage = open_storage()
    db = ZODB.DB(storage)
    calls = _count_calls(monkeypatch, storage._adapter.mover)
    tm = transaction.TransactionManager()
    conn = db.open(tm)
    tree = conn.root()['tree']
    buckets = len(tree.__getstate__()[0][::2])
    assert 256 < buckets < 1024, buckets
    # The first key of every 15th bucket.
    keys = [tree.keys()[0]]
    bucket = tree._firstbucket
    for n in range(buckets):
        if n % 15 == 0:
            keys.append(bucket.keys()[0])
        bucket = bucket._next
    assert [tree[key] for key in keys] == [int(key[1:]) for key in keys]
    touched = {oid for oid in conn._cache.cache_data
               if type(conn._cache.get(oid)).__name__ == 'OOBucket'}
    if storage._adapter.capabilities.network_round_trips:
        # The node and the first bucket (ZODB.DB read the root as it
        # opened); the second bucket with all the others.
        assert calls == {'load_current': 2, 'load_currents': 1}
    else:
        assert calls['load_current'] >= 2 + len(keys) - 1
    assert len(touched) >= len(keys) - 1
    tm.abort()
    conn.close()
    db.close()


def test_read_ahead_skips_what_only_looks_like_an_oid(open_storage):
    """Eight bytes of an object's own data pickle like an oid.  One past
    the range of oids (2**63 and up: no database column holds it) was
    sent with the family and failed the load on PostgreSQL ("out of range
    for type bigint"; found by the pack benchmark's random document
    bodies)."""
    storage = open_storage(read_ahead=True, cache_local_mb=0)
    db = ZODB.DB(storage)
    tm = transaction.TransactionManager()
    conn = db.open(tm)
    folder = conn.root()['folder'] = PersistentMapping()
    for i in range(10):
        folder[i] = PersistentMapping(v=i)
    # Pickled as SHORT_BINBYTES of 8 bytes, as an oid is.
    folder['data'] = b'\xc6' + b'\x0b' * 7
    folder['small'] = b'\x00' * 7 + b'\x63'
    tm.commit()
    oids = [folder[i]._p_oid for i in range(10)]
    folder_oid = folder._p_oid
    conn.close()
    reader = storage.new_instance()
    reader.poll_invalidations()
    data, _ = reader.load(folder_oid)
    assert b'C\x08\xc6' in data
    values = [_value(reader, oid)[0] for oid in oids]
    assert values == list(range(10))
    if storage._adapter.capabilities.network_round_trips:
        assert reader._counters.read_ahead_rows >= 8
    reader.release()
    db.close()


def test_read_ahead_goes_on_below_a_container_the_cache_answered(
        open_storage, monkeypatch):
    """Depth first through a folder of three sub-folders of ten children:
    the second sub-folder's miss brings the third into the cache, so the
    third is a cache hit when its turn comes; its children are read ahead
    all the same (they were loaded one by one, a round trip each)."""
    writer = open_storage()
    db = ZODB.DB(writer)
    tm = transaction.TransactionManager()
    conn = db.open(tm)
    folder = conn.root()['folder'] = PersistentMapping()
    for i in range(3):
        sub = folder[i] = PersistentMapping()
        for j in range(10):
            sub[j] = PersistentMapping(v=10 * i + j)
    tm.commit()
    subs = [(folder[i]._p_oid, [folder[i][j]._p_oid for j in range(10)])
            for i in range(3)]
    folder_oid = folder._p_oid
    conn.close()
    db.close()
    # A new storage, so that its cache (on, the default) starts empty.
    storage = open_storage()
    reader = storage.new_instance()
    reader.poll_invalidations()
    calls = _count_calls(monkeypatch, storage._adapter.mover)
    reader.load(folder_oid)
    values = []
    for sub, children in subs:
        reader.load(sub)
        values += [_value(reader, oid)[0] for oid in children]
    assert values == list(range(30))
    assert len(storage._cache) == 34
    if storage._adapter.capabilities.network_round_trips:
        # Alone: the folder, the first sub-folder and the first child of
        # each; together: the other two sub-folders, then the rest of
        # each sub-folder's children.
        assert calls == {'load_current': 5, 'load_currents': 4}
    else:
        assert calls == {'load_current': 34, 'load_currents': 0}
    reader.release()


def test_one_child_of_a_container_loads_nothing_more(
        open_storage, monkeypatch):
    storage = open_storage(cache_local_mb=0)
    db = ZODB.DB(storage)
    folder, children = _family(db, 10)
    reader = storage.new_instance()
    reader.poll_invalidations()
    calls = _count_calls(monkeypatch, storage._adapter.mover)
    reader.load(folder)
    reader.load(children[3])
    assert calls == {'load_current': 2, 'load_currents': 0}
    reader.release()
    db.close()


class PaddedCounter(Persistent):
    """A counter whose pickle is long enough for the cache to compress it,
    resolving concurrent increments."""

    def __init__(self):
        self.value = 0
        self.padding = 'padding ' * 100

    def _p_resolveConflict(self, old, saved, new):
        resolved = dict(new)
        resolved['value'] = saved['value'] + new['value'] - old['value']
        return resolved


@pytest.mark.parametrize('compression', ['none', 'zlib'])
def test_conflicts_resolve_after_the_cache_replaced_the_old_state(
        open_storage, compression):
    """Two connections of one process change a counter from the same
    revision.  The first commit replaces that revision in the shared cache
    (and, history-free, in the database); resolving the second still finds
    the state both started from, from the cache's entry (compressed or
    not)."""
    storage = open_storage(cache_local_compression=compression)
    db = ZODB.DB(storage)
    tm0 = transaction.TransactionManager()
    c0 = db.open(tm0)
    c0.root()['n'] = PaddedCounter()
    tm0.commit()
    c0.close()
    tm1, tm2 = transaction.TransactionManager(), transaction.TransactionManager()
    c1, c2 = db.open(tm1), db.open(tm2)
    n1, n2 = c1.root()['n'], c2.root()['n']
    assert n1.value == n2.value == 0
    n1.value += 1
    tm1.commit()
    n2.value += 10
    tm2.commit()            # resolved, not a ConflictError
    tm1.begin()
    assert c1.root()['n'].value == 11
    c1.close()
    c2.close()
    db.close()


@pytest.mark.parametrize('compression', ['none', 'zlib'])
def test_conflicts_resolve_when_the_old_state_was_loaded_behind_the_cache(
        open_storage, compression):
    """A connection whose snapshot is older than the revision the shared
    cache holds loads the older revision from the database, and the cache
    keeps its later one.  When its change then conflicts, resolution still
    finds the state it started from, which history-free neither the cache
    nor the database holds any more (before: POSKeyError inside
    tryToResolveConflict, logged, and a ConflictError)."""
    storage = open_storage(cache_local_compression=compression)
    db, other_db = ZODB.DB(storage), ZODB.DB(open_storage())
    try:
        with other_db.transaction() as conn:
            conn.root()['n'] = PaddedCounter()
        tm_a = transaction.TransactionManager()
        a = db.open(tm_a)
        tm_a.begin()
        root_a = a.root()                 # the snapshot; 'n' still a ghost
        with other_db.transaction() as conn:
            conn.root()['n'].value += 1
        tm_c = transaction.TransactionManager()
        c = db.open(tm_c)
        tm_c.begin()
        assert c.root()['n'].value == 1   # the new revision, now cached
        tm_c.abort()
        c.close()
        counter = root_a['n']
        assert counter.value == 0         # the older one, from the database
        counter.value += 10
        tm_a.commit()                     # resolved, not a ConflictError
        tm_a.begin()
        a.cacheMinimize()
        assert a.root()['n'].value == 11
        tm_a.abort()
        a.close()
    finally:
        db.close()
        other_db.close()


def test_recent_states_keep_the_latest_half_of_the_limit():
    """Two generations: whatever was remembered within the last half of
    the limit is still there; older entries go, and the memory counted
    stays within the limit."""
    recent = RecentStates(limit_bytes=100_000)
    state = b'x' * 400
    for oid in range(1, 2001):
        recent.remember(oid, 7, state)
        assert recent.size_bytes() <= 100_000 + ENTRY_OVERHEAD + 400
    per_entry = ENTRY_OVERHEAD + 400
    kept = [oid for oid in range(1, 2001) if recent.get(oid, 7) is not None]
    assert len(kept) >= 50_000 // per_entry
    assert kept[-1] == 2000 and 1 not in kept
    assert recent.get(2000, 6) is None     # another revision of the oid


def test_a_read_keeps_an_old_recent_state_from_being_forgotten():
    recent = RecentStates(limit_bytes=10_000)
    recent.remember(1, 5, b'first')
    filler = b'f' * 500
    oid = 100
    # Fill until the first entry has moved to the old generation.
    while 1 << 64 | 5 in recent._young:
        recent.remember(oid, 5, filler)
        oid += 1
    assert recent.get(1, 5) == b'first'      # read: young again
    for _ in range(9):                       # a whole generation more
        recent.remember(oid, 5, filler)
        oid += 1
    assert recent.get(1, 5) == b'first'
    recent.clear()
    assert recent.get(1, 5) is None and recent.size_bytes() == 0


def test_recent_states_decode_only_what_is_asked_for():
    decoded = []

    def decode(value):
        decoded.append(value)
        return value.upper()

    recent = RecentStates(decode=decode)
    recent.remember(1, 2, b'abc')
    recent.remember(3, 4, b'def')
    recent.remember(5, 6, None)               # a deletion: nothing kept
    assert decoded == []
    assert recent.get(1, 2) == b'ABC'
    assert recent.get(5, 6) is None
    assert decoded == [b'abc']
    assert recent.get(1 << 20, 2) is None     # the key mixes oid and tid


# -- read-ahead that learns whether it pays ----------------------------

def test_usefulness_levels_and_decay():
    from relstorage.cache import readahead
    useful = readahead.Usefulness()
    kind = b'cBTrees.OOBTree\nOOBucket'
    assert useful.needed(kind) == 2              # no evidence yet
    useful.loaded(kind, 100)
    for _ in range(60):
        useful.used(kind)
    assert useful.needed(kind) == 2
    useful = readahead.Usefulness()
    useful.loaded(kind, 100)
    for _ in range(30):
        useful.used(kind)
    assert useful.needed(kind) == 4
    useful = readahead.Usefulness()
    useful.loaded(kind, 100)
    for _ in range(3):
        useful.used(kind)
    assert useful.needed(kind) == 8
    assert useful.needed(b'another kind') == 2   # kinds learn apart
    # Past the horizon the counts halve: recent reads weigh most.
    useful.loaded(kind, readahead.HORIZON)
    loaded, used = useful.shares()[kind]
    assert loaded <= readahead.HORIZON and used == 1


def test_kind_of_a_zodb_record():
    from ZODB.tests.StorageTestBase import zodb_pickle
    from relstorage.cache.readahead import kind_of
    state = zodb_pickle(PersistentMapping(a=1))
    assert b'PersistentMapping' in kind_of(state)
    assert kind_of(b'not a pickle') == b''


def test_families_from_protocol_3_and_protocol_2_records():
    """A container's references make one family, keyed by the 8-byte oids
    ZODB passes to load; the second miss (no evidence yet) gives the
    family as integers, once.  Records pickled by Python 2 (protocol 2,
    oids as SHORT_BINSTRING) are scanned too."""
    import pickle
    from ZODB.utils import p64
    from relstorage.cache.readahead import Families

    def record(protocol, oids):
        # ZODB's layout: the class pickle, then the state, each reference
        # a persistent id (BINPERSID, b'Q') of (oid, None): the oid as
        # SHORT_BINBYTES (b'C', protocol 3) or as the str Python 2 wrote
        # (SHORT_BINSTRING, b'U', protocol 2).
        first = pickle.dumps((PersistentMapping, None), protocol)
        opcode = b'C' if protocol == 3 else b'U'
        refs = b''.join(b'(' + opcode + b'\x08' + p64(o) + b'NtQ'
                        for o in oids)
        return first + b'\x80' + bytes([protocol]) + b']' + refs + b'.'
    for protocol in (3, 2):
        state = record(protocol, [5, 6, 7])
        assert state.count(b'\x08') >= 3
        families = Families()
        families.note(state)
        assert families.siblings(p64(99)) is None     # not a member
        assert families.siblings(p64(6)) is None      # first miss
        refs, kind = families.siblings(p64(7))        # second
        assert refs == [5, 6, 7] and b'PersistentMapping' in kind
        assert families.siblings(p64(5)) is None      # forgotten now
    # Leaves (no BINPERSID) and single references make no family.
    families = Families()
    families.note(pickle.dumps({'a': 1}, 3))
    families.note(record(3, [8]))
    assert not families


def test_read_ahead_stops_where_it_does_not_pay_and_comes_back(
        open_storage, monkeypatch):
    """Transactions that read two scattered children of a 30-child folder
    make read-ahead load 28 rows nobody asks for, each time: after
    EVIDENCE rows of that, two misses no longer read ahead (eight are
    needed).  Transactions that read every child bring it back."""
    from relstorage.cache import readahead
    storage = open_storage(cache_local_mb=0)
    if not storage._adapter.capabilities.network_round_trips:
        pytest.skip('no read-ahead on an embedded database')
    db = ZODB.DB(storage)
    folder, children = _family(db, 30)
    reader = storage.new_instance()
    calls = _count_calls(monkeypatch, storage._adapter.mover)

    def transaction_reading(indexes):
        before = dict(calls)
        reader.poll_invalidations()
        reader.load(folder)
        for i in indexes:
            assert _value(reader, children[i])[0] == i
        reader.afterCompletion()
        return calls['load_currents'] - before['load_currents']

    scattered = [transaction_reading([3, 17]) for _ in range(6)]
    # The first ones read ahead (28 rows each, unused); then they stop.
    assert scattered[0] == 1
    assert scattered[-1] == 0
    counters = reader._counters
    assert counters.read_ahead_rows >= readahead.EVIDENCE
    assert counters.read_ahead_unused == counters.read_ahead_rows
    # Reading every child: the eighth miss reads the rest ahead, all of it
    # used; soon the second miss does again.
    whole = [transaction_reading(range(30)) for _ in range(12)]
    assert whole[0] == 1
    assert calls['load_current'] > 0
    before = calls['load_current']
    transaction_reading(range(30))
    # The folder and the first child alone; the second miss brings the
    # rest.
    assert calls['load_current'] - before == 2
    reader.release()
    db.close()
