"""Blobs in a directory every client shares (``shared-blob-dir true``).

The directory has ZODB's layout (``<oid path>/<tid>.blob``), so a
FileStorage's blob directory serves as it is, and the database knows
nothing of blobs.  A commit's blob files move into place under the commit
lock, once the tid is chosen and just before the database commits: a
client killed in between leaves a file no revision refers to (removed by
the next pack), never a revision without its file.  If the COMMIT itself
fails, the files stay: its outcome may be unknown (a lost connection), and
a committed revision must not lose its blob.
"""
import os
import shutil

from ZODB.blob import rename_or_copy_blob
from ZODB.blob import set_not_writable

from relstorage.blobs.base import BlobDirectory
from relstorage.blobs.base import PendingBlobs
from relstorage.blobs.base import missing_blob


class SharedBlobs(BlobDirectory):

    def begin(self):
        return PendingSharedBlobs(self)

    def load(self, storage, oid, tid):
        """The path of the blob of ``(oid, tid)``; POSKeyError naming both
        when the file is not there (a blob directory that is not shared
        with the client that committed it, or a file removed by hand)."""
        path = self.path(oid, tid)
        if not os.path.exists(path):
            raise missing_blob(oid, tid, f'{path} does not exist')
        return path

    def open(self, storage, oid, tid, opener):
        return opener(self.load(storage, oid, tid))


class PendingSharedBlobs(PendingBlobs):

    def upload(self, cursor):
        # An undo copies the blob of an older revision: make sure it is
        # there before anything is locked.
        for oid, tid in self.copies.items():
            if not os.path.exists(self.blobs.path(oid, tid)):
                raise missing_blob(oid, tid, 'the revision an undo copies')

    def publish(self, cursor, tid):
        blobs = self.blobs
        for oid, path in self.files.items():
            blobs.make_oid_dir(oid)
            rename_or_copy_blob(path, blobs.path(oid, tid), chmod=True)
        self.files.clear()
        for oid, source_tid in self.copies.items():
            blobs.make_oid_dir(oid)
            target = blobs.path(oid, tid)
            _share(blobs.path(oid, source_tid), target)
            set_not_writable(target)


def _share(source, target):
    """Give ``target`` the content of the committed blob file ``source``.
    Committed blob files never change, so a hard link serves; a copy where
    the file system has none.  A file left at ``target`` by a commit that
    failed is replaced."""
    try:
        os.unlink(target)
    except FileNotFoundError:
        pass
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)
