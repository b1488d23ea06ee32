"""Packing: remove what no one can reach any more, without stopping writers.

The pipeline, on a database connection of its own, holding the database's
pack lock (one pack at a time; zodbpack and storage.pack alike):

1. **References** (with garbage collection).  The references of each
   object's current revision are read from its pickle once and kept in
   ``object_ref``; each pack first adds the objects written since the
   previous one (the first pack reads them all, in key order; a later
   one in key order too when they are many, else in the order written;
   the next page read by a thread of its own meanwhile), and
   (history-preserving) the kept revisions of objects changed after the
   pack tid, which are no longer current.  Revisions replaced before any
   pack looked are never read: this pack removes them.  Pages are
   committed together with how far the analysis has got (``pack_state``),
   so a pack killed here loses at most one page.
2. **Analysis** (pre-pack).  Choose the pack tid (the pack time, moved
   back before the start of the oldest transaction another session of the
   database still has open, which may hold objects that were reachable when
   it began); record in ``pack_object`` each object's newest revision at
   or before it (history-preserving: objects not written since a pack
   that ran to its end are taken as that pack left them, without reading
   their revisions, when they are most of the database); walk the graph in SQL from the root, from the objects
   written after the pack tid and from what they refer to, a step per
   statement (``pack_reached``).  What is not reached is garbage.  The
   analysis is kept in ``pack_run`` until the deletions are done, so that a
   later pack can use it (pack-skip-prepack) or go on after a stop.
3. **Deletion**, in batches, each its own short write transaction (no
   commit lock: garbage is what no committer can reach, and old revisions
   are rows no committer writes), sized to pack-batch-timeout, with a
   pause after each to keep to pack-duty-cycle (at most pack-max-delay)
   while other clients are committing.
   Before the first batch, and every CATCH_UP_EVERY seconds after, the
   references of revisions committed since the analysis are added, and
   whatever they refer to is reached after all (an undo, or a client
   holding on to an object across transactions).
   Transactions up to the pack tid are marked packed first (undo refuses
   them from then on).  One pass in key order removes the garbage and
   (history-preserving) the revisions older than each kept one; each
   batch records where it got to.
4. **Finish**: transactions left without data are removed, the analysis
   tables emptied; a pack that ran from its analysis to its end, skipping
   no object, leaves its own row in ``pack_run`` for the next to build
   on.  Then blob data no revision refers to any more (also
   what an interrupted pack left), and with a blob-dir the files of removed
   revisions.

Progress goes to a ``Progress`` (the default logs at INFO level); a
progress that asks to stop makes the pack raise ``PackStopped`` at the
next batch boundary.
"""
import functools
import logging
import queue
import threading
import time

from ZODB.utils import u64

from relstorage.adapters.pack import ALL
from relstorage.adapters.pack import FORMAT
from relstorage.adapters.pack import RefsState
from relstorage.errors import LockConflictError
from relstorage.errors import PackError
from relstorage.errors import PackStopped
from relstorage.metrics import PackProgress
from relstorage.progress import Progress
from relstorage.tids import tid_for_time
from relstorage.tids import tid_time

log = logging.getLogger(__name__)

#: Revisions per page of the reference analysis.
PAGE = 2000
#: What was written since the last analysis is read by a scan in key
#: order (_Session._choose_order) when it is at least this many rows and
#: at least one in SCAN_SINCE_SHARE of the objects.
SCAN_SINCE_ROWS = 5 * PAGE
SCAN_SINCE_SHARE = 100
#: Objects in the first deletion batch; later ones are sized to
#: pack-batch-timeout.
FIRST_BATCH = 500
MIN_BATCH, MAX_BATCH = 20, 20000
#: Seconds between two catch-ups of the references during the deletions
#: (each re-reads what was committed since: on a busy database, its
#: containers over and over).
CATCH_UP_EVERY = 5.0
#: Blobs whose chunks one transaction removes.
BLOB_BATCH = 100

#: Times a deletion batch is tried when the database ends its transaction
#: over a conflict (LockConflictError: a deadlock with a committer, or on
#: a Galera cluster a committer's write set applied through another node),
#: with a pause of RETRY_PAUSE seconds times the attempt before the next.
BATCH_ATTEMPTS = 5
RETRY_PAUSE = 0.1
#: The deletion phase's name, by history mode (keep_history).  It counts
#: objects: those removed and (history-preserving) those whose old
#: revisions are removed.
DELETING = {False: 'garbage objects removed',
            True: 'garbage objects and old revisions removed'}


def _when(tid):
    return time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(tid_time(tid)))


def pack(storage, t, referencesf, gc=True, prepack_only=None,
         skip_prepack=None, progress=None):
    """Pack ``storage``'s database to time ``t`` (seconds since the epoch).

    ``prepack_only`` and ``skip_prepack`` default to the storage's
    pack-prepack-only and pack-skip-prepack options.
    """
    options = storage._options
    if prepack_only is None:
        prepack_only = options.pack_prepack_only
    if skip_prepack is None:
        skip_prepack = options.pack_skip_prepack
    root = storage if storage._is_root else storage._root
    progress = PackProgress(progress or Progress(), root._metrics)
    try:
        _pack(storage, t, referencesf, gc, prepack_only, skip_prepack,
              progress)
    except BaseException as e:
        progress.finished(e)
        raise
    progress.finished()


def _pack(storage, t, referencesf, gc, prepack_only, skip_prepack,
          progress):
    with _Session(storage, referencesf, progress) as session:
        if skip_prepack:
            run = session.usable_run()
            progress.note('using the analysis for a pack to %s',
                          _when(run.pack_tid))
        else:
            run = session.analyse(t, gc)
        if run is None:
            # Nothing to pack; still the data of blobs a pack that was
            # stopped left behind.
            session.remove_blob_chunks()
            return
        if prepack_only:
            progress.note('analysis kept for a later pack '
                          '(pack-skip-prepack, zodbpack --use-prepack-state)')
            return
        session.delete(run)
        session.remove_blob_chunks()
        if storage._blobs is not None:
            removed = storage._blobs.sweep(session.cursor, run.pack_tid)
            progress.note('%d blob files removed from %s', removed,
                          storage._blobs.directory)


def check_refs(storage, referencesf, progress=None, limit=1000):
    """Analyse as for a pack to the last transaction (deleting nothing)
    and return up to ``limit`` ``(zoid, to_zoid)`` references of reachable
    objects to objects that do not exist (or are deleted)."""
    progress = progress or Progress()
    with _Session(storage, referencesf, progress) as session:
        run = session.analyse(None, True)
        if run is None:
            return []
        return session.read(lambda: storage._adapter.packer.broken_refs(
            session.cursor, limit))


class _Session:
    """One pack's connection, pack lock and steps."""

    def __init__(self, storage, referencesf, progress):
        self.storage = storage
        self.options = storage._options
        self.adapter = adapter = storage._adapter
        self.packer = adapter.packer
        self.cm = adapter.connmanager
        self.referencesf = referencesf
        self.progress = progress
        self.conn = self.cursor = None
        self._release = None

    def __enter__(self):
        self.conn, self.cursor = self.cm.open_store()
        try:
            with self.cm.translate('packing'):
                self._release = self.packer.try_lock(self.conn, self.cursor)
                if self._release is not None:
                    self.packer.prepare_session(self.cursor)
        except BaseException:
            self.cm.close(self.conn, self.cursor)
            raise
        if self._release is None:
            self.cm.close(self.conn, self.cursor)
            raise PackError(
                f'another pack of {self.cm.describe()} is running; this one '
                f'did nothing')
        return self

    def __exit__(self, *exc_info):
        try:
            if self._release is not None:
                self.cm.rollback(self.conn, self.cursor)
                self._release()
        except Exception:  # the connection may be gone; closing frees it
            pass
        finally:
            self.cm.close(self.conn, self.cursor)

    # -- transactions ------------------------------------------------------

    def write(self, apply):
        """``apply()`` in a write transaction of its own, committed; rolled
        back if it raises.  Returns what ``apply`` returns."""
        cm = self.cm
        with cm.translate('packing'):
            cm.begin_write(self.cursor, 'packing')
            try:
                result = apply()
                cm.commit(self.conn, self.cursor)
            except BaseException:
                cm.rollback(self.conn, self.cursor)
                raise
        return result

    def read(self, apply):
        """``apply()`` in a read-only snapshot, then rolled back."""
        cm = self.cm
        with cm.translate('packing'):
            cm.begin_analysis(self.conn, self.cursor)
            try:
                return apply()
            finally:
                cm.rollback(self.conn, self.cursor)

    def _last_tid(self):
        return self.read(lambda: self.adapter.poller.last_tid(self.cursor))

    def _check_stop(self):
        if getattr(self._release, 'lost', False):
            # A lease (MySQL's pack lock) that expired: another pack may
            # be running.
            raise PackError(
                f'the pack lost its lock on {self.cm.describe()} (the '
                f'database was out of reach for longer than the lock\'s '
                f'lease); it stopped at a batch boundary, and what it '
                f'removed stays removed')
        if self.progress.stop_requested():
            raise PackStopped(
                'the pack stopped at a batch boundary; what it removed '
                'stays removed, and a later pack goes on')

    # -- references --------------------------------------------------------

    def catch_up(self, run=None, show=True):
        """Add the references of the current revisions written since the
        last analysis, a page per transaction.  With ``run`` (an analysis
        in use), whatever they refer to is reached after all.

        Every page is read in one snapshot, on a connection of its own, so
        that the references recorded are those of the whole database as
        of one moment (the snapshot's last tid, returned): read row by row
        as commits go on, an object moving from one container to another
        could be missed in both.  Only the rows the snapshot shows as
        written since the previous analysis are read; a stopped analysis
        goes on from where it got to in the next snapshot.
        """
        cm = self.cm
        rescue = run is not None and run.gc and run.phase >= run.ANALYSED
        shown = False
        started = time.monotonic()
        conn, snapshot = cm.open_load()
        pages = None
        try:
            with cm.translate('packing'):
                cm.begin_snapshot(conn, snapshot)
                up_to = self.adapter.poller.last_tid(snapshot)
            pages = _Pages(self.packer, cm, snapshot, up_to)
            self.write(lambda: self._choose_order(up_to))
            while True:
                self._check_stop()
                page = self.write(
                    lambda: self._analyse_page(pages, rescue, up_to))
                if page is None:
                    break
                if show and page and not shown:
                    shown = True
                    self.progress.phase('revisions analysed for references',
                                        self._to_analyse(page), started)
                if shown:
                    self.progress.add(page)
        finally:
            if pages is not None:
                pages.close()
            cm.close(conn, snapshot)
        if shown:
            self.progress.end_phase()
        return up_to

    def _choose_order(self, up_to):
        """Read what was written since the last analysis in key order (a
        scan), not in the order it was written, when it is many rows: each
        row read in tid order is a page read of its own on a table larger
        than the database's cache (MariaDB, 200,000 documents grown by
        10 %: 78 us a row, against 17 in key order), while a scan reads
        every current row's key (in the order of the pages) to find
        them."""
        packer, cursor = self.packer, self.cursor
        state = packer.refs_state(cursor)
        if state is None or state.scan_tid or state.refs_tid >= up_to:
            return
        written = packer.count_after(cursor, state.refs_tid)
        if written < SCAN_SINCE_ROWS or \
                written * SCAN_SINCE_SHARE < packer.count_current(cursor):
            return
        state.scan_tid, state.scan_zoid = up_to, -1
        packer.set_refs_state(cursor, state)

    def _to_analyse(self, done):
        """About how many revisions the analysis reads, ``done`` of them
        already."""
        packer, cursor = self.packer, self.cursor

        def count():
            state = packer.refs_state(cursor)
            if state.scan_tid:
                # Every revision a scan reads (also those a stopped scan
                # read), and those written after its tid.
                return packer.count_after(cursor, state.refs_tid)
            return done + packer.count_after(cursor, state.refs_tid)
        return self.read(count)

    def _analyse_page(self, pages, rescue, up_to):
        """One page of the analysis, read from the snapshot's ``pages``
        (_Pages), recorded in the caller's transaction: the number of
        revisions analysed, or None when there was nothing left up to
        ``up_to``."""
        packer, cursor = self.packer, self.cursor
        state = packer.refs_state(cursor)
        if state is None:
            # Nothing analysed yet (a new database, or one from before
            # schema version 3): read everything of the snapshot, in key
            # order, trusting no reference row that may be left.
            packer.clear_refs(cursor)
            state = RefsState(scan_tid=up_to) if up_to else RefsState()
            packer.set_refs_state(cursor, state)
            return 0
        if state.scan_tid:
            # (A scan begun in an earlier snapshot goes on in this one:
            # rows changed since its scan_tid are read after it.)
            rows = pages.get((SCAN, state.refs_tid, state.refs_zoid,
                              state.scan_tid, state.scan_zoid))
            if not rows:
                state = RefsState(refs_tid=state.scan_tid, refs_zoid=ALL)
                packer.set_refs_state(cursor, state)
                return 0
            if state.refs_tid and not packer.keep_history:
                # (A scan of what was written since an analysis.)
                packer.drop_refs(cursor, [zoid for zoid, _, _ in rows])
            state.scan_zoid = rows[-1][0]
        else:
            rows = pages.get((TAIL, state.refs_tid, state.refs_zoid))
            if not rows:
                return None
            if not packer.keep_history:
                # The newer revision replaced the one analysed before.
                packer.drop_refs(cursor, [zoid for zoid, _, _ in rows])
            state.refs_zoid, state.refs_tid = rows[-1][:2]
        refs = self._record_refs(rows)
        if rescue and refs:
            depth = packer.max_depth(cursor) + 1
            rescued = packer.rescue(cursor, [to for _, _, to in refs], depth)
            if rescued:
                self._walk(depth, frontier=rescued)
        packer.set_refs_state(cursor, state)
        return len(rows)

    def _record_refs(self, rows):
        """Store the references of the revisions ``rows`` (zoid, tid,
        state); returns them as (zoid, tid, to_zoid)."""
        referencesf = self.referencesf
        refs = []
        for zoid, tid, data in rows:
            if data:
                refs.extend((zoid, tid, to) for to in
                            {u64(ref) for ref in referencesf(data)})
        self.packer.add_refs(self.cursor, refs)
        return refs

    def _analyse_kept(self, pack_tid):
        """Record the references of kept revisions that are no longer
        current (objects changed after the pack tid), where none are
        recorded."""
        packer, cursor = self.packer, self.cursor
        after, count, started = -1, 0, time.monotonic()
        while True:
            self._check_stop()

            def page(after=after):
                rows = packer.kept_unanalysed(cursor, pack_tid, after, PAGE)
                self._record_refs(rows)
                return (rows[-1][0], len(rows)) if rows else (None, 0)
            after, found = self.write(page)
            count += found
            if after is None:
                break
        seconds = time.monotonic() - started
        if count or seconds >= 1:
            self.progress.note('references of %s kept revisions no longer '
                               'current recorded in %.1fs', f'{count:,}',
                               seconds)

    def _walk(self, depth, commit_steps=False, frontier=None):
        """Walk from the objects reached at ``depth`` (``frontier`` of
        them, when known); each step in the caller's transaction, or
        (``commit_steps``) one of its own."""
        packer, cursor = self.packer, self.cursor
        reached = 0
        while True:
            if commit_steps:
                self._check_stop()
                count = self.write(
                    functools.partial(packer.walk_step, cursor, depth,
                                      frontier))
            else:
                count = packer.walk_step(cursor, depth, frontier)
            if count <= 0:
                return reached
            reached += count
            frontier = count
            depth += 1
            if commit_steps:
                self.progress.add(count)

    # -- analysis ----------------------------------------------------------

    def _pack_tid(self, t, analysed):
        """The tid to pack to for time ``t`` (None: the last transaction),
        or None if nothing was committed before it.  Never after
        ``analysed`` (when given), the tid up to which the references are
        analysed: the walk has no others."""
        packer, cursor = self.packer, self.cursor

        def read():
            return (self.adapter.poller.last_tid(cursor),
                    packer.oldest_transaction(cursor))
        last, oldest = self.read(read)
        if analysed is not None:
            last = min(last, analysed)
        pack_tid = last if t is None else min(tid_for_time(t), last)
        if oldest is not None and pack_tid and \
                tid_for_time(oldest) <= pack_tid:
            # That transaction may still commit a reference to an object
            # that was reachable when it began; pack to before it began.
            pack_tid = tid_for_time(oldest) - 1
            self.progress.note(
                'pack time moved back to %s: a transaction of another '
                'session of this database began then and is still open',
                _when(pack_tid))
        return pack_tid if pack_tid > 0 else None

    def analyse(self, t, gc):
        """The pre-pack: a new analysis for a pack to ``t``; returns its
        PackRun, or None when there is nothing to pack."""
        packer, cursor, progress = self.packer, self.cursor, self.progress
        earlier = self.read(lambda: packer.run(cursor))
        if earlier is not None and \
                earlier.ANALYSED <= earlier.phase < earlier.DONE:
            progress.note(
                'the analysis of an earlier pack to %s, stopped before it '
                'was done, is replaced (pack-skip-prepack would have used '
                'it)', _when(earlier.pack_tid))
        analysed = self.catch_up() if gc else None
        pack_tid = self._pack_tid(t, analysed)
        if pack_tid is None:
            progress.note('nothing was committed before the pack time')
            self.write(lambda: packer.clear_run(cursor))
            return None
        refs_tid = analysed or 0
        progress.note('analysing the database as of %s%s', _when(pack_tid),
                      '' if gc else ' (pack-gc false: no reachability)')
        started = time.monotonic()
        since = self.read(lambda: packer.base(cursor, earlier, pack_tid))

        def fill():
            packer.start_run(cursor, pack_tid, gc, refs_tid)
            return packer.fill(cursor, pack_tid, since)
        # Emptied in a transaction of its own: on MySQL emptying commits
        # (TRUNCATE), and what followed it would run outside the READ
        # COMMITTED transaction (adapters/mysql/pack.py, CLEAR_RUN).
        self.write(lambda: packer.clear_run(cursor))
        objects = self.write(fill)
        progress.note('%s objects have revisions up to the pack time%s',
                      f'{objects:,}',
                      '' if since is None else
                      f' (those unchanged since the pack to {_when(since)} '
                      f'as it left them)')
        if gc:
            self._analyse_kept(pack_tid)
            progress.phase('objects reached from the root', objects)
            seeded = self.write(lambda: packer.seed(cursor, pack_tid))
            progress.add(seeded)
            self._walk(0, commit_steps=True, frontier=seeded)
            progress.end_phase()
        self.write(lambda: packer.analysed(cursor, objects))
        run = self.read(lambda: packer.run(cursor))
        garbage = self.read(lambda: packer.count_garbage(cursor, gc))
        old = self.read(lambda: packer.count_old(cursor, gc))
        run.counts = garbage, old
        progress.note('analysis done in %.1fs: %s of %s objects go%s',
                      time.monotonic() - started, f'{garbage:,}',
                      f'{objects:,}',
                      f', and the old revisions of {old:,} others'
                      if packer.keep_history else '')
        return run

    def usable_run(self):
        """The kept analysis, checked before it is used."""
        packer, cursor = self.packer, self.cursor

        def read():
            return packer.run(cursor), packer.count_objects(cursor)
        run, objects = self.read(read)
        if run is None or run.phase == run.DONE:
            raise PackError(
                'no kept pack analysis to use (pack-skip-prepack, zodbpack '
                '--use-prepack-state): run a pre-pack first (zodbpack '
                '--prepack) or a whole pack')
        if run.format != FORMAT:
            raise PackError(
                f'the kept pack analysis has format {run.format}, not '
                f'{FORMAT}: it was made by another version of relstorage; '
                f'run a whole pack')
        if run.phase < run.ANALYSED:
            raise PackError(
                'the kept pack analysis is incomplete (its pre-pack was '
                'stopped): run a pre-pack again or a whole pack')
        if objects != run.objects:
            raise PackError(
                f'the kept pack analysis lists {objects} objects where it '
                f'recorded {run.objects}: it is damaged; run a whole pack')
        return run

    # -- deletion ----------------------------------------------------------

    def _wait_for_older_transactions(self, run):
        """History-free: wait (at most pack-max-delay) until no other
        client has a transaction open that began before the last commit
        the analysis saw.  History-free judges reachability on current
        states, so an object unlinked by a commit the analysis saw is
        garbage, though a transaction that began before that commit could
        still link it again.  (History-preserving moves the pack time back
        instead: its analysis has the states as of any time.)"""
        if not run.gc or self.packer.keep_history or not run.refs_tid:
            return
        seen = tid_time(run.refs_tid)
        deadline = time.monotonic() + self.options.pack_max_delay
        told = False
        while True:
            oldest = self.read(
                lambda: self.packer.oldest_transaction(self.cursor))
            if oldest is None or oldest > seen:
                return
            if time.monotonic() >= deadline:
                raise PackError(
                    f'another client has a transaction open since '
                    f'{time.strftime("%H:%M:%S", time.gmtime(oldest))} UTC, '
                    f'before the last commit this pack analysed: it could '
                    f'still link objects the pack would remove.  Nothing '
                    f'was removed; pack again when it has ended (waited '
                    f'pack-max-delay, {self.options.pack_max_delay:g}s)')
            if not told:
                told = True
                self.progress.note(
                    'waiting for transactions of other clients that began '
                    'before the analysis to end')
            time.sleep(min(0.5, max(0.05, deadline - time.monotonic())))

    def delete(self, run):
        packer, cursor, options = self.packer, self.cursor, self.options
        self._wait_for_older_transactions(run)
        if run.gc:
            self.catch_up(run)
        self.write(lambda: packer.mark_packed(cursor, run.pack_tid))
        pacer = _Pacer(options, self._last_tid)
        # Whether this pack removes all it should from its analysis on: a
        # later pack may then build on it (Packer.base).  Not after an
        # earlier process removed part (it may have skipped objects).
        whole = run.phase == run.ANALYSED and run.upto == -1
        if run.phase == run.ANALYSED:
            if run.counts and run.upto == -1:
                total = sum(run.counts)
            else:
                total = self.read(
                    lambda: packer.count_doomed(cursor, run.gc, run.upto))
            skipped = self._batches(
                run, pacer, DELETING[packer.keep_history],
                lambda after, size: packer.doomed(cursor, run.gc, after,
                                                  size),
                lambda rows: packer.delete_doomed(cursor, rows,
                                                  run.pack_tid),
                total)
            whole = whole and not skipped
            run.phase, run.upto = run.DELETED, -1
            self.write(lambda: packer.update_run(cursor, run.phase, -1))

        def finish():
            packer.finish(cursor, run.pack_tid)
            packer.clear_run(cursor)
            if whole:
                packer.done(cursor, run)
        self.write(finish)
        self.progress.note('pack to %s done', _when(run.pack_tid))

    def _batches(self, run, pacer, what, fetch, apply, total):
        """Fetch and apply batches of rows (their first item a zoid, in
        order) until none is left; returns how many of the rows fetched
        were not applied (``apply`` returns how many were)."""
        packer, cursor = self.packer, self.cursor
        progress = self.progress
        progress.phase(what, total)
        skipped = 0
        try:
            caught_up = time.monotonic()
            while True:
                self._check_stop()
                started = time.monotonic()
                if run.gc and started - caught_up >= CATCH_UP_EVERY:
                    caught_up = started
                    self.catch_up(run, show=False)
                rows = self.read(lambda: fetch(run.upto, pacer.size))
                if not rows:
                    return skipped
                upto = rows[-1][0]

                def batch(rows=rows, upto=upto):
                    applied = apply(rows)
                    packer.update_run(cursor, run.phase, upto)
                    return applied
                skipped += len(rows) - self._write_again(batch)
                run.upto = upto
                progress.add(len(rows))
                pacer.pause(started)
        finally:
            progress.end_phase()
            pacer.report(progress)

    def _write_again(self, apply):
        """``write(apply)``, tried again (rolled back each time) when the
        database ended the transaction over a conflict."""
        for attempt in range(1, BATCH_ATTEMPTS + 1):
            try:
                return self.write(apply)
            except LockConflictError as e:
                if attempt == BATCH_ATTEMPTS:
                    raise
                log.info('pack: a batch met a conflict (%s); trying it '
                         'again', e)
                time.sleep(RETRY_PAUSE * attempt)

    # -- blobs -------------------------------------------------------------

    def remove_blob_chunks(self):
        """Remove the chunks of blobs that no revision refers to, a batch
        per transaction.  A blob's chunks belong to one revision, and
        uncommitted ones are invisible here."""
        blobs, cursor = self.adapter.blobs, self.cursor
        pacer = _Pacer(self.options, self._last_tid)
        removed = 0
        after = -1
        while True:
            self._check_stop()
            blob_ids = self.read(
                functools.partial(blobs.orphans, cursor, after, BLOB_BATCH))
            if not blob_ids:
                break
            after = blob_ids[-1]
            started = time.monotonic()
            self.write(
                functools.partial(blobs.delete_chunks, cursor, blob_ids))
            removed += len(blob_ids)
            pacer.pause(started)
        if removed:
            self.progress.note('the data of %d blobs removed', removed)
            pacer.report(self.progress)


#: How _Pages reads a page: current revisions written after a (tid, zoid)
#: and up to a tid, in key order after a zoid (a first analysis, or many
#: written since the last); or in the order written.
SCAN, TAIL = 'scan', 'tail'


class _Pages:
    """The pages of an analysis, read from one snapshot (the cursor
    ``snapshot``) a page ahead of the caller, by a thread of its own:
    while the caller finds the references of one page in Python and
    records them, the database reads the next one.  (Every driver here
    lets go of the GIL while it waits for the server.  At 200,000
    documents on MariaDB the analysis took 7.8 s read in turn: 3.8 s in
    the reads, the rest finding and writing the references.)

    A page is asked for by where it starts: ``(SCAN, refs_tid,
    refs_zoid, scan_tid, after zoid)`` or ``(TAIL, tid, after zoid)``.
    The page read ahead is the one that starts where the last one ended;
    it is used only when it starts where the caller asks (the caller's
    state, in the database, decides), else the page asked for is read
    then.  The snapshot never changes, so a page read ahead is the page
    the caller would read.  At most one read is under way, and the cursor
    is only ever used by one thread at a time."""

    def __init__(self, packer, cm, snapshot, up_to):
        self.packer = packer
        self.cm = cm
        self.snapshot = snapshot
        self.up_to = up_to
        self._asked = queue.Queue()
        self._done = queue.Queue()
        self._ahead = None          # the start of the page being read ahead
        self._thread = None

    def _read(self, start):
        with self.cm.translate('packing'):
            if start[0] == SCAN:
                _, since, since_zoid, scan_tid, zoid = start
                return self.packer.scan_page(self.snapshot, since, since_zoid,
                                             scan_tid, zoid, PAGE)
            _, tid, zoid = start
            return self.packer.tail_page(self.snapshot, tid, zoid,
                                         self.up_to, PAGE)

    def _run(self):
        while True:
            start = self._asked.get()
            if start is None:
                return
            try:
                self._done.put((self._read(start), None))
            except BaseException as e:  # raised in the caller's thread
                self._done.put((None, e))

    def _wait(self):
        """The page read ahead: ``(start, rows)``."""
        start, self._ahead = self._ahead, None
        rows, error = self._done.get()
        if error is not None:
            raise error
        return start, rows

    def get(self, start):
        """The rows of the page that begins at ``start``."""
        rows = None
        if self._ahead is not None:
            ahead, rows = self._wait()
            if ahead != start:
                rows = None
        if rows is None:
            rows = self._read(start)
        if rows:
            zoid, tid = rows[-1][:2]
            self._ahead = start[:4] + (zoid,) if start[0] == SCAN \
                else (TAIL, tid, zoid)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name='relstorage pack: pages',
                    daemon=True)
                self._thread.start()
            self._asked.put(self._ahead)
        return rows

    def close(self):
        """Wait for a read under way (at most a page), end the thread."""
        if self._thread is None:
            return
        if self._ahead is not None:
            self._ahead = None
            self._done.get()
        self._asked.put(None)
        self._thread.join()
        self._thread = None


class _Pacer:
    """Batch sizes and pauses: batches of about pack-batch-timeout seconds,
    each followed, while other clients are committing, by a pause that
    keeps the work to pack-duty-cycle of the time (never longer than
    pack-max-delay).  ``last_tid()`` tells whether they are: when no
    transaction was committed since the previous batch, nobody waits for
    room and the pack goes on at once."""

    def __init__(self, options, last_tid):
        self.target = options.pack_batch_timeout
        self.duty = options.pack_duty_cycle
        self.max_delay = options.pack_max_delay
        self.size = FIRST_BATCH
        self.last_tid = last_tid
        self.seen = last_tid()
        #: Batches done, how many were followed by a pause, and the
        #: seconds paused in all (for the phase's last line).
        self.batches = self.pauses = 0
        self.paused = 0.0

    def pause(self, started):
        busy = time.monotonic() - started
        self.batches += 1
        if busy > 0 and self.target > 0:
            factor = min(2.0, max(0.25, self.target / busy))
            self.size = int(min(MAX_BATCH, max(MIN_BATCH, self.size * factor)))
        if self.duty < 1.0:
            seen, self.seen = self.seen, self.last_tid()
            if self.seen != seen:
                delay = min(busy * (1.0 - self.duty) / self.duty,
                            self.max_delay)
                time.sleep(delay)
                self.pauses += 1
                self.paused += delay

    def report(self, progress):
        """Say how much of the phase was pauses, when there were any: an
        administrator who finds the deletions slow should know that part
        of their time was left to other clients on purpose."""
        if self.pauses:
            progress.note(
                '%d of %d batches followed by a pause while other clients '
                'committed, %.1fs in all (pack-duty-cycle %g)',
                self.pauses, self.batches, self.paused, self.duty)
