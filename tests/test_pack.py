"""Packing beyond ZODB's PackableStorage mixins: the references kept between
packs, analyses stopped and resumed, the kept pre-pack, writers throughout
a pack, and the result compared with FileStorage's pack of the same
history.  (zodbpack as a command: test_zodbpack.py.)"""
import contextlib
import random
import re
import threading
import time

import pytest
import transaction
import ZODB
from persistent.mapping import PersistentMapping
from ZODB.FileStorage import FileStorage
from ZODB.POSException import ConflictError
from ZODB.serialize import referencesf
from ZODB.utils import p64
from ZODB.utils import u64

from relstorage.pack import analysis as pack_analysis
from relstorage.pack import throttle as pack_throttle
from backends import deleting_phase
from backends import by_page
from backends import query
from relstorage.errors import PackError
from relstorage.errors import PackStopped
from relstorage.pack.deletion import DELETING
from relstorage.pack.deletion import PAGES
from relstorage.progress import Progress


class Recorder(Progress):
    """Remembers each phase's total and count; can stop the pack once
    ``stop_after`` batches (or pages) of the phase named ``stop_in`` went."""

    def __init__(self, stop_in=None, stop_after=1):
        super().__init__()
        self.phases = {}
        self.notes = []
        self.stop_in = stop_in
        self.stop_after = stop_after
        self._steps = 0

    def phase(self, what, total=None, started=None):
        super().phase(what, total, started)
        self.phases[what] = [total, 0]

    def add(self, count):
        super().add(count)
        self.phases[self.what][1] += count
        if self.what == self.stop_in:
            self._steps += 1

    def stop_requested(self):
        return self.stop_in is not None and self._steps >= self.stop_after

    def count(self, what):
        return self.phases.get(what, [None, 0])[1]

    def note(self, message, *args):
        super().note(message, *args)
        self.notes.append(message % args)


ANALYSED = 'revisions analysed for references'


def _count(storage, table):
    return query(storage, f'SELECT COUNT(*) FROM {table}')[0][0]


def _pack(storage, **kwargs):
    storage.pack(time.time() + 1, referencesf, **kwargs)


def _build(db, count, drop_every=2):
    """``count`` mappings under the root, in commits of 50; every
    ``drop_every``-th is removed again afterwards (garbage, with the child
    each one holds).  Returns the oids of the dropped ones."""
    conn = db.open()
    root = conn.root()
    for index in range(count):
        root[index] = PersistentMapping({'child': PersistentMapping()})
        if index % 50 == 49:
            transaction.commit()
    transaction.commit()
    dropped = []
    for index in range(0, count, drop_every):
        dropped.append(u64(root[index]._p_oid))
        dropped.append(u64(root[index]['child']._p_oid))
        del root[index]
    transaction.commit()
    conn.close()
    return dropped


def _reachable(storage):
    """The oids reachable from the root, each loaded (a missing one fails
    the test with a POSKeyError)."""
    seen = set()
    todo = [0]
    while todo:
        oid = todo.pop()
        if oid in seen:
            continue
        seen.add(oid)
        data, _ = storage.load(p64(oid))
        todo.extend(u64(ref) for ref in referencesf(data))
    return seen


def _exists(storage, oid):
    try:
        storage.load(p64(oid))
    except KeyError:
        return False
    return True


def test_references_are_analysed_once(open_storage):
    storage = open_storage()
    db = ZODB.DB(storage)
    dropped = _build(db, 200)
    first = Recorder()
    _pack(storage, progress=first)
    total = first.count(ANALYSED)
    assert total >= 400
    assert not any(_exists(storage, oid) for oid in dropped)
    # Commits do not analyse: the refs wait for the next pack.
    refs = _count(storage, 'object_ref')
    _build(db, 20, drop_every=1000)
    assert _count(storage, 'object_ref') == refs
    second = Recorder()
    _pack(storage, progress=second)
    # Only what was written since (20 new objects, their children and
    # the root's new revisions).
    assert 0 < second.count(ANALYSED) <= 45
    assert _count(storage, 'object_ref') > refs
    db.close()


def test_many_revisions_written_since_are_read_in_key_order(
        open_storage, monkeypatch):
    """Past SCAN_SINCE_ROWS (and a share of the objects), what was written
    since the last analysis is read by a scan in key order, and the
    references recorded are those of every revision left: the same as
    read in the order written."""
    monkeypatch.setattr(pack_analysis, 'PAGE', 50)
    monkeypatch.setattr(pack_analysis, 'SCAN_SINCE_ROWS', 100)
    storage = open_storage()
    db = ZODB.DB(storage)
    _build(db, 200)
    _pack(storage)
    since = u64(storage.lastTransaction())
    # New objects, and old ones whose references move (history-free
    # drops the references of the revisions replaced).
    _build(db, 60, drop_every=1000)
    conn = db.open()
    root = conn.root()
    for index in range(61, 200, 4):
        root[index]['child'] = PersistentMapping()
    transaction.commit()
    conn.close()
    packer = storage._adapter.packer
    scans = []
    scan_page = packer.scan_page

    def spy(cursor, since, *args):
        scans.append(since)
        return scan_page(cursor, since, *args)
    monkeypatch.setattr(packer, 'scan_page', spy)
    second = Recorder()
    _pack(storage, progress=second)
    assert scans and all(tid == since for tid in scans)
    # What was written since, no more: the objects left, and the new
    # mapping dropped again with its child.
    table = 'current_object' if storage._options.keep_history \
        else 'object_state'
    written = query(storage, f'SELECT COUNT(*) FROM {table} '
                             f'WHERE tid > {since}')[0][0]
    assert written + 2 == second.count(ANALYSED)
    recorded = set(query(storage, 'SELECT zoid, tid, to_zoid FROM object_ref'))
    expected = {(zoid, tid, u64(ref))
                for zoid, tid, state in query(
                    storage, 'SELECT zoid, tid, state FROM object_state')
                if state is not None for ref in referencesf(bytes(state))}
    assert recorded == expected
    assert len(_reachable(storage)) == 1 + 2 * (100 - 30 + 59)
    db.close()


def test_helper_tables_keep_only_what_the_next_pack_needs(open_storage):
    storage = open_storage()
    db = ZODB.DB(storage)
    _build(db, 100)
    _pack(storage)
    for table in ('pack_object', 'pack_reached'):
        assert _count(storage, table) == 0, table
    # Only the pack's own record, for the next one to build on.
    assert query(storage, 'SELECT phase FROM pack_run') == [(4,)]
    # No reference row of a revision that no longer exists.
    assert query(storage, """
        SELECT COUNT(*) FROM object_ref r
        LEFT JOIN object_state o ON o.zoid = r.zoid AND o.tid = r.tid
        WHERE o.zoid IS NULL""") == [(0,)]
    assert _count(storage, 'object_ref') > 0
    db.close()


def test_an_analysis_stopped_part_way_goes_on_where_it_stopped(
        open_storage, monkeypatch):
    monkeypatch.setattr(pack_analysis, 'PAGE', 50)
    storage = open_storage()
    db = ZODB.DB(storage)
    dropped = _build(db, 200)
    stopped = Recorder(stop_in=ANALYSED, stop_after=2)
    with pytest.raises(PackStopped):
        _pack(storage, progress=stopped)
    # The pages committed before the stop are kept ...
    assert _count(storage, 'object_ref') > 0
    assert _exists(storage, dropped[0])
    rest = Recorder()
    _pack(storage, progress=rest)
    # ... and not read again.
    assert rest.count(ANALYSED) + stopped.count(ANALYSED) == \
        stopped.phases[ANALYSED][0]
    assert not any(_exists(storage, oid) for oid in dropped)
    assert len(_reachable(storage)) == 1 + 200
    db.close()


def test_reference_rows_left_without_their_state_are_not_trusted(
        open_storage):
    storage = open_storage()
    db = ZODB.DB(storage)
    dropped = _build(db, 60)
    # A reference row that claims the root refers to a dropped object,
    # with no analysis state to vouch for it (as a database upgraded
    # from version 2, or restored without pack_state, might hold).
    root_tid = u64(storage.load(p64(0))[1])
    _write(storage, [f'INSERT INTO object_ref (zoid, tid, to_zoid) '
                     f'VALUES (0, {root_tid}, {dropped[0]})'])
    _pack(storage)
    assert not any(_exists(storage, oid) for oid in dropped)
    db.close()


def _write(storage, statements):
    cm = storage._adapter.connmanager
    conn = cm.connect()
    cursor = conn.cursor()
    try:
        cm.begin_write(cursor, 'test')
        for statement in statements:
            cursor.execute(statement)
        cm.commit(conn, cursor)
    finally:
        cm.close(conn, cursor)


def test_prepack_then_deletion_with_what_was_committed_between(
        open_storage):
    storage = open_storage()
    db = ZODB.DB(storage)
    dropped = _build(db, 40)
    storage.pack(time.time() + 1, referencesf, prepack_only=True)
    assert all(_exists(storage, oid) for oid in dropped)
    assert _count(storage, 'pack_run') == 1
    # A client that held on to a dropped object links it again after the
    # analysis (an object kept across transactions, or an undo).
    conn = db.open()
    revived = conn.get(p64(dropped[0]))
    conn.root()['revived'] = revived
    transaction.commit()
    conn.close()
    storage.pack(time.time() + 1, referencesf, skip_prepack=True)
    assert _exists(storage, dropped[0])
    assert _exists(storage, dropped[1])       # its child, reached from it
    assert not any(_exists(storage, oid) for oid in dropped[2:])
    assert query(storage, 'SELECT phase FROM pack_run') == [(4,)]
    _reachable(storage)
    db.close()


def test_a_deletion_stopped_part_way_is_continued(open_storage,
                                                  monkeypatch):
    monkeypatch.setattr(pack_throttle, 'FIRST_BATCH', 20)
    monkeypatch.setattr(pack_throttle, 'MIN_BATCH', 20)
    storage = open_storage(pack_batch_timeout=0.0, pack_duty_cycle=1.0)
    db = ZODB.DB(storage)
    dropped = _build(db, 300)
    deleting = deleting_phase(storage)
    stopped = Recorder(stop_in=deleting, stop_after=3)
    with pytest.raises(PackStopped):
        _pack(storage, progress=stopped)
    gone = [oid for oid in dropped if not _exists(storage, oid)]
    assert 0 < len(gone) < len(dropped)
    run = query(storage, 'SELECT phase, upto FROM pack_run')
    # (Where old revisions go by page first, the garbage's pass is the
    # second phase.)
    assert run[0][0] == 1 + by_page(storage) and run[0][1] >= max(gone)
    rest = Recorder()
    _pack(storage, skip_prepack=True, progress=rest)
    # The rest of the objects, none twice (history-preserving: also the
    # root, whose old revisions go, where they go with the garbage).
    total = stopped.phases[deleting][0]
    assert total == len(dropped) + (deleting == DELETING[True])
    assert rest.phases[deleting] == [total - stopped.count(deleting)] * 2
    assert not any(_exists(storage, oid) for oid in dropped)
    assert len(_reachable(storage)) == 1 + 300
    db.close()


def _old_revisions(storage):
    """Rows of object_state that are not their object's current one, and
    rows of object_ref whose revision is gone."""
    old = query(storage, """
        SELECT COUNT(*) FROM object_state o
        JOIN current_object c ON c.zoid = o.zoid
        WHERE o.tid <> c.tid""")[0][0]
    orphans = query(storage, """
        SELECT COUNT(*) FROM object_ref r
        LEFT JOIN object_state o ON o.zoid = r.zoid AND o.tid = r.tid
        WHERE o.zoid IS NULL""")[0][0]
    return old, orphans


def test_a_pass_by_page_stopped_part_way_is_continued(
        open_storage, monkeypatch):
    # A page a batch: the pass over a few dozen pages stops after three.
    monkeypatch.setattr(pack_throttle, 'FIRST_BATCH', 1)
    monkeypatch.setattr(pack_throttle, 'MIN_BATCH', 1)
    storage = open_storage(pack_batch_timeout=0.0, pack_duty_cycle=1.0)
    if not by_page(storage):
        pytest.skip('old revisions go with the garbage here (by page: '
                    'PostgreSQL 14 and later, history-preserving)')
    db = ZODB.DB(storage)
    dropped = _build(db, 300)
    # Old revisions on every page: the kept mappings changed, 50 a commit,
    # after a first pack that analysed their references.
    _pack(storage)
    conn = db.open()
    root = conn.root()
    for index in range(1, 300, 2):
        root[index]['v'] = index
        if index % 100 == 99:
            transaction.commit()
    transaction.commit()
    conn.close()
    before, _ = _old_revisions(storage)
    assert before >= 150
    stopped = Recorder(stop_in=PAGES, stop_after=3)
    with pytest.raises(PackStopped):
        _pack(storage, progress=stopped)
    assert deleting_phase(storage) not in stopped.phases   # (after it)
    pages = stopped.phases[PAGES][0]
    assert pages > 3
    run = query(storage, 'SELECT phase, upto FROM pack_run')
    assert run == [(1, 2)]
    between, _ = _old_revisions(storage)
    assert 0 < between < before
    rest = Recorder()
    _pack(storage, skip_prepack=True, progress=rest)
    # Only the rest of the pages, none twice; then no garbage (the first
    # pack removed it).
    assert rest.phases[PAGES] == [pages - 3, pages - 3]
    assert rest.phases[deleting_phase(storage)] == [0, 0]
    assert _old_revisions(storage) == (0, 0)
    assert not any(_exists(storage, oid) for oid in dropped)
    assert len(_reachable(storage)) == 1 + 300
    # (Not a whole pack: a later one does not build on it.)
    assert query(storage, 'SELECT phase FROM pack_run') == []
    db.close()


BUILT_ON = 'as it left them'


def _pack_objects(storage):
    return [(zoid, tid, bool(null), bool(older)) for zoid, tid, null, older
            in query(storage, 'SELECT zoid, keep_tid, keep_null, has_older '
                              'FROM pack_object ORDER BY zoid')]


def _fill_whole(storage, pack_tid):
    """pack_object made again, from every revision."""
    cm = storage._adapter.connmanager
    packer = storage._adapter.packer
    conn = cm.connect()
    cursor = conn.cursor()
    try:
        cm.begin_write(cursor, 'test')
        cursor.execute('DELETE FROM pack_object')
        packer.fill(cursor, pack_tid)
        cm.commit(conn, cursor)
    finally:
        cm.close(conn, cursor)


def test_a_later_pack_builds_on_a_finished_one(open_storage, keep_history,
                                               monkeypatch):
    storage = open_storage()
    # Whatever share of the objects this test writes between the packs.
    monkeypatch.setattr(storage._adapter.packer, 'FILL_SINCE_SHARE', 1.0)
    db = ZODB.DB(storage)
    dropped = _build(db, 60)
    _pack(storage)
    # Then: kept objects changed, some dropped, new ones, and (history-
    # preserving) an object created and its creation undone.
    conn = db.open()
    root = conn.root()
    keys = sorted(k for k in root.keys() if isinstance(k, int))
    for key in keys[:10]:
        root[key]['changed'] = True
    transaction.commit()
    for key in keys[10:15]:
        dropped.append(u64(root[key]._p_oid))
        del root[key]
    root['new'] = PersistentMapping({'child': PersistentMapping()})
    transaction.commit()
    if keep_history:
        root['undone'] = PersistentMapping()
        transaction.commit()
        undo_id = storage.undoLog(0, 1)[0]['id']
        db.undo(undo_id)
        transaction.commit()
    conn.close()
    analysis = Recorder()
    _pack(storage, prepack_only=True, progress=analysis)
    built_on = any(BUILT_ON in note for note in analysis.notes)
    # Only history-preserving packs build on the last one (history-free
    # reads its one revision per object anyway).
    assert built_on == keep_history, analysis.notes
    # What it recorded is what a look at every revision records.
    pack_tid = query(storage, 'SELECT pack_tid FROM pack_run')[0][0]
    incremental = _pack_objects(storage)
    _fill_whole(storage, pack_tid)
    assert _pack_objects(storage) == incremental
    _pack(storage, skip_prepack=True)
    assert not any(_exists(storage, oid) for oid in dropped)
    assert len(_reachable(storage)) == 1 + 2 * (30 - 5) + 2
    db.close()


def test_a_commit_during_the_fill_is_not_recorded_twice(
        backend, open_storage, keep_history, monkeypatch):
    """A pack that builds on the last one, with a writer committing while
    it records the objects: the object written meanwhile went in twice
    (unchanged for one statement, changed for the next), and the pack
    failed on a duplicate key."""
    if backend.name == 'sqlite':
        pytest.skip('SQLite serialises writers: no commit can land inside '
                    "the pack's write transaction")
    if not keep_history:
        pytest.skip('history-free packs read every object anew')
    storage = open_storage()
    packer = storage._adapter.packer
    monkeypatch.setattr(packer, 'FILL_SINCE_SHARE', 1.0)
    db = ZODB.DB(storage)
    _build(db, 40)
    _pack(storage)
    _build(db, 4)
    other = transaction.TransactionManager()
    conn = db.open(other)
    # Unchanged since the first pack: the pack builds on it.
    unchanged = conn.root()[39]
    run = packer._run
    landed = []

    def run_then_commit(cursor, statement, *params):
        result = run(cursor, statement, *params)
        if 'INTO pack_object' in statement and not landed:
            unchanged['meanwhile'] = True
            other.commit()
            landed.append(True)
        return result
    monkeypatch.setattr(packer, '_run', run_then_commit)
    analysis = Recorder()
    _pack(storage, prepack_only=True, progress=analysis)
    monkeypatch.setattr(packer, '_run', run)
    assert landed
    assert any(BUILT_ON in note for note in analysis.notes), analysis.notes
    pack_tid = query(storage, 'SELECT pack_tid FROM pack_run')[0][0]
    recorded = _pack_objects(storage)
    _fill_whole(storage, pack_tid)
    assert _pack_objects(storage) == recorded
    _pack(storage, skip_prepack=True)
    assert storage.load(unchanged._p_oid)[1] == unchanged._p_serial
    conn.close()
    _reachable(storage)
    db.close()


def test_a_pack_is_built_on_only_when_it_is_sound(open_storage,
                                                  monkeypatch):
    storage = open_storage(keep_history=True)
    packer = storage._adapter.packer
    monkeypatch.setattr(packer, 'FILL_SINCE_SHARE', 1.0)
    db = ZODB.DB(storage)
    _build(db, 40)
    _pack(storage)
    # More objects written since than the database's share: all are read.
    _build(db, 10)
    monkeypatch.setattr(packer, 'FILL_SINCE_SHARE', 0.01)
    many = Recorder()
    _pack(storage, progress=many)
    assert not any(BUILT_ON in note for note in many.notes)
    monkeypatch.setattr(packer, 'FILL_SINCE_SHARE', 1.0)
    # A transaction up to that pack that it did not mark (as one restored
    # into the database after it would be): the next pack reads all.
    _write(storage, ['UPDATE transaction_log SET packed = FALSE WHERE tid = '
                     '(SELECT MIN(tid) FROM object_state)'])
    whole = Recorder()
    _pack(storage, progress=whole)
    assert not any(BUILT_ON in note for note in whole.notes)
    assert query(storage, 'SELECT phase FROM pack_run') == [(4,)]
    # A pack that skipped a garbage object (locked by a committer) leaves
    # no record to build on.
    _build(db, 10)
    locked = packer.lock_garbage
    monkeypatch.setattr(packer, 'lock_garbage',
                        lambda cursor, zoids, pack_tid:
                        locked(cursor, zoids, pack_tid)[1:])
    _pack(storage)
    assert _count(storage, 'pack_run') == 0
    monkeypatch.setattr(packer, 'lock_garbage', locked)
    after = Recorder()
    _pack(storage, progress=after)
    assert not any(BUILT_ON in note for note in after.notes)
    _reachable(storage)
    db.close()


def test_a_kept_analysis_is_checked_before_use(open_storage):
    storage = open_storage()
    db = ZODB.DB(storage)
    _build(db, 20)
    with pytest.raises(PackError, match='no kept pack analysis'):
        _pack(storage, skip_prepack=True)
    _pack(storage, prepack_only=True)
    _write(storage, ['DELETE FROM pack_object WHERE zoid = 0'])
    with pytest.raises(PackError, match='damaged'):
        _pack(storage, skip_prepack=True)
    _write(storage, ['UPDATE pack_run SET format = 99'])
    with pytest.raises(PackError, match='another version'):
        _pack(storage, skip_prepack=True)
    # A whole pack makes a new one.
    _pack(storage)
    assert len(_reachable(storage)) == 1 + 10 * 2
    db.close()


def test_one_pack_at_a_time(open_storage):
    storage = open_storage()
    db = ZODB.DB(storage)
    _build(db, 10)
    packer = storage._adapter.packer
    cm = storage._adapter.connmanager
    conn, cursor = cm.open_store()
    try:
        release = packer.try_lock(conn, cursor)
        assert release is not None
        other = open_storage()
        with pytest.raises(PackError, match='another pack'):
            _pack(other)
        release()
    finally:
        cm.close(conn, cursor)
    _pack(other)
    db.close()


@pytest.mark.parametrize('analysed_before', [True, False],
                         ids=['analysed', 'not-analysed'])
def test_what_was_reachable_at_the_pack_time_stays(open_storage,
                                                  keep_history,
                                                  analysed_before):
    storage = open_storage()
    db = ZODB.DB(storage)
    conn = db.open()
    root = conn.root()
    root['a'] = PersistentMapping({'x': PersistentMapping()})
    transaction.commit()
    oid = u64(root['a']['x']._p_oid)
    if analysed_before:
        # The references of the current revisions are recorded; else the
        # pack below reads the kept revision of 'a' when it needs it.
        _pack(storage, prepack_only=True)
    time.sleep(0.05)
    t = time.time()
    time.sleep(0.05)
    # 'a' changes after the pack time: its kept revision (the one that
    # refers to x) is no longer current.
    del root['a']['x']
    transaction.commit()
    conn.close()
    progress = Recorder()
    storage.pack(t, referencesf, progress=progress)
    # Said when it read any (history-preserving, when no earlier analysis
    # recorded the references of that revision while it was current).
    said = [note for note in progress.notes
            if 'kept revisions no longer current' in note]
    assert len(said) == (keep_history and not analysed_before), said
    assert all(re.fullmatch(r'references of 1 kept revisions no longer '
                            r'current recorded in \d+\.\ds', note)
               for note in said), said
    # History-preserving: x was reachable at the pack time and stays (with
    # the revision of 'a' that refers to it).  History-free has no such
    # revision any more: x is garbage (docs/operations.rst).
    assert _exists(storage, oid) == keep_history
    if keep_history:
        _reachable(storage)
        old = storage.loadBefore(p64(u64(root['a']._p_oid)),
                                 storage.lastTransaction())
        assert old is not None
    db.close()


def test_kept_revisions_to_read_are_found_past_pages_of_none(
        open_storage, keep_history):
    """kept_unanalysed pages through the objects changed after the pack
    tid; pages where every kept revision already has its references
    recorded do not end the search."""
    if not keep_history:
        pytest.skip('history-free keeps no revision that is not current')
    storage = open_storage()
    db = ZODB.DB(storage)
    conn = db.open()
    root = conn.root()
    # (Each refers to an object: one without references has no rows in
    # object_ref, and counts as not analysed.)
    for index in range(5):
        root[f'a{index}'] = PersistentMapping({'c': PersistentMapping()})
    transaction.commit()
    _pack(storage, prepack_only=True)   # their references are recorded
    root['b'] = PersistentMapping({'c': PersistentMapping()})
    transaction.commit()
    pack_tid = u64(root['b']._p_serial)
    b_zoid = u64(root['b']._p_oid)
    for index in range(5):
        root[f'a{index}']['x'] = 1
    root['b']['x'] = 1
    transaction.commit()
    conn.close()
    _fill_whole(storage, pack_tid)
    cm = storage._adapter.connmanager
    packer = storage._adapter.packer
    raw = cm.connect()
    cursor = raw.cursor()
    try:
        # Two objects a page: a0 a1, a2 a3, then a4 and b.
        rows = packer.kept_unanalysed(cursor, pack_tid, -1, 2)
        assert [(zoid, tid) for zoid, tid, _ in rows] == [(b_zoid, pack_tid)]
        assert packer.kept_unanalysed(cursor, pack_tid, b_zoid, 2) == []
    finally:
        cm.close(raw, cursor)
    db.close()


def test_without_gc_no_references_are_read(open_storage):
    storage = open_storage(pack_gc=False)
    db = ZODB.DB(storage)
    dropped = _build(db, 30)
    _pack(storage)
    assert _count(storage, 'object_ref') == 0
    assert all(_exists(storage, oid) for oid in dropped)
    db.close()


def test_the_pack_time_stays_before_other_clients_open_transactions(
        open_storage, backend, keep_history):
    if not backend.capabilities().lists_open_transactions:
        pytest.skip('the database cannot list other sessions\' '
                    'transactions')
    storage = open_storage(pack_max_delay=0.5)
    db = ZODB.DB(storage)
    conn = db.open()
    root = conn.root()
    root['a'] = PersistentMapping({'x': PersistentMapping()})
    transaction.commit()
    oid = u64(root['a']['x']._p_oid)
    # Another client reads 'a' (its snapshot begins) ...
    other_db = ZODB.DB(open_storage())
    other_tm = transaction.TransactionManager()
    other = other_db.open(other_tm)
    seen = other.root()['a']['x']
    time.sleep(1.1)     # MySQL tells transaction starts in whole seconds
    # ... and the link to x is dropped after it began.
    del root['a']['x']
    transaction.commit()
    if keep_history:
        # The other client could still link x: the pack time moves back
        # to before its transaction began, when x was reachable.
        _pack(storage)
    else:
        # No state as of then to judge by: the pack waits for it to end,
        # at most pack-max-delay, then gives up removing nothing.
        with pytest.raises(PackError, match='another client has a '
                                            'transaction open'):
            _pack(storage)
    assert _exists(storage, oid)
    other.root()['b'] = seen
    other_tm.commit()
    other.close()
    other_db.close()
    _pack(storage)
    assert _exists(storage, oid)
    _reachable(storage)
    # Its own instances' transactions do not hold a pack back, though
    # mine's began before the last commit: the caller's connections are
    # its own business.  (Behind a transaction pooler the server sessions
    # of this process's snapshots are told by their polls, not by the
    # driver: test_pgbouncer.py collects this test.)
    mine_tm = transaction.TransactionManager()
    mine = db.open(mine_tm)
    mine.root()['b']
    transaction.begin()
    del root['b']
    transaction.commit()
    _pack(storage)
    assert not _exists(storage, oid)
    mine_tm.abort()
    mine.close()
    conn.close()
    db.close()


# -- the same history packed by FileStorage and by relstorage ------------

def _random_history(db, rng, transactions=40):
    """A random graph of mappings changed by ``transactions`` commits that
    only ever link objects reachable at the time (as an application does):
    new objects, new links (sharing, cycles), removed links (garbage) and
    changed values (new revisions).  Returns the commit times."""
    conn = db.open()
    root = conn.root()
    root['n'] = PersistentMapping()
    transaction.commit()
    times = []
    for _ in range(transactions):
        nodes = _walk_nodes(root)
        for _ in range(rng.randint(1, 8)):
            node = rng.choice(nodes)
            action = rng.random()
            if action < 0.45:
                child = PersistentMapping({'v': rng.random()})
                node[f'k{rng.randrange(10**6)}'] = child
                nodes.append(child)
            elif action < 0.6:
                node[f'k{rng.randrange(10**6)}'] = rng.choice(nodes)
            elif action < 0.85:
                keys = [k for k, v in node.items()
                        if isinstance(v, PersistentMapping)]
                if keys:
                    del node[rng.choice(keys)]
            else:
                node['v'] = rng.random()
        transaction.commit()
        times.append(time.time())
        time.sleep(0.002)
    conn.close()
    return times


def _walk_nodes(root):
    seen, todo, nodes = set(), [root], []
    while todo:
        node = todo.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        nodes.append(node)
        todo.extend(v for v in node.values()
                    if isinstance(v, PersistentMapping))
    return nodes


def _records(storage):
    """``{(oid, tid)}`` of the data records the storage's iterator lists."""
    found = set()
    for txn in storage.iterator():
        for record in txn:
            if record.data is not None:
                found.add((u64(record.oid), u64(record.tid)))
    return found


def _current(storage, oids):
    return {oid for oid in oids if _exists(storage, oid)}


def _agrees_with_filestorage(ours, tmp_path, seed, keep_history):
    rng = random.Random(seed)
    fs = FileStorage(str(tmp_path / 'Data.fs'))
    fs_db = ZODB.DB(fs)
    times = _random_history(fs_db, rng)
    ours.copyTransactionsFrom(fs)
    every = {oid for oid, _ in _records(fs)}
    # History-preserving: midway (which revisions stay), then up to now.
    # History-free has no state as of a past time to judge reachability
    # by (it keeps what was written after the pack time and judges the
    # rest on their current states, docs/operations.rst): up to now only.
    middle = (times[19] + times[20]) / 2
    for t in ((middle,) if keep_history else ()) + (time.time() + 1,):
        fs.pack(t, referencesf)
        ours.pack(t, referencesf)
        if keep_history:
            assert _records(ours) == _records(fs)
        assert _current(ours, every) == _current(fs, every)
    assert _reachable(ours) == _reachable(fs)
    fs_db.close()


@pytest.mark.parametrize('seed', [1, 2])
def test_packing_agrees_with_filestorage(open_storage, keep_history,
                                         tmp_path, seed):
    _agrees_with_filestorage(open_storage(), tmp_path, seed, keep_history)


@pytest.mark.parametrize('span', [0, 10**9], ids=['by-key', 'by-range'])
def test_mysql_removes_revisions_by_key_or_by_range_alike(
        open_storage, backend, keep_history, tmp_path, monkeypatch, span):
    """MySQL history-preserving removes a batch's revisions of
    object_state over its key range where its objects are dense, else by
    key (RANGE_SPAN): forced one way, then the other, the same records
    stay as FileStorage keeps."""
    if not backend.name.startswith('mysql') or not keep_history:
        pytest.skip('MySQL history-preserving only')
    ours = open_storage(pack_batch_timeout=0.0)
    packer = ours._adapter.packer
    monkeypatch.setattr(packer, 'RANGE_SPAN', span)
    seen = set()
    original = packer.delete_doomed

    class Spy:
        def __init__(self, cursor):
            self._cursor = cursor

        def execute(self, statement, *args):
            seen.add(statement)
            return self._cursor.execute(statement, *args)

        def __getattr__(self, name):
            return getattr(self._cursor, name)

    monkeypatch.setattr(packer, 'delete_doomed', lambda cursor, *args:
                        original(Spy(cursor), *args))
    _agrees_with_filestorage(ours, tmp_path, 1, True)
    assert (packer.DELETE_STATE_RANGE in seen) == bool(span)
    assert (packer.DELETE_STATE in seen) == (not span)


# -- writers throughout a pack ----------------------------------------------

def _mover(storage, stop, errors, rng, moves):
    """Move objects between the root's bins, add new ones and drop some,
    on a storage of its own (another client), until ``stop``."""
    db = ZODB.DB(storage)
    try:
        while not stop.is_set():
            conn = db.open()
            try:
                bins = conn.root()['bins']
                source, target = rng.sample(range(len(bins)), 2)
                keys = list(bins[source].keys())
                if keys:
                    key = rng.choice(keys)
                    item = bins[source].pop(key)
                    if rng.random() < 0.8:
                        bins[target][key] = item
                bins[target][f'n{rng.randrange(10**9)}'] = PersistentMapping(
                    {'child': PersistentMapping()})
                transaction.commit()
                moves.append(1)
            except ConflictError:
                transaction.abort()
            except Exception as e:  # reported by the test
                transaction.abort()
                errors.append(e)
                return
            finally:
                conn.close()
    finally:
        db.close()


def test_writers_keep_committing_and_lose_nothing_during_a_pack(
        open_storage):
    storage = open_storage(pack_batch_timeout=0.005, pack_duty_cycle=0.5)
    db = ZODB.DB(storage)
    conn = db.open()
    root = conn.root()
    root['bins'] = [PersistentMapping() for _ in range(6)]
    transaction.commit()
    for index in range(600):
        bins = root['bins']
        bins[index % 6][f'i{index}'] = PersistentMapping(
            {'child': PersistentMapping()})
        if index % 100 == 99:
            transaction.commit()
    dropped = []
    for index in range(0, 600, 2):
        item = root['bins'][index % 6].pop(f'i{index}')
        dropped += [u64(item._p_oid), u64(item['child']._p_oid)]
    transaction.commit()
    conn.close()
    stop = threading.Event()
    errors, moves = [], []
    writers = [threading.Thread(
        target=_mover,
        args=(open_storage(), stop, errors, random.Random(n), moves))
        for n in range(2)]
    for writer in writers:
        writer.start()

    class WaitForWriters(Progress):
        # At the first deletion batch: let the writers commit a few times
        # (so that commits certainly happen between the analysis and the
        # deletions, and between batches).
        during = 0

        def add(self, count):
            super().add(count)
            if self.what in DELETING.values() and not self.during:
                before = len(moves)
                deadline = time.monotonic() + 30
                while len(moves) < before + 3 and \
                        time.monotonic() < deadline and not errors:
                    time.sleep(0.01)
                self.during = len(moves) - before

    progress = WaitForWriters()
    try:
        time.sleep(0.2)
        _pack(storage, progress=progress)
        during = progress.during
    finally:
        stop.set()
        for writer in writers:
            writer.join(60)
    assert not errors, errors
    assert during > 0
    _reachable(storage)
    # The garbage made before the pack went.
    assert not any(_exists(storage, oid) for oid in dropped)
    db.close()



def test_the_analysis_runs_in_a_transaction_committers_pass(
        open_storage, backend, monkeypatch):
    """pack_object is filled inside the pack's READ COMMITTED transaction
    (on MySQL, not after the TRUNCATE that empties it, which commits: what
    follows would run in autocommit at REPEATABLE READ, reading object_state
    with shared locks that committers waited on or deadlocked with), and a
    commit that changes and adds objects while it is open goes through."""
    if backend.capabilities().database_wide_write_lock:
        pytest.skip('one write lock for the whole database')
    storage = open_storage(commit_lock_timeout=10)
    db = ZODB.DB(storage)
    _build(db, 60)
    packer = storage._adapter.packer
    fill = packer.fill
    seen = {}

    def fill_then_commit(cursor, pack_tid, since=None):
        count = fill(cursor, pack_tid, since)
        if backend.name.startswith('mysql'):
            cursor.execute('SELECT @@in_transaction')
            seen['in_transaction'] = cursor.fetchone()[0]
        client = db.open()
        root = client.root()
        for key in [k for k in root.keys() if isinstance(k, int)][:10]:
            root[key]['changed'] = True
        root['new'] = PersistentMapping()
        started = time.monotonic()
        transaction.commit()
        seen['commit'] = time.monotonic() - started
        client.close()
        return count
    monkeypatch.setattr(packer, 'fill', fill_then_commit)
    _pack(storage)
    assert seen['commit'] < 2, seen
    if backend.name.startswith('mysql'):
        assert seen['in_transaction'] == 1, seen
    assert len(_reachable(storage)) == 1 + 30 * 2 + 1
    db.close()


def test_postgresql_packs_without_jit(open_storage, backend, monkeypatch):
    """The pack's session switches JIT compilation off (server default:
    on), so that the deletion batches, each a few short statements, are
    not compiled over and over."""
    if not backend.name.startswith('postgresql'):
        pytest.skip('a PostgreSQL setting')
    storage = open_storage()
    db = ZODB.DB(storage)
    _build(db, 20)
    seen = _record_setting(monkeypatch, storage._adapter.packer, 'doomed',
                           'jit')
    _pack(storage)
    assert seen and set(seen) == {'off'}, seen
    db.close()


def test_postgresql_packs_with_its_wal_compressed(open_storage, backend,
                                                 monkeypatch):
    """The pack's session compresses its WAL's page images with lz4 where
    the server has it and the role may (the tests' role is a superuser),
    and the server does not already; a server-wide choice stays."""
    if not backend.name.startswith('postgresql'):
        pytest.skip('a PostgreSQL setting')
    storage = open_storage()
    packer = storage._adapter.packer
    version, lz4, server = query(storage, """
        SELECT current_setting('server_version_num')::int,
               'lz4' = ANY(enumvals), setting
        FROM pg_settings WHERE name = 'wal_compression'""")[0]
    if version < packer.WAL_LZ4 or not lz4:
        pytest.skip('this server has no lz4 for its WAL')
    db = ZODB.DB(storage)
    _build(db, 20)
    seen = _record_setting(monkeypatch, packer, 'doomed', 'wal_compression')
    _pack(storage)
    assert seen and set(seen) == ({'lz4'} if server == 'off' else {server})
    db.close()


def test_postgresql_packs_writing_its_files_as_it_goes(open_storage, backend,
                                                      monkeypatch):
    """The pack's session asks the kernel to write what it writes to the
    server's files as it goes (backend_flush_after), where the server
    leaves it at 0, so that no burst of it stalls others' commits 30
    seconds later; a server-wide choice stays."""
    if not backend.name.startswith('postgresql'):
        pytest.skip('a PostgreSQL setting')
    storage = open_storage()
    packer = storage._adapter.packer
    server = query(storage, 'SHOW backend_flush_after')[0][0]
    db = ZODB.DB(storage)
    _build(db, 20)
    seen = _record_setting(monkeypatch, packer, 'doomed',
                           'backend_flush_after')
    _pack(storage)
    assert seen and set(seen) == (
        {packer.FLUSH_AFTER} if server == '0' else {server}), seen
    db.close()


def _record_setting(monkeypatch, packer, name, setting):
    """Have ``packer.name`` (a method taking the cursor first) record the
    session's ``setting`` before each call; returns the list of values."""
    method = getattr(packer, name)
    seen = []

    def recording(cursor, *args):
        cursor.execute('SHOW ' + setting)
        seen.append(cursor.fetchone()[0])
        return method(cursor, *args)
    monkeypatch.setattr(packer, name, recording)
    return seen


def test_postgresql_walks_a_big_frontier_with_hash_joins(
        open_storage, backend, monkeypatch):
    """A step of the walk from a frontier of WALK_BIG_FRONTIER objects or
    more runs without nested loops (the pack's tables have no statistics);
    the setting ends with the step, and the objects reached are the
    same."""
    if not backend.name.startswith('postgresql'):
        pytest.skip('a PostgreSQL plan setting')
    from relstorage.adapters import pack as shared
    from relstorage.adapters.postgresql import pack as pg
    storage = open_storage()
    db = ZODB.DB(storage)
    dropped = _build(db, 40)
    seen = []
    step = shared.Packer.walk_step

    def walk_step(self, cursor, depth, frontier=None):
        cursor.execute('SHOW enable_nestloop')
        seen.append((frontier, cursor.fetchone()[0]))
        return step(self, cursor, depth, frontier)
    monkeypatch.setattr(shared.Packer, 'walk_step', walk_step)
    after = _record_setting(monkeypatch, storage._adapter.packer, 'doomed',
                            'enable_nestloop')
    monkeypatch.setattr(pg, 'WALK_BIG_FRONTIER', 2)
    kept = _reachable(storage)
    _pack(storage)
    # The root's step (a frontier of one) keeps nested loops; the root's
    # 20 mappings and their children are frontiers of 20.
    assert seen[0] == (1, 'on')
    assert (20, 'off') in seen
    assert all(setting == ('off' if frontier >= 2 else 'on')
               for frontier, setting in seen), seen
    assert after and set(after) == {'on'}
    assert _reachable(storage) == kept
    assert not any(_exists(storage, oid) for oid in dropped)
    db.close()


def test_the_packer_provides_its_interface(open_storage):
    from relstorage.adapters.interfaces import IPacker
    from relstorage.adapters.interfaces import IPagePacker
    from zope.interface.verify import verifyObject
    storage = open_storage()
    packer = storage._adapter.packer
    assert verifyObject(IPacker, packer)
    # The pass by page where the server can (the packer says so once a
    # pack session has begun).
    if by_page(storage):
        assert verifyObject(IPagePacker, packer)


# -- the analysis's pages, read a page ahead -------------------------------

class _PagedPacker:
    """scan_page and tail_page over fixed rows ``(zoid, tid, state)``;
    remembers each read: its start and whether the caller's thread made
    it.  A read starting after zoid ``fail_after`` raises."""

    def __init__(self, rows, fail_after=None):
        self.rows = rows
        self.reads = []
        self.fail_after = fail_after

    def _read(self, start, rows):
        self.reads.append(
            (start, threading.current_thread() is threading.main_thread()))
        if start[-1] == self.fail_after:
            raise RuntimeError('the server went away')
        return rows

    def scan_page(self, cursor, since, since_zoid, scan_tid, zoid, limit):
        return self._read((zoid,), [
            r for r in self.rows
            if r[0] > zoid and (r[1], r[0]) > (since, since_zoid)
            and r[1] <= scan_tid][:limit])

    def tail_page(self, cursor, tid, zoid, up_to, limit):
        rows = sorted((r for r in self.rows
                       if (r[1], r[0]) > (tid, zoid) and r[1] <= up_to),
                      key=lambda r: (r[1], r[0]))
        return self._read((tid, zoid), rows[:limit])


class _NoTranslation:
    def translate(self, what):
        return contextlib.nullcontext()


@pytest.fixture
def pages(monkeypatch):
    monkeypatch.setattr(pack_analysis, 'PAGE', 2)
    made = []

    def make(rows, up_to=100, fail_after=None, alone=None):
        packer = _PagedPacker(rows, fail_after)
        made.append(pack_analysis._Pages(packer, _NoTranslation(), None,
                                         up_to, alone))
        return made[-1], packer
    yield make
    for each in made:
        each.close()
        assert each._thread is None


def _scan_all(reader):
    """Every row of a first analysis's scan, page after page."""
    from relstorage.pack.analysis import SCAN
    got = []
    start = (SCAN, 0, 0, 10, -1)
    while True:
        page = reader.get(start)
        if not page:
            return got
        got.extend(page)
        start = (SCAN, 0, 0, 10, page[-1][0])


def test_analysis_pages_are_read_ahead_by_another_thread(pages):
    rows = [(zoid, 10, b'') for zoid in range(1, 6)]
    reader, packer = pages(rows)
    assert _scan_all(reader) == rows
    # The first page is read when asked for; each later one by the pages
    # thread, once, while the caller had the one before.
    assert packer.reads == [((-1,), True), ((2,), False), ((4,), False),
                            ((5,), False)]


def test_no_page_is_read_ahead_while_others_commit(pages):
    rows = [(zoid, 10, b'') for zoid in range(1, 8)]
    # Others commit during the steps of the first two pages, then stop.
    alone = iter([False, False, True, True])
    reader, packer = pages(rows, alone=lambda: next(alone))
    assert _scan_all(reader) == rows
    # The pages of the first two steps are read when asked for, in the
    # caller's thread; once alone, the next ones ahead by the thread.
    assert packer.reads == [((-1,), True), ((2,), True), ((4,), True),
                            ((6,), False), ((7,), False)]


def test_analysis_tail_pages_go_on_from_the_last_tid_and_zoid(pages):
    from relstorage.pack.analysis import TAIL
    rows = [(3, 11, b''), (1, 12, b''), (2, 12, b''), (1, 13, b'')]
    reader, packer = pages(rows, up_to=12)
    first = reader.get((TAIL, 10, 0))
    assert first == [(3, 11, b''), (1, 12, b'')]
    assert reader.get((TAIL, 12, 1)) == [(2, 12, b'')]
    assert reader.get((TAIL, 12, 2)) == []
    assert [start for start, _ in packer.reads] == [(10, 0), (12, 1), (12, 2)]


def test_a_page_read_ahead_is_dropped_when_another_is_asked_for(pages):
    from relstorage.pack.analysis import SCAN
    rows = [(zoid, 10, b'') for zoid in range(1, 6)]
    reader, packer = pages(rows)
    assert reader.get((SCAN, 0, 0, 10, -1)) == rows[:2]
    # The caller's state says zoid 3 was done (another process went on,
    # say): the page read ahead (after 2) is not the one it wants.
    assert reader.get((SCAN, 0, 0, 10, 3)) == rows[3:]
    assert packer.reads[:3] == [((-1,), True), ((2,), False), ((3,), True)]


def test_a_failed_read_ahead_raises_in_the_caller(pages):
    from relstorage.pack.analysis import SCAN
    rows = [(zoid, 10, b'') for zoid in range(1, 6)]
    reader, packer = pages(rows, fail_after=2)
    assert reader.get((SCAN, 0, 0, 10, -1)) == rows[:2]
    with pytest.raises(RuntimeError, match='went away'):
        reader.get((SCAN, 0, 0, 10, 2))
    # The next page is read again, in the caller's thread.
    with pytest.raises(RuntimeError, match='went away'):
        reader.get((SCAN, 0, 0, 10, 2))
    assert packer.reads[-1] == ((2,), True)
