"""The benchmark workload, run as a subprocess by run.py.

The same file drives every implementation: it is started under the
project's interpreter (our relstorage, and FileStorage and ZEO, which need
no relstorage) and under the reference venv's (RelStorage 4.3), with the
storage given as a ZConfig string.  It never imports relstorage except to
report which one it got, and it refuses to run when that is not the
expected one (both packages are called ``relstorage``).

Commands (each writes one JSON document to ``--out``):

``write``
    Builds the data set on an empty database and times: adding objects in
    transactions of 100 and of 1000, updating every object, single small
    commits (latency percentiles) and concurrent conflicting commits.
    ``--oids FILE`` records the oid and key of every object for the
    commands below.
``read``
    In a fresh process: cold read of every object (empty caches), warm read
    (ZODB's object cache emptied, the storage's own cache as the cold read
    left it), then hot reads (ZODB's cache).
``prefetch``
    In a fresh process: the objects of ``--oids`` read in batches of 100,
    each batch announced first with ``Connection.prefetch``.
``load-single``
    In a fresh process, without ZODB.DB: ``storage.load`` of every oid of
    ``--oids`` through a new storage instance, each load timed.
``random-read``
    In a fresh process: a seeded random share (5 %) of the objects, each
    looked up by its key; with ``--prefetch`` the sample's objects are
    announced first with ``Connection.prefetch``.
``mixed-worker`` / ``mixed-check``
    The request-like workload: each of several workers runs transactions
    of ``--reads`` random lookups (5) and ``--writes`` small writes (1;
    with more than one, among the worker's own share of the objects, so
    that workers do not retry each other's); the check reads every object
    back against the write run's version plus the bumps.
``mp-setup`` / ``mp-worker``
    The multi-process variant: setup creates one tree per worker; each
    worker adds, updates and (through a new storage) reads its own objects,
    meeting the other workers at a file barrier before each phase.

The bare-driver floors are in ``floor.py``.  Every phase checks what it
wrote or read and raises if it is wrong.  With ``--relay-control`` (run.py
``--round-trips``, ``--rtt``) each phase also records the round trips it
made through the relay in front of the database, with its operations
(benchmarks/roundtrips.py).
"""
import argparse
import gc
import hashlib
import json
import os
import platform
import statistics
import sys
import threading
import time
import traceback
from pathlib import Path

from persistent import Persistent

HERE = Path(__file__).resolve().parent
# -I leaves this file's directory off sys.path (roundtrips, mariadb_patch).
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

perf = time.perf_counter


def round_trips(args):
    """The round trips of this process's phases (see roundtrips.py):
    nothing is read without ``--relay-control``."""
    from roundtrips import RoundTrips
    return RoundTrips(getattr(args, 'relay_control', None))


def settle():
    """A full garbage collection, before every timed phase on every side.
    Otherwise whether a full collection (20-35 ms with this data set)
    falls inside a short timed window depends on how much each process
    allocated before it: a cold random read of 0.1 s on SQLite took one
    for ours and none for RelStorage 4.3, whose set-up had taken it."""
    gc.collect()


# -- the objects ---------------------------------------------------------

def payload_for(key):
    digest = hashlib.sha256(key.encode('ascii')).hexdigest()
    return f'{key}:{digest}{digest[:32]}'


def number_for(key, version):
    return int(key[1:]) * 7919 + version


class Item(Persistent):
    """One benchmark object: a few attributes, a ~200 byte pickle."""

    def __init__(self, key):
        self.key = key
        self.version = 0
        self.number = number_for(key, 0)
        self.payload = payload_for(key)
        self.tags = ('bench', key[-3:])

    def bump(self):
        self.version += 1
        self.number = number_for(self.key, self.version)


class Counter(Persistent):
    value = 0


def read_checked(root, reads):
    """Look up each ``(tree name, key)`` of ``reads`` and check the Item
    found against its own version (a request's reads)."""
    for name, key in reads:
        item = root[name][key]
        check_item(key, item, item.version)


def check_item(key, item, version):
    if (item.key != key or item.version != version
            or item.number != number_for(key, version)
            or item.payload != payload_for(key)
            or item.tags != ('bench', key[-3:])):
        raise AssertionError(
            f'object {key!r} read back wrong: key={item.key!r} '
            f'version={item.version!r} (expected {version}) '
            f'number={item.number!r}')


TREES = (('t100', 'a', 100), ('t1000', 'b', 1000))


def split(objects):
    """How many objects each add phase creates."""
    first = objects // 2
    return {'t100': first, 't1000': objects - first}


def keys_for(prefix, count):
    return [f'{prefix}{i:07d}' for i in range(count)]


def percentiles(samples):
    ordered = sorted(samples)

    def at(fraction):
        index = min(len(ordered) - 1,
                    max(0, int(round(fraction * len(ordered))) - 1))
        return ordered[index]
    return {'p50': statistics.median(ordered), 'p90': at(0.90),
            'p99': at(0.99), 'mean': statistics.fmean(ordered),
            'min': ordered[0], 'max': ordered[-1], 'samples': len(ordered)}


# -- which relstorage ----------------------------------------------------

def execute(args, commands):
    """Run the subcommand ``args.command`` of a workload script (from
    ``commands``) after the MariaDB patch when asked for: its result, with
    the wall time and ``identify``'s description of this process."""
    patched = None
    if args.patch_mariadb:
        import mariadb_patch
        patched = mariadb_patch.apply()
    info = identify(args.expect_under)
    if patched:
        info['mariadb_patch'] = patched
    started = perf()
    result = commands[args.command](args)
    result['wall_seconds'] = perf() - started
    result['info'] = info
    return result


def identify(expect_under):
    """Import relstorage and check it is the expected one."""
    from importlib import metadata
    info = {
        'python': sys.version.split()[0],
        'executable': sys.executable,
        'platform': platform.platform(),
    }
    for dist in ('relstorage', 'ZODB', 'persistent', 'BTrees',
                 'transaction', 'ZEO', 'psycopg2-binary', 'psycopg2',
                 'psycopg', 'mysqlclient', 'PyMySQL'):
        try:
            info[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    try:
        import sqlite3
        info['sqlite'] = sqlite3.sqlite_version
    except ImportError:
        pass
    import relstorage
    info['relstorage_file'] = relstorage.__file__
    if expect_under:
        where = Path(relstorage.__file__).resolve()
        if not where.is_relative_to(Path(expect_under).resolve()):
            raise SystemExit(
                f'wrong relstorage: {where} is not under {expect_under} '
                f'(sys.path={sys.path})')
    return info


def open_db(zconfig, objects):
    import ZODB
    import ZODB.config
    # The classes of the data set, imported before any timing: otherwise
    # the first load of a tree would time the import of BTrees (about
    # 40 ms) in a process whose storage did not happen to import it.
    import BTrees.Length  # noqa: F401
    import BTrees.OOBTree  # noqa: F401
    storage = ZODB.config.storageFromString(zconfig)
    # Large enough that the hot read never evicts anything.
    return ZODB.DB(storage, cache_size=4 * objects + 10000,
                   large_record_size=1 << 30)


def verifier(db):
    """A second connection with its own cache and transaction manager."""
    import transaction
    tm = transaction.TransactionManager()
    return tm, db.open(transaction_manager=tm)


# -- write ---------------------------------------------------------------

def cmd_write(args):
    import transaction
    from BTrees.Length import Length
    from BTrees.OOBTree import OOBTree

    trips = round_trips(args)
    db = open_db(args.zconfig, args.objects)
    conn = db.open()
    root = conn.root()
    transaction.begin()
    for name, _, _ in TREES:
        root[name] = OOBTree()
    root['counter'] = Counter()
    root['shared'] = OOBTree()
    root['shared_len'] = Length()
    transaction.commit()

    phases = {}
    sizes = split(args.objects)

    # Adding: transactions of 100 and of 1000 new objects.
    for name, prefix, per_txn in TREES:
        keys = keys_for(prefix, sizes[name])
        tree = root[name]
        stores_before = conn.getTransferCounts()[1]
        settle()
        mark = trips.mark()
        start = perf()
        for first in range(0, len(keys), per_txn):
            transaction.begin()
            for key in keys[first:first + per_txn]:
                tree[key] = Item(key)
            transaction.commit()
        seconds = perf() - start
        stores = conn.getTransferCounts()[1] - stores_before
        commits = -(-len(keys) // per_txn)
        phases[f'add_{per_txn}'] = trips.record({
            'seconds': seconds, 'objects': len(keys),
            'stored_records': stores, 'commits': commits,
            'rate': len(keys) / seconds}, mark, object=len(keys),
            commit=commits)
        verify_tree(db, name, keys, 0, sample=37)

    # Mean pickle size, for the floor measurements.
    sample = [root['t100'][k] for k in keys_for('a', sizes['t100'])[:50]]
    state_sizes = [len(conn._storage.load(o._p_oid)[0]) for o in sample]
    mean_size = statistics.fmean(state_sizes) if state_sizes else 0

    # Updating every object, 1000 per transaction.  The objects are in
    # this connection's cache, so this is the cost of writing.
    per_txn = 1000
    items = []
    for name, _, _ in TREES:
        items.extend(root[name].values())
    settle()
    mark = trips.mark()
    start = perf()
    for first in range(0, len(items), per_txn):
        transaction.begin()
        for item in items[first:first + per_txn]:
            item.bump()
        transaction.commit()
    seconds = perf() - start
    commits = -(-len(items) // per_txn)
    phases['update_1000'] = trips.record({
        'seconds': seconds, 'objects': len(items), 'commits': commits,
        'rate': len(items) / seconds}, mark, object=len(items),
        commit=commits)
    for name, prefix, _ in TREES:
        verify_tree(db, name, keys_for(prefix, sizes[name]), 1, sample=13)
    if args.oids:
        write_oids(args.oids, root)

    # Commit latency: one small object changed per transaction.
    counter = root['counter']
    for _ in range(5):   # warm-up, not timed
        transaction.begin()
        counter.value += 1
        transaction.commit()
    samples = []
    settle()
    mark = trips.mark()
    for _ in range(args.latency_commits):
        start = perf()
        transaction.begin()
        counter.value += 1
        transaction.commit()
        samples.append(perf() - start)
    phases['commit_latency'] = trips.record(percentiles(samples), mark,
                                            commit=len(samples))
    tm, other = verifier(db)
    expected = args.latency_commits + 5
    if other.root()['counter'].value != expected:
        raise AssertionError(
            f'counter is {other.root()["counter"].value}, not {expected}')
    other.close()

    if args.threads > 0 and args.conflict_commits > 0:
        # Last, and allowed to fail on its own: the figures above stand.
        try:
            phases['conflicts'] = conflicts(db, args.threads,
                                            args.conflict_commits, trips)
        except Exception as e:
            traceback.print_exc()
            phases['conflicts'] = {'error': failure(e)}

    conn.close()
    db.close()
    return {'phases': phases, 'mean_state_size': mean_size}


def write_oids(path, root):
    """Record ``[oid, key]`` of every object, in key order, for the
    prefetch and single-load commands."""
    from ZODB.utils import u64
    pairs = [[u64(item._p_oid), key] for name, _, _ in TREES
             for key, item in root[name].items()]
    with open(path, 'w') as f:
        json.dump(pairs, f)


def read_oids(path):
    from ZODB.utils import p64
    with open(path) as f:
        return [(p64(oid), key) for oid, key in json.load(f)]


def failure(error):
    """One line naming an exception and where it was raised."""
    frames = traceback.extract_tb(error.__traceback__)
    where = ''
    if frames:
        last = frames[-1]
        where = f' at {Path(last.filename).name}:{last.lineno} ({last.name})'
    return f'{type(error).__name__}: {error}{where}'


def verify_tree(db, name, keys, version, sample):
    """Check from a second connection: the tree holds exactly ``keys``, and
    every ``sample``-th object has the expected state."""
    tm, conn = verifier(db)
    try:
        tree = conn.root()[name]
        found = list(tree.keys())
        if found != keys:
            raise AssertionError(
                f'{name}: {len(found)} keys read back, {len(keys)} written')
        for key in keys[::sample]:
            check_item(key, tree[key], version)
    finally:
        tm.abort()
        conn.close()


def conflicts(db, threads, commits, trips):
    """``threads`` connections each add ``commits`` entries to one shared
    OOBTree and bump one shared BTrees.Length in every transaction, so that
    nearly every commit meets a concurrent change to the same objects and
    ZODB's conflict resolution must merge it (or the commit is retried)."""
    import transaction
    from transaction.interfaces import TransientError

    retries = {}
    resolved = [0] * threads
    errors = []
    barrier = threading.Barrier(threads)

    def work(index):
        tm = transaction.TransactionManager()
        conn = db.open(transaction_manager=tm)
        count_resolutions(conn, resolved, index)
        try:
            barrier.wait()
            for j in range(commits):
                for _attempt in range(200):
                    try:
                        tm.begin()
                        root = conn.root()
                        root['shared'][f'{j:06d}-{index:03d}'] = index
                        root['shared_len'].change(1)
                        tm.commit()
                        break
                    except TransientError as e:
                        tm.abort()
                        kind = type(e).__name__
                        retries[kind] = retries.get(kind, 0) + 1
                else:
                    raise AssertionError('200 attempts were not enough')
        except BaseException as e:  # reported by the main thread
            errors.append(e)
            barrier.abort()
        finally:
            conn.close()

    workers = [threading.Thread(target=work, args=(i,))
               for i in range(threads)]
    settle()
    mark = trips.mark()
    start = perf()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    seconds = perf() - start
    end = {}
    trips.record(end, mark, commit=threads * commits)
    if errors:
        raise errors[0]
    total = threads * commits
    tm, conn = verifier(db)
    root = conn.root()
    if len(root['shared']) != total or root['shared_len']() != total:
        raise AssertionError(
            f'conflicting commits: {len(root["shared"])} entries and a '
            f'Length of {root["shared_len"]()}, expected {total}')
    conn.close()
    return {'seconds': seconds, 'commits': total, 'threads': threads,
            'rate': total / seconds, 'retries': retries,
            'resolved': None if None in resolved else sum(resolved),
            'retry_count': sum(retries.values()), **end}


def count_resolutions(conn, tally, index):
    """Make ``conn`` count in ``tally[index]`` the objects whose conflicts
    the storage resolved at vote (tpc_vote returns their oids); None there
    if the storage instance does not let itself be wrapped."""
    storage = conn._storage
    vote = storage.tpc_vote

    def counting_vote(txn):
        oids = vote(txn)
        if oids:
            tally[index] += len(oids)
        return oids
    try:
        storage.tpc_vote = counting_vote
    except AttributeError:
        tally[index] = None


# -- read ----------------------------------------------------------------

def cmd_read(args):
    import transaction
    trips = round_trips(args)
    db = open_db(args.zconfig, args.objects)
    conn = db.open()
    transaction.begin()
    sizes = split(args.objects)
    expected = {name: keys_for(prefix, sizes[name])
                for name, prefix, _ in TREES}

    def read_all():
        root = conn.root()
        count = 0
        for name, _, _ in TREES:
            keys = expected[name]
            position = 0
            for key, item in root[name].items():
                if position >= len(keys) or key != keys[position]:
                    raise AssertionError(f'{name}: unexpected key {key!r}')
                check_item(key, item, args.version)
                position += 1
            if position != len(keys):
                raise AssertionError(
                    f'{name}: {position} objects read, {len(keys)} stored')
            count += position
        return count

    def loads():
        return conn.getTransferCounts()[0]

    before = loads()
    settle()
    mark = trips.mark()
    start = perf()
    count = read_all()
    cold = perf() - start
    cold_loads = loads() - before
    cold_trips = trips.record({}, mark, object=count, load=cold_loads)

    # Warm: ZODB's object cache emptied (every object a ghost again, or
    # gone), so each object is loaded from the storage once more; what the
    # storage keeps in its own cache since the cold read is served from
    # there.
    conn.cacheMinimize()
    before = loads()
    settle()
    mark = trips.mark()
    start = perf()
    read_all()
    warm = perf() - start
    warm_loads = loads() - before
    warm_trips = trips.record({}, mark, object=count, load=warm_loads)
    if warm_loads != cold_loads:
        raise AssertionError(
            f'the warm read made {warm_loads} storage loads, the cold read '
            f'{cold_loads}: ZODB\'s cache was not emptied')

    hot = []
    before = loads()
    mark = trips.mark()
    for _ in range(args.hot_repeat):
        settle()
        start = perf()
        read_all()
        hot.append(perf() - start)
    hot_trips = trips.record({}, mark, object=count * args.hot_repeat)
    if loads() != before:
        raise AssertionError('the hot read loaded objects from the storage')
    transaction.abort()
    conn.close()
    db.close()
    return {'phases': {
        'cold_read': {'seconds': cold, 'objects': count, 'loads': cold_loads,
                      'rate': count / cold, **cold_trips},
        'warm_read': {'seconds': warm, 'objects': count, 'loads': warm_loads,
                      'rate': count / warm, **warm_trips},
        'hot_read': {'seconds': min(hot), 'objects': count,
                     'rate': count / min(hot), 'runs': hot, **hot_trips},
    }}


def cmd_prefetch(args):
    """Read the objects of the oid file in batches: ``Connection.prefetch``
    of the batch, then each object's state."""
    import transaction
    pairs = read_oids(args.oids)
    trips = round_trips(args)
    db = open_db(args.zconfig, len(pairs))
    conn = db.open()
    transaction.begin()
    storage = conn._storage
    announced = [0]
    supported = hasattr(db.storage, 'prefetch')
    original = storage.prefetch

    def counting_prefetch(oids, *rest):
        oids = list(oids)
        announced[0] += len(oids)
        return original(oids, *rest)
    storage.prefetch = counting_prefetch
    before = conn.getTransferCounts()[0]
    settle()
    mark = trips.mark()
    start = perf()
    for first in range(0, len(pairs), args.batch):
        batch = pairs[first:first + args.batch]
        conn.prefetch([oid for oid, _ in batch])
        for oid, key in batch:
            check_item(key, conn.get(oid), args.version)
    seconds = perf() - start
    loads = conn.getTransferCounts()[0] - before
    counted = trips.record({}, mark, object=len(pairs), load=loads,
                           batch=-(-len(pairs) // args.batch))
    # A storage without prefetch (FileStorage): ZODB's adapter replaces
    # its own prefetch by a no-op at the first call, and nothing is
    # announced after that.
    if supported and announced[0] != len(pairs):
        raise AssertionError(f'storage.prefetch saw {announced[0]} oids, '
                             f'{len(pairs)} were prefetched')
    if loads != len(pairs):
        raise AssertionError(f'{loads} storage loads for {len(pairs)} '
                             f'objects')
    transaction.abort()
    conn.close()
    db.close()
    return {'phases': {'prefetch': {
        'seconds': seconds, 'objects': len(pairs), 'loads': loads,
        'batch': args.batch, 'storage_prefetch': supported,
        'rate': len(pairs) / seconds, **counted}}}


def state_of(data):
    """The attributes stored in one object record (ZODB's two pickles: the
    class, then the state)."""
    import io
    import pickle
    unpickler = pickle.Unpickler(io.BytesIO(data))
    unpickler.persistent_load = lambda reference: reference
    unpickler.load()
    return unpickler.load()


def cmd_load_single(args):
    """``load`` of every oid of the oid file, each timed, through a new
    storage instance of a storage opened in this process (so its caches
    are empty), without ZODB.DB."""
    import types
    import ZODB.config
    pairs = read_oids(args.oids)
    trips = round_trips(args)
    storage = ZODB.config.storageFromString(args.zconfig)
    if hasattr(storage, 'new_instance'):
        instance = storage.new_instance()
        instance.poll_invalidations()
    else:   # FileStorage, ZEO: not MVCC storages
        instance = storage
    samples = []
    states = []
    settle()
    mark = trips.mark()
    for oid, _ in pairs:
        start = perf()
        data, _tid = instance.load(oid)
        samples.append(perf() - start)
        states.append(data)
    counted = trips.record({}, mark, load=len(pairs))
    for (_oid, key), data in zip(pairs, states):
        check_item(key, types.SimpleNamespace(**state_of(data)),
                   args.version)
    if instance is not storage:
        instance.release()
    storage.close()
    seconds = sum(samples)
    result = percentiles(samples)
    result.update(seconds=seconds, objects=len(pairs),
                  rate=len(pairs) / seconds, **counted)
    return {'phases': {'load_single': result}}


# -- several processes -----------------------------------------------------

def mp_keys(index, count):
    # One letter, then digits: number_for() reads the digits.
    return [f'm{index:02d}{i:06d}' for i in range(count)]


def cmd_mp_setup(args):
    import transaction
    from BTrees.OOBTree import OOBTree
    db = open_db(args.zconfig, 100)
    conn = db.open()
    transaction.begin()
    root = conn.root()
    for index in range(args.processes):
        root[f'mp{index}'] = OOBTree()
    transaction.commit()
    conn.close()
    db.close()
    return {}


def barrier(directory, name, index, parties, timeout=900):
    """Wait until all ``parties`` workers have reached ``name``."""
    Path(directory, f'{name}.{index}').touch()
    deadline = time.monotonic() + timeout
    while True:
        arrived = sum(1 for entry in os.listdir(directory)
                      if entry.startswith(name + '.'))
        if arrived >= parties:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f'barrier {name}: {arrived} of {parties} '
                               f'workers after {timeout}s')
        time.sleep(0.002)


def cmd_mp_worker(args):
    """One of ``--processes`` workers: add, update, then read its own
    objects.  Times are ``time.monotonic()``, comparable between the
    processes of one machine, so that run.py can take the span from the
    first start to the last end of each phase."""
    import transaction
    clock = time.monotonic
    keys = mp_keys(args.index, args.objects)
    per_txn = args.per_txn
    name = f'mp{args.index}'
    phases = {}
    trips = round_trips(args)
    commits = -(-len(keys) // per_txn)

    def meet(phase):
        settle()
        barrier(args.barrier, phase, args.index, args.processes)
        return trips.mark()

    def done(phase, record, mark, **operations):
        """The phase's record with its round trips; when they are counted,
        the workers wait for one another before going on (roundtrips.py)."""
        record = trips.record(record, mark, span=True, **operations)
        if trips.counting:
            barrier(args.barrier, f'{phase}-done', args.index,
                    args.processes)
        return record

    db = open_db(args.zconfig, args.objects)
    conn = db.open()
    transaction.begin()
    tree = conn.root()[name]
    mark = meet('add')
    start = clock()
    for first in range(0, len(keys), per_txn):
        transaction.begin()
        for key in keys[first:first + per_txn]:
            tree[key] = Item(key)
        transaction.commit()
    phases['mp_add'] = done('add', {'start': start, 'end': clock(),
                                    'objects': len(keys)}, mark,
                            object=len(keys), commit=commits)
    verify_tree(db, name, keys, 0, sample=7)

    items = list(tree.values())
    mark = meet('update')
    start = clock()
    for first in range(0, len(items), per_txn):
        transaction.begin()
        for item in items[first:first + per_txn]:
            item.bump()
        transaction.commit()
    phases['mp_update'] = done('update', {'start': start, 'end': clock(),
                                          'objects': len(items)}, mark,
                               object=len(items), commit=commits)
    verify_tree(db, name, keys, 1, sample=7)
    conn.close()
    db.close()

    # A new storage: its caches are empty.
    db = open_db(args.zconfig, args.objects)
    conn = db.open()
    transaction.begin()
    mark = meet('read')
    start = clock()
    position = 0
    for key, item in conn.root()[name].items():
        if key != keys[position]:
            raise AssertionError(f'{name}: unexpected key {key!r}')
        check_item(key, item, 1)
        position += 1
    end = clock()
    if position != len(keys):
        raise AssertionError(f'{name}: {position} objects read, '
                             f'{len(keys)} stored')
    loads = conn.getTransferCounts()[0]
    phases['mp_read'] = done('read', {'start': start, 'end': end,
                                      'objects': position, 'loads': loads},
                             mark, object=position, load=loads)
    transaction.abort()
    conn.close()
    db.close()
    return {'phases': phases}


# -- random reads and requests ------------------------------------------

def sample_keys(objects, share, seed):
    """``[(tree, key)]``: a random ``share`` of the data set's objects,
    the same for a given ``seed``."""
    import random
    sizes = split(objects)
    every = [(name, key) for name, prefix, _ in TREES
             for key in keys_for(prefix, sizes[name])]
    return random.Random(seed).sample(every, max(1, int(len(every) * share)))


def read_ahead_counters(storage):
    """Our relstorage's read-ahead counters (None for the others)."""
    metrics = getattr(storage, 'metrics', None)
    if metrics is None:
        return None
    try:
        figures = metrics()
    except Exception:
        return None
    if 'read_ahead_rows' not in figures:
        return None
    return {'rows': figures['read_ahead_rows'],
            'unused': figures['read_ahead_unused']}


def cmd_random_read(args):
    """In a fresh process: a random share of the objects, each looked up
    by its key in its tree (every bucket on the way is loaded, most of its
    other items never are); with ``--prefetch``, the sample's objects are
    announced first with ``Connection.prefetch`` (timed too)."""
    import transaction
    trips = round_trips(args)
    db = open_db(args.zconfig, args.objects)
    conn = db.open()
    transaction.begin()
    sample = sample_keys(args.objects, args.share, args.seed)
    oids = None
    if args.prefetch:
        by_key = {key: oid for oid, key in read_oids(args.oids)}
        oids = [by_key[key] for _, key in sample]
    root = conn.root()
    trees = {name: root[name] for name, _, _ in TREES}
    # The time spent in the storage's load, per call: what a load costs
    # the storage (round trip included), set against the floor's SELECT.
    storage = conn._storage
    inner = storage.load
    in_load = [0.0]

    def timed_load(*load_args):
        began = perf()
        try:
            return inner(*load_args)
        finally:
            in_load[0] += perf() - began
    storage.load = timed_load
    before = conn.getTransferCounts()[0]
    settle()
    mark = trips.mark()
    start = perf()
    if oids is not None:
        conn.prefetch(oids)
    for name, key in sample:
        check_item(key, trees[name][key], args.version)
    seconds = perf() - start
    loads = conn.getTransferCounts()[0] - before
    counted = trips.record({}, mark, object=len(sample), load=loads)
    # Read-ahead rows never asked for are counted as the transaction ends.
    transaction.abort()
    counters = read_ahead_counters(db.storage)
    conn.close()
    db.close()
    phase = 'random_prefetch' if args.prefetch else 'random_read'
    return {'phases': {phase: {
        'seconds': seconds, 'objects': len(sample), 'loads': loads,
        'rate': len(sample) / seconds,
        'per_load': in_load[0] / loads if loads else None,
        'read_ahead': counters, 'seed': args.seed, **counted}}}


def cmd_mixed_worker(args):
    """One of ``--processes`` workers of the request-like workload: each
    transaction looks up ``--reads`` random objects by key and bumps
    ``--writes`` more (conflicts retried); the bumps go to ``--bumps`` for
    mixed-check.  Times are ``time.monotonic()`` (see cmd_mp_worker)."""
    import random

    import transaction
    from ZODB.POSException import ConflictError
    clock = time.monotonic
    rng = random.Random(args.seed)
    sizes = split(args.objects)
    every = [(name, key) for name, prefix, _ in TREES
             for key in keys_for(prefix, sizes[name])]
    # One write may go anywhere (a request); several go to this worker's
    # share, so that the others' commits never make it retry all of them.
    writable = every if args.writes == 1 else every[
        args.index::args.processes]
    db = open_db(args.zconfig, args.objects)
    tm = transaction.TransactionManager()
    conn = db.open(tm)
    bumps = {}
    conflicts = 0
    trips = round_trips(args)
    settle()
    barrier(args.barrier, 'mixed', args.index, args.processes)
    mark = trips.mark()
    start = clock()
    for _ in range(args.requests):
        reads = rng.sample(every, args.reads)
        writes = rng.sample(writable, args.writes)
        while True:
            try:
                tm.begin()
                root = conn.root()
                read_checked(root, reads)
                for name, key in writes:
                    root[name][key].bump()
                tm.commit()
                break
            except ConflictError:
                tm.abort()
                conflicts += 1
        for _, key in writes:
            bumps[key] = bumps.get(key, 0) + 1
    end = clock()
    counted = trips.record({}, mark, span=True, request=args.requests)
    if trips.counting:
        # The others' requests are not done yet (see cmd_mp_worker).
        barrier(args.barrier, 'mixed-done', args.index, args.processes)
    counters = read_ahead_counters(db.storage)
    conn.close()
    db.close()
    with open(args.bumps, 'w') as f:
        json.dump(bumps, f)
    return {'phases': {'mixed': {
        'start': start, 'end': end, 'objects': args.requests,
        'conflicts': conflicts, 'read_ahead': counters, **counted}}}


def cmd_mixed_check(args):
    """Every object's version is the write run's plus the bumps the mixed
    workers made of it (``--bumps``: their files)."""
    import transaction
    bumps = {}
    for path in args.bumps:
        with open(path) as f:
            for key, count in json.load(f).items():
                bumps[key] = bumps.get(key, 0) + count
    db = open_db(args.zconfig, args.objects)
    conn = db.open()
    transaction.begin()
    sizes = split(args.objects)
    checked = 0
    for name, prefix, _ in TREES:
        tree = conn.root()[name]
        for key in keys_for(prefix, sizes[name]):
            check_item(key, tree[key], args.version + bumps.get(key, 0))
            checked += 1
    transaction.abort()
    conn.close()
    db.close()
    return {'checked': checked, 'bumped': sum(bumps.values())}


# -- main ----------------------------------------------------------------

COMMANDS = {
    'write': cmd_write, 'read': cmd_read, 'prefetch': cmd_prefetch,
    'load-single': cmd_load_single, 'mp-setup': cmd_mp_setup,
    'mp-worker': cmd_mp_worker, 'random-read': cmd_random_read,
    'mixed-worker': cmd_mixed_worker, 'mixed-check': cmd_mixed_check,
}


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest='command', required=True)

    def command(name, objects=True):
        p = sub.add_parser(name)
        p.add_argument('--out', required=True)
        p.add_argument('--expect-under', required=True,
                       help='the directory relstorage must come from')
        if name == 'probe':
            return p
        p.add_argument('--zconfig', required=True,
                       help='the storage section, with any %%import')
        p.add_argument('--patch-mariadb', action='store_true',
                       help='apply mariadb_patch.py first (RelStorage 4.3 '
                       'on MariaDB only)')
        p.add_argument('--relay-control', metavar='HOST:PORT',
                       help="the relay's control channel: record each "
                       "phase's round trips (roundtrips.py)")
        if objects:
            p.add_argument('--objects', type=int, required=True)
        return p

    command('probe')
    p = command('write')
    p.add_argument('--latency-commits', type=int, default=300)
    p.add_argument('--threads', type=int, default=4)
    p.add_argument('--conflict-commits', type=int, default=50)
    p.add_argument('--oids', help='where to record the oids written')
    p = command('read')
    p.add_argument('--version', type=int, default=1,
                   help='how many times the write run updated each object')
    p.add_argument('--hot-repeat', type=int, default=3)
    for name in ('prefetch', 'load-single'):
        p = command(name, objects=False)
        p.add_argument('--oids', required=True)
        p.add_argument('--version', type=int, default=1)
        if name == 'prefetch':
            p.add_argument('--batch', type=int, default=100)
    p = command('mp-setup', objects=False)
    p.add_argument('--processes', type=int, required=True)
    p = command('mp-worker')
    p.add_argument('--processes', type=int, required=True)
    p.add_argument('--index', type=int, required=True)
    p.add_argument('--per-txn', type=int, default=100)
    p.add_argument('--barrier', required=True,
                   help='a directory shared by the workers')
    p = command('random-read')
    p.add_argument('--version', type=int, default=1)
    p.add_argument('--share', type=float, default=0.05)
    p.add_argument('--seed', type=int, required=True)
    p.add_argument('--prefetch', action='store_true')
    p.add_argument('--oids', help='the oid file (with --prefetch)')
    p = command('mixed-worker')
    p.add_argument('--processes', type=int, required=True)
    p.add_argument('--index', type=int, required=True)
    p.add_argument('--seed', type=int, required=True)
    p.add_argument('--requests', type=int, required=True)
    p.add_argument('--reads', type=int, default=5)
    p.add_argument('--writes', type=int, default=1)
    p.add_argument('--barrier', required=True)
    p.add_argument('--bumps', required=True)
    p = command('mixed-check')
    p.add_argument('--version', type=int, default=1)
    p.add_argument('--bumps', nargs='+', required=True)
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    patched = None
    if getattr(args, 'patch_mariadb', False):
        import mariadb_patch
        patched = mariadb_patch.apply()
    info = identify(args.expect_under)
    if patched:
        info['mariadb_patch'] = patched
    if args.command == 'probe':
        result = {}
    else:
        started = perf()
        result = COMMANDS[args.command](args)
        result['wall_seconds'] = perf() - started
    result['info'] = info
    with open(args.out, 'w') as f:
        json.dump(result, f, indent=1)


if __name__ == '__main__':
    main()
