"""The scale benchmark's steps on a converted site, run as subprocesses by
scale.py.

The site is convert_workload.py's (``--shape scale``): ``folders``, an
``OOBTree`` of folders keyed ``f00000``..., each an ``OOBTree`` of up to
500 documents keyed ``d00000000``... (``PersistentMapping``: title, body,
version, tags, sometimes an ``attachment`` blob), ``count``, a
``BTrees.Length`` of the documents in folders, and ``bench``, which says
how many documents were numbered.  The same file runs under the project's
interpreter and under the reference venv's (RelStorage 4.3); each command
prints one JSON document on stdout and its progress on stderr::

    python scale_workload.py first-request CONFIG --seed S
    python scale_workload.py fill-cache CONFIG --entries N
    python scale_workload.py writer CONFIG --seconds T --out FILE ...
    python scale_workload.py grow CONFIG --fraction F --seed S
    python scale_workload.py check CONFIG --sample N --seed S

``first-request``
    What a new application process does before its first page: imports,
    opens the database from CONFIG (with ``cache-local-dir`` in it, the
    persistent cache is read and checked here), then serves a folder
    listing: the site's root, one folder (drawn by ``--seed``), the
    titles of its first 20 documents and the body of one.  Reports the
    seconds since the process was created (``/proc``, so the
    interpreter's start-up counts), of each step, the objects loaded, and
    what the storage logged of its persistent cache.
``fill-cache``
    Loads documents (and the buckets that lead to them), folder after
    folder, until the storage's local cache holds ``--entries`` entries or
    the site is read through, then closes the database, which writes the
    cache file (CONFIG must name ``cache-local-dir`` and a
    ``cache-local-mb`` large enough).
``writer``
    pack_workload.py's writer loop (``timed_commits``) on this site: 70 %
    of commits edit a random document, 30 % add one to a folder of the
    writer's own.
``grow``
    ``--fraction`` of the documents again: as many added (new numbers, in
    new folders), a fifth as many edited, half as many removed from their
    folders, in commits of 20-60 adds, so that a second pack has
    something to do.
``check``
    After the packs: the documents in the numbered folders (every bucket
    of every folder loaded) against ``count``, then a random sample of
    ``--sample`` documents (and their attachments' files) read, so that a
    pack that removed something reachable fails here.
"""
import os
import random
import sys
import time

from pathlib import Path

HERE = Path(__file__).resolve().parent
# -I leaves this file's directory off sys.path (workload, pack_workload).
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from convert_workload import SHAPES, Text, doc_key, folder_key  # noqa: E402

perf = time.perf_counter
CACHE_SIZE = 20000
LISTING = 20


def since_process_start():
    """Seconds since the kernel created this process (/proc; start-up of
    the interpreter included), or None off Linux."""
    try:
        with open('/proc/self/stat') as f:
            # The fields after the command name, which may hold spaces.
            fields = f.read().rsplit(')', 1)[1].split()
        with open('/proc/uptime') as f:
            uptime = float(f.read().split()[0])
    except (OSError, IndexError, ValueError):
        return None
    return uptime - int(fields[19]) / os.sysconf('SC_CLK_TCK')


def open_db(config, cache_size=CACHE_SIZE):
    import ZODB
    import ZODB.config
    with open(config) as f:
        storage = ZODB.config.storageFromFile(f)
    return ZODB.DB(storage, cache_size=cache_size,
                   large_record_size=1 << 30)


def numbered(root):
    """How many document numbers the site has given out."""
    bench = root['bench']
    return bench.get('next', bench['objects'])


# -- first request -------------------------------------------------------

class Captured:
    """The log records of the persistent cache, kept (both
    relstorages log it under ``relstorage.cache``)."""

    def __init__(self):
        import logging
        self.lines = []
        handler = logging.Handler(logging.INFO)
        handler.emit = lambda record: self.lines.append(
            f'{record.name}: {record.getMessage()}')
        logger = logging.getLogger('relstorage.cache')
        logger.setLevel(logging.INFO)
        logger.addHandler(handler)


def cmd_first_request(args):
    # Before this function: the interpreter, and workload.execute's
    # imports (relstorage's too, to identify it).
    at_start = since_process_start()
    captured = Captured()
    t0 = perf()
    import BTrees.OOBTree  # noqa: F401
    import transaction
    import ZODB  # noqa: F401
    t1 = perf()
    db = open_db(args.config)
    t2 = perf()
    conn = db.open()
    transaction.begin()
    root = conn.root()
    folders = root['folders']
    rng = random.Random(f'first:{args.seed}')
    folder = folders[folder_key(rng.randrange(numbered(root)))]
    titles = [doc['title'] for _, doc in zip(range(LISTING),
                                             folder.values())]
    body = len(folder[folder.minKey()]['body'])
    transaction.abort()
    t3 = perf()
    loads = conn.getTransferCounts()[0]
    after = since_process_start()
    conn.close()
    # Ours reads a large cache file back in the background: wait for it,
    # so that its log line is captured (and the file is written back
    # whole at close).
    read_back = read_back_seconds(db.storage, t1)
    db.close()
    return {'since_process_start': after,
            'before_main': at_start,
            'imports_seconds': t1 - t0, 'open_seconds': t2 - t1,
            'request_seconds': t3 - t2, 'loads': loads,
            'read_back_seconds': read_back,
            'titles': len(titles), 'body_bytes': body,
            'cache_log': captured.lines}


def read_back_seconds(storage, opening):
    """Seconds from ``opening`` until the storage's cache file was read
    back in the background (ours); None where it was not (a small file,
    RelStorage 4.3)."""
    try:
        from relstorage.cache.persistent import wait
    except ImportError:
        return None
    if getattr(storage, '_cache_warmer', None) is None:
        return None
    wait(storage)
    return perf() - opening


# -- fill-cache ----------------------------------------------------------

def storage_cache_entries(storage):
    """Entries in the storage's process-wide cache (ours: ``_cache``;
    RelStorage 4.3: ``_cache.local_client``), or None."""
    cache = getattr(storage, '_cache', None)
    for candidate in (cache, getattr(cache, 'local_client', None)):
        try:
            return len(candidate)
        except TypeError:
            continue
    return None


def cmd_fill_cache(args):
    import transaction
    captured = Captured()
    db = open_db(args.config)
    storage = db.storage
    conn = db.open()
    transaction.begin()
    started = perf()
    next_report = perf() + 10
    loaded = 0
    entries = storage_cache_entries(storage)
    for folder in conn.root()['folders'].values():
        for doc in folder.values():
            doc._p_activate()
            loaded += 1
        conn.cacheGC()
        entries = storage_cache_entries(storage)
        if (entries if entries is not None else loaded) >= args.entries:
            break
        if perf() > next_report:
            next_report = perf() + 10
            print(f'  fill-cache: {loaded:,} documents loaded, '
                  f'{entries:,} cache entries ({perf() - started:.0f}s)',
                  file=sys.stderr, flush=True)
    transaction.abort()
    entries = storage_cache_entries(storage)
    load_seconds = perf() - started
    conn.close()
    closing = perf()
    db.close()      # writes the cache file
    close_seconds = perf() - closing
    directory = Path(args.cache_dir) if args.cache_dir else None
    files = {p.name: p.stat().st_size for p in directory.iterdir()} \
        if directory and directory.is_dir() else {}
    return {'documents_loaded': loaded, 'entries': entries,
            'load_seconds': load_seconds, 'close_seconds': close_seconds,
            'files': files, 'cache_log': captured.lines}


# -- writer and grow -----------------------------------------------------

def random_document(root, rng, tries=20):
    """A document drawn by number (some numbers were removed or undone:
    drawn again), or None."""
    folders = root['folders']
    top = numbered(root)
    for _ in range(tries):
        number = rng.randrange(top)
        folder = folders.get(folder_key(number))
        doc = folder.get(doc_key(number)) if folder is not None else None
        if doc is not None:
            return number, doc
    return None


def cmd_writer(args):
    from BTrees.OOBTree import OOBTree
    from persistent.mapping import PersistentMapping
    from pack_workload import commit, timed_commits
    db = open_db(args.config)
    conn = db.open()
    root = conn.root()
    rng = random.Random(f'writer:{os.getpid()}')
    text = Text(rng, SHAPES['scale'])
    key = f'writer-{os.getpid()}'
    import transaction
    transaction.begin()
    root['folders'][key] = OOBTree()
    commit(conn, 'scale benchmark: writer starts')
    counts = {'added': 0, 'edited': 0}

    def change():
        if rng.random() < 0.3:
            mine = root['folders'][key]
            mine[f'w{len(mine):08d}'] = PersistentMapping(
                title=text.title(), body=text.body(), version=0)
            counts['added'] += 1
        else:
            found = random_document(root, rng)
            if found:
                doc = found[1]
                doc['version'] += 1
                doc['body'] = text.body()
                counts['edited'] += 1
    out = timed_commits(conn, args, rng, change, 'scale benchmark: writer')
    conn.close()
    db.close()
    return dict(counts, **out)


def cmd_grow(args):
    import transaction
    from BTrees.OOBTree import OOBTree
    from persistent.mapping import PersistentMapping
    from pack_workload import commit
    db = open_db(args.config)
    conn = db.open()
    root = conn.root()
    rng = random.Random(f'grow:{args.seed}')
    shape = SHAPES['scale']
    text = Text(rng, shape)
    started = perf()
    transaction.begin()
    first = numbered(root)
    adds = int(root['count']() * args.fraction)
    counts = {'added': 0, 'edited': 0, 'removed': 0, 'commits': 0}
    next_report = perf() + 10
    while counts['added'] < adds:
        transaction.begin()
        number = numbered(root)
        batch = rng.randint(*shape.add_sizes)
        for n in range(number, number + batch):
            folder = root['folders'].get(folder_key(n))
            if folder is None:
                folder = root['folders'][folder_key(n)] = OOBTree()
            folder[doc_key(n)] = PersistentMapping(
                number=n, title=text.title(), body=text.body(), version=0,
                modified=time.time(), tags=('grow', 'scale'))
        root['bench']['next'] = number + batch
        root['count'].change(batch)
        counts['added'] += batch
        # A fifth as many edits, half as many removals, among the
        # documents that were there before.
        for _ in range(batch // 5):
            found = random_document(root, rng)
            if found and found[0] < first:
                found[1]['version'] += 1
                found[1]['body'] = text.body()
                counts['edited'] += 1
        for _ in range(batch // 2):
            found = random_document(root, rng)
            if found and found[0] < first:
                del root['folders'][folder_key(found[0])][doc_key(found[0])]
                root['count'].change(-1)
                counts['removed'] += 1
        commit(conn, f'scale benchmark: grow, {batch} added')
        counts['commits'] += 1
        if perf() > next_report:
            next_report = perf() + 10
            print(f'  grow: {counts["added"]:,} of {adds:,} added '
                  f'({perf() - started:.0f}s)', file=sys.stderr, flush=True)
    conn.close()
    db.close()
    return dict(counts, seconds=perf() - started)


# -- check ---------------------------------------------------------------

def cmd_check(args):
    import transaction
    db = open_db(args.config)
    conn = db.open()
    transaction.begin()
    root = conn.root()
    started = perf()
    in_folders = 0
    for key, folder in root['folders'].items():
        if not key.startswith('writer-'):
            in_folders += len(folder)
            conn.cacheGC()
    counted = root['count']()
    rng = random.Random(f'check:{args.seed}')
    documents = blobs = 0
    for _ in range(args.sample):
        found = random_document(root, rng)
        if found is None:
            continue
        doc = found[1]
        documents += len(doc['body']) > 0
        if 'attachment' in doc:
            with doc['attachment'].open('r') as f:
                blobs += len(f.read()) > 0
        conn.cacheGC()
    transaction.abort()
    conn.close()
    db.close()
    return {'in_folders': in_folders, 'count': counted,
            'documents_read': documents, 'blobs_read': blobs,
            'ok': in_folders == counted and documents > 0,
            'seconds': perf() - started}


# -- main ----------------------------------------------------------------

COMMANDS = {'first-request': cmd_first_request, 'fill-cache': cmd_fill_cache,
            'writer': cmd_writer, 'grow': cmd_grow, 'check': cmd_check}


def parse_args(argv):
    from pack_workload import subcommands, writer_arguments
    parser, command = subcommands(__doc__.splitlines()[0])
    command('first-request').add_argument('--seed', type=int, default=1)
    p = command('fill-cache')
    p.add_argument('--entries', type=int, required=True)
    p.add_argument('--cache-dir', help="the config's cache-local-dir, whose "
                   'files are listed at the end')
    writer_arguments(command('writer'))
    p = command('grow')
    p.add_argument('--fraction', type=float, default=0.1)
    p.add_argument('--seed', type=int, default=1)
    p = command('check')
    p.add_argument('--sample', type=int, default=10000)
    p.add_argument('--seed', type=int, default=1)
    return parser.parse_args(argv)


def main(argv=None):
    from pack_workload import run_script
    return run_script(parse_args, COMMANDS, argv)


if __name__ == '__main__':
    sys.exit(main())
