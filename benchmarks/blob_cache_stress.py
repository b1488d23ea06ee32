"""Stress of the blob cache (``shared-blob-dir false``): threads in several
processes load blobs at random through one cache directory that is much
smaller than what they read, while trims remove files and the directories
they empty.  It passes when no load failed: a cache that is too small must
make a site slower, never fail a reader.

    .venv/bin/python benchmarks/blob_cache_stress.py --config storage.conf \\
        --seconds 300

``--config`` is a ZConfig file with a ``<relstorage>`` section (``%import
relstorage`` first) whose ``blob-dir`` is the cache, ``shared-blob-dir
false`` and a small ``blob-cache-size`` (RelStorage 4.3 users reported
errors with 256 blobs of 16 KB, ``blob-cache-size 200kb`` and six threads;
those are the defaults here).  The database must be empty: the run stores
the blobs first.

Each thread keeps one ZODB connection and, until the time is up, picks a
blob (mostly from a window that moves over all of them, so that what it
leaves goes cold and is trimmed, and comes back; the rest anywhere) and
reads it one of two ways, as applications do:
``blob.open('r')`` (the storage holds the file open: a trim cannot take
it), or ``blob.committed()`` and an ``open()`` of the name it returns
(Plone's downloads; only the cache's rule of keeping what was used
recently keeps that file).  Each read is checked against what was stored.
Besides the trims that the storage starts by itself, one thread per
process trims the directory to ``blob-cache-size`` over and over, keeping
only what was used in the last ``--keep-recent`` seconds (default 2: the
least the cache allows, plus a second for a read to open what it was
given), so that files and their directories keep disappearing under the
readers.

Prints one JSON document: loads by kind, errors (with the first few
tracebacks), trims run and bytes they removed, per process and in total.
Exit status 1 if any load failed or nothing was trimmed (the run would
then prove nothing), 2 for bad arguments.
"""
import argparse
import hashlib
import json
import os
import random
import subprocess
import sys
import threading
import time
import traceback

#: Errors whose tracebacks the report keeps, per process.
KEEP_TRACEBACKS = 5


def content(index, size):
    """Blob ``index``'s bytes: its number, then a pattern of its own."""
    head = f'blob {index}\n'.encode()
    pattern = hashlib.sha256(head).digest() * 32
    return (head + pattern * (size // len(pattern) + 1))[:size]


def open_db(config):
    import ZODB
    import ZODB.config
    with open(config, encoding='utf-8') as f:
        storage = ZODB.config.storageFromString(f.read())
    return ZODB.DB(storage)


def store(config, count, size):
    """Store ``count`` blobs of ``size`` bytes under ``root['blobs']``."""
    import transaction
    from BTrees.IOBTree import IOBTree
    from ZODB.blob import Blob
    db = open_db(config)
    try:
        tm = transaction.TransactionManager()
        conn = db.open(tm)
        root = conn.root()
        root['blobs'] = IOBTree()
        for index in range(count):
            root['blobs'][index] = Blob(content(index, size))
            if index % 16 == 15:
                tm.commit()
        tm.commit()
        conn.close()
    finally:
        db.close()


class Tally:

    def __init__(self):
        self.lock = threading.Lock()
        self.loads = {'open': 0, 'committed': 0}
        self.errors = 0
        self.tracebacks = []
        self.trims = 0
        self.trimmed_bytes = 0

    def error(self):
        with self.lock:
            self.errors += 1
            if len(self.tracebacks) < KEEP_TRACEBACKS:
                self.tracebacks.append(traceback.format_exc())

    def report(self):
        return {'loads': dict(self.loads), 'errors': self.errors,
                'tracebacks': self.tracebacks, 'trims': self.trims,
                'trimmed_bytes': self.trimmed_bytes}


def reader(db, args, deadline, seed, tally):
    """Reads until ``deadline``: mostly from a window of ``args.window``
    blobs that moves over all of them in ``args.sweep`` seconds (what it
    left behind goes cold, is trimmed, and is downloaded again when the
    window comes back), a share ``args.anywhere`` anywhere (a read may then
    meet the trim of the same file)."""
    import transaction
    rng = random.Random(seed)
    tm = transaction.TransactionManager()
    conn = db.open(tm)
    count, size = args.count, args.size
    start = time.monotonic()
    try:
        while time.monotonic() < deadline:
            if rng.random() >= args.anywhere:
                moved = int((time.monotonic() - start) * count / args.sweep)
                index = (moved + rng.randrange(args.window)) % count
            else:
                index = rng.randrange(count)
            kind = 'open' if rng.random() < 0.5 else 'committed'
            try:
                tm.begin()
                blob = conn.root()['blobs'][index]
                if kind == 'open':
                    with blob.open('r') as f:
                        data = f.read()
                else:
                    blob._p_activate()      # loadBlob, if it is a ghost
                    with open(blob.committed(), 'rb') as f:
                        data = f.read()
                if data != content(index, size):
                    raise AssertionError(f'blob {index}: wrong content')
                with tally.lock:
                    tally.loads[kind] += 1
            except Exception:
                tally.error()
            finally:
                tm.abort()
            # Drop the blob from the object cache now and then, so that
            # its file is asked for again (loadBlob), as in a new request.
            if rng.random() < 0.2:
                conn.cacheMinimize()
    finally:
        conn.close()


def trimmer(directory, limit, keep_recent, deadline, tally):
    from relstorage.blobs import cache
    while time.monotonic() < deadline:
        try:
            result = cache.trim(directory, limit, keep_recent)
        except Exception:
            tally.error()
            result = None
        if result is not None:
            with tally.lock:
                tally.trims += 1
                tally.trimmed_bytes += result[0] - result[1]
        time.sleep(0.01)


def run_process(args):
    """The readers and the trimmer of this process; returns its report."""
    db = open_db(args.config)
    tally = Tally()
    try:
        storage = db.storage
        blobs = storage._blobs
        if blobs is None or not blobs.in_database:
            raise SystemExit('--config: the storage needs blob-dir and '
                             'shared-blob-dir false')
        limit = blobs.size.limit
        if limit is None:
            raise SystemExit('--config: set blob-cache-size')
        deadline = time.monotonic() + args.seconds
        threads = [threading.Thread(
            target=reader, args=(db, args, deadline,
                                 f"{args.seed}-{args.process}-{n}", tally))
            for n in range(args.threads)]
        threads.append(threading.Thread(
            target=trimmer, args=(blobs.directory, limit, args.keep_recent,
                                  deadline, tally)))
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        db.close()
    return tally.report()


def total(reports):
    out = {'loads': {'open': 0, 'committed': 0}, 'errors': 0, 'trims': 0,
           'trimmed_bytes': 0, 'tracebacks': []}
    for report in reports:
        for kind, n in report['loads'].items():
            out['loads'][kind] += n
        for key in ('errors', 'trims', 'trimmed_bytes'):
            out[key] += report[key]
        out['tracebacks'] += report['tracebacks']
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--config', required=True)
    parser.add_argument('--seconds', type=float, default=60.0)
    parser.add_argument('--processes', type=int, default=2)
    parser.add_argument('--threads', type=int, default=6,
                        help='readers per process')
    parser.add_argument('--count', type=int, default=256)
    parser.add_argument('--size', type=int, default=16 * 1024)
    parser.add_argument('--keep-recent', type=float, default=2.0)
    parser.add_argument('--window', type=int, default=16,
                        help='blobs read at one time, mostly')
    parser.add_argument('--sweep', type=float, default=8.0,
                        help='seconds in which the window passes over all')
    parser.add_argument('--anywhere', type=float, default=0.01,
                        help='share of reads outside the window')
    parser.add_argument('--seed', type=int, default=1)
    parser.add_argument('--process', type=int, default=0,
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if min(args.seconds, args.processes, args.threads, args.count,
           args.size, args.window, args.sweep) <= 0:
        parser.error('--seconds, --processes, --threads, --count, --size, '
                     '--window and --sweep must be positive')
    if args.process:
        json.dump(run_process(args), sys.stdout)
        return 0
    store(args.config, args.count, args.size)
    children = []
    for number in range(1, args.processes):
        command = [sys.executable, os.path.abspath(__file__)] + [
            a for a in (argv if argv is not None else sys.argv[1:])] + [
            '--process', str(number)]
        children.append(subprocess.Popen(
            command, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL))
    reports = [run_process(args)]
    for child in children:
        out, _ = child.communicate(timeout=args.seconds + 120)
        if child.returncode != 0:
            reports.append({'loads': {}, 'errors': 1, 'trims': 0,
                            'trimmed_bytes': 0, 'tracebacks': [
                                f'process exited with {child.returncode}']})
        else:
            reports.append(json.loads(out))
    result = total(reports)
    result['processes'] = reports
    json.dump(result, sys.stdout, indent=1)
    print()
    loads = sum(result['loads'].values())
    print(f'{loads} loads ({result["loads"]["open"]} open, '
          f'{result["loads"]["committed"]} by name), {result["errors"]} '
          f'errors, {result["trims"]} trims removed '
          f'{result["trimmed_bytes"]} bytes', file=sys.stderr)
    return 0 if result['errors'] == 0 and result['trimmed_bytes'] else 1


if __name__ == '__main__':
    sys.exit(main())
