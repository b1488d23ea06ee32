"""Cooperative concurrency: fifty greenlets of one gevent-patched process
commit and read through relstorage, on the drivers that yield to gevent:
PyMySQL (pure Python), psycopg2 with psycogreen's wait callback, and
psycopg 3.  Each run is a child process (tests/gevent_worker.py): patching
this one would change every other test.

Without deadlock (every greenlet finishes within the timeout), with
correct results (every counter and the shared total exact, no read going
backwards), and cooperatively: while one greenlet waits for the database
inside a commit, others enter theirs (more than one commit in flight).
"""
import json
import os
import subprocess
import sys

import pytest

import tally

HERE = os.path.dirname(os.path.abspath(__file__))
GREENLETS = 50
COMMITS = 4
TIMEOUT = 120

#: The backends whose driver cooperates with gevent.
COOPERATIVE = ('mysql-pymysql', 'postgresql', 'postgresql-psycopg')


def _run(config):
    return subprocess.run(
        [sys.executable, os.path.join(HERE, 'gevent_worker.py'),
         str(config), str(GREENLETS), str(COMMITS), str(TIMEOUT)],
        capture_output=True, text=True, timeout=TIMEOUT + 60)


def test_fifty_greenlets_commit_and_read(backend, database, tmp_path,
                                         keep_history):
    pytest.importorskip('gevent')
    if backend.name not in COOPERATIVE:
        pytest.skip(f'{backend.name}: its driver blocks the gevent hub '
                    f'(see docs/operations.rst, "gevent")')
    config = tmp_path / 'storage.conf'
    # Each ZODB connection holds two sessions (its snapshot and its
    # commits): fifty take most of a shared server's slots (PostgreSQL's
    # 100, MariaDB's 151), and the tests running beside this one in other
    # processes the rest (a CI run saw "Too many connections").  A server
    # of the test's own, with room.
    if backend.name.startswith('postgresql'):
        from pgcluster import Cluster
        server = Cluster(standby=False, max_connections=4 * GREENLETS)
        server.primary.query('CREATE DATABASE zodb')
        text = backend.zconfig(server.primary.dsn('zodb'),
                               keep_history=keep_history)
    else:
        from backends import _zconfig
        from mariadbserver import MariaDBServer
        server = MariaDBServer(max_connections=4 * GREENLETS)
        server.query('CREATE DATABASE zodb')
        keys = dict(server.adapter_keys('zodb'), driver=backend.driver)
        text = _zconfig('mysql', keys, keep_history, {})
    try:
        config.write_text(text)
        done = _run(config)
    finally:
        server.close()

    assert done.returncode == 0, (done.returncode, done.stdout,
                                  done.stderr[-3000:])
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result['finished'] == GREENLETS
    assert result['total'] == GREENLETS * COMMITS
    assert result['counters'] == [COMMITS]
    assert result['backwards'] == 0
    # Cooperative: commits overlapped.
    assert result['max_in_flight'] > 1, result
    tally.add('gevent (50 greenlets)', 'committed transactions checked',
              result['total'])


def test_psycopg2_under_a_wait_callback_stages_without_copy(backend,
                                                            database,
                                                            tmp_path,
                                                            monkeypatch):
    """psycopg2 refuses COPY while a wait callback is set: commits of many
    objects and blobs of several chunks go by INSERT and SELECT, and come
    back the same.  (psycopg2's own select-based callback stands in for
    gevent's: same code path, no patching.)"""
    if backend.name != 'postgresql':
        pytest.skip('psycopg2 only')
    import psycopg2.extensions
    import psycopg2.extras
    import transaction
    import ZODB
    from ZODB.blob import Blob
    from persistent.mapping import PersistentMapping
    calls = []
    real = psycopg2.extras.execute_values

    def counted(*args, **kw):
        calls.append(args[1])
        return real(*args, **kw)
    monkeypatch.setattr(psycopg2.extras, 'execute_values', counted)
    psycopg2.extensions.set_wait_callback(psycopg2.extras.wait_select)
    try:
        storage = backend.open(database, blob_dir=str(tmp_path / 'blobs'),
                               shared_blob_dir=False,
                               blob_chunk_size=4096)
        assert not storage._adapter.driver.can_copy()
        db = ZODB.DB(storage)
        conn = db.open()
        root = conn.root()
        for i in range(300):
            root[i] = PersistentMapping(n=i, pad=b'x' * 100)
        data = os.urandom(50000)
        root['blob'] = Blob(data)
        transaction.commit()
        assert any('temp_store' in sql for sql in calls), calls
        conn.close()
        db.close()
        storage = backend.open(database, blob_dir=str(tmp_path / 'fresh'),
                               shared_blob_dir=False)
        db = ZODB.DB(storage)
        conn = db.open()
        root = conn.root()
        assert [root[i]['n'] for i in range(300)] == list(range(300))
        with root['blob'].open() as f:
            assert f.read() == data
        conn.close()
        db.close()
    finally:
        psycopg2.extensions.set_wait_callback(None)
