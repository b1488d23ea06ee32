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
seconds after they were left: it sends the due ROLLBACK itself, unless the
storage instance is busy at that moment (then the instance's own next
statement carries it).  It holds the instance's lock meanwhile; a close
or release of the instance then leaves its work to the thread rather
than wait for a server that may have stopped answering (``snapshot.py``).

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
references to the instances.
"""
import os
import threading
import time
import weakref

#: Seconds a snapshot left with its ROLLBACK due may stay open before the
#: thread ends it.
IDLE_END = 0.1

#: Seconds after which the thread ends the snapshot that ZODB's poll at
#: the end of a transaction opened, if nothing read from it (see below).
IDLE_BETWEEN = 0.4


class _Ender:

    def __init__(self):
        self._ready = threading.Condition(threading.Lock())
        self._due = {}      # id(instance) -> (deadline, weakref)
        self._thread = None
        # When the thread wakes next on its own (inf: only when told).  A
        # deadline after it needs no wake-up: every commit sets one, and
        # waking the thread for each handed the GIL over and back (0.15 ms
        # a commit, a tenth of zodbconvert's time on small transactions).
        self._wake_at = float('inf')

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
            return len(self._due)

    def _run(self):
        while True:
            with self._ready:
                while not self._due:
                    self._wake_at = float('inf')
                    self._ready.wait()
                now = time.monotonic()
                soonest = min(entry[0] for entry in self._due.values())
                if soonest > now:
                    self._wake_at = soonest
                    self._ready.wait(soonest - now)
                    continue
                # Working: what becomes due meanwhile is seen at the next
                # turn, without a wake-up.
                self._wake_at = now
                ready = [key for key, entry in self._due.items()
                         if entry[0] <= now]
                entries = [self._due.pop(key) for key in ready]
            for _, ref, loads in entries:
                instance = ref()
                if instance is not None:
                    instance._end_idle_snapshot(loads)


    def _forget(self):
        """In a child process after fork: the thread did not come along."""
        self._ready = threading.Condition(threading.Lock())
        self._due = {}
        self._thread = None
        self._wake_at = float('inf')


#: The process's one ender.
ender = _Ender()

if hasattr(os, 'register_at_fork'):
    os.register_at_fork(after_in_child=ender._forget)
