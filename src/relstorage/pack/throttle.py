"""How fast a pack deletes: batch sizes and the pauses between batches
(pack-batch-timeout, pack-duty-cycle, pack-max-delay)."""
import time

#: Objects in the first deletion batch; later ones are sized to
#: pack-batch-timeout.
FIRST_BATCH = 500
MIN_BATCH, MAX_BATCH = 20, 20000


class Pacer:
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
