"""What became of a commit whose connection was lost in its last step.

The last step of a commit sends the COMMIT (on PostgreSQL and MySQL in the
same round trip as the rows).  When the connection fails while that is on
its way, the database may have committed or not, and the client cannot
tell from the error.  A TransientError would make ``transaction``'s retry
loop run the work again, which applies it twice when the first attempt
did commit; a plain error would throw away a transaction that in fact
failed cleanly.  So the storage asks a new connection:

* It first takes the locks the lost session held or was waiting for: the
  rows of the objects the commit writes and the commit lock.  Until the
  database has ended the lost session (which it may still be running, if
  the network failed rather than the server), those locks are not granted
  and the check waits, up to commit-lock-timeout.
* If any object is still at the tid the commit was based on (a new object:
  still absent), the commit did not happen: the database commits all of a
  transaction or none of it, and any commit that touches an object gives it
  a new tid.  That is a DisconnectedError, retryable.
* Otherwise the commit may have happened, or another one may have changed
  those objects after this one failed (two writers can even produce the
  same bytes): CommitOutcomeUnknownError, which says what was found.

On a cluster whose nodes apply each other's commits (Galera) the check may
run on another node than the lost one, which sees the commit only once it
has received it.  Its reads wait until the node has applied what the
cluster acknowledged (``connmanager.sync``), but when the lost node died
while its commit was on its way to the others, that commit is settled
only when the cluster has changed its membership (``cluster_view``): a
commit the lost node sent is then on every remaining node, or on none.
So an unchanged object proves nothing until the view has changed since
the check began; until then the check is made again, and if the view
does not change within the reach time (the lost node alive, its commit
perhaps still running there, where the check's locks cannot reach), the
outcome is unknown.
"""
import logging
import time

from ZODB.utils import p64
from ZODB.utils import tid_repr

from relstorage.errors import CommitOutcomeUnknownError
from relstorage.errors import DisconnectedError

log = logging.getLogger(__name__)

#: Seconds to keep trying to reach the database again after the connection
#: went in the last step of a commit (a restarting server takes a few).
REACH_WAIT = 20.0

#: Seconds between those attempts.
REACH_PAUSE = 0.5


def settle_lost_finish(name, adapter, based_on, lost, open_cursor, drop,
                       reach_wait=None):
    """Raise the error that says what became of a commit whose connection
    was lost (``lost``, a DisconnectedError) in its last step.

    ``based_on``: ``{oid: tid}`` the commit was based on (see
    PendingTransaction.based_on); ``open_cursor()`` opens the committing
    connection anew and returns ``(conn, cursor)``, ``drop()`` closes it.  Always
    raises: DisconnectedError when the commit certainly did not happen,
    CommitOutcomeUnknownError otherwise.
    """
    connmanager = adapter.connmanager
    if reach_wait is None:
        reach_wait = REACH_WAIT
    # The translated error says that nothing of the transaction was
    # committed, true of every step but this last one: the cause given is
    # the driver's own words.
    cause = _driver_words(lost)
    if not based_on:
        unknown(name, 'it wrote no object whose state could show it',
                cause, lost)
    deadline = time.monotonic() + reach_wait
    oids = sorted(based_on)
    first_view = None
    while True:
        drop()
        try:
            with connmanager.translate('checking a lost commit'):
                conn, cursor = open_cursor()
                connmanager.begin_store(conn, cursor)
                try:
                    # A cluster node that has not applied the lost commit
                    # yet would call it not committed.
                    view = connmanager.cluster_view(cursor)
                    connmanager.sync(cursor)
                    current, _ = adapter.locker.lock_for_vote(
                        cursor, oids, [], staged=False)
                    adapter.locker.hold_commit_lock(cursor)
                    current = adapter.mover.current_tids(cursor, oids)
                finally:
                    connmanager.rollback(conn, cursor)
        except DisconnectedError as e:
            if time.monotonic() >= deadline:
                unknown(name, f'the database was still out of reach after '
                        f'{reach_wait:g}s ({e})', cause, lost)
            time.sleep(REACH_PAUSE)
            continue
        except Exception as e:
            # A lock timeout: the lost session may still be running.
            unknown(name, f'checking failed: {type(e).__name__}: {e}',
                    cause, lost)
        if first_view is None:
            first_view = view
        unsettled = view is not None and view == first_view
        if not unsettled or all(current.get(oid, 0) != based_on[oid]
                                for oid in oids):
            break
        # A cluster node, and an object unchanged yet: see the docstring.
        if time.monotonic() >= deadline:
            unknown(name, f'the cluster had not changed its membership '
                    f'after {reach_wait:g}s, so the lost node may still '
                    f'commit it', cause, lost)
        time.sleep(REACH_PAUSE)
    unchanged = [oid for oid in oids
                 if current.get(oid, 0) == based_on[oid]]
    if unchanged:
        log.warning('%s: lost the connection while finishing a commit; '
                    'oid %s is unchanged, so it was not committed', name,
                    f'0x{unchanged[0]:x}')
        raise DisconnectedError(
            f'{name}: lost the connection while finishing the commit; a new '
            f'connection shows it was not committed (oid 0x{unchanged[0]:x} '
            f'is still at tid {tid_repr(p64(based_on[unchanged[0]]))}): '
            f'retry the transaction ({cause})') from lost
    tids = sorted({current.get(oid, 0) for oid in oids})
    unknown(name, f'the {len(oids)} objects it wrote have all changed since '
            f'(now at tid {", ".join(tid_repr(p64(t)) for t in tids[:3])}'
            f'{", ..." if len(tids) > 3 else ""}): by this commit, or by '
            f'another one after it failed', cause, lost)


def _driver_words(lost):
    """The first line of the driver error under ``lost``, or its own text
    when it has none."""
    driver_error = lost.__cause__
    words = str(driver_error).strip() if driver_error is not None else ''
    return words.splitlines()[0] if words else str(lost)


def unknown(name, found, cause, lost):
    log.error('%s: lost the connection while finishing a commit and cannot '
              'tell whether it was committed: %s', name, found)
    raise CommitOutcomeUnknownError(
        f'{name}: lost the connection while finishing the commit; whether '
        f'the database committed it is unknown: {found}.  It is wholly '
        f'committed or wholly absent: look before doing the work again '
        f'({cause})') from lost
