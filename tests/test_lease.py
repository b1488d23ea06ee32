"""The pack lock as a lease row (src/relstorage/adapters/lease.py): the
pack lock of a Galera cluster and of PostgreSQL behind a transaction
pooler, here on a single server of each: held while renewed, kept from
others, taken again once a holder that died lets it expire, and noticed
when lost.  tests/test_galera.py runs zodbpack against it through two
nodes of a cluster, tests/test_pgbouncer.py through PgBouncer."""
import time

import pytest
from relstorage.adapters.mysql import pack as mysql_pack
from relstorage.adapters.postgresql import pack as postgresql_pack
from relstorage.errors import PackError

from backends import BACKENDS

#: Seconds of the leases of these tests (renewed every second).
SECONDS = 3

#: The lease of each database that has one.
LEASES = {'mysql': mysql_pack.PackLease,
          'postgresql': postgresql_pack.PackLease}


@pytest.fixture(params=[pytest.param(name, marks=getattr(pytest.mark, name))
                        for name in LEASES])
def database_name(request):
    return request.param


@pytest.fixture
def connmanager(database_name):
    backend = BACKENDS[database_name]()
    database = backend.new_database()
    storage = backend.open(database)
    try:
        yield storage._adapter.connmanager
    finally:
        storage.close()
        backend.cleanup()


@pytest.fixture
def PackLease(database_name):  # noqa: N802 (the class under test)
    return LEASES[database_name]


def _row(cm):
    conn = cm.connect()
    try:
        cursor = conn.cursor()
        cursor.execute("SELECT holder FROM lease WHERE name = 'pack'")
        return [tuple(row) for row in cursor.fetchall()]
    finally:
        cm.close(conn, None)


def _delete(cm):
    conn = cm.connect()
    try:
        conn.cursor().execute("DELETE FROM lease WHERE name = 'pack'")
    finally:
        cm.close(conn, None)


def test_a_renewed_lease_keeps_others_out(connmanager, PackLease):
    lease = PackLease(connmanager, SECONDS).take()
    try:
        deadline = time.monotonic() + 2 * SECONDS
        while time.monotonic() < deadline:
            with pytest.raises(PackError, match=r'another pack .* for \d+s'):
                PackLease(connmanager, SECONDS).take()
            time.sleep(0.5)
        assert not lease.lost
    finally:
        lease()
    assert _row(connmanager) == []
    # Given back: the next one takes it at once.
    PackLease(connmanager, SECONDS).take()()


def test_the_lease_of_a_pack_that_died_expires(connmanager, PackLease):
    dead = PackLease(connmanager, SECONDS).take()
    # As if the process were killed: no renewal, nothing given back.
    dead._stop.set()
    dead._thread.join()
    connmanager.close(dead._conn, None)
    with pytest.raises(PackError, match='killed holds it for at most 3s'):
        PackLease(connmanager, SECONDS).take()
    time.sleep(SECONDS + 1.1)
    lease = PackLease(connmanager, SECONDS).take()
    try:
        assert _row(connmanager) == [(lease.holder,)]
    finally:
        lease()


def test_a_lost_lease_is_noticed_and_not_given_back(connmanager, PackLease):
    lease = PackLease(connmanager, SECONDS).take()
    try:
        _delete(connmanager)
        other = PackLease(connmanager, SECONDS).take()
        deadline = time.monotonic() + SECONDS
        while not lease.lost and time.monotonic() < deadline:
            time.sleep(0.1)
        assert lease.lost
    finally:
        lease()
    # Giving back the lost lease left the other's alone.
    try:
        assert _row(connmanager) == [(other.holder,)]
    finally:
        other()


def test_a_pack_whose_lease_was_lost_stops(monkeypatch, database_name,
                                           PackLease):  # noqa: N803
    """The pack checks its lease between batches and stops once it is
    lost, with what it removed so far committed.  (The packer takes the
    lease here on a single server.)
    """
    import transaction
    import ZODB
    from persistent.mapping import PersistentMapping
    from ZODB.serialize import referencesf
    backend = BACKENDS[database_name]()
    storage = backend.open(backend.new_database())
    packer = storage._adapter.packer

    def take_then_lose(conn, cursor):
        lease = PackLease(packer.connmanager, SECONDS).take()
        lease.lost = True
        return lease
    monkeypatch.setattr(packer, 'try_lock', take_then_lose)
    try:
        db = ZODB.DB(storage)
        with db.transaction() as conn:
            conn.root()['x'] = PersistentMapping()
        with db.transaction() as conn:
            del conn.root()['x']
        with pytest.raises(PackError, match='lost its lock'):
            storage.pack(time.time() + 1, referencesf)
        transaction.abort()
        db.close()
    finally:
        storage.close()
        backend.cleanup()
