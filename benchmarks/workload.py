"""The benchmark workload, run as a subprocess by run.py.

The same file drives both implementations: it is started once under the
project's interpreter (our relstorage) and once under the reference venv's
(RelStorage 4.3), with the storage given as a ZConfig string.  It never
imports relstorage except to report which one it got, and it refuses to
run when that is not the expected one (both packages are called
``relstorage``).

Commands (each writes one JSON document to ``--out``):

``write``
    Builds the data set on an empty database and times: adding objects in
    transactions of 100 and of 1000, updating every object, single small
    commits (latency percentiles) and concurrent conflicting commits.
``read``
    In a fresh process: cold read of every object (empty caches), then hot
    reads of the same objects through the same connection (ZODB's cache).
``floor-postgresql`` / ``floor-sqlite``
    The same numbers of rows of the same size written and read with the
    bare driver, no ZODB: what the database itself costs.

Every phase checks what it wrote or read and raises if it is wrong.
"""
import argparse
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

perf = time.perf_counter


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

def identify(expect_under):
    """Import relstorage and check it is the expected one."""
    from importlib import metadata
    info = {
        'python': sys.version.split()[0],
        'executable': sys.executable,
        'platform': platform.platform(),
    }
    for dist in ('relstorage', 'ZODB', 'persistent', 'BTrees',
                 'transaction', 'psycopg2-binary', 'psycopg2', 'psycopg'):
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
        start = perf()
        for first in range(0, len(keys), per_txn):
            transaction.begin()
            for key in keys[first:first + per_txn]:
                tree[key] = Item(key)
            transaction.commit()
        seconds = perf() - start
        stores = conn.getTransferCounts()[1] - stores_before
        phases[f'add_{per_txn}'] = {
            'seconds': seconds, 'objects': len(keys),
            'stored_records': stores,
            'commits': -(-len(keys) // per_txn),
            'rate': len(keys) / seconds}
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
    start = perf()
    for first in range(0, len(items), per_txn):
        transaction.begin()
        for item in items[first:first + per_txn]:
            item.bump()
        transaction.commit()
    seconds = perf() - start
    phases['update_1000'] = {
        'seconds': seconds, 'objects': len(items),
        'commits': -(-len(items) // per_txn), 'rate': len(items) / seconds}
    for name, prefix, _ in TREES:
        verify_tree(db, name, keys_for(prefix, sizes[name]), 1, sample=13)

    # Commit latency: one small object changed per transaction.
    counter = root['counter']
    for _ in range(5):   # warm-up, not timed
        transaction.begin()
        counter.value += 1
        transaction.commit()
    samples = []
    for _ in range(args.latency_commits):
        start = perf()
        transaction.begin()
        counter.value += 1
        transaction.commit()
        samples.append(perf() - start)
    phases['commit_latency'] = percentiles(samples)
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
                                            args.conflict_commits)
        except Exception as e:
            traceback.print_exc()
            phases['conflicts'] = {'error': failure(e)}

    conn.close()
    db.close()
    return {'phases': phases, 'mean_state_size': mean_size}


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


def conflicts(db, threads, commits):
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
                for attempt in range(200):
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
    start = perf()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    seconds = perf() - start
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
            'retry_count': sum(retries.values())}


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

    loads_before = conn.getTransferCounts()[0]
    start = perf()
    count = read_all()
    cold = perf() - start
    loads = conn.getTransferCounts()[0] - loads_before
    hot = []
    for _ in range(args.hot_repeat):
        start = perf()
        read_all()
        hot.append(perf() - start)
    if conn.getTransferCounts()[0] - loads_before != loads:
        raise AssertionError('the hot read loaded objects from the storage')
    transaction.abort()
    conn.close()
    db.close()
    return {'phases': {
        'cold_read': {'seconds': cold, 'objects': count, 'loads': loads,
                      'rate': count / cold},
        'hot_read': {'seconds': min(hot), 'objects': count,
                     'rate': count / min(hot), 'runs': hot},
    }}


# -- floors: the bare drivers ---------------------------------------------

def floor_rows(count, size, salt):
    """``count`` (oid, state) rows of ``size`` bytes each."""
    rows = []
    for oid in range(1, count + 1):
        seed = hashlib.sha256(f'{salt}:{oid}'.encode()).digest()
        rows.append((oid, (seed * (size // len(seed) + 1))[:size]))
    return rows


def _floor_plan(args):
    size = max(1, int(round(args.size)))
    sizes = split(args.objects)
    return size, floor_rows(args.objects, size, 'v0'), sizes


def cmd_floor_postgresql(args):
    import psycopg2
    import psycopg2.extras
    size, rows, sizes = _floor_plan(args)
    conn = psycopg2.connect(args.dsn)
    cur = conn.cursor()
    cur.execute('SELECT version()')
    server = cur.fetchone()[0]
    cur.execute('SHOW server_version')
    server_version = cur.fetchone()[0]

    def reset():
        cur.execute('DROP TABLE IF EXISTS floor_state')
        cur.execute('CREATE TABLE floor_state (zoid BIGINT PRIMARY KEY, '
                    'tid BIGINT NOT NULL, state BYTEA NOT NULL)')
        conn.commit()

    def check_count(expected):
        cur.execute('SELECT COUNT(*), COALESCE(SUM(LENGTH(state)), 0) '
                    'FROM floor_state')
        got = cur.fetchone()
        conn.commit()
        if tuple(got) != (expected, expected * size):
            raise AssertionError(f'floor table holds {got}, expected '
                                 f'{expected} rows of {size} bytes')

    phases = {}
    # Multi-row INSERTs, one commit per batch, like the two add phases.
    reset()
    done = 0
    for name, _, per_txn in TREES:
        part = rows[done:done + sizes[name]]
        start = perf()
        for first in range(0, len(part), per_txn):
            psycopg2.extras.execute_values(
                cur, 'INSERT INTO floor_state (zoid, tid, state) VALUES %s',
                [(oid, 1, state) for oid, state in
                 part[first:first + per_txn]], page_size=per_txn)
            conn.commit()
        seconds = perf() - start
        phases[f'add_{per_txn}'] = {'seconds': seconds,
                                    'objects': len(part),
                                    'rate': len(part) / seconds}
        done += len(part)
    check_count(len(rows))

    # Updating every row, 1000 per transaction.
    new = floor_rows(args.objects, size, 'v1')
    start = perf()
    for first in range(0, len(new), 1000):
        psycopg2.extras.execute_values(
            cur, 'UPDATE floor_state f SET state = v.state, tid = 2 '
            'FROM (VALUES %s) AS v (zoid, state) WHERE f.zoid = v.zoid',
            new[first:first + 1000], page_size=1000)
        conn.commit()
    seconds = perf() - start
    phases['update_1000'] = {'seconds': seconds, 'objects': len(new),
                             'rate': len(new) / seconds}
    check_count(len(new))

    # One SELECT by primary key per row: the shape of a cold read.
    expected = dict(new)
    runs = []
    for _ in range(args.repeat):
        start = perf()
        for oid in range(1, len(new) + 1):
            cur.execute('SELECT state, tid FROM floor_state WHERE zoid = %s',
                        (oid,))
            state, tid = cur.fetchone()
            if bytes(state) != expected[oid]:
                raise AssertionError(f'floor row {oid} read back wrong')
        conn.commit()
        runs.append(perf() - start)
    seconds = statistics.median(runs)
    phases['cold_read'] = {'seconds': seconds, 'objects': len(new),
                           'rate': len(new) / seconds, 'runs': runs}

    # Single small commits.
    samples = []
    for i in range(args.latency_commits):
        start = perf()
        cur.execute('UPDATE floor_state SET tid = %s WHERE zoid = 1', (i,))
        conn.commit()
        samples.append(perf() - start)
    phases['commit_latency'] = percentiles(samples)

    # Informational: every row in one COPY, one transaction.
    reset()
    import io
    buffer = io.StringIO()
    for oid, state in rows:
        buffer.write(f'{oid}\t1\t\\\\x{state.hex()}\n')
    start = perf()
    buffer.seek(0)
    cur.copy_expert('COPY floor_state (zoid, tid, state) FROM STDIN',
                    buffer)
    conn.commit()
    seconds = perf() - start
    phases['copy_all'] = {'seconds': seconds, 'objects': len(rows),
                          'rate': len(rows) / seconds}
    check_count(len(rows))
    cur.execute('DROP TABLE floor_state')
    conn.commit()
    conn.close()
    return {'phases': phases, 'row_size': size, 'server': server,
            'server_version': server_version,
            'driver': 'psycopg2 ' + psycopg2.__version__.split()[0]}


def cmd_floor_sqlite(args):
    import sqlite3
    size, rows, sizes = _floor_plan(args)
    path = os.path.join(args.data_dir, 'floor.sqlite3')
    for suffix in ('', '-wal', '-shm'):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute('PRAGMA journal_mode = wal')
    conn.execute(f'PRAGMA synchronous = {args.synchronous}')
    conn.execute('CREATE TABLE floor_state (zoid INTEGER PRIMARY KEY, '
                 'tid INTEGER NOT NULL, state BLOB NOT NULL)')

    def check_count(expected):
        got = conn.execute('SELECT COUNT(*), COALESCE(SUM(LENGTH(state)), 0) '
                           'FROM floor_state').fetchone()
        if tuple(got) != (expected, expected * size):
            raise AssertionError(f'floor table holds {got}')

    def in_transaction(statement, batch):
        conn.execute('BEGIN IMMEDIATE')
        conn.executemany(statement, batch)
        conn.execute('COMMIT')

    phases = {}
    done = 0
    for name, _, per_txn in TREES:
        part = rows[done:done + sizes[name]]
        start = perf()
        for first in range(0, len(part), per_txn):
            in_transaction(
                'INSERT INTO floor_state (zoid, tid, state) VALUES (?, 1, ?)',
                part[first:first + per_txn])
        seconds = perf() - start
        phases[f'add_{per_txn}'] = {'seconds': seconds,
                                    'objects': len(part),
                                    'rate': len(part) / seconds}
        done += len(part)
    check_count(len(rows))

    new = floor_rows(args.objects, size, 'v1')
    start = perf()
    for first in range(0, len(new), 1000):
        in_transaction('UPDATE floor_state SET state = ?, tid = 2 '
                       'WHERE zoid = ?',
                       [(state, oid) for oid, state in
                        new[first:first + 1000]])
    seconds = perf() - start
    phases['update_1000'] = {'seconds': seconds, 'objects': len(new),
                             'rate': len(new) / seconds}
    check_count(len(new))

    expected = dict(new)
    runs = []
    for _ in range(args.repeat):
        reader = sqlite3.connect(path, isolation_level=None)
        start = perf()
        reader.execute('BEGIN')
        for oid in range(1, len(new) + 1):
            state, tid = reader.execute(
                'SELECT state, tid FROM floor_state WHERE zoid = ?',
                (oid,)).fetchone()
            if state != expected[oid]:
                raise AssertionError(f'floor row {oid} read back wrong')
        reader.execute('COMMIT')
        runs.append(perf() - start)
        reader.close()
    seconds = statistics.median(runs)
    phases['cold_read'] = {'seconds': seconds, 'objects': len(new),
                           'rate': len(new) / seconds, 'runs': runs}

    samples = []
    for i in range(args.latency_commits):
        start = perf()
        conn.execute('BEGIN IMMEDIATE')
        conn.execute('UPDATE floor_state SET tid = ? WHERE zoid = 1', (i,))
        conn.execute('COMMIT')
        samples.append(perf() - start)
    phases['commit_latency'] = percentiles(samples)
    conn.close()
    return {'phases': phases, 'row_size': size,
            'driver': 'sqlite3 ' + sqlite3.sqlite_version,
            'synchronous': args.synchronous}


# -- main ----------------------------------------------------------------

def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest='command', required=True)

    def common(p, storage=True):
        p.add_argument('--out', required=True)
        p.add_argument('--objects', type=int, required=True)
        if storage:
            p.add_argument('--zconfig', required=True,
                           help='the <relstorage> section, with %%import')
            p.add_argument('--expect-under', required=True,
                           help='the directory relstorage must come from')

    p = sub.add_parser('probe')
    p.add_argument('--out', required=True)
    p.add_argument('--expect-under', required=True)

    p = sub.add_parser('write')
    common(p)
    p.add_argument('--latency-commits', type=int, default=300)
    p.add_argument('--threads', type=int, default=4)
    p.add_argument('--conflict-commits', type=int, default=50)

    p = sub.add_parser('read')
    common(p)
    p.add_argument('--version', type=int, default=1,
                   help='how many times the write run updated each object')
    p.add_argument('--hot-repeat', type=int, default=3)

    for name in ('floor-postgresql', 'floor-sqlite'):
        p = sub.add_parser(name)
        common(p, storage=False)
        p.add_argument('--size', type=float, required=True)
        p.add_argument('--repeat', type=int, default=3)
        p.add_argument('--latency-commits', type=int, default=300)
        if name == 'floor-postgresql':
            p.add_argument('--dsn', required=True)
        else:
            p.add_argument('--data-dir', required=True)
            p.add_argument('--synchronous', default='full')

    args = parser.parse_args(argv)
    if args.command == 'probe':
        result = {'info': identify(args.expect_under)}
    elif args.command in ('write', 'read'):
        info = identify(args.expect_under)
        started = perf()
        result = (cmd_write if args.command == 'write' else cmd_read)(args)
        result['info'] = info
        result['wall_seconds'] = perf() - started
    elif args.command == 'floor-postgresql':
        result = cmd_floor_postgresql(args)
    else:
        result = cmd_floor_sqlite(args)
    with open(args.out, 'w') as f:
        json.dump(result, f, indent=1)


if __name__ == '__main__':
    main()
