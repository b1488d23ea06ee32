"""A database server that drops our sessions (restart, pg_terminate_backend):
between transactions the storage reconnects by itself; inside a commit the
commit fails with a retryable DisconnectedError and nothing of it is
visible."""
import pytest
import transaction
import ZODB
from persistent.mapping import PersistentMapping
from transaction.interfaces import TransientError
from ZODB.Connection import TransactionMetaData
from ZODB.tests.MinPO import MinPO
from ZODB.tests.StorageTestBase import zodb_pickle
from ZODB.utils import p64
from ZODB.utils import u64
from ZODB.utils import z64

from relstorage.errors import DisconnectedError


@pytest.fixture
def kill_sessions(backend, database):
    if not hasattr(backend, 'kill_sessions'):
        pytest.skip(f'{backend.name} is embedded: there are no server '
                    f'sessions to drop')
    return lambda: backend.kill_sessions(database)


def test_reconnects_between_transactions(open_storage, kill_sessions):
    db = ZODB.DB(open_storage())
    try:
        tm = transaction.TransactionManager()
        conn = db.open(tm)
        with tm:
            conn.root()['m'] = PersistentMapping(v=1)
        assert kill_sessions() >= 1
        # The next transaction starts a new snapshot on a new session, and
        # commits on a new one too: the application sees nothing.
        with tm:
            assert conn.root()['m']['v'] == 1
            conn.root()['m']['v'] = 2
        assert kill_sessions() >= 1
        assert len(db.storage) == 2          # a read outside a commit
        assert db.storage.history(z64)       # likewise
        other = db.open(transaction.TransactionManager())
        assert other.root()['m']['v'] == 2
        other.close()
        conn.close()
    finally:
        db.close()


def test_lost_session_before_a_commit_reached_the_server(open_storage,
                                                         kill_sessions):
    """Where the commit's BEGIN waits for its first statement, a session
    lost after tpc_begin held nothing of the commit: the vote reconnects
    and the commit goes through, as it would have had tpc_begin found the
    session gone."""
    storage = open_storage()
    oid = storage.new_oid()
    t = TransactionMetaData()
    storage.tpc_begin(t)
    storage.store(oid, z64, zodb_pickle(MinPO(1)), '', t)
    if getattr(storage._txn.cursor, 'begun', True):
        pytest.skip('this database starts the commit at tpc_begin')
    assert kill_sessions() >= 1
    storage.tpc_vote(t)
    tid = storage.tpc_finish(t)
    assert storage.load(oid)[1] == tid


def test_lost_session_inside_a_commit_is_retryable(open_storage,
                                                   kill_sessions):
    storage = open_storage()
    oid = storage.new_oid()
    t = TransactionMetaData()
    storage.tpc_begin(t)
    storage.store(oid, z64, zodb_pickle(MinPO(1)), '', t)
    # The commit's transaction has started on the server (else the vote
    # would reconnect: the test above).
    getattr(storage._txn.cursor, 'raw', None)
    assert kill_sessions() >= 1
    with pytest.raises(DisconnectedError) as caught:
        storage.tpc_vote(t)
    storage.tpc_abort(t)
    assert isinstance(caught.value, TransientError)
    assert 'nothing of this transaction was committed' in str(caught.value)
    # Nothing of it is visible, and the retry goes through.
    with pytest.raises(KeyError):
        storage.load(oid)
    t = TransactionMetaData()
    storage.tpc_begin(t)
    storage.store(oid, z64, zodb_pickle(MinPO(2)), '', t)
    storage.tpc_vote(t)
    tid = storage.tpc_finish(t)
    assert storage.load(oid)[1] == tid
    # New object ids keep coming after the allocator's session was dropped.
    kill_sessions()
    assert storage.new_oid() != oid


# -- the connection lost in the last step of a commit ---------------------

def _begin_one(storage, oid, serial, value):
    t = TransactionMetaData()
    storage.tpc_begin(t)
    storage.store(oid, serial, zodb_pickle(MinPO(value)), '', t)
    storage.tpc_vote(t)
    return t


def _committed(storage, value):
    oid = storage.new_oid()
    t = _begin_one(storage, oid, z64, value)
    return oid, storage.tpc_finish(t)


def test_lost_session_in_finish_is_checked(open_storage, kill_sessions):
    """The session dropped after vote: the storage checks on a new
    connection that the commit did not happen, then says it may be
    retried; it commits again without help."""
    storage = open_storage()
    oid, tid = _committed(storage, 1)
    t = _begin_one(storage, oid, tid, 2)
    assert kill_sessions() >= 1
    with pytest.raises(DisconnectedError) as caught:
        storage.tpc_finish(t)
    assert isinstance(caught.value, TransientError)
    assert 'shows it was not committed' in str(caught.value)
    storage.tpc_abort(t)                 # harmless after the failed finish
    assert storage.load(oid)[1] == tid
    t = _begin_one(storage, oid, tid, 3)
    assert storage.tpc_finish(t) > tid


def _fail_finish(monkeypatch, after):
    """Make PendingTransaction.finish lose the connection, before the
    real finish or (``after``) once it has committed, as a reply lost on
    its way back would."""
    from relstorage.storage import commit as tpc
    real = tpc.PendingTransaction.finish

    def finish(self, *args, **kwargs):
        if after:
            real(self, *args, **kwargs)
        # As the connection manager translates a driver's error (its text
        # true of every step but the commit's last).
        raise DisconnectedError(
            'committing: lost the connection; nothing of this transaction '
            'was committed (simulated)') from ConnectionResetError(
                'server closed the connection unexpectedly')
    monkeypatch.setattr(tpc.PendingTransaction, 'finish', finish)
    return lambda: monkeypatch.setattr(tpc.PendingTransaction, 'finish',
                                       real)


def test_lost_before_the_commit_reached_the_database(open_storage,
                                                     monkeypatch):
    storage = open_storage()
    oid, tid = _committed(storage, 1)
    new = storage.new_oid()
    restore = _fail_finish(monkeypatch, after=False)
    t = TransactionMetaData()
    storage.tpc_begin(t)
    storage.store(oid, tid, zodb_pickle(MinPO(2)), '', t)
    storage.store(new, z64, zodb_pickle(MinPO('new')), '', t)
    storage.tpc_vote(t)
    with pytest.raises(DisconnectedError) as caught:
        storage.tpc_finish(t)
    restore()
    assert 'shows it was not committed' in str(caught.value)
    assert isinstance(caught.value, TransientError)
    assert storage.load(oid)[1] == tid
    with pytest.raises(KeyError):
        storage.load(new)
    # Not stuck: the next commit (no tpc_abort first, as after a failed
    # finish in ``transaction``) goes through.
    t = _begin_one(storage, oid, tid, 3)
    assert storage.tpc_finish(t) > tid


def test_lost_reply_of_a_commit_is_unknown(open_storage, monkeypatch):
    """The commit happened but its reply was lost: the storage cannot prove
    it did not commit, and says the outcome is unknown with an error that
    is not retryable (a retry would apply the work twice)."""
    from relstorage.errors import CommitOutcomeUnknownError
    storage = open_storage()
    oid, tid = _committed(storage, 1)
    restore = _fail_finish(monkeypatch, after=True)
    t = _begin_one(storage, oid, tid, 2)
    with pytest.raises(CommitOutcomeUnknownError) as caught:
        storage.tpc_finish(t)
    restore()
    assert not isinstance(caught.value, TransientError)
    message = str(caught.value)
    assert 'whether the database committed it is unknown' in message
    assert 'have all changed since' in message
    # The driver's words, not the lower layer's "nothing of this
    # transaction was committed".
    assert 'server closed the connection unexpectedly' in message
    assert 'nothing of this transaction' not in message
    # Wholly committed, and the storage goes on.
    storage.poll_invalidations()
    state, now = storage.load(oid)
    assert now > tid
    t = _begin_one(storage, oid, now, 3)
    assert storage.tpc_finish(t) > now


def test_lost_commit_through_transaction(open_storage, monkeypatch):
    """Through ZODB and ``transaction``: the failed commit can be aborted
    and retried by the usual loop."""
    db = ZODB.DB(open_storage())
    try:
        tm = transaction.TransactionManager()
        conn = db.open(tm)
        with tm:
            conn.root()['m'] = PersistentMapping(v=1)
        restore = _fail_finish(monkeypatch, after=False)
        tm.begin()
        conn.root()['m']['v'] = 2
        with pytest.raises(DisconnectedError):
            tm.commit()
        tm.abort()
        restore()
        for attempt in tm.attempts(3):
            with attempt:
                conn.root()['m']['v'] += 10
        assert conn.root()['m']['v'] == 11
        conn.close()
    finally:
        db.close()


# -- the connection lost inside a read snapshot ---------------------------

@pytest.mark.parametrize('read', ['load', 'prefetch', 'loadBefore'])
def test_lost_session_inside_a_read_snapshot(open_storage, kill_sessions,
                                             read):
    """The session of an open read snapshot is dropped (a server that
    crashed or was restarted): the next read that goes to the database
    raises a retryable DisconnectedError, not the driver's own error, and
    the next snapshot reads on a new session."""
    storage = open_storage()
    first, _ = _committed(storage, 1)
    second, tid = _committed(storage, 2)
    # Another storage, whose cache has neither object.
    reader = open_storage()
    reader.poll_invalidations()
    reader.load(first)
    assert kill_sessions() >= 1
    with pytest.raises(DisconnectedError) as caught:
        if read == 'load':
            reader.load(second)
        elif read == 'prefetch':
            reader.prefetch([second])
        else:
            reader.loadBefore(second, p64(u64(tid) + 1))
    assert isinstance(caught.value, TransientError)
    reader.poll_invalidations()
    assert reader.load(second)[1] == tid
