"""relstorage-mirror run as administrators run it: a subprocess on a config
file, judged by its exit status and output, bad input included, stopped
with Ctrl-C and run again."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import transaction
import ZODB
import ZODB.config
from persistent.mapping import PersistentMapping

MIRROR = os.path.join(os.path.dirname(sys.executable), 'relstorage-mirror')
TIMEOUT = 120


def run(*args):
    return subprocess.run([MIRROR, *map(str, args)], capture_output=True,
                          text=True, timeout=TIMEOUT)


@pytest.fixture
def config(tmp_path, backend, database, keep_history):
    if not backend.capabilities().json_mirror:
        pytest.skip('json-state is not offered on this database')
    path = tmp_path / 'mirror.conf'
    path.write_text(backend.zconfig(database, keep_history))
    return path


def _fill(path, count):
    """``count`` mappings under the root, committed without json-state."""
    db = ZODB.DB(ZODB.config.storageFromURL(str(path)))
    try:
        conn = db.open()
        root = conn.root()
        for index in range(count):
            root[index] = PersistentMapping({'n': index})
            if index % 500 == 499:
                transaction.commit()
        transaction.commit()
        conn.close()
    finally:
        db.close()


def test_it_fills_in_and_then_checks_clean(config):
    _fill(config, 50)
    checked = run('--check', '--json', config)
    assert checked.returncode == 1, checked.stderr
    [before] = json.loads(checked.stdout)
    assert (before['objects'], before['rows'], before['behind']) == (
        51, 0, 51)
    assert '51 objects without the JSON of their current revision' in (
        checked.stderr)
    filled = run('--batch', '7', config)
    assert filled.returncode == 0, filled.stderr
    assert '51 objects rendered' in filled.stderr
    assert 'rendered' in filled.stdout and '51' in filled.stdout
    again = run('--check', config)
    assert again.returncode == 0, again.stderr
    assert 'behind' in again.stdout
    # Nothing left to do: a second fill renders nothing.
    second = run('--json', config)
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout)[0]['rendered'] == 0


def test_bad_input_fails_with_status_2(config, tmp_path):
    missing = run(tmp_path / 'nowhere.conf')
    assert missing.returncode == 2
    assert 'relstorage-mirror: error: cannot read' in missing.stderr
    bad = run('--batch', '0', config)
    assert bad.returncode == 2
    assert "'0' is not a number of objects" in bad.stderr


def test_another_kind_of_storage_is_passed_over(tmp_path):
    path = tmp_path / 'fs.conf'
    path.write_text(f'<filestorage>\n  path {tmp_path / "Data.fs"}\n'
                    f'</filestorage>\n')
    result = run(path)
    assert result.returncode == 0, result.stderr
    assert 'is not a relstorage: passed over' in result.stderr


def test_ctrl_c_stops_at_a_batch_boundary_and_a_later_run_goes_on(config):
    _fill(config, 3000)
    proc = subprocess.Popen([MIRROR, '--batch', '1', str(config)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    seen = []
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        seen.append(line)
        if not line or 'missing or behind (' in line:
            break
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=TIMEOUT)
    err = ''.join(seen) + err
    assert proc.returncode == 130, err
    assert 'stopping at the next batch boundary' in err
    assert 'run relstorage-mirror again to go on' in err
    partial = json.loads(run('--check', '--json', config).stdout)[0]
    assert 0 < partial['current'] < 3001
    rest = run('--json', config)
    assert rest.returncode == 0, rest.stderr
    assert json.loads(rest.stdout)[0]['rendered'] == 3001 - partial['current']
    assert run('--check', config).returncode == 0


# -- relstorage-query ---------------------------------------------------------

QUERY = os.path.join(os.path.dirname(sys.executable), 'relstorage-query')


def ask(*args):
    return subprocess.run([QUERY, *map(str, args)], capture_output=True,
                          text=True, timeout=TIMEOUT)


@pytest.fixture
def site(tmp_path, backend, database, keep_history):
    """A config file with json-state, on a database holding a folder (an
    OOBTree) of five documents; returns the path and the oids."""
    if not backend.capabilities().json_mirror:
        pytest.skip('json-state is not offered on this database')
    path = tmp_path / 'query.conf'
    path.write_text(backend.zconfig(database, keep_history, json_state=True))
    from BTrees.OOBTree import OOBTree
    db = ZODB.DB(ZODB.config.storageFromURL(str(path)))
    try:
        conn = db.open()
        conn.root()['folder'] = folder = OOBTree()
        for i in range(5):
            folder[f'd{i}'] = PersistentMapping({
                'title': f'Doc {i}', 'n': i, 'draft': i % 2 == 0})
        transaction.commit()
        oids = {key: int.from_bytes(doc._p_oid, 'big')
                for key, doc in folder.items()}
        oids['folder'] = int.from_bytes(folder._p_oid, 'big')
        conn.close()
    finally:
        db.close()
    return path, oids


def _answer(result):
    assert result.returncode == 0, result.stderr
    [found] = json.loads(result.stdout)
    return found['answer']


def test_the_questions(site):
    path, oids = site
    classes = _answer(ask('--json', path, 'classes'))
    assert [(row['class'], row['objects']) for row in classes] == [
        ('persistent.mapping.PersistentMapping', 6),
        ('BTrees.OOBTree.OOBTree', 1)]
    assert all(row['pickle_bytes'] > 0 for row in classes)
    found = _answer(ask('--json', path, 'find', 'data.title', 'Doc 3'))
    assert found == [{'oid': oids['d3'],
                      'class': 'persistent.mapping.PersistentMapping'}]
    assert [row['oid'] for row in _answer(
        ask('--json', path, 'find', 'data.n', '3'))] == [oids['d3']]
    # A number given as a JSON string is text: no document has it.
    assert _answer(ask('--json', path, 'find', 'data.n', '"3"')) == []
    drafts = _answer(ask('--json', '--limit', '2', path, 'find',
                         'data.draft', 'true', '--class',
                         'persistent.mapping.PersistentMapping'))
    assert [row['oid'] for row in drafts] == sorted(
        [oids['d0'], oids['d2'], oids['d4']])[:2]
    for oid in (str(oids['d1']), hex(oids['d1'])):
        assert _answer(ask('--json', path, 'refs', oid)) == [
            {'oid': oids['folder'], 'class': 'BTrees.OOBTree.OOBTree'}]
    text = ask(path, 'refs', oids['d1'])
    assert text.returncode == 0
    assert f'0x{oids["folder"]:016x}  BTrees.OOBTree.OOBTree' in text.stdout
    lines = ask(path, 'classes').stdout.splitlines()
    assert lines[1].split() == ['objects', 'pickle', 'bytes', 'class']
    assert lines[2].split()[-1] == 'persistent.mapping.PersistentMapping'


def test_query_bad_input_fails_with_status_2(site):
    path, _ = site
    for args, message in [
            (('refs', 'x12'), "'x12' is not an oid"),
            (('find', 'data.title', '[1, 2]'), 'not a list or an object'),
            (('find', 'a', 'b', '--class', 'Nomodule'), 'is not module.Class'),
            (('--limit', '0', 'classes'), "'0' is not a positive number"),
            (('everything',), 'invalid choice')]:
        result = ask(path, *args)
        assert result.returncode == 2, (args, result.stderr)
        assert message in result.stderr, (args, result.stderr)


def test_a_database_without_the_schema_is_an_error(config):
    # (config: a database nothing was written to yet.)
    result = ask(config, 'classes')
    assert result.returncode == 1
    assert 'holds no relstorage schema' in result.stderr
