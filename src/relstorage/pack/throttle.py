"""How fast a pack deletes: batch sizes and the pauses between batches
(pack-batch-timeout, pack-duty-cycle, pack-max-delay)."""
import time

#: Objects in the first deletion batch; later ones are sized to
#: pack-batch-timeout.
FIRST_BATCH = 500
MIN_BATCH, MAX_BATCH = 20, 20000


class Pacer:
    """Batch sizes and pauses: batches of about pack-batch-timeout seconds,
    each followed, when another client was held up by it, by a pause that
    keeps the work to pack-duty-cycle of the time (never longer than
    pack-max-delay).  Otherwise the next batch follows at once.

    Held up is measured, not assumed: where the database tells (the
    packer's ``waiters``, asked at the end of each batch's transaction,
    while it still holds its locks), a batch that another session waited
    for.  A batch removes rows no commit writes, so that is rare: a
    client storing an object the pack removes as garbage, or a database
    that locks more than the rows themselves.  Where it cannot tell
    (``waiters`` None: SQLite, whose single writer makes every commit
    during a batch wait for it), a transaction committed since the
    previous batch (``last_tid()``, asked only then)."""

    def __init__(self, options, last_tid, waits_known=False):
        self.target = options.pack_batch_timeout
        self.duty = options.pack_duty_cycle
        self.max_delay = options.pack_max_delay
        self.size = FIRST_BATCH
        self.last_tid = last_tid
        self.seen = None
        if not waits_known and self.duty < 1.0:
            # A commit during the first batch counts.
            self._committed()
        #: Batches done, how many were followed by a pause, and the
        #: seconds paused in all (for the phase's last line); and whether
        #: the pauses followed commits (the database could not tell
        #: waits).
        self.batches = self.pauses = 0
        self.paused = 0.0
        self.by_commits = False

    def _committed(self):
        """Whether a transaction was committed since the last call (False
        at the first)."""
        seen, self.seen = self.seen, self.last_tid()
        return seen is not None and self.seen != seen

    def pause(self, started, waiters=None):
        """After a batch begun at ``started`` (monotonic), for which
        ``waiters`` sessions were waiting at its end (None: unknown)."""
        busy = time.monotonic() - started
        self.batches += 1
        if busy > 0 and self.target > 0:
            factor = min(2.0, max(0.25, self.target / busy))
            self.size = int(min(MAX_BATCH, max(MIN_BATCH, self.size * factor)))
        if self.duty >= 1.0:
            return
        if waiters is None:
            self.by_commits = True
            held_up = self._committed()
        else:
            held_up = waiters > 0
        if held_up:
            delay = min(busy * (1.0 - self.duty) / self.duty, self.max_delay)
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
                '%s, %.1fs in all (pack-duty-cycle %g)',
                self.pauses, self.batches,
                'committed' if self.by_commits else 'waited for them',
                self.paused, self.duty)
