"""zodbconvert run as administrators run it: a subprocess on a config file,
judged by its exit status and output.  A FileStorage with blobs, undo
records, deletions and transaction metadata is converted into every
backend and history mode, verified, converted back and compared; a
conversion killed half-way resumes with --incremental; a dry run writes
nothing; bad input and refusals end with one clear line."""
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import time

import pytest
import transaction
import ZODB
import ZODB.config
from persistent.mapping import PersistentMapping
from ZODB.blob import Blob
from ZODB.Connection import TransactionMetaData
from ZODB.FileStorage import FileStorage
from ZODB.utils import p64
from ZODB.utils import u64
from ZODB.utils import z64

from backends import BACKENDS
from children import run_on_terminal
from relstorage.copy import verify

ZODBCONVERT = os.path.join(os.path.dirname(sys.executable), 'zodbconvert')
TIMEOUT = 300
SMALL_BATCHES = (
    'import sys\n'
    'import relstorage.copy.convert\n'
    'relstorage.copy.convert.BATCH_RECORDS = 50\n'
    'from relstorage.cli.zodbconvert import main\n'
    'sys.exit(main())\n')


def run(*args, timeout=TIMEOUT):
    return subprocess.run([ZODBCONVERT, *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)


def make_source(directory, transactions):
    """A FileStorage (with blob-dir) of ``transactions`` commits and more:
    objects added, changed and dropped, blobs written and rewritten, two
    undone transactions (one of them creating objects: records without
    data), an object deleted with deleteObject, user, description and
    extension on every transaction.  Returns its directory."""
    directory.mkdir(parents=True, exist_ok=True)
    storage = FileStorage(str(directory / 'Data.fs'),
                          blob_dir=str(directory / 'blobs'))
    db = ZODB.DB(storage)
    conn = db.open()
    root = conn.root()
    root['items'] = items = PersistentMapping()
    transaction.commit()
    for index in range(transactions):
        txn = transaction.get()
        txn.setUser(f'user{index % 7}')
        txn.note(f'change {index}')
        txn.setExtendedInfo('index', index)
        key = index % 150
        if key in items and index % 3 == 0:
            items[key]['value'] = index
        else:
            items[key] = PersistentMapping(value=index)
        if index % 50 == 0:
            blob = Blob()
            with blob.open('w') as f:
                f.write(os.urandom(3000 + index))
            items[key]['blob'] = blob
        if index % 97 == 96:
            del items[(index // 2) % 150]
        transaction.commit()
    # An undone change, and an undone creation (its records hold no data).
    items[1]['value'] = 'to be undone'
    transaction.commit()
    db.undo(db.undoLog(0, 1)[0]['id'])
    transaction.commit()
    root['created'] = PersistentMapping(made='then undone')
    transaction.commit()
    db.undo(db.undoLog(0, 1)[0]['id'])
    transaction.commit()
    # A deletion with IExternalGC.
    doomed = PersistentMapping()
    root['doomed'] = doomed
    transaction.commit()
    oid, serial = doomed._p_oid, doomed._p_serial
    del root['doomed']
    transaction.commit()
    conn.close()
    t = TransactionMetaData()
    storage.tpc_begin(t)
    storage.deleteObject(oid, serial, t)
    storage.tpc_vote(t)
    storage.tpc_finish(t)
    db.close()
    return directory


@pytest.fixture(scope='module')
def small_source(tmp_path_factory):
    return make_source(tmp_path_factory.mktemp('small'), 300)


@pytest.fixture(scope='module')
def large_source(tmp_path_factory):
    return make_source(tmp_path_factory.mktemp('large'), 2500)


def filestorage_section(directory, name):
    return (f'<filestorage {name}>\n  path {directory / "Data.fs"}\n'
            f'  blob-dir {directory / "blobs"}\n</filestorage>\n')


def relstorage_section(backend, database, keep_history, name, **options):
    text = backend.zconfig(database, keep_history, **options)
    return text.replace('<relstorage>', f'<relstorage {name}>', 1)


def write_config(path, source, destination):
    """``source`` and ``destination``: section texts (a relstorage one
    brings the %import)."""
    text = source + destination
    if '%import relstorage' in text:
        text = '%import relstorage\n' + text.replace(
            '%import relstorage\n', '')
    path.write_text(text)
    return path


def open_section(text, name):
    """Open one named storage section of a config text."""
    from relstorage.cli import load_named_storages
    path = f'/tmp/relstorage-test-{os.getpid()}-{name}.conf'
    with open(path, 'w') as f:
        f.write(text)
    try:
        return load_named_storages(path, (name,))[0].open()
    finally:
        os.remove(path)


def current_states(storage):
    """oid -> (tid, state, blob bytes or None) of every object current in
    ``storage`` (a FileStorage: its record_iternext fails on deleted
    objects, so the oids come from its transactions)."""
    from ZODB.blob import is_blob_record
    from ZODB.POSException import POSKeyError
    oids = {record.oid for txn in storage.iterator() for record in txn}
    states = {}
    for oid in sorted(oids):
        try:
            data, tid = storage.load(oid)
        except POSKeyError:
            continue
        blob = None
        if data and is_blob_record(data):
            with open(storage.loadBlob(oid, tid), 'rb') as f:
                blob = f.read()
        states[oid] = (tid, data, blob)
    return states


def _variant(request, backend):
    """The second driver of a database (psycopg, PyMySQL) runs only the
    first two of a test's modes: the SQL is the same."""
    if request.node.callspec.params['mode'] in request.function.extra and \
            backend.name not in ('sqlite', 'postgresql', 'mysql'):
        pytest.skip('covered with the default driver')


@pytest.mark.parametrize('mode', ['hp-blobs-in-db', 'hf-shared-blobs',
                                  'hp-shared-blobs', 'hf-blobs-in-db'])
def test_round_trip(backend, database, mode, large_source, tmp_path,
                    request):
    _variant(request, backend)
    keep_history = mode.startswith('hp')
    shared_blobs = mode.endswith('shared-blobs')
    dest = relstorage_section(
        backend, database, keep_history, 'destination',
        blob_dir=tmp_path / 'blobs',
        shared_blob_dir='true' if shared_blobs else 'false')
    forward = write_config(tmp_path / 'forward.conf',
                           filestorage_section(large_source, 'source'), dest)
    result = run('--verify', forward)
    assert result.returncode == 0, result.stderr
    assert 'the destination matches the source' in result.stderr
    if keep_history:
        assert 'verified every transaction and record' in result.stderr
    else:
        assert 'verified every current record' in result.stderr
    assert result.stdout == ''
    # Back into a new FileStorage.
    back = tmp_path / 'back'
    back.mkdir()
    backward = write_config(
        tmp_path / 'backward.conf',
        dest.replace('<relstorage destination>', '<relstorage source>'),
        filestorage_section(back, 'destination'))
    result = run('--verify', backward)
    assert result.returncode == 0, result.stderr
    original = FileStorage(str(large_source / 'Data.fs'),
                           blob_dir=str(large_source / 'blobs'),
                           read_only=True)
    copy = FileStorage(str(back / 'Data.fs'), blob_dir=str(back / 'blobs'),
                       read_only=True)
    try:
        if keep_history:
            differences = []
            outcome = verify(original, copy, differences.append)
            assert differences == []
            assert outcome.transactions == len(list(original.iterator()))
            assert outcome.blobs > 0
        else:
            assert current_states(copy) == current_states(original)
    finally:
        original.close()
        copy.close()


test_round_trip.extra = ('hp-shared-blobs', 'hf-blobs-in-db')


def _dest_last(text):
    storage = open_section(text, 'destination')
    try:
        return storage.lastTransaction()
    finally:
        storage.close()


@pytest.mark.parametrize('mode', ['hp-sigkill', 'hf-ctrl-c'])
def test_resumes_after_being_stopped(backend, database, mode, large_source,
                                     tmp_path):
    keep_history = mode.startswith('hp')
    how = mode[3:]
    dest = relstorage_section(backend, database, keep_history, 'destination',
                              blob_dir=tmp_path / 'blobs',
                              shared_blob_dir='false')
    path = write_config(tmp_path / 'c.conf',
                        filestorage_section(large_source, 'source'), dest)
    source = FileStorage(str(large_source / 'Data.fs'), read_only=True)
    source_last = source.lastTransaction()
    source.close()
    # zodbconvert's main with small restore batches (commits every 50
    # records), so that it is caught half-way with several batches in.
    proc = subprocess.Popen([sys.executable, '-c', SMALL_BATCHES, str(path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    # Wait until some transactions are in, then stop it half-way.
    deadline = time.monotonic() + TIMEOUT
    last = z64
    while last == z64 and proc.poll() is None:
        assert time.monotonic() < deadline
        time.sleep(0.05)
        try:
            last = _dest_last(dest)
        except Exception:
            pass        # the schema is not created yet
    proc.send_signal(signal.SIGKILL if how == 'sigkill' else signal.SIGINT)
    _, err = proc.communicate(timeout=TIMEOUT)
    if how == 'sigkill':
        assert proc.returncode == -signal.SIGKILL
    else:
        assert proc.returncode == 130, err
        assert 'run again with --incremental to go on' in err
    stopped_at = _dest_last(dest)
    assert z64 < stopped_at < source_last, 'the copy was not stopped half-way'
    # Without --incremental the partial copy is not touched.
    result = run(path)
    assert result.returncode == 1
    assert '--incremental' in result.stderr and '--clear' in result.stderr
    result = run('--incremental', '--verify', path)
    assert result.returncode == 0, result.stderr
    assert 'the destination holds transactions up to 0x%016x' % u64(
        stopped_at) in result.stderr
    assert _dest_last(dest) == source_last
    # Nothing more to copy the next time.
    result = run('--incremental', path)
    assert result.returncode == 0, result.stderr
    assert 'nothing to copy' in result.stderr


def test_dry_run_writes_nothing(backend, database, small_source, tmp_path):
    dest = relstorage_section(backend, database, True, 'destination',
                              blob_dir=tmp_path / 'blobs')
    path = write_config(tmp_path / 'c.conf',
                        filestorage_section(small_source, 'source'), dest)
    before = backend_tables(backend, database)
    result = run('--dry-run', path)
    assert result.returncode == 0, result.stderr
    assert 'nothing was written' in result.stdout + result.stderr
    assert backend_tables(backend, database) == before
    # On a destination with part of the source: what --incremental would
    # copy.
    source = FileStorage(str(small_source / 'Data.fs'), read_only=True)
    tids = [txn.tid for txn in source.iterator()]
    source.close()
    partial = tmp_path / 'partial'
    shutil.copytree(small_source, partial)
    truncate_after(partial / 'Data.fs', tids[99])
    assert run(write_config(tmp_path / 'p.conf',
                            filestorage_section(partial, 'source'),
                            dest)).returncode == 0
    tables = backend_tables(backend, database)
    result = run('--dry-run', '--incremental', '--verify', path)
    assert result.returncode == 0, result.stderr
    assert f'would copy {len(tids) - 100:,} transactions' in result.stdout
    assert 'would then verify' in result.stdout
    assert _dest_last(dest) == tids[99]
    assert backend_tables(backend, database) == tables
    # Without --incremental: what a real run would refuse.
    result = run('--dry-run', path)
    assert result.returncode == 1
    assert 'would refuse' in result.stdout and '--clear' in result.stdout


def backend_tables(backend, database):
    """What the destination database holds: its tables and their row
    counts (None before a storage ever opened it)."""
    from backends import query
    try:
        storage = backend.open(database, read_only=True)
    except Exception:
        return None
    try:
        counts = {}
        for table in ('transaction_log', 'object_state', 'current_object'):
            try:
                counts[table] = query(storage,
                                      f'SELECT COUNT(*) FROM {table}')
            except Exception:
                counts[table] = None
        return counts
    finally:
        storage.close()


def truncate_after(path, tid):
    """Cut the FileStorage at ``path`` after its transaction ``tid``."""
    storage = FileStorage(str(path), read_only=True)
    transactions = storage.iterator(start=tid)
    try:
        end = next(transactions)._tend
    finally:
        transactions.close()
        storage.close()
    # The transaction's trailing length (8 bytes) follows _tend.
    with open(path, 'r+b') as f:
        f.truncate(end + 8)
    for suffix in ('.index', '.lock', '.tmp'):
        if os.path.exists(str(path) + suffix):
            os.remove(str(path) + suffix)


def test_refuses_a_destination_that_is_not_a_copy(backend, database,
                                                   small_source, tmp_path):
    dest = relstorage_section(backend, database, True, 'destination',
                              blob_dir=tmp_path / 'blobs')
    # The destination gets a transaction of its own.
    storage = open_section(dest, 'destination')
    db = ZODB.DB(storage)
    with db.transaction() as conn:
        conn.root()['mine'] = 1
    own = storage.lastTransaction()
    db.close()
    path = write_config(tmp_path / 'c.conf',
                        filestorage_section(small_source, 'source'), dest)
    result = run('--incremental', path)
    assert result.returncode == 1
    assert ('the destination holds transaction 0x%016x' % u64(own)
            in result.stderr)
    assert 'which the source lacks' in result.stderr
    # --clear empties it, then copies.
    result = run('--clear', '--verify', path)
    assert result.returncode == 0, result.stderr
    assert 'emptying destination' in result.stderr


def test_refuses_when_the_last_common_transaction_differs(
        backend, database, small_source, tmp_path):
    dest = relstorage_section(backend, database, True, 'destination',
                              blob_dir=tmp_path / 'blobs')
    source = FileStorage(str(small_source / 'Data.fs'), read_only=True)
    tids = [txn.tid for txn in source.iterator()]
    source.close()
    partial = tmp_path / 'partial'
    shutil.copytree(small_source, partial)
    truncate_after(partial / 'Data.fs', tids[49])
    assert run(write_config(tmp_path / 'p.conf',
                            filestorage_section(partial, 'source'),
                            dest)).returncode == 0
    # A source whose transaction of that tid holds other data: the same
    # history up to tid 48, then a transaction of the same tid written
    # by someone else.
    other = tmp_path / 'other'
    shutil.copytree(small_source, other)
    truncate_after(other / 'Data.fs', tids[48])
    storage = FileStorage(str(other / 'Data.fs'),
                          blob_dir=str(other / 'blobs'))
    t = TransactionMetaData(user='someone else')
    storage.tpc_begin(t, tids[49])
    storage.store(p64(0), storage.load(p64(0))[1],
                  storage.load(p64(0))[0], '', t)
    storage.tpc_vote(t)
    storage.tpc_finish(t)
    storage.close()
    path = write_config(tmp_path / 'c.conf',
                        filestorage_section(other, 'source'), dest)
    result = run('--incremental', path)
    assert result.returncode == 1
    assert ('disagree on their last common transaction 0x%016x'
            % u64(tids[49])) in result.stderr
    assert 'the user differs' in result.stderr


def test_damaged_source_stops_before_the_damaged_transaction(
        backend, database, small_source, tmp_path):
    damaged = tmp_path / 'damaged'
    shutil.copytree(small_source, damaged)
    source = FileStorage(str(damaged / 'Data.fs'), read_only=True)
    txns = list(source.iterator())
    target = txns[120]
    tid, first_record = target.tid, target._pos
    before = txns[119].tid
    source.close()
    # The tloc field of the transaction's first data record (after oid,
    # tid and prev: 24 bytes) no longer points at its transaction.
    with open(damaged / 'Data.fs', 'r+b') as f:
        f.seek(first_record + 24)
        f.write(struct.pack('>Q', 4))
    dest = relstorage_section(backend, database, True, 'destination',
                              blob_dir=tmp_path / 'blobs')
    path = write_config(tmp_path / 'c.conf',
                        filestorage_section(damaged, 'source'), dest)
    result = run(path)
    assert result.returncode == 1, result.stderr
    assert f'transaction 0x{u64(tid):016x}' in result.stderr
    assert 'damaged' in result.stderr
    assert f'offset {first_record:,}' in result.stderr
    # Everything before it is in, nothing of it.
    assert _dest_last(dest) == before
    # Without its index, FileStorage finds the damage as it opens: bad
    # input, with the offset.
    os.remove(str(damaged / 'Data.fs') + '.index')
    result = run('--incremental', path)
    assert result.returncode == 2
    assert 'zodbconvert: error: cannot open source (filestorage)' in \
        result.stderr
    assert 'data record exceeds transaction record at' in result.stderr


@pytest.mark.sqlite
def test_missing_source_blob_names_oid_and_tid(small_source, tmp_path):
    broken = tmp_path / 'broken'
    shutil.copytree(small_source, broken)
    blobs = sorted(
        os.path.join(d, name) for d, _, names in os.walk(broken / 'blobs')
        for name in names if name.endswith('.blob'))
    os.chmod(os.path.dirname(blobs[3]), 0o755)
    os.remove(blobs[3])
    dest = (f'<relstorage destination>\n  blob-dir {tmp_path / "b"}\n'
            f'  <sqlite3>\n    data-dir {tmp_path / "db"}\n  </sqlite3>\n'
            '</relstorage>\n')
    path = write_config(tmp_path / 'c.conf', '%import relstorage\n'
                        + filestorage_section(broken, 'source'), dest)
    result = run(path)
    assert result.returncode == 1
    assert 'the source has no blob file for oid 0x' in result.stderr
    assert 'at tid 0x' in result.stderr


@pytest.mark.sqlite
def test_blobs_need_a_blob_dir_in_the_destination(small_source, tmp_path):
    dest = (f'<relstorage destination>\n  <sqlite3>\n    data-dir '
            f'{tmp_path / "db"}\n  </sqlite3>\n</relstorage>\n')
    path = write_config(tmp_path / 'c.conf', '%import relstorage\n'
                        + filestorage_section(small_source, 'source'), dest)
    result = run(path)
    assert result.returncode == 1
    assert 'the source has blobs' in result.stderr
    assert 'blob-dir' in result.stderr


@pytest.mark.sqlite
def test_bad_input_exits_2_with_one_line(small_source, tmp_path):
    fs = filestorage_section(small_source, 'source')
    good_dest = (f'<relstorage destination>\n  <sqlite3>\n    data-dir '
                 f'{tmp_path / "db"}\n  </sqlite3>\n</relstorage>\n')
    cases = {
        'missing.conf': None,
        'no-destination.conf': '%import relstorage\n' + fs,
        'unknown-type.conf': fs + '<nosuchstorage destination>\n'
                                  '</nosuchstorage>\n',
        'unreachable.conf': '%import relstorage\n' + fs + (
            '<relstorage destination>\n  <postgresql>\n    dsn host='
            '127.0.0.1 port=1 dbname=x connect_timeout=3\n  </postgresql>\n'
            '</relstorage>\n'),
        'bad-option.conf': '%import relstorage\n' + fs + (
            '<relstorage destination>\n  cache-local-mb many\n'
            f'  <sqlite3>\n    data-dir {tmp_path / "db"}\n  </sqlite3>\n'
            '</relstorage>\n'),
        'clear-filestorage.conf': fs + filestorage_section(
            tmp_path, 'destination'),
    }
    expected = {
        'missing.conf': 'cannot read',
        'no-destination.conf': 'destination',
        'unknown-type.conf': 'nosuchstorage',
        'unreachable.conf': 'cannot open destination (relstorage)',
        'bad-option.conf': 'cache-local-mb',
        'clear-filestorage.conf': '--clear empties only a relstorage',
    }
    for name, text in cases.items():
        path = tmp_path / name
        if text is not None:
            path.write_text(text)
        args = ['--clear', path] if name.startswith('clear') else [path]
        result = run(*args)
        assert result.returncode == 2, (name, result.stderr)
        lines = result.stderr.strip().splitlines()
        errors = [line for line in lines if 'zodbconvert: error:' in line]
        assert len(errors) == 1, (name, result.stderr)
        assert expected[name] in errors[0], (name, errors[0])
    # Contradicting options, as argparse reports them.
    path = write_config(tmp_path / 'ok.conf', '%import relstorage\n' + fs,
                        good_dest)
    result = run('--clear', '--incremental', path)
    assert result.returncode == 2
    assert 'not allowed with argument' in result.stderr
    assert not os.path.exists(tmp_path / 'db' / 'relstorage.sqlite3')


def test_any_pair_of_databases(small_source, tmp_path):
    """FileStorage -> SQLite -> PostgreSQL -> MariaDB -> FileStorage, each
    step verified, and the end equal to the start."""
    end = tmp_path / 'end'
    end.mkdir()
    steps = [lambda name: filestorage_section(small_source, name)]
    backends = []
    try:
        for kind in ('sqlite', 'postgresql', 'mysql'):
            backend = BACKENDS[kind]()
            backends.append(backend)
            database = backend.new_database()
            steps.append(
                lambda name, backend=backend, database=database,
                kind=kind: relstorage_section(
                    backend, database, True, name,
                    blob_dir=tmp_path / f'{kind}-blobs',
                    shared_blob_dir='false'))
        steps.append(lambda name: filestorage_section(end, name))
        for index in range(len(steps) - 1):
            path = write_config(tmp_path / f'step{index}.conf',
                                steps[index]('source'),
                                steps[index + 1]('destination'))
            result = run('--verify', path)
            assert result.returncode == 0, (index, result.stderr)
    finally:
        for backend in backends:
            backend.cleanup()
    start = FileStorage(str(small_source / 'Data.fs'),
                        blob_dir=str(small_source / 'blobs'), read_only=True)
    copy = FileStorage(str(end / 'Data.fs'), blob_dir=str(end / 'blobs'),
                       read_only=True)
    try:
        differences = []
        outcome = verify(start, copy, differences.append)
        assert differences == []
        assert outcome.blobs > 0
    finally:
        start.close()
        copy.close()


def test_verify_reports_each_difference(backend, database, keep_history,
                                        small_source, tmp_path):
    dest = relstorage_section(backend, database, keep_history, 'destination',
                              blob_dir=tmp_path / 'blobs',
                              shared_blob_dir='false')
    path = write_config(tmp_path / 'c.conf',
                        filestorage_section(small_source, 'source'), dest)
    assert run(path).returncode == 0
    # Remove a revision from the copy (history-preserving: an old one of
    # the items mapping; history-free: the only one of an item), and add
    # an object the source lacks.
    storage = open_section(dest, 'destination')
    db = ZODB.DB(storage)
    with db.transaction() as conn:
        items = conn.root()['items']
        victim = items._p_oid if keep_history else items[7]._p_oid
        conn.root()['extra'] = PersistentMapping()
    with db.transaction() as conn:
        extra = conn.root()['extra']._p_oid
    victim_tid = u64(storage.loadBefore(victim, storage.load(victim)[1])[1]
                     if keep_history else storage.load(victim)[1])
    cm = storage._adapter.connmanager
    raw = cm.connect()
    cursor = raw.cursor()
    cursor.execute(f'DELETE FROM object_state WHERE zoid = {u64(victim)} '
                   f'AND tid = {victim_tid}')
    raw.commit()
    cm.close(raw, cursor)
    db.close()
    result = run('--verify', path)
    assert result.returncode == 1, result.stderr
    lines = result.stdout.splitlines()
    victim_line = f'oid 0x{u64(victim):x} tid 0x{victim_tid:016x}'
    assert any(line.startswith(victim_line) and 'missing in the destination'
               in line for line in lines), lines
    if keep_history:
        assert any(line.endswith('is only in the destination')
                   and line.startswith('transaction 0x') for line in lines)
    else:
        assert f'oid 0x{u64(extra):x} is only in the destination' in lines
    assert 'differences between the source and the destination' in \
        result.stderr


@pytest.mark.sqlite
def test_progress_on_a_terminal(large_source, tmp_path):
    dest = (f'<relstorage destination>\n  blob-dir {tmp_path / "b"}\n'
            f'  <sqlite3>\n    data-dir {tmp_path / "db"}\n  </sqlite3>\n'
            '</relstorage>\n')
    path = write_config(tmp_path / 'c.conf', '%import relstorage\n'
                        + filestorage_section(large_source, 'source'), dest)
    status, text = run_on_terminal([ZODBCONVERT, str(path)], TIMEOUT)
    assert status == 0, text
    # The live line: transactions, records, bytes, position of total,
    # rate and time left.
    assert '\r\x1b[K  copying: ' in text
    assert ' transactions, ' in text and ' records, ' in text
    assert re.search(r'\d bytes, [\d.,]+ (bytes|KB|MB) of [\d.]+ MB, ',
                     text), text
    assert '/s, ' in text and 's left' in text
