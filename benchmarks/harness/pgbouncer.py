"""A private PgBouncer, from Debian's ``pgbouncer`` package (``.ci/run``
installs it), in front of a PostgreSQL server, on a free loopback port, in
a temporary directory; stopped by the PID it recorded.  Used by the
benchmarks (connections.py, pooler.py) and, loaded by path, by the tests
(tests/pgbouncer.py), which turn ``Missing`` into a skip (a failure under
CI).  It imports nothing of the harness, so that the tests can load it
alone.

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


class Missing(RuntimeError):
    """The pgbouncer program is not installed."""


#: The configuration the tests and benchmarks use, as docs/postgresql.rst
#: shows it: every database of the server, clients trusted (the server's own
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
            raise Missing('pgbouncer not found (apt-get install pgbouncer)')
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
