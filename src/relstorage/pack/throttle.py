"""How fast a pack deletes: batch sizes and the pauses between batches
(pack-batch-timeout, pack-duty-cycle, pack-max-delay)."""
import logging
import time

log = logging.getLogger(__name__)

#: Objects in the first deletion batch; later ones are sized to
#: pack-batch-timeout.
FIRST_BATCH = 500
MIN_BATCH, MAX_BATCH = 20, 20000


#: A commit of another client that took this long (seconds) while a batch
#: ran may have been slowed by it; quicker ones are not looked at.
SLOW_FLOOR = 0.01
#: ... and was, when it took at least this many times the usual: the
#: median of the commits seen while no batch ran (pauses, and the probe).
SLOWER = 2.0
#: Seconds without a batch in which the watch learns what commits take
#: when no batch runs, before the first judgement.
PROBE = 0.2
#: ... repeated (at most PROBES times) until it saw PROBE_SEEN commits.
PROBE_SEEN, PROBES = 3, 5
#: The commits seen without a batch that the usual is the median of (the
#: latest).
QUIET_KEPT = 50
#: The least share of pack-batch-timeout that batches are sized to after
#: slowing others (halved each time, grown back by a quarter otherwise).
LEAST_SCALE = 0.125
#: Where the watch tells, a pause lasts this many seconds and goes on in
#: steps of as many while the commits it saw in the step before were
#: still slowed (an InnoDB page cleaner or a PostgreSQL checkpoint the
#: batches set going can outlast the batch), for as long
#: as the pauses banked allow: the duty cycle's share of every batch,
#: less the pauses made (never more than pack-max-delay).  It ends at
#: the first step whose commits are not slowed, however long the step
#: before it was: a pause as long as a step of 20 s that had slowed one
#: commit (the filling of pack_object, one statement) kept the pack
#: waiting 20 s while the writer's commits took their usual time
#: (MariaDB, 1,000,000 documents; docs/performance.rst, "Pauses that end
#: when the commits are quick again").
REST_STEP = 0.1
#: The most log (bytes) a batch is sized to write, where the database
#: tells its log's position (PostgreSQL's WAL, MariaDB's redo log).
#: Another client's commit waits until all the log written before its
#: own is on disk, and what a batch writes stays unflushed until the
#: batch commits (or the server's log writer gets to it): a commit begun
#: late in a large batch waits for most of it.  At 1,000,000 documents on
#: PostgreSQL the pass by page writes about 70 MB of WAL a second, so a
#: batch of 0.25 s about 17 MB; sized to 1 MB, a writer's p50 during the
#: deletions was 5.1-5.7 ms instead of 7.4-8.0, the pass as fast
#: (docs/performance.rst, "WAL-sized batches").  MariaDB's deletions with
#: a buffer pool that holds the database write 40-50 MB of redo a
#: second, its batches of 0.25 s about 9 MB (docs/performance.rst,
#: "MariaDB with a buffer pool that holds the database").
LOG_TARGET = 2**20


def _seconds(value):
    return 'unknown' if value is None else '%.3fs' % value


class Pacer:
    """Batch sizes and pauses: batches of about pack-batch-timeout seconds,
    each followed, when another client was held up by it, by a pause that
    leaves the work at least pack-duty-cycle of the time (never longer
    than pack-max-delay).  Otherwise the next batch follows at once.

    Held up is measured, not assumed, in one of three ways:

    - where the database tells (the packer's ``waiters``, asked at the end
      of each batch's transaction, while it still holds its locks), a
      batch that another session waited for.  A batch removes rows no
      commit writes, so that is rare: a client storing an object the pack
      removes as garbage, or a database that locks more than the rows;
    - where the pack's watch reads the seconds other clients' commits
      took (``watch``, a relstorage.pack.watch.Watch), a batch during
      which one took longer than SLOW_FLOOR and SLOWER times the usual
      (the median of those seen while no batch ran: during the second
      half of each pause, and of a probe of PROBE seconds after the first
      batch that saw a commit take longer than SLOW_FLOOR; the floor alone
      while none was seen).
      Batches that slowed others are also made smaller (to LEAST_SCALE of
      pack-batch-timeout at the least), as a commit waits behind what the
      batch wrote before it; and their pause lasts REST_STEP and goes on
      while the commits seen during it are still slowed, as far as the
      pauses banked allow (``bank``: the duty cycle's share of every
      batch, less the pauses made; at most pack-max-delay);
    - where it tells neither (``waiters`` None: SQLite, whose single
      writer makes every commit during a batch wait for it), a transaction
      committed since the previous batch (``last_tid()``, asked only
      then).

    Where the database tells where its log stands at the end of each batch
    (``logged``: PostgreSQL, MariaDB), batches are also sized to write at most
    LOG_TARGET bytes of it, pauses or none."""

    def __init__(self, options, last_tid, waits_known=False, watch=None):
        self.target = options.pack_batch_timeout
        self.duty = options.pack_duty_cycle
        self.max_delay = options.pack_max_delay
        self.size = FIRST_BATCH
        self.last_tid = last_tid
        self.watch = watch
        self.seen = None
        #: The share of ``target`` batches are sized to, and the seconds of
        #: the latest commits of others seen while no batch ran.
        self.scale = 1.0
        self.quiet = []
        #: The longest commit the watch saw during the last batch, and how
        #: many it saw (for the debug log).
        self.longest = None
        self.commits = 0
        #: Whether the probe was made (once: the pauses learn after it).
        self.probed = False
        #: The database's log position at the end of the last batch, and
        #: the bytes of log written from the end of the one before (None
        #: where the database does not tell).
        self.logged = self.written = None
        if not waits_known and watch is None and self.duty < 1.0:
            # A commit during the first batch counts.
            self._committed()
        #: Batches done, how many were followed by a pause, and the
        #: seconds paused in all (for the phase's last line); and why the
        #: pauses were made: commits (the database could not tell waits),
        #: slowed statements, lock waits.
        self.batches = self.pauses = 0
        self.paused = 0.0
        self.by_commits = self.by_slowing = False
        #: Seconds of pause the duty cycle allows and no pause has spent.
        self.bank = 0.0

    def _committed(self):
        """Whether a transaction was committed since the last call (False
        at the first)."""
        seen, self.seen = self.seen, self.last_tid()
        return seen is not None and self.seen != seen

    def _usual(self):
        """The median of the commits seen while no batch ran, or None."""
        if not self.quiet:
            return None
        ordered = sorted(self.quiet)
        return ordered[len(ordered) // 2]

    def _slowed(self):
        """Whether a commit of another client was slowed during the batch
        (the watch says), or None when the watch does not tell."""
        seen = self.watch.take() if self.watch is not None else None
        self.commits = 0 if seen is None else len(seen)
        self.longest = max(seen) if seen else None
        if seen is None:
            return None
        slowed = False
        if self.longest is not None and self.longest > SLOW_FLOOR:
            if not self.probed:
                self.probed = True
                self._probe()
            slowed = self._slow(seen)
        self.scale = (max(LEAST_SCALE, self.scale / 2) if slowed
                      else min(1.0, self.scale * 1.25))
        return slowed

    def _probe(self):
        """Learn the usual: probes of PROBE seconds until PROBE_SEEN
        commits were seen in their second halves, at most PROBES of them.
        (One commit is no usual: seen, a probe that caught a single
        commit of 39 ms, while the writer's took 5, made that the usual
        for the whole phase, and no batch after it counted as slowing.)"""
        for _ in range(PROBES):
            self._learn(self._quiet(PROBE))
            if len(self.quiet) >= PROBE_SEEN:
                break

    def _slow(self, seen):
        """Whether the longest of the commits ``seen`` (seconds) was
        slowed: longer than SLOW_FLOOR and than SLOWER times the usual."""
        if not seen or max(seen) <= SLOW_FLOOR:
            return False
        usual = self._usual()
        return usual is None or max(seen) > SLOWER * usual

    def _learn(self, seen):
        """Keep the commits ``seen`` while no batch ran as the usual."""
        if seen:
            self.quiet = (self.quiet + seen)[-QUIET_KEPT:]

    def _quiet(self, seconds):
        """Wait ``seconds`` without a batch; the commits the watch saw in
        the second half of the wait (the first is left to commits the
        batch slowed, still under way after it)."""
        time.sleep(seconds / 2)
        self.watch.take()
        time.sleep(seconds / 2)
        return self.watch.take()

    def _rest(self, delay):
        """Pause ``delay`` seconds, then on in steps of REST_STEP while the
        watch still sees commits slowed, as far as the bank allows; the
        commits of the last step (its second half, for the first) become
        the usual.  Returns the seconds paused."""
        seen = self._quiet(delay)
        paused = delay
        while self._slow(seen) and paused + REST_STEP <= self.bank:
            time.sleep(REST_STEP)
            seen = self.watch.take()
            paused += REST_STEP
        # Still slowed when the bank ran out: a slowness the rest did not
        # relieve is not the batches', and becomes the usual.
        self._learn(seen)
        if paused > delay:
            log.debug('pack: the pause went on to %.3fs while others\' '
                      'commits were still slower', paused)
        return paused

    def _factor(self, busy):
        """How much larger the next batch should be than the last (which
        took ``busy`` seconds and wrote ``self.written`` bytes of log):
        sized to the target's time and to LOG_TARGET, whichever is less,
        changing by at most four times at once; None (the same size)
        where batches are not sized (pack-batch-timeout 0)."""
        target = self.target * self.scale
        if busy <= 0 or target <= 0:
            return None
        factor = target / busy
        if self.written and self.written > 0:
            factor = min(factor, LOG_TARGET / self.written)
        return min(2.0, max(0.25, factor))

    def pause(self, started, waiters=None, logged=None):
        """After a batch begun at ``started`` (monotonic), for which
        ``waiters`` sessions were waiting at its end (None: unknown) and
        the database's log stood at ``logged`` bytes (None: unknown)."""
        busy = time.monotonic() - started
        self.batches += 1
        slowed = self._slowed()
        if logged is not None:
            if self.logged is not None:
                self.written = logged - self.logged
            self.logged = logged
        factor = self._factor(busy)
        if factor is not None:
            self.size = int(min(MAX_BATCH, max(MIN_BATCH, self.size * factor)))
        if self.duty >= 1.0:
            return
        share = busy * (1.0 - self.duty) / self.duty
        self.bank = min(self.max_delay, self.bank + share)
        if waiters:
            held_up = True
        elif slowed is not None:
            held_up = slowed
            self.by_slowing = self.by_slowing or slowed
        elif waiters is None:
            self.by_commits = True
            held_up = self._committed()
        else:
            held_up = False
        log.debug('pack: batch %d took %.3fs%s; others\' commits seen: %d, '
                  'the longest %s, the usual %s: %s; next batch %d objects',
                  self.batches, busy,
                  '' if self.written is None
                  else ' (%.1f MB of log)' % (self.written / 1e6),
                  self.commits, _seconds(self.longest),
                  _seconds(self._usual()), 'pause' if held_up else 'no pause',
                  self.size)
        if held_up:
            if self.watch is not None:
                # A step, where the bank allows (a pause as short as a
                # batch of 10 ms sees no commit to judge by), and on while
                # the commits are still slowed.
                delay = self._rest(min(REST_STEP, self.bank))
            else:
                delay = min(share, self.max_delay)
                time.sleep(delay)
            self.bank = max(0.0, self.bank - delay)
            self.pauses += 1
            self.paused += delay

    def others_committing(self):
        """Whether the watch saw another client commit during the last
        step (False where there is no watch, or before the first step)."""
        return self.commits > 0

    def report(self, progress, what='batches'):
        """Say how much of the phase was pauses, when there were any: an
        administrator who finds the pack slow should know that part of
        its time was left to other clients on purpose.  ``what``: what
        the phase's steps are."""
        if self.pauses:
            why = ('committed' if self.by_commits else
                   'committed slower' if self.by_slowing
                   else 'waited for them')
            progress.note(
                '%d of %d %s followed by a pause while other clients '
                '%s, %.1fs in all (pack-duty-cycle %g)',
                self.pauses, self.batches, what, why, self.paused,
                self.duty)
