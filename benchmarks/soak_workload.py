"""The soak's workload (soak.py), run as a subprocess under either
implementation's interpreter, as workload.py is.

Commands (each writes one JSON document to ``--out``):

``soak-setup``
    The data set on an empty database: ``--objects`` Items (workload.py's)
    in two OOBTrees, a tree of small blobs (``--blobs``).
``soak-worker``
    One process of the requests workload until ``--until`` (epoch
    seconds): each request begins a transaction, looks up ``--reads``
    random Items by key, bumps one random Item (any worker may bump the
    same one: a conflict now and then, retried), every ``--blob-every``-th
    request also replaces a random small blob and every other such request
    reads one, then commits.  Per ``--window`` seconds (from
    ``--start``) it records the requests, conflicts (counted per kind:
    the exception and the conflicting object's class; the most retries
    one request needed; the first few in full, oid and serials, to tell
    a stale read that repeats from real contention), a latency histogram
    (buckets 5 % apart, merged exactly by soak.py), its RSS and the CPU
    time it has used so far and the storage's cumulative counters (loads,
    cache hits and misses...: ours only), in
    ``--windows`` (one JSON line per window, written as each ends, so a
    run that is stopped keeps what it measured).
"""
import argparse
import json
import math
import os
import random
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# -I leaves this file's directory off sys.path; the Items are pickled as
# workload.Item, so every process must find that module.
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import workload  # noqa: E402
from workload import TREES  # noqa: E402
from workload import Item  # noqa: E402
from workload import keys_for  # noqa: E402
from workload import split  # noqa: E402

#: Conflicts recorded in full per window and worker: the first few, and
#: a request's 10th, 100th, 1000th... retry (a streak's story).
CONFLICT_SAMPLES = 5
STREAK_SAMPLES = 10

#: The latency histogram: bucket i holds latencies up to FLOOR * STEP**i
#: seconds (the last one, everything longer).
FLOOR = 0.0001
STEP = 1.05
BUCKETS = 400

BLOB_SIZE = 4096


def bucket(seconds):
    if seconds <= FLOOR:
        return 0
    return min(BUCKETS - 1, int(math.log(seconds / FLOOR, STEP)) + 1)


def rss_kb():
    """This process's resident set, from /proc (Linux)."""
    with open('/proc/self/statm') as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf('SC_PAGE_SIZE') // 1024


def _blob_data(key, version):
    head = f'{key}:{version}:'.encode('ascii')
    return head + b'x' * (BLOB_SIZE - len(head))


def cmd_setup(args):
    import transaction
    from BTrees.OOBTree import OOBTree
    from ZODB.blob import Blob
    db = workload.open_db(args.zconfig, args.objects)
    conn = db.open()
    root = conn.root()
    sizes = split(args.objects)
    for name, prefix, per_txn in TREES:
        root[name] = tree = OOBTree()
        keys = keys_for(prefix, sizes[name])
        for first in range(0, len(keys), per_txn):
            for key in keys[first:first + per_txn]:
                tree[key] = Item(key)
            transaction.commit()
    root['blobs'] = blobs = OOBTree()
    for index in range(args.blobs):
        key = f'z{index:07d}'
        blob = Blob()
        with blob.open('w') as f:
            f.write(_blob_data(key, 0))
        blobs[key] = blob
        if index % 100 == 99:
            transaction.commit()
    transaction.commit()
    conn.close()
    db.close()
    return {'objects': args.objects, 'blobs': args.blobs}


def cmd_worker(args):
    import transaction
    from ZODB.blob import Blob
    from ZODB.POSException import ConflictError
    rng = random.Random(args.seed)
    sizes = split(args.objects)
    every = [(name, key) for name, prefix, _ in TREES
             for key in keys_for(prefix, sizes[name])]
    blob_keys = [f'z{index:07d}' for index in range(args.blobs)]
    db = workload.open_db(args.zconfig, args.objects)
    tm = transaction.TransactionManager()
    window = 0
    counts = _new_window()
    requests = 0
    out = open(args.windows, 'a')
    # Together, at the start the driver set (the set-up is done by then).
    time.sleep(max(0.0, args.start - time.time()))

    def close_window(index):
        counts['window'] = index
        counts['rss_kb'] = rss_kb()
        used = os.times()
        counts['cpu_s'] = round(used.user + used.system, 2)
        counts['storage'] = _storage_counters(db.storage)
        out.write(json.dumps(counts) + '\n')
        out.flush()

    while True:
        now = time.time()
        if now >= args.until:
            break
        index = int((now - args.start) // args.window)
        if index != window:
            close_window(window)
            window, counts = index, _new_window()
        reads = rng.sample(every, args.reads)
        name, key = rng.choice(every)
        requests += 1
        blob_step = args.blob_every and requests % args.blob_every == 0
        blob_key = rng.choice(blob_keys) if blob_step and blob_keys else None
        started = time.monotonic()
        retries = 0
        while True:
            conn = db.open(tm)
            try:
                tm.begin()
                root = conn.root()
                workload.read_checked(root, reads)
                root[name][key].bump()
                if blob_key is not None:
                    blob = root['blobs'][blob_key]
                    if requests % (2 * args.blob_every) == 0:
                        with blob.open('r') as f:
                            if not f.read(len(blob_key)) == \
                                    blob_key.encode('ascii'):
                                raise AssertionError(f'blob {blob_key} wrong')
                    else:
                        fresh = Blob()
                        with fresh.open('w') as f:
                            f.write(_blob_data(blob_key, requests))
                        root['blobs'][blob_key] = fresh
                tm.commit()
                break
            except ConflictError as error:
                tm.abort()
                retries += 1
                _count_conflict(counts, error, retries, blob_key)
            finally:
                conn.close()
        latency = time.monotonic() - started
        counts['requests'] += 1
        counts['histogram'][bucket(latency)] += 1
    close_window(window)
    out.close()
    db.close()
    return {'requests': requests}


def _count_conflict(counts, error, retries, blob_key):
    from ZODB.utils import tid_repr
    counts['conflicts'] += 1
    kind = f'{type(error).__name__} on {error.class_name or "?"}'
    counts['kinds'][kind] = counts['kinds'].get(kind, 0) + 1
    counts['most_retries'] = max(counts['most_retries'], retries)
    streak = retries >= 10 and str(retries).strip('0') == '1'
    if len(counts['samples']) < CONFLICT_SAMPLES or (
            streak and len(counts['samples'])
            < CONFLICT_SAMPLES + STREAK_SAMPLES):
        counts['samples'].append({
            'time': time.time(), 'kind': kind, 'retry': retries,
            'oid': error.oid.hex() if error.oid else None,
            'serials': [tid_repr(s) for s in error.serials or ()],
            'blob_request': blob_key is not None,
            'message': str(error)[:300]})


#: The storage's counters recorded at each window's end (ours has
#: ``metrics()``; RelStorage 4.3 has no such method: nothing recorded).
STORAGE_COUNTERS = ('loads', 'cache_hits', 'cache_misses', 'polls',
                    'invalidations', 'commits', 'commit_seconds',
                    'lock_wait_seconds')


def _storage_counters(storage):
    metrics = getattr(storage, 'metrics', None)
    if metrics is None:
        return {}
    found = metrics()
    return {name: found[name] for name in STORAGE_COUNTERS if name in found}


def _new_window():
    return {'requests': 0, 'conflicts': 0, 'kinds': {}, 'most_retries': 0,
            'samples': [], 'histogram': [0] * BUCKETS}


COMMANDS = {'soak-setup': cmd_setup, 'soak-worker': cmd_worker}


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest='command', required=True)
    for name in COMMANDS:
        p = sub.add_parser(name)
        p.add_argument('--out', required=True)
        p.add_argument('--expect-under', required=True)
        p.add_argument('--zconfig', required=True)
        p.add_argument('--patch-mariadb', action='store_true')
        p.add_argument('--objects', type=int, required=True)
        p.add_argument('--blobs', type=int, default=200)
        if name == 'soak-worker':
            p.add_argument('--seed', type=int, required=True)
            p.add_argument('--start', type=float, required=True)
            p.add_argument('--until', type=float, required=True)
            p.add_argument('--window', type=float, default=300)
            p.add_argument('--reads', type=int, default=5)
            p.add_argument('--blob-every', type=int, default=50)
            p.add_argument('--windows', required=True)
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    result = workload.execute(args, COMMANDS)
    with open(args.out, 'w') as f:
        json.dump(result, f, indent=1)


if __name__ == '__main__':
    sys.exit(main())
