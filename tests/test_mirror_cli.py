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
