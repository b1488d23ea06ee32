"""zodbpack run as administrators run it: a subprocess on a config file,
judged by its exit status and output, bad input included, stopped with
Ctrl-C and killed with SIGKILL in each phase."""
import os
import signal
import subprocess
import sys
import time

import pytest
import transaction
import ZODB
import ZODB.config
import ZODB.FileStorage
from persistent.mapping import PersistentMapping
from ZODB.serialize import referencesf
from ZODB.utils import p64
from ZODB.utils import u64

from relstorage.pack.deletion import DELETING
from relstorage.pack.deletion import PAGES

from children import run_on_terminal
from backends import deleting_phase
from backends import by_page

ZODBPACK = os.path.join(os.path.dirname(sys.executable), 'zodbpack')
TIMEOUT = 120


def run(*args, timeout=TIMEOUT):
    return subprocess.run([ZODBPACK, *map(str, args)], capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture
def config(tmp_path, backend, database, keep_history):
    """Write a config file for the test's database (with extra options)
    and return its path."""
    def write(name='zodbpack.conf', **options):
        path = tmp_path / name
        path.write_text(backend.zconfig(database, keep_history, **options))
        return path
    return write


def _open(path):
    return ZODB.config.storageFromURL(str(path))


def _deleting(path):
    """The name of the deletions by object in the progress of a pack of
    ``path``'s storage."""
    storage = _open(path)
    try:
        return deleting_phase(storage)
    finally:
        storage.close()


def _fill(path, count, drop_every=2):
    """``count`` mappings with a child each under the root, every
    ``drop_every``-th dropped again; returns the dropped oids."""
    db = ZODB.DB(_open(path))
    try:
        conn = db.open()
        root = conn.root()
        for index in range(count):
            root[index] = PersistentMapping({'child': PersistentMapping()})
            if index % 200 == 199:
                transaction.commit()
        transaction.commit()
        dropped = []
        for index in range(0, count, drop_every):
            dropped += [u64(root[index]._p_oid),
                        u64(root[index]['child']._p_oid)]
            del root[index]
        transaction.commit()
        conn.close()
        return dropped
    finally:
        db.close()


def _state(path, oids):
    """``(how many of oids still load, every reachable object loads)``."""
    storage = _open(path)
    try:
        present = 0
        for oid in oids:
            try:
                storage.load(p64(oid))
                present += 1
            except KeyError:
                pass
        seen, todo = set(), [0]
        while todo:
            oid = todo.pop()
            if oid not in seen:
                seen.add(oid)
                data, _ = storage.load(p64(oid))    # POSKeyError fails
                todo.extend(u64(r) for r in referencesf(data))
        helpers = _helper_rows(storage)
        return present, len(seen), helpers
    finally:
        storage.close()


def _helper_rows(storage):
    cm = storage._adapter.connmanager
    conn = cm.connect()
    cursor = conn.cursor()
    try:
        total = 0
        # Not a finished pack's own record (phase 4), kept for the next.
        for table in ('pack_run WHERE phase <> 4', 'pack_object',
                      'pack_reached'):
            cursor.execute(f'SELECT COUNT(*) FROM {table}')
            total += cursor.fetchone()[0]
        return total
    finally:
        cm.close(conn, cursor)


def test_packs_every_storage_of_the_file(config, tmp_path, keep_history):
    path = config()
    dropped = _fill(path, 40)
    fs_path = tmp_path / 'Data.fs'
    fs_db = ZODB.DB(ZODB.FileStorage.FileStorage(str(fs_path)))
    conn = fs_db.open()
    conn.root()['x'] = PersistentMapping()
    transaction.commit()
    del conn.root()['x']
    transaction.commit()
    fs_db.close()
    both = tmp_path / 'both.conf'
    both.write_text(path.read_text() + (
        f'<filestorage fs>\n  path {fs_path}\n</filestorage>\n'))
    result = run('-d', '-1', both)
    assert result.returncode == 0, result.stderr
    assert 'packing storage (relstorage)' in result.stderr
    assert 'packing fs (filestorage)' in result.stderr
    assert _deleting(path) + ' (' in result.stderr
    assert _state(path, dropped) == (0, 1 + 20 * 2, 0)
    assert os.path.exists(str(fs_path) + '.old')     # FileStorage packed


def test_the_default_keeps_a_day(config):
    path = config()
    dropped = _fill(path, 10)
    result = run(path)
    assert result.returncode == 0, result.stderr
    present, reachable, _ = _state(path, dropped)
    assert present == len(dropped)


@pytest.mark.parametrize('args, message', [
    (['-d', 'abc'], "argument -d/--days: 'abc' is not a number of days"),
    (['-d', 'nan'], "argument -d/--days: 'nan' is not a number of days"),
    (['--days', 'inf'], "'inf' is not a number of days"),
    (['--prepack', '--use-prepack-state'],
     'not allowed with argument --prepack'),
    ([], 'the following arguments are required: CONFIG'),
])
def test_bad_arguments(args, message, tmp_path):
    result = run(*args, *([tmp_path / 'x.conf'] if args else []))
    assert result.returncode == 2
    assert message in result.stderr
    assert 'Traceback' not in result.stderr


@pytest.mark.sqlite
def test_bad_config_files(tmp_path):
    not_storage = tmp_path / 'zodb.conf'
    not_storage.write_text(
        '%import relstorage\n<zodb>\n  <mappingstorage/>\n</zodb>\n')
    syntax = tmp_path / 'syntax.conf'
    syntax.write_text('%import relstorage\n<relstorage>\n')
    unknown = tmp_path / 'unknown.conf'
    unknown.write_text('%import relstorage\n<relstorage>\n  no-such-key 1\n'
                       '  <sqlite3>\n    data-dir /tmp\n  </sqlite3>\n'
                       '</relstorage>\n')
    empty = tmp_path / 'empty.conf'
    empty.write_text('%import relstorage\n')
    cases = [
        (tmp_path / 'missing.conf', 'cannot read', 'No such file'),
        (tmp_path, 'cannot read', 'Is a directory'),
        (not_storage, 'zodb.conf', "zodb"),
        (syntax, 'syntax.conf', 'unclosed sections'),
        (unknown, 'unknown.conf', 'no-such-key'),
        (empty, 'empty.conf', 'has no storage section'),
    ]
    for path, *expected in cases:
        result = run(path)
        assert result.returncode == 2, (path, result.stderr)
        line = result.stderr.strip()
        assert line.startswith('zodbpack: error: '), line
        assert len(line.splitlines()) == 1, line
        for text in expected:
            assert text in line, (text, line)


@pytest.mark.sqlite
def test_a_database_that_cannot_be_opened_fails(tmp_path):
    path = tmp_path / 'down.conf'
    path.write_text('%import relstorage\n<relstorage>\n  create-schema false\n'
                    f'  <sqlite3>\n    data-dir {tmp_path / "empty"}\n'
                    '  </sqlite3>\n</relstorage>\n')
    result = run('-d', '-1', path)
    assert result.returncode == 1
    assert 'cannot open storage (relstorage)' in result.stderr
    assert 'create-schema is false' in result.stderr


def test_prepack_then_use_prepack_state(config):
    path = config()
    dropped = _fill(path, 20)
    result = run('-d', '-1', '--prepack', path)
    assert result.returncode == 0, result.stderr
    assert 'analysis kept for a later pack' in result.stderr
    present, _, helpers = _state(path, dropped)
    assert present == len(dropped) and helpers > 0
    result = run('--use-prepack-state', path)
    assert result.returncode == 0, result.stderr
    assert _state(path, dropped) == (0, 1 + 10 * 2, 0)
    # Nothing left to use.
    result = run('--use-prepack-state', path)
    assert result.returncode == 1
    assert 'no kept pack analysis to use' in result.stderr


def test_check_refs_only(config):
    path = config()
    _fill(path, 10, drop_every=1000)
    result = run('--check-refs-only', path)
    assert result.returncode == 0, result.stderr
    assert 'no reachable object refers to a missing one' in result.stderr
    # Remove an object a kept one refers to, behind the storage's back.
    storage = _open(path)
    try:
        root = storage.load(p64(0))[0]
        victim = min(u64(r) for r in referencesf(root))
        cm = storage._adapter.connmanager
        conn = cm.connect()
        cursor = conn.cursor()
        cm.begin_write(cursor, 'test')
        cursor.execute(f'DELETE FROM object_state WHERE zoid = {victim}')
        cm.commit(conn, cursor)
        cm.close(conn, cursor)
    finally:
        storage.close()
    result = run('--check-refs-only', path)
    assert result.returncode == 1
    assert f'oid 0x{0:016x} refers to missing oid 0x{victim:016x}' in \
        result.stdout
    assert '1 broken references' in result.stderr


def test_a_revision_whose_references_cannot_be_read(config):
    """Packed and checked as an administrator does: the pack succeeds
    without removing garbage and names the revision; the check names it
    and fails."""
    path = config()
    dropped = _fill(path, 10)
    storage = _open(path)
    try:
        data, serial = storage.load(p64(0))
        txn = transaction.Transaction()
        storage.tpc_begin(txn)
        storage.store(p64(0), serial, data[:-7], '', txn)   # truncated
        storage.tpc_vote(txn)
        tid = u64(storage.tpc_finish(txn))
    finally:
        storage.close()
    result = run('--check-refs-only', path)
    assert result.returncode == 1
    assert (f'oid 0x{0:016x} at tid 0x{tid:016x}: references cannot be '
            f'read') in result.stdout
    assert '1 revisions whose references cannot be read' in result.stderr
    result = run('-d', '-1', path)
    assert result.returncode == 0, result.stderr
    assert f'the references of oid 0x0 at tid 0x{tid:x}' in result.stderr
    assert 'garbage collection skipped' in result.stderr
    storage = _open(path)
    try:
        for oid in dropped:
            storage.load(p64(oid))      # garbage, kept
    finally:
        storage.close()


def test_vacuum(config):
    path = config()
    _fill(path, 10)
    result = run('-d', '-1', '--vacuum', path)
    assert result.returncode == 0, result.stderr
    assert any(what in result.stderr for what in
               ('VACUUM (ANALYZE) done', 'OPTIMIZE TABLE done',
                'VACUUM done'))


def _start(*args):
    return subprocess.Popen([ZODBPACK, *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _wait_for(proc, text, timeout=60):
    """Read proc's stderr until a line holding ``text``; all read so far."""
    seen = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        seen.append(line)
        if text in line:
            return ''.join(seen)
    _kill(proc)
    pytest.fail(f'zodbpack never said {text!r}:\n' + ''.join(seen))


def _kill(proc):
    """SIGKILL, then collect what is left of its output (closing the
    pipes)."""
    proc.kill()
    proc.communicate(timeout=TIMEOUT)


def test_ctrl_c_stops_at_a_batch_boundary_and_a_later_run_goes_on(
        config, keep_history):
    slow = config('slow.conf', pack_batch_timeout=0.001,
                  pack_duty_cycle=0.02)
    fast = config()
    dropped = _fill(fast, 1000)
    proc = _start('-d', '-1', slow)
    _wait_for(proc, _deleting(fast) + ' (')
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 130, err
    assert 'stopping at the next batch boundary' in err
    assert 'the pack stopped at a batch boundary' in err
    # (test_pack checks the partial deletion itself, without the race
    # between the signal and the first batch.)
    present, _, helpers = _state(fast, dropped)
    assert present <= len(dropped) and helpers > 0, err
    result = run('--use-prepack-state', fast)
    assert result.returncode == 0, result.stderr
    assert _state(fast, dropped) == (0, 1 + 500 * 2, 0)


def test_killed_in_each_phase_and_run_again(config, keep_history):
    slow = config('slow.conf', pack_batch_timeout=0.001,
                  pack_duty_cycle=0.1)
    fast = config()
    dropped = _fill(fast, 1000)
    # Each update makes an older revision (history-preserving).
    db = ZODB.DB(_open(fast))
    conn = db.open()
    for index in range(1, 1000, 2):
        conn.root()[index]['v'] = 1
    transaction.commit()
    db.close()
    phases = ['revisions analysed for references',
              'objects reached from the root',
              _deleting(fast) + ' (']
    storage = _open(fast)
    if by_page(storage):
        phases.insert(2, PAGES + ' (')
    storage.close()
    for phase in phases:
        proc = _start('-d', '-1', slow)
        _wait_for(proc, phase)
        _kill(proc)
    result = run('-d', '-1', fast)
    assert result.returncode == 0, result.stderr
    assert _state(fast, dropped) == (0, 1 + 500 * 2, 0)


@pytest.mark.sqlite
def test_progress_on_a_terminal(tmp_path):
    path = tmp_path / 'sqlite.conf'
    path.write_text('%import relstorage\n<relstorage>\n'
                    '  pack-batch-timeout 0.001\n  pack-duty-cycle 0.5\n'
                    f'  <sqlite3>\n    data-dir {tmp_path / "db"}\n'
                    '  </sqlite3>\n</relstorage>\n')
    _fill(path, 3000)
    status, text = run_on_terminal([ZODBPACK, '-d', '-1', str(path)], TIMEOUT)
    assert status == 0, text
    # The live line: count of total, rate and time left.
    assert f'\r\x1b[K  {DELETING[True]}: ' in text
    # (3,000 garbage objects, and the root's old revisions.)
    assert ' of 3,001, ' in text and '/s, ' in text and 's left' in text
