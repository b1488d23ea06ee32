"""relstorage-stats run as an administrator runs it: a subprocess on a
config file, as text and as JSON, on every backend and history mode."""
import json
import os
import subprocess
import sys
import time

import transaction
import ZODB
import ZODB.config
from persistent.mapping import PersistentMapping
from ZODB.serialize import referencesf

STATS = os.path.join(os.path.dirname(sys.executable), 'relstorage-stats')


def run(*args):
    return subprocess.run([STATS, *map(str, args)], capture_output=True,
                          text=True, timeout=120)


def test_what_a_database_holds(backend, database, keep_history, tmp_path):
    config = tmp_path / 'zodb.conf'
    config.write_text(backend.zconfig(database, keep_history))
    empty = run('--json', config)
    assert empty.returncode == 0, empty.stderr
    assert json.loads(empty.stdout)[0]['schema_version'] is None

    storage = ZODB.config.storageFromURL(str(config))
    db = ZODB.DB(storage)
    conn = db.open()
    for index in range(10):
        conn.root()[index] = PersistentMapping()
        transaction.commit()
    conn.root()[0]['changed'] = True
    transaction.commit()
    conn.close()
    storage.pack(time.time() + 1, referencesf)
    db.close()

    result = run('--json', config)
    assert result.returncode == 0, result.stderr
    [figures] = json.loads(result.stdout)
    assert figures['objects'] == 11
    assert figures['revisions'] == 11      # packed: one revision each
    if keep_history:
        assert figures['transactions'] >= 2
    assert figures['size_bytes'] > 0
    assert figures['last_pack'] is not None
    assert figures['last_transaction'] >= figures['oldest_revision']
    assert figures['history'] == ('history-preserving' if keep_history
                                  else 'history-free')

    text = run(config)
    assert text.returncode == 0, text.stderr
    assert 'objects' in text.stdout and '11' in text.stdout
    assert 'last pack' in text.stdout


def test_the_sessions_connected_now(backend, database, tmp_path):
    """What a site's processes hold on the server (docs/operations.rst,
    the connection budget): the database's other sessions, where the
    database has a server."""
    config = tmp_path / 'zodb.conf'
    config.write_text(backend.zconfig(database))
    storage = ZODB.config.storageFromURL(str(config))
    instances = [storage.new_instance() for _ in range(3)]
    try:
        for instance in instances:
            instance.poll_invalidations()
        result = run('--json', config)
        assert result.returncode == 0, result.stderr
        [figures] = json.loads(result.stdout)
        if not hasattr(backend, 'sessions'):
            assert 'other_sessions' not in figures
            return
        assert figures['other_sessions'] == backend.sessions(database)
        assert figures['other_sessions'] >= 3
        text = run(config)
        assert 'sessions connected now' in text.stdout
    finally:
        for instance in instances:
            instance.release()
        storage.close()


def test_bad_input(tmp_path):
    missing = run(tmp_path / 'missing.conf')
    assert missing.returncode == 2
    assert 'cannot read' in missing.stderr
    fs = tmp_path / 'fs.conf'
    fs.write_text(f'<filestorage>\n  path {tmp_path / "Data.fs"}\n'
                  f'</filestorage>\n')
    other = run(fs)
    assert other.returncode == 0
    assert 'not a relstorage' in other.stderr
