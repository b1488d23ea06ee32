"""The commit chain (MySQL and MariaDB; schema step 0009): how a read
snapshot tells whether it holds every commit up to the last tid it sees.

InnoDB makes a snapshot (a read view) by going through the transactions
that are running while commits go on, so a snapshot can count a commit as
still running and a later commit, which took the commit lock
(``commit_row``'s row) after the first let go of it, as done: it sees the
later commit's tid in ``commit_row`` without the earlier commit's rows.
A poll of what changed up to that tid would miss the earlier commit's
objects for good, and the process's cache would serve their old states as
current (measured on MariaDB 10.11 with benchmarks/poll_check.py: about
one snapshot in 100,000 under load, even with a lock held by each
committer until its COMMIT returned; PostgreSQL never did it: it takes
snapshots under a lock that commits take too).

So every commit counts itself in ``commit_row.commit_seq`` under the commit
lock (the counts have no gaps) and adds the link ``(commit_seq, tid)`` to
``commit_chain`` in the same transaction (``LINK``).  A snapshot that sees
the count at N holds every commit up to its last tid if it sees every link
above the last one its poller knew (``CHECK``, with that tid): else it is
*torn*, and ends to begin another (``begin_whole``), which the commit it
lacked is visible to a moment later.
"""
import logging
import time

from relstorage.adapters.poll import TORN

log = logging.getLogger(__name__)

#: How many links are kept: a poller whose last tid is among them checks
#: every commit since; one further behind (or a first read) checks the
#: last FIRST_READ_LINKS: a torn snapshot lacks commits made while it was
#: being taken, a moment, not a thousand commits.
CHAIN_KEPT = 10000
FIRST_READ_LINKS = 1000

#: Under the commit lock, after the UPDATE of ``commit_row`` that moved the
#: tid and added one to ``commit_seq``: the tid and the count in session
#: variables, the commit's link, and the link CHAIN_KEPT below it gone.
#: (One link by its key: the links have no gaps, so each goes in turn.  A
#: range from the lowest would walk the deleted links InnoDB has not
#: purged yet, at every commit, as many as commits made while a long
#: snapshot, a pack's analysis, holds the purge back.)
LINK = [
    'SET @relstorage_tid = (SELECT tid FROM commit_row WHERE id = 0), '
    '@relstorage_seq = (SELECT commit_seq FROM commit_row WHERE id = 0)',
    'INSERT INTO commit_chain (seq, tid) '
    'VALUES (@relstorage_seq, @relstorage_tid)',
    f'DELETE FROM commit_chain WHERE seq = @relstorage_seq - {CHAIN_KEPT}',
]

#: The row ``(TORN, n)`` (poll.split_poll): how many links above the one of
#: the tid ``%s`` (else the last FIRST_READ_LINKS) up to the snapshot's
#: count it does not see.  A join, not subqueries: both single rows are
#: read by unique keys first (MariaDB's "const" tables), so the count is a
#: range of the primary key, as long as the poller is behind (0.1 ms at
#: three commits, 0.4 ms at a thousand; as a subquery MariaDB 10.11 read
#: the whole table, 3 ms for 10,000 links).
_BASE = f'COALESCE(p.seq, GREATEST(r.commit_seq - {FIRST_READ_LINKS}, 0))'
CHECK = f"""
    SELECT {TORN}, r.commit_seq - {_BASE} - COUNT(c.seq)
    FROM commit_row r
    LEFT JOIN commit_chain p ON p.tid = %s
    LEFT JOIN commit_chain c ON c.seq > {_BASE} AND c.seq <= r.commit_seq
    WHERE r.id = 0"""

#: How long, in all, a snapshot's start waits for the commits it lacks.
TORN_WAIT = 2.0


def begin_whole(begin):
    """Begin a snapshot that lacks no commit up to its last tid.
    ``begin(again)`` begins one (ending the one before first if ``again``)
    and returns ``(torn, result)``; repeated while ``torn``, first at
    once, then with pauses growing to 50 ms.  After TORN_WAIT the snapshot
    is kept, with an error logged: only links missing from the table (a
    DBA's edit, a partial restore) make a snapshot stay torn.  Returns the
    last ``result`` and how many snapshots were torn."""
    torn, result = begin(False)
    if not torn:
        return result, 0
    count, pause = 1, 0.0
    deadline = time.monotonic() + TORN_WAIT
    while True:
        if pause:
            time.sleep(pause)
        torn, result = begin(True)
        if not torn:
            return result, count
        count += 1
        if time.monotonic() >= deadline:
            log.error(
                'a read snapshot still lacks commits up to its last tid '
                'after %d tries in %.1fs: the commit chain (the table '
                'commit_chain, schema step 0009) misses links; polls may '
                'not report every change until commit_seq in commit_row '
                'and the links agree (see migrations/README.rst)',
                count, TORN_WAIT)
            return result, count
        pause = min(max(pause * 2, 0.001), 0.05)
