"""What a bulk copy into relstorage uses (``zodbconvert``): emptying the
database, and restore batches.

A mix-in of ``relstorage.storage.RelStorage``, which delegates the rest of
a commit to ``relstorage.storage.commit``: in a batch, a restored transaction's
finish does not COMMIT (``PendingTransaction.finish(commit=False)``) and
the next ``tpc_begin`` goes on in the same database transaction.
"""
from ZODB import POSException
from ZODB.utils import z64


class BulkCopyMethods:

    @property
    def restores_own_tids(self):
        """Whether one commit may restore the records of several source
        transactions, each keeping its tid (``restore``'s serial): true
        without history, where a row's tid is all that is kept of its
        transaction.  zodbconvert then copies many small transactions in
        one commit."""
        return not self._options.keep_history

    def zap_all(self):
        """Remove every object and transaction, and every blob file of
        blob-dir: the database is as if new (``zodbconvert --clear``, tests).
        Other clients of the database must be stopped first; this
        instance's caches are emptied."""
        with self._lock:
            self._check_open()
            if self._txn is not None:
                raise POSException.StorageTransactionError(
                    'zap_all() while a transaction is being committed')
            self._end_snapshot()
            self._adapter.schema.zap_all()
            self._oids.forget()
            if self._blobs is not None:
                self._blobs.clear()
            self._cache.clear()
            self._recent.clear()
            self._ltid = z64
            self._own_tids.clear()
            self._polled_tid = None

    def begin_restore_batch(self):
        """Let commits that restore transactions (``tpc_begin`` with a tid,
        as ``zodbconvert`` does) share one database transaction, committed
        by ``commit_restore_batch``: a bulk copy then pays one COMMIT per
        batch, not per transaction.  Until that commit, no other client
        sees the batch and this one holds the commit lock (and, on SQLite,
        the database's write lock); an abort (tpc_abort, or an error in
        any commit) rolls back every transaction of the batch, and
        ``lastTransaction`` goes back to what was committed before it."""
        with self._lock:
            self._check_open()
            self._batching = True

    def commit_restore_batch(self):
        """Commit the transactions restored since the batch began (or was
        last committed); the batch goes on.  Returns the last tid
        committed (bytes)."""
        with self._lock:
            if self._txn is not None:
                raise POSException.StorageTransactionError(
                    'commit_restore_batch() inside a commit')
            self._commit_batch()
            return self._ltid

    def _commit_batch(self, resume=False):
        """Commit the open batch.  ``resume``: inside a commit, whose
        database transaction then begins again (what is staged stays)."""
        if self._batch_from is not None:
            cm = self._adapter.connmanager
            with cm.translate():
                cm.commit(self._store_conn, self._store_cursor)
                if resume:
                    cm.begin_store(None, self._store_cursor)
            self._batch_from = None

    def end_restore_batch(self):
        """Commit what the batch holds and stop batching."""
        with self._lock:
            try:
                return self.commit_restore_batch()
            finally:
                self._batching = False
