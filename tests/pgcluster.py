"""A PostgreSQL primary and a streaming-replication standby of its own,
started from the installed server binaries (initdb, pg_basebackup,
pg_ctl) on free loopback ports, for the replica tests.

The servers are private to the test that made them: a test may stop,
pause or promote them without touching the shared server of the other
tests.  PostgreSQL refuses to run as root; as root the binaries run as the
``postgres`` user (runuser).  Where the binaries or that user are missing
the tests are skipped, and fail under CI (like an unreachable server).

The standby is asynchronous by default.  ``Cluster(synchronous=True)``
makes it the primary's synchronous standby: the primary names it in
``synchronous_standby_names`` (by its ``cluster_name``, which its WAL
receiver gives as ``application_name``) with ``synchronous_commit =
remote_apply``, so that a commit returns only once the standby has
replayed it and answers queries with it.
"""
import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import psycopg2

from backends import _unavailable

#: Settings of both servers: no fsync (a test database; a commit still
#: writes its WAL before it returns, which the standby streams), and a
#: standby that answers queries (hot_standby is on by default) with
#: feedback to the primary.
SETTINGS = ('-c fsync=off -c full_page_writes=off -c shared_buffers=16MB '
            '-c hot_standby_feedback=on')


#: The programs a test cluster needs, all from one installation.
PROGRAMS = ('initdb', 'pg_ctl', 'pg_basebackup')


def _bindir():
    """The directory of the installed server's programs, or None."""
    candidates = []
    found = shutil.which('pg_ctl')
    if found:
        # Debian links some programs into /usr/local/bin or /usr/bin.
        candidates.append(os.path.dirname(os.path.realpath(found)))
    candidates += sorted(glob.glob('/usr/lib/postgresql/*/bin'),
                         key=lambda p: [int(x) for x in p.split('/')[-2:-1]
                                        if x.isdigit()], reverse=True)
    for directory in candidates:
        if all(os.access(os.path.join(directory, name), os.X_OK)
               for name in PROGRAMS):
            return directory
    return None


def _free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


#: Settings of a primary whose standby is synchronous: the standby's
#: ``application_name`` (its ``cluster_name``) and commits that wait until
#: it has replayed them.
SYNCHRONOUS = ('-c synchronous_standby_names=standby '
               '-c synchronous_commit=remote_apply')


def in_recovery(cursor):
    """Whether ``cursor``'s server is a standby (in recovery)."""
    cursor.execute('SELECT pg_is_in_recovery()')
    return cursor.fetchone()[0]


class Server:
    def __init__(self, cluster, name, port, settings=''):
        self.cluster = cluster
        self.name = name
        self.port = port
        #: More ``-c name=value`` settings of this server alone.
        self.settings = settings
        self.data = os.path.join(cluster.root, name)
        self.log = os.path.join(cluster.root, name + '.log')
        self.running = False

    @property
    def line(self):
        """The server as a replica file names it."""
        return f'127.0.0.1:{self.port}'

    def dsn(self, dbname='postgres'):
        return (f'host=127.0.0.1 port={self.port} user=root '
                f'dbname={dbname} connect_timeout=5')

    def start(self):
        self.cluster.run(
            'pg_ctl', '-D', self.data, '-l', self.log, '-w', '-t', '60',
            '-o', f'{SETTINGS} {self.cluster.settings} {self.settings} '
                  f'-c cluster_name={self.name} -c max_connections='
                  f'{self.cluster.max_connections} '
                  f'-c listen_addresses=127.0.0.1 '
                  f'-c port={self.port} '
                  f'-c unix_socket_directories={self.cluster.root}',
            'start')
        self.running = True

    def stop(self, mode='fast'):
        if self.running:
            self.cluster.run('pg_ctl', '-D', self.data, '-m', mode, '-w',
                             'stop', check=False)
            self.running = False

    def kill(self, grace=10):
        """A crash rather than a stop: SIGKILL to the postmaster.  Its
        processes (backends, WAL sender, ...) notice that it died and exit
        by themselves; those still there after ``grace`` seconds get
        SIGKILL too, by the PIDs read before the kill.  Returns
        ``(pid, children, seconds)``: the postmaster's PID, how many
        processes it had and how long they took to go."""
        with open(os.path.join(self.data, 'postmaster.pid')) as f:
            pid = int(f.readline())
        children = _children(pid)
        os.kill(pid, signal.SIGKILL)
        self.running = False
        killed = time.monotonic()
        left = children
        while left and time.monotonic() - killed < grace:
            time.sleep(0.02)
            left = [child for child in left if _alive(child)]
        seconds = time.monotonic() - killed
        for child in left:
            try:
                os.kill(child, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return pid, len(children), seconds

    def query(self, sql, dbname='postgres', params=None):
        conn = psycopg2.connect(self.dsn(dbname))
        conn.autocommit = True
        try:
            with conn.cursor() as cursor:
                cursor.execute(sql, params)
                return cursor.fetchall() if cursor.description else None
        finally:
            conn.close()


def _children(pid):
    """The PIDs of the processes whose parent is ``pid`` (from /proc)."""
    found = []
    for entry in os.listdir('/proc'):
        if not entry.isdigit():
            continue
        try:
            with open(f'/proc/{entry}/stat') as f:
                stat = f.read()
        except OSError:
            continue            # it exited meanwhile
        # "pid (name) state ppid ...": the name may hold spaces.
        if int(stat.rsplit(')', 1)[1].split()[1]) == pid:
            found.append(int(entry))
    return found


def _alive(pid):
    """Whether ``pid`` runs (a zombie does not: it was reaped by init)."""
    try:
        with open(f'/proc/{pid}/stat') as f:
            return f.read().rsplit(')', 1)[1].split()[0] != 'Z'
    except OSError:
        return False


class Cluster:
    """``primary`` and ``standby`` (a streaming replica of it, unless
    ``standby`` is false), both running; ``close()`` stops both and removes
    their files.  With ``synchronous`` the standby is the primary's
    synchronous standby (see the module's docstring)."""

    def __init__(self, standby=True, max_connections=40, settings='',
                 synchronous=False):
        self.max_connections = max_connections
        #: More ``-c name=value`` settings of both servers.
        self.settings = settings
        bindir = _bindir()
        if bindir is None:
            _unavailable('PostgreSQL server binaries (pg_ctl)', 'not found')
        self.bindir = bindir
        self.user = None
        if os.geteuid() == 0:
            try:
                import pwd
                pwd.getpwnam('postgres')
            except KeyError:
                _unavailable('the postgres user (to run a test cluster as '
                             'root)', 'no such user')
            self.user = 'postgres'
        self.root = tempfile.mkdtemp(prefix='relstorage-pgcluster-')
        if self.user:
            shutil.chown(self.root, self.user)
        self.synchronous = synchronous
        self.primary = Server(self, 'primary', _free_port(),
                              SYNCHRONOUS if synchronous else '')
        self.standby = Server(self, 'standby', _free_port())
        try:
            self.run('initdb', '-D', self.primary.data, '-U', 'root',
                     '--auth=trust', '-E', 'UTF8', '--no-sync')
            self.primary.start()
            if not standby:
                return
            self.run('pg_basebackup', '-h', '127.0.0.1', '-p',
                     str(self.primary.port), '-U', 'root', '-D',
                     self.standby.data, '-R', '-X', 'stream', '--no-sync')
            self.standby.start()
            self.wait_streaming()
        except BaseException:
            self.close()
            raise

    def run(self, program, *args, check=True):
        command = [os.path.join(self.bindir, program), *args]
        if self.user:
            command = ['runuser', '-u', self.user, '--', *command]
        done = subprocess.run(command, capture_output=True, text=True,
                              timeout=120, cwd=self.root)
        if check and done.returncode:
            raise RuntimeError(f'{" ".join(command)} failed '
                               f'({done.returncode}): {done.stderr.strip()}')
        return done

    def create_database(self, name):
        self.primary.query(f'CREATE DATABASE {name}')
        self.wait_replayed()

    def wait_replayed(self, timeout=30):
        """Wait until the standby has replayed everything the primary
        committed so far.

        The target is the primary's flush position: every commit is
        flushed before it returns, and the walsender streams nothing
        beyond that position.  The insert position can be ahead of it by
        WAL that no commit waits for (records the server writes on its
        own, transactions still open), which the WAL writer flushes only
        every wal_writer_delay (200 ms): waiting for it cost up to that
        much per call (history-free, 150 calls took 22 s)."""
        target = self.primary.query(
            'SELECT pg_current_wal_flush_lsn()')[0][0]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            done = self.standby.query(
                'SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn',
                params=(target,))[0][0]
            if done:
                return
            time.sleep(0.02)
        raise AssertionError(f'the standby did not replay up to {target} '
                             f'in {timeout}s')

    def pause_replay(self):
        self.standby.query('SELECT pg_wal_replay_pause()')

    def resume_replay(self):
        self.standby.query('SELECT pg_wal_replay_resume()')

    def wait_streaming(self, timeout=30):
        """Wait until the primary streams to the standby, as its
        synchronous standby where the pair is synchronous (the primary
        counts it as one only once it has caught up)."""
        wanted = ('streaming', 'sync' if self.synchronous else 'async')
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.replication().get('standby') == wanted:
                return
            time.sleep(0.02)
        raise AssertionError(f'the primary does not stream to the standby '
                             f'as {wanted} after {timeout}s: '
                             f'{self.replication()}')

    def replication(self):
        """``{application_name: (state, sync_state)}`` of the primary's WAL
        senders (pg_stat_replication)."""
        return {name: (state, sync) for name, state, sync in
                self.primary.query('SELECT application_name, state, '
                                   'sync_state FROM pg_stat_replication')}

    def promote(self):
        self.run('pg_ctl', '-D', self.standby.data, '-w', 'promote')

    def close(self):
        for server in (self.standby, self.primary):
            server.stop('immediate')
        shutil.rmtree(self.root, ignore_errors=True)
