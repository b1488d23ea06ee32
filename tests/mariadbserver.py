"""A MariaDB (or MySQL) server of a test's own, started from the installed
server binaries (mariadb-install-db, mariadbd) on a free loopback port, for
the fault tests that stop, restart or starve a server: the shared server of
the other tests is left alone.

Where the binaries are missing the tests are skipped, and fail under CI
(like an unreachable server).
"""
import os
import shutil
import signal
import subprocess
import tempfile
import time

from backends import _unavailable
from pgcluster import _free_port

#: Small buffers and no binary log: a test database, started quickly.
SETTINGS = ('--innodb-buffer-pool-size=32M', '--innodb-log-file-size=16M',
            '--skip-log-bin', '--innodb-flush-log-at-trx-commit=2')


def _program(*names):
    for name in names:
        found = shutil.which(name) or (
            os.path.exists(f'/usr/sbin/{name}') and f'/usr/sbin/{name}')
        if found:
            return found
    return None


class MariaDBServer:
    """A running server with an empty data directory of its own;
    ``close()`` stops it and removes its files."""

    def __init__(self, max_connections=40, settings=(), under=None):
        self.server = _program('mariadbd', 'mysqld')
        install = _program('mariadb-install-db', 'mysql_install_db')
        if self.server is None or install is None:
            _unavailable('MariaDB server binaries (mariadbd)', 'not found')
        self.root = tempfile.mkdtemp(prefix='relstorage-mariadb-')
        # ``under``: where to make the data directory (a small disk, say);
        # the log and the socket stay in ``root``.
        self.data = (os.path.join(tempfile.mkdtemp(dir=under), 'data')
                     if under else os.path.join(self.root, 'data'))
        self.log = os.path.join(self.root, 'server.log')
        self.port = _free_port()
        self.max_connections = max_connections
        self.settings = tuple(settings)
        self.proc = None
        done = subprocess.run(
            [install, '--no-defaults', f'--datadir={self.data}', '--user=root',
             '--auth-root-authentication-method=normal', '--skip-test-db',
             *SETTINGS],
            capture_output=True, text=True, timeout=120)
        if done.returncode:
            shutil.rmtree(self.root, ignore_errors=True)
            raise RuntimeError(f'{install} failed ({done.returncode}): '
                               f'{done.stderr.strip()[-2000:]}')
        try:
            self.start()
        except BaseException:
            self.close()
            raise

    def start(self, timeout=60):
        self.proc = subprocess.Popen(
            [self.server, '--no-defaults', f'--datadir={self.data}',
             f'--port={self.port}', '--bind-address=127.0.0.1',
             f'--socket={os.path.join(self.root, "sock")}',
             f'--pid-file={os.path.join(self.root, "pid")}',
             f'--log-error={self.log}', '--user=root',
             f'--max-connections={self.max_connections}',
             *SETTINGS, *self.settings],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.query('SELECT 1')
                return
            except Exception:
                if self.proc.poll() is not None or (
                        time.monotonic() > deadline):
                    raise RuntimeError(
                        f'mariadbd did not start: {self._log_tail()}')
                time.sleep(0.1)

    def stop(self, timeout=60):
        """A clean shutdown (SIGTERM), as an administrator's restart
        does: sessions are ended, open transactions rolled back."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None

    def restart(self):
        self.stop()
        self.start()

    def _log_tail(self):
        try:
            with open(self.log, encoding='utf-8', errors='replace') as f:
                return f.read()[-2000:]
        except OSError:
            return '(no log)'

    def connect(self, database=None, **keys):
        import pymysql
        return pymysql.connect(host='127.0.0.1', port=self.port,
                               user=keys.pop('user', 'root'), db=database,
                               autocommit=True, **keys)

    def query(self, sql, params=None, database=None):
        conn = self.connect(database)
        try:
            with conn.cursor() as cursor:
                cursor.execute(sql, params)
                return cursor.fetchall()
        finally:
            conn.close()

    def adapter_keys(self, database):
        return {'host': '127.0.0.1', 'port': self.port, 'user': 'root',
                'db': database}

    def close(self):
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)
        shutil.rmtree(os.path.dirname(self.data), ignore_errors=True)


class MariaDBPair:
    """A primary (binary log on) and a replica of it (``read_only``,
    replicating by GTID), both servers of the test's own, and ``user``, an
    account without SUPER on both (root may write to a read-only server;
    an application's account may not)."""

    user = 'zodb'
    password = 'zodb-pw'

    def __init__(self):
        self.primary = MariaDBServer(settings=(
            '--log-bin=binlog', '--server-id=1', '--binlog-format=ROW'))
        try:
            self.replica = MariaDBServer(settings=(
                '--log-bin=binlog', '--server-id=2', '--read-only=1',
                '--log-slave-updates=1'))
        except BaseException:
            self.primary.close()
            raise
        try:
            self.replica.query(
                f"CHANGE MASTER TO MASTER_HOST='127.0.0.1', "
                f"MASTER_PORT={int(self.primary.port)}, "
                f"MASTER_USER='root', MASTER_PASSWORD='', "
                f"MASTER_USE_GTID=current_pos")
            self.replica.query('START SLAVE')
            for host in ('localhost', '127.0.0.1'):
                self.primary.query(
                    f"CREATE USER '{self.user}'@'{host}' IDENTIFIED BY "
                    f"'{self.password}'")
            self.wait_replayed()
        except BaseException:
            self.close()
            raise

    def create_database(self, name):
        self.primary.query(f'CREATE DATABASE {name}')
        for host in ('localhost', '127.0.0.1'):
            self.primary.query(
                f"GRANT ALL PRIVILEGES ON {name}.* TO "
                f"'{self.user}'@'{host}'")
        self.wait_replayed()

    def adapter_keys(self, server, database):
        return {'host': '127.0.0.1', 'port': server.port, 'user': self.user,
                'passwd': self.password, 'db': database}

    def wait_replayed(self, timeout=30):
        """Wait until the replica has applied everything the primary
        wrote so far."""
        position = self.primary.query('SELECT @@gtid_binlog_pos')[0][0]
        done = self.replica.query('SELECT MASTER_GTID_WAIT(%s, %s)',
                                  (position, timeout))[0][0]
        if done != 0:
            status = self.replica.query('SHOW SLAVE STATUS')
            raise AssertionError(f'the replica did not apply {position} in '
                                 f'{timeout}s: {status}')

    def pause_replay(self):
        self.replica.query('STOP SLAVE SQL_THREAD')

    def resume_replay(self):
        self.replica.query('START SLAVE SQL_THREAD')

    def promote(self):
        """Make the replica a primary, as an administrator's fail-over
        does: replication stopped, writes allowed."""
        self.replica.query('STOP SLAVE')
        self.replica.query('SET GLOBAL read_only = 0')

    def close(self):
        for server in (getattr(self, 'replica', None), self.primary):
            if server is not None:
                server.close()
