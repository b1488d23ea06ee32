"""The blob methods of RelStorage (IBlobStorage, IBlobStorageRestoreable).

A mix-in of ``relstorage.storage.RelStorage``: it delegates to the blob
support of the storage (``self._blobs``, made by ``make_blobs``: None
without blob-dir) and to the instance's commit and read snapshot.
"""
from ZODB.blob import BlobFile

from relstorage.blobs.base import no_blob_dir
from relstorage.tids import id_to_int


class BlobMethods:

    def copyTransactionsFrom(self, other):
        if self._blobs is not None:
            # ZODB's copy with blobs: each blob record's file is copied
            # from the source and given to restoreBlob.
            from ZODB.blob import copyTransactionsFromTo
            copyTransactionsFromTo(other, self)
        else:
            from ZODB.BaseStorage import copy
            copy(other, self)

    def _blob_support(self, what, oid=None):
        if self._blobs is None:
            raise no_blob_dir(what, oid)
        return self._blobs

    @property
    def fshelper(self):
        """ZODB's FilesystemHelper of blob-dir: its layout (where the blob
        of a revision is kept) and its tmp directory."""
        return self._blob_support('fshelper').fshelper

    def temporaryDirectory(self):
        return self._blob_support('temporaryDirectory').temporary_directory()

    def storeBlob(self, oid, oldserial, data, blobfilename, version,
                  transaction):
        """store() of the object, and of the blob file ``blobfilename``,
        which becomes the storage's (moved into place at commit, removed at
        abort)."""
        oid_int = id_to_int(oid, 'oid')
        self._blob_support('storeBlob', oid_int)
        with self._lock:
            self.store(oid, oldserial, data, version, transaction)
            self._txn.pending_blobs().store(oid_int, blobfilename)

    def restoreBlob(self, oid, serial, data, blobfilename, prev_txn,
                    transaction):
        oid_int = id_to_int(oid, 'oid')
        blobs = self._blob_support('restoreBlob', oid_int)
        with self._lock:
            if (self._batch_from is not None and blobs.in_database and
                    self._adapter.capabilities.database_wide_write_lock
                    and not self._oids.has_other()):
                # The blob's id comes from the id allocator's own
                # connection when none is reserved, which needs the write
                # lock the batch holds (SQLite): the batch's finished
                # transactions are committed first (this one's rows are
                # not written before its vote), and its database
                # transaction begins again.
                self._commit_batch(resume=True)
            self.restore(oid, serial, data, '', prev_txn, transaction)
            self._txn.pending_blobs().store(oid_int, blobfilename)

    def loadBlob(self, oid, serial):
        """The name of a file holding the blob of revision ``serial``;
        POSKeyError naming both if there is none.  The file must not be
        changed; with a blob cache (shared-blob-dir false) it may be trimmed
        later, which openCommittedBlobFile prevents while the file is
        open."""
        oid_int = id_to_int(oid, 'oid')
        tid_int = id_to_int(serial, 'serial', oid)
        return self._blob_support('loadBlob', oid_int).load(
            self, oid_int, tid_int)

    def openCommittedBlobFile(self, oid, serial, blob=None):
        oid_int = id_to_int(oid, 'oid')
        tid_int = id_to_int(serial, 'serial', oid)
        if blob is None:
            def opener(path):
                return open(path, 'rb')
        else:
            def opener(path):
                return BlobFile(path, 'r', blob)
        return self._blob_support('openCommittedBlobFile', oid_int).open(
            self, oid_int, tid_int, opener)

    def _read_committed(self, tid, what, read):
        """``read(cursor)`` in a read snapshot that includes transaction
        ``tid``: this instance's own, started for the read (and ended after
        it) when none is open, or a short one of its own when the open one
        is older than ``tid`` (or the instance is closed)."""
        cm = self._adapter.connmanager
        with self._lock:
            if not self._closed:
                # A read: a snapshot between transactions serves one now.
                self._between = False
                started = self._snapshot_tid is None
                cursor = self._snapshot_cursor()
                try:
                    if started or self._snapshot_tid >= tid:
                        with cm.translate(what):
                            return read(cursor)
                finally:
                    if started:
                        self._leave_snapshot()
        conn, cursor = cm.open_load()
        try:
            with cm.translate(what):
                cm.begin_snapshot(conn, cursor)
                return read(cursor)
        finally:
            cm.close(conn, cursor)
