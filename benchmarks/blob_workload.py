"""The blob benchmark's workload, run as a subprocess by blobs.py.

Like workload.py, the same file runs under the project's interpreter (our
relstorage) and under the reference venv's (RelStorage 4.3), with the
storage given as a ZConfig string; it imports relstorage only to check that
it is the expected one (``workload.identify``).

Commands (each writes one JSON document to ``--out``):

``store``
    On an empty storage: ``--count`` blobs of ``--size`` bytes, one per
    transaction, each a new ``ZODB.blob.Blob`` added to the connection,
    written with ``blob.open('w')`` from data prepared in memory before the
    timing, then put into an ``OOBTree`` under the root and committed.  The
    figure is the time spent in ``transaction.commit()`` (the blob reaching
    the storage); the writes into the blobs' files are timed apart, and
    include an ``fsync`` of each file.  Without it, a commit paid at
    random for writing the application's file to the disk: on ext4
    (data=ordered), the database's fsync at COMMIT made the kernel write
    out the 100 MiB just written to the blob file, whichever storage ran
    (PostgreSQL, shared-blob-dir true: commits of 15 to 72 ms, where the
    COMMIT statement took nearly all), and the store figures of 100 MiB
    blobs moved by a factor of two from one run to the next.
``load``
    In a new process: the tree and its buckets are loaded (untimed), so
    each blob is a ghost; then each blob is opened with ``blob.open('r')``
    and read fully, into a buffer allocated beforehand (cold: the first activation of the blob is where ZODB
    asks the storage for its file with ``loadBlob``, which downloads it
    with shared-blob-dir false).  Then ZODB's object cache is emptied and
    the same reads are timed again (warm: the files are in the blob
    directory now).  Every blob read is compared with what was stored,
    outside the timing (each blob's open and read is timed on its own).

With ``--relay-control`` (blobs.py ``--round-trips``, ``--rtt``) each
phase also records the round trips it made through the relay in front of
the database, per blob (roundtrips.py).
"""
import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# -I leaves this file's directory off sys.path.
sys.path.insert(0, str(HERE))

perf = time.perf_counter


def payloads(count, size):
    """The ``count`` blobs of ``size`` bytes: the same random bytes (seeded:
    the load process makes them again to check what it reads), each with
    its number in its first 16 bytes, so that every blob differs."""
    base = random.Random(size).randbytes(size)
    out = []
    for index in range(count):
        head = f'{index:015d}\n'.encode('ascii')[:size]
        out.append(head + base[len(head):])
    return out


def key_of(index):
    return f'{index:07d}'


def open_db(zconfig):
    import BTrees.OOBTree  # noqa: F401  (imported before any timing)
    import ZODB
    import ZODB.blob  # noqa: F401
    import ZODB.config
    return ZODB.DB(ZODB.config.storageFromString(zconfig))


def cmd_store(args):
    import transaction
    from BTrees.OOBTree import OOBTree
    from roundtrips import RoundTrips
    from ZODB.blob import Blob

    trips = RoundTrips(args.relay_control)
    data = payloads(args.count, args.size)
    db = open_db(args.zconfig)
    conn = db.open()
    transaction.begin()
    conn.root()['blobs'] = tree = OOBTree()
    transaction.commit()

    write_seconds = commit_seconds = 0.0
    mark = trips.mark()
    for index, payload in enumerate(data):
        transaction.begin()
        blob = Blob()
        # Added first, so that its file is made in the storage's temporary
        # directory (inside blob-dir), as for a blob of a loaded object.
        conn.add(blob)
        start = perf()
        with blob.open('w') as f:
            f.write(payload)
            # On the disk before the commit (see the docstring).
            f.flush()
            os.fsync(f.fileno())
        middle = perf()
        tree[key_of(index)] = blob
        transaction.commit()
        end = perf()
        write_seconds += middle - start
        commit_seconds += end - middle
    counted = trips.record({}, mark, blob=args.count)

    # Checked from a second connection: every blob is there.
    tm = transaction.TransactionManager()
    other = db.open(transaction_manager=tm)
    found = len(other.root()['blobs'])
    tm.abort()
    other.close()
    conn.close()
    db.close()
    if found != args.count:
        raise AssertionError(f'{found} blobs stored, {args.count} written')
    total = args.count * args.size
    return {'phases': {'store': {
        'seconds': commit_seconds, 'write_seconds': write_seconds,
        'blobs': args.count, 'bytes': total,
        'rate': args.count / commit_seconds,
        'mb_rate': total / commit_seconds / 2**20, **counted}}}


def cmd_load(args):
    import transaction
    from roundtrips import RoundTrips
    trips = RoundTrips(args.relay_control)
    db = open_db(args.zconfig)
    conn = db.open()
    transaction.begin()
    tree = conn.root()['blobs']
    # Loads the tree and its buckets; the blobs stay ghosts.
    blobs = list(tree.values())
    if len(blobs) != args.count:
        raise AssertionError(f'{len(blobs)} blobs found, {args.count} '
                             f'stored')
    if any(blob._p_changed is not None for blob in blobs):
        raise AssertionError('the blobs were loaded before the timing')

    expected = payloads(args.count, args.size)
    # Each blob is read into one preallocated buffer (one byte longer, to
    # see the end of the file): allocating a new bytes object per read
    # would time the allocator too, whose state differs from one process
    # to the next: with glibc, warm reads of 1 MiB blobs into new bytes ran
    # at 1.7 or 6 GB/s depending on whether an earlier large allocation had
    # raised malloc's dynamic mmap threshold (1.7 on both sides with
    # MALLOC_MMAP_THRESHOLD_ fixed).
    view = memoryview(bytearray(args.size + 1))

    def read_all():
        seconds = 0.0
        mark = trips.mark()
        for index, blob in enumerate(blobs):
            start = perf()
            with blob.open('r') as f:
                size = 0
                while True:
                    got = f.readinto(view[size:])
                    if not got:
                        break
                    size += got
            seconds += perf() - start
            # Checked outside the timing.
            if size != args.size or view[:size] != expected[index]:
                raise AssertionError(
                    f'blob {index} read back wrong: {size} bytes, '
                    f'{args.size} expected')
        total = args.count * args.size
        return trips.record({'seconds': seconds, 'blobs': args.count,
                             'bytes': total, 'rate': args.count / seconds,
                             'mb_rate': total / seconds / 2**20}, mark,
                            blob=args.count)

    phases = {'load_cold': read_all()}
    conn.cacheMinimize()
    if any(blob._p_changed is not None for blob in blobs):
        raise AssertionError('cacheMinimize left blobs loaded')
    phases['load_warm'] = read_all()
    transaction.abort()
    conn.close()
    db.close()
    return {'phases': phases}


COMMANDS = {'store': cmd_store, 'load': cmd_load}


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('command', choices=sorted(COMMANDS))
    parser.add_argument('--out', required=True)
    parser.add_argument('--expect-under', required=True,
                        help='the directory relstorage must come from')
    parser.add_argument('--zconfig', required=True)
    parser.add_argument('--count', type=int, required=True)
    parser.add_argument('--size', type=int, required=True)
    parser.add_argument('--patch-mariadb', action='store_true',
                        help='apply mariadb_patch.py first (RelStorage 4.3 '
                        'on MariaDB only)')
    parser.add_argument('--relay-control', metavar='HOST:PORT',
                        help="the relay's control channel: record each "
                        "phase's round trips (roundtrips.py)")
    return parser.parse_args(argv)


def main(argv=None):
    from workload import execute
    args = parse_args(argv)
    result = execute(args, COMMANDS)
    with open(args.out, 'w') as f:
        json.dump(result, f, indent=1)


if __name__ == '__main__':
    main()
