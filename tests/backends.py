"""The databases the tests run against.

Each backend creates a fresh, empty database for every test that asks for
one and drops it afterwards.  Tests choose backends through the ``backend``
fixture (parametrized, one marker per database) and branch on the adapter's
capabilities, never on the backend's name.
"""
import os
import shutil
import tempfile
import uuid

import pytest

from relstorage.pack.deletion import DELETING
from relstorage.storage import RelStorage

#: Where the test servers are; tests create and drop their own databases.
PG_DSN = os.environ.get('RELSTORAGE_TEST_PG_DSN',
                        'host=127.0.0.1 port=5432 user=root')
MYSQL_HOST = os.environ.get('RELSTORAGE_TEST_MYSQL_HOST', '127.0.0.1')
MYSQL_USER = os.environ.get('RELSTORAGE_TEST_MYSQL_USER', 'root')
#: An Oracle server, where there is one (none where relstorage is
#: developed): its connect string and an account that may CREATE USER.
ORACLE_DSN = os.environ.get('RELSTORAGE_ORACLE_DSN')
ORACLE_USER = os.environ.get('RELSTORAGE_ORACLE_USER', 'system')
ORACLE_PASSWORD = os.environ.get('RELSTORAGE_ORACLE_PASSWORD', '')


class SQLiteBackend:
    """SQLite needs no server: a database is a directory."""

    name = 'sqlite'
    marker = 'sqlite'

    def __init__(self):
        self._dirs = []

    def new_database(self):
        path = tempfile.mkdtemp(prefix='relstorage-sqlite-')
        self._dirs.append(path)
        return path

    def adapter(self, database, **adapter_options):
        from relstorage.adapters.sqlite import SQLiteAdapter
        return SQLiteAdapter(data_dir=database, **adapter_options)

    def capabilities(self):
        from relstorage.adapters.sqlite import SQLiteAdapter
        return SQLiteAdapter.capabilities

    def open(self, database, **options):
        return RelStorage(self.adapter(database), **options)

    def section(self, database):
        """The adapter section's name and the keys that reach
        ``database``."""
        return 'sqlite3', {'data-dir': database}

    def zconfig(self, database, keep_history=True, **extra):
        """A ZConfig text opening ``database``."""
        return _zconfig(*self.section(database), keep_history, extra)

    def cleanup(self):
        for path in self._dirs:
            shutil.rmtree(path, ignore_errors=True)
        self._dirs = []


class PostgreSQLBackend:
    """A PostgreSQL server: each database is created for one test and
    dropped afterwards."""

    marker = 'postgresql'

    def __init__(self, driver='psycopg2'):
        self.driver = driver
        self.name = 'postgresql' if driver == 'psycopg2' else (
            f'postgresql-{driver}')
        self._databases = []
        try:
            import psycopg2
            self._admin = psycopg2.connect(PG_DSN + ' dbname=postgres')
        except Exception as e:
            _unavailable(f'PostgreSQL at "{PG_DSN}"', e)
        self._admin.autocommit = True

    def new_database(self):
        name = 'relstorage_test_' + uuid.uuid4().hex[:12]
        with self._admin.cursor() as cursor:
            cursor.execute(f'CREATE DATABASE {name}')
        self._databases.append(name)
        return f'{PG_DSN} dbname={name}'

    def adapter(self, database, **adapter_options):
        from relstorage.adapters.postgresql import PostgreSQLAdapter
        adapter_options.setdefault('driver', self.driver)
        return PostgreSQLAdapter(dsn=database, **adapter_options)

    def capabilities(self):
        from relstorage.adapters.postgresql import PostgreSQLAdapter
        return PostgreSQLAdapter.capabilities

    def open(self, database, **options):
        return RelStorage(self.adapter(database), **options)

    def section(self, database):
        return 'postgresql', {'dsn': database, 'driver': self.driver}

    def zconfig(self, database, keep_history=True, **extra):
        return _zconfig(*self.section(database), keep_history, extra)

    def server(self):
        """``(host, port)`` of the server, as a replica file names it."""
        from psycopg2.extensions import parse_dsn
        params = parse_dsn(PG_DSN)
        return params.get('host', '127.0.0.1'), int(params.get('port', 5432))

    def sessions(self, database):
        """How many server sessions are connected to ``database``."""
        name = database.rsplit('dbname=', 1)[1]
        with self._admin.cursor() as cursor:
            cursor.execute('SELECT COUNT(*) FROM pg_stat_activity '
                           'WHERE datname = %s', (name,))
            return cursor.fetchone()[0]

    def kill_sessions(self, database):
        """Drop every server session connected to ``database``, as a server
        restart or pg_terminate_backend would.  Returns how many."""
        name = database.rsplit('dbname=', 1)[1]
        with self._admin.cursor() as cursor:
            cursor.execute("""
                SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                WHERE datname = %s AND pid <> pg_backend_pid()""", (name,))
            return len(cursor.fetchall())

    def cleanup(self):
        with self._admin.cursor() as cursor:
            for name in self._databases:
                cursor.execute(f'DROP DATABASE IF EXISTS {name} WITH (FORCE)')
        self._databases = []
        self._admin.close()


class MySQLBackend:
    """A MySQL or MariaDB server: each database is created for one test and
    dropped afterwards."""

    marker = 'mysql'

    def __init__(self, driver='mysqlclient'):
        self.driver = driver
        self.name = 'mysql' if driver == 'mysqlclient' else 'mysql-pymysql'
        self._databases = []
        try:
            import pymysql
            self._admin = pymysql.connect(host=MYSQL_HOST, user=MYSQL_USER,
                                          autocommit=True)
        except Exception as e:
            _unavailable(f'MySQL at {MYSQL_USER}@{MYSQL_HOST}', e)

    def new_database(self):
        name = 'relstorage_test_' + uuid.uuid4().hex[:12]
        with self._admin.cursor() as cursor:
            cursor.execute(f'CREATE DATABASE {name}')
        self._databases.append(name)
        return name

    def server(self):
        """``(host, port)`` of the server, as a replica file names it."""
        return MYSQL_HOST, 3306

    def _keys(self, database):
        return {'host': MYSQL_HOST, 'user': MYSQL_USER, 'db': database}

    def adapter(self, database, **adapter_options):
        from relstorage.adapters.mysql import MySQLAdapter
        adapter_options.setdefault('driver', self.driver)
        return MySQLAdapter(**self._keys(database), **adapter_options)

    def capabilities(self):
        from relstorage.adapters.mysql import MySQLAdapter
        return MySQLAdapter.capabilities

    def open(self, database, **options):
        return RelStorage(self.adapter(database), **options)

    def section(self, database):
        keys = self._keys(database)
        keys['driver'] = self.driver
        return 'mysql', keys

    def zconfig(self, database, keep_history=True, **extra):
        return _zconfig(*self.section(database), keep_history, extra)

    def sessions(self, database):
        """How many server sessions use ``database``."""
        with self._admin.cursor() as cursor:
            cursor.execute('SELECT COUNT(*) FROM information_schema.processlist '
                           'WHERE db = %s', (database,))
            return cursor.fetchone()[0]

    def kill_sessions(self, database):
        """Kill every server session using ``database``."""
        with self._admin.cursor() as cursor:
            cursor.execute("""
                SELECT id FROM information_schema.processlist
                WHERE db = %s AND id <> CONNECTION_ID()""", (database,))
            ids = [row[0] for row in cursor.fetchall()]
            for session in ids:
                try:
                    cursor.execute(f'KILL {int(session)}')
                except Exception:   # it ended by itself meanwhile
                    pass
        return len(ids)

    def drop_database(self, name):
        """Drop ``name`` (a quoted identifier if need be) whatever its
        sessions hold.  A session a failed test left open keeps its
        snapshot's metadata locks, and DROP DATABASE would wait for them
        for ``lock_wait_timeout``, a day by default, stalling every session
        queued behind it: its sessions are killed first, and the wait is
        bounded so that what still holds a lock fails the cleanup rather
        than hanging the run."""
        with self._admin.cursor() as cursor:
            cursor.execute('SET SESSION lock_wait_timeout = 60')
            self.kill_sessions(name.strip('`'))
            cursor.execute(f'DROP DATABASE IF EXISTS {name}')

    def cleanup(self):
        for name in self._databases:
            self.drop_database(name)
        self._databases = []
        self._admin.close()


class OracleBackend:
    """An Oracle server named by RELSTORAGE_ORACLE_DSN: each "database" is
    an account (a schema) created for one test and dropped afterwards.
    Without the variable every test of this backend is skipped, under CI
    too: no Oracle server can run where relstorage is developed."""

    marker = 'oracle'
    name = 'oracle'

    def __init__(self):
        if not ORACLE_DSN:
            pytest.skip('no Oracle server here: set RELSTORAGE_ORACLE_DSN '
                        '(with RELSTORAGE_ORACLE_USER and '
                        'RELSTORAGE_ORACLE_PASSWORD, an account that may '
                        'CREATE USER) to run this test on one')
        self._accounts = {}
        try:
            import oracledb
            self._admin = oracledb.connect(
                user=ORACLE_USER, password=ORACLE_PASSWORD, dsn=ORACLE_DSN)
        except Exception as e:
            _unavailable(f'Oracle at {ORACLE_USER}@{ORACLE_DSN}', e)

    def new_database(self):
        name = 'RS_TEST_' + uuid.uuid4().hex[:12].upper()
        password = 'Pw' + uuid.uuid4().hex
        with self._admin.cursor() as cursor:
            cursor.execute(f'CREATE USER {name} IDENTIFIED BY "{password}"')
            cursor.execute(f'GRANT CREATE SESSION, CREATE TABLE, '
                           f'CREATE SEQUENCE, UNLIMITED TABLESPACE TO {name}')
        self._accounts[name] = password
        return name

    def adapter(self, database, **adapter_options):
        from relstorage.adapters.oracle import OracleAdapter
        return OracleAdapter(user=database,
                             password=self._accounts[database],
                             dsn=ORACLE_DSN, **adapter_options)

    def capabilities(self):
        from relstorage.adapters.oracle import OracleAdapter
        return OracleAdapter.capabilities

    def open(self, database, **options):
        return RelStorage(self.adapter(database), **options)

    def section(self, database):
        return 'oracle', {'user': database,
                          'password': self._accounts[database],
                          'dsn': ORACLE_DSN}

    def zconfig(self, database, keep_history=True, **extra):
        return _zconfig(*self.section(database), keep_history, extra)

    def kill_sessions(self, database):
        """End every session of the account ``database``."""
        with self._admin.cursor() as cursor:
            cursor.execute('SELECT sid, serial# FROM v$session '
                           'WHERE username = :name', (database,))
            sessions = cursor.fetchall()
            for sid, serial in sessions:
                try:
                    cursor.execute(f"ALTER SYSTEM KILL SESSION "
                                   f"'{int(sid)},{int(serial)}' IMMEDIATE")
                except Exception:   # it ended by itself meanwhile
                    pass
        return len(sessions)

    def cleanup(self):
        with self._admin.cursor() as cursor:
            for name in self._accounts:
                cursor.execute(f'DROP USER {name} CASCADE')
        self._accounts = {}
        self._admin.close()


def _zconfig(section, adapter_keys, keep_history, extra):
    """``%import relstorage`` and a <relstorage> section with ``extra``
    options around an adapter section."""
    lines = [f'    keep-history {"true" if keep_history else "false"}']
    lines += [f'    {k.replace("_", "-")} {v}' for k, v in extra.items()]
    lines.append(f'    <{section}>')
    lines += [f'        {k} {v}' for k, v in adapter_keys.items()]
    lines.append(f'    </{section}>')
    return '%import relstorage\n<relstorage>\n' + '\n'.join(lines) + \
        '\n</relstorage>\n'


def _unavailable(what, error):
    """A database server the tests need is not there: under CI that is a
    failure, elsewhere the tests of that backend are skipped."""
    message = f'{what} is not reachable: {error}'
    if os.environ.get('CI'):
        pytest.fail(message + ' (CI requires it; see .ci/run)')
    pytest.skip(message)


BACKENDS = {
    'sqlite': SQLiteBackend,
    'postgresql': PostgreSQLBackend,
    'postgresql-psycopg': lambda: PostgreSQLBackend('psycopg'),
    'mysql': MySQLBackend,
    'mysql-pymysql': lambda: MySQLBackend('PyMySQL'),
    'oracle': OracleBackend,
}


def query(storage, sql):
    """The rows of ``sql`` (a list of tuples) on a connection of its own to
    ``storage``'s database: what is committed now."""
    cm = storage._adapter.connmanager
    conn = cm.connect()
    cursor = conn.cursor()
    try:
        cursor.execute(sql)
        return [tuple(row) for row in cursor.fetchall()]
    finally:
        cm.close(conn, cursor)


def by_page(storage):
    """Whether a pack of ``storage`` removes old revisions in a pass by
    page of their own before the garbage goes by object (PostgreSQL 14
    and later, history-preserving: relstorage.adapters.postgresql.pack)."""
    packer = storage._adapter.packer
    least = getattr(packer, 'TID_RANGE_SCAN', None)
    if least is None:
        return False
    (version,), = query(
        storage, "SELECT current_setting('server_version_num')::int")
    return version >= least


def deleting_phase(storage):
    """The progress name of a pack's deletions by object on ``storage``."""
    return DELETING[storage._adapter.packer.keep_history
                    and not by_page(storage)]


def write(storage, sql, params=()):
    """Run ``sql`` with ``params`` in a write transaction of its own on
    ``storage``'s database, and commit it."""
    cm = storage._adapter.connmanager
    conn = cm.connect()
    cursor = conn.cursor()
    try:
        cm.begin_write(cursor, 'test')
        cursor.execute(sql, params)
        cm.commit(conn, cursor)
    finally:
        cm.close(conn, cursor)
