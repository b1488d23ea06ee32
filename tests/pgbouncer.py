"""A PgBouncer of one test module's own, in front of the shared PostgreSQL
server, from Debian's ``pgbouncer`` package (``.ci/run`` installs it), on
a free loopback port, in a temporary directory; stopped by the PID it
recorded.  Where the program is missing the tests are skipped (and fail
under CI, like an unreachable server).

PgBouncer refuses to run as root: as root it runs as the ``postgres``
user (runuser), as tests/pgcluster.py runs the servers.
"""
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

from backends import _unavailable

#: The configuration the tests use, as docs/postgresql.rst shows it:
#: every database of the server, clients trusted (the server's own
#: authentication is trust here), a server pool smaller than the clients,
#: and server sessions taken in turn (server_round_robin), so that a
#: client's transactions do run in different sessions.
INI = """\
[databases]
* = host={host} port={port}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {listen}
unix_socket_dir =
auth_type = trust
auth_file = {directory}/userlist.txt
pool_mode = {pool_mode}
default_pool_size = {pool_size}
max_client_conn = 500
server_reset_query =
server_round_robin = 1
ignore_startup_parameters = extra_float_digits
pidfile = {directory}/pgbouncer.pid
logfile = {directory}/pgbouncer.log
"""


def _free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def program():
    """The path of pgbouncer, or None."""
    return shutil.which('pgbouncer') or (
        '/usr/sbin/pgbouncer' if os.access('/usr/sbin/pgbouncer', os.X_OK)
        else None)


class Bouncer:
    """PgBouncer listening on ``127.0.0.1:port``, pooling connections to
    ``server`` (host, port) in ``pool_mode`` with ``pool_size`` server
    connections per database and user; ``close()`` stops it."""

    def __init__(self, server, pool_mode='transaction', pool_size=4):
        found = program()
        if found is None:
            _unavailable('pgbouncer (apt-get install pgbouncer)',
                         'not found')
        self.user = None
        if os.geteuid() == 0:
            self.user = 'postgres'
        self.directory = tempfile.mkdtemp(prefix='relstorage-pgbouncer-')
        self.port = _free_port()
        self.pool_mode = pool_mode
        self.pool_size = pool_size
        self.ini = os.path.join(self.directory, 'pgbouncer.ini')
        with open(self.ini, 'w') as f:
            f.write(INI.format(host=server[0], port=server[1],
                               listen=self.port, directory=self.directory,
                               pool_mode=pool_mode, pool_size=pool_size))
        with open(os.path.join(self.directory, 'userlist.txt'), 'w') as f:
            f.write('"root" ""\n')
        if self.user:
            shutil.chown(self.directory, self.user)
            for name in os.listdir(self.directory):
                shutil.chown(os.path.join(self.directory, name), self.user)
        command = [found, '-d', self.ini]
        if self.user:
            command = ['runuser', '-u', self.user, '--', *command]
        done = subprocess.run(command, capture_output=True, text=True,
                              timeout=60)
        if done.returncode:
            self.close()
            raise RuntimeError(f'pgbouncer did not start ({done.returncode}):'
                               f' {done.stderr.strip()} {self.log()}')
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(('127.0.0.1', self.port), 1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    self.close()
                    raise RuntimeError('pgbouncer did not listen within '
                                       f'30 s: {self.log()}')
                time.sleep(0.05)

    def dsn(self, dbname):
        return f'host=127.0.0.1 port={self.port} user=root dbname={dbname}'

    def log(self):
        try:
            with open(os.path.join(self.directory, 'pgbouncer.log')) as f:
                return f.read()[-4000:]
        except OSError:
            return ''

    def _pid(self):
        try:
            with open(os.path.join(self.directory, 'pgbouncer.pid')) as f:
                return int(f.read().strip())
        except (OSError, ValueError):
            return None

    def close(self):
        pid = self._pid()
        if pid is not None:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pid = None
            deadline = time.monotonic() + 10
            while pid is not None and time.monotonic() < deadline:
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.02)
        shutil.rmtree(self.directory, ignore_errors=True)


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
