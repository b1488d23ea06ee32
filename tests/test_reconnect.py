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


def test_lost_session_inside_a_commit_is_retryable(open_storage,
                                                   kill_sessions):
    storage = open_storage()
    oid = storage.new_oid()
    t = TransactionMetaData()
    storage.tpc_begin(t)
    storage.store(oid, z64, zodb_pickle(MinPO(1)), '', t)
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
