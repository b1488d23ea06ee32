"""Blobs beyond ZODB's own blob tests (test_blob_conformance.py): the
configuration, both blob modes on every backend, pack removing blob data
(also after an interrupted pack), errors near their source, the cache's
bound with readers holding blobs open, several processes, and a 1 GiB blob
in bounded memory."""
import os
import shutil
import subprocess
import time

import pytest
import transaction
import ZODB
from ZODB.blob import Blob
from ZODB.POSException import ConflictError
from ZODB.POSException import POSKeyError
from ZODB.POSException import StorageError
from ZODB.POSException import Unsupported
from ZODB.serialize import referencesf
from ZODB.utils import p64
from ZODB.utils import u64

import blob_workers
from backends import query
from children import Worker
from relstorage.blobs import cache
from relstorage.errors import ConfigurationError

BLOB_MODES = {'shared': True, 'cached': False}


@pytest.fixture(params=sorted(BLOB_MODES))
def blob_mode(request):
    return request.param


@pytest.fixture
def blob_dir(tmp_path):
    return str(tmp_path / 'blobs')


@pytest.fixture
def open_blob_storage(open_storage, blob_dir, blob_mode):
    """Open storages on the test's database with blob-dir in the test's
    blob mode."""
    def open_(**options):
        options.setdefault('blob_dir', blob_dir)
        options.setdefault('shared_blob_dir', BLOB_MODES[blob_mode])
        return open_storage(**options)
    return open_


@pytest.fixture
def open_mode(backend, database, blob_dir):
    """Open storages on the test's database in the history mode and blob
    mode the test names (for tests about one combination)."""
    opened = []

    def open_(keep_history, shared, **options):
        options.setdefault('blob_dir', blob_dir)
        storage = backend.open(database, keep_history=keep_history,
                               shared_blob_dir=shared, **options)
        opened.append(storage)
        return storage
    yield open_
    for storage in opened:
        storage.close()


@pytest.fixture
def dbs():
    opened = []

    def db_(storage):
        db = ZODB.DB(storage)
        opened.append(db)
        return db
    yield db_
    transaction.abort()
    for db in opened:
        db.close()


def _commit_blob(db, key, data):
    conn = db.open()
    try:
        root = conn.root()
        if key in root:
            with root[key].open('w') as f:
                f.write(data)
        else:
            root[key] = Blob(data)
        transaction.commit()
        blob = root[key]
        blob._p_activate()      # committing turned it into a ghost
        return blob._p_oid, blob._p_serial
    finally:
        conn.close()


def _read_blob(db, key):
    conn = db.open()
    try:
        with conn.root()[key].open('r') as f:
            return f.read()
    finally:
        transaction.abort()
        conn.close()


def _blob_rows(storage):
    """``(object_blob rows, blob_chunk rows, orphaned blobs)``: orphans
    counted the way vacuumlo counts large objects, chunks that no row
    refers to."""
    mapped = query(storage, 'SELECT COUNT(*) FROM object_blob')[0][0]
    chunks = query(storage, 'SELECT COUNT(*) FROM blob_chunk')[0][0]
    orphans = query(storage, """
        SELECT COUNT(DISTINCT c.blob_id) FROM blob_chunk c
        LEFT JOIN object_blob b ON b.blob_id = c.blob_id
        WHERE b.blob_id IS NULL""")[0][0]
    return mapped, chunks, orphans


def _blob_files(blob_dir):
    found = []
    for dirpath, dirnames, filenames in os.walk(blob_dir):
        if 'tmp' in dirnames and dirpath == blob_dir:
            dirnames.remove('tmp')
        found += [os.path.join(dirpath, f) for f in filenames
                  if f.endswith('.blob')]
    return sorted(found)


# -- configuration and errors near their source -------------------------

@pytest.mark.sqlite
def test_storing_a_blob_without_blob_dir_names_the_option(tmp_path):
    from relstorage.adapters.sqlite import SQLiteAdapter
    from relstorage.storage import RelStorage
    storage = RelStorage(SQLiteAdapter(data_dir=str(tmp_path / 'db')))
    db = ZODB.DB(storage)
    try:
        conn = db.open()
        conn.root()['blob'] = Blob(b'data')
        with pytest.raises(Unsupported, match='blob-dir') as info:
            transaction.commit()
        # Raised by storeBlob itself, for the blob's oid.
        assert 'storeBlob' in str(info.value)
        transaction.abort()
        with pytest.raises(Unsupported, match='blob-dir'):
            storage.temporaryDirectory()
        with pytest.raises(Unsupported, match='blob-dir'):
            storage.loadBlob(p64(1), p64(1))
    finally:
        transaction.abort()
        db.close()


@pytest.mark.sqlite
def test_blob_options_in_zope_conf(tmp_path):
    import ZODB.config
    text = f"""
        %import relstorage
        <zodb>
          <relstorage>
            blob-dir {tmp_path / 'cache'}
            shared-blob-dir false
            blob-cache-size 512MB
            blob-cache-size-check 20
            blob-cache-size-check-external true
            blob-chunk-size 256kb
            <sqlite3>
              data-dir {tmp_path / 'db'}
            </sqlite3>
          </relstorage>
        </zodb>"""
    db = ZODB.config.databaseFromString(text)
    try:
        options = db.storage._options
        assert options.blob_dir == str(tmp_path / 'cache')
        assert options.shared_blob_dir is False
        assert options.blob_cache_size == 512 << 20
        assert options.blob_cache_size_check == 20
        assert options.blob_cache_size_check_external is True
        assert options.blob_chunk_size == 256 << 10
        conn = db.open()
        conn.root()['b'] = Blob(b'x' * 1000)
        transaction.commit()
        conn.close()
    finally:
        db.close()
    bad = text.replace('blob-chunk-size 256kb', 'blob-chunk-size lots')
    with pytest.raises(Exception, match='blob-chunk-size'):
        ZODB.config.databaseFromString(bad)


def test_chunk_size_checked_against_the_server(backend, database,
                                               blob_dir):
    # A chunk must travel in one statement; where the server limits that
    # (MySQL's max_allowed_packet) a chunk too large fails at start-up.
    storage = backend.open(database, blob_dir=blob_dir,
                           shared_blob_dir=False)
    try:
        packet = getattr(storage._adapter.connmanager,
                         'max_allowed_packet', None)
    finally:
        storage.close()
    if not packet:
        storage = backend.open(database, blob_dir=blob_dir,
                               shared_blob_dir=False,
                               blob_chunk_size=512 << 20)
        storage.close()
        return
    with pytest.raises(ConfigurationError,
                       match='blob-chunk-size.*max_allowed_packet'):
        backend.open(database, blob_dir=blob_dir, shared_blob_dir=False,
                     blob_chunk_size=packet)


def test_vanished_shared_blob_file_names_oid_and_tid(open_storage, dbs,
                                                     blob_dir):
    storage = open_storage(blob_dir=blob_dir, shared_blob_dir=True)
    db = dbs(storage)
    oid, tid = _commit_blob(db, 'b', b'data')
    os.remove(storage.fshelper.getBlobFilename(oid, tid))
    with pytest.raises(POSKeyError) as info:
        storage.loadBlob(oid, tid)
    message = str(info.value)
    assert f'0x{u64(oid):x}' in message and f'0x{u64(tid):x}' in message
    with pytest.raises(POSKeyError):
        _read_blob(db, 'b')


# -- both modes on every backend ----------------------------------------

def test_blobs_round_trip_through_another_client(open_blob_storage, dbs,
                                                 blob_mode, tmp_path):
    db = dbs(open_blob_storage())
    sizes = [0, 1, 4095, 4096, 4097, 300 * 1024]
    for size in sizes:
        _commit_blob(db, size, blob_workers.content('r', size, size))
    for size in sizes:
        assert _read_blob(db, size) == blob_workers.content('r', size, size)
    # A second client; in the cached mode with an empty cache of its own,
    # so that every blob comes from the database.
    other_dir = str(tmp_path / 'other')
    other = dbs(open_blob_storage(blob_dir=other_dir)
                if blob_mode == 'cached' else open_blob_storage())
    for size in sizes:
        assert _read_blob(other, size) == blob_workers.content('r', size,
                                                                size)
    if blob_mode == 'cached':
        assert len(_blob_files(other_dir)) == len(sizes)


def test_cached_blobs_travel_in_chunks(open_storage, dbs, blob_dir):
    storage = open_storage(blob_dir=blob_dir, shared_blob_dir=False,
                           blob_chunk_size=4096)
    db = dbs(storage)
    data = blob_workers.content('c', 0, 4096 * 5 + 7)
    _commit_blob(db, 'b', data)
    assert _blob_rows(storage) == (1, 6, 0)
    assert _read_blob(db, 'b') == data


def test_blobs_of_many_chunks_come_back_whole(open_storage, dbs, blob_dir,
                                             tmp_path):
    # Enough chunks for the readers that take turns (MySQL) to be used.
    storage = open_storage(blob_dir=blob_dir, shared_blob_dir=False,
                           blob_chunk_size=4096)
    db = dbs(storage)
    sizes = [4096 * 8, 4096 * 31 + 1, 4096 * 100 - 1]
    for size in sizes:
        _commit_blob(db, size, blob_workers.content('m', size, size))
    other = dbs(open_storage(blob_dir=str(tmp_path / 'other'),
                             shared_blob_dir=False, blob_chunk_size=4096))
    for size in sizes:
        assert _read_blob(other, size) == blob_workers.content('m', size,
                                                                size)


def test_a_snapshot_reads_the_blob_it_sees_after_another_client_replaced_it(
        open_storage, dbs, blob_dir, tmp_path):
    writer = dbs(open_storage(blob_dir=blob_dir, shared_blob_dir=False,
                              blob_chunk_size=4096))
    old = blob_workers.content('o', 1, 4096 * 20)
    _commit_blob(writer, 'b', old)
    reader = dbs(open_storage(blob_dir=str(tmp_path / 'reader'),
                              shared_blob_dir=False, blob_chunk_size=4096))
    # A transaction of its own: the writer's commit must not end it.
    manager = transaction.TransactionManager()
    conn = reader.open(manager)
    try:
        blob = conn.root()['b']
        blob._p_activate()              # read in the reader's snapshot
        # History-free: the replacing commit removes the old chunks.
        _commit_blob(writer, 'b', blob_workers.content('n', 2, 4096 * 20))
        with blob.open('r') as f:
            assert f.read() == old
    finally:
        manager.abort()
        conn.close()


def test_abort_leaves_nothing_behind(open_blob_storage, dbs, blob_dir):
    storage = open_blob_storage()
    db = dbs(storage)
    _commit_blob(db, 'b', b'first')
    # Two connections change the blob; the second to commit conflicts,
    # after its blob has been staged (and, cached, uploaded) at vote.
    tm1, tm2 = transaction.TransactionManager(), \
        transaction.TransactionManager()
    c1, c2 = db.open(transaction_manager=tm1), \
        db.open(transaction_manager=tm2)
    with c1.root()['b'].open('w') as f:
        f.write(b'one')
    with c2.root()['b'].open('w') as f:
        f.write(b'two')
    tm1.commit()
    with pytest.raises(ConflictError):
        tm2.commit()
    tm2.abort()
    c1.close()
    c2.close()
    assert os.listdir(storage.temporaryDirectory()) == []
    assert _read_blob(db, 'b') == b'one'
    if not storage._blobs.in_database:
        return
    mapped, chunks, orphans = _blob_rows(storage)
    assert orphans == 0
    assert mapped == (2 if storage._options.keep_history else 1)


def test_history_free_commit_removes_the_replaced_blob(open_mode, dbs):
    storage = open_mode(keep_history=False, shared=False)
    db = dbs(storage)
    for round_ in range(3):
        _commit_blob(db, 'b', b'round %d' % round_)
    assert _blob_rows(storage) == (1, 1, 0)
    assert _read_blob(db, 'b') == b'round 2'


def test_undo_gives_back_the_older_blob(open_mode, dbs, tmp_path,
                                        blob_mode):
    shared = BLOB_MODES[blob_mode]
    storage = open_mode(keep_history=True, shared=shared)
    db = dbs(storage)
    _commit_blob(db, 'b', b'old')
    _commit_blob(db, 'b', b'new')
    db.undo(db.undoLog(0, 1)[0]['id'])
    transaction.commit()
    assert _read_blob(db, 'b') == b'old'
    # Another client with an empty cache reads the same from the database.
    other_dir = None if shared else str(tmp_path / 'other')
    other = dbs(open_mode(keep_history=True, shared=shared,
                          **({'blob_dir': other_dir} if other_dir else {})))
    assert _read_blob(other, 'b') == b'old'


# -- pack ----------------------------------------------------------------

def _pack_now(storage):
    import time
    storage.pack(time.time() + 1, referencesf)


def test_pack_removes_blob_data(open_blob_storage, dbs, blob_dir,
                                keep_history):
    storage = open_blob_storage()
    db = dbs(storage)
    for round_ in range(3):
        _commit_blob(db, 'kept', b'kept %d' % round_)
        _commit_blob(db, 'dropped', b'dropped %d' % round_)
    _pack_now(storage)
    # Only the current revision of each blob is left.
    assert len(_blob_files(blob_dir)) == 2
    if storage._blobs.in_database:
        assert _blob_rows(storage) == (2, 2, 0)
    conn = db.open()
    del conn.root()['dropped']
    transaction.commit()
    conn.close()
    _pack_now(storage)
    assert len(_blob_files(blob_dir)) == 1
    if storage._blobs.in_database:
        assert _blob_rows(storage) == (1, 1, 0)
    assert _read_blob(db, 'kept') == b'kept 2'


def test_interrupted_pack_leaves_no_orphans_once_run_again(
        open_storage, dbs, blob_dir, monkeypatch, backend):
    from relstorage.pack.session import _Session
    storage = open_storage(blob_dir=blob_dir, shared_blob_dir=False)
    db = dbs(storage)
    for index in range(5):
        _commit_blob(db, index, b'blob %d' % index)
    conn = db.open()
    for index in range(5):
        del conn.root()[index]
    transaction.commit()
    conn.close()

    def killed(*args):
        raise KeyboardInterrupt('the pack was stopped here')

    # Stopped after the revisions went, before their chunks did.
    monkeypatch.setattr(_Session, 'remove_blob_chunks',
                        killed)
    with pytest.raises(KeyboardInterrupt):
        _pack_now(storage)
    mapped, chunks, orphans = _blob_rows(storage)
    assert (mapped, orphans) == (0, 5)
    monkeypatch.undo()
    _pack_now(storage)
    assert _blob_rows(storage) == (0, 0, 0)
    if backend.marker == 'postgresql':
        # vacuumlo's check: no large object exists at all.
        assert query(storage, 'SELECT COUNT(*) FROM '
                               'pg_largeobject_metadata') == [(0,)]


def test_external_gc_removes_the_blob(open_blob_storage, dbs, blob_dir):
    from ZODB.Connection import TransactionMetaData
    storage = open_blob_storage(pack_gc=False)
    db = dbs(storage)
    oid, tid = _commit_blob(db, 'b', b'data')
    conn = db.open()
    del conn.root()['b']
    transaction.commit()
    conn.close()
    txn = TransactionMetaData()
    storage.tpc_begin(txn)
    storage.deleteObject(oid, tid, txn)
    storage.tpc_vote(txn)
    storage.tpc_finish(txn)
    _pack_now(storage)
    assert _blob_files(blob_dir) == []
    with pytest.raises(POSKeyError):
        storage.loadBlob(oid, tid)
    if storage._blobs.in_database:
        assert _blob_rows(storage) == (0, 0, 0)


# -- the cache ------------------------------------------------------------

@pytest.fixture
def spawn(tmp_path):
    started = []

    def spawn_(label, *args):
        worker = Worker(label, args, str(tmp_path), script='blob_workers.py')
        started.append(worker)
        return worker
    yield spawn_
    for worker in started:
        worker.close()


def _config_file(backend, database, keep_history, tmp_path, name,
                 **options):
    path = tmp_path / f'{name}.conf'
    path.write_text(backend.zconfig(database, keep_history=keep_history,
                                    **options), encoding='utf-8')
    return str(path)


def _make_blob_tree(db):
    from BTrees.OOBTree import OOBTree
    conn = db.open()
    conn.root()['blobs'] = OOBTree()
    transaction.commit()
    conn.close()


def test_cache_is_trimmed_while_readers_hold_blobs_open(
        backend, database, keep_history, open_storage, dbs, tmp_path, spawn):
    cache_dir = str(tmp_path / 'cache')
    options = dict(blob_dir=cache_dir, shared_blob_dir=False)
    writer = dbs(open_storage(**options))
    _make_blob_tree(writer)
    size = 40 * 1024
    conn = writer.open()
    for index in range(20):
        conn.root()['blobs'][('t', index)] = Blob(
            blob_workers.content('t', index, size))
        transaction.commit()
    conn.close()
    # Another process on this machine shares the cache and holds blob 0
    # open; this process holds blob 1.
    config = _config_file(backend, database, keep_history, tmp_path, 'hold',
                          blob_dir=cache_dir, shared_blob_dir='false')
    holder = spawn('holder', 'hold', config, 't', 0)
    held_there = holder.expect('held')['path']
    conn = writer.open()
    mine = conn.root()['blobs'][('t', 1)].open('r')
    # The others are read (touched) after the held ones: the held ones are
    # the least recently used.
    for index in range(2, 20):
        with conn.root()['blobs'][('t', index)].open('r') as f:
            f.read()
    target = 5 * size
    # Files used in the last cache.TOUCH_EVERY seconds are kept, however
    # small keep_recent is.
    time.sleep(cache.TOUCH_EVERY + 0.1)
    before, after = cache.trim(cache_dir, target, keep_recent=0)
    assert before >= 20 * size
    assert after <= target
    assert os.path.exists(held_there) and os.path.exists(mine.name)
    assert mine.read() == blob_workers.content('t', 1, size)
    mine.close()
    holder.send('release')
    assert holder.expect('read')['ok']
    holder.wait()
    # Released, they are trimmed like the others, least recently used
    # first (uses are recorded at most once a second: cache.TOUCH_EVERY).
    time.sleep(cache.TOUCH_EVERY + 0.1)
    newest = []
    for index in (18, 19):
        with conn.root()['blobs'][('t', index)].open('r') as f:
            f.read()
            newest.append(f.name)
    cache.trim(cache_dir, 2 * size, keep_recent=0)
    assert _blob_files(cache_dir) == sorted(newest)
    # Whatever was trimmed comes back from the database.
    for index in range(20):
        with conn.root()['blobs'][('t', index)].open('r') as f:
            assert f.read() == blob_workers.content('t', index, size)
    transaction.abort()
    conn.close()


def _age(cache_dir, seconds):
    """Make every cached blob's last use ``seconds`` older."""
    for path in _blob_files(cache_dir):
        st = os.stat(path)
        os.utime(path, (st.st_atime - seconds, st.st_mtime - seconds))


def test_cache_trims_itself_to_blob_cache_size(open_storage, dbs, tmp_path):
    cache_dir = str(tmp_path / 'cache')
    size = 50 * 1024
    storage = open_storage(blob_dir=cache_dir, shared_blob_dir=False,
                           blob_cache_size=4 * size, blob_cache_size_check=25)
    db = dbs(storage)
    for index in range(12):
        _commit_blob(db, index, blob_workers.content('s', index, size))
        storage._blobs.size.wait(30)
        # What was used in the last minute is never trimmed: as if each
        # commit came a minute after the one before.
        _age(cache_dir, cache.RECENT_USE + 1)
    storage._blobs.size.start_trim()
    storage._blobs.size.wait(30)
    total = sum(os.path.getsize(f) for f in _blob_files(cache_dir))
    assert total <= 4 * size
    for index in range(12):
        assert _read_blob(db, index) == blob_workers.content('s', index,
                                                              size)


def test_a_blob_name_handed_out_is_not_trimmed_while_recent(
        open_storage, dbs, tmp_path):
    """loadBlob (Blob.committed()) gives a name that the application opens
    later: a trim, whatever the cache's size, leaves it for
    cache.RECENT_USE seconds; then it goes, and the next loadBlob brings
    it back."""
    cache_dir = str(tmp_path / 'cache')
    storage = open_storage(blob_dir=cache_dir, shared_blob_dir=False)
    db = dbs(storage)
    oid, tid = _commit_blob(db, 'b', b'handed out')
    shutil.rmtree(cache_dir + '/0x00', ignore_errors=True)
    reader = storage.new_instance()
    name = reader.loadBlob(oid, tid)            # downloaded now
    assert cache.trim(cache_dir, 0) == (10, 10)
    _age(cache_dir, cache.RECENT_USE - 5)
    assert cache.trim(cache_dir, 0) == (10, 10)
    assert reader.loadBlob(oid, tid) == name    # used again: kept longer
    _age(cache_dir, cache.RECENT_USE - 5)
    assert cache.trim(cache_dir, 0) == (10, 10)
    # (Not read here: on a relatime mount the kernel may count a read as
    # a use too.)
    _age(cache_dir, 10)
    assert cache.trim(cache_dir, 0) == (10, 0)
    assert not os.path.exists(name)
    assert not os.path.exists(cache_dir + '/0x00')   # emptied: removed
    assert reader.loadBlob(oid, tid) == name
    with open(name, 'rb') as f:
        assert f.read() == b'handed out'
    reader.release()


@pytest.mark.sqlite
def test_a_use_and_a_trim_exclude_each_other(tmp_path):
    """A use recorded while a trim decides on the file waits for it: the
    trim removed the file (the use says it is not cached) or kept it."""
    import fcntl
    import threading
    path = tmp_path / 'x.blob'
    path.write_bytes(b'x')
    os.utime(path, (1, 1))                  # long unused
    trim_lock = os.open(path, os.O_RDONLY)  # the trim deciding on it
    fcntl.flock(trim_lock, fcntl.LOCK_EX)
    seen = []
    user = threading.Thread(target=lambda: seen.append(cache.touch(path)))
    user.start()
    user.join(0.5)
    assert user.is_alive() and seen == []   # waits for the trim
    os.remove(path)
    os.close(trim_lock)
    user.join(10)
    assert seen == [False]                  # removed: download it again
    path.write_bytes(b'y')
    os.utime(path, (1, 1))
    assert cache.touch(path) is True
    assert os.stat(path).st_atime > time.time() - 60
    assert cache.trim(str(tmp_path), 0) == (1, 1)   # used just now


def _open_directory_at_once(directory, barrier, failures):
    from relstorage.blobs.base import prepare_directory
    from ZODB.blob import FilesystemHelper
    try:
        barrier.wait(10)
        layout = prepare_directory(directory)
        FilesystemHelper(directory, layout).create()
        if layout != 'bushy':
            failures.put(f'layout {layout!r}')
    except Exception as e:
        failures.put(repr(e))


def test_processes_opening_a_new_blob_dir_at_once(tmp_path):
    """Several processes creating one new blob directory at the same
    moment (instances of a site starting together) all open it, with
    ZODB's default layout; ZODB's own helper fails some with "File
    exists" or reads the layout marker half-written."""
    import multiprocessing
    context = multiprocessing.get_context('fork')
    processes = 6
    failures = context.Queue()
    for round_ in range(25):
        directory = str(tmp_path / f'blobs{round_}')
        barrier = context.Barrier(processes)
        children = [context.Process(target=_open_directory_at_once,
                                    args=(directory, barrier, failures))
                    for _ in range(processes)]
        for child in children:
            child.start()
        for child in children:
            child.join(30)
            assert child.exitcode == 0
        assert failures.empty(), failures.get()
        assert sorted(os.listdir(directory)) == ['.layout', 'tmp']


def test_an_old_blob_dir_keeps_its_layout(tmp_path):
    """A directory with files and no marker is ZODB's old "lawn" layout,
    one with a marker keeps it."""
    from relstorage.blobs.base import prepare_directory
    lawn = tmp_path / 'lawn'
    (lawn / '0x01').mkdir(parents=True)
    assert prepare_directory(str(lawn)) == 'lawn'
    assert (lawn / '.layout').read_text() == 'lawn'
    assert prepare_directory(str(lawn)) == 'lawn'
    marked = tmp_path / 'marked'
    marked.mkdir()
    (marked / '.layout').write_text('bushy')
    (marked / '0x00').mkdir()
    assert prepare_directory(str(marked)) == 'bushy'


def test_placing_a_blob_makes_its_directory_again(open_storage, tmp_path,
                                                  monkeypatch):
    """A trim may remove an object's emptied directory while a blob is
    being put there: before the temporary file is created, or before the
    error of its creation is seen and after another thread made the
    directory again.  Either way the blob is placed."""
    cache_dir = str(tmp_path / 'cache')
    storage = open_storage(blob_dir=cache_dir, shared_blob_dir=False)
    blobs = storage._blobs
    calls = []

    def fill(temporary):
        directory = os.path.dirname(temporary)
        calls.append(temporary)
        if len(calls) == 1:
            # Trimmed after make_oid_dir, parents included.
            shutil.rmtree(os.path.join(cache_dir, '0x00'))
        elif len(calls) == 2:
            os.rmdir(directory)
            try:
                open(temporary, 'xb')
            except FileNotFoundError:
                os.makedirs(directory)      # another thread's download
                raise
        with open(temporary, 'xb') as f:
            return f.write(b'placed')
    assert blobs.place(7, 9, fill) == 6
    assert len(calls) == 3
    with open(blobs.path(7, 9), 'rb') as f:
        assert f.read() == b'placed'
    assert [n for n in os.listdir(os.path.dirname(blobs.path(7, 9)))] == [
        os.path.basename(blobs.path(7, 9))]
    # Any other missing file is the caller's error, at once.

    def missing_source(temporary):
        calls.append(temporary)
        with open(tmp_path / 'no-such-file', 'rb'):
            pass
    calls.clear()
    with pytest.raises(FileNotFoundError, match='no-such-file'):
        blobs.place(7, 10, missing_source)
    assert len(calls) == 1
    # A directory that keeps disappearing is a StorageError in the end.

    def always_trimmed(temporary):
        os.rmdir(os.path.dirname(temporary))
        with open(temporary, 'xb'):
            pass
    with pytest.raises(StorageError, match='removed'):
        blobs.place(8, 11, always_trimmed)


STRESS = os.path.join(os.path.dirname(__file__), '..', 'benchmarks',
                      'blob_cache_stress.py')


def test_readers_in_threads_and_processes_never_fail_while_trimmed(
        backend, database, keep_history, tmp_path):
    """The small version of benchmarks/blob_cache_stress.py (run it for
    minutes there): 256 blobs of 16 KB through a 200 KB cache, six reading
    threads in each of two processes, blobs opened through ZODB and by the
    name loadBlob gave, trims all the time.  Not one read fails."""
    if backend.name.endswith(('-psycopg', '-pymysql')):
        pytest.skip('the cache is the same whichever driver reads')
    config = _config_file(backend, database, keep_history, tmp_path,
                          'stress', blob_dir=str(tmp_path / 'cache'),
                          shared_blob_dir='false', blob_cache_size='200kb')
    result = subprocess.run(
        [os.sys.executable, STRESS, '--config', config, '--seconds', '8'],
        capture_output=True, text=True, timeout=300)
    assert result.returncode in (0, 1), result.stderr
    import json
    report = json.loads(result.stdout)
    assert report['errors'] == 0, ''.join(report['tracebacks'])
    assert report['loads']['open'] > 1000, report['loads']
    assert report['loads']['committed'] > 1000, report['loads']
    # Files were trimmed under the readers (well beyond the cache's size).
    assert report["trimmed_bytes"] > 5 * 200 * 1024, report
    assert result.returncode == 0


@pytest.mark.sqlite
def test_external_trim_command(tmp_path):
    directory = tmp_path / 'cache'
    (directory / '0x01').mkdir(parents=True)
    for n in range(4):
        (directory / '0x01' / f'0x{n:016x}.blob').write_bytes(b'x' * 1000)

    def run(*args):
        return subprocess.run(
            [os.sys.executable, '-m', 'relstorage.blobs.cache',
             str(directory), *args], capture_output=True, text=True,
            timeout=60)
    # Used just now: kept, by default for cache.RECENT_USE seconds.
    status = run('2000')
    assert status.returncode == 0, status.stderr
    assert len(_blob_files(str(directory))) == 4
    _age(str(directory), 30)
    assert len(_blob_files(str(directory))) == 4
    status = run('2000', '20')
    assert status.returncode == 0, status.stderr
    assert len(_blob_files(str(directory))) == 2
    for bad in ((), ('2000', 'soon'), ('2000', '-1'), ('2k',)):
        status = run(*bad)
        assert status.returncode == 2 and 'usage' in status.stderr, bad


@pytest.fixture
def small_disk(tmp_path):
    """A directory on a 1 MiB file system of its own (tmpfs)."""
    path = tmp_path / 'small'
    path.mkdir()
    result = subprocess.run(['mount', '-t', 'tmpfs', '-o', 'size=1m',
                             'tmpfs', str(path)], capture_output=True)
    if result.returncode != 0:
        pytest.skip('mounting a small tmpfs needs root: '
                    + result.stderr.decode(errors='replace').strip())
    yield str(path)
    subprocess.run(['umount', '-l', str(path)], check=False)


def test_full_cache_disk_is_a_clear_error_and_loses_nothing(
        open_storage, dbs, tmp_path, small_disk):
    writer = dbs(open_storage(blob_dir=str(tmp_path / 'cache'),
                              shared_blob_dir=False))
    data = blob_workers.content('full', 0, 3 << 20)
    _commit_blob(writer, 'b', data)
    reader = dbs(open_storage(blob_dir=small_disk, shared_blob_dir=False))
    with pytest.raises(StorageError, match='blob-dir .* is full') as info:
        _read_blob(reader, 'b')
    assert 'safe in the database' in str(info.value)
    # The partial download is gone, and the blob is intact.
    assert _blob_files(small_disk) == []
    assert sum(len(files) for _, _, files in os.walk(small_disk)) <= 1
    assert _read_blob(writer, 'b') == data


# -- processes ------------------------------------------------------------

def test_processes_write_and_read_blobs_concurrently(
        backend, database, keep_history, open_storage, dbs, tmp_path, spawn,
        blob_mode):
    shared = BLOB_MODES[blob_mode]
    db = dbs(open_storage(blob_dir=str(tmp_path / 'main'),
                          shared_blob_dir=shared))
    _make_blob_tree(db)
    workers = []
    for name in ('a', 'b', 'c'):
        # Shared: one directory for all; cached: a cache per process.
        blob_dir = str(tmp_path / ('main' if shared else name))
        config = _config_file(backend, database, keep_history, tmp_path,
                              name, blob_dir=blob_dir,
                              shared_blob_dir=str(shared).lower())
        workers.append(spawn(name, 'write', config, name, 6, 20_000))
    for worker in workers:
        worker.expect('ready')
    for worker in workers:
        worker.send('go')
    for worker in workers:
        result = worker.expect('result', timeout=120)
        assert result['written'] == 6
        assert result['wrong'] == []
        assert result['checked'] >= 21     # its own at least: 1+2+...+6
        worker.wait()
    conn = db.open()
    blobs = conn.root()['blobs']
    assert len(blobs) == 18
    for (name, index), blob in blobs.items():
        with blob.open('r') as f:
            assert f.read() == blob_workers.content(name, index, 20_000)
    transaction.abort()
    conn.close()


def test_a_gigabyte_blob_in_bounded_memory(backend, database, tmp_path,
                                           spawn):
    config = _config_file(backend, database, False, tmp_path, 'big',
                          blob_dir=str(tmp_path / 'cache'),
                          shared_blob_dir='false')
    worker = spawn('big', 'big', config, 1024, str(tmp_path / 'other'))
    stored = worker.expect('stored', timeout=600)
    result = worker.expect('result', timeout=600)
    worker.wait()
    assert result['size'] == 1 << 30
    assert result['read'] == result['written']
    assert stored['maxrss_mb'] < 200, stored
    assert result['maxrss_mb'] < 200, result
