"""A PostgreSQL or MariaDB server of one test's own, behind one interface:
``new_database()``, ``zconfig()``, ``open()``, ``restart()``, ``close()``
(tests/pgcluster.py and tests/mariadbserver.py start them)."""
from backends import _zconfig
from mariadbserver import MariaDBServer
from pgcluster import Cluster
from relstorage.storage import RelStorage


class PrivatePostgreSQL:
    def __init__(self, max_connections=30, settings=''):
        self.cluster = Cluster(standby=False,
                               max_connections=max_connections,
                               settings=settings)
        self.server = self.cluster.primary

    def raw_connect(self):
        """A plain driver connection, as another client's."""
        import psycopg2
        return psycopg2.connect(self.server.dsn())

    def new_database(self, tablespace=None):
        where = f' TABLESPACE {tablespace}' if tablespace else ''
        self.server.query(f'CREATE DATABASE faults{where}')
        return self.server.dsn('faults')

    def zconfig(self, database, keep_history=True, **extra):
        return _zconfig('postgresql', {'dsn': database}, keep_history,
                        extra)

    def open(self, database, **options):
        from relstorage.adapters.postgresql import PostgreSQLAdapter
        return RelStorage(PostgreSQLAdapter(dsn=database), **options)

    def restart(self):
        # "fast": sessions are ended and their transactions rolled back,
        # as an administrator's restart does.
        self.server.stop('fast')
        self.server.start()

    def close(self):
        self.cluster.close()


class PrivateMariaDB:
    def __init__(self, max_connections=30, settings=(), data_root=None):
        self.server = MariaDBServer(max_connections=max_connections,
                                    settings=settings, under=data_root)

    def raw_connect(self):
        """A plain driver connection, as another client's."""
        return self.server.connect()

    def new_database(self):
        self.server.query('CREATE DATABASE faults')
        return 'faults'

    def zconfig(self, database, keep_history=True, **extra):
        return _zconfig('mysql', self.server.adapter_keys(database),
                        keep_history, extra)

    def open(self, database, **options):
        from relstorage.adapters.mysql import MySQLAdapter
        return RelStorage(MySQLAdapter(**self.server.adapter_keys(database)),
                          **options)

    def restart(self):
        self.server.restart()

    def close(self):
        self.server.close()
