"""The conversion benchmark's source database and its checks, run as
subprocesses by convert.py.

Each command prints one JSON document on stdout and its progress on
stderr::

    python convert_workload.py generate --dir DIR --objects N --seed S
    python convert_workload.py check CONFIG --source-dir DIR --mode hp|hf

``generate`` (the project's interpreter, ZODB only: no relstorage is
used) writes ``DIR/Data.fs`` (with its index), ``DIR/blobs`` (the
FileStorage's blob directory) and ``DIR/manifest.json``: what is in the
file, counted by iterating it once it is closed, and a sample of its
records for ``check``.  The data set, made in transactions that look like
a content site's:

* the root holds ``folders`` (an ``OOBTree`` of folders, each an
  ``OOBTree`` of up to 500 documents), ``count`` (a ``BTrees.Length`` of
  the documents in folders) and, written by the last transaction,
  ``bench`` (a ``PersistentMapping`` describing the run);
* a document is a ``PersistentMapping`` (a class every process has, so
  that nothing in a conversion depends on this module): a number, a title
  of 3-8 words, a body of 100-2000 bytes of text, a version, a
  modification time, two tags, and on about one document in 150 an
  ``attachment``, a ``ZODB.blob.Blob`` of 1 KiB to 200 KiB of random
  bytes;
* transactions, drawn at random (``--seed``): add 10-20 new documents to
  the newest folder (40 %), edit 15-30 existing ones (52 %: new body and
  version, the recently added ones most often, about two edits per
  document in all; one edit in ten of a document with an attachment
  writes a new revision of the blob), remove 1-10 documents from their
  folders (8 %: they stay in the file, unreachable); after an add or an
  edit, one time in 70, the transaction is undone at once (``DB.undo``:
  an undone add leaves deletion records, an undone edit records that
  point back at older data, blobs included; ``--no-undo-adds``: edits
  only, so that the file has no deletion record).  Each transaction has
  a user, a description and an extension, as Zope gives them.

``--objects`` counts the documents added; the file holds more objects
(folders, BTree buckets, blobs), and several revisions of most.
``--oids N`` adds documents until the file holds N objects instead.

``--shape scale`` (scale.py's source of ten million objects) draws
other shares: adds of 20-60 documents (70 % of transactions), edits
(26 %), removals (4 %), one undo in 500; bodies of 100-1000 bytes, an
attachment of 1-32 KiB on one document in 100.  Fewer revisions per
object, so that the file, and each database made from it, fits the
disk.

``check`` (in the interpreter of the side that converted) opens the
destination of CONFIG (a ZConfig file with one storage section) and the
source read-only, and compares: the last transaction id, a sample of 300
records (``loadSerial``; history-free: the current state and tid of 300
objects), and up to 100 blob records (the file's size and SHA-256;
history-free: only blobs still current).  It writes nothing.

``--expect-under DIR`` makes a command refuse to run with a relstorage
from anywhere else, and ``--patch-mariadb`` applies mariadb_patch.py first
(RelStorage 4.3 on MariaDB), as in workload.py.
"""
import argparse
import hashlib
import json
import os
import random
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# -I leaves this file's directory off sys.path (workload, mariadb_patch).
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

perf = time.perf_counter

#: Bumped whenever the data set changes: a cached source made by another
#: version is made again.
GENERATOR_VERSION = 2

DOCS_PER_FOLDER = 500


class Shape:
    """What the transactions look like (``--shape``)."""

    def __init__(self, add_share, edit_share, undo_every, blob_every,
                 blob_sizes, body_sizes, add_sizes):
        #: Transaction kinds: cumulative shares of add and edit (the rest
        #: removes).
        self.add_share, self.edit_share = add_share, edit_share
        #: An add or edit transaction is undone right after it, one time
        #: in this.
        self.undo_every = undo_every
        #: One document in this many gets an attachment (a blob).
        self.blob_every = blob_every
        self.blob_sizes = blob_sizes
        self.body_sizes = body_sizes
        #: How many documents an add transaction adds.
        self.add_sizes = add_sizes


SHAPES = {
    # convert.py's: a site edited for years, several revisions of most
    # documents.
    'default': Shape(0.40, 0.92, 70, 150, (1024, 200 * 1024), (100, 2000),
                     (10, 20)),
    # scale.py's: a large site, mostly written once (imports, documents
    # added in batches), edited less, small attachments; fewer records
    # per object so that ten million objects fit a day's work and the
    # disk.
    'scale': Shape(0.70, 0.96, 500, 100, (1024, 32 * 1024), (100, 1000),
                   (20, 60)),
}
#: Edits: this share goes to the most recently added documents.
RECENT_SHARE = 0.7
RECENT = 2000
#: One edit of a document with an attachment in this many rewrites it.
BLOB_EDIT_EVERY = 10
CACHE_SIZE = 20000
MINIMIZE_EVERY = 200
#: The samples ``check`` compares.
SAMPLE_RECORDS = 300
SAMPLE_BLOBS = 100
WORDS = ('annual', 'report', 'minutes', 'draft', 'budget', 'review',
         'policy', 'meeting', 'notes', 'plan', 'summary', 'invoice',
         'letter', 'proposal', 'contract', 'agenda', 'press', 'release',
         'staff', 'handbook', 'project', 'status', 'quarterly', 'travel',
         'request', 'form', 'guide', 'training', 'schedule', 'event',
         'newsletter', 'archive', 'the', 'of', 'and', 'for', 'with', 'on')
USERS = ('admin', 'editor', 'jsmith', 'mlopez', 'akim', 'webmaster')


def progress(what, done, total, started):
    print(f'  {what}: {done:,} of {total:,} ({perf() - started:.1f}s)',
          file=sys.stderr, flush=True)


def folder_key(number):
    return f'f{number // DOCS_PER_FOLDER:05d}'


def doc_key(number):
    return f'd{number:08d}'


def number_of(key):
    return int(key[1:])


class Text:
    """Random prose, cut from one pool made once (cheap per document)."""

    def __init__(self, rng, shape, size=1 << 21):
        self.shape = shape
        words = rng.choices(WORDS, k=size // 5)
        self.pool = ' '.join(words)[:size]
        self.rng = rng

    def body(self):
        size = self.rng.randint(*self.shape.body_sizes)
        start = self.rng.randrange(len(self.pool) - size)
        return self.pool[start:start + size]

    def title(self):
        return ' '.join(self.rng.choices(WORDS, k=self.rng.randint(3, 8))
                        ).capitalize()


# -- generate ------------------------------------------------------------

class Site:
    """The data set as seen through one connection, and what the
    generator must remember of it (document keys only: every object is
    looked up again after an undo)."""

    def __init__(self, conn, rng, shape):
        self.conn = conn
        self.rng = rng
        self.shape = shape
        self.text = Text(rng, shape)
        self.next = 0
        #: Keys of the documents in folders, oldest first.
        self.live = []
        #: Keys of the documents in folders that have an attachment.
        self.with_blob = set()
        self.counts = dict(added=0, edited=0, removed=0, undone=0,
                           blobs_written=0, blob_bytes_written=0,
                           transactions=0)

    @property
    def root(self):
        return self.conn.root()

    def folder(self, number, create=False):
        from BTrees.OOBTree import OOBTree
        folders = self.root['folders']
        key = folder_key(number)
        folder = folders.get(key)
        if folder is None and create:
            folders[key] = folder = OOBTree()
        return folder

    def document(self, key):
        return self.folder(number_of(key))[key]

    def write_blob(self, blob):
        size = self.rng.randint(*self.shape.blob_sizes)
        with blob.open('w') as f:
            f.write(self.rng.randbytes(size))
        self.counts['blobs_written'] += 1
        self.counts['blob_bytes_written'] += size

    def add(self):
        """A few new documents (10-20 by default)."""
        from persistent.mapping import PersistentMapping
        from ZODB.blob import Blob
        keys = []
        for _ in range(self.rng.randint(*self.shape.add_sizes)):
            number = self.next
            self.next += 1
            key = doc_key(number)
            doc = PersistentMapping(
                number=number, title=self.text.title(),
                body=self.text.body(), version=0, modified=time.time(),
                tags=(self.rng.choice(WORDS), self.rng.choice(WORDS)))
            if self.rng.randrange(self.shape.blob_every) == 0:
                doc['attachment'] = blob = Blob()
                # Added first, so that its file is made in the storage's
                # temporary directory.
                self.conn.add(blob)
                self.write_blob(blob)
                self.with_blob.add(key)
            self.folder(number, create=True)[key] = doc
            keys.append(key)
        self.root['count'].change(len(keys))
        self.live.extend(keys)
        self.counts['added'] += len(keys)
        return f'/site/{folder_key(self.next - 1)}: added {len(keys)}'

    def edit(self):
        """15-30 documents changed, the recent ones most often."""
        wanted = self.rng.randint(15, 30)
        chosen = set()
        recent = self.live[-RECENT:]
        for _ in range(wanted):
            pool = (recent if self.rng.random() < RECENT_SHARE
                    else self.live)
            chosen.add(self.rng.choice(pool))
        for key in sorted(chosen):
            doc = self.document(key)
            doc['version'] += 1
            doc['body'] = self.text.body()
            doc['modified'] = time.time()
            if self.rng.random() < 0.3:
                doc['title'] = self.text.title()
            if (key in self.with_blob
                    and self.rng.randrange(BLOB_EDIT_EVERY) == 0):
                self.write_blob(doc['attachment'])
        self.counts['edited'] += len(chosen)
        return f'/site: edited {len(chosen)}'

    def remove(self):
        """1-10 documents out of their folders (they stay in the file)."""
        count = min(self.rng.randint(1, 10), len(self.live) - 1)
        for _ in range(count):
            # The last key takes the place of the one removed: O(1), where
            # a pop from the middle moved the whole tail (minutes at ten
            # million documents).
            at = self.rng.randrange(len(self.live))
            key = self.live[at]
            self.live[at] = self.live[-1]
            self.live.pop()
            del self.folder(number_of(key))[key]
            self.with_blob.discard(key)
        self.root['count'].change(-count)
        self.counts['removed'] += count
        return f'/site: removed {count}'

    def commit(self, description):
        import transaction
        txn = transaction.get()
        txn.user = f'/acl_users {self.rng.choice(USERS)}'
        txn.description = description
        txn.setExtendedInfo('request', self.rng.choice(('POST', 'PUT')))
        txn.setExtendedInfo('ip', f'10.0.{self.rng.randrange(256)}.'
                                  f'{self.rng.randrange(256)}')
        transaction.commit()
        self.counts['transactions'] += 1
        if self.counts['transactions'] % MINIMIZE_EVERY:
            self.conn.cacheGC()
        else:
            self.conn.cacheMinimize()

    def undo_last(self, db, added):
        """Undo the transaction just committed (``added``: the keys it
        added, which leave the folders again)."""
        import transaction
        last = db.undoLog(0, 1)[0]
        db.undo(last['id'])
        self.commit(f'Undo {last["description"]}')
        if added:
            del self.live[-len(added):]
            self.with_blob.difference_update(added)
            self.counts['added'] -= len(added)
        self.counts['undone'] += 1
        # The undone objects are invalidated at the next transaction.
        transaction.begin()


def cmd_generate(args):
    import transaction
    import ZODB
    from BTrees.Length import Length
    from BTrees.OOBTree import OOBTree
    from persistent.mapping import PersistentMapping
    from ZODB.FileStorage import FileStorage
    from ZODB.utils import u64

    out = Path(args.dir)
    out.mkdir(parents=True)
    shape = SHAPES[args.shape]
    if args.oids:
        # As many objects as asked for, however many documents that takes.
        target, unit = args.oids, 'objects'
        rng = random.Random(f'{args.shape}:{args.seed}:oids:{args.oids}')
    else:
        target, unit = args.objects, 'documents'
        rng = random.Random(
            f'convert:{args.seed}:{args.objects}' if args.shape == 'default'
            else f'{args.shape}:{args.seed}:{args.objects}')
    storage = FileStorage(str(out / 'Data.fs'), blob_dir=str(out / 'blobs'))
    db = ZODB.DB(storage, cache_size=CACHE_SIZE, large_record_size=1 << 30)
    conn = db.open()
    site = Site(conn, rng, shape)

    def done():
        # storage._oid: the last oid given out (BaseStorage.new_oid).
        return u64(storage._oid) + 1 if args.oids else created
    started = perf()
    transaction.begin()
    root = conn.root()
    root['folders'] = OOBTree()
    root['count'] = Length()
    site.commit('Created the site')
    next_report = perf() + 10
    created = 0
    while done() < target:
        transaction.begin()
        draw = rng.random()
        before = site.next
        if draw < shape.add_share or len(site.live) < 100:
            description = site.add()
            created += site.next - before
            added = [doc_key(n) for n in range(before, site.next)]
        elif draw < shape.edit_share:
            description = site.edit()
            added = []
        else:
            description = site.remove()
            added = None
        site.commit(description)
        if (added is not None and rng.randrange(shape.undo_every) == 0
                and (args.undo_adds or not added)):
            site.undo_last(db, added)
        if perf() > next_report:
            next_report = perf() + 10
            progress(f'generate: {unit}', done(), target, started)
    transaction.begin()
    root['bench'] = PersistentMapping(
        seed=args.seed, objects=created, version=GENERATOR_VERSION,
        documents=len(site.live), shape=args.shape)
    site.commit('Benchmark source complete')
    in_folders = sum(len(folder) for folder in root['folders'].values())
    if not root['count']() == in_folders == len(site.live):
        raise AssertionError(f'the site counts {root["count"]()} '
                             f'documents, its folders hold {in_folders}, '
                             f'the generator has {len(site.live)}')
    conn.close()
    db.close()      # writes Data.fs.index
    seconds = perf() - started
    progress(f'generate: {unit}', done(), target, started)
    manifest = {'version': GENERATOR_VERSION, 'objects': created,
                'oids_wanted': args.oids, 'shape': args.shape,
                'seed': args.seed, 'undo_adds': args.undo_adds,
                'generated_seconds': seconds,
                'documents_in_folders': len(site.live),
                'generator': site.counts}
    manifest.update(describe(out, rng))
    (out / 'manifest.json').write_text(json.dumps(manifest, indent=1) + '\n')
    return manifest


def file_digest(path):
    digest = hashlib.sha256()
    with open(path, 'rb') as f:
        for chunk in iter(lambda: f.read(1 << 20), b''):
            digest.update(chunk)
    return os.path.getsize(path), digest.hexdigest()


def describe(out, rng):
    """What the file holds, from iterating it read-only, and the samples
    of ``check``."""
    from ZODB.blob import is_blob_record
    from ZODB.FileStorage import FileStorage
    from ZODB.utils import u64
    storage = FileStorage(str(out / 'Data.fs'), blob_dir=str(out / 'blobs'),
                          read_only=True)
    started = perf()
    transactions = records = deletions = backpointers = 0
    state_bytes = 0
    blob_records = []
    #: oid -> (tid, holds data) of the object's last record
    current = {}
    sample = []
    try:
        for txn in storage.iterator():
            transactions += 1
            for record in txn:
                records += 1
                oid, tid, data = record.oid, record.tid, record.data
                current[oid] = (tid, data is not None)
                if data is None:
                    deletions += 1
                else:
                    state_bytes += len(data)
                if getattr(record, 'data_txn', None):
                    backpointers += 1
                if data is not None and is_blob_record(data):
                    size, digest = file_digest(storage.loadBlob(oid, tid))
                    blob_records.append([oid.hex(), tid.hex(), size,
                                         digest])
                # Reservoir sampling: each record equally likely.
                if len(sample) < SAMPLE_RECORDS:
                    sample.append((oid.hex(), tid.hex()))
                else:
                    at = rng.randrange(records)
                    if at < SAMPLE_RECORDS:
                        sample[at] = (oid.hex(), tid.hex())
        last = storage.lastTransaction()
    finally:
        storage.close()
    live = sorted(oid for oid, (_, has) in current.items() if has)
    current_blobs = [b for b in blob_records
                     if current[bytes.fromhex(b[0])][0].hex() == b[1]]
    return {
        'transactions': transactions, 'records': records,
        'deletion_records': deletions, 'backpointer_records': backpointers,
        'state_bytes': state_bytes,
        'oids': len(current), 'current_objects': len(live),
        'blob_records': len(blob_records),
        'blob_bytes': sum(b[2] for b in blob_records),
        'current_blobs': len(current_blobs),
        'current_blob_bytes': sum(b[2] for b in current_blobs),
        'last_tid': last.hex(), 'last_tid_int': u64(last),
        'file_bytes': os.path.getsize(out / 'Data.fs'),
        'describe_seconds': perf() - started,
        'samples': {
            'records': sample,
            'current': [oid.hex() for oid in rng.sample(
                live, min(SAMPLE_RECORDS, len(live)))],
            'blobs': rng.sample(blob_records,
                                min(SAMPLE_BLOBS, len(blob_records))),
            'current_blobs': rng.sample(
                current_blobs, min(SAMPLE_BLOBS, len(current_blobs))),
        },
    }


# -- check ---------------------------------------------------------------

def cmd_check(args):
    import ZODB.config
    from ZODB.FileStorage import FileStorage
    from ZODB.POSException import POSKeyError
    from ZODB.utils import load_current

    source_dir = Path(args.source_dir)
    manifest = json.loads((source_dir / 'manifest.json').read_text())
    samples = manifest['samples']
    history = args.mode == 'hp'
    source = FileStorage(str(source_dir / 'Data.fs'),
                         blob_dir=str(source_dir / 'blobs'), read_only=True)
    with open(args.config) as f:
        destination = ZODB.config.storageFromFile(f)
    started = perf()
    problems = []

    def differ(what):
        if len(problems) < 20:
            problems.append(what)

    try:
        last = destination.lastTransaction()
        if last != source.lastTransaction():
            differ(f'last transaction {last.hex()}, the source\'s '
                   f'{source.lastTransaction().hex()}')
        compared = 0
        if history:
            for oid_hex, tid_hex in samples['records']:
                oid, tid = bytes.fromhex(oid_hex), bytes.fromhex(tid_hex)
                try:
                    want = source.loadSerial(oid, tid)
                except POSKeyError:
                    want = None     # a deletion record: no state
                try:
                    got = destination.loadSerial(oid, tid)
                except POSKeyError:
                    got = None
                except Exception as e:
                    got = f'{type(e).__name__}: {e}'
                # A deletion may read back as an error or as no state.
                if (want or None) != (got or None):
                    differ(f'record {oid_hex}@{tid_hex} differs: '
                           f'{"no state" if not got else repr(got[:40])}')
                compared += 1
        else:
            for oid_hex in samples['current']:
                oid = bytes.fromhex(oid_hex)
                want = load_current(source, oid)
                try:
                    got = load_current(destination, oid)
                except Exception as e:
                    got = f'{type(e).__name__}: {e}'
                if want != got:
                    differ(f'current state of {oid_hex} differs')
                compared += 1
        blobs = 0
        for oid_hex, tid_hex, size, digest in samples[
                'blobs' if history else 'current_blobs']:
            oid, tid = bytes.fromhex(oid_hex), bytes.fromhex(tid_hex)
            try:
                got = file_digest(destination.loadBlob(oid, tid))
            except Exception as e:
                got = f'{type(e).__name__}: {e}'
            if got != (size, digest):
                differ(f'blob {oid_hex}@{tid_hex} differs: {got!r}')
            blobs += 1
    finally:
        destination.close()
        source.close()
    return {'ok': not problems, 'problems': problems,
            'last_tid': last.hex(), 'records_compared': compared,
            'blobs_compared': blobs, 'seconds': perf() - started}


# -- main ----------------------------------------------------------------

COMMANDS = {'generate': cmd_generate, 'check': cmd_check}


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest='command', required=True)

    def command(name):
        p = sub.add_parser(name)
        p.add_argument('--expect-under',
                       help='refuse to run with a relstorage from anywhere '
                       'else')
        p.add_argument('--patch-mariadb', action='store_true',
                       help='apply mariadb_patch.py first (RelStorage 4.3 '
                       'on MariaDB only)')
        return p

    p = command('generate')
    p.add_argument('--dir', required=True,
                   help='a directory that does not exist yet')
    size = p.add_mutually_exclusive_group(required=True)
    size.add_argument('--objects', type=int, help='documents to add')
    size.add_argument('--oids', type=int,
                      help='objects to make (documents and the rest): '
                      'documents are added until the file holds this many')
    p.add_argument('--shape', choices=sorted(SHAPES), default='default',
                   help='what the transactions look like (see SHAPES)')
    p.add_argument('--seed', type=int, default=1)
    p.add_argument('--no-undo-adds', dest='undo_adds', action='store_false',
                   help='undo edits only: no undone creation, so no '
                   'deletion record (RelStorage 4.3 cannot copy those '
                   'into a history-free database)')
    p = command('check')
    p.add_argument('config', help='a ZConfig file: the destination (any '
                   '%%import and one storage section)')
    p.add_argument('--source-dir', required=True,
                   help='what generate wrote (Data.fs, blobs, '
                   'manifest.json)')
    p.add_argument('--mode', choices=('hp', 'hf'), required=True,
                   help='whether the destination keeps history')
    return parser.parse_args(argv)


def main(argv=None):
    from pack_workload import run_script
    return run_script(parse_args, COMMANDS, argv)


if __name__ == '__main__':
    sys.exit(main())
