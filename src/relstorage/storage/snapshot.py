"""The read snapshot of a storage instance: opening it, ending it, and
renewing it at every poll (IMVCCStorage's ``poll_invalidations``), with
what the shared cache must learn of the changes in between.

A snapshot older than what the instance saw (a replica behind, or a
restored database) makes the instance *stale*: loads raise
ReadConflictError until a poll finds the replica caught up, or, with
revert-when-stale (and always without replicas), the instance goes on
from the older state and every cached object is dropped.

A mixin of ``relstorage.storage.RelStorage``, whose ``_init_instance``
sets the attributes used here.
"""
import logging

from ZODB import POSException
from ZODB.utils import p64
from ZODB.utils import tid_repr
from ZODB.utils import u64

from relstorage.adapters.poll import split_poll
from relstorage.storage import idle
from relstorage.storage.reconnect import retry_if_disconnected

# The storage's logger: these messages kept their name when the code
# moved here from storage.py (log filters and handlers name it).
log = logging.getLogger('relstorage.storage')


class SnapshotMethods:

    def _snapshot_cursor(self, oid=None):
        """The cursor of this instance's read snapshot, opening one (and
        reading its last tid) if none is open.  A connection the database
        dropped is reopened here, between snapshots, once.  Raises
        ReadConflictError (naming ``oid``) while the snapshot is older than
        what this instance saw, unless revert-when-stale."""
        self._check_open()
        if self._snapshot_tid is None:
            self._start_between_polls()
        if self._stale is not None and not self._follow_stale:
            new, seen = self._stale
            raise POSException.ReadConflictError(
                f'{self._name}: the replica '
                f'{self._adapter.connmanager.server_of(self._load_conn)} '
                f'is at {tid_repr(p64(new))}, behind '
                f'{tid_repr(p64(seen))} that this connection already saw; '
                f'retry the transaction (or set revert-when-stale)',
                oid=None if oid is None else p64(oid))
        return self._load_cursor

    def _start_between_polls(self):
        """Start a snapshot outside poll_invalidations: a read between
        transactions (after the idle thread ended the snapshot of ZODB's
        poll at the end of one, after a commit with explicit transactions,
        or before the first poll).  ZODB's view stays at the tid
        last polled, so the objects changed since (by others) are *moved*:
        loading one gives its state as of that tid where history holds
        it, else ReadConflictError (``_load_moved``); the next poll reports
        them.  Read in the round trip that starts the snapshot."""
        polled = self._polled_tid
        changes = self._start_snapshot(polled)
        if polled is not None and changes and self._stale is None:
            own = self._own_tids
            self._moved = {oid: tid for oid, tid in changes
                           if tid not in own}

    def _load_moved(self, cursor, oid, oid_int):
        """``load`` of an object changed after the tid ZODB last polled
        (``_start_between_polls``): its state as of that tid."""
        polled = self._polled_tid
        try:
            with self._adapter.connmanager.translate('loading'):
                found = self._load_before(cursor, oid, oid_int, polled + 1)
        except POSException.POSKeyError:
            found = None
        if found is None:
            raise POSException.ReadConflictError(
                f'{self._name}: oid {oid_int:#x} was changed by another '
                f'transaction after this connection last synchronized (at '
                f'{tid_repr(p64(polled))}), and the database no longer '
                f'holds the state it had then; retry the transaction (begin '
                f'it with transaction.begin() to see the latest state)',
                oid=oid)
        return found[0], found[1]

    def _start_snapshot(self, after_tid=None):
        """``_begin_snapshot``, reopening once a connection the database
        dropped; returns what changed after ``after_tid``."""
        return retry_if_disconnected(
            self._adapter.connmanager, 'starting a read snapshot',
            lambda: self._begin_snapshot(after_tid),
            self._drop_gone_load)

    def _begin_snapshot(self, after_tid=None):
        """Start the snapshot; returns what changed after ``after_tid``
        (``[(oid, tid)]``, [] if None), read in the same round trip where
        the database allows (with the previous snapshot's ROLLBACK, if
        that was put off)."""
        adopted, self._adopted = self._adopted, None
        if adopted is not None:
            if adopted[0] == after_tid:
                # Begun by the last commit's finish (_take_commit_snapshot).
                self._snapshot_tid, changes = adopted[1], adopted[2]
                self._saw(self._snapshot_tid)
                return changes
            self._rollback_due = True
        cm = self._adapter.connmanager
        if self._load_conn is not None and cm.replaced(self._load_conn):
            # Its replica file prefers another server now.
            self._drop_load_connection()
        if self._load_conn is None:
            self._take_load()
        self._snapshot_tid, changes = self._adapter.poller.begin_and_poll(
            cm, self._load_conn, self._load_cursor, after_tid,
            self._rollback_due)
        self._rollback_due = False
        self._saw(self._snapshot_tid)
        return changes

    def lastTransaction(self):
        with self._lock:
            if self._snapshot_tid is not None:
                return max(p64(self._snapshot_tid), self._ltid)
            self._snapshot_cursor()
            last = max(p64(self._snapshot_tid), self._ltid)
            # Begun for this call alone: nothing reads from it (ZODB asks
            # the root storage; zodbconvert's destination only commits).
            # Kept open it would hold a connection or a pooler's session,
            # and hold back VACUUM and InnoDB's purge for as long as the
            # instance lives: a bulk copy's commits then slow down as the
            # old versions of the rows they update pile up.  A load after
            # this starts a snapshot of its own.
            self._leave_snapshot()
            return last

    def _saw(self, tid):
        """Note a snapshot (or a commit) at ``tid``; a snapshot older than
        what this instance saw makes it stale."""
        seen = self._seen_tid
        if seen is None or tid >= seen:
            self._seen_tid = tid
            self._stale = None
        else:
            self._stale = (tid, seen)

    def _end_snapshot(self, now=True, keep_adopted=False, give=True):
        """End the snapshot.  ``now`` False, where a new snapshot starts
        right after (a poll), leaves the ROLLBACK to the round trip that
        starts it.  A snapshot the last commit began for the next poll
        (``_take_commit_snapshot``) ends too, unless ``keep_adopted``.
        ``now`` also ends the snapshot the store connection still holds
        from before the last commit.  With max-connections the load
        connection goes back to the pool, unless ``give`` is false (a new
        snapshot starts at once)."""
        self._between = False
        if self._adopted is not None and not keep_adopted:
            self._adopted = None
            self._rollback_due = True
        if self._snapshot_tid is not None:
            self._snapshot_tid = None
            self._moved = {}
            self._prefetched.clear()
            self._families.clear()
            if self._ahead:
                # Read ahead, never asked for in their transaction.
                self._counters.read_ahead_unused += len(self._ahead)
                self._ahead.clear()
            self._rollback_due = True
        if now and self._rollback_due:
            self._rollback_due = False
            self._adapter.connmanager.rollback(
                self._load_conn, self._load_cursor)
        if now and self._txn is None:
            self._end_store_snapshot()
        if give:
            # With max-connections: no snapshot, no connection.
            self._give_load()

    def _leave_snapshot(self, keep_adopted=False):
        """End the snapshot without waiting for its ROLLBACK: the next
        snapshot's start carries it, or the idle thread sends it
        (relstorage.storage.idle).  A ROLLBACK due already keeps the time
        the thread was given for it: an instance that commits on without a
        snapshot (zodbconvert's destination) would otherwise put it off at
        each commit, for as long as it runs."""
        was_due = self._rollback_due
        self._end_snapshot(now=False, keep_adopted=keep_adopted)
        if self._rollback_due:
            idle.ender.due(self, keep=was_due)

    def _take_commit_snapshot(self, after_tid, rows):
        """After a commit whose last round trip also began a snapshot on
        the store connection and polled there for what changed after
        ``after_tid`` (IPoller.poll_after_commit, ``rows`` its result):
        the two connections swap roles, and the next poll or read takes
        that snapshot without a round trip (``_begin_snapshot``).  So
        ZODB's poll at the end of a transaction costs nothing after a
        commit.  What the load connection still holds ends with the
        next commit's first statement, or by the idle thread."""
        self._end_snapshot(now=False)
        old = (self._load_conn, self._load_cursor, self._rollback_due,
               self._load_staged)
        self._load_conn, self._load_cursor = (
            self._store_conn, self._store_cursor)
        self._load_staged = True
        self._rollback_due = False
        (self._store_conn, self._store_cursor, self._store_rollback_due,
         self._store_staged) = old
        # (With max-connections the load connection went back at the
        # vote: the instance keeps the one that holds the snapshot.)
        self._give_store()
        # (No changes when ``after_tid`` is None: the poll asked for none.)
        last, changes = split_poll(rows)
        if last is None:
            # It lacks a commit (MySQL: adapters/mysql/chain.py): the next
            # poll begins another.
            self._rollback_due = True
        else:
            self._adopted = (after_tid, last, changes)
        # Ended if no poll takes it soon (explicit transactions).
        idle.ender.due(self)

    def _end_idle_snapshot(self, loads=None):
        """Called by the idle thread (relstorage.storage.idle): send the
        ROLLBACK if it is still due, unless the instance is busy (its next
        statement carries it); with ``loads``, end the snapshot between
        transactions if it served no load since the count was ``loads``."""
        if not self._lock.acquire(blocking=False):
            # Busy: a snapshot between transactions is being read.  A due
            # ROLLBACK goes with the load connection's next statement, if
            # one comes: an instance that only commits (zodbconvert's
            # destination) sends none there, so the thread looks again.
            if loads is None or self._rollback_due:
                idle.ender.due(self, keep=True)
            return
        self._ender_inside = True
        try:
            if self._closed:
                return
            if self._txn is None:
                self._end_store_snapshot()
                self._give_store()
            if self._load_conn is None:
                return
            if self._rollback_due and self._snapshot_tid is None:
                self._end_snapshot()
            elif self._adopted is not None and self._txn is None:
                # No poll took the snapshot the last commit began.
                self._end_snapshot()
            elif (loads is not None and self._between
                    and self._snapshot_tid is not None and self._txn is None
                    and self._counters.loads == loads):
                # Nothing read from it: no transaction of the application's
                # depends on it.  (One that read stays open: a pack moves
                # its time back to before an open transaction, so that what
                # that transaction's view reaches is kept.)
                self._end_snapshot()
        except Exception as e:
            # Whatever went wrong (the database dropped the connection), the
            # next snapshot starts on a new one.
            log.debug('%s: ending an idle snapshot failed: %s', self._name, e)
            try:
                self._drop_load_connection()
            except Exception:
                self._load_conn = self._load_cursor = None
        finally:
            self._ender_inside = False
            try:
                self._run_left()
            except Exception as e:
                log.warning('%s: %s', self._name, e)
            finally:
                self._lock.release()

    def _after_conflict(self, error):
        """After a vote refused by ``error`` (a ConflictError whose
        ``serials`` are the committed tid, then the tid the transaction
        read): what the process caches of that object goes, so that the
        retry reads the committed revision.  If the cache would have
        served the revision read to a snapshot that already includes the
        committed one, it missed that change, and would go on serving the
        old revision, with a conflict at every retry, until the object
        changes again: logged as the error it is.  Returns whether it
        was (benchmarks/cache_check.py counts those)."""
        serials = error.serials
        if (not isinstance(error.oid, bytes) or not serials
                or len(serials) != 2
                or not all(isinstance(s, bytes) for s in serials)):
            return False
        committed, read = u64(serials[0]), u64(serials[1])
        if committed <= read:
            return False
        oid_int = u64(error.oid)
        cache = self._cache
        missed = (cache.get_revision(oid_int, read) is not None
                  and cache.has(oid_int, committed))
        if missed:
            log.error(
                '%s: the shared cache held revision %s of oid %#x as '
                'current at %s, the tid of a newer revision (a change no '
                'poll reported; cache horizon %s, last poll %s); the entry '
                'is dropped', self._name, tid_repr(p64(read)), oid_int,
                tid_repr(p64(committed)), cache.horizon, self._polled_tid)
        cache.discard((oid_int,))
        return missed

    # -- what must not wait for the idle thread --------------------------
    #
    # The idle thread sends its ROLLBACKs holding the instance's lock, and
    # a server that stopped answering keeps it there.  The instance's own
    # next statement would wait for that server anyway; but ``release``
    # (called by ZODB under its database's lock: every db.open of the
    # process would wait) and ``afterCompletion`` (a Connection's close)
    # need no answer from it.  What they do is then left to the idle
    # thread, which does it under the lock before it lets go, in the order
    # the instance's users would have: nothing else takes the lock between.

    def _unless_idle_thread(self, action):
        """``action()`` under the lock, or, while the idle thread holds it,
        by that thread as it lets go."""
        if not self._lock.acquire(blocking=False):
            self._left.append(action)
            while True:
                if self._ender_inside:
                    return      # read after the append: it runs the action
                if self._lock.acquire(timeout=0.05):
                    break
            action = self._run_left
        try:
            action()
        finally:
            self._lock.release()

    def _run_left(self):
        while self._left:
            self._left.pop(0)()

    def release(self):
        # Closed to its users now, its connections as soon as no ROLLBACK
        # of the idle thread's is waiting for the server on them.
        self._closed = True
        self._unless_idle_thread(self._release_connections)

    def _release_connections(self):
        if not self._released:
            self._released = True
            self._close_connections()
            self._metrics.release(self._counters)

    def _drop_gone_load(self):
        """Drop a load connection the database dropped; the idle ones of
        a bounded pool most likely went the same way (a restart)."""
        self._drop_load_connection()
        self._pool.close_idle()

    def _drop_load_connection(self, rollback=True):
        self._snapshot_tid = None
        self._moved = {}
        self._rollback_due = False
        self._adopted = None
        self._load_staged = False
        self._prefetched.clear()
        if self._load_conn is not None:
            self._pool.discard(self._load_conn, self._load_cursor, rollback)
            self._load_conn = self._load_cursor = None

    # -- IMVCCStorage: polling -------------------------------------------

    def poll_invalidations(self):
        """Start a new snapshot; return the oids changed by others since
        the last poll ([] on the first), or None if the database went back
        in time and every cached object must go."""
        with self._lock:
            self._check_open()
            # The old snapshot ends in the round trip that starts the new
            # (none where the last commit began it for ZODB's poll at the
            # end of the transaction, which does not ask for the latest
            # state: _take_commit_snapshot).
            self._end_snapshot(now=False, keep_adopted=self._end_poll, give=False)
            if self._finished_unpolled:
                # Whether ZODB polls at the end of a transaction (implicit
                # transactions): then the next commit begins this poll's
                # snapshot.
                self._finished_unpolled = False
                self._polls_after_commit = self._end_poll
            prev = self._polled_tid
            changes = self._start_snapshot(prev)
            self._between, self._end_poll = self._end_poll, False
            if self._between:
                # Between transactions: ended once unused (idle.py).
                idle.ender.due(self, idle.IDLE_BETWEEN,
                               self._counters.loads)
            cursor = self._load_cursor
            self._counters.polls += 1
            if self._stale is not None:
                if not self._follow_stale:
                    # Loads raise ReadConflictError until a poll finds the
                    # replica caught up; the changes since ``prev`` are
                    # reported then.
                    return []
                return self._go_back()
            new = self._polled_tid = self._snapshot_tid
            own, self._own_tids = self._own_tids, set()
            if prev is None or new == prev:
                self._advance_cache(cursor, None, new, ())
                return []
            self._advance_cache(cursor, prev, new, changes)
            changed = [p64(oid) for oid, tid in changes if tid not in own]
            self._counters.invalidations += len(changed)
            return changed

    def _go_back(self):
        """Go on from a snapshot older than what this instance saw: every
        cached object goes (poll_invalidations returns None for ZODB to
        drop its own)."""
        new, seen = self._stale
        server = self._adapter.connmanager.server_of(self._load_conn)
        if server is None:
            log.warning('%s: the database went back from %s to %s (restored '
                        'or replaced?): every cached object is dropped',
                        self._name, tid_repr(p64(seen)), tid_repr(p64(new)))
        else:
            log.warning('%s: the replica %s is at %s, behind %s that this '
                        'connection already saw: going on from its state '
                        '(revert-when-stale), every cached object dropped',
                        self._name, server, tid_repr(p64(new)),
                        tid_repr(p64(seen)))
        self._stale = None
        self._seen_tid = self._polled_tid = new
        self._own_tids = set()
        self._cache.invalidate_all()
        self._advance_cache(self._load_cursor, None, new, ())
        return None

    def _advance_cache(self, cursor, prev, new, changes):
        """Tell the shared cache what changed up to ``new``; when this
        instance's list does not reach back to the cache's horizon (or
        there is none), ask the database for the missing range."""
        cache = self._cache
        if prev is not None and cache.advance(prev, new, changes):
            return
        horizon = cache.horizon
        if horizon is None:
            try:
                cache.set_horizon(new)
            except ValueError:   # another instance set it meanwhile
                self._advance_cache(cursor, None, new, ())
        elif horizon < new:
            cache.advance(horizon, new, self._adapter.poller.changes(
                cursor, horizon, new))

    def sync(self, force=True):
        with self._lock:
            if force:
                # ZODB polls right after (newTransaction): the ROLLBACK
                # goes with the poll's round trip.
                self._end_snapshot(now=False, give=False)
                self._end_poll = False
            else:
                # ZODB's poll at the end of a transaction follows.
                self._end_poll = True

    def afterCompletion(self):
        # End the read transaction so that no database session sits idle
        # inside one while the application does something else: without
        # waiting, for ZODB usually polls right after (relstorage.storage.idle).
        # (Not the snapshot a commit began for that poll.)
        self._unless_idle_thread(
            lambda: self._leave_snapshot(keep_adopted=True))
