"""One pack: its connection and pack lock (``_Session``), the entry points
``pack`` and ``check_refs``, and the transactions every step runs in.
The steps themselves are in ``analysis`` (references and the walk) and
``deletion`` (batches, blobs), mixed into ``_Session``."""
import contextlib
import logging
import time

from relstorage.errors import PackError
from relstorage.errors import PackStopped
from relstorage.metrics import PackProgress
from relstorage.pack.analysis import AnalysisSteps
from relstorage.pack.deletion import DeletionSteps
from relstorage.pack.throttle import Pacer
from relstorage.pack.watch import Watch
from relstorage.progress import Progress
from relstorage.tids import tid_text

log = logging.getLogger(__name__)


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
                          tid_text(run.pack_tid))
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
    """Analyse as for a pack to the last transaction (deleting nothing).
    Returns ``(broken, unreadable)``: up to ``limit`` ``(zoid, to_zoid)``
    references of reachable objects to objects that do not exist (or are
    deleted), and the ``(zoid, tid, reason)`` of the stored revisions
    whose references cannot be read (then nothing is walked, and
    ``broken`` is empty)."""
    progress = progress or Progress()
    packer = storage._adapter.packer
    with _Session(storage, referencesf, progress) as session:
        run = session.analyse(None, True)
        unreadable = session.write(lambda: packer.unreadable(
            session.cursor, None if run is None else run.pack_tid))
        if run is None or not run.gc:
            return [], unreadable
        return list(session.read(lambda: packer.broken_refs(
            session.cursor, limit))), unreadable


class _Session(AnalysisSteps, DeletionSteps):
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

    @contextlib.contextmanager
    def pacing(self):
        """A Pacer for a phase (relstorage.pack.throttle), with a watch of
        its own on the commits of others where the database records their
        seconds (stopped when the phase ends)."""
        watch = None
        if self.options.pack_duty_cycle < 1.0 and \
                self.packer.watches_commits:
            watch = Watch.started(self.cm, self.packer)
        try:
            yield Pacer(self.options, self._last_tid,
                        self.packer.counts_waiters, watch)
        finally:
            if watch is not None:
                watch.stop()

    def paced_write(self, pacer, apply):
        """``write(apply)``, then ``pacer``'s pause (when given) if other
        clients waited for that transaction or were slowed during it
        (relstorage.pack.throttle).  The analysis's steps and the blob
        data's batches go this way; the deletions' batches, tried again
        over a conflict, in ``_batches``.  The analysis holds no lock a
        committer takes, but on a server with few CPUs its reads and
        writes slow their commits as the deletions' do (measured:
        docs/performance.rst, "The fill's spill, and the analysis
        paced")."""
        if pacer is None:
            return self.write(apply)
        packer, cursor = self.packer, self.cursor
        started = time.monotonic()
        result, (waiters, logged) = self.write(
            lambda: (apply(), packer.batch_end(cursor)))
        pacer.pause(started, waiters, logged)
        return result

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
