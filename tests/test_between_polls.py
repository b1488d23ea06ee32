"""Reads between polls.

ZODB polls at the end of every transaction (``afterCompletion``, after
``sync(False)``), and that poll opens a snapshot for an application that
reads on without ``transaction.begin()``.  So that no database session sits
inside a transaction while the application is idle, a thread ends that
snapshot once it has served no load for a while (relstorage.storage.idle),
and with explicit transactions there is no such poll at all.  A read after
that starts a snapshot whose objects changed since the poll are *moved*:
ZODB still holds their older state, so the storage gives the state as of
the poll where history holds it, and ReadConflictError where it does not
(as ZODB's own MVCC adapter does).  The next poll reports them.
"""
import time

import pytest
import transaction
import ZODB
from persistent.mapping import PersistentMapping
from ZODB.POSException import ReadConflictError
from ZODB.tests.StorageTestBase import zodb_unpickle
from ZODB.utils import z64

from relstorage.storage import idle

from test_storage import _commit


def _value(storage, oid):
    return zodb_unpickle(storage.load(oid)[0]).value


def _wait_ended(storage):
    deadline = time.monotonic() + 5
    while True:
        with storage._lock:
            if storage._snapshot_tid is None and not storage._rollback_due:
                return
        assert time.monotonic() < deadline, 'the snapshot stayed open'
        time.sleep(idle.IDLE_END / 4)


def _end_of_transaction(storage):
    """What ZODB does when a transaction ends (implicit transactions)."""
    storage.afterCompletion()
    storage.sync(False)
    return storage.poll_invalidations()


def test_the_snapshot_between_transactions_ends_when_unread(open_storage):
    root = open_storage()
    reader = root.new_instance()
    try:
        oid = root.new_oid()
        _commit(root, oid, z64, 1)
        reader.poll_invalidations()
        assert _value(reader, oid) == 1
        assert _end_of_transaction(reader) == []
        assert reader._snapshot_tid is not None
        _wait_ended(reader)
        # Read once: the view of a transaction begun without begin(),
        # which stays (a pack must keep what it reaches).
        assert _end_of_transaction(reader) == []
        snapshot = reader._snapshot_tid
        assert _value(reader, oid) == 1
        time.sleep(idle.IDLE_BETWEEN * 2)
        with reader._lock:
            assert reader._snapshot_tid == snapshot
    finally:
        reader.release()


def test_a_read_between_polls_sees_the_polled_state(open_storage,
                                                    keep_history):
    root = open_storage()
    reader = root.new_instance()
    try:
        changed, unchanged = root.new_oid(), root.new_oid()
        tid = _commit(root, changed, z64, 1)
        _commit(root, unchanged, z64, 10)
        reader.poll_invalidations()
        assert _end_of_transaction(reader) == []
        _wait_ended(reader)
        # Another client changes one object before this one reads again
        # (without a poll: no transaction.begin()).
        _commit(root, changed, tid, 2)
        assert _value(reader, unchanged) == 10
        if keep_history:
            # ZODB's view is the polled tid: the state it had then.
            assert _value(reader, changed) == 1
        else:
            # Gone from a history-free database.
            with pytest.raises(ReadConflictError) as caught:
                reader.load(changed)
            assert 'transaction.begin()' in str(caught.value)
        # The next poll reports it, and the read gives the new state.
        assert reader.poll_invalidations() == [changed]
        assert _value(reader, changed) == 2
    finally:
        reader.release()


def test_a_read_after_a_commit_without_a_poll(open_storage, keep_history):
    """Explicit transactions: no poll after a commit.  The next read
    treats what others committed since the last poll as moved, and not
    this instance's own commit."""
    root = open_storage()
    writer = root.new_instance()
    try:
        mine, theirs = root.new_oid(), root.new_oid()
        tid = _commit(root, theirs, z64, 1)
        writer.poll_invalidations()
        assert _value(writer, theirs) == 1
        _commit(root, theirs, tid, 2)
        _commit(writer, mine, z64, 5)
        assert _value(writer, mine) == 5
        if keep_history:
            assert _value(writer, theirs) == 1
        else:
            with pytest.raises(ReadConflictError):
                writer.load(theirs)
        assert writer.poll_invalidations() == [theirs]
        assert _value(writer, theirs) == 2
    finally:
        writer.release()


def test_abort_shows_what_others_committed(open_storage):
    """The poll at the end of a transaction is a real one: after abort()
    (no begin()), a connection sees what another committed before."""
    db = ZODB.DB(open_storage())
    try:
        tm1, tm2 = transaction.TransactionManager(), (
            transaction.TransactionManager())
        c1, c2 = db.open(tm1), db.open(tm2)
        c1.root()['m'] = PersistentMapping(v=1)
        tm1.commit()
        tm2.abort()
        assert c2.root()['m']['v'] == 1
        c1.root()['m']['v'] = 2
        tm1.commit()
        tm2.abort()
        assert c2.root()['m']['v'] == 2
        c2.root()['m']['v'] = 3
        tm2.commit()
        tm1.abort()
        assert c1.root()['m']['v'] == 3
        c1.close()
        c2.close()
    finally:
        db.close()


def test_last_transaction_leaves_no_snapshot_open(open_storage, backend):
    """lastTransaction() on an instance without a snapshot (a root
    storage: ZODB's DB and zodbconvert's destination read through other
    instances, or not at all) reads the last tid and leaves no session
    inside a transaction.  Kept open, that snapshot held back VACUUM and
    InnoDB's purge for a whole zodbconvert run, and its commits slowed as
    the old row versions piled up (a million objects: 6,000 records a
    second at first, 1,400 after five minutes).  The idle thread ends it
    even when the instance is busy the first time it looks."""
    root = open_storage()
    oid = root.new_oid()
    tid = _commit(root, oid, z64, 1)
    fresh = open_storage()
    with fresh._lock:   # busy (committing, say) when the thread first looks
        assert fresh.lastTransaction() == tid
        time.sleep(idle.IDLE_END * 3)
    # Then it commits on, more often than the thread's delay, reading its
    # source between commits (each commit leaves a ROLLBACK due; none may
    # put off the one due already).
    serial, value = tid, 1
    deadline = time.monotonic() + 5
    while True:
        value += 1
        serial = _commit(fresh, oid, serial, value)
        time.sleep(idle.IDLE_END / 10)
        with fresh._lock:
            if (fresh._snapshot_tid is None and not fresh._rollback_due
                    and fresh._adopted is None):
                break
        assert time.monotonic() < deadline, (
            'the snapshot stayed open while the storage committed')
    if backend.marker == 'postgresql':
        # libpq says whether the session is in a transaction.
        assert not fresh._adapter.connmanager._in_transaction(
            fresh._load_conn)
    # A commit by another is seen by the next call, and a load starts a
    # snapshot of its own.
    later = _commit(root, oid, serial, -1)
    assert fresh.lastTransaction() == later
    assert _value(fresh, oid) == -1
