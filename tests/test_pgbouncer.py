"""relstorage behind PgBouncer (tests/pgbouncer.py: Debian's package, a
private instance in front of the shared server, with fewer server
connections in its pool than there are clients).

In ``transaction`` pooling mode (the adapter's transaction-pooler) ZODB's
conformance suites in both history modes, the multi-process invariant
test, the JSON mirror's commits staged in a temporary table, a pack
while others write, ``zodbconvert`` and a restart of the
server under its clients (a server of the test's own, behind a bouncer
of its own) run through it: the tests of the other modules, collected
here again with ``backend`` and ``private`` overridden (blobs kept in the
database: test_pgbouncer_blobs.py).  In
``session`` mode a busy threaded process with max-connections stays
within the pool."""
import time

import pytest
from ZODB.utils import u64

from pgbouncer import Bounced
from pgbouncer import Bouncer

# The tests of other modules, run here through the bouncer (this module's
# ``backend`` fixture), with the fixtures they need.
from test_conformance import test_history_free  # noqa: F401
from test_conformance import test_history_preserving  # noqa: F401
from test_invariants import test_account_transfers  # noqa: F401
from test_mirror import test_a_staged_commit_keeps_little_in_memory  # noqa: F401,E501
from test_mirror import test_an_aborted_staged_commit_leaves_no_row  # noqa: F401,E501
from test_pack import test_the_pack_time_stays_before_other_clients_open_transactions  # noqa: F401,E501
from test_pack import test_writers_keep_committing_and_lose_nothing_during_a_pack  # noqa: F401,E501
from test_pool import _busy
from test_pool import _watch
from test_restart import test_server_restart  # noqa: F401
from test_zodbconvert import large_source  # noqa: F401
from test_zodbconvert import test_round_trip  # noqa: F401

pytestmark = pytest.mark.postgresql

#: Server connections per database in the bouncers' pools.
POOL_SIZE = 4


def _bouncer(pool_mode):
    from backends import PostgreSQLBackend
    direct = PostgreSQLBackend()
    server = direct.server()
    direct.cleanup()
    return Bouncer(server, pool_mode=pool_mode, pool_size=POOL_SIZE)


@pytest.fixture(scope='module')
def transaction_bouncer():
    bouncer = _bouncer('transaction')
    yield bouncer
    bouncer.close()


@pytest.fixture(scope='module')
def session_bouncer():
    bouncer = _bouncer('session')
    yield bouncer
    bouncer.close()


@pytest.fixture
def backend(transaction_bouncer):
    """The tests collected from other modules run through the
    transaction-mode bouncer (the conftest's ``backend``, overridden)."""
    bounced = Bounced(transaction_bouncer)
    yield bounced
    bounced.cleanup()


@pytest.mark.parametrize('mode', ['session', 'transaction'])
@pytest.mark.parametrize('driver', ['psycopg2', 'psycopg'])
def test_a_busy_process_stays_within_the_pool(request, mode, driver,
                                              keep_history):
    """Eight threads serving requests, with max-connections at the pool's
    size: every commit lands, the server never sees more sessions than
    the pool holds."""
    bouncer = request.getfixturevalue(f'{mode}_bouncer')
    bounced = Bounced(bouncer, driver)
    database = bounced.new_database()
    try:
        import ZODB
        db = ZODB.DB(bounced.open(database, keep_history=keep_history,
                                  max_connections=POOL_SIZE,
                                  max_connections_wait=20))
        try:
            stop = _watch(lambda: bounced.server_sessions(database))
            try:
                assert _busy(db) == []
            finally:
                most = stop()
        finally:
            db.close()
        assert 0 < most <= POOL_SIZE
    finally:
        bounced.cleanup()


@pytest.mark.parametrize('driver', ['psycopg2', 'psycopg'])
def test_commits_leave_no_value_in_the_server_sessions(
        transaction_bouncer, driver, keep_history):
    """The tid a commit's last round trip carries across its COMMIT in a
    custom setting is emptied in that round trip: the next clients of
    those server sessions find no value there."""
    bounced = Bounced(transaction_bouncer, driver)
    database = bounced.new_database()
    try:
        import psycopg2
        import ZODB
        db = ZODB.DB(bounced.open(database, keep_history=keep_history))
        found = []
        try:
            tids = set()
            for n in range(2 * POOL_SIZE):
                with db.transaction() as conn:
                    conn.root()['n'] = n
                tids.add(str(u64(db.lastTransaction())))
            # The snapshots left are ended by the idle thread; then the
            # server sessions are the bouncer's to give (closing the
            # storage first would close those still in a transaction).
            time.sleep(1)
            conn = psycopg2.connect(database)
            try:
                conn.autocommit = True
                cursor = conn.cursor()
                for _ in range(4 * POOL_SIZE):      # every server session
                    cursor.execute("SELECT current_setting("
                                   "'relstorage.result', true)")
                    found.append(cursor.fetchone()[0])
            finally:
                conn.close()
        finally:
            db.close()
        assert len(tids) == 2 * POOL_SIZE
        assert not tids & set(found), found
        assert '' in found      # (the commits did run in those sessions)
    finally:
        bounced.cleanup()


class BouncedPrivatePostgreSQL:
    """A PostgreSQL server of the test's own (tests/private.py) behind a
    PgBouncer of its own in transaction mode, with the interface of
    test_restart.py's ``private``: the server restarts under the bouncer,
    the bouncer stays."""

    def __init__(self):
        from private import PrivatePostgreSQL
        self.direct = PrivatePostgreSQL()
        server = self.direct.server
        self.bouncer = Bouncer(('127.0.0.1', server.port),
                               pool_mode='transaction', pool_size=POOL_SIZE)

    def new_database(self):
        direct = self.direct.new_database()
        return self.bouncer.dsn(direct.rsplit('dbname=', 1)[1])

    def zconfig(self, database, keep_history=True, **extra):
        from backends import _zconfig
        return _zconfig('postgresql', {'dsn': database,
                                       'transaction-pooler': 'true'},
                        keep_history, extra)

    def open(self, database, **options):
        from relstorage.adapters.postgresql import PostgreSQLAdapter
        from relstorage.storage import RelStorage
        return RelStorage(PostgreSQLAdapter(dsn=database,
                                            transaction_pooler=True),
                          **options)

    def restart(self):
        self.direct.restart()

    def close(self):
        try:
            self.bouncer.close()
        finally:
            self.direct.close()


@pytest.fixture
def private():
    """test_restart.py's server, behind the bouncer."""
    server = BouncedPrivatePostgreSQL()
    yield server
    server.close()
