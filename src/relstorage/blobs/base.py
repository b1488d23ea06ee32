"""What both blob modes share: the blob directory, a commit's pending
blobs, file names and the errors of missing blobs."""
import logging
import os
import shutil
import uuid

from ZODB.blob import LAYOUT_MARKER
from ZODB.blob import FilesystemHelper
from ZODB.blob import auto_layout_select
from ZODB.blob import remove_committed
from ZODB.blob import rename_or_copy_blob
from ZODB.POSException import POSKeyError
from ZODB.POSException import Unsupported
from ZODB.utils import p64

log = logging.getLogger(__name__)

#: Objects whose blob directories one pack sweep looks up per query.
SWEEP_BATCH = 500
#: Attempts at creating a directory that a trim or a sweep keeps removing.
MAKE_DIR_ATTEMPTS = 10


def no_blob_dir(what, oid=None):
    """The error of a blob operation on a storage without ``blob-dir``."""
    about = '' if oid is None else f' (oid 0x{oid:x})'
    return Unsupported(
        f'{what}{about}: this storage has no blob-dir; set blob-dir in the '
        f'<relstorage> section to store and load blobs')


def missing_blob(oid, tid, where):
    """The POSKeyError for a revision whose blob cannot be found."""
    return POSKeyError(
        f'no blob for oid 0x{oid:x} at tid 0x{tid:x} ({where})',
        p64(oid), p64(tid))


def unique_name(directory, prefix):
    """A new file name in ``directory`` that nothing uses.  The file is not
    created: renaming a blob file over an existing one (even an empty one
    from mkstemp) makes ext4 write the blob out at the next journal commit
    (its auto_da_alloc), and the next fsync anywhere, such as SQLite's
    COMMIT, waits for it (measured: 30-60 ms per 100 MB blob)."""
    return os.path.join(directory, f'{prefix}{uuid.uuid4().hex}.tmp')


def make_dir(path):
    """Create the directory ``path`` and its parents if they are missing;
    a trim removing an emptied parent meanwhile only means trying again.
    (ZODB's FilesystemHelper.getPathForOID asserts instead.)"""
    for _ in range(MAKE_DIR_ATTEMPTS):
        try:
            os.makedirs(path, 0o700, exist_ok=True)
            return path
        except FileNotFoundError:
            continue    # a parent was removed between makedirs' steps
    os.makedirs(path, 0o700, exist_ok=True)     # raises what is wrong
    return path


def prepare_directory(directory):
    """Create the blob directory ``directory``, its layout marker and its
    ``tmp`` directory where they are missing; returns the layout's name.

    ZODB's ``FilesystemHelper.create`` checks for each before creating it,
    so that two processes opening a new directory at once (two instances
    of one site starting, or zodbconvert while a script opens the
    destination) fail with "File exists", or one reads the marker the
    other is half-way through writing and refuses the layout.  Here each
    step holds whoever comes second: the directories are created with
    ``exist_ok``, and the marker is written whole under a hidden name
    (ZODB's layout heuristic ignores hidden files) and linked to its name,
    which fails if another process linked its own first, whose layout is
    then taken.  The marker precedes ``tmp``, so that a directory holding
    only ``tmp`` means a layout already chosen, never an old "lawn"."""
    os.makedirs(directory, mode=0o700, exist_ok=True)
    marker = os.path.join(directory, LAYOUT_MARKER)
    if not os.path.exists(marker):
        layout = auto_layout_select(directory)
        draft = os.path.join(directory, f'.layout-{uuid.uuid4().hex}')
        with open(draft, 'w') as stream:
            stream.write(layout)
        try:
            os.link(draft, marker)
        except FileExistsError:
            pass                    # another process chose first
        finally:
            os.remove(draft)
    with open(marker) as stream:
        layout = stream.read().strip()
    os.makedirs(os.path.join(directory, 'tmp'), mode=0o700, exist_ok=True)
    return layout


def remove_quietly(path):
    """Remove a file that may already be gone."""
    try:
        remove_committed(path)
    except FileNotFoundError:
        pass
    except OSError:
        log.warning('cannot remove blob file %s', path, exc_info=True)


class BlobDirectory:
    """What both modes share: ``blob-dir`` in ZODB's layout
    (``fshelper``, a ZODB FilesystemHelper), its ``tmp`` directory for
    uncommitted blobs, and the sweep that pack runs over it."""

    #: True where the database holds the blobs (blob-dir is a cache).
    in_database = False

    def __init__(self, options, adapter):
        self.adapter = adapter
        self.keep_history = options.keep_history
        # ZODB's automatic choice keeps the layout of an existing directory
        # (a FileStorage's, for instance) and gives a new one ZODB's
        # default.  Private to its owner (ZODB's helper would create it
        # with the umask's mode, then warn that it is not private).
        layout = prepare_directory(options.blob_dir)
        self.fshelper = FilesystemHelper(options.blob_dir, layout)
        self.fshelper.create()      # finds everything in place
        self.directory = self.fshelper.base_dir.rstrip(os.sep)

    def temporary_directory(self):
        return self.fshelper.temp_dir

    def path(self, oid, tid):
        """Where the blob of revision ``(oid, tid)`` (ints) is kept."""
        return self.fshelper.getBlobFilename(oid, tid)

    def make_oid_dir(self, oid):
        """Create the directory of ``oid``'s blob files; returns it.  A
        parent that a trim (of the blob cache) or a pack sweep removes at
        the same time is created again."""
        return make_dir(self.fshelper.getPathForOID(oid))

    def close(self):
        """Stop what runs in the background (nothing by default)."""

    def clear(self):
        """Remove every object's blob files (zap_all): the directories of
        ZODB's layout, found by ``listOIDs``; the layout marker and the
        tmp directory stay.  Returns how many object directories were
        removed."""
        removed = 0
        for _, oid_dir in list(self.fshelper.listOIDs()):
            shutil.rmtree(oid_dir, ignore_errors=True)
            removed += 1
        return removed

    def sweep(self, cursor, pack_tid):
        """After a pack: remove every blob file of a revision at or before
        ``pack_tid`` that no longer exists in the database, and the
        directories of objects left without files.  Revisions after the
        pack tid are left alone, whether committed or being committed.
        Returns how many files were removed."""
        removed = 0
        batch = []
        for oid, oid_dir in self.fshelper.listOIDs():
            batch.append((oid, oid_dir))
            if len(batch) >= SWEEP_BATCH:
                removed += self._sweep_batch(cursor, pack_tid, batch)
                batch = []
        if batch:
            removed += self._sweep_batch(cursor, pack_tid, batch)
        return removed

    def _sweep_batch(self, cursor, pack_tid, batch):
        from ZODB.utils import u64
        oids = [u64(oid) for oid, _ in batch]
        existing = self.adapter.blobs.revisions(cursor, oids)
        removed = 0
        for oid, oid_dir in zip(oids, (d for _, d in batch)):
            try:
                names = os.listdir(oid_dir)
            except FileNotFoundError:
                continue
            for name in names:
                path = os.path.join(oid_dir, name)
                _, serial = self.fshelper.splitBlobFilename(path)
                if serial is None:
                    continue
                tid = u64(serial)
                if tid <= pack_tid and (oid, tid) not in existing:
                    remove_quietly(path)
                    removed += 1
            try:
                if not os.listdir(oid_dir):
                    os.rmdir(oid_dir)
            except OSError:
                pass    # a commit put a file there meanwhile
        return removed


class PendingBlobs:
    """The blobs of one commit in progress.  Subclasses say how they reach
    their place; this keeps the files the commit owns (ZODB hands the
    storage the file at storeBlob) and the undone revisions whose blobs the
    commit copies."""

    def __init__(self, blobs):
        self.blobs = blobs
        self.files = {}      # oid -> path of the blob file the commit owns
        self.copies = {}     # oid -> tid of the revision whose blob it copies
        #: History-free, database mode: objects whose current blob the
        #: commit replaces or removes.
        self.replaced = set()

    def __bool__(self):
        return bool(self.files or self.copies or self.replaced)

    def store(self, oid, path):
        """The commit stores the blob file at ``path`` for ``oid``.  The
        file is the storage's from now on: it moves at once into blob-dir's
        tmp directory (the caller may remove its own directory before the
        commit ends, as ZODB's savepoints do)."""
        self.discard(oid)
        staged = unique_name(self.blobs.temporary_directory(),
                             f'commit-0x{oid:x}-')
        try:
            # A rename, or ZODB's logged copy across file systems.
            rename_or_copy_blob(path, staged, chmod=False)
        except BaseException:
            remove_quietly(staged)
            raise
        self.files[oid] = staged
        self.replaced.add(oid)

    def copy(self, oid, tid):
        """The commit gives ``oid`` the blob of its revision ``tid``
        (undo)."""
        self.discard(oid)
        self.copies[oid] = tid
        self.replaced.add(oid)

    def discard(self, oid):
        """A later record of ``oid`` in this commit has no blob."""
        path = self.files.pop(oid, None)
        if path is not None:
            remove_quietly(path)
        self.copies.pop(oid, None)

    def remove(self, oid):
        """The commit removes ``oid`` (deleteObject), or writes a record
        that may replace a revision with a blob (restore)."""
        self.discard(oid)
        self.replaced.add(oid)

    # The phases of the commit, in order; each mode fills in its own.

    def upload(self, cursor):
        """At vote, inside the commit's database transaction (before the
        object locks where the database has row locks, after its one lock
        where it has a database-wide one)."""

    def locked(self, cursor):
        """At vote, with the objects locked and conflicts checked."""

    def publish(self, cursor, tid):
        """Under the commit lock, once ``tid`` is chosen, just before the
        database transaction commits."""

    def committed(self, tid):
        """After the commit; must not raise (the data is committed)."""

    def abort(self):
        """The commit was aborted: give back what it holds."""
        for path in self.files.values():
            remove_quietly(path)
        self.files.clear()
