"""Replicas with MariaDB: a primary and a replica of the test's own
(tests/mariadbserver.py, GTID replication, the replica ``read_only``):
reads served by the replica, commits by the primary, a replica that lags
(its SQL thread stopped), a stopped one, and a promoted one after the
primary stopped.  As tests/test_replicas.py does with PostgreSQL.
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
from relstorage.errors import DisconnectedError
from relstorage.storage import RelStorage

pytestmark = pytest.mark.mysql

GROUP = 'replicas (MariaDB primary and replica)'


def write(path, *lines):
    path.write_text(''.join(line + '\n' for line in lines), encoding='utf-8')
    return str(path)


def line(server):
    return f'127.0.0.1:{server.port}'


@pytest.fixture(scope='module')
def pair():
    from mariadbserver import MariaDBPair
    pair = MariaDBPair()
    yield pair
    pair.close()


@pytest.fixture
def pair_db(pair):
    name = 'replica_' + uuid.uuid4().hex[:10]
    pair.create_database(name)
    yield name
    if pair.primary.proc is None:
        return
    pair.resume_replay()
    pair.primary.query(f'DROP DATABASE IF EXISTS {name}')


def _open(pair, name, tmp_path, keep_history=True, rw=None, ro=None,
          **options):
    from relstorage.adapters.mysql import MySQLAdapter
    if rw is not None:
        options['replica_conf'] = write(tmp_path / 'rw.conf', *rw)
    if ro is not None:
        options['ro_replica_conf'] = write(tmp_path / 'ro.conf', *ro)
    # The schema first, on the primary, and applied by the replica.
    RelStorage(MySQLAdapter(**pair.adapter_keys(pair.primary, name)),
               keep_history=keep_history).close()
    pair.wait_replayed()
    return RelStorage(MySQLAdapter(**pair.adapter_keys(pair.primary, name)),
                      keep_history=keep_history, **options)


def server_id(cursor):
    cursor.execute('SELECT @@server_id')
    return int(cursor.fetchone()[0])


PRIMARY, REPLICA = 1, 2


@pytest.mark.parametrize('keep_history', [True, False], ids=['hp', 'hf'])
def test_reads_from_the_replica_commits_to_the_primary(pair, pair_db,
                                                       tmp_path,
                                                       keep_history):
    storage = _open(pair, pair_db, tmp_path, keep_history,
                    rw=[line(pair.primary)], ro=[line(pair.replica)])
    try:
        db = ZODB.DB(storage)
        conn = db.open()
        conn.root()['doc'] = PersistentMapping(title='first')
        transaction.commit()
        assert server_id(conn._storage._store_cursor) == PRIMARY
        pair.wait_replayed()
        other = db.open()
        assert other.root()['doc']['title'] == 'first'
        assert server_id(other._storage._load_cursor) == REPLICA
        # The replica refuses this account's writes.
        with pytest.raises(Exception, match='read-only|READ-ONLY|read_only'):
            other._storage._load_cursor.execute(
                'UPDATE commit_row SET tid = tid')
        other.close()
        conn.close()
        db.close()
    finally:
        storage.close()
    tally.add(GROUP, 'scenarios')


def test_a_replica_is_never_written(pair, pair_db, tmp_path):
    """A read-only replica listed first in replica-conf is skipped for the
    commits: they go to the next server."""
    storage = _open(pair, pair_db, tmp_path,
                    rw=[line(pair.replica), line(pair.primary)])
    try:
        db = ZODB.DB(storage)
        conn = db.open()
        conn.root()['x'] = 1
        transaction.commit()
        assert server_id(conn._storage._store_cursor) == PRIMARY
        conn.close()
        db.close()
    finally:
        storage.close()
    tally.add(GROUP, 'scenarios')


@pytest.mark.parametrize('revert', [False, True], ids=['raise', 'revert'])
def test_a_lagging_replica(pair, pair_db, tmp_path, revert, caplog):
    storage = _open(pair, pair_db, tmp_path, rw=[line(pair.primary)],
                    ro=[line(pair.replica)], revert_when_stale=revert)
    try:
        db = ZODB.DB(storage)
        conn = db.open()
        conn.root()['doc'] = PersistentMapping(title='first')
        transaction.commit()
        pair.wait_replayed()
        transaction.begin()
        assert conn.root()['doc']['title'] == 'first'
        pair.pause_replay()
        conn.root()['doc']['title'] = 'second'
        transaction.commit()
        conn.cacheMinimize()
        caplog.set_level(logging.WARNING, 'relstorage')
        if not revert:
            transaction.begin()
            with pytest.raises(ReadConflictError) as e:
                conn.root()['doc']['title']
            assert 'behind' in str(e.value)
            assert line(pair.replica) in str(e.value)
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
    tally.add(GROUP, 'scenarios')


def test_a_stopped_replica_is_skipped(pair, pair_db, tmp_path):
    storage = _open(pair, pair_db, tmp_path, rw=[line(pair.primary)],
                    ro=[line(pair.replica), line(pair.primary)],
                    replica_timeout=0.5)
    try:
        db = ZODB.DB(storage)
        conn = db.open()
        conn.root()['x'] = 1
        transaction.commit()
        pair.wait_replayed()
        transaction.begin()
        assert conn.root()['x'] == 1
        assert server_id(conn._storage._load_cursor) == REPLICA
        pair.replica.stop()
        try:
            transaction.begin()
            assert conn.root()['x'] == 1
            assert server_id(conn._storage._load_cursor) == PRIMARY
            fresh = db.open()
            fresh.root()['y'] = 2
            transaction.commit()
            fresh.close()
        finally:
            pair.replica.start()
        pair.wait_replayed()
        time.sleep(0.6)
        transaction.begin()
        assert conn.root()['y'] == 2
        assert server_id(conn._storage._load_cursor) == REPLICA
        conn.close()
        db.close()
    finally:
        storage.close()
    tally.add(GROUP, 'scenarios')


def test_the_promoted_replica_takes_over(tmp_path):
    from mariadbserver import MariaDBPair
    pair = MariaDBPair()
    try:
        pair.create_database('zodb')
        storage = _open(pair, 'zodb', tmp_path,
                        rw=[line(pair.primary), line(pair.replica)])
        try:
            db = ZODB.DB(storage)
            conn = db.open()
            conn.root()['doc'] = PersistentMapping(n=1)
            transaction.commit()
            pair.wait_replayed()
            pair.primary.proc.kill()          # the primary dies
            pair.primary.proc.wait(30)
            pair.primary.proc = None
            # The replica is still read-only: no server takes the commit.
            conn.root()['doc']['n'] = 2
            with pytest.raises(DisconnectedError) as e:
                transaction.commit()
            assert 'no server of replica-conf' in str(e.value)
            assert 'read-only' in str(e.value)
            transaction.abort()
            pair.promote()
            transaction.begin()
            assert conn.root()['doc']['n'] == 1
            conn.root()['doc']['n'] = 2
            transaction.commit()
            assert server_id(conn._storage._store_cursor) == REPLICA
            conn.close()
            other = db.open()
            assert other.root()['doc']['n'] == 2
            other.close()
            db.close()
        finally:
            storage.close()
    finally:
        pair.close()
    tally.add(GROUP, 'scenarios')
