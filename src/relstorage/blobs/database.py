"""Blobs kept in the database (``shared-blob-dir false``).

A commit's blob files travel to the database at vote, in chunks of
``blob-chunk-size`` (the adapter's blob role streams them, so a blob of any
size passes through memory one chunk at a time), each under a new blob id,
before the object locks are taken where the database has row locks; the
commit lock covers only the rows that tie each revision to its blob.
After the commit the files move into this machine's cache (``cache.py``),
so a client reads back what it wrote without a download.

A read that misses the cache downloads the blob into it from a snapshot
that holds the revision.  History-free commits remove the blob a revision
replaces at vote, inside the same database transaction: older snapshots
still read it until they end.
"""
import errno
import logging
import os

from ZODB.blob import rename_or_copy_blob
from ZODB.blob import set_not_writable
from ZODB.POSException import StorageError
from ZODB.utils import tid_repr

from relstorage.blobs import cache
from relstorage.blobs.base import BlobDirectory
from relstorage.blobs.base import MAKE_DIR_ATTEMPTS
from relstorage.blobs.base import PendingBlobs
from relstorage.blobs.base import missing_blob
from relstorage.blobs.base import remove_quietly
from relstorage.blobs.base import unique_name

log = logging.getLogger(__name__)

#: How often a read tries again when the file it was given is trimmed
#: before it could open it.
OPEN_ATTEMPTS = 5


def _disk_full(error):
    return isinstance(error, OSError) and error.errno in (
        errno.ENOSPC, getattr(errno, 'EDQUOT', errno.ENOSPC))


class DatabaseBlobs(BlobDirectory):

    in_database = True

    def __init__(self, options, adapter, oids):
        super().__init__(options, adapter)
        self.oids = oids
        self.chunk_size = options.blob_chunk_size
        adapter.blobs.check_chunk_size(adapter.connmanager, self.chunk_size)
        self.size = cache.CacheSize(
            self.directory, options.blob_cache_size,
            options.blob_cache_size_check,
            options.blob_cache_size_check_external)

    def begin(self):
        return PendingDatabaseBlobs(self)

    def close(self):
        self.size.wait(30)

    def load(self, storage, oid, tid):
        """The cached file of the blob of ``(oid, tid)``, downloaded first
        if it is not cached."""
        path = self.path(oid, tid)
        if cache.touch(path):
            return path
        return self._download(storage, oid, tid, path)

    def open(self, storage, oid, tid, opener):
        """``opener(path)`` of the cached blob, held so that no trim removes
        it while it is open."""
        path = self.path(oid, tid)
        for _ in range(OPEN_ATTEMPTS):
            try:
                file = opener(path)
            except FileNotFoundError:
                # Not cached (or trimmed just now): download, open again.
                self._download(storage, oid, tid, path)
                continue
            cache.hold(file)
            return file
        raise missing_blob(oid, tid, f'{path} was removed {OPEN_ATTEMPTS} '
                                     f'times before it could be opened')

    def _download(self, storage, oid, tid, path):
        mover = self.adapter.blobs

        def read(cursor):
            def write(temporary):
                with open(temporary, 'xb') as out:
                    return mover.download(cursor, oid, tid, out)
            return self.place(oid, tid, write)

        if storage._read_committed(tid, 'loading a blob', read) is None:
            raise missing_blob(oid, tid, 'the database holds none')
        return path

    def place(self, oid, tid, fill):
        """Put the blob of ``(oid, tid)`` into the cache, whole or not at
        all: ``fill(temporary)`` writes it to a temporary file beside its
        place and returns its size, or None when there is nothing to cache.
        Returns the size.  A full disk raises a StorageError that says so
        (what is committed is in the database either way).

        A trim may remove the object's directory, emptied, between its
        creation and the temporary file's: the directory is then created
        again (``fill`` must fail with FileNotFoundError naming the
        temporary file, as ``open`` and ZODB's rename_or_copy_blob do).
        The file is made read-only before it is renamed into place, and
        nothing touches it by name after: once there, a trim may take it
        (not within cache.RECENT_USE seconds)."""
        for _ in range(MAKE_DIR_ATTEMPTS):
            directory = self.make_oid_dir(oid)
            temporary = unique_name(directory, tid_repr(tid) + '-')
            try:
                size = fill(temporary)
                if size is not None:
                    # Used now (a commit's file may be older).
                    os.utime(temporary)
                    set_not_writable(temporary)
                break
            except FileNotFoundError as e:
                if temporary not in (e.filename, e.filename2) or (
                        os.path.exists(temporary)):
                    self._failed(temporary, oid, tid, e)
                # The directory went: a trim emptied it just now.
            except BaseException as e:
                self._failed(temporary, oid, tid, e)
        else:
            raise StorageError(
                f'cannot create a file in {directory}: it was removed '
                f'{MAKE_DIR_ATTEMPTS} times')
        if size is None:
            remove_quietly(temporary)
            return None
        try:
            os.replace(temporary, self.path(oid, tid))
        except BaseException as e:
            self._failed(temporary, oid, tid, e)
        self.size.written(size)
        return size

    def _failed(self, temporary, oid, tid, error):
        """Remove what a failed ``place`` left and raise; a full disk is
        said so."""
        remove_quietly(temporary)
        if _disk_full(error):
            raise StorageError(
                f'the blob cache blob-dir {self.directory} is full: cannot '
                f'cache the blob of oid 0x{oid:x} at tid 0x{tid:x} '
                f'({error.strerror}); free space there or lower '
                f'blob-cache-size (the blob itself is safe in the '
                f'database)') from error
        raise error


class PendingDatabaseBlobs(PendingBlobs):

    def __init__(self, blobs):
        super().__init__(blobs)
        self.ids = {}       # oid -> the blob id its new blob gets
        self.rows = []      # (oid, blob_id, size) uploaded

    # Blob ids come from the object id allocator: unique, never handed out
    # twice, usually without a round trip, and in its own transaction
    # (which is why they are taken here: at vote, SQLite's one write lock
    # is already held by the commit).

    def store(self, oid, path):
        super().store(oid, path)
        self.ids[oid] = self.blobs.oids.take_other()

    def copy(self, oid, tid):
        super().copy(oid, tid)
        self.ids[oid] = self.blobs.oids.take_other()

    def upload(self, cursor):
        blobs = self.blobs
        mover = blobs.adapter.blobs
        for oid, path in self.files.items():
            blob_id = self.ids[oid]
            size = mover.upload(cursor, blob_id, path, blobs.chunk_size)
            self.rows.append((oid, blob_id, size))
        for oid, tid in self.copies.items():
            blob_id = self.ids[oid]
            size = mover.copy(cursor, oid, tid, blob_id)
            if size is None:
                raise missing_blob(oid, tid, 'the revision an undo copies')
            self.rows.append((oid, blob_id, size))

    def locked(self, cursor):
        if self.replaced and not self.blobs.keep_history:
            self.blobs.adapter.blobs.drop(cursor, sorted(self.replaced))

    def publish(self, cursor, tid):
        if self.rows:
            self.blobs.adapter.blobs.publish(cursor, tid, self.rows)

    def committed(self, tid):
        blobs = self.blobs
        for oid, path in self.files.items():

            def move(temporary, path=path):
                # A rename, or ZODB's logged copy across file systems.
                rename_or_copy_blob(path, temporary, chmod=False)
                return os.path.getsize(temporary)

            try:
                blobs.place(oid, tid, move)
            except Exception:
                # Committed to the database; the cache only misses it.
                log.warning('cannot put the blob of oid 0x%x into the blob '
                            'cache %s', oid, blobs.directory, exc_info=True)
                remove_quietly(path)
        self.files.clear()
