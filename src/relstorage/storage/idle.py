"""Ending the read snapshots that nothing else will end soon.

Ending a snapshot costs a ROLLBACK, and on a network every statement the
application waits for costs a round trip.  So the end of a transaction
(``afterCompletion``), its vote and its abort do not send the ROLLBACK:
they leave it due, and it travels in the round trip of the next snapshot's
start.  In ZODB's usual mode (implicit transactions) that start follows at
once: ``afterCompletion`` is followed by a poll.

When nothing follows (explicit transactions, a thread that goes quiet
after a commit), the database session would stay idle inside its
transaction, holding back what PostgreSQL's VACUUM and InnoDB's purge may
remove.  One daemon thread per process ends such snapshots ``IDLE_END``
seconds after they were left: it has the due ROLLBACK sent (by a worker,
below), unless the storage instance is busy at that moment (then the
instance's own next statement carries it).  The worker holds the
instance's lock meanwhile; a close or release of the instance then leaves
its work to the worker rather than wait for a server that may have
stopped answering (``snapshot.py``).

The poll ZODB makes at the end of a transaction (implicit transactions)
opens a snapshot too, for an application that reads on without
``transaction.begin()``; in a server between requests nothing reads it.
The thread ends it after ``IDLE_BETWEEN`` seconds if nothing has read
from it; one that served a read is the view of a transaction the
application began without ``begin()``, which a pack must respect, and
stays open.  A read after the end starts a snapshot again, in which what
others changed since the poll is *moved* (``snapshot.py``): ZODB still
holds the polled view.

A commit's last round trip begins the snapshot of that poll
(``snapshot.py``'s ``_take_commit_snapshot``: the load and store
connections swap roles); where no poll takes it (explicit transactions),
the thread ends it after ``IDLE_END``, and it sends the ROLLBACK of the
snapshot the store connection held as the load connection, unless a
commit's first statement carried it.

The thread waits on a condition while nothing is due, and keeps only weak
references to the instances.  It sends nothing itself: it hands each
instance to a worker thread.  A ROLLBACK sent to a server that stopped
answering waits until TCP gives up (minutes), holding its worker; the
instances of the process's other storages, on other servers, must not
wait with it, their sessions idle inside a transaction.  So when every
worker has been inside one call for ``STUCK`` seconds, the thread starts
another (at most ``MOST_WORKERS``); a worker with nothing to do for
``WORKER_IDLE`` seconds ends, but the last.
"""
import collections
import logging
import os
import threading
import time
import weakref

log = logging.getLogger(__name__)

#: Seconds a snapshot left with its ROLLBACK due may stay open before the
#: thread ends it.
IDLE_END = 0.1

#: Seconds after which the thread ends the snapshot that ZODB's poll at
#: the end of a transaction opened, if nothing read from it (see below).
IDLE_BETWEEN = 0.4

#: Seconds every worker may spend in one call before another starts.
STUCK = 1.0

#: Workers at most: one per server that stopped answering, and one more.
MOST_WORKERS = 8

#: Seconds a worker waits for work before it ends (unless it is the last).
WORKER_IDLE = 60.0


class _Ender:

    def __init__(self):
        lock = threading.Lock()
        # The thread waits on ``_ready``, the workers on ``_handed``.
        self._ready = threading.Condition(lock)
        self._handed = threading.Condition(lock)
        self._due = {}      # id(instance) -> (deadline, weakref, loads)
        self._thread = None
        # When the thread wakes next on its own (inf: only when told).  A
        # deadline after it needs no wake-up: every commit sets one, and
        # waking the thread for each handed the GIL over and back (0.15 ms
        # a commit, a tenth of zodbconvert's time on small transactions).
        self._wake_at = float('inf')
        self._calls = collections.deque()   # (weakref, loads) handed over
        self._workers = 0
        self._inside = {}                   # worker -> when its call began

    def due(self, instance, delay=None, loads=None, keep=False):
        """``delay`` seconds from now (default ``IDLE_END``) call the
        instance's ``_end_idle_snapshot(loads)``: it ends a snapshot whose
        ROLLBACK is still due, or (``loads``: the instance's load count
        now) a snapshot between transactions that served no load since.
        A new call puts the old one's time off, unless ``keep``: then a
        time set already stays."""
        deadline = time.monotonic() + (IDLE_END if delay is None else delay)
        with self._ready:
            if keep and id(instance) in self._due:
                return
            self._due[id(instance)] = (deadline, weakref.ref(instance),
                                       loads)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name='relstorage-idle-snapshots',
                    daemon=True)
                self._thread.start()
            if deadline < self._wake_at:
                self._wake_at = deadline
                self._ready.notify()

    def pending(self):
        """How many instances the thread will look at (for tests)."""
        with self._ready:
            return len(self._due) + len(self._calls)

    def workers(self):
        """How many workers there are (for tests)."""
        with self._ready:
            return self._workers

    def _run(self):
        with self._ready:
            while True:
                now = time.monotonic()
                if self._due:
                    soonest = min(entry[0] for entry in self._due.values())
                    if soonest <= now:
                        # What becomes due while the workers are at it is
                        # seen at the next turn, without a wake-up.
                        ready = [key for key, entry in self._due.items()
                                 if entry[0] <= now]
                        self._calls.extend(self._due.pop(key)[1:]
                                           for key in ready)
                        self._handed.notify(len(ready))
                        continue
                else:
                    soonest = float('inf')
                wait_until = soonest
                if (self._calls and self._workers == len(self._inside)
                        and self._workers < MOST_WORKERS):
                    # Every worker inside a call (none free or starting):
                    # another starts once the latest of those calls has
                    # taken ``STUCK`` seconds.
                    latest = max(self._inside.values(), default=None)
                    if latest is None or now - latest >= STUCK:
                        self._start_worker()
                        continue
                    wait_until = min(wait_until, latest + STUCK)
                self._wake_at = wait_until
                if wait_until == float('inf'):
                    self._ready.wait()
                else:
                    self._ready.wait(wait_until - now)

    def _start_worker(self):
        self._workers += 1
        threading.Thread(target=self._work, daemon=True,
                         name='relstorage-idle-snapshots-worker').start()

    def _work(self):
        me = threading.current_thread()
        with self._ready:
            while True:
                while not self._calls:
                    handed = self._handed.wait(WORKER_IDLE)
                    if not handed and not self._calls and self._workers > 1:
                        self._workers -= 1
                        return
                ref, loads = self._calls.popleft()
                self._inside[me] = time.monotonic()
                if self._calls:
                    # More to do: the thread times this call.
                    self._ready.notify()
                self._ready.release()
                try:
                    instance = ref()
                    if instance is not None:
                        instance._end_idle_snapshot(loads)
                except Exception:
                    # (It catches what the database raises: this is a bug.
                    # The worker goes on: the thread counts on it.)
                    log.exception('ending an idle snapshot failed')
                finally:
                    self._ready.acquire()
                    del self._inside[me]

    def _forget(self):
        """In a child process after fork: the threads did not come along."""
        self.__init__()


#: The process's one ender.
ender = _Ender()

if hasattr(os, 'register_at_fork'):
    os.register_at_fork(after_in_child=ender._forget)
