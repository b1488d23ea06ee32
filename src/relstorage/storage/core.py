"""RelStorage: a ZODB storage whose data lives in a relational database.

One root ``RelStorage`` is opened per ``ZODB.DB``; ZODB asks it for a
``new_instance()`` per Connection.  Every instance holds its own read
snapshot (renewed by ``poll_invalidations``) and its own connection for
committing; the adapter, the pool of reserved object ids and the memory of
recent states are shared.

An instance may be called from several threads (ZODB's own tests do that):
``_lock`` serialises the calls, and a second ``tpc_begin`` on the same
instance waits until the first commit ends.  Correctness between instances
and processes never depends on these locks; it comes from the database.
"""
import logging
import threading
import weakref
import time

import zope.interface
from ZODB import POSException
from ZODB.ConflictResolution import ConflictResolvingStorage
from ZODB.interfaces import IBlobStorage
from ZODB.interfaces import IBlobStorageRestoreable
from ZODB.interfaces import IExternalGC
from ZODB.interfaces import IMultiCommitStorage
from ZODB.interfaces import IMVCCPrefetchStorage
from ZODB.interfaces import IMVCCStorage
from ZODB.interfaces import IStorage
from ZODB.interfaces import IStorageCurrentRecordIteration
from ZODB.interfaces import IStorageIteration
from ZODB.interfaces import IStorageRestoreable
from ZODB.interfaces import IStorageUndoable
from ZODB.utils import p64
from ZODB.utils import tid_repr
from ZODB.utils import u64
from ZODB.utils import z64

from relstorage import metrics
from relstorage.blobs import make_blobs
from relstorage.blobs.api import BlobMethods
from relstorage.classes import AllowList
from relstorage.cache import persistent as persistentcache
from relstorage.cache.local import LocalCache
from relstorage.cache.local import entry_state
from relstorage.cache.local import make_cache
from relstorage.cache.readahead import Families
from relstorage.cache.recent import RecentStates
from relstorage.config.options import Options
from relstorage.config.options import ignored
from relstorage.errors import CommitLockTimeoutError
from relstorage.errors import CommitOutcomeUnknownError
from relstorage.errors import DisconnectedError
from relstorage.metrics import Metrics
from relstorage.storage import undo as _undo
from relstorage.storage.bulkcopy import BulkCopyMethods
from relstorage.storage.commit import PendingTransaction
from relstorage.storage.iteration import TransactionIterator
from relstorage.storage.oidpool import OIDPool
from relstorage.storage.outcome import settle_lost_finish
from relstorage.storage.pool import Connections
from relstorage.storage.pool import PooledConnectionMethods
from relstorage.storage.store import StoreConnectionMethods
from relstorage.storage.snapshot import SnapshotMethods
from relstorage.storage.undo import UndoMethods
from relstorage.storage.undo import transaction_info
from relstorage.tids import id_to_int

# The storage's logger keeps its name (log filters and handlers name it).
log = logging.getLogger('relstorage.storage')


@zope.interface.implementer(
    IStorage,
    IMVCCStorage,
    IMVCCPrefetchStorage,
    IMultiCommitStorage,
    IStorageRestoreable,
    IStorageIteration,
    IStorageCurrentRecordIteration,
    IExternalGC,
    IBlobStorage,
    IBlobStorageRestoreable,
)
class RelStorage(SnapshotMethods, StoreConnectionMethods,
                 PooledConnectionMethods, BlobMethods, BulkCopyMethods,
                 UndoMethods, ConflictResolvingStorage):
    """``RelStorage(adapter, name=None, options=None, **options)``.

    ``adapter`` is a database adapter such as
    ``relstorage.adapters.sqlite.SQLiteAdapter``.  The keyword arguments are
    the keys of the ``<relstorage>`` section with ``_`` for ``-``
    (``keep_history=False``); bad values raise ConfigurationError naming the
    key.  Opening prepares the schema (see create-schema).
    """

    def __init__(self, adapter, name=None, options=None, **kwargs):
        if options is None:
            options = Options(**kwargs)
        elif kwargs:
            options = options.copy(**kwargs)
        if name is not None:
            options = options.copy(name=name)
        adapter.configure(options)
        adapter.schema.prepare(
            create=options.create_schema, read_only=options.read_only)
        self._adapter = adapter
        self._options = options
        self.class_allow_list = (AllowList(options.allowed_classes)
                                 if options.allowed_classes else None)
        self._name = options.name or adapter.describe()
        for key, why in ignored(options):
            log.warning('%s: option %s (RelStorage 4) is ignored: %s',
                        self._name, key, why)
        # Every instance's database connections (max-connections).
        self._pool = Connections(adapter.connmanager, options.max_connections,
                                 options.max_connections_wait)
        self._oids = OIDPool(adapter, self._pool)
        self._blobs = make_blobs(options, adapter, self._oids)
        # History-free with blobs in the database: a commit that deletes or
        # restores an object removes the blob of the revision it replaces.
        self._blobs_replaced = (
            self._blobs is not None and self._blobs.in_database
            and not options.keep_history)
        self._cache = make_cache(
            int(options.cache_local_mb * 1024 * 1024),
            options.cache_local_object_max, options.cache_local_compression)
        # History-free conflict resolution needs the state a transaction
        # started from after the database has overwritten it.  With the
        # shared cache on, that state is in the cache until a newer
        # revision replaces it, and then goes to the memory of recent
        # states; without the cache every load goes there.
        shared = isinstance(self._cache, LocalCache)
        self._remember_loads = not options.keep_history and not shared
        if not options.keep_history and shared:
            # The cache's entries, decoded when a resolution asks.
            self._recent = RecentStates(decode=entry_state)
            self._cache.replaced = self._recent.remember
        else:
            self._recent = RecentStates()
        self._read_ahead_on = (options.read_ahead
                               and adapter.capabilities.network_round_trips)
        # A snapshot older than what this instance saw: go on from it (and
        # drop the caches), or make loads raise ReadConflictError until the
        # replica catches up.  Without replicas an older database can only
        # be a restored or replaced one: there is nothing to wait for.
        self._follow_stale = (options.revert_when_stale
                              or not adapter.connmanager.uses_replicas)
        self._is_root = True
        # Closing the root closes every instance's database sessions, even
        # those of ZODB Connections the application never closed.
        self._instances = weakref.WeakSet()
        self._metrics = Metrics()
        self._init_instance()
        metrics.export(self)
        if options.keep_history:
            zope.interface.alsoProvides(self, IStorageUndoable)
        if options.cache_local_dir:
            persistentcache.load(self)

    def _init_instance(self):
        self._counters = self._metrics.counters()
        self._lock = threading.RLock()
        self._commit_done = threading.Condition(self._lock)
        self._closed = False
        self._released = False
        # Left to the idle thread while it holds the lock (snapshot.py).
        self._left = []
        self._ender_inside = False
        # In tryToResolveConflict: loadSerial may answer from memory.
        self._resolving = False
        # The read snapshot.
        self._load_conn = self._load_cursor = None
        self._snapshot_tid = None      # int, or None when no snapshot open
        # The load connection is still in a snapshot that ended: the next
        # one rolls it back in the round trip that begins it.
        self._rollback_due = False
        self._polled_tid = None        # last tid reported to poll callers
        # A snapshot started between polls (see snapshot.py): {oid: tid} of
        # what changed after _polled_tid, which ZODB has not been told.
        self._moved = {}
        # The next poll is ZODB's at the end of a transaction (after
        # sync(False)), and then the snapshot it opened is one between
        # transactions, which the idle thread ends once unused (idle.py).
        self._end_poll = False
        self._between = False
        # ``(after_tid, last_tid, changes)`` of the snapshot the last
        # commit began on what is now the load connection, for the next
        # poll to take (_take_commit_snapshot), or None.
        self._adopted = None
        # Whether ZODB polled at the end of the last committed transaction
        # (learnt at the poll or tpc_begin that follows a commit): then a
        # commit begins that poll's snapshot in its last round trip.
        self._polls_after_commit = True
        self._finished_unpolled = False
        # Whether the load connection has the staging table (it was the
        # store connection before a commit swapped them).
        self._load_staged = False
        # The newest tid this instance has seen (snapshots and its own
        # commits), and (snapshot tid, seen) while the snapshot is older.
        self._seen_tid = None
        self._stale = None
        self._prefetched = {}
        self._families = Families()    # for read-ahead
        #: Rows read ahead not asked for yet in this transaction: oid ->
        #: the kind of container they were read ahead for.
        self._ahead = {}
        # Committing.
        self._store_conn = self._store_cursor = None
        self._store_staged = False
        # The store connection is still in the snapshot it held as the
        # load connection: ROLLBACK before (or with) its next statement.
        self._store_rollback_due = False
        self._txn = None
        self._ltid = z64               # last tid committed by this instance
        self._own_tids = set()         # committed here since the last poll
        # Restore batches (begin_restore_batch): on, and the last tid
        # committed to the database when the open batch began (None: no
        # database transaction holds finished commits).
        self._batching = False
        self._batch_from = None

    def new_instance(self):
        other = type(self).__new__(type(self))
        other._adapter = self._adapter
        other._options = self._options
        other._name = self._name
        other._oids = self._oids
        other._pool = self._pool
        other._blobs = self._blobs
        other._blobs_replaced = self._blobs_replaced
        other._recent = self._recent
        other._cache = self._cache
        other._remember_loads = self._remember_loads
        other._read_ahead_on = self._read_ahead_on
        other._follow_stale = self._follow_stale
        other._is_root = False
        other._instances = None
        other._metrics = self._metrics
        other._crs_transform_record_data = self._crs_transform_record_data
        other._crs_untransform_record_data = (
            self._crs_untransform_record_data)
        other._init_instance()
        # What read-ahead learnt about the application is the process's.
        other._families = Families(self._families.usefulness)
        zope.interface.directlyProvides(
            other, zope.interface.directlyProvidedBy(self))
        root = self if self._is_root else self._root
        other._root = root
        root._instances.add(other)
        return other

    # -- connections ---------------------------------------------------

    def _check_open(self):
        if self._closed:
            raise POSException.StorageError(f'{self._name} is closed')

    # -- IMVCCStorage (poll_invalidations, sync, afterCompletion, release:
    # see snapshot.py) ------------------------------------------------

    def __del__(self):
        # An instance dropped without release() (a ZODB Connection that was
        # never closed) gives its database sessions back now rather than
        # holding server connection slots until the process ends.
        try:
            if not self._closed and not self._is_root:
                self._close_connections(locked=False)
                self._metrics.release(self._counters)
        except Exception:  # interpreter shutdown, a broken connection...
            pass

    def close(self):
        with self._lock:
            was_closed = self._closed
            if self._txn is not None:
                self._abort()
            self._close_connections()
            self._closed = True
        if self._is_root and not was_closed:
            for instance in list(self._instances):
                instance.release()
            self._oids.close()
            self._pool.close()
            if self._blobs is not None:
                self._blobs.close()
            if self._options.cache_local_dir:
                persistentcache.save(self)

    # -- reading -------------------------------------------------------

    def load(self, oid, version=''):
        # The path of every object ZODB's own cache misses: kept short.
        oid_int = id_to_int(oid, 'oid')
        self._counters.loads += 1
        with self._lock:
            if (self._snapshot_tid is None or self._closed
                    or self._stale is not None):
                self._snapshot_cursor(oid_int)
            cursor = self._load_cursor
            snapshot = self._snapshot_tid
            if self._moved and oid_int in self._moved:
                return self._load_moved(cursor, oid, oid_int)
            row = self._cache.get(oid_int, snapshot)
            if self._ahead:
                kind = self._ahead.pop(oid_int, None)
                if kind is not None:
                    self._families.usefulness.used(kind)
            if row is not None:
                if self._prefetched:
                    # Read ahead or prefetched, and cached: not needed twice.
                    self._prefetched.pop(oid_int, None)
                if self._read_ahead_on:
                    # A bucket read ahead with its siblings is a hit now;
                    # its own items are still to come.
                    self._families.note_later(row[0])
            else:
                row = self._prefetched.pop(oid_int, None)
                # A connection lost inside the snapshot: DisconnectedError
                # (retry the transaction), not the driver's own error.
                with self._adapter.connmanager.translate('loading'):
                    if row is None and self._families:
                        row = self._read_ahead(cursor, oid, oid_int, snapshot)
                    if row is None:
                        row = self._adapter.mover.load_current(
                            cursor, oid_int)
                if row is None:
                    raise POSException.POSKeyError(oid)
                self._cache.store_loaded(oid_int, row[1], row[0], snapshot)
                if self._remember_loads:
                    self._recent.remember(oid_int, row[1], row[0])
                if self._read_ahead_on:
                    self._families.note(row[0])
            state, tid = row
            if state is None:
                raise POSException.POSKeyError(oid)
            return state, p64(tid)

    def _read_ahead(self, cursor, oid, oid_int, snapshot):
        """The row of ``oid`` (``oid_int``) if it is the second (or later)
        object of its family to miss the caches, loaded with the rest of
        its family in one round trip; None otherwise."""
        family = self._families.siblings(oid)
        if family is None:
            return None
        refs, kind = family
        cache = self._cache
        wanted = [ref for ref in refs if ref not in self._prefetched
                  and not cache.has(ref, snapshot)]
        if oid_int not in wanted:
            wanted.append(oid_int)
        rows = self._adapter.mover.load_currents(cursor, wanted)
        ahead = self._ahead
        for ref, (state, tid) in rows.items():
            if ref != oid_int:
                cache.store_loaded(ref, tid, state, snapshot)
                ahead[ref] = kind
        extra = len(rows) - (oid_int in rows)
        self._families.usefulness.loaded(kind, extra)
        self._counters.read_ahead_rows += extra
        self._prefetched.update(rows)
        return self._prefetched.pop(oid_int, None)

    def prefetch(self, oids):
        """Load ``oids`` (those not cached yet) in one round trip, for the
        loads that follow in this transaction."""
        wanted = [id_to_int(oid, 'oid') for oid in oids]
        with self._lock:
            # A read: a snapshot between transactions serves one now.
            self._between = False
            cursor = self._snapshot_cursor()
            snapshot = self._snapshot_tid
            cache = self._cache
            wanted = [o for o in wanted if o not in self._prefetched
                      and not cache.has(o, snapshot)]
            if wanted:
                with self._adapter.connmanager.translate('prefetching'):
                    rows = self._adapter.mover.load_currents(cursor, wanted)
                self._prefetched.update(rows)
                for oid_int, (state, tid) in rows.items():
                    cache.store_loaded(oid_int, tid, state, snapshot)

    def getTid(self, oid):
        return self.load(oid)[1]

    def loadSerial(self, oid, serial):
        """The state of ``oid`` committed by ``serial``; POSKeyError if the
        database does not hold that revision.  History-free, only the
        current revision is held: any other tid raises POSKeyError, as in
        RelStorage 4, whatever the caches remember of it (one round trip,
        the cache cannot tell whether its revision is still current).
        Only conflict resolution reads the replaced revision a transaction
        started from (``tryToResolveConflict``)."""
        oid_int = id_to_int(oid, 'oid')
        tid_int = id_to_int(serial, 'serial')
        if self._resolving and self._txn is not None:
            state = self._txn.base_states.get((oid_int, tid_int))
            if state is not None:
                return state    # read at vote with the committed state
        recent = self._resolving and not self._options.keep_history
        if self._options.keep_history or recent:
            state = self._cache.get_revision(oid_int, tid_int)
            if state is None and recent:
                # (Resolving a conflict, the revision is one the database
                # has replaced: no round trip to learn that.)
                state = self._recent.get(oid_int, tid_int)
            if state is not None:
                return state
        with self._lock:
            state = self._read_latest(
                'loadSerial', lambda cursor: self._adapter.mover.load_revision(
                    cursor, oid_int, tid_int))
            if state is None:
                raise POSException.POSKeyError(oid)
            return state

    def tryToResolveConflict(self, *args, **kwargs):
        # ZODB's resolution reads the state the transaction started from
        # with loadSerial; history-free, the database has replaced it, and
        # only this process's memory of recent states still holds it.
        self._resolving = True
        try:
            return super().tryToResolveConflict(*args, **kwargs)
        finally:
            self._resolving = False

    def loadBefore(self, oid, tid):
        oid_int = id_to_int(oid, 'oid')
        before = id_to_int(tid, 'tid')
        self._counters.loads += 1
        with self._lock:
            cursor = self._snapshot_cursor(oid_int)
            row = self._cache.get_before(oid_int, before, self._snapshot_tid)
            if row is not None and row[0] is not None:
                # Current in this snapshot: no later revision to name.
                return row[0], p64(row[1]), None
            with self._adapter.connmanager.translate('loading'):
                return self._load_before(cursor, oid, oid_int, before)

    def _load_before(self, cursor, oid, oid_int, before):
        mover = self._adapter.mover
        row = mover.load_before(cursor, oid_int, before)
        if row is None and not self._options.keep_history:
            # History-free: the revision is gone unless this process
            # deleted the object recently (see RecentStates.deleted).
            found = self._recent.before(oid_int, before)
            if found is not None:
                state, start, end = found
                return state, p64(start), p64(end)
        if row is None:
            if not mover.exists(cursor, oid_int):
                raise POSException.POSKeyError(oid)
            return None
        state, start = row
        if state is None:
            raise POSException.POSKeyError(oid)
        end = mover.next_revision_tid(cursor, oid_int, start)
        return state, p64(start), None if end is None else p64(end)

    def history(self, oid, size=1):
        oid_int = id_to_int(oid, 'oid')
        with self._lock:
            rows = self._read_latest(
                'history', lambda cursor: self._adapter.history.object_history(
                    cursor, oid_int, max(size, 1)))
        if not rows:
            raise POSException.POSKeyError(oid)
        result = []
        for tid, state_size, user, description, extension in rows:
            info = transaction_info(tid, user, description, extension)
            del info['id']
            info.update(tid=p64(tid), serial=p64(tid), size=state_size,
                        version='')
            result.append(info)
        return result

    def metrics(self):
        """What the storage has done: relstorage.metrics.snapshot."""
        return metrics.snapshot(self)

    def __len__(self):
        with self._lock:
            return self._read_latest('len', self._adapter.mover.object_count)

    def getSize(self):
        return self._adapter.database_size()

    def getName(self):
        return self._name

    def sortKey(self):
        return self._adapter.describe()

    def isReadOnly(self):
        return self._options.read_only

    def supportsUndo(self):
        return self._options.keep_history

    def __repr__(self):
        return f'<{type(self).__name__} {self._name}>'

    # -- iteration -----------------------------------------------------

    def iterator(self, start=None, stop=None):
        return TransactionIterator(
            self._adapter,
            None if start is None else id_to_int(start, 'start'),
            None if stop is None else id_to_int(stop, 'stop'))

    def record_iternext(self, next=None):  # noqa: A002 (IStorageIteration's signature)
        start = 0 if next is None else id_to_int(next, 'next')
        with self._lock:
            rows = self._read_latest(
                'record_iternext', lambda cursor:
                self._adapter.mover.iter_current(cursor, start, 2))
        if not rows:
            raise ValueError('no objects at or after that oid')
        oid, tid, state = rows[0]
        next_oid = p64(rows[1][0]) if len(rows) > 1 else None
        return p64(oid), p64(tid), state, next_oid

    # -- committing ----------------------------------------------------

    def _pending(self, transaction):
        """The commit in progress for ``transaction``, or
        StorageTransactionError."""
        txn = self._txn
        if txn is None or txn.transaction is not transaction:
            raise POSException.StorageTransactionError(
                self, transaction,
                'this transaction is not being committed by this storage')
        return txn

    def _writable(self, transaction):
        if self._options.read_only:
            raise POSException.ReadOnlyError()
        return self._pending(transaction)

    def tpc_begin(self, transaction, tid=None, status=' '):
        if self._options.read_only:
            raise POSException.ReadOnlyError()
        requested = None if tid is None else id_to_int(tid, 'tid')
        with self._lock:
            self._check_open()
            if self._txn is not None and (
                    self._txn.transaction is transaction):
                raise POSException.StorageTransactionError(
                    'Duplicate tpc_begin calls for same transaction')
            deadline = time.monotonic() + self._options.commit_lock_timeout
            while self._txn is not None:
                # Another thread is committing through this instance.
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self._commit_done.wait(remaining):
                    raise CommitLockTimeoutError(
                        f'{self._name}: another thread kept this storage '
                        f'committing for longer than commit-lock-timeout '
                        f'({self._options.commit_lock_timeout:g}s)')
            # The snapshot serves this transaction now (one that began
            # without transaction.begin()): the idle thread leaves it.
            self._between = False
            if self._finished_unpolled:
                # Committing again without a poll since the last commit
                # (the storage API, zodbconvert): commits begin no snapshot.
                self._finished_unpolled = False
                self._polls_after_commit = False
            if self._batch_from is not None:
                # The restore batch's database transaction goes on.
                cursor = self._store_cursor
            else:
                cursor = self._begin_store()
            self._txn = PendingTransaction(
                self._adapter, self._store_conn, cursor, transaction,
                requested, status, self._blobs, self._oids,
                json_state=self._options.json_state,
                previous=self._counters.last_commit)
            if self._batch_from is not None:    # holds the commit lock
                self._txn.last_committed = u64(self._ltid)

    def store(self, oid, serial, data, version, transaction):
        with self._lock:
            txn = self._writable(transaction)
            if version:
                raise POSException.Unsupported('versions are not supported')
            oid_int = id_to_int(oid, 'oid')
            if serial is None:
                prev = 0
            else:
                prev = id_to_int(serial, 'serial', oid)
            if not isinstance(data, bytes):
                raise POSException.StorageError(
                    f'store(): the data of oid {oid!r} is a '
                    f'{type(data).__name__}, not bytes')
            self._adapter.mover.check_state_size(oid, len(data))
            txn.add(oid_int, prev, data)
            if txn.blobs is not None:
                txn.blobs.discard(oid_int)

    def restore(self, oid, serial, data, version, prev_txn, transaction):
        with self._lock:
            txn = self._writable(transaction)
            if version:
                raise POSException.Unsupported('versions are not supported')
            oid_int = id_to_int(oid, 'oid')
            data_txn = 0 if not prev_txn else id_to_int(
                prev_txn, 'prev_txn', oid)
            if data is None and data_txn:
                data = self._adapter.mover.load_revision(
                    self._store_cursor, oid_int, data_txn)
                if data is None:
                    raise POSException.POSKeyError(
                        f'restore(): oid {oid!r} refers to the data of '
                        f'transaction {prev_txn!r}, which is not stored')
            elif data is not None and not isinstance(data, bytes):
                raise POSException.StorageError(
                    f'restore(): the data of oid {oid!r} is a '
                    f'{type(data).__name__}, not bytes')
            if data is not None:
                self._adapter.mover.check_state_size(oid, len(data))
            if not self._options.keep_history:
                # No back pointers without history: the column carries the
                # record's own tid where it precedes the commit's.
                data_txn = txn.own_tid(id_to_int(serial, 'serial', oid))
            txn.add(oid_int, None, data, data_txn)
            if self._blobs_replaced:
                txn.pending_blobs().remove(oid_int)

    def deleteObject(self, oid, oldserial, transaction):
        with self._lock:
            txn = self._writable(transaction)
            oid_int = id_to_int(oid, 'oid')
            txn.add(oid_int, id_to_int(oldserial, 'serial', oid), None)
            if self._blobs_replaced:
                txn.pending_blobs().remove(oid_int)

    def checkCurrentSerialInTransaction(self, oid, serial, transaction):
        with self._lock:
            txn = self._pending(transaction)
            txn.read_current[id_to_int(oid, 'oid')] = id_to_int(
                serial, 'serial', oid)

    def tpc_vote(self, transaction):
        with self._lock:
            txn = self._pending(transaction)
            if txn.voted:
                return txn.resolved
            # The transaction reads nothing more from its snapshot; ending
            # it lets the database reclaim what only this snapshot still
            # saw (SQLite can reset its WAL, PostgreSQL can vacuum).  Its
            # ROLLBACK goes with the next poll (relstorage.storage.idle),
            # or behind a transaction pooler with the commit's BEGIN.
            if self._adapter.connmanager.transaction_pooler:
                self._end_snapshot(now=False, give=False)
                self._commit_on_snapshot_connection(txn)
            self._leave_snapshot()
            try:
                with self._adapter.connmanager.translate():
                    return txn.vote(self)
            except POSException.ConflictError as e:
                self._counters.conflicts += 1
                self._after_conflict(e)
                raise

    def tpc_finish(self, transaction, f=None):
        with self._lock:
            txn = self._pending(transaction)
            if not txn.voted:
                self.tpc_vote(transaction)
            batch = self._batching and txn.requested_tid is not None
            cm = self._adapter.connmanager
            then = None
            if (self._polls_after_commit and not batch
                    and (self._load_conn is not None or self._pool.bounded)
                    and not cm.uses_replicas and not cm.transaction_pooler):
                # The next poll's snapshot, begun after the COMMIT in the
                # same round trip (_take_commit_snapshot).  (Only with a
                # load connection to swap with, or a pool to give it back
                # to: the instance keeps the connections it has, which a
                # full server would refuse.)
                then = self._adapter.poller.poll_after_commit(
                    cm, self._polled_tid)
            try:
                with cm.translate():
                    tid = txn.finish(self._oids.highest, commit=not batch,
                                     then=then)
            except DisconnectedError as e:
                if batch or self._batch_from is not None:
                    raise       # a restore batch is lost either way
                try:
                    settle_lost_finish(
                        self._name, self._adapter, txn.based_on(), e,
                        self._reopen_store, self._drop_gone_store)
                except CommitOutcomeUnknownError:
                    # Its blob files may now belong to a committed
                    # transaction: left in place.
                    txn.blobs = None
                    raise
                finally:
                    # Done with, whatever became of it (the tpc_abort that
                    # ``transaction`` sends next finds nothing to do).
                    self._abort()
            if batch and self._batch_from is None:
                self._batch_from = self._ltid
            if txn.blobs is not None:
                txn.blobs.committed(tid)
            self._ltid = tid_bytes = p64(tid)
            self._own_tids.add(tid)
            self._saw(tid)
            self._counters.committed(txn)
            committed = txn.committed_states()
            if not batch:
                # (A batch's states are not committed yet: not cached.)
                self._cache.store_committed(tid, committed)
            if not self._options.keep_history:
                for oid, prev_tid in txn.deletions().items():
                    self._recent.deleted(oid, prev_tid, tid)
            if self._remember_loads:
                for oid, state in committed.items():
                    self._recent.remember(oid, tid, state)
            if txn.max_oid >= 0:
                self._oids.discard_through(txn.max_oid)
            try:
                if f is not None:
                    f(tid_bytes)
            finally:
                self._txn = None
                self._leave_snapshot()
                if txn.after_commit is not None:
                    self._take_commit_snapshot(self._polled_tid,
                                               txn.after_commit)
                else:
                    self._give_store()
                self._finished_unpolled = not batch
                self._commit_done.notify_all()
            return tid_bytes

    def tpc_abort(self, transaction):
        with self._lock:
            if self._txn is None or self._txn.transaction is not transaction:
                return
            self._abort()

    def _abort(self):
        self._counters.aborts += self._txn is not None
        try:
            if self._txn is not None and self._txn.blobs is not None:
                self._txn.blobs.abort()
            if self._store_conn is not None:
                self._adapter.connmanager.rollback(
                    self._store_conn, self._store_cursor)
            if self._batch_from is not None:
                # The batch's finished commits went with the rollback.
                log.warning('%s: the restore batch was rolled back; the '
                            'last transaction committed is %s', self._name,
                            tid_repr(self._batch_from))
                self._ltid = self._batch_from
                self._batch_from = None
        finally:
            self._txn = None
            self._leave_snapshot()
            self._give_store()
            self._commit_done.notify_all()

    def tpc_transaction(self):
        txn = self._txn
        return None if txn is None else txn.transaction

    # -- undo (history-preserving only) ---------------------------------

    def undo(self, transaction_id, transaction):
        with self._lock:
            txn = self._writable(transaction)
            if not self._options.keep_history:
                raise POSException.UndoError(
                    'undo needs a history-preserving storage (keep-history)')
            return _undo.undo(self, txn, transaction_id)

    # -- misc ----------------------------------------------------------

    def pack(self, t, referencesf, gc=True, **options):
        """Pack to time ``t``; ``options`` are relstorage's (prepack_only,
        skip_prepack, progress: see relstorage.pack.pack)."""
        from relstorage.pack import pack
        if self._options.read_only:
            raise POSException.ReadOnlyError()
        try:
            pack(self, t, referencesf, gc and self._options.pack_gc,
                 **options)
        finally:
            # The pack removed revisions and objects without a new
            # transaction, so no poll will report them: forget everything
            # this process cached rather than serve a removed revision.
            self._cache.invalidate_all()
            self._recent.clear()
            with self._lock:
                if self._txn is None:
                    # Nor may this instance's snapshot, taken before the
                    # pack, keep answering for them (loadBefore, and the
                    # download of a blob the pack removed).
                    self._end_snapshot()
