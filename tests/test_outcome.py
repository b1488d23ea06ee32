"""What the check of a lost commit concludes on a cluster node
(src/relstorage/outcome.py): an unchanged object proves the commit absent
only once the cluster's membership has changed since the check began.
The cluster is played by ``cluster_view`` on a SQLite storage; the real
thing is tests/test_galera.py::test_a_killed_node."""
import pytest
from ZODB.Connection import TransactionMetaData
from ZODB.utils import u64
from ZODB.utils import z64

from backends import BACKENDS
from relstorage.errors import CommitOutcomeUnknownError
from relstorage.errors import DisconnectedError
from relstorage.storage.outcome import settle_lost_finish

pytestmark = pytest.mark.sqlite


@pytest.fixture
def storage():
    backend = BACKENDS['sqlite']()
    storage = backend.open(backend.new_database())
    yield storage
    storage.close()
    backend.cleanup()


def _settle(storage, views, reach_wait=2.0):
    """Settle a lost commit based on the current state of one object (so
    unchanged: not committed), the connection manager saying the cluster
    views ``views`` one after the other (taken from the list; the last one
    from then on)."""
    txn = TransactionMetaData()
    storage.tpc_begin(txn)
    oid = storage.new_oid()
    storage.store(oid, z64, b'state', '', txn)
    storage.tpc_vote(txn)
    tid = storage.tpc_finish(txn)
    adapter = storage._adapter
    cm = adapter.connmanager
    seen = views
    cm.cluster_view = lambda cursor: seen.pop(0) if len(seen) > 1 else seen[0]
    opened = []

    def open_cursor():
        opened.append(cm.open_store())
        return opened[-1]

    def drop():
        while opened:
            cm.close(*opened.pop())
    try:
        lost = DisconnectedError('lost in the last step')
        lost.__cause__ = OSError('connection reset')
        settle_lost_finish('test', adapter, {u64(oid): u64(tid)}, lost,
                           open_cursor, drop, reach_wait=reach_wait)
    finally:
        drop()


def test_without_a_cluster_an_unchanged_object_settles_it(storage):
    with pytest.raises(DisconnectedError, match='not committed'):
        _settle(storage, [None])


def test_on_a_cluster_it_waits_for_the_membership_to_change(storage):
    views = ['3', '3', '4']
    with pytest.raises(DisconnectedError, match='not committed'):
        _settle(storage, views)
    # It looked until the view changed: three checks.
    assert views == ['4']


def test_a_membership_that_does_not_change_leaves_it_unknown(storage):
    with pytest.raises(CommitOutcomeUnknownError,
                       match='had not changed its membership'):
        _settle(storage, ['3'], reach_wait=1.0)
