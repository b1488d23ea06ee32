"""The database connections of a root storage and its instances.

Without a bound (max-connections 0, the default) every instance opens its
own load connection at its first snapshot and its own store connection at
its first commit, and keeps both until it is released: no commit or
snapshot ever waits for another instance.  ``Connections`` then only
counts them.

With max-connections N the process never holds more than N connections
for its instances and its object-id reservations.  An instance then
gives its connections back whenever it is not using them: the load
connection when its snapshot ends (a ROLLBACK that was put off travels
with the connection, and goes with the next snapshot's start on whichever
instance takes it), the store connection when its commit ends.  The
snapshot of ZODB's poll at the end of a transaction keeps its connection
until the ZODB connection is closed, or until the idle thread ends it
unread (``relstorage.storage.idle``).  A caller at the cap waits up to
max-connections-wait seconds, then gets MaxConnectionsError.

**Why the levels.**  An instance may hold one connection (its snapshot)
and need a second (its commit begins, or reads the latest data, before
the snapshot ends), and then a third for a moment (a block of object ids,
reserved in autocommit on a connection of the pool).  If every connection
went to first takers, all of them could wait for a second one that none
gives back, until the timeout.  So a taker that holds ``held`` connections
may only use what leaves ``2 - held`` of them for others: first
connections stop two short of the cap, second ones one short, and an
object-id reservation, which holds its connection for one round trip
without waiting for anything else, may use the last.  Whoever holds a
connection can then always finish: max-connections is at least 3.

Callers wait for different levels, so a connection given back wakes all
of them (``notify_all``): woken alone, a first taker that still cannot go
on would swallow the wake-up of a commit that could, and with every
holder waiting nothing would be given back until the commit's timeout (a
busy benchmark saw db.open fail with MaxConnectionsError after 30 s).
What a finaliser gives back (``give(locked=False)``) wakes nobody: the
waiters look for it at least every ``RECHECK`` seconds.

Nothing here waits while holding the pool's lock, and giving a connection
back never touches the network: ZODB calls ``release`` and ``close`` of
an instance under its database's lock, and a server that stopped
answering must not hang every thread of the process there.  Connections
are opened, and put-off ROLLBACKs sent (by the idle thread,
``relstorage.storage.idle``), outside the lock.
"""
import collections
import threading
import time

from relstorage.errors import MaxConnectionsError
from relstorage.storage import idle

#: The roles a connection is opened for (IConnectionManager's open_load,
#: open_store).
LOAD = 'load'
STORE = 'store'

#: The longest a waiter sleeps before it looks again for a connection
#: given back by a finaliser (which cannot wake it).
RECHECK = 1.0


class Pooled:
    """A connection between uses: what it was opened for, whether it has
    the staging table, and whether its last snapshot's ROLLBACK is still
    due."""

    __slots__ = ('conn', 'cursor', 'kind', 'staged', 'rollback_due')

    def __init__(self, conn, cursor, kind, staged, rollback_due=False):
        self.conn = conn
        self.cursor = cursor
        self.kind = kind
        self.staged = staged
        self.rollback_due = rollback_due


class Connections:
    """The connections of one root storage and its instances (see the
    module docstring); ``size`` 0: no bound."""

    def __init__(self, connmanager, size=0, wait=30.0):
        self._cm = connmanager
        self.size = size
        self.wait = wait
        self._cond = threading.Condition(threading.Lock())
        self._idle = []        # Pooled, the most recently given back last
        self._open = 0         # connections open (idle ones included)
        # Given back where the lock may not be taken (``__del__`` of an
        # instance, which the garbage collector may run inside ``take``):
        # taken into _idle at the next take.  deque.append is atomic.
        self._returned = collections.deque()
        # After close(): what is given back is closed.
        self._closed = False
        # Figures (metrics.snapshot).
        self.opened = 0
        self.waits = 0
        self.wait_seconds = 0.0
        self.timeouts = 0
        self.most_open = 0

    @property
    def bounded(self):
        return self.size > 0

    def interchangeable(self):
        """Whether a connection opened for one role may serve the other:
        the server is the same (no replica lists) and a load connection
        can be made fit for committing (``prepare_store``)."""
        cm = self._cm
        return (not cm.uses_replicas
                and getattr(cm, 'prepare_store', None) is not None)

    def take(self, kind, held=0):
        """A connection for ``kind`` (LOAD or STORE) as a Pooled, for a
        caller holding ``held`` connections of this pool already (2 for a
        reservation of object ids).  Opens one when none is idle; at the
        cap, waits at most ``wait`` seconds (MaxConnectionsError)."""
        if not self.bounded:
            return self._new(kind)
        limit = self.size - max(0, 2 - held)
        deadline = stale = None
        with self._cond:
            while True:
                self._take_returned()
                if self._open - len(self._idle) < limit:
                    entry = self._pick(kind)
                    if entry is None and self._open >= self.size:
                        # Full of idle connections of the other role: one
                        # gives way, its slot passing to the new one.
                        stale = self._idle.pop(0)
                    elif entry is None:
                        self._open += 1
                        self.most_open = max(self.most_open, self._open)
                    break
                now = time.monotonic()
                if deadline is None:
                    started, deadline = now, now + self.wait
                    self.waits += 1
                if now >= deadline:
                    self.timeouts += 1
                    self.wait_seconds += now - started
                    raise MaxConnectionsError(
                        f'all {self.size} connections of max-connections '
                        f'were in use for {self.wait:g}s '
                        f'(max-connections-wait); raise max-connections, '
                        f'or run fewer threads per process')
                self._cond.wait(min(deadline - now, RECHECK))
            if deadline is not None:
                self.wait_seconds += time.monotonic() - started
        if entry is not None:
            return entry
        if stale is not None:
            self._close(stale)
        try:
            return self._new(kind, counted=True)
        except BaseException:
            with self._cond:
                self._open -= 1
                self._cond.notify_all()
            raise

    def _pick(self, kind):
        """An idle connection for ``kind`` (the caller holds the lock),
        the one given back last first: its server-side caches are warm."""
        idle_ = self._idle
        for i in range(len(idle_) - 1, -1, -1):
            if idle_[i].kind == kind:
                return idle_.pop(i)
        if idle_ and self.interchangeable():
            return idle_.pop()
        return None

    def _take_returned(self):
        while self._returned:
            self._idle.append(self._returned.popleft())

    def _new(self, kind, counted=False):
        cm = self._cm
        conn, cursor = cm.open_load() if kind == LOAD else cm.open_store()
        self.opened += 1
        if not counted:
            with self._cond:
                self._open += 1
                self.most_open = max(self.most_open, self._open)
        return Pooled(conn, cursor, kind, kind == STORE)

    def give(self, entry, locked=True):
        """Take back a connection the caller no longer uses (never a
        network round trip).  ``locked`` False: from where the pool's lock
        may already be held by this thread (a finaliser)."""
        if not self.bounded:
            self.discard(entry.conn, entry.cursor)
            return
        if not locked:
            if self._closed:
                self._close(entry)
            else:
                self._returned.append(entry)
            return
        with self._cond:
            closed = self._closed
            if not closed:
                self._idle.append(entry)
                self._cond.notify_all()
        if closed:
            # (An instance released after its root storage closed.)
            self._close(entry)
        elif entry.rollback_due:
            # Not idle inside a transaction for long (idle.py).
            idle.ender.due(self)

    def discard(self, conn, cursor, rollback=True):
        """Close a connection of this pool that is not given back (gone,
        or replaced; see IConnectionManager.close for ``rollback``)."""
        with self._cond:
            self._open -= 1
            self._cond.notify_all()
        self._cm.close(conn, cursor, rollback)

    def _close(self, entry):
        try:
            self._cm.close(entry.conn, entry.cursor, rollback=False)
        except Exception:
            pass

    def _end_idle_snapshot(self, loads=None):
        """Called by the idle thread: send the ROLLBACKs still due on idle
        connections (each taken out of the pool while it is sent)."""
        with self._cond:
            self._take_returned()
            due = [e for e in self._idle if e.rollback_due]
            for entry in due:
                self._idle.remove(entry)
        for entry in due:
            entry.rollback_due = False
            try:
                self._cm.rollback(entry.conn, entry.cursor)
            except Exception:
                self.discard(entry.conn, entry.cursor)
                continue
            with self._cond:
                if not self._closed:
                    self._idle.append(entry)
                    self._cond.notify_all()
                    continue
            self._close(entry)     # the storage closed meanwhile

    def stats(self):
        """``{'open', 'busy', 'idle', 'opened', 'waits', 'wait_seconds',
        'timeouts', 'most_open', 'max'}``."""
        with self._cond:
            idle_ = len(self._idle) + len(self._returned)
            return {'max': self.size, 'open': self._open,
                    'busy': self._open - idle_, 'idle': idle_,
                    'opened': self.opened, 'most_open': self.most_open,
                    'waits': self.waits,
                    'wait_seconds': self.wait_seconds,
                    'timeouts': self.timeouts}

    def __del__(self):
        # A root storage dropped without close(): its idle connections go
        # with it, as its instances' (closed by their __del__) do.
        try:
            for entry in [*self._idle, *self._returned]:
                self._close(entry)
        except Exception:   # interpreter shutdown
            pass

    def close(self):
        """The root storage is closing: close the idle connections, and
        those given back from now on."""
        self._closed = True
        self.close_idle()

    def close_idle(self):
        """Close the idle connections, without a round trip: the root
        storage is closing, or a connection turned out to be gone (the
        server restarted: the idle ones went with it)."""
        with self._cond:
            self._take_returned()
            entries, self._idle = self._idle, []
            self._open -= len(entries)
            self._cond.notify_all()
        for entry in entries:
            self._close(entry)


class PooledConnectionMethods:
    """A storage instance's side: taking its load and store connections
    from ``self._pool`` and giving them back.  A mixin of
    ``relstorage.storage.RelStorage``, whose ``_init_instance`` sets the
    attributes used here."""

    def _close_connections(self, locked=True):
        """Give the connections back (max-connections), or close them
        without waiting for the server: ZODB releases instances under its
        database's lock, where a server that stopped answering must not
        hang the process.  ``locked`` False: from a finaliser."""
        if self._pool.bounded:
            self._end_snapshot(now=False, give=False)
            self._give_load(locked)
            if self._txn is not None or self._batch_from is not None:
                self._store_rollback_due = True
            self._give_store(locked, force=True)
        self._drop_load_connection(rollback=False)
        self._drop_store_connection(rollback=False)

    def _held(self):
        """How many connections of the pool this instance holds."""
        return (self._load_conn is not None) + (self._store_conn is not None)

    def _take_load(self):
        entry = self._pool.take(LOAD, self._held())
        self._load_conn, self._load_cursor = entry.conn, entry.cursor
        self._load_staged = entry.staged
        self._rollback_due = entry.rollback_due

    def _give_load(self, locked=True):
        """Give the load connection back to a bounded pool when no
        snapshot is open on it (its ROLLBACK may still be due)."""
        if (self._pool.bounded and self._load_conn is not None
                and self._snapshot_tid is None and self._adopted is None):
            entry = Pooled(self._load_conn, self._load_cursor, LOAD,
                           self._load_staged, self._rollback_due)
            self._load_conn = self._load_cursor = None
            self._load_staged = self._rollback_due = False
            self._pool.give(entry, locked)

    def _take_store(self, short=False):
        # (A short use waits for nothing while it holds the connection:
        # like a reservation of object ids, it may take the pool's last.)
        entry = self._pool.take(STORE, 2 if short else self._held())
        self._store_conn, self._store_cursor = entry.conn, entry.cursor
        self._store_staged = entry.staged
        self._store_rollback_due = entry.rollback_due

    def _give_store(self, locked=True, force=False):
        """Give the store connection back to a bounded pool outside a
        commit (and a restore batch), or with ``force``."""
        if (self._pool.bounded and self._store_conn is not None and (
                force or (self._txn is None and self._batch_from is None))):
            entry = Pooled(self._store_conn, self._store_cursor, STORE,
                           self._store_staged, self._store_rollback_due)
            self._store_conn = self._store_cursor = None
            self._store_staged = self._store_rollback_due = False
            self._pool.give(entry, locked)
