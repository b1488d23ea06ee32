"""The process-wide pool of object ids reserved from the database."""
import threading
import time

from relstorage.storage.pool import STORE
from relstorage.storage.reconnect import retry_if_disconnected


class OIDPool:
    """Object ids reserved in blocks, shared by a root storage and all its
    instances, so that ``new_oid`` is a round trip only once per block.

    The lock only guards this Python list; uniqueness between processes
    comes from the database's allocator.

    The reservations run on a connection of ``pool``
    (relstorage.storage.pool), kept between them without max-connections,
    taken for each one and given back with it otherwise.
    """

    def __init__(self, adapter, pool):
        self._adapter = adapter
        self._pool = pool
        self._lock = threading.Lock()
        self._free = []        # descending, pop() gives the smallest
        self._others = []      # the same, for take_other
        #: The highest oid the database's allocator gave this process.
        self.highest = -1
        self._conn = None
        self._cursor = None
        self._entry = None     # Pooled, of _conn
        # Blocks per reservation: doubled (up to MAX_BLOCKS) while
        # reservations follow each other closely, as when a process adds
        # many objects; back to 1 after a pause.
        self._blocks = 1
        self._last_reserve = 0.0

    #: At most this many blocks are reserved in one round trip; a process
    #: that ends leaves at most this many blocks of ids unused.
    MAX_BLOCKS = 16
    #: Reservations closer than this (seconds) count as "in a hurry".
    HURRY = 1.0

    def take(self, cursor=None):
        """An object id.  ``cursor``: a connection in a transaction that
        may reserve a block itself (behind a transaction pooler, the
        caller's snapshot: see relstorage.adapters.postgresql)."""
        with self._lock:
            if not self._free:
                self._free = self._refill(cursor)
            return self._free.pop()

    def take_other(self):
        """An id for something other than an object (a blob's id in the
        database): unique all the same, from ids of its own that restored
        oids do not discard (``discard_through``), so that a bulk copy
        restoring blobs reserves a block now and then rather than for
        every blob (on SQLite each reservation commits the copy's open
        batch)."""
        with self._lock:
            if not self._others:
                self._others = self._refill()
            return self._others.pop()

    def has_other(self):
        """Whether ``take_other`` can answer without the database."""
        return bool(self._others)

    def _refill(self, cursor=None):
        """Reserved ids, descending (the caller holds the lock)."""
        now = time.monotonic()
        if now - self._last_reserve < self.HURRY:
            self._blocks = min(self._blocks * 2, self.MAX_BLOCKS)
        else:
            self._blocks = 1
        self._last_reserve = now
        if cursor is None:
            ids = self._reserve()
        else:
            with self._adapter.connmanager.translate(
                    'allocating object ids'):
                ids = self._adapter.oids.new_oids(cursor, self._blocks)
        ids = sorted(ids, reverse=True)
        self.highest = max(self.highest, ids[0])
        return ids

    def _reserve(self):
        """A new block from the database; a connection the database dropped
        is reopened once."""
        return self._on_connection(
            lambda cursor: self._adapter.oids.new_oids(cursor, self._blocks))

    def _on_connection(self, work):
        """``work(cursor)`` on this pool's connection (the caller holds
        the lock); a connection the database dropped is reopened once."""
        cm = self._adapter.connmanager

        def attempt():
            if self._conn is None:
                # The last connection of a bounded pool may serve: this
                # one waits for nothing else while it holds it.
                entry = self._pool.take(STORE, held=2)
                self._entry = entry
                self._conn, self._cursor = entry.conn, entry.cursor
                if entry.rollback_due:
                    # Still in the snapshot of its last user.
                    entry.rollback_due = False
                    cm.rollback(entry.conn, entry.cursor)
            return work(self._cursor)

        try:
            with cm.translate('allocating object ids'):
                return retry_if_disconnected(
                    cm, 'allocating object ids', attempt,
                    self._drop_gone)
        except BaseException:
            self.close_connection()
            raise
        finally:
            self._give_back()

    def _give_back(self):
        if self._pool.bounded and self._conn is not None:
            entry, self._entry = self._entry, None
            self._conn = self._cursor = None
            self._pool.give(entry)

    def ensure_above(self, oid):
        """Move the database's allocator past ``oid`` on this pool's own
        connection (see ensure_above_own_connection)."""
        with self._lock:
            self._on_connection(
                lambda cursor: self._adapter.oids.ensure_above(cursor, oid))

    def discard_through(self, oid):
        """Forget reserved ids up to ``oid`` (they were used by restore)."""
        with self._lock:
            # Descending: the smallest free id is the last.
            if self._free and self._free[-1] <= oid:
                self._free = [o for o in self._free if o > oid]

    def forget(self):
        """Drop every reserved id (the database's allocator was reset)."""
        with self._lock:
            self._free = []
            self._others = []
            self.highest = -1

    def _drop_gone(self):
        self.close_connection()
        self._pool.close_idle()

    def close_connection(self):
        if self._conn is not None:
            self._pool.discard(self._conn, self._cursor)
            self._conn = self._cursor = None

    def close(self):
        with self._lock:
            self.close_connection()
