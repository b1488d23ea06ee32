"""Packing: remove what no one can reach any more, without stopping writers.

The pipeline, on a database connection of its own:

1. **Analysis** (one read snapshot; writes only helper tables): choose the
   pack tid, record every object's newest revision at or before it, and --
   with garbage collection -- store the references of those revisions in a
   helper table and walk the graph from the root and from everything written
   after the pack tid.  Objects not reached, and objects deleted as of the
   pack tid, are recorded as garbage.
2. **Deletion**, in small batches, each its own short write transaction
   under the commit lock, with a pause after each batch as long as the
   batch took (a 50% duty cycle), so that other clients keep committing
   while a pack runs.
   History-preserving: revisions older than each object's kept revision go,
   and every revision up to the pack tid of a garbage object.  Then
   transactions up to the pack tid are marked packed (no longer undoable)
   and those left without data are removed.
3. **Blobs.**  The rows that tie removed revisions to their blobs went with
   them; the chunks of blobs no revision refers to any more (also those a
   pack interrupted before this step left) are removed in batches of their
   own, outside the commit lock.  Then, with a blob-dir, the files of
   revisions at or before the pack tid that no longer exist are removed
   from it (the shared directory, or this machine's cache).

Progress is logged at INFO level.
"""
import logging
import time

from ZODB.utils import u64

from relstorage.tids import tid_for_time

log = logging.getLogger(__name__)

#: Objects per analysis page and per deletion batch.
BATCH = 1000
#: Blobs whose chunks one transaction removes.
BLOB_BATCH = 100
#: Fraction of wall time the deletion phase may keep the database busy.
DUTY_CYCLE = 0.5
#: Seconds between progress messages.
PROGRESS_EVERY = 5.0


class _Progress:

    def __init__(self, what, total=None):
        self.what = what
        self.total = total
        self.done = 0
        self._next = time.monotonic() + PROGRESS_EVERY

    def add(self, count):
        self.done += count
        if time.monotonic() >= self._next:
            self._next = time.monotonic() + PROGRESS_EVERY
            of = f' of {self.total}' if self.total is not None else ''
            log.info('pack: %s: %d%s', self.what, self.done, of)


def pack(storage, t, referencesf, gc=True):
    """Pack ``storage``'s database to time ``t`` (seconds since the
    epoch)."""
    adapter = storage._adapter
    cm = adapter.connmanager
    conn, cursor = cm.open_store()
    try:
        with cm.translate():
            pack_tid = _analyse(adapter, conn, cursor, t, referencesf, gc)
            if pack_tid is not None:
                _delete(adapter, conn, cursor, pack_tid)
            # Also without a pack tid: chunks an interrupted pack left.
            _remove_blob_chunks(adapter, conn, cursor)
            if pack_tid is not None and storage._blobs is not None:
                removed = storage._blobs.sweep(cursor, pack_tid)
                log.info('pack: %d blob files removed from %s', removed,
                         storage._blobs.directory)
    finally:
        cm.close(conn, cursor)
    # States remembered for conflict resolution may be of packed revisions.
    storage._recent.clear()


def _analyse(adapter, conn, cursor, t, referencesf, gc):
    cm = adapter.connmanager
    packer = adapter.packer
    # Helper tables first: a read-only snapshot may not create tables.
    packer.prepare(cursor)
    cm.begin_analysis(conn, cursor)
    last = adapter.poller.last_tid(cursor)
    pack_tid = min(tid_for_time(t), last)
    if pack_tid <= 0:
        cm.rollback(conn, cursor)
        log.info('pack: nothing committed before the pack time')
        return None
    started = time.monotonic()
    total = packer.fill(cursor, pack_tid)
    log.info('pack: %d objects have revisions up to the pack time', total)
    reachable = _reachable(packer, cursor, pack_tid, referencesf, total) \
        if gc else None
    garbage = 0
    after = -1
    while True:
        rows = packer.pack_oids(cursor, after, BATCH)
        if not rows:
            break
        after = rows[-1][0]
        found = [zoid for zoid, deleted in rows
                 if deleted or (reachable is not None
                                and zoid not in reachable)]
        packer.add_garbage(cursor, found)
        garbage += len(found)
    cm.commit(conn, cursor)
    log.info('pack: analysis done in %.1fs: %d of %d objects are garbage',
             time.monotonic() - started, garbage, total)
    return pack_tid


def _reachable(packer, cursor, pack_tid, referencesf, total):
    """The set of zoids reachable from the root as of the pack tid, or
    kept alive by revisions written after it."""
    reachable = {0}
    after = (-1, -1)
    while True:
        rows = packer.newer_states(cursor, pack_tid, after, BATCH)
        if not rows:
            break
        after = rows[-1][:2]
        for zoid, _, state in rows:
            reachable.add(zoid)
            if state is not None:
                reachable.update(u64(ref) for ref in referencesf(state))
    progress = _Progress('references analysed', total)
    after = -1
    while True:
        rows = packer.kept_states(cursor, after, BATCH)
        if not rows:
            break
        after = rows[-1][0]
        packer.add_refs(cursor, [
            (zoid, u64(ref))
            for zoid, state in rows for ref in referencesf(state)])
        progress.add(len(rows))
    frontier = list(reachable)
    while frontier:
        chunk = frontier[-500:]
        del frontier[-500:]
        for ref in packer.refs_of(cursor, chunk):
            if ref not in reachable:
                reachable.add(ref)
                frontier.append(ref)
    return reachable


def _write(adapter, conn, cursor, apply, commit_lock=True):
    """``apply()`` in a write transaction of its own, committed (rolled
    back if it raises); under the commit lock unless ``commit_lock`` is
    false."""
    cm = adapter.connmanager
    cm.begin_write(cursor, 'packing')
    try:
        if commit_lock:
            # Under the commit lock no tpc_finish runs at the same time,
            # so the two can never deadlock (InnoDB's gap locks could
            # otherwise make a finish the victim).
            adapter.locker.hold_commit_lock(cursor)
        apply()
        cm.commit(conn, cursor)
    except BaseException:
        cm.rollback(conn, cursor)
        raise


def _pause_after(started):
    """Sleep so that the work since ``started`` keeps to the duty
    cycle."""
    busy = time.monotonic() - started
    time.sleep(busy * (1.0 - DUTY_CYCLE) / DUTY_CYCLE)


def _remove_blob_chunks(adapter, conn, cursor):
    """Remove the chunks of blobs that no revision refers to, a batch per
    transaction.  No commit lock is needed: a blob's chunks belong to one
    revision, and uncommitted ones are invisible here."""
    progress = _Progress('orphaned blobs removed')
    after = -1
    while True:
        blob_ids = adapter.blobs.orphans(cursor, after, BLOB_BATCH)
        if not blob_ids:
            break
        after = blob_ids[-1]
        started = time.monotonic()
        _write(adapter, conn, cursor,
               lambda: adapter.blobs.delete_chunks(cursor, blob_ids),
               commit_lock=False)
        progress.add(len(blob_ids))
        _pause_after(started)
    if progress.done:
        log.info('pack: the data of %d blobs removed', progress.done)


def _delete(adapter, conn, cursor, pack_tid):
    packer = adapter.packer

    def batches(fetch, apply, what):
        progress = _Progress(what)
        after = -1
        while True:
            rows = fetch(cursor, after, BATCH)
            if not rows:
                return
            last = rows[-1]
            after = last[0] if isinstance(last, tuple) else last
            started = time.monotonic()
            _write(adapter, conn, cursor, lambda: apply(rows))
            progress.add(len(rows))
            _pause_after(started)

    batches(packer.garbage,
            lambda zoids: packer.delete_garbage(cursor, zoids, pack_tid),
            'garbage objects removed')
    batches(packer.old_revisions,
            lambda rows: packer.delete_old_revisions(cursor, rows),
            'objects with old revisions removed')
    _write(adapter, conn, cursor, lambda: packer.finish(cursor, pack_tid))
