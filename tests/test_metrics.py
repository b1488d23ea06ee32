"""storage.metrics() and its Prometheus export: the counters move with
what the storage does."""
import socket
import time
import urllib.request

import pytest
import transaction
import ZODB
from persistent.mapping import PersistentMapping
from ZODB.POSException import ConflictError
from ZODB.serialize import referencesf


def _commit_objects(db, count):
    conn = db.open()
    root = conn.root()
    for index in range(count):
        root[index] = PersistentMapping({'n': index})
    transaction.commit()
    conn.close()


def test_the_counters_follow_what_the_storage_does(open_storage):
    storage = open_storage()
    db = ZODB.DB(storage)
    before = storage.metrics()
    _commit_objects(db, 20)
    after = storage.metrics()
    assert after['commits'] - before['commits'] == 1
    # The 20 mappings and the root.
    assert after['objects_written'] - before['objects_written'] == 21
    assert after['bytes_written'] > before['bytes_written']
    assert after['commit_seconds'] > before['commit_seconds']
    assert after['lock_wait_seconds'] >= before['lock_wait_seconds']
    assert after['polls'] > before['polls']
    # Its own commit is no invalidation for the connection that made it.
    assert after['invalidations'] == before['invalidations']

    # Loads by another connection: its storage instance counts them, and
    # the totals include them, also once it is gone.
    db.cacheMinimize()
    conn = db.open()
    assert [conn.root()[i]['n'] for i in range(20)] == list(range(20))
    loaded = storage.metrics()
    assert loaded['loads'] - after['loads'] >= 21
    assert loaded['cache_hits'] + loaded['cache_misses'] >= 21
    conn.close()
    db.close()
    assert storage.metrics()['loads'] >= loaded['loads']


def test_conflicts_and_aborts_are_counted(open_storage):
    storage = open_storage()
    db = ZODB.DB(storage)
    _commit_objects(db, 1)
    tm1, tm2 = transaction.TransactionManager(), transaction.TransactionManager()
    first, second = db.open(tm1), db.open(tm2)
    first.root()[0]['n'] = 'first'
    second.root()[0]['n'] = 'second'
    tm1.commit()
    with pytest.raises(ConflictError):
        tm2.commit()
    tm2.abort()
    figures = storage.metrics()
    assert figures['conflicts'] == 1
    assert figures['aborts'] >= 1
    first.close()
    second.close()
    db.close()


def test_a_pack_reports_its_progress(open_storage):
    storage = open_storage()
    db = ZODB.DB(storage)
    _commit_objects(db, 10)
    assert storage.metrics()['pack'] is None
    storage.pack(time.time() + 1, referencesf)
    pack = storage.metrics()['pack']
    assert pack['running'] is False and pack['phase'] == 'done'
    assert pack['ended'] >= pack['started']
    db.close()


def _free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def _scrape(port, name, storage_name):
    with urllib.request.urlopen(f'http://127.0.0.1:{port}/metrics',
                                timeout=10) as response:
        text = response.read().decode()
    prefix = f'{name}{{storage="{storage_name}"}} '
    for line in text.splitlines():
        if line.startswith(prefix):
            return float(line[len(prefix):])
    raise AssertionError(f'{prefix!r} not in the scrape:\n{text[:2000]}')


def test_prometheus_sees_the_counters_move(open_storage):
    prometheus_client = pytest.importorskip('prometheus_client')
    storage = open_storage(name='metrics-test-storage')
    db = ZODB.DB(storage)
    port = _free_port()
    server, thread = prometheus_client.start_http_server(
        port, addr='127.0.0.1')
    try:
        name = 'metrics-test-storage'
        commits = _scrape(port, 'relstorage_commits_total', name)
        written = _scrape(port, 'relstorage_bytes_written_total', name)
        _commit_objects(db, 5)
        assert _scrape(port, 'relstorage_commits_total', name) == commits + 1
        assert _scrape(port, 'relstorage_bytes_written_total', name) > \
            written
        assert _scrape(port, 'relstorage_cache_objects', name) >= 0
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
        db.close()
