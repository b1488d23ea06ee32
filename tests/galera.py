"""A three-node MariaDB Galera cluster of the tests' own, started from
Debian's packages (mariadb-server and galera-4's provider,
/usr/lib/galera/libgalera_smm.so) on free loopback ports, for the tests of
writers on several nodes (tests/test_galera.py).

Every node has its own directory under one temporary directory: its
configuration file (``my.cnf``, readable by ``mariadbd --defaults-file``
when a run needs a closer look), its data directory, its log and its
socket.  Each listens on a free loopback port for SQL and on three more
for Galera: group communication (gmcast), incremental state transfer
(IST) and full state transfer (SST, by rsync).  Node 1 bootstraps the
cluster (``--wsrep-new-cluster``); nodes 2 and 3 join it with an rsync SST
from it.  A node that was killed and is started again rejoins with an IST
of what it missed, from the donor's gcache.

The servers run as an unprivileged account (rsync's SST refuses to run as
root): the ``mysql`` user where there is one, otherwise a system user made
for the purpose (``relstorage-galera``).  Where the binaries, the provider
or rsync are missing the tests are skipped, and fail under CI
(.ci/run installs them).
"""
import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
import time

from backends import _unavailable
from mariadbserver import _program
from pgcluster import _free_port

PROVIDER = '/usr/lib/galera/libgalera_smm.so'

#: The account the servers run as when the tests run as root.
SYSTEM_USERS = ('mysql', 'relstorage-galera')

#: What every node's my.cnf says besides its paths and ports: small
#: buffers as tests/mariadbserver.py's, the settings Galera requires
#: (row-based events, interleaved auto-increment locks, InnoDB), and
#: failure detection quicker than the defaults (a node killed by a test
#: leaves the cluster in about 3 s instead of 15 s; still slow enough that
#: a loaded machine does not evict a live node).
SETTINGS = {
    'innodb-buffer-pool-size': '32M',
    'innodb-log-file-size': '16M',
    'innodb-flush-log-at-trx-commit': '2',
    'skip-log-bin': None,
    'binlog-format': 'ROW',
    'default-storage-engine': 'InnoDB',
    'innodb-autoinc-lock-mode': '2',
    'wsrep-on': 'ON',
    'wsrep-provider': PROVIDER,
    'wsrep-cluster-name': 'relstorage-test',
    'wsrep-sst-method': 'rsync',
    'wsrep-slave-threads': '2',
}

#: Group-communication timeouts (wsrep_provider_options); each must not be
#: above the next one.
EVS = ('evs.keepalive_period=PT0.5S; evs.inactive_check_period=PT0.5S; '
       'evs.suspect_timeout=PT3S; evs.inactive_timeout=PT6S; '
       'evs.install_timeout=PT6S')

#: Seconds a node may take to start, join and be Synced.
START_TIMEOUT = 120


class Node:
    """One server of the cluster; numbered from 1."""

    def __init__(self, cluster, number):
        self.cluster = cluster
        self.number = number
        self.port = _free_port()
        self.gmcast_port = _free_port()
        self.ist_port = _free_port()
        self.sst_port = _free_port()
        self.dir = os.path.join(cluster.root, f'node{number}')
        self.data = os.path.join(self.dir, 'data')
        self.log = os.path.join(self.dir, 'server.log')
        self.cnf = os.path.join(self.dir, 'my.cnf')
        self.proc = None
        #: Where the log of the node's last start begins.
        self.log_start = 0
        self.recovered = None   # the position start() recovered

    @property
    def address(self):
        return ('127.0.0.1', self.port)

    def write_cnf(self, peers):
        lines = ['[mariadbd]',
                 f'datadir = {self.data}',
                 f'port = {self.port}',
                 'bind-address = 127.0.0.1',
                 f'socket = {os.path.join(self.dir, "sock")}',
                 f'pid-file = {os.path.join(self.dir, "pid")}',
                 f'log-error = {self.log}',
                 f'max-connections = {self.cluster.max_connections}']
        lines += [name if value is None else f'{name} = {value}'
                  for name, value in SETTINGS.items()]
        lines += [
            f'wsrep-cluster-address = gcomm://{peers}',
            f'wsrep-node-name = node{self.number}',
            'wsrep-node-address = 127.0.0.1',
            f'wsrep-node-incoming-address = 127.0.0.1:{self.port}',
            f'wsrep-sst-receive-address = 127.0.0.1:{self.sst_port}',
            f'wsrep-provider-options = "base_host=127.0.0.1; '
            f'base_port={self.gmcast_port}; '
            f'gmcast.listen_addr=tcp://127.0.0.1:{self.gmcast_port}; '
            f'ist.recv_addr=127.0.0.1:{self.ist_port}; '
            f'gcache.size=64M; {EVS}"']
        os.makedirs(self.dir, exist_ok=True)
        with open(self.cnf, 'w', encoding='utf-8') as f:
            f.write('\n'.join(lines) + '\n')

    def log_tail(self, size=3000):
        try:
            with open(self.log, encoding='utf-8', errors='replace') as f:
                return f.read()[-size:]
        except OSError:
            return '(no log)'


class GaleraCluster:
    """Three running, Synced nodes; ``close()`` stops them all and removes
    their files.  Node numbers start at 1."""

    def __init__(self, size=3, max_connections=60):
        self.server = _program('mariadbd', 'mysqld')
        self.install = _program('mariadb-install-db', 'mysql_install_db')
        if self.server is None or self.install is None:
            _unavailable('MariaDB server binaries (mariadbd)', 'not found')
        if not os.path.exists(PROVIDER):
            _unavailable(f'the Galera provider {PROVIDER} (Debian: '
                         f'galera-4)', 'not installed')
        if shutil.which('rsync') is None:
            _unavailable('rsync (the Galera SST method the tests use)',
                         'not installed')
        if not any(_program(name) for name in ('ss', 'lsof', 'sockstat')):
            _unavailable('ss (iproute2) or lsof, which the rsync SST '
                         'script uses', 'not installed')
        self.max_connections = max_connections
        self.user = _server_user()
        self.root = tempfile.mkdtemp(prefix='relstorage-galera-')
        self.started = time.monotonic()
        self.node_list = []
        try:
            self.node_list = [Node(self, n + 1) for n in range(size)]
            peers = ','.join(f'127.0.0.1:{node.gmcast_port}'
                             for node in self.node_list)
            for node in self.node_list:
                node.write_cnf(peers)
            self._install(self.node_list[0])
            for node in self.node_list[1:]:
                # An empty data directory: the SST fills it.
                os.makedirs(node.data)
            self._chown()
            self._launch(self.node_list[0], bootstrap=True)
            self.wait_synced(1, cluster_size=1)
            for node in self.node_list[1:]:
                self._launch(node)
                self.wait_synced(node.number, cluster_size=node.number)
        except BaseException:
            self.close()
            raise
        #: Seconds the cluster took to come up.
        self.start_seconds = time.monotonic() - self.started

    # -- what the tests use -------------------------------------------------

    @property
    def nodes(self):
        """``(host, port)`` of each node's SQL server, in node order."""
        return [node.address for node in self.node_list]

    def node(self, n):
        return self.node_list[n - 1]

    def connect(self, n, database=None, **keys):
        """A PyMySQL connection to node ``n`` (autocommit unless
        ``autocommit=False`` is given)."""
        import pymysql
        keys.setdefault('autocommit', True)
        return pymysql.connect(host='127.0.0.1', port=self.node(n).port,
                               user=keys.pop('user', 'root'),
                               database=database, connect_timeout=5, **keys)

    def sql(self, n, statement, params=None, database=None, sync=False):
        """Run ``statement`` on node ``n`` and return its rows (``()`` when
        it has none).  ``sync``: first wait until the node has applied
        every write the cluster committed before (wsrep_sync_wait)."""
        conn = self.connect(n, database)
        try:
            with conn.cursor() as cursor:
                if sync:
                    cursor.execute('SET SESSION wsrep_sync_wait = 15')
                cursor.execute(statement, params)
                return cursor.fetchall()
        finally:
            conn.close()

    def status(self, n, *names):
        """Node ``n``'s wsrep status variables (all, or those named, without
        their ``wsrep_`` prefix) as a dict of strings."""
        rows = self.sql(n, "SHOW GLOBAL STATUS LIKE 'wsrep_%'")
        found = {name[len('wsrep_'):]: value for name, value in rows}
        return {k: found.get(k) for k in names} if names else found

    def create_database(self, name):
        """Create ``name`` (through node 1; the DDL reaches every node in
        total order) and wait until every running node has it."""
        self.sql(1, f'CREATE DATABASE {name}')
        self.wait_applied()

    def drop_database(self, name):
        running = [node.number for node in self.node_list
                   if node.proc is not None]
        if running:
            self.sql(running[0], f'DROP DATABASE IF EXISTS {name}')

    def wait_applied(self):
        """Wait until every running node has applied every write the
        cluster committed so far."""
        for node in self.node_list:
            if node.proc is not None:
                self.sql(node.number, 'SELECT 1', sync=True)

    def kill(self, n):
        """SIGKILL node ``n``, as a crash would."""
        node = self.node(n)
        if node.proc is not None:
            _kill_group(node.proc, signal.SIGKILL)
            node.proc.wait(30)
            node.proc = None

    def start(self, n):
        """Start node ``n`` again after ``kill(n)`` or ``stop(n)``: it
        rejoins (an IST from a donor's gcache) and is Synced with all the
        nodes when this returns."""
        node = self.node(n)
        node.recovered = self._recover(node)
        self._launch(node, position=node.recovered)
        self.wait_synced(n, cluster_size=len(self.node_list))

    def transfer(self, n):
        """How node ``n`` got its state at its last start: ``'IST'`` (the
        writes it missed), ``'SST'`` (a copy of a donor's data
        directory), or None (it needed neither, or the log does not say)."""
        text = self._log_since_start(n)
        if text is None:
            return None
        for kind in ('IST', 'SST'):
            if f'{kind} completed on joiner' in text:
                return kind
        return None

    def _log_since_start(self, n):
        """Node ``n``'s log from its last start on, or None."""
        node = self.node(n)
        try:
            with open(node.log, encoding='utf-8', errors='replace') as f:
                f.seek(node.log_start)
                return f.read()
        except OSError:
            return None

    def why_transfer(self, n, limit=40):
        """What node ``n``'s log says of its state transfer at its last
        start, and the position its recovery found: for the message of a
        test that expected an IST and saw an SST, since the cluster's
        files are gone once the test ends."""
        text = self._log_since_start(n)
        if text is None:
            return '(no log)'
        lines = text.splitlines()
        words = ('IST', 'SST', 'gcache', 'seqno', 'position', 'donor',
                 'state transfer', 'ERROR')
        said = [line for line in lines if any(w in line for w in words)]
        return (f'recovered position: {self.node(n).recovered}\n'
                + '\n'.join(said[-limit:]))

    def stop(self, n, timeout=60):
        """A clean shutdown of node ``n`` (SIGTERM; SIGKILL after
        ``timeout`` seconds)."""
        node = self.node(n)
        if node.proc is None:
            return
        if node.proc.poll() is None:
            node.proc.send_signal(signal.SIGTERM)
            try:
                node.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        # Whatever the server started (an SST script, rsync) goes too.
        _kill_group(node.proc, signal.SIGKILL)
        node.proc.wait(30)
        node.proc = None

    def wait_synced(self, n, cluster_size=None, timeout=START_TIMEOUT):
        """Wait until node ``n`` answers, says Synced and (when given) sees
        ``cluster_size`` nodes."""
        node = self.node(n)
        deadline = time.monotonic() + timeout
        last = None
        while True:
            if node.proc is None or node.proc.poll() is not None:
                raise RuntimeError(
                    f'galera node {n} exited while starting:\n'
                    f'{node.log_tail()}')
            try:
                last = self.status(n, 'local_state_comment', 'cluster_size',
                                   'ready')
            except Exception as e:
                last = e
            else:
                if last['local_state_comment'] == 'Synced' and (
                        last['ready'] == 'ON') and (
                        cluster_size is None
                        or int(last['cluster_size'] or 0) == cluster_size):
                    return
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f'galera node {n} not Synced in a cluster of '
                    f'{cluster_size} after {timeout}s ({last!r}):\n'
                    f'{node.log_tail()}')
            time.sleep(0.2)

    def close(self):
        for node in reversed(self.node_list):
            try:
                self.stop(node.number, timeout=30)
            except Exception:
                pass
        shutil.rmtree(self.root, ignore_errors=True)

    # -- plumbing -------------------------------------------------------------

    def _install(self, node):
        command = [self.install, f'--defaults-file={node.cnf}',
                   '--auth-root-authentication-method=normal',
                   '--skip-test-db', '--wsrep-on=OFF']
        if self.user:
            command.append(f'--user={self.user}')
        self._chown()
        done = subprocess.run(command, capture_output=True, text=True,
                              timeout=120)
        if done.returncode:
            raise RuntimeError(f'{self.install} failed ({done.returncode}): '
                               f'{done.stderr.strip()[-2000:]}')

    def _chown(self):
        if not self.user:
            return
        for top, dirs, files in os.walk(self.root):
            for name in [top] + [os.path.join(top, d) for d in dirs] + [
                    os.path.join(top, f) for f in files]:
                shutil.chown(name, self.user, self.user_group)

    @property
    def user_group(self):
        return pwd.getpwnam(self.user).pw_gid if self.user else None

    def _recover(self, node):
        """The position (``uuid:seqno``) of the last transaction the
        node's InnoDB committed.  After a crash its grastate.dat says
        seqno -1, and a node started so asks for a full SST; given the
        position (``--wsrep-start-position``) it asks for an IST of the
        rest, as Debian's galera_recovery arranges under systemd."""
        log = os.path.join(node.dir, 'recover.log')
        command = [self.server, f'--defaults-file={node.cnf}',
                   f'--log-error={log}', '--wsrep-recover']
        if self.user:
            command.append(f'--user={self.user}')
        done = subprocess.run(command, capture_output=True, text=True,
                              timeout=START_TIMEOUT, cwd=node.dir)
        try:
            with open(log, encoding='utf-8', errors='replace') as f:
                text = f.read()
        except OSError:
            text = ''
        found = re.findall(r'WSREP: Recovered position: (\S+:-?\d+)', text)
        if done.returncode or not found:
            raise RuntimeError(f'galera node {node.number}: --wsrep-recover '
                               f'failed ({done.returncode}):\n'
                               f'{text[-2000:]}')
        return found[-1]

    def _launch(self, node, bootstrap=False, position=None):
        command = [self.server, f'--defaults-file={node.cnf}']
        if self.user:
            command.append(f'--user={self.user}')
        if bootstrap:
            command.append('--wsrep-new-cluster')
        if position:
            command.append(f'--wsrep-start-position={position}')
        try:
            node.log_start = os.path.getsize(node.log)
        except OSError:
            node.log_start = 0
        # A session of its own: stop() and kill() end the server and
        # whatever it started (SST scripts, rsync) by its process group,
        # whose id is the recorded pid.
        node.proc = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True,
            cwd=node.dir)


def _kill_group(proc, sig):
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _server_user():
    """The account the servers run as: None when the tests do not run as
    root (the servers then run as the tests' own user); else ``mysql`` or,
    where it is missing, a system user made for the purpose."""
    if os.geteuid() != 0:
        return None
    for name in SYSTEM_USERS:
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            pass
    name = SYSTEM_USERS[-1]
    done = subprocess.run(
        ['useradd', '--system', '--no-create-home', '--shell',
         '/usr/sbin/nologin', name], capture_output=True, text=True)
    if done.returncode:
        _unavailable(f'an unprivileged account to run Galera nodes as '
                     f'({name})', done.stderr.strip())
    return name
