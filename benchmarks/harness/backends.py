"""Where the benchmarks' storages live: databases created and dropped for
each run, the ZConfig text that points each implementation at one, and a
ZEO server over a FileStorage.

Always in the project's interpreter (which has psycopg2 and mysqlclient
from the test extra).  ``database_for`` makes the database object of a
backend from the server options of ``cli``.  A server database's
``through(port)`` is a copy whose storages and floor connect to a relay on
that port of 127.0.0.1 instead (harness/roundtrips.py), while creating,
dropping and counting still go to the server directly.
"""
import contextlib
import copy
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

from . import DATA

BACKENDS = ('sqlite', 'postgresql', 'mysql')
TITLES = {'sqlite': 'SQLite', 'postgresql': 'PostgreSQL',
          'mysql': 'MariaDB'}
MODES = {'hp': ('history-preserving', True), 'hf': ('history-free', False)}


class PostgreSQL:
    """Creates and drops the benchmark's databases with psycopg2."""

    def __init__(self, dsn):
        try:
            import psycopg2
        except ImportError:
            raise SystemExit('the postgresql backend needs psycopg2 in this '
                             "interpreter: pip install -e '.[test]'")
        self.psycopg2 = psycopg2
        self.base = dsn
        #: The relay's (or PgBouncer's) port the storages connect to (None:
        #: the server).
        self.client_port = None
        #: Whether our storages run with ``transaction-pooler true``.
        self.transaction_pooler = False

    def dsn(self, dbname):
        return f'{self.base} dbname={dbname}'

    def _keys(self):
        return dict(word.split('=', 1) for word in self.base.split()
                    if '=' in word)

    def server(self):
        """``(host, port)`` of the server over TCP, for a relay in front
        of it: the dsn's host (127.0.0.1 when it names none, or a Unix
        socket's directory) and port (default 5432)."""
        keys = self._keys()
        host = keys.get('hostaddr') or keys.get('host') or '127.0.0.1'
        if host.startswith('/'):
            host = '127.0.0.1'
        return host, int(keys.get('port', 5432))

    def through(self, port):
        """A copy whose storages and floor connect to ``127.0.0.1:port``."""
        routed = copy.copy(self)
        routed.client_port = port
        return routed

    def pooled(self):
        """A copy whose storages of ours run in the mode for a transaction
        pooler (``transaction-pooler true``); RelStorage 4.3 has none."""
        pooled = copy.copy(self)
        pooled.transaction_pooler = True
        return pooled

    def client_dsn(self, dbname):
        """What the storages and the floor connect with: the dsn, its host
        and port replaced by the relay's when there is one."""
        if self.client_port is None:
            return self.dsn(dbname)
        words = [word for word in self.base.split() if word.split('=', 1)[0]
                 not in ('host', 'hostaddr', 'port')]
        return ' '.join(words + ['host=127.0.0.1', f'port={self.client_port}',
                                 f'dbname={dbname}'])

    @contextlib.contextmanager
    def _cursor(self, dbname='postgres'):
        """A cursor of a connection of its own to ``dbname``, in autocommit
        mode (CREATE DATABASE runs outside a transaction); the connection
        is closed afterwards."""
        conn = self.psycopg2.connect(self.dsn(dbname))
        conn.autocommit = True
        try:
            yield conn.cursor()
        finally:
            conn.close()

    def _admin(self, statement):
        with self._cursor() as cur:
            cur.execute(statement)

    def disk_bytes(self, name):
        """The database's size on disk (pg_database_size; 0 when there
        is no such database, as on MariaDB)."""
        with self._cursor() as cur:
            cur.execute('SELECT pg_database_size(datname) FROM pg_database '
                        'WHERE datname = %s', (name,))
            row = cur.fetchone()
            return row[0] if row else 0

    def create(self, name):
        self.drop(name)
        self._admin(f'CREATE DATABASE {name}')

    def drop(self, name):
        self._admin(f'DROP DATABASE IF EXISTS {name} WITH (FORCE)')

    def clone(self, template, name):
        """``name``, made a copy of database ``template`` file for file
        (CREATE DATABASE ... TEMPLATE; STRATEGY FILE_COPY where the server
        has it, 15 and later, rather than writing every page to the WAL),
        so that a benchmark can repeat a step that changes the database
        on the same pages without building it again.  Nobody may be
        connected to ``template``."""
        self.drop(name)
        with self._cursor() as cur:
            cur.execute('SHOW server_version_num')
            strategy = (' STRATEGY = FILE_COPY'
                        if int(cur.fetchone()[0]) >= 150000 else '')
            cur.execute(f'CREATE DATABASE {name} TEMPLATE {template}'
                        + strategy)

    def settle(self, timeout):
        """A CHECKPOINT: the pages the steps before dirtied are written
        now, not during the next timed step.  Without it the writer's
        baseline (pack.py's writer alone, right after the build) could run
        during a checkpoint the build's WAL had started: on the slower of
        this project's machines its p99 was 81.7 ms (1,000,000 documents,
        2026-11-26) against 7-17 ms in earlier runs (not sampled then).
        PostgreSQL leaves dead row versions to (auto)vacuum, which no
        delete waits for, and has no purge backlog like InnoDB's (see
        MariaDB.settle).  Returns the seconds it took (``timeout`` is the
        server's business here)."""
        started = time.monotonic()
        with self._cursor() as cur:
            cur.execute('CHECKPOINT')
        return time.monotonic() - started

    def activity(self, name):
        """What the server does behind the clients, for the samples of
        pack.py's ServerSampler: checkpoints (counters, and whether the
        checkpointer is writing one now), WAL written and its full-page
        images, and the tables (auto)vacuum is working on in database
        ``name``.  Counters are cumulative."""
        with self._cursor(name) as cur:
            cur.execute('SELECT checkpoints_timed + checkpoints_req, '
                        'buffers_checkpoint, buffers_backend '
                        'FROM pg_stat_bgwriter')
            checkpoints, written_checkpoint, written_backend = cur.fetchone()
            cur.execute('SELECT wal_bytes, wal_fpi FROM pg_stat_wal')
            wal_bytes, wal_fpi = cur.fetchone()
            # Blocks found in shared_buffers against those read into them
            # (from the operating system's cache or the disk), and what
            # sorts and hashes spilled to temporary files, in database
            # ``name``: all clients', the pack's most of all.
            cur.execute('SELECT blks_hit, blks_read, temp_bytes '
                        'FROM pg_stat_database '
                        'WHERE datname = current_database()')
            hit, read, temp_bytes = cur.fetchone()
            # The checkpointer waits on CheckpointerMain between
            # checkpoints; writing one, on CheckpointWriteDelay or nothing.
            cur.execute("SELECT COALESCE(wait_event, '') FROM "
                        "pg_stat_activity WHERE backend_type = "
                        "'checkpointer'")
            row = cur.fetchone()
            checkpointing = bool(row) and row[0] != 'CheckpointerMain'
            cur.execute('SELECT relid::regclass::text, phase '
                        'FROM pg_stat_progress_vacuum '
                        'WHERE datname = current_database() ORDER BY 1')
            vacuums = [f'{rel} ({phase})' for rel, phase in cur.fetchall()]
            return {'checkpoints': checkpoints,
                    'checkpointing': checkpointing,
                    'buffers_checkpoint': written_checkpoint,
                    'buffers_backend': written_backend,
                    'wal_mb': round(float(wal_bytes) / 2**20, 1),
                    'wal_fpi': wal_fpi, 'blocks_hit': hit,
                    'blocks_read': read,
                    'temp_mb': round(float(temp_bytes) / 2**20, 1),
                    'vacuum': vacuums}

    def dead_rows(self, name):
        """The dead row versions in database ``name`` that (auto)vacuum
        has not removed yet (the statistics' estimate)."""
        with self._cursor(name) as cur:
            cur.execute('SELECT COALESCE(SUM(n_dead_tup), 0) '
                        'FROM pg_stat_user_tables')
            return int(cur.fetchone()[0])

    def server_version(self):
        with self._cursor() as cur:
            cur.execute('SHOW server_version')
            return cur.fetchone()[0]

    def settings(self):
        """The server settings a pack's speed depends on most."""
        with self._cursor() as cur:
            cur.execute("SELECT name, current_setting(name) "
                        "FROM pg_settings WHERE name IN ("
                        "'shared_buffers', 'max_wal_size', "
                        "'checkpoint_timeout', 'synchronous_commit', "
                        "'autovacuum', 'wal_compression', "
                        "'full_page_writes') ORDER BY 1")
            return dict(cur.fetchall())

    def adapter(self, impl, name):
        """The ``<postgresql>`` section of either implementation."""
        pooler = ('    transaction-pooler true\n'
                  if self.transaction_pooler and impl == 'ours' else '')
        return (f'  <postgresql>\n    dsn {self.client_dsn(name)}\n'
                f'    driver psycopg2\n{pooler}  </postgresql>')

    def floor_args(self, name):
        return ['--dsn', self.client_dsn(name)]


class MariaDB:
    """Creates and drops the benchmark's databases with mysqlclient."""

    def __init__(self, host, port, user, passwd):
        try:
            import MySQLdb
        except ImportError:
            raise SystemExit('the mysql backend needs mysqlclient in this '
                             "interpreter: pip install -e '.[test]'")
        self.MySQLdb = MySQLdb
        self.host, self.port, self.user, self.passwd = (
            host, port, user, passwd)
        #: The relay's port the storages connect to (None: the server).
        self.client_port = None

    def server(self):
        """``(host, port)`` of the server over TCP, for a relay in front
        of it (``localhost`` means a Unix socket to the client library:
        127.0.0.1 then)."""
        host = '127.0.0.1' if self.host == 'localhost' else self.host
        return host, self.port

    def through(self, port):
        """A copy whose storages and floor connect to ``127.0.0.1:port``."""
        routed = copy.copy(self)
        routed.client_port = port
        return routed

    def client(self):
        """``(host, port)`` the storages and the floor connect to."""
        if self.client_port is None:
            return self.host, self.port
        return '127.0.0.1', self.client_port

    def _admin(self, statement, params=None):
        conn = self.MySQLdb.connect(host=self.host, port=self.port,
                                    user=self.user, passwd=self.passwd)
        try:
            cur = conn.cursor()
            cur.execute(statement, params)
            rows = cur.fetchall()
            return rows
        finally:
            conn.close()

    def disk_bytes(self, name):
        """The space InnoDB has allocated on disk for the schema's tables
        (one tablespace file each, innodb_file_per_table)."""
        rows = self._admin(
            "SELECT SUM(allocated_size) FROM "
            "information_schema.innodb_sys_tablespaces "
            "WHERE SUBSTRING_INDEX(name, '/', 1) = %s", (name,))
        return int(rows[0][0] or 0)

    def create(self, name):
        self.drop(name)
        self._admin(f'CREATE DATABASE {name}')

    def drop(self, name):
        self._admin(f'DROP DATABASE IF EXISTS {name}')

    def clone(self, template, name):
        """``name``, made a copy of database ``template`` page for page,
        so that a benchmark can repeat a step that changes the database
        on the same pages without building it again: InnoDB's
        transportable tablespaces (each table created LIKE its template's
        and its tablespace discarded; the template's tables flushed FOR
        EXPORT, their .ibd and .cfg files copied, then imported).  A copy
        by INSERT ... SELECT would write every table afresh in key order,
        its pages fuller than those the build left.  The files are copied
        in the server's datadir: this process must run on the server's
        machine and may write there (root here)."""
        self.create(name)
        conn = self.MySQLdb.connect(host=self.host, port=self.port,
                                    user=self.user, passwd=self.passwd)
        try:
            cur = conn.cursor()
            cur.execute('SELECT @@datadir')
            datadir = Path(cur.fetchone()[0])
            cur.execute("SELECT table_name FROM information_schema.tables "
                        "WHERE table_schema = %s AND engine = 'InnoDB' "
                        "AND table_type = 'BASE TABLE'", (template,))
            tables = [row[0] for row in cur.fetchall()]
            for table in tables:
                cur.execute(f'CREATE TABLE {name}.{table} '
                            f'LIKE {template}.{table}')
                cur.execute(f'ALTER TABLE {name}.{table} DISCARD TABLESPACE')
            # The read lock FOR EXPORT takes lasts until UNLOCK TABLES on
            # this connection: the files stay as they are while copied.
            cur.execute('FLUSH TABLES ' + ', '.join(
                f'{template}.{table}' for table in tables) + ' FOR EXPORT')
            try:
                into = datadir / name
                owner = into.stat()
                for table in tables:
                    for suffix in ('.ibd', '.cfg'):
                        target = into / (table + suffix)
                        shutil.copyfile(datadir / template / (table + suffix),
                                        target)
                        os.chown(target, owner.st_uid, owner.st_gid)
            finally:
                cur.execute('UNLOCK TABLES')
            for table in tables:
                cur.execute(f'ALTER TABLE {name}.{table} IMPORT TABLESPACE')
        finally:
            conn.close()

    def background_work(self):
        """``(history, dirty, pages)``: InnoDB's history list (committed
        transactions whose undo logs the purge threads have not yet applied;
        a count of transactions, not of rows), and the dirty and data pages
        of the buffer pool."""
        history = self._admin(
            "SELECT count FROM information_schema.innodb_metrics "
            "WHERE name = 'trx_rseg_history_len'")[0][0]
        status = dict(self._admin(
            "SHOW GLOBAL STATUS WHERE Variable_name IN "
            "('Innodb_buffer_pool_pages_dirty', "
            "'Innodb_buffer_pool_pages_data')"))
        return (int(history), int(status['Innodb_buffer_pool_pages_dirty']),
                int(status['Innodb_buffer_pool_pages_data']))

    def settle(self, timeout, history_below=10, dirty_share=0.1,
               stalled=10.0):
        """Wait (at most ``timeout`` seconds) until InnoDB has purged the
        transactions of the steps before and written back the pages they
        dirtied, as far as it goes on doing so by itself; returns the
        seconds waited.  Nothing else writes meanwhile.

        With a million objects the buffer pool (128 MB on this machine,
        for about 1.5 GB of data) can be mostly dirty (90 % during a pack),
        and after the build the purge threads still apply its removals:
        while that lasts, a page the next step reads first costs a page
        written back, and the disk is shared with the purge.  A site packs a
        database written over months, not minutes, so each side's timed
        steps start on a settled server: the same wait for both
        implementations.  The dirty pages count as settled below
        ``dirty_share`` of the pool's pages, or once they have not gone down
        for ``stalled`` seconds: with innodb_max_dirty_pages_pct_lwm at 0
        (MariaDB's default) an idle server need not write them back at all
        (seen here: 97 % dirty an hour after a run)."""
        started = time.monotonic()
        lowest, since = None, started
        while time.monotonic() - started < timeout:
            history, dirty, pages = self.background_work()
            now = time.monotonic()
            if lowest is None or dirty < lowest - 0.01 * pages:
                lowest, since = dirty, now
            if history < history_below and (
                    dirty <= dirty_share * pages or now - since >= stalled):
                break
            time.sleep(2.0)
        self.checkpoint(timeout - (time.monotonic() - started))
        return time.monotonic() - started

    def checkpoint_age(self):
        """``(age, most)``: the redo written since InnoDB's last checkpoint
        and the age at which it makes every writer wait for page
        flushes (Innodb_checkpoint_age, Innodb_checkpoint_max_age)."""
        status = dict(self._admin(
            "SHOW GLOBAL STATUS WHERE Variable_name IN "
            "('Innodb_checkpoint_age', 'Innodb_checkpoint_max_age')"))
        return (int(status['Innodb_checkpoint_age']),
                int(status['Innodb_checkpoint_max_age']))

    def checkpoint(self, timeout, share=0.05):
        """What PostgreSQL's settle does with a CHECKPOINT: write back the
        dirty pages until the checkpoint age is below ``share`` of its
        most, by setting innodb_max_dirty_pages_pct to 0 for as long
        (at most ``timeout`` seconds), then back.  MariaDB has no
        CHECKPOINT statement; an idle server with
        innodb_max_dirty_pages_pct_lwm at 0 leaves the age where the step
        before left it (seen: 511 MB of a 1 GB redo log after a build), so
        a pack would start with its log half full.  A site packs a server
        that has had time to write its pages back.  (It does not keep the
        age off its most during a pack of a million documents: from 55 MB
        it reached 730-830 MB of 869 within ten seconds of the deletions;
        docs/performance.rst, "Pauses that go on while the writer is
        still slowed".)"""
        started = time.monotonic()
        age, most = self.checkpoint_age()
        if age <= share * most:
            return
        (before,), = self._admin('SELECT @@GLOBAL.innodb_max_dirty_pages_pct')
        try:
            self._admin('SET GLOBAL innodb_max_dirty_pages_pct = 0')
            while (age > share * most
                   and time.monotonic() - started < timeout):
                time.sleep(1.0)
                age, most = self.checkpoint_age()
        finally:
            self._admin(f'SET GLOBAL innodb_max_dirty_pages_pct = {before}')

    def activity(self, name):
        """What InnoDB does behind the clients (see PostgreSQL.activity):
        the purge backlog, dirty pages, pages written back, redo
        written and the checkpoint's age.  Counters are cumulative."""
        history, dirty, pages = self.background_work()
        status = dict(self._admin(
            "SHOW GLOBAL STATUS WHERE Variable_name IN "
            "('Innodb_buffer_pool_pages_flushed', 'Innodb_os_log_written', "
            "'Innodb_data_reads', 'Innodb_checkpoint_age')"))
        return {'history': history, 'dirty': dirty, 'pages': pages,
                'flushed': int(status['Innodb_buffer_pool_pages_flushed']),
                'reads': int(status['Innodb_data_reads']),
                'redo_mb': round(int(status['Innodb_os_log_written'])
                                 / 2**20, 1),
                # (Redo written since the last checkpoint: InnoDB's page
                # cleaner writes harder as it nears the log's capacity.)
                'checkpoint_mb': round(int(status.get(
                    'Innodb_checkpoint_age', 0)) / 2**20, 1)}

    def settings(self):
        """The server settings a pack's speed depends on most."""
        # (The io capacities bound how fast the page cleaner writes back
        # before the redo log nears its most: docs/performance.rst,
        # "Pauses that last until the redo log has room".)
        (pool, log, flush, io, io_max), = self._admin(
            'SELECT @@innodb_buffer_pool_size, @@innodb_log_file_size, '
            '@@innodb_flush_log_at_trx_commit, @@innodb_io_capacity, '
            '@@innodb_io_capacity_max')
        return {'innodb_buffer_pool_size': int(pool),
                'innodb_log_file_size': int(log),
                'innodb_flush_log_at_trx_commit': int(flush),
                'innodb_io_capacity': int(io),
                'innodb_io_capacity_max': int(io_max)}

    def server_version(self):
        return self._admin('SELECT version()')[0][0]

    def adapter(self, impl, name):
        """The ``<mysql>`` section: the same keys in both implementations;
        the driver is mysqlclient on both sides (4.3 calls it MySQLdb)."""
        driver = 'mysqlclient' if impl == 'ours' else 'MySQLdb'
        host, port = self.client()
        lines = [f'host {host}', f'port {port}',
                 f'user {self.user}', f'db {name}', f'driver {driver}']
        if self.passwd:
            lines.insert(3, f'passwd {self.passwd}')
        body = ''.join(f'    {line}\n' for line in lines)
        return f'  <mysql>\n{body}  </mysql>'

    def floor_args(self, name):
        host, port = self.client()
        return ['--host', host, '--port', port, '--user', self.user,
                '--passwd', self.passwd, '--db', name]


class SQLite:
    """A directory per storage under benchmarks/data."""

    def __init__(self, synchronous):
        self.synchronous = synchronous

    def path(self, name):
        return DATA / name

    def create(self, name):
        self.drop(name)
        self.path(name).mkdir(parents=True)

    def drop(self, name):
        shutil.rmtree(self.path(name), ignore_errors=True)

    def settle(self, timeout):
        """Nothing runs behind an embedded database."""
        return 0.0

    def activity(self, name):
        """Nothing runs behind an embedded database."""
        return None

    def settings(self):
        return {}

    def server_version(self):
        import sqlite3
        return sqlite3.sqlite_version

    def adapter(self, impl, name):
        pragmas = ''
        if self.synchronous != 'default':
            pragmas = (f'\n    <pragmas>\n      synchronous '
                       f'{self.synchronous}\n    </pragmas>')
        return (f'  <sqlite3>\n    data-dir {self.path(name)}{pragmas}\n'
                f'  </sqlite3>')

    def floor_args(self, name):
        synchronous = self.synchronous
        if synchronous == 'default':
            synchronous = 'full'    # our adapter's default
        return ['--data-dir', self.path(name), '--synchronous', synchronous]


#: ``cache-local-mb`` for both relstorages, or None for each one's default
#: (set by run.py's --cache-local-mb).
CACHE_LOCAL_MB = None


def open_tables(database, backend, name):
    """A connection to the database ``name`` of ``backend``, its tables
    and how a table's name is quoted (``'"{}"'``)."""
    if backend == 'sqlite':
        import sqlite3
        # Each implementation names its files its own way; the one with
        # object_state is the one.
        for path in sorted(database.path(name).glob('*.sqlite3')):
            conn = sqlite3.connect(str(path))
            tables = [row[0] for row in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")]
            if 'object_state' in tables:
                return conn, sorted(tables), '"{}"'
            conn.close()
        raise RuntimeError(f'no SQLite file with an object_state table '
                             f'in {database.path(name)}')
    if backend == 'postgresql':
        conn = database.psycopg2.connect(database.dsn(name))
        listing = ("SELECT table_name FROM information_schema.tables WHERE "
                   "table_schema = current_schema() AND table_type = "
                   "'BASE TABLE'")
        quote = '"{}"'
    else:
        conn = database.MySQLdb.connect(
            host=database.host, port=database.port, user=database.user,
            passwd=database.passwd, db=name)
        listing = ("SELECT table_name FROM information_schema.tables WHERE "
                   "table_schema = DATABASE() AND table_type = 'BASE TABLE'")
        quote = '`{}`'
    cur = conn.cursor()
    cur.execute(listing)
    tables = sorted(row[0] for row in cur.fetchall())
    cur.close()
    return conn, tables, quote


def count_rows(database, backend, name):
    """``{table: rows}`` of every table of the database ``name``, counted
    exactly."""
    conn, tables, quote = open_tables(database, backend, name)
    try:
        cur = conn.cursor()
        rows = {}
        for table in tables:
            # The names come from the catalogue, not from input.
            cur.execute(f'SELECT COUNT(*) FROM {quote.format(table)}')
            rows[table] = cur.fetchone()[0]
        conn.rollback()
        return rows
    finally:
        conn.close()


def relstorage_section(database, impl, name, keep_history, options=(),
                       section=''):
    """The ``<relstorage>`` section both implementations accept for one
    storage (``<relstorage SECTION>`` when named), with ``options`` (lines
    ``key value``) added to it."""
    opening = f'<relstorage {section}>' if section else '<relstorage>'
    return (f'{opening}\n'
            f'  keep-history {"true" if keep_history else "false"}\n'
            + (f'  cache-local-mb {CACHE_LOCAL_MB:g}\n'
               if CACHE_LOCAL_MB is not None else '')
            + ''.join(f'  {line}\n' for line in options) +
            f'{database.adapter(impl, name)}\n</relstorage>\n')


def relstorage_zconfig(database, impl, name, keep_history, options=()):
    """The whole ZConfig text of one storage: the import, the section."""
    return '%import relstorage\n' + relstorage_section(
        database, impl, name, keep_history, options)


def filestorage_zconfig(path):
    return f'<filestorage>\n  path {path}\n</filestorage>\n'


def zeo_zconfig(port):
    return (f'%import ZEO\n<clientstorage>\n  server 127.0.0.1:{port}\n'
            f'</clientstorage>\n')


def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


class ZEOServer:
    """``runzeo`` over a FileStorage in a subprocess of this interpreter,
    on a free port of 127.0.0.1."""

    def __init__(self, path, env):
        self.path = Path(path)
        self.port = free_port()
        self.log = open(self.path.parent / 'zeo.log', 'w')
        self.process = subprocess.Popen(
            [sys.executable, '-m', 'ZEO.runzeo', '-a',
             f'127.0.0.1:{self.port}', '-f', str(self.path)],
            stdout=self.log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 60
        while True:
            if self.process.poll() is not None:
                self.log.close()
                raise RuntimeError(
                    f'the ZEO server exited with {self.process.returncode}: '
                    + (self.path.parent / 'zeo.log').read_text()[-2000:])
            try:
                socket.create_connection(('127.0.0.1', self.port), 1).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError('the ZEO server did not listen '
                                       'within 60 s')
                time.sleep(0.05)

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()


class Store:
    """One fresh storage: its ZConfig text, how to stop what serves it
    (a ZEO server) and how to remove it."""

    def __init__(self, zconfig, remove, stop=None):
        self.zconfig = zconfig
        self._remove = remove
        self._stop = stop

    def close(self, keep=False):
        """Stop its server; remove it unless ``keep``."""
        if self._stop:
            self._stop()
            self._stop = None
        if self._remove and not keep:
            self._remove()
        self._remove = None


def fresh_relstorage(database, impl, mode, variant=None):
    """A fresh database of ``impl`` in ``mode`` (``variant``, when given,
    names it instead of ``impl``: two configurations of ours side by
    side)."""
    name = f'bench_{variant or impl}_{mode}'
    database.create(name)
    return Store(relstorage_zconfig(database, impl, name, MODES[mode][1]),
                 lambda: database.drop(name))


def fresh_filestorage(name):
    path = DATA / name
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return Store(filestorage_zconfig(path / 'Data.fs'),
                 lambda: shutil.rmtree(path, ignore_errors=True))


def fresh_zeo(name, env):
    path = DATA / name
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    server = ZEOServer(path / 'Data.fs', env)
    return Store(zeo_zconfig(server.port),
                 lambda: shutil.rmtree(path, ignore_errors=True),
                 stop=server.stop)


def database_for(backend, args):
    """The database object of ``backend`` from the server options (see
    cli.Parser.servers)."""
    if backend == 'postgresql':
        return PostgreSQL(args.pg_dsn)
    if backend == 'mysql':
        return MariaDB(args.mysql_host, args.mysql_port, args.mysql_user,
                       args.mysql_passwd)
    return SQLite(getattr(args, 'sqlite_synchronous', 'default'))


def fresh_dir(path):
    """``path`` as a new, empty directory."""
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


def remove_data():
    shutil.rmtree(DATA, ignore_errors=True)
