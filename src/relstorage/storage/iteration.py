"""IStorageIteration: walking the transactions of a storage.

An iterator reads from its own snapshot, fixed when it is created, so
transactions committed while it runs are not seen, and it fetches
transactions in pages, so a database of millions of transactions is walked
in constant memory.
"""
from collections import deque

from ZODB.BaseStorage import DataRecord
from ZODB.BaseStorage import TransactionRecord
from ZODB.utils import p64

from relstorage.tids import MAX_ID

PAGE = 100


class TransactionIterator:

    def __init__(self, adapter, start=None, stop=None):
        self._adapter = adapter
        # Set before anything can fail, for close() (and __del__) to find.
        self._conn = self._cursor = None
        self._done = True
        cm = adapter.connmanager
        self._conn, self._cursor = cm.open_load()
        try:
            cm.begin_snapshot(self._conn, self._cursor)
            last = adapter.poller.last_tid(self._cursor)
        except BaseException:
            self.close()
            raise
        self._next = 0 if start is None else start
        self._stop = last if stop is None else min(stop, last, MAX_ID)
        self._page = deque()
        self._done = False

    def __iter__(self):
        return self

    def __next__(self):
        if not self._page and not self._done:
            if self._next <= self._stop:
                self._page.extend(self._adapter.history.transactions(
                    self._cursor, self._next, self._stop, PAGE))
            if not self._page:
                self.close()
        if not self._page:
            raise StopIteration
        tid, status, user, description, extension = self._page.popleft()
        self._next = tid + 1
        return RelStorageTransaction(
            self, tid, status, user, description, extension)

    def records(self, tid):
        if self._cursor is not None:
            return self._adapter.history.records(self._cursor, tid)
        # Read after the iterator was exhausted: a short snapshot of its own.
        cm = self._adapter.connmanager
        conn, cursor = cm.open_load()
        try:
            return self._adapter.history.records(cursor, tid)
        finally:
            cm.close(conn, cursor)

    def close(self):
        self._done = True
        if self._conn is not None:
            self._adapter.connmanager.close(self._conn, self._cursor)
            self._conn = self._cursor = None

    def __del__(self):
        self.close()


class RelStorageTransaction(TransactionRecord):
    """One transaction from an iterator; iterating it yields its records in
    the order they were stored."""

    def __init__(self, iterator, tid, status, user, description, extension):
        TransactionRecord.__init__(
            self, p64(tid), status, user or b'', description or b'',
            extension or b'')
        self._iterator = iterator
        self._tid_int = tid

    def __iter__(self):
        tid = self.tid
        for oid, state, data_txn in self._iterator.records(self._tid_int):
            yield DataRecord(
                p64(oid), tid, state, p64(data_txn) if data_txn else None)
