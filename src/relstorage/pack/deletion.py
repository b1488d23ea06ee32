"""The pack's last steps: deletion in batches, each its own short write
transaction tried again over a conflict, paced by ``throttle``; then the
blob data no revision refers to.  A mix-in of
``relstorage.pack.session._Session``."""
import functools
import logging
import time

from relstorage.errors import LockConflictError
from relstorage.errors import PackError
from relstorage.tids import tid_text
from relstorage.tids import tid_time

log = logging.getLogger(__name__)

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
#: The pass over object_state's pages (Packer.by_page), which removes old
#: revisions (of garbage too) before the garbage goes by object.
PAGES = 'pages cleared of old revisions'


class DeletionSteps:
    """Deletion and blob data (see ``relstorage.pack``, steps 3 and 4)."""

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
        packer, cursor = self.packer, self.cursor
        self._wait_for_older_transactions(run)
        if run.gc:
            self.catch_up(run)
            self._stop_gc_if_blocked(run)
        self.write(lambda: packer.mark_packed(cursor, run.pack_tid))
        self.read(lambda: packer.check_mirror(cursor))
        # Whether this pack removes all it should from its analysis on: a
        # later pack may then build on it (Packer.base).  Not after an
        # earlier process removed part (it may have skipped objects).
        whole = run.phase == run.ANALYSED and run.upto == -1
        gc = run.gc
        skipped = 0
        if run.phase == run.ANALYSED and packer.by_page:
            # First every revision older than its object's kept one, by
            # page; then what is left of the garbage, by zoid.
            self._pages(run)
            run.phase, run.upto = run.REMAINS, -1
            self.write(lambda: packer.update_run(cursor, run.phase, -1))
        if run.phase in (run.ANALYSED, run.REMAINS):
            if run.counts and run.upto == -1:
                total = run.counts[0] if packer.by_page else sum(run.counts)
            else:
                total = self.read(
                    lambda: packer.count_doomed(cursor, run.gc, run.upto))
            skipped = self._paced(
                run, DELETING[packer.keep_history and not packer.by_page],
                lambda after, size: packer.doomed(cursor, run.gc, after,
                                                  size),
                lambda rows: packer.delete_doomed(cursor, rows,
                                                  run.pack_tid),
                total)
            run.phase, run.upto = run.DELETED, -1
            self.write(lambda: packer.update_run(cursor, run.phase, -1))
        # (Not whole either when garbage collection stopped part way.)
        whole = whole and not skipped and run.gc == gc

        def finish():
            packer.finish(cursor, run.pack_tid)
            packer.clear_run(cursor)
            if whole:
                packer.done(cursor, run)
        self.write(finish)
        self.progress.note('pack to %s done', tid_text(run.pack_tid))

    def _paced(self, run, what, fetch, apply, total):
        """``_batches`` with a pacer of its own (``pacing``)."""
        with self.pacing() as pacer:
            return self._batches(run, pacer, what, fetch, apply, total)

    def _pages(self, run):
        """The pass by page (Packer.by_page), from page ``run.upto + 1``
        to the last page of object_state."""
        packer, cursor = self.packer, self.cursor
        end = self.read(lambda: packer.pages(cursor))
        removed = []

        def pages(after, size):
            return [(page,) for page in range(after + 1,
                                              min(after + 1 + size, end))]

        def apply(rows):
            removed.append(packer.delete_pages(cursor, rows[0][0],
                                               rows[-1][0] + 1))
            return len(rows)
        self._paced(run, PAGES, pages, apply, max(0, end - run.upto - 1))
        self.progress.note('%s old revisions removed', f'{sum(removed):,}')

    def _stop_gc_if_blocked(self, run):
        """After a catch-up that met a revision whose references cannot
        be read (committed since the analysis): no more garbage goes, as
        what it refers to cannot be rescued; the rest of the pass removes
        old revisions only."""
        if run.gc and self.unreadable_met and self.gc_blocked(run.pack_tid):
            run.gc = False
            self.write(lambda: self.packer.stop_gc(self.cursor))

    def _batches(self, run, pacer, what, fetch, apply, total):
        """Fetch and apply batches of rows (their first item a zoid, or a
        page, in order) until none is left, catching up with references
        every CATCH_UP_EVERY seconds; returns how many of the rows fetched
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
                    self._stop_gc_if_blocked(run)
                rows = self.read(lambda: fetch(run.upto, pacer.size))
                if not rows:
                    return skipped
                upto = rows[-1][0]

                def batch(rows=rows, upto=upto):
                    applied = apply(rows)
                    packer.update_run(cursor, run.phase, upto)
                    # Before the COMMIT: a client held up by this batch
                    # still waits for its locks.
                    return applied, packer.batch_end(cursor)
                applied, (waiters, logged) = self._write_again(batch)
                skipped += len(rows) - applied
                run.upto = upto
                progress.add(len(rows))
                pacer.pause(started, waiters, logged)
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

        def orphans(after):
            return self.read(functools.partial(
                blobs.orphans, cursor, after, BLOB_BATCH))
        blob_ids = orphans(-1)
        if not blob_ids:
            return
        removed = 0
        with self.pacing() as pacer:
            while blob_ids:
                self._check_stop()
                self.paced_write(pacer, functools.partial(
                    blobs.delete_chunks, cursor, blob_ids))
                removed += len(blob_ids)
                blob_ids = orphans(blob_ids[-1])
        self.progress.note('the data of %d blobs removed', removed)
        pacer.report(self.progress)
