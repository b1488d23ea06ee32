"""The pack benchmark's workload, run as a subprocess by pack.py.

The same file runs under the project's interpreter (our relstorage) and
under the reference venv's (RelStorage 4.3).  The storage comes from a
ZConfig file (``%import relstorage`` and a ``<relstorage>`` section, the
same text for both sides); each command prints one JSON document on stdout
and its progress on stderr::

    python pack_workload.py build CONFIG --objects N --seed S
    python pack_workload.py grow CONFIG --fraction 0.1
    python pack_workload.py writer CONFIG --seconds T --out FILE
    python pack_workload.py count CONFIG
    python pack_workload.py pack CONFIG --days D

The data set: the root holds ``folders``, an ``OOBTree`` of folders (each
an ``OOBTree`` of up to 1000 documents), ``bench`` (a
``PersistentMapping`` with the seed and counters) and ``live`` (a
``BTrees.Length``: the documents reachable from the root).  A document
(``Document``) has a number, a title, a version, a body of 200-800 random
bytes, ``refs``, a list of 0-3 other documents, and ``backlinks``, the
numbers of the documents whose ``refs`` name it, which is how a removal
finds the references it must unlink.  Documents are numbered in the
order they are added, and each folder holds 1000 consecutive numbers (a
folder per period, as an archive would have them), so any process finds a
document from its number alone.

``build``
    On an empty storage: ``--objects`` documents added in commits of
    100-1000 new documents, each commit also updating existing documents
    (a fifth as many as it adds), so that history-preserving storages keep
    older revisions; then half of the documents, drawn at random, are
    removed from their folders, oldest first, and every reference to them
    from a kept document is unlinked, in commits of 100-1000 removals, so
    that they are unreachable.  Deterministic for a given ``--seed`` and
    ``--objects``: both sides build the same graph (not the same oids).
    Memory stays bounded whatever the size: ZODB's cache holds at most
    20,000 objects and is emptied every 100 commits.
``grow``
    ``--fraction`` of the built size again: as many adds, a fifth as many
    updates and half as many removals, mixed in commits of 100-1000 adds.
``writer``
    Small commits in a loop (30 % add one document, 70 % change one) for
    ``--seconds`` or until ``--stop`` exists, a pause of ``--pause``
    between commits.  After ``--warmup`` untimed commits it creates
    ``--ready`` (if given); from then on the time of each commit (from
    ``transaction.begin()`` to the end of ``commit()``, the lookups and
    any retry included: a commit that raises is retried up to 5 times,
    and the errors are counted by type) is recorded and written to
    ``--out`` as a JSON list of ``[start, seconds]``, the start in seconds
    since the epoch (to be set against a pack's log).
``count``
    Walks the graph from the root through the storage (``load`` of each
    reachable oid, references found with ``ZODB.serialize.referencesf``),
    so a pack that removed a reachable object fails here with
    ``POSKeyError``; counts the objects per class and checks that the
    documents found are the ``live`` count.
``pack``
    Packs with ``storage.pack(t, referencesf)``, ``t`` being ``--days``
    before now (a negative ``--days``: now).  pack.py uses it for a side
    that has no ``zodbpack`` script.

``--expect-under DIR`` makes the command refuse to run with a relstorage
from anywhere else (both packages are called ``relstorage``), and
``--patch-mariadb`` applies mariadb_patch.py first (RelStorage 4.3 on
MariaDB), as in workload.py.
"""
import argparse
import collections
import json
import random
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# -I leaves this file's directory off sys.path; the classes are pickled
# as pack_workload.Document, so every process must find this module.
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from persistent import Persistent  # noqa: E402

perf = time.perf_counter

DOCS_PER_FOLDER = 1000
#: Updates per added document in build and grow; removals per added
#: document in grow.
UPDATE_SHARE = 0.2
GROW_REMOVE_SHARE = 0.5
#: A new document's references: this share goes to one of the
#: ``RECENT`` documents added last, the others anywhere.
RECENT_SHARE = 0.7
RECENT = 2000
#: ZODB's object cache per connection, in objects: bounds the memory of a
#: build of any size.
CACHE_SIZE = 20000
#: Commits between two cacheMinimize().
MINIMIZE_EVERY = 100
#: A writer's commit that fails more often than this fails the writer.
MAX_RETRIES = 5
WORDS = ('annual', 'report', 'minutes', 'draft', 'budget', 'review',
         'policy', 'meeting', 'notes', 'plan', 'summary', 'invoice',
         'letter', 'proposal', 'contract', 'agenda')


class Document(Persistent):
    """One document of the data set."""

    def __init__(self, number, title, body):
        self.number = number
        self.title = title
        self.body = body
        self.version = 0
        self.refs = []
        self.backlinks = ()


def folder_key(index):
    return f'f{index:05d}'


def doc_key(number):
    return f'd{number:09d}'


def folder_of(number):
    return folder_key(number // DOCS_PER_FOLDER)


def progress(what, done, total, started):
    print(f'  {what}: {done:,} of {total:,} ({perf() - started:.1f}s)',
          file=sys.stderr, flush=True)


class Graph:
    """The data set as seen through one connection."""

    def __init__(self, conn):
        root = conn.root()
        self.conn = conn
        self.folders = root['folders']
        self.meta = root['bench']
        self.live = root['live']
        self.recent = collections.deque(maxlen=RECENT)
        self.counts = collections.Counter()

    def folder(self, number):
        """The folder of a new document, made when it is the first."""
        from BTrees.OOBTree import OOBTree
        key = folder_of(number)
        folder = self.folders.get(key)
        if folder is None:
            self.folders[key] = folder = OOBTree()
            self.counts['folders'] += 1
        return folder

    def lookup(self, number):
        folder = self.folders.get(folder_of(number))
        return None if folder is None else folder.get(doc_key(number))

    def content(self, rng, number, version):
        title = (f'{rng.choice(WORDS).title()} {rng.choice(WORDS)} '
                 f'{number} v{version}')
        return title, rng.randbytes(rng.randint(200, 800))

    def add(self, rng):
        """A new document referring to 0-3 documents (the recent ones most
        often); each of those records the new one in its backlinks."""
        number = self.meta['next']
        self.meta['next'] = number + 1
        title, body = self.content(rng, number, 0)
        doc = Document(number, title, body)
        targets = []
        for _ in range(rng.randint(0, 3)):
            if self.recent and rng.random() < RECENT_SHARE:
                targets.append(rng.choice(self.recent))
            elif number:
                targets.append(rng.randrange(number))
        refs = []
        for target in dict.fromkeys(targets):
            other = self.lookup(target)
            if other is None:       # removed since
                continue
            refs.append(other)
            other.backlinks = other.backlinks + (number,)
        doc.refs = refs
        self.folder(number)[doc_key(number)] = doc
        self.recent.append(number)
        self.live.change(1)
        self.counts['added'] += 1
        return doc

    def existing(self, rng, tries=20):
        """A random document still in its folder (None after ``tries``
        removed numbers in a row)."""
        for _ in range(tries):
            doc = self.lookup(rng.randrange(self.meta['next']))
            if doc is not None:
                return doc
        return None

    def update(self, rng, doc=None):
        doc = doc if doc is not None else self.existing(rng)
        if doc is None:
            return
        doc.version += 1
        doc.title, doc.body = self.content(rng, doc.number, doc.version)
        self.counts['updated'] += 1

    def remove(self, number):
        """Take a document out of its folder and unlink every reference
        to it from a document still in a folder: it becomes unreachable.
        False if it was removed already."""
        folder = self.folders.get(folder_of(number))
        doc = None if folder is None else folder.pop(doc_key(number), None)
        if doc is None:
            return False
        for referrer in doc.backlinks:
            other = self.lookup(referrer)
            if other is None:
                continue
            kept = [ref for ref in other.refs if ref is not doc]
            if len(kept) != len(other.refs):
                other.refs = kept
                self.counts['unlinked'] += 1
        self.live.change(-1)
        self.counts['removed'] += 1
        return True


# -- opening -------------------------------------------------------------

def open_storage(config):
    import ZODB.config
    # Imported before any timing (their first use would time the import).
    import BTrees.Length  # noqa: F401
    import BTrees.OOBTree  # noqa: F401,F811
    import persistent.mapping  # noqa: F401,F811
    with open(config) as f:
        return ZODB.config.storageFromFile(f)


def open_db(config):
    import ZODB
    return ZODB.DB(open_storage(config), cache_size=CACHE_SIZE,
                   large_record_size=1 << 30)


_commits = 0


def commit(conn, note):
    global _commits
    import transaction
    txn = transaction.get()
    txn.note(note)
    transaction.commit()
    # Keeps the object cache to CACHE_SIZE objects; and now and then
    # empties it, which also frees the ghosts its objects kept alive
    # (each bucket in the cache holds its documents as ghosts).
    _commits += 1
    if _commits % MINIMIZE_EVERY:
        conn.cacheGC()
    else:
        conn.cacheMinimize()


# -- build and grow ------------------------------------------------------

def cmd_build(args):
    import transaction
    from BTrees.Length import Length
    from BTrees.OOBTree import OOBTree
    from persistent.mapping import PersistentMapping

    n = args.objects
    rng = random.Random(f'build:{args.seed}:{n}')
    db = open_db(args.config)
    conn = db.open()
    started = perf()
    transaction.begin()
    root = conn.root()
    if 'folders' in root:
        raise SystemExit('build: the storage is not empty')
    root['folders'] = OOBTree()
    root['bench'] = PersistentMapping(seed=args.seed, built=n, next=0,
                                      runs=0)
    root['live'] = Length()
    commit(conn, 'pack benchmark: root')
    graph = Graph(conn)
    commits = 1

    next_report = perf() + 10
    while graph.meta['next'] < n:
        transaction.begin()
        adds = min(rng.randint(100, 1000), n - graph.meta['next'])
        existing = graph.meta['next']
        for _ in range(adds):
            graph.add(rng)
        if existing:
            for _ in range(int(adds * UPDATE_SHARE)):
                graph.update(rng)
        commit(conn, f'pack benchmark: add {adds}')
        commits += 1
        if perf() > next_report:
            next_report = perf() + 10
            progress('build: added', graph.meta['next'], n, started)
    added = perf()

    doomed = sorted(rng.sample(range(n), n // 2))
    at = 0
    while at < len(doomed):
        transaction.begin()
        batch = doomed[at:at + rng.randint(100, 1000)]
        at += len(batch)
        for number in batch:
            graph.remove(number)
        commit(conn, f'pack benchmark: remove {len(batch)}')
        commits += 1
        if perf() > next_report:
            next_report = perf() + 10
            progress('build: removed', at, len(doomed), started)
    end = perf()
    live = graph.live()
    conn.close()
    db.close()
    return dict(graph.counts, commits=commits, live=live,
                seconds=end - started, add_seconds=added - started,
                remove_seconds=end - added)


def cmd_grow(args):
    import transaction
    db = open_db(args.config)
    conn = db.open()
    started = perf()
    transaction.begin()
    graph = Graph(conn)
    meta = graph.meta
    run = meta['runs']
    meta['runs'] = run + 1
    rng = random.Random(f'grow:{meta["seed"]}:{run}')
    total = int(meta['built'] * args.fraction)
    commits = 0
    next_report = perf() + 10
    while graph.counts['added'] < total:
        if commits:
            transaction.begin()
        adds = min(rng.randint(100, 1000), total - graph.counts['added'])
        for _ in range(adds):
            graph.add(rng)
        for _ in range(int(adds * UPDATE_SHARE)):
            graph.update(rng)
        for _ in range(int(adds * GROW_REMOVE_SHARE)):
            doc = graph.existing(rng)
            if doc is not None:
                graph.remove(doc.number)
        commit(conn, f'pack benchmark: grow {adds}')
        commits += 1
        if perf() > next_report:
            next_report = perf() + 10
            progress('grow: added', graph.counts['added'], total, started)
    if not commits:
        commit(conn, 'pack benchmark: grow (nothing)')
    end = perf()
    live = graph.live()
    conn.close()
    db.close()
    return dict(graph.counts, commits=commits, live=live,
                seconds=end - started)


# -- writer --------------------------------------------------------------

def cmd_writer(args):
    import transaction
    db = open_db(args.config)
    conn = db.open()
    transaction.begin()
    graph = Graph(conn)
    run = graph.meta['runs']
    graph.meta['runs'] = run + 1
    commit(conn, 'pack benchmark: writer starts')
    rng = random.Random(f'writer:{graph.meta["seed"]}:{run}')

    def change():
        if rng.random() < 0.3:
            graph.add(rng)
        else:
            graph.update(rng)
    out = timed_commits(conn, args, rng, change, 'pack benchmark: writer')
    conn.close()
    db.close()
    return dict(graph.counts, **out)


def timed_commits(conn, args, rng, change, note):
    """The writer's loop (scale_workload.py's too): ``change()`` then a
    commit, until ``args.seconds`` have passed or ``args.stop`` exists,
    ``args.pause`` between commits; after ``args.warmup`` commits,
    ``args.ready`` is created and each commit timed.  A commit that fails
    is retried with the same draws of ``rng``.  Writes the timings to
    ``args.out``; returns the counts."""
    import transaction
    latencies = []
    # Each timed commit's time in three (written to ``args.out`` +
    # '.parts', read by pack_phases.py): transaction.begin() (the poll;
    # with the failed tries, where there were any), change() (its loads),
    # the commit (and the cache's trim after it).
    parts = []
    errors = collections.Counter()
    done = 0
    stop = Path(args.stop) if args.stop else None
    started = perf()
    deadline = started + args.seconds
    while perf() < deadline and not (stop and stop.exists()):
        # The same choices on a retry: a state of the generator per commit.
        state = rng.getstate()
        attempts = 0
        begin, begin_at = perf(), time.time()
        while True:
            try:
                transaction.begin()
                polled = perf()
                change()
                changed = perf()
                commit(conn, note)
                break
            except Exception as e:
                # Conflicts, and whatever a lock held by the pack causes
                # (RelStorage's commit lock timeout): counted by type,
                # retried a few times, the time spent part of the commit's.
                transaction.abort()
                errors[type(e).__name__] += 1
                attempts += 1
                if attempts > MAX_RETRIES:
                    raise
                rng.setstate(state)
        end = perf()
        done += 1
        if done == args.warmup and args.ready:
            Path(args.ready).touch()
        elif done > args.warmup:
            latencies.append((begin_at, end - begin))
            parts.append((begin_at, polled - begin, changed - polled,
                          end - changed))
        if args.pause:
            time.sleep(args.pause)
    if done <= args.warmup and args.ready:
        Path(args.ready).touch()
    seconds = perf() - started
    with open(args.out, 'w') as f:
        json.dump(latencies, f)
    with open(args.out + '.parts', 'w') as f:
        json.dump(parts, f)
    return dict(commits=done, timed=len(latencies), errors=dict(errors),
                seconds=seconds)


# -- count ---------------------------------------------------------------

def cmd_count(args):
    """Every object reachable from the root, loaded through the storage."""
    import ZODB
    from ZODB.serialize import referencesf
    from ZODB.utils import get_pickle_metadata, z64
    storage = open_storage(args.config)
    instance = storage.new_instance()
    instance.poll_invalidations()
    started = perf()
    seen = {z64}
    queue = collections.deque([z64])
    classes = collections.Counter()
    size = 0
    next_report = perf() + 10
    while queue:
        batch = [queue.popleft() for _ in range(min(500, len(queue)))]
        instance.prefetch(batch)
        for oid in batch:
            data, _tid = instance.load(oid)
            size += len(data)
            module, name = get_pickle_metadata(data)
            classes[f'{module}.{name}'] += 1
            for ref in referencesf(data):
                if ref not in seen:
                    seen.add(ref)
                    queue.append(ref)
        if perf() > next_report:
            next_report = perf() + 10
            progress('count: loaded', sum(classes.values()), len(seen),
                     started)
    seconds = perf() - started
    instance.release()
    db = ZODB.DB(storage)
    conn = db.open()
    live = conn.root()['live']()
    conn.close()
    db.close()
    documents = classes.get(f'{__name__}.Document', 0)
    return {'reachable': len(seen), 'bytes': size, 'classes': dict(classes),
            'documents': documents, 'live': live, 'ok': documents == live,
            'seconds': seconds}


# -- pack ----------------------------------------------------------------

def cmd_pack(args):
    from ZODB.serialize import referencesf
    storage = open_storage(args.config)
    now = time.time()
    t = now if args.days < 0 else now - args.days * 86400
    started = perf()
    storage.pack(t, referencesf)
    seconds = perf() - started
    storage.close()
    return {'seconds': seconds, 'pack_time': t}


# -- main ----------------------------------------------------------------

COMMANDS = {'build': cmd_build, 'grow': cmd_grow, 'writer': cmd_writer,
            'count': cmd_count, 'pack': cmd_pack}


def subcommands(description):
    """A parser of subcommands, and ``command(name)``, which adds one with
    the options every workload command on a storage takes (its config
    file, ``--expect-under``, ``--patch-mariadb``)."""
    parser = argparse.ArgumentParser(description=description)
    sub = parser.add_subparsers(dest='command', required=True)

    def command(name):
        p = sub.add_parser(name)
        p.add_argument('config', help='a ZConfig file: %%import relstorage '
                       'and one <relstorage> section')
        p.add_argument('--expect-under',
                       help='refuse to run with a relstorage from anywhere '
                       'else')
        p.add_argument('--patch-mariadb', action='store_true',
                       help='apply mariadb_patch.py first (RelStorage 4.3 '
                       'on MariaDB only)')
        return p
    return parser, command


def run_script(parse_args, commands, argv):
    """A workload script's main: the command's JSON document on
    stdout."""
    from workload import execute
    result = execute(parse_args(argv), commands)
    print(json.dumps(result), flush=True)
    return 0


def parse_args(argv):
    parser, command = subcommands(__doc__.splitlines()[0])
    p = command('build')
    p.add_argument('--objects', type=int, required=True,
                   help='documents to add (the folders and BTree nodes '
                   'come on top)')
    p.add_argument('--seed', type=int, default=1)
    p = command('grow')
    p.add_argument('--fraction', type=float, default=0.1)
    writer_arguments(command('writer'))
    command('count')
    p = command('pack')
    p.add_argument('--days', type=float, default=-1,
                   help='pack to this many days ago; negative: now')
    return parser.parse_args(argv)


def writer_arguments(p):
    """The options of a writer command (timed_commits)."""
    p.add_argument('--seconds', type=float, required=True)
    p.add_argument('--out', required=True,
                   help='where the JSON list of commit latencies goes')
    p.add_argument('--stop', help='stop as soon as this file exists')
    p.add_argument('--ready', help='created once the warm-up commits are '
                   'done')
    p.add_argument('--warmup', type=int, default=10,
                   help='untimed commits first (default 10)')
    p.add_argument('--pause', type=float, default=0.02,
                   help='seconds between commits (default 0.02)')


def main(argv=None):
    return run_script(parse_args, COMMANDS, argv)


if __name__ == '__main__':
    # Run as a script, this file is __main__; the classes must be pickled
    # under the module's own name, which every process can import.
    import pack_workload
    sys.exit(pack_workload.main())
