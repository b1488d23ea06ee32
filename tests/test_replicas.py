"""Replica files (replica-conf, ro-replica-conf, replica-timeout) and stale
replicas (revert-when-stale).

The list's own logic is tested with a fake clock; fail-over against the
shared servers of the other tests (a refused port listed first); and the
replica behaviour, scenario by scenario on both kinds of pair: a
PostgreSQL primary with a streaming standby (tests/pgcluster.py) and a
MariaDB primary with a replica (tests/mariadbserver.py), both servers of
the test's own: reads served by the replica, commits by the primary, a
read-only replica listed for commits skipped, a replica that lags (replay
paused), a stopped one, and a promoted one after the primary died.
"""
import logging
import time
import uuid

import pytest
import transaction
import ZODB
from persistent.mapping import PersistentMapping
from ZODB.POSException import ReadConflictError

import tally

from relstorage.config import replicas as replicas_module
from relstorage.config.options import Options
from relstorage.config.replicas import ReplicaList
from relstorage.config.replicas import parse_server
from relstorage.config.replicas import read_servers
from relstorage.errors import ConfigurationError
from relstorage.errors import DisconnectedError
from relstorage.storage import RelStorage

#: A port nothing listens on: connections are refused at once.
REFUSED = '127.0.0.1:1'


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def write(path, *lines):
    path.write_text(''.join(line + '\n' for line in lines), encoding='utf-8')
    return str(path)


# -- the file and the list ----------------------------------------------

@pytest.mark.parametrize('line, expected', [
    ('db1', ('db1', None)),
    ('  db1.example.com:5433  ', ('db1.example.com', 5433)),
    ('10.0.0.7:3306', ('10.0.0.7', 3306)),
    ('[::1]:5432', ('::1', 5432)),
    ('[fe80::1]', ('fe80::1', None)),
    ('fe80::1', ('fe80::1', None)),
    ('/var/run/postgresql', ('/var/run/postgresql', None)),
])
def test_a_server_line(line, expected):
    assert parse_server(line) == expected


@pytest.mark.parametrize('line', [
    'db1:port', 'db1:0', 'db1:65536', ':5432', '[::1', '[::1]x',
    'db 1:5432', 'host=db1 port=5432',
])
def test_a_line_that_is_not_a_server(line):
    with pytest.raises(ValueError):
        parse_server(line)


def test_the_file_skips_comments_and_blank_lines(tmp_path):
    path = write(tmp_path / 'replicas.conf', '# primary first', '',
                 'db1:5432', '   ', '  # then', 'db2')
    assert read_servers('replica-conf', path) == [('db1', 5432),
                                                 ('db2', None)]


@pytest.mark.parametrize('content, says', [
    (None, 'cannot read'),
    ('', 'names no server'),
    ('# only a comment\n\n', 'names no server'),
    ('db1\ndb2:x\n', 'line 2'),
    (b'\xff\xfe', 'cannot read'),
])
def test_a_bad_file_fails_at_start_up_naming_the_option(tmp_path, content,
                                                        says):
    path = tmp_path / 'replicas.conf'
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    for key in ('replica_conf', 'ro_replica_conf'):
        with pytest.raises(ConfigurationError) as e:
            Options(**{key: str(path)})
        assert str(e.value).startswith(key.replace('_', '-') + ': ')
        assert says in str(e.value)


@pytest.mark.parametrize('key, value', [
    ('replica_timeout', '-1'), ('replica_timeout', 'soon'),
    ('revert_when_stale', 'maybe'),
])
def test_bad_replica_values(key, value):
    with pytest.raises(ConfigurationError) as e:
        Options(**{key: value})
    assert key.replace('_', '-') in str(e.value)


def test_the_rs4_defaults():
    options = Options()
    assert options.replica_conf is None and options.ro_replica_conf is None
    assert options.replica_timeout == 600
    assert options.revert_when_stale is False


def test_the_list_stays_on_the_server_that_answered(tmp_path):
    clock = Clock()
    replicas = ReplicaList('replica-conf', write(
        tmp_path / 'r.conf', 'a', 'b', 'c'), 600, clock)
    assert replicas.candidates() == [('a', None), ('b', None), ('c', None)]
    replicas.answered(('b', None))
    # Tried from the one in use on, then round to the first.
    assert replicas.candidates() == [('b', None), ('c', None), ('a', None)]
    assert not replicas.stale(('b', None))
    assert replicas.stale(('a', None))
    # replica-timeout later the first is tried again, and a connection to
    # another server is replaced at its next transaction.
    clock.now += 599
    assert not replicas.stale(('b', None))
    clock.now += 1
    assert replicas.stale(('b', None))
    assert replicas.candidates()[0] == ('a', None)
    # The first still refuses: b answers again, and the clock restarts.
    replicas.answered(('b', None))
    clock.now += 300
    assert not replicas.stale(('b', None))
    clock.now += 300
    assert replicas.stale(('b', None))


def test_replica_timeout_zero_stays(tmp_path):
    clock = Clock()
    replicas = ReplicaList('replica-conf', write(
        tmp_path / 'r.conf', 'a', 'b'), 0, clock)
    replicas.answered(('b', None))
    clock.now += 10 ** 6
    assert not replicas.stale(('b', None))
    assert replicas.candidates() == [('b', None), ('a', None)]


def test_an_edited_file_takes_effect(tmp_path):
    clock = Clock()
    path = tmp_path / 'r.conf'
    replicas = ReplicaList('replica-conf', write(path, 'a', 'b'), 600, clock)
    replicas.answered(('a', None))
    write(path, 'c', 'a')
    # Looked at no more than once a second.
    assert not replicas.stale(('a', None))
    clock.now += replicas_module.RECHECK
    assert replicas.stale(('a', None))
    assert replicas.candidates() == [('c', None), ('a', None)]
    # A file that became empty or unreadable keeps the last servers.
    write(path, '# nothing')
    clock.now += replicas_module.RECHECK
    assert replicas.servers() == [('c', None), ('a', None)]
    path.unlink()
    clock.now += replicas_module.RECHECK
    assert replicas.servers() == [('c', None), ('a', None)]


def test_sqlite_has_no_replicas(tmp_path):
    from relstorage.adapters.sqlite import SQLiteAdapter
    path = write(tmp_path / 'r.conf', 'db1')
    for key in ('replica_conf', 'ro_replica_conf'):
        with pytest.raises(ConfigurationError) as e:
            RelStorage(SQLiteAdapter(data_dir=str(tmp_path / 'db')),
                       **{key: path})
        assert str(e.value).startswith(key.replace('_', '-') + ': ')


# -- fail-over on the shared servers -----------------------------------

@pytest.fixture
def server_backend(backend):
    if not hasattr(backend, 'server'):
        pytest.skip(f'{backend.name} has no servers to list')
    return backend


def _line(server):
    host, port = server
    return f'{host}:{port}'


def test_a_server_that_refuses_is_skipped(server_backend, database,
                                          tmp_path, keep_history):
    path = write(tmp_path / 'r.conf', REFUSED, _line(server_backend.server()))
    storage = server_backend.open(database, keep_history=keep_history,
                                  replica_conf=path)
    try:
        db = ZODB.DB(storage)
        conn = db.open()
        conn.root()['x'] = 1
        transaction.commit()
        conn.close()
        instance = conn._storage
        cm = storage._adapter.connmanager
        assert cm.server_of(instance._store_conn) == _line(
            server_backend.server())
        conn = db.open()
        assert conn.root()['x'] == 1
        assert cm.server_of(conn._storage._load_conn) == _line(
            server_backend.server())
        conn.close()
        db.close()
    finally:
        storage.close()
    tally.add('replicas (fail-over)', 'scenarios')


def test_no_server_answers(server_backend, database, tmp_path):
    path = write(tmp_path / 'r.conf', REFUSED, '127.0.0.1:2')
    with pytest.raises(DisconnectedError) as e:
        server_backend.open(database, replica_conf=path)
    text = str(e.value)
    assert 'no server of replica-conf' in text and str(tmp_path) in text
    assert 'port=1' in text and 'port=2' in text
    tally.add('replicas (fail-over)', 'scenarios')


def test_an_edited_file_moves_connections(server_backend, database,
                                          tmp_path, monkeypatch):
    monkeypatch.setattr(replicas_module, 'RECHECK', 0)
    host, port = server_backend.server()
    # Two lines for the same server: which one a connection used shows.
    first, second = f'{host}:{port}', host
    path = tmp_path / 'r.conf'
    write(path, first)
    storage = server_backend.open(database, ro_replica_conf=str(path))
    try:
        db = ZODB.DB(storage)
        conn = db.open()
        conn.root()['x'] = 1
        transaction.commit()
        cm = storage._adapter.connmanager
        instance = conn._storage
        assert cm.server_of(instance._load_conn) == first
        # ro-replica-conf only: commits go to the configured server.
        assert cm.server_of(instance._store_conn) is None
        write(path, second)
        transaction.begin()
        assert conn.root()['x'] == 1
        assert cm.server_of(instance._load_conn) == second
        conn.close()
        db.close()
    finally:
        storage.close()
    tally.add('replicas (fail-over)', 'scenarios')


# -- a primary and its replica -------------------------------------------

class _PostgreSQLPair:
    """A PostgreSQL primary with a streaming standby (tests/pgcluster.py)."""

    group = 'replicas (PostgreSQL primary and standby)'

    def __init__(self, cluster=None):
        """A new cluster, or ``cluster`` (a pgcluster.Cluster) seen as a
        pair."""
        from pgcluster import Cluster
        self.cluster = Cluster() if cluster is None else cluster
        self.primary_line = self.cluster.primary.line
        self.replica_line = self.cluster.standby.line

    def create_database(self, name):
        self.cluster.create_database(name)

    def drop_database(self, name):
        if self.cluster.primary.running:
            self.resume_replay()
            self.cluster.primary.query(
                f'DROP DATABASE IF EXISTS {name} WITH (FORCE)')

    def adapter(self, name):
        from relstorage.adapters.postgresql import PostgreSQLAdapter
        return PostgreSQLAdapter(dsn=self.cluster.primary.dsn(name))

    def primary_running(self):
        return self.cluster.primary.running

    def wait_replayed(self):
        self.cluster.wait_replayed()

    def pause_replay(self):
        self.cluster.pause_replay()

    def resume_replay(self):
        self.cluster.resume_replay()

    def which(self, cursor):
        """'primary' or 'replica': the server ``cursor`` talks to."""
        cursor.execute('SELECT inet_server_port()')
        port = cursor.fetchone()[0]
        return {self.cluster.primary.port: 'primary',
                self.cluster.standby.port: 'replica'}[port]

    def stop_replica(self):
        self.cluster.standby.stop('fast')

    def start_replica(self):
        self.cluster.standby.start()

    def kill_primary(self):
        self.cluster.primary.stop('immediate')

    def promote(self):
        self.cluster.promote()

    def close(self):
        self.cluster.close()


class _MariaDBPair:
    """A MariaDB primary and a read-only replica replicating by GTID, used
    through an account without SUPER (tests/mariadbserver.py)."""

    group = 'replicas (MariaDB primary and replica)'

    def __init__(self):
        from mariadbserver import MariaDBPair
        self.pair = MariaDBPair()
        self.primary_line = f'127.0.0.1:{self.pair.primary.port}'
        self.replica_line = f'127.0.0.1:{self.pair.replica.port}'

    def create_database(self, name):
        self.pair.create_database(name)

    def drop_database(self, name):
        if self.pair.primary.proc is not None:
            self.resume_replay()
            self.pair.primary.query(f'DROP DATABASE IF EXISTS {name}')

    def adapter(self, name):
        from relstorage.adapters.mysql import MySQLAdapter
        return MySQLAdapter(**self.pair.adapter_keys(self.pair.primary,
                                                     name))

    def primary_running(self):
        return self.pair.primary.proc is not None

    def wait_replayed(self):
        self.pair.wait_replayed()

    def pause_replay(self):
        self.pair.pause_replay()

    def resume_replay(self):
        self.pair.resume_replay()

    def which(self, cursor):
        cursor.execute('SELECT @@server_id')
        return {1: 'primary', 2: 'replica'}[int(cursor.fetchone()[0])]

    def stop_replica(self):
        self.pair.replica.stop()

    def start_replica(self):
        self.pair.replica.start()

    def kill_primary(self):
        self.pair.primary.proc.kill()
        self.pair.primary.proc.wait(30)
        self.pair.primary.proc = None

    def promote(self):
        self.pair.promote()

    def close(self):
        self.pair.close()


#: The pairs each replica scenario runs on.
PAIRS = [pytest.param(_PostgreSQLPair, marks=pytest.mark.postgresql,
                      id='postgresql'),
         pytest.param(_MariaDBPair, marks=pytest.mark.mysql, id='mariadb')]


@pytest.fixture(scope='module', params=PAIRS)
def pair(request):
    made = request.param()
    yield made
    made.close()


@pytest.fixture
def pair_db(pair):
    name = 'replica_' + uuid.uuid4().hex[:10]
    pair.create_database(name)
    yield name
    pair.drop_database(name)


def _open_pair(pair, name, tmp_path, keep_history=True, rw=None, ro=None,
               **options):
    if rw is not None:
        options['replica_conf'] = write(tmp_path / 'rw.conf', *rw)
    if ro is not None:
        options['ro_replica_conf'] = write(tmp_path / 'ro.conf', *ro)
    if pair.primary_running():
        # The schema first, on the primary, and replayed: a replica has
        # nothing to serve before.
        RelStorage(pair.adapter(name), keep_history=keep_history).close()
        pair.wait_replayed()
    return RelStorage(pair.adapter(name), keep_history=keep_history,
                      **options)


@pytest.mark.parametrize('keep_history', [True, False], ids=['hp', 'hf'])
def test_reads_from_the_replica_commits_to_the_primary(pair, pair_db,
                                                       tmp_path,
                                                       keep_history):
    storage = _open_pair(pair, pair_db, tmp_path, keep_history,
                         rw=[pair.primary_line], ro=[pair.replica_line])
    try:
        db = ZODB.DB(storage)
        pair.wait_replayed()    # the root that ZODB.DB committed
        conn = db.open()
        conn.root()['doc'] = PersistentMapping(title='first')
        transaction.commit()
        assert pair.which(conn._storage._store_cursor) == 'primary'
        pair.wait_replayed()
        other = db.open()
        assert other.root()['doc']['title'] == 'first'
        assert pair.which(other._storage._load_cursor) == 'replica'
        # The replica refuses writes; the store connection never went
        # there.
        with pytest.raises(Exception, match='read-only|READ-ONLY|read_only'):
            other._storage._load_cursor.execute(
                'UPDATE commit_row SET tid = tid')
        other.close()
        conn.close()
        db.close()
    finally:
        storage.close()
    tally.add(pair.group, 'scenarios')


def test_a_replica_is_never_written(pair, pair_db, tmp_path):
    """A read-only replica listed first in replica-conf is skipped for the
    commits: they go to the next server."""
    storage = _open_pair(pair, pair_db, tmp_path,
                         rw=[pair.replica_line, pair.primary_line])
    try:
        db = ZODB.DB(storage)
        conn = db.open()
        conn.root()['x'] = 1
        transaction.commit()
        assert pair.which(conn._storage._store_cursor) == 'primary'
        conn.close()
        db.close()
    finally:
        storage.close()
    tally.add(pair.group, 'scenarios')


@pytest.mark.parametrize('revert', [False, True], ids=['raise', 'revert'])
def test_a_lagging_replica(pair, pair_db, tmp_path, revert, caplog):
    storage = _open_pair(pair, pair_db, tmp_path, rw=[pair.primary_line],
                         ro=[pair.replica_line], revert_when_stale=revert)
    try:
        db = ZODB.DB(storage)
        pair.wait_replayed()    # the root that ZODB.DB committed
        conn = db.open()
        conn.root()['doc'] = PersistentMapping(title='first')
        transaction.commit()
        pair.wait_replayed()
        transaction.begin()
        assert conn.root()['doc']['title'] == 'first'
        pair.pause_replay()
        conn.root()['doc']['title'] = 'second'
        transaction.commit()
        # This connection committed 'second'; the replica has not applied
        # it.  A load (the object is a ghost again) is stale.
        conn.cacheMinimize()
        caplog.set_level(logging.WARNING, 'relstorage')
        if not revert:
            transaction.begin()
            with pytest.raises(ReadConflictError) as e:
                conn.root()['doc']['title']
            assert 'behind' in str(e.value)
            assert pair.replica_line in str(e.value)
            transaction.abort()
            # Still behind: still raising, at every try.
            with pytest.raises(ReadConflictError):
                conn.root()['doc']['title']
            transaction.abort()
        else:
            transaction.begin()
            assert conn.root()['doc']['title'] == 'first'
            assert any('revert-when-stale' in r.getMessage()
                       for r in caplog.records)
            transaction.abort()
        pair.resume_replay()
        pair.wait_replayed()
        transaction.begin()
        assert conn.root()['doc']['title'] == 'second'
        transaction.abort()
        conn.close()
        db.close()
    finally:
        storage.close()
    tally.add(pair.group, 'scenarios')


def test_a_stopped_replica_is_skipped(pair, pair_db, tmp_path):
    storage = _open_pair(pair, pair_db, tmp_path, rw=[pair.primary_line],
                         ro=[pair.replica_line, pair.primary_line],
                         replica_timeout=0.5)
    try:
        db = ZODB.DB(storage)
        pair.wait_replayed()    # the root that ZODB.DB committed
        conn = db.open()
        conn.root()['x'] = 1
        transaction.commit()
        pair.wait_replayed()
        transaction.begin()
        assert conn.root()['x'] == 1
        assert pair.which(conn._storage._load_cursor) == 'replica'
        pair.stop_replica()
        try:
            # The connection to the replica is gone: the next transaction
            # reconnects, to the primary.
            transaction.begin()
            assert conn.root()['x'] == 1
            assert pair.which(conn._storage._load_cursor) == 'primary'
            fresh = db.open()
            fresh.root()['y'] = 2
            transaction.commit()
            fresh.close()
        finally:
            pair.start_replica()
        # replica-timeout later the replica is used again.
        pair.wait_replayed()
        time.sleep(0.6)
        transaction.begin()
        assert conn.root()['y'] == 2
        assert pair.which(conn._storage._load_cursor) == 'replica'
        conn.close()
        db.close()
    finally:
        storage.close()
    tally.add(pair.group, 'scenarios')


@pytest.mark.parametrize('make_pair', PAIRS)
def test_the_promoted_replica_takes_over(make_pair, tmp_path):
    pair = make_pair()
    try:
        pair.create_database('zodb')
        storage = _open_pair(pair, 'zodb', tmp_path,
                             rw=[pair.primary_line, pair.replica_line])
        try:
            db = ZODB.DB(storage)
            conn = db.open()
            conn.root()['doc'] = PersistentMapping(n=1)
            transaction.commit()
            pair.wait_replayed()
            pair.kill_primary()
            # The replica is not promoted yet: it is read-only, and no
            # server takes the commit.
            conn.root()['doc']['n'] = 2
            with pytest.raises(DisconnectedError) as e:
                transaction.commit()
            assert 'no server of replica-conf' in str(e.value)
            transaction.abort()
            pair.promote()
            transaction.begin()
            assert conn.root()['doc']['n'] == 1
            conn.root()['doc']['n'] = 2
            transaction.commit()
            assert pair.which(conn._storage._store_cursor) == 'replica'
            conn.close()
            other = db.open()
            assert other.root()['doc']['n'] == 2
            other.close()
            db.close()
        finally:
            storage.close()
    finally:
        pair.close()
    tally.add(pair.group, 'scenarios')


# -- a database that went back in time, without replicas -----------------

def test_a_database_that_went_back_is_followed(open_storage, caplog):
    """No replica files: an older database can only be a restored or
    replaced one, and is followed (revert-when-stale false or not)."""
    from ZODB.utils import u64
    storage = open_storage()
    db = ZODB.DB(storage)
    conn = db.open()
    conn.root()['x'] = 1
    transaction.commit()
    first = u64(storage.lastTransaction())
    conn.root()['x'] = 2
    transaction.commit()
    conn.close()
    instance = storage.new_instance()
    try:
        instance.poll_invalidations()
        assert u64(instance.lastTransaction()) > first
        # As a restore would leave it: the last transaction is the first.
        with storage._adapter.connmanager.write_session('test') as cursor:
            cursor.execute(f'UPDATE commit_row SET tid = {first}')
        caplog.set_level(logging.WARNING, 'relstorage')
        assert instance.poll_invalidations() is None
        said = [r.getMessage() for r in caplog.records]
        assert any('went back' in m for m in said), said
        # From then on it is the database's state: nothing more to say.
        caplog.clear()
        assert instance.poll_invalidations() == []
        assert instance._snapshot_cursor() is not None
        assert not caplog.records
    finally:
        instance.release()
        db.close()
    tally.add('databases gone back in time', 'scenarios')
