"""The private PgBouncer of the tests: benchmarks/harness/pgbouncer.py's
``Bouncer`` (loaded by path, as the relay is), which is skipped where the
program is missing (and fails under CI, like an unreachable server), and
``Bounced``, a backend whose storages reach the shared server through it.
"""
import importlib.util
from pathlib import Path

from backends import _unavailable

_PATH = (Path(__file__).resolve().parent.parent / 'benchmarks' / 'harness'
         / 'pgbouncer.py')


def _module():
    spec = importlib.util.spec_from_file_location('bench_pgbouncer', _PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_harness = _module()
program = _harness.program


def Bouncer(server, pool_mode='transaction', pool_size=4):
    """A started ``harness.pgbouncer.Bouncer``, or the test skipped."""
    try:
        return _harness.Bouncer(server, pool_mode, pool_size)
    except _harness.Missing as e:
        _unavailable('pgbouncer (apt-get install pgbouncer)', str(e))


class Bounced:
    """A backend with tests/backends.py's interface whose storages reach
    the shared PostgreSQL server through ``bouncer``, with the adapter's
    transaction-pooler on when the bouncer pools transactions.  Its
    databases are made (and dropped) on the server directly."""

    marker = 'postgresql'

    def __init__(self, bouncer, driver='psycopg2'):
        from backends import PostgreSQLBackend
        self._direct = PostgreSQLBackend(driver)
        self.bouncer = bouncer
        self.driver = driver
        self.pooler = bouncer.pool_mode == 'transaction'
        self.name = f'pgbouncer-{bouncer.pool_mode}'

    def new_database(self):
        direct = self._direct.new_database()
        return self.bouncer.dsn(direct.rsplit('dbname=', 1)[1])

    def adapter(self, database, **adapter_options):
        from relstorage.adapters.postgresql import PostgreSQLAdapter
        adapter_options.setdefault('driver', self.driver)
        adapter_options.setdefault('transaction_pooler', self.pooler)
        return PostgreSQLAdapter(dsn=database, **adapter_options)

    def capabilities(self):
        return self._direct.capabilities()

    def open(self, database, **options):
        from relstorage.storage import RelStorage
        return RelStorage(self.adapter(database), **options)

    def section(self, database):
        keys = {'dsn': database, 'driver': self.driver}
        if self.pooler:
            keys['transaction-pooler'] = 'true'
        return 'postgresql', keys

    def zconfig(self, database, keep_history=True, **extra):
        from backends import _zconfig
        return _zconfig(*self.section(database), keep_history, extra)

    def server_sessions(self, database):
        """The server's sessions on ``database`` (what the bouncer holds
        there, and anyone else's)."""
        name = database.rsplit('dbname=', 1)[1]
        return self._direct.sessions(f'dbname={name}')

    def cleanup(self):
        self._direct.cleanup()
