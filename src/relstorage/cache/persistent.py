"""The persistent local cache (``cache-local-dir``).

On close the root storage writes its shared cache to a file in
``cache-local-dir``; on open it reads the file back and keeps only what is
still current: one query for the oids changed since the file's horizon,
plus one query that checks a sample of the remaining entries, which catches
a file that belongs to a database recreated at the same address.  A file
that is missing, damaged or of another database is ignored (with a warning
for the last two): the cache then simply starts cold.

A file of more than ``BACKGROUND_BYTES`` is checked so before the
storage opens, but its entries are put into the cache by a thread
afterwards, so that a process serves its first request without waiting
for them (a million entries take seconds, most of it the memory of their
copies, fresh to the process).  The thread puts them in by ``STEP``, each
step under the cache's lock; meanwhile the storage's instances load and
poll as usual.  An entry goes in as current through the cache's horizon:
before a step, when a poll moved the horizon on, the thread asks the
database which objects changed up to there, and leaves those out; a
cache emptied meanwhile (the database went back in time) gets nothing
more from it.  The storage's close stops the thread; the file is then
not rewritten unless it was read back whole (it stays as valid as it
was).  A fork waits for the thread, whose lock the child could not take.
"""
import hashlib
import logging
import os
import random
import struct
import threading
import time
import weakref
import zlib

from relstorage.cache.file import open_file

log = logging.getLogger(__name__)

#: Entries whose current tid is checked against the database at start-up,
#: drawn from the file's first SAMPLE_FROM.
SAMPLE = 100
SAMPLE_FROM = 10000

#: A larger file is read back in the background (see above).
BACKGROUND_BYTES = 64 * 2**20

#: Entries put in per step of a read back in the background (about 3 ms
#: under the cache's lock), and the seconds the thread waits before each
#: step.  The wait lets the process's own threads in: without it the
#: thread took the lock again as soon as it let it go, and a load waited
#: for the whole read back.
STEP = 2000
PAUSE = 0.001


def identity(storage):
    """What names the database in the file: the adapter's description
    (never a password) and the history mode."""
    mode = 'hp' if storage._options.keep_history else 'hf'
    return f'{storage._adapter.describe()} {mode}'


def path_for(storage):
    name = hashlib.sha256(identity(storage).encode('utf-8')).hexdigest()
    return os.path.join(storage._options.cache_local_dir,
                        f'relstorage-{name[:20]}.cache')


def load(storage):
    """Fill the root storage's cache from its file, if there is one: now,
    or the entries of a large file in the background once it is checked.
    Returns how many entries were read back (0 when that goes on in the
    background)."""
    path = path_for(storage)
    started = time.monotonic()
    found = open_file(path, identity(storage))
    if found is None:
        return 0
    saved = found.horizon
    adapter = storage._adapter
    cm = adapter.connmanager
    usable = True
    conn, cursor = cm.open_load()
    try:
        cm.begin_snapshot(conn, cursor)
        current = adapter.poller.last_tid(cursor)
        changed = set()
        if current >= saved:
            changed = {oid for oid, _ in adapter.poller.changes(
                cursor, saved, current)}
            # Drawn from the most valuable entries (the file's first): a
            # file of another database differs in any of them.
            kept = [(oid, tid) for oid, tid, _ in found.records(SAMPLE_FROM)
                    if oid not in changed]
            sample = random.sample(kept, min(SAMPLE, len(kept)))
            if sample:
                now = adapter.mover.current_tids(
                    cursor, [oid for oid, _ in sample])
                # Gone (a pack collected it): drop it.  Another revision
                # without a change since the horizon: the file is not of
                # this database.
                changed.update(oid for oid, _ in sample if oid not in now)
                stale = [oid for oid, tid in sample
                         if oid in now and now[oid] != tid]
                if stale:
                    log.warning(
                        'the local cache file %s does not match the database '
                        '(%d of %d sampled objects differ); not using it',
                        path, len(stale), len(sample))
                    usable = False
    except (ValueError, struct.error, zlib.error) as e:
        log.warning('Ignoring persistent cache file %s: %s', path, e)
        return 0
    finally:
        cm.close(conn, cursor)
    cache = storage._cache
    if (usable and current >= saved and len(found.data) > BACKGROUND_BYTES
            # (Not into a cache that compresses: LocalCache.restore_file.)
            and getattr(cache, '_compress', None) is False
            and len(cache) == 0):
        log.info('local cache: %s checked in %.2fs (%d changed since it was '
                 'written); its %d objects are read back in the background',
                 path, time.monotonic() - started, len(changed), found.count)
        # The cache's horizon starts at the file's check, so that no
        # poll's change list is missed while the thread runs.
        if cache.horizon is None:
            cache.set_horizon(current)
        warmer = storage._cache_warmer = Warmer(
            storage, path, found, current, changed, started)
        warmer.start()
        return 0
    try:
        if usable:
            restored = cache.restore_file(found, current, changed)
        else:
            restored = cache.restore(saved, (), current, changed)
    except (ValueError, struct.error, zlib.error) as e:
        log.warning('Ignoring persistent cache file %s: %s', path, e)
        return 0
    log.info('local cache: %d of %d objects read back from %s in %.2fs '
             '(%d changed since it was written)', restored, found.count,
             path, time.monotonic() - started, len(changed))
    return restored


class Warmer:
    """The thread that reads a large file back (see the module's text):
    the entries of ``found`` current through ``known`` but those of
    ``changed``."""

    #: For tests: called before each step (in the thread).
    before_step = None

    def __init__(self, storage, path, found, known, changed, started):
        self._adapter = storage._adapter
        self._cache = storage._cache
        self._name = storage._name
        self._path = path
        self._work = (found, known, changed, started)
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self.run, name='relstorage-cache-read-back', daemon=True)
        #: Entries read back, once the file was read back whole.
        self.restored = None
        #: How often a poll had moved the horizon on before a step.
        self.caught_up = 0
        # The thread's connection, opened at its first catch-up.
        self._conn = self._cursor = None

    def start(self):
        _running.add(self)
        self._thread.start()

    def run(self):
        found, known, changed, started = self._work
        self._work = None
        try:
            restored = self._fill(found, known, changed)
            if restored is not None:
                log.info('local cache: %d of %d objects read back from %s in '
                         '%.2fs, in the background (%d changed since it was '
                         'written)', restored, found.count, self._path,
                         time.monotonic() - started, len(changed))
                self.restored = restored
        except Exception:
            log.exception('%s: reading the local cache file %s back failed',
                          self._name, self._path)
        finally:
            if self._conn is not None:
                self._adapter.connmanager.close(self._conn, self._cursor)
                self._conn = self._cursor = None
            _running.discard(self)

    def _fill(self, found, known, changed):
        """Put the file's entries in, step by step; returns how many, or
        None when stopped before the end."""
        from relstorage.cache.local import LAYOUT
        from relstorage.cache.warm import restore_step
        cache = self._cache
        emptied = cache.emptied
        pos, left, restored = found.start, found.count, 0
        while left:
            if self._stop.wait(PAUSE):
                return None
            if self.before_step is not None:
                self.before_step()
            with cache._lock:
                horizon = cache._horizon
                if (cache.emptied != emptied or horizon is None
                        or horizon < known):
                    # Emptied: the database went back in time (or another
                    # took its place); the file is of the one before.
                    return None
                if horizon == known:
                    count = min(left, STEP)
                    added, pos, full = restore_step(
                        cache, LAYOUT, found, pos, count, known, changed,
                        live=True)
                    restored += added
                    left -= count
                    if full:
                        return restored
                    continue
            # A poll moved the horizon on: what changed up to it stays
            # out, and what goes in is current through it.
            changed.update(oid for oid, _ in self._changes(known, horizon))
            known = horizon
            self.caught_up += 1
        if pos != found.end:
            raise ValueError('record lengths do not add up')
        return restored

    def _changes(self, after, until):
        """What changed in ``(after, until]``: a snapshot begun and ended
        on the thread's one connection (a busy site's polls move the
        horizon at nearly every step)."""
        cm = self._adapter.connmanager
        if self._conn is None:
            self._conn, self._cursor = cm.open_load()
        cm.begin_snapshot(self._conn, self._cursor)
        try:
            return self._adapter.poller.changes(self._cursor, after, until)
        finally:
            cm.rollback(self._conn, self._cursor)

    def stop(self):
        """Stop the thread and wait for it; whether the file was read back
        whole."""
        self._stop.set()
        self.wait()
        return self.restored is not None

    def wait(self, timeout=None):
        if self._thread.ident is not None:
            self._thread.join(timeout)


#: The threads reading a file back; a fork waits for them.
_running = weakref.WeakSet()


def _before_fork():
    for warmer in list(_running):
        warmer.wait()


if hasattr(os, 'register_at_fork'):
    os.register_at_fork(before=_before_fork)


def wait(storage, timeout=None):
    """Wait until the root storage's cache file is read back (if that
    goes on in the background); the entries read back, or None."""
    warmer = getattr(storage, '_cache_warmer', None)
    if warmer is None:
        return None
    warmer.wait(timeout)
    return warmer.restored


def save(storage):
    """Write the root storage's cache to its file; failures are logged,
    never raised (closing must not fail because of the cache)."""
    path = path_for(storage)
    warmer = getattr(storage, '_cache_warmer', None)
    if warmer is not None and not warmer.stop():
        # Stopped before the file was read back whole: it stays, as valid
        # as it was, rather than be replaced by a part of it.
        log.info('local cache: %s left as it was (closed while it was '
                 'being read back)', path)
        return 0
    try:
        # Private: the file holds object states.
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        count = storage._cache.save(path, identity(storage))
    except (OSError, ValueError) as e:
        log.warning('cannot write the local cache to %s: %s', path, e)
        return 0
    log.info('local cache: %d objects written to %s', count, path)
    return count
