"""The JSON mirror (json-state): each commit writes the JSON of what it
stores beside the pickles, in the same database transaction, on every
backend and history mode; loads never read it."""
import datetime
import json
import os
import pickle
import time

import pytest
import transaction
import ZODB
from BTrees.Length import Length
from BTrees.OOBTree import OOBTree
from persistent.mapping import PersistentMapping
from ZODB.blob import Blob
from ZODB.serialize import referencesf
from ZODB.utils import u64

from backends import query
from backends import write
from relstorage.mirror import fill as fill_module
from relstorage.mirror.render import render
from relstorage.progress import Progress
from relstorage.storage import commit as commit_module


@pytest.fixture(autouse=True)
def _has_mirror(backend):
    if not backend.capabilities().json_mirror:
        pytest.skip('json-state is not offered on this database')


def _rows(storage):
    """``{zoid: (tid, module, name, state as Python)}`` of object_json."""
    found = {}
    for zoid, tid, module, name, state in query(
            storage, 'SELECT zoid, tid, class_module, class_name, state '
                     'FROM object_json'):
        if isinstance(state, (str, bytes)):
            state = json.loads(state)
        found[zoid] = (tid, module, name, state)
    return found


def _expected(storage):
    """What the mirror should hold: every current object's state rendered
    (objects without a state have no row)."""
    expected = {}
    for zoid, tid, state in _current(storage):
        if state is None:
            continue
        found = render(bytes(state))
        expected[zoid] = (tid, found.module, found.name,
                          None if found.json is None
                          else json.loads(found.json))
    return expected


def _current(storage):
    table = ('current_object c JOIN object_state o ON o.zoid = c.zoid '
             'AND o.tid = c.tid' if storage._options.keep_history
             else 'object_state o')
    return query(storage, f'SELECT o.zoid, o.tid, o.state FROM {table}')


def test_every_commit_writes_the_json_of_what_it_stores(open_storage):
    storage = open_storage(json_state=True)
    db = ZODB.DB(storage)
    conn = db.open()
    root = conn.root()
    root['doc'] = PersistentMapping({
        'title': 'Front page', 'when': datetime.date(2026, 11, 28),
        'tags': ('a', 'b')})
    root['count'] = Length(3)
    transaction.commit()
    rows = _rows(storage)
    assert rows == _expected(storage)
    doc_oid = u64(root['doc']._p_oid)
    tid, module, name, state = rows[doc_oid]
    assert (module, name) == ('persistent.mapping', 'PersistentMapping')
    assert state == {'data': {'title': 'Front page',
                              'when': {'!date': '2026-11-28'},
                              'tags': {'!t': ['a', 'b']}}}
    assert tid == u64(root['doc']._p_serial)
    # A change replaces the row, with the new revision's tid.
    root['doc']['title'] = 'Home'
    transaction.commit()
    rows = _rows(storage)
    assert rows[doc_oid][0] == u64(root['doc']._p_serial) != tid
    assert rows[doc_oid][3]['data']['title'] == 'Home'
    assert rows == _expected(storage)
    conn.close()
    db.close()


def test_without_json_state_nothing_is_written(open_storage):
    storage = open_storage()
    db = ZODB.DB(storage)
    conn = db.open()
    conn.root()['x'] = PersistentMapping()
    transaction.commit()
    assert _rows(storage) == {}
    conn.close()
    db.close()


def test_the_paths_of_a_commit_all_write_it(open_storage, monkeypatch,
                                            tmp_path):
    """A commit finished in one call with its rows, one whose rows were
    staged (spilled past SPILL_BYTES), one with a blob (the step-by-step
    finish), and one with a blob and staged rows."""
    storage = open_storage(json_state=True, blob_dir=str(tmp_path / 'b'),
                           shared_blob_dir=False)
    db = ZODB.DB(storage)
    conn = db.open()
    root = conn.root()
    root['small'] = PersistentMapping({'n': 1})
    transaction.commit()
    monkeypatch.setattr(commit_module, 'SPILL_BYTES', 100)
    root['big'] = PersistentMapping(
        {i: PersistentMapping({'body': 'x' * 200}) for i in range(20)})
    transaction.commit()
    monkeypatch.undo()
    root['file'] = Blob(b'attachment')
    transaction.commit()
    # The step-by-step finish with staged rows.
    monkeypatch.setattr(commit_module, 'SPILL_BYTES', 1)
    root['second file'] = Blob(b'more')
    root['small']['n'] = 2
    transaction.commit()
    rows = _rows(storage)
    assert rows == _expected(storage)
    assert len(rows) == 25
    assert rows[u64(root['small']._p_oid)][3] == {'data': {'n': 2}}
    assert rows[u64(root['file']._p_oid)][1:3] == ('ZODB.blob', 'Blob')
    conn.close()
    db.close()


def _state(value):
    """A record of a PersistentMapping holding ``value`` (as ZODB pickles
    it: class, then state)."""
    return (pickle.dumps((PersistentMapping, None), 3)
            + pickle.dumps({'data': {'v': value}}, 3))


def _transaction(storage, work, abort=False):
    """``work(txn)`` in a transaction of the storage's own API, voted,
    then finished (its tid returned) or aborted."""
    txn = transaction.Transaction()
    storage.tpc_begin(txn)
    work(txn)
    storage.tpc_vote(txn)
    if abort:
        return storage.tpc_abort(txn)
    return storage.tpc_finish(txn)


def _store_new(storage, value, abort=False):
    """Commit (or abort) a new PersistentMapping holding ``value``; its
    oid and the transaction's tid."""
    oid = storage.new_oid()
    tid = _transaction(storage, lambda txn: storage.store(
        oid, None, _state(value), '', txn), abort)
    return oid, tid


def test_a_staged_commit_keeps_little_in_memory(open_storage, monkeypatch):
    """Past SPILL_BYTES the rendered rows go to the database's staging
    table with the pickles; what comes later in the same transaction (a
    second store of a staged object, a deletion) overrides them."""
    storage = open_storage(json_state=True)
    gone, gone_tid = _store_new(storage, 'gone')
    monkeypatch.setattr(commit_module, 'SPILL_BYTES', 1)
    staged = []
    spill = storage._adapter.mirror.spill

    def counting(cursor, rows, first):
        staged.append((len(rows), first))
        return spill(cursor, rows, first)
    monkeypatch.setattr(storage._adapter.mirror, 'spill', counting)
    twice, once = storage.new_oid(), storage.new_oid()

    def work(txn):
        storage.store(twice, None, _state('first'), '', txn)
        storage.store(once, None, _state('x' * 50), '', txn)
        storage.store(twice, None, _state('second'), '', txn)
        storage.deleteObject(gone, gone_tid, txn)
    _transaction(storage, work)
    # Each store staged its row at once: one row in memory at most.
    assert staged == [(1, True), (1, False), (1, False)]
    rows = _rows(storage)
    assert rows == _expected(storage)
    assert rows[u64(twice)][3] == {'data': {'v': 'second'}}
    assert u64(gone) not in rows and u64(once) in rows


def test_an_aborted_staged_commit_leaves_no_row(open_storage, monkeypatch):
    """The staging table outlives a transaction on some databases: what an
    aborted transaction staged is never written by the next ones."""
    storage = open_storage(json_state=True)
    monkeypatch.setattr(commit_module, 'SPILL_BYTES', 1)
    _store_new(storage, 'aborted', abort=True)
    monkeypatch.setattr(commit_module, 'SPILL_BYTES', 1 << 30)
    small, _ = _store_new(storage, 'small')
    monkeypatch.setattr(commit_module, 'SPILL_BYTES', 1)
    big, _ = _store_new(storage, 'staged')
    rows = _rows(storage)
    assert set(rows) == {u64(small), u64(big)}
    assert rows == _expected(storage)


def test_conflict_resolution_after_staging(open_storage, monkeypatch):
    storage = open_storage(json_state=True)
    db = ZODB.DB(storage)
    first = db.open()
    first.root()['count'] = Length(0)
    transaction.commit()
    other = transaction.TransactionManager()
    second = db.open(other)
    monkeypatch.setattr(commit_module, 'SPILL_BYTES', 1)
    first.root()['count'].change(1)
    second.root()['count'].change(10)
    transaction.commit()
    other.commit()      # staged with 10, resolved at vote: 11
    assert _rows(storage)[u64(first.root()['count']._p_oid)][3] == 11
    assert _rows(storage) == _expected(storage)
    first.close()
    second.close()
    db.close()


def test_conflict_resolution_and_deletion(open_storage):
    storage = open_storage(json_state=True)
    db = ZODB.DB(storage)
    first = db.open()
    first.root()['count'] = Length(0)
    first.root()['gone'] = PersistentMapping()
    transaction.commit()
    other = transaction.TransactionManager()
    second = db.open(other)
    first.root()['count'].change(1)
    second.root()['count'].change(10)
    transaction.commit()
    other.commit()      # resolved at vote: 11
    count = u64(first.root()['count']._p_oid)
    assert _rows(storage)[count][3] == 11
    gone = first.root()['gone']._p_oid
    del first.root()['gone']
    transaction.commit()
    # IExternalGC: the object itself goes, and its row with it.
    _transaction(storage, lambda txn: storage.deleteObject(
        gone, storage.load(gone)[1], txn))
    assert u64(gone) not in _rows(storage)
    assert _rows(storage) == _expected(storage)
    first.close()
    second.close()
    db.close()


def test_undo_writes_the_state_it_restores(open_storage, keep_history):
    if not keep_history:
        pytest.skip('history-free storages do not undo')
    storage = open_storage(json_state=True)
    db = ZODB.DB(storage)
    conn = db.open()
    conn.root()['doc'] = doc = PersistentMapping({'v': 1})
    transaction.commit()
    doc['v'] = 2
    transaction.commit()
    db.undo(storage.undoLog(0, 1)[0]['id'])
    transaction.commit()
    assert _rows(storage)[u64(doc._p_oid)][3] == {'data': {'v': 1}}
    assert _rows(storage) == _expected(storage)
    conn.close()
    db.close()


def test_pack_removes_the_rows_of_garbage(open_storage):
    storage = open_storage(json_state=True)
    db = ZODB.DB(storage)
    conn = db.open()
    root = conn.root()
    root['keep'] = PersistentMapping()
    root['drop'] = PersistentMapping({'child': PersistentMapping()})
    transaction.commit()
    dropped = [u64(root['drop']._p_oid), u64(root['drop']['child']._p_oid)]
    del root['drop']
    transaction.commit()
    assert set(dropped) <= set(_rows(storage))
    storage.pack(time.time() + 1, referencesf)
    rows = _rows(storage)
    assert not set(dropped) & set(rows)
    assert rows == _expected(storage)
    conn.close()
    db.close()


@pytest.mark.parametrize('staged', [False, True], ids=['memory', 'staged'])
def test_a_restored_database_has_its_mirror(open_storage, tmp_path,
                                            monkeypatch, staged):
    if staged:
        monkeypatch.setattr(commit_module, 'SPILL_BYTES', 1)
    from ZODB.FileStorage import FileStorage
    source = FileStorage(str(tmp_path / 'Data.fs'))
    sdb = ZODB.DB(source)
    conn = sdb.open()
    conn.root()['a'] = PersistentMapping({'x': [1, 2]})
    transaction.commit()
    conn.root()['a']['x'] = [3]
    transaction.commit()
    conn.close()
    storage = open_storage(json_state=True)
    storage.copyTransactionsFrom(source)
    sdb.close()
    rows = _rows(storage)
    assert rows == _expected(storage)
    assert {'data': {'x': [3]}} in [row[3] for row in rows.values()]


def _store_unrenderable(storage):
    """Commit a record that cannot be rendered (a class pickle and no
    state: no JSON, no error); its oid."""
    oid = storage.new_oid()
    _transaction(storage, lambda txn: storage.store(
        oid, None, b'\x80\x03cpersistent.mapping\n'
        b'PersistentMapping\nq\x00.', '', txn))
    return oid


def test_a_state_that_cannot_be_rendered_commits_with_a_null(open_storage):
    storage = open_storage(json_state=True)
    oid = _store_unrenderable(storage)
    tid, module, name, state = _rows(storage)[u64(oid)]
    assert (module, name, state) == ('persistent.mapping',
                                     'PersistentMapping', None)
    assert storage.metrics()['json_unrendered'] == 1


def test_a_hand_edited_json_row_changes_nothing_a_client_loads(
        open_storage, tmp_path):
    storage = open_storage(json_state=True)
    db = ZODB.DB(storage)
    conn = db.open()
    conn.root()['doc'] = PersistentMapping({'title': 'kept'})
    transaction.commit()
    oid = conn.root()['doc']._p_oid
    before = storage.load(oid)
    marker = tmp_path / 'ran'
    crafted = json.dumps({'!call': 'os.system',
                          '!args': [f'touch {marker}']})
    p = storage._adapter.mirror.PARAM
    write(storage, f'UPDATE object_json SET state = {p}, class_module = {p} '
                   f'WHERE zoid = {p}', (crafted, 'os', u64(oid)))
    storage._cache.clear()
    assert storage.load(oid) == before
    other = db.open(transaction.TransactionManager())
    assert other.get(oid)['title'] == 'kept'
    assert not marker.exists()
    other.close()
    conn.close()
    db.close()


# -- relstorage-mirror's fill -----------------------------------------------

def _build_without_mirror(storage, count):
    db = ZODB.DB(storage)
    conn = db.open()
    root = conn.root()
    for i in range(count):
        root[i] = PersistentMapping({'n': i})
    transaction.commit()
    return db, conn


class _StopAfter(Progress):
    """A Progress that asks to stop after ``batches`` batches."""

    def __init__(self, batches):
        super().__init__('mirror')
        self.batches = batches

    def stop_requested(self):
        return self.done >= self.batches * 7


def test_fill_writes_what_commits_without_json_state_left_out(
        open_storage):
    storage = open_storage()
    db, conn = _build_without_mirror(storage, 30)
    adapter = storage._adapter
    assert fill_module.check(adapter) == {
        'objects': 31, 'rows': 0, 'current': 0, 'behind': 31, 'orphans': 0}
    counts = fill_module.fill(adapter, batch=7)
    assert (counts['rendered'], counts['orphans']) == (31, 0)
    assert _rows(storage) == _expected(storage)
    # A client without json-state changes one object and deletes another.
    conn.root()[3]['n'] = 'changed'
    transaction.commit()
    gone = conn.root()[4]._p_oid
    _transaction(storage, lambda txn: storage.deleteObject(
        gone, storage.load(gone)[1], txn))
    found = fill_module.check(adapter)
    # Object 3's row is behind; object 4's is an orphan.
    assert (found['behind'], found['orphans']) == (1, 1)
    counts = fill_module.fill(adapter, batch=7)
    assert (counts['rendered'], counts['orphans']) == (1, 1)
    assert _rows(storage) == _expected(storage)
    assert fill_module.check(adapter)['behind'] == 0
    conn.close()
    db.close()


def test_the_fill_writes_a_null_for_what_it_cannot_render(open_storage):
    """Beside rendered rows, in one batch: the class, and SQL's NULL (not
    JSON's null) for the state, as a commit writes them."""
    storage = open_storage()
    db, conn = _build_without_mirror(storage, 3)
    oid = _store_unrenderable(storage)
    counts = fill_module.fill(storage._adapter)
    assert (counts['rendered'], counts['unrendered']) == (5, 1)
    rows = _rows(storage)
    assert rows[u64(oid)][1:] == ('persistent.mapping', 'PersistentMapping',
                                  None)
    assert query(storage, 'SELECT COUNT(*) FROM object_json '
                          'WHERE state IS NULL') == [(1,)]
    assert _rows(storage) == _expected(storage)
    conn.close()
    db.close()


def test_a_stopped_fill_goes_on_where_it_stopped(open_storage):
    storage = open_storage()
    db, conn = _build_without_mirror(storage, 30)
    adapter = storage._adapter
    first = fill_module.fill(adapter, batch=7, progress=_StopAfter(2))
    assert first['stopped'] and first['rendered'] == 14
    assert len(_rows(storage)) == 14
    rest = fill_module.fill(adapter, batch=7)
    assert not rest['stopped'] and rest['rendered'] == 31 - 14
    assert _rows(storage) == _expected(storage)
    conn.close()
    db.close()


def test_a_commit_during_the_fill_wins(open_storage, monkeypatch):
    """An object committed (with json-state) between the fill's read and
    its write keeps the commit's row, not the older one the fill
    rendered."""
    storage = open_storage()
    db, conn = _build_without_mirror(storage, 10)
    writer = open_storage(json_state=True)
    wdb = ZODB.DB(writer)
    tm = transaction.TransactionManager()
    wconn = wdb.open(tm)
    changed = []
    real_render = fill_module.render

    def render_then_commit(state):
        found = real_render(state)
        if not changed:
            wconn.root()[5]['n'] = 'newer'
            tm.commit()
            changed.append(True)
        return found
    monkeypatch.setattr(fill_module, 'render', render_then_commit)
    fill_module.fill(storage._adapter, batch=100)
    assert changed
    rows = _rows(storage)
    assert rows == _expected(storage)
    assert rows[u64(wconn.root()[5]._p_oid)][3] == {'data': {'n': 'newer'}}
    wconn.close()
    wdb.close()
    conn.close()
    db.close()


def test_a_filled_mirror_agrees_with_one_written_at_commit(open_storage):
    storage = open_storage(json_state=True)
    db = ZODB.DB(storage)
    conn = db.open()
    root = conn.root()
    root['tree'] = tree = OOBTree()
    for i in range(40):
        tree[f'k{i}'] = PersistentMapping({'n': i, 'at': datetime.date(
            2026, 1, 1 + i % 28), 'blob': b'\x00' * i})
    transaction.commit()
    written = _rows(storage)
    write(storage, 'DELETE FROM object_json')
    assert _rows(storage) == {}
    fill_module.fill(storage._adapter, batch=9)
    assert _rows(storage) == written
    conn.close()
    db.close()


DOCS = os.path.join(os.path.dirname(__file__), '..', 'docs', 'json.rst')
LABELS = {'postgresql': ('PostgreSQL',), 'mysql': ('MySQL', 'MariaDB'),
          'sqlite': ('SQLite',)}


def _documented_statements(database, keep_history):
    """The SQL statements of docs/json.rst's ``code-block:: sql`` blocks
    for ``database``: each block is in parts, each opened by a comment
    naming the databases it is for (and "(history-preserving)" when it
    needs history)."""
    with open(DOCS, encoding='utf-8') as f:
        lines = f.read().splitlines()
    statements, inside, part = [], False, None
    for line in lines + ['']:
        if line.startswith('.. code-block:: sql'):
            inside, part = True, None
            continue
        if inside and line and not line.startswith(' '):
            inside = False
        if not inside:
            continue
        text = line.strip()
        if text.startswith('-- '):
            wanted = any(label in text for label in LABELS[database])
            if 'history-preserving' in text and not keep_history:
                wanted = False
            part = [] if wanted else None
            if wanted:
                statements.append(part)
        elif part is not None and text:
            part.append(text)
    return [statement.strip() for part in statements
            for statement in ' '.join(part).split(';') if statement.strip()]


def test_the_documented_statements_run(open_storage, backend, keep_history):
    storage = open_storage(json_state=True)
    db = ZODB.DB(storage)
    conn = db.open()
    root = conn.root()
    root['folder'] = folder = OOBTree()
    folder['front'] = front = PersistentMapping({'title': 'Front page'})
    transaction.commit()
    statements = _documented_statements(backend.marker, keep_history)
    assert len(statements) >= 6
    refs = {(u64(folder._p_oid), u64(front._p_oid)),
            (u64(root._p_oid), u64(folder._p_oid))}
    for statement in statements:
        if statement.startswith('SELECT'):
            rows = query(storage, statement)
            if 'to_zoid' in statement:
                assert refs <= {tuple(row) for row in rows}, statement
            elif 'Front page' in statement:
                assert rows == [(u64(front._p_oid),)], statement
            elif 'c.tid <> j.tid' in statement:
                assert rows == [], statement
            else:
                assert rows, statement
        else:
            write(storage, statement)
    assert refs <= set(query(storage, 'SELECT zoid, to_zoid FROM '
                                      'object_json_refs'))
    classes = dict(((m, n), count) for m, n, count, _ in query(
        storage, 'SELECT * FROM object_json_classes'))
    assert classes[('persistent.mapping', 'PersistentMapping')] == 2
    conn.close()
    db.close()
