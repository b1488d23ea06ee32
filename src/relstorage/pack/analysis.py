"""The pack's first two steps: the references of what was written since
the last pack, read from the pickles a page at a time (``_Pages`` reads
the next page meanwhile), and the analysis (the pack tid, the walk of the
graph from the root).  A mix-in of ``relstorage.pack.session._Session``."""
import functools
import logging
import queue
import threading
import time

from relstorage.adapters.pack import ALL
from relstorage.adapters.pack import FORMAT
from relstorage.adapters.pack import RefsState
from relstorage.errors import PackError
from relstorage.pack.references import Unreadable
from relstorage.pack.references import record_references
from relstorage.tids import tid_for_time
from relstorage.tids import tid_text

log = logging.getLogger(__name__)

#: Revisions per page of the reference analysis.
PAGE = 2000
#: What was written since the last analysis is read by a scan in key
#: order (_Session._choose_order) when it is at least this many rows and
#: at least one in SCAN_SINCE_SHARE of the objects.
SCAN_SINCE_ROWS = 5 * PAGE
SCAN_SINCE_SHARE = 100


#: Revisions whose references cannot be read named one by one in the log
#: (the others are counted).
NAMED_UNREADABLE = 20

#: How _Pages reads a page: current revisions written after a (tid, zoid)
#: and up to a tid, in key order after a zoid (a first analysis, or many
#: written since the last); or in the order written.
SCAN, TAIL = 'scan', 'tail'



class AnalysisSteps:
    """References and analysis (see ``relstorage.pack``, steps 1 and 2)."""

    # -- references --------------------------------------------------------

    def catch_up(self, run=None, show=True, pacer=None):
        """Add the references of the current revisions written since the
        last analysis, a page per transaction (each followed by
        ``pacer``'s pause, when given).  With ``run`` (an analysis in
        use), whatever they refer to is reached after all.

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
            pages = _Pages(self.packer, cm, snapshot, up_to,
                           alone=None if pacer is None
                           else lambda: not pacer.others_committing())
            self.write(lambda: self._choose_order(up_to))
            while True:
                self._check_stop()
                page = self.paced_write(
                    pacer, lambda: self._analyse_page(pages, rescue, up_to))
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

    #: Whether this pack met a revision whose references it could not read.
    unreadable_met = False

    def _record_refs(self, rows):
        """Store the references of the revisions ``rows`` (zoid, tid,
        state); returns them as (zoid, tid, to_zoid).  A revision whose
        references cannot be read (relstorage.pack.references) is
        recorded in pack_unreadable instead, and stops nothing."""
        referencesf = self.referencesf
        refs, unreadable = [], []
        for zoid, tid, data in rows:
            if not data:
                continue
            try:
                found = record_references(data, referencesf)
            except Unreadable as e:
                unreadable.append((zoid, tid, str(e)))
                continue
            refs.extend((zoid, tid, to) for to in found)
        self.packer.add_refs(self.cursor, refs)
        if unreadable:
            self.unreadable_met = True
            self.packer.add_unreadable(self.cursor, unreadable)
        return refs

    def gc_blocked(self, pack_tid):
        """Whether the references of a revision a pack to ``pack_tid``
        needs could not be read (by this pack or an earlier one): then no
        garbage may be removed, for what that revision refers to is
        unknown.  Names the revisions in the log."""
        rows = self.write(
            lambda: self.packer.unreadable(self.cursor, pack_tid))
        if not rows:
            return False
        for zoid, tid, reason in rows[:NAMED_UNREADABLE]:
            self.progress.warn('the references of oid 0x%x at tid 0x%x (%s) '
                               'cannot be read (%s)', zoid, tid,
                               tid_text(tid), reason)
        if len(rows) > NAMED_UNREADABLE:
            self.progress.warn('and of %d more revisions',
                               len(rows) - NAMED_UNREADABLE)
        self.progress.warn(
            'garbage collection skipped: nothing is removed as unreachable '
            'while a revision whose references are unknown is stored%s',
            '; old revisions are still removed' if self.packer.keep_history
            else '')
        return True

    def _analyse_kept(self, pack_tid, pacer=None):
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
            after, found = self.paced_write(pacer, page)
            count += found
            if after is None:
                break
        seconds = time.monotonic() - started
        if count or seconds >= 1:
            self.progress.note('references of %s kept revisions no longer '
                               'current recorded in %.1fs', f'{count:,}',
                               seconds)

    def _walk(self, depth, commit_steps=False, frontier=None, pacer=None):
        """Walk from the objects reached at ``depth`` (``frontier`` of
        them, when known); each step in the caller's transaction, or
        (``commit_steps``) one of its own, paced by ``pacer``."""
        packer, cursor = self.packer, self.cursor
        reached = 0
        while True:
            if commit_steps:
                self._check_stop()
                count = self.paced_write(pacer, functools.partial(
                    packer.walk_step, cursor, depth, frontier))
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
                tid_text(pack_tid))
        return pack_tid if pack_tid > 0 else None

    def analyse(self, t, gc):
        """The pre-pack: a new analysis for a pack to ``t``; returns its
        PackRun, or None when there is nothing to pack.  Its steps are
        paced like the deletions (a pacer for the whole analysis)."""
        with self.pacing() as pacer:
            run = self._analyse(t, gc, pacer)
        pacer.report(self.progress, 'steps of the analysis')
        return run

    def _analyse(self, t, gc, pacer):
        packer, cursor, progress = self.packer, self.cursor, self.progress
        earlier = self.read(lambda: packer.run(cursor))
        if earlier is not None and \
                earlier.ANALYSED <= earlier.phase < earlier.DONE:
            progress.note(
                'the analysis of an earlier pack to %s, stopped before it '
                'was done, is replaced (pack-skip-prepack would have used '
                'it)', tid_text(earlier.pack_tid))
        analysed = self.catch_up(pacer=pacer) if gc else None
        pack_tid = self._pack_tid(t, analysed)
        if pack_tid is None:
            progress.note('nothing was committed before the pack time')
            self.write(lambda: packer.clear_run(cursor))
            return None
        why_not = None if gc else 'pack-gc false'
        if gc and self.gc_blocked(pack_tid):
            gc, why_not = False, 'references that cannot be read'
        refs_tid = analysed or 0
        progress.note('analysing the database as of %s%s',
                      tid_text(pack_tid),
                      f' ({why_not}: no reachability)' if why_not else '')
        started = time.monotonic()
        since = self.read(lambda: packer.base(cursor, earlier, pack_tid))

        def fill():
            packer.start_run(cursor, pack_tid, gc, refs_tid)
            return packer.fill(cursor, pack_tid, since)
        # Emptied in a transaction of its own: on MySQL emptying commits
        # (TRUNCATE), and what followed it would run outside the READ
        # COMMITTED transaction (adapters/mysql/pack.py, CLEAR_RUN).
        self.write(lambda: packer.clear_run(cursor))
        objects = self.paced_write(pacer, fill)
        progress.note('%s objects have revisions up to the pack time%s',
                      f'{objects:,}',
                      '' if since is None else
                      f' (those unchanged since the pack to '
                      f'{tid_text(since)} as it left them)')
        if gc:
            self._analyse_kept(pack_tid, pacer)
            if self.unreadable_met and self.gc_blocked(pack_tid):
                gc = False
                self.write(lambda: packer.stop_gc(cursor))
        if gc:
            progress.phase('objects reached from the root', objects)
            seeded = self.paced_write(
                pacer, lambda: packer.seed(cursor, pack_tid))
            progress.add(seeded)
            self._walk(0, commit_steps=True, frontier=seeded, pacer=pacer)
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
    is only ever used by one thread at a time.

    With ``alone`` (a callable), a page is read ahead only while it says
    true: the pacer's watch saw no other client commit during the last
    step.  Read ahead, the pages and the references kept both CPUs of a
    2-CPU server busy and nearly doubled the time of a writer's commits
    (PostgreSQL, 1,000,000 documents: its p50 7.3-8.4 ms against 4.1-4.5
    alone, its p99 22-25); read in turn while it committed, 4.6-5.3 and
    12-16, the phase hardly slower (docs/performance.rst, "Pages read
    ahead only while nobody commits")."""

    def __init__(self, packer, cm, snapshot, up_to, alone=None):
        self.packer = packer
        self.alone = alone
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
        if rows and (self.alone is None or self.alone()):
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
