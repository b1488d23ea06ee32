"""What ZODB's conformance mixins do not cover: snapshots, read-current
conflicts, reopening, bad values at store(), large transactions."""
import time

import pytest
import transaction
import ZODB
from BTrees.OOBTree import OOBTree
from persistent.mapping import PersistentMapping
from ZODB.Connection import TransactionMetaData
from ZODB.POSException import ConflictError
from ZODB.POSException import POSKeyError
from ZODB.POSException import ReadConflictError
from ZODB.POSException import StorageError
from ZODB.POSException import StorageTransactionError
from ZODB.tests.MinPO import MinPO
from ZODB.tests.StorageTestBase import zodb_pickle
from ZODB.tests.StorageTestBase import zodb_unpickle
from ZODB.utils import p64
from ZODB.utils import z64

import relstorage.storage.commit
from relstorage.tids import tid_for_time


@pytest.fixture
def db(open_storage):
    database = ZODB.DB(open_storage())
    yield database
    database.close()


def _two_connections(db):
    tm1, tm2 = transaction.TransactionManager(), transaction.TransactionManager()
    return db.open(tm1), tm1, db.open(tm2), tm2


def test_snapshot_is_stable_within_a_transaction(db):
    c1, tm1, c2, tm2 = _two_connections(db)
    c1.root()['a'] = PersistentMapping(v=1)
    c1.root()['b'] = PersistentMapping(v=1)
    tm1.commit()
    tm2.begin()
    a2 = c2.root()['a']
    assert a2['v'] == 1
    # Another connection changes both objects.
    c1.root()['a']['v'] = 2
    c1.root()['b']['v'] = 2
    tm1.commit()
    # c2 has not started a new transaction: b is read from its snapshot,
    # consistent with the a it already read.
    assert c2.root()['b']['v'] == 1
    tm2.begin()
    assert c2.root()['a']['v'] == 2
    assert c2.root()['b']['v'] == 2


def test_read_current_conflict(db):
    c1, tm1, c2, tm2 = _two_connections(db)
    c1.root()['checked'] = PersistentMapping(v=1)
    c1.root()['written'] = PersistentMapping(v=1)
    tm1.commit()
    tm2.begin()
    checked = c2.root()['checked']
    value = checked['v']    # readCurrent needs a loaded object
    c2.readCurrent(checked)
    c2.root()['written']['v'] = value + 1
    # Meanwhile the object c2 relies on changes.
    c1.root()['checked']['v'] = 10
    tm1.commit()
    with pytest.raises(ReadConflictError):
        tm2.commit()
    tm2.abort()
    assert c2.root()['written']['v'] == 1
    # Retried on fresh data, it succeeds.
    value = c2.root()['checked']['v']
    c2.readCurrent(c2.root()['checked'])
    c2.root()['written']['v'] = value + 1
    tm2.commit()
    tm1.begin()
    assert c1.root()['written']['v'] == 11


def test_btree_conflicts_are_resolved(db):
    c1, tm1, c2, tm2 = _two_connections(db)
    c1.root()['tree'] = OOBTree()
    tm1.commit()
    tm2.begin()
    c1.root()['tree']['x'] = 1
    c2.root()['tree']['y'] = 2
    tm1.commit()
    tm2.commit()    # same bucket, different keys: merged at vote
    tm1.begin()
    assert dict(c1.root()['tree']) == {'x': 1, 'y': 2}


def test_unresolvable_conflict(db):
    c1, tm1, c2, tm2 = _two_connections(db)
    c1.root()['m'] = PersistentMapping(v=0)
    tm1.commit()
    tm2.begin()
    c1.root()['m']['v'] = 1
    c2.root()['m']['v'] = 2
    tm1.commit()
    with pytest.raises(ConflictError) as e:
        tm2.commit()
    assert 'PersistentMapping' in str(e.value)
    tm2.abort()


def test_reopen_keeps_every_committed_object(open_storage):
    db = ZODB.DB(open_storage())
    with db.transaction() as conn:
        conn.root()['tree'] = tree = OOBTree()
        for i in range(2000):
            tree[i] = PersistentMapping(n=i)
    with db.transaction() as conn:
        for i in range(0, 2000, 7):
            conn.root()['tree'][i]['n'] = -i
    last = db.storage.lastTransaction()
    db.close()
    db = ZODB.DB(open_storage())
    try:
        assert db.storage.lastTransaction() == last
        with db.transaction() as conn:
            tree = conn.root()['tree']
            assert len(tree) == 2000
            for i in range(2000):
                assert tree[i]['n'] == (-i if i % 7 == 0 else i)
    finally:
        db.close()


def test_store_rejects_bad_values_naming_the_oid(open_storage):
    storage = open_storage()
    oid = storage.new_oid()
    t = TransactionMetaData()
    storage.tpc_begin(t)
    try:
        with pytest.raises(StorageError, match=repr(oid).replace('\\', '\\\\')):
            storage.store(oid, z64, 'not bytes', '', t)
        with pytest.raises(ValueError, match='oid must be 8 bytes'):
            storage.store(b'short', z64, b'data', '', t)
        with pytest.raises(ValueError, match='larger than a database'):
            storage.store(b'\xff' * 8, z64, b'data', '', t)
    finally:
        storage.tpc_abort(t)


def test_large_transaction_is_staged_in_parts(open_storage, monkeypatch):
    monkeypatch.setattr(relstorage.storage.commit, 'SPILL_BYTES', 2000)
    storage = open_storage()
    oids = [storage.new_oid() for _ in range(300)]
    t = TransactionMetaData()
    storage.tpc_begin(t)
    for i, oid in enumerate(oids):
        storage.store(oid, z64, zodb_pickle(MinPO(i)), '', t)
    storage.tpc_vote(t)
    tid = storage.tpc_finish(t)
    for i, oid in enumerate(oids):
        data, serial = storage.load(oid)
        assert zodb_unpickle(data) == MinPO(i) and serial == tid
    # A conflict in a spilled row is still found at vote.
    t = TransactionMetaData()
    storage.tpc_begin(t)
    for i, oid in enumerate(oids):
        storage.store(oid, z64 if i == 5 else tid, zodb_pickle(MinPO(-i)),
                      '', t)
    with pytest.raises(ConflictError):
        storage.tpc_vote(t)
    storage.tpc_abort(t)
    assert zodb_unpickle(storage.load(oids[7])[0]) == MinPO(7)


def test_small_commits_skip_the_staging_table_where_it_costs_more(
        open_storage, monkeypatch):
    """PostgreSQL (``inline_limit``) sends a small commit's rows with the
    last step instead of staging them; a commit past the limit, and every
    commit on the other databases, is staged.  Either way the states
    (every byte value, a deletion) arrive, in store order."""
    storage = open_storage()
    mover = storage._adapter.mover
    staged = []
    upload = mover.upload_temp

    def counting(cursor, rows, replace=()):
        staged.append(len(rows))
        return upload(cursor, rows, replace)
    monkeypatch.setattr(mover, 'upload_temp', counting)
    limit = storage._adapter.txncontrol.inline_limit
    small = 5
    large = limit[0] + 1 if limit else 6
    oids = [storage.new_oid() for _ in range(large)]
    binary = bytes(range(256))

    def commit(values, serials, delete=None):
        t = TransactionMetaData()
        storage.tpc_begin(t)
        # Stored in reverse oid order: the order the iterator gives back.
        for oid in reversed(oids[:len(values)]):
            if oid == delete:
                storage.deleteObject(oid, serials[oid], t)
            else:
                storage.store(oid, serials.get(oid, z64),
                              zodb_pickle(MinPO(values[oid])), '', t)
        storage.tpc_vote(t)
        tid = storage.tpc_finish(t)
        return {oid: tid for oid in oids[:len(values)]}

    values = {oid: binary + bytes([i % 256]) for i, oid in enumerate(oids)}
    serials = commit({oid: values[oid] for oid in oids[:small]}, {})
    assert staged == ([] if limit else [small])
    for oid in oids[:small]:
        data, serial = storage.load(oid)
        assert zodb_unpickle(data) == MinPO(values[oid])
        assert serial == serials[oid]
    if storage._options.keep_history:
        records = list(storage.iterator(serials[oids[0]]))[0]
        assert [r.oid for r in records] == list(reversed(oids[:small]))
    # One row more than the limit: staged.
    del staged[:]
    serials = commit(values, serials)
    assert staged == [large]
    if limit:
        # Two objects, but more pickle bytes than the limit: staged.
        del staged[:]
        big = {oid: b'x' * (limit[1] // 2) for oid in oids[:2]}
        serials.update(commit(big, serials))
        assert staged == [2]
        assert zodb_unpickle(storage.load(oids[0])[0]) == MinPO(big[oids[0]])
    # Small again, with a deletion among the changes.
    del staged[:]
    commit({oid: values[oid] for oid in oids[:small]}, serials,
           delete=oids[1])
    assert staged == ([] if limit else [small])
    with pytest.raises(POSKeyError):
        storage.load(oids[1])
    assert zodb_unpickle(storage.load(oids[2])[0]) == MinPO(values[oids[2]])


def test_a_commit_that_only_checks_a_serial_commits(open_storage):
    """No row to move (the finish batch or function gets none)."""
    storage = open_storage()
    oid = storage.new_oid()
    tid = _commit(storage, oid, z64, 1)
    t = TransactionMetaData()
    storage.tpc_begin(t)
    storage.checkCurrentSerialInTransaction(oid, tid, t)
    storage.tpc_vote(t)
    later = storage.tpc_finish(t)
    assert later > tid == storage.load(oid)[1]
    assert storage.lastTransaction() == later


@pytest.mark.parametrize('writes', [True, False],
                         ids=['with-a-write', 'only-the-check'])
def test_a_read_current_object_being_committed_fails_the_vote_at_once(
        open_storage, writes):
    """A vote whose read-current object another commit has locked (voted,
    not finished) raises ReadConflictError without waiting for that
    commit, whether it writes anything or not; once the other commit is
    done, the retry on fresh data commits."""
    storage = open_storage(commit_lock_timeout=10)
    if storage._adapter.capabilities.database_wide_write_lock:
        pytest.skip('one write lock for the database: the vote waits')
    checked, written = storage.new_oid(), storage.new_oid()
    serial = _commit(storage, checked, z64, 1)
    written_serial = _commit(storage, written, z64, 1)
    other = storage.new_instance()

    def begin(checked_serial, value):
        t = TransactionMetaData()
        storage.tpc_begin(t)
        storage.checkCurrentSerialInTransaction(checked, checked_serial, t)
        if writes:
            storage.store(written, written_serial, zodb_pickle(MinPO(value)),
                          '', t)
        return t
    try:
        t_other = TransactionMetaData()
        other.tpc_begin(t_other)
        other.store(checked, serial, zodb_pickle(MinPO(2)), '', t_other)
        other.tpc_vote(t_other)
        t = begin(serial, 2)
        began = time.monotonic()
        with pytest.raises(ReadConflictError) as e:
            storage.tpc_vote(t)
        assert time.monotonic() - began < 5
        assert e.value.oid in (None, checked)
        storage.tpc_abort(t)
        new_serial = other.tpc_finish(t_other)
        t = begin(new_serial, 3)
        storage.tpc_vote(t)
        storage.tpc_finish(t)
    finally:
        other.release()


@pytest.mark.parametrize('objects,explicit', [(1, False), (300, False),
                                               (1, True)],
                         ids=['as-arguments', 'staged', 'step-by-step'])
def test_a_new_oid_stored_twice_concurrently_is_a_conflict(
        open_storage, backend, objects, explicit):
    """Two commits store the same new oid (serial 0) at once, each voting
    before either finishes: the second to finish fails with a
    ConflictError; it does not overwrite the first one's object.  (Only
    explicit oids can collide.  On SQLite the second vote would wait for
    the database's write lock, which the first holds until it finishes.)
    """
    if backend.name == 'sqlite':
        pytest.skip('the two votes cannot overlap on SQLite')
    root = open_storage()
    oids = [root.new_oid() for _ in range(objects)]
    if explicit:
        # Above what the allocator handed out: the step-by-step finish.
        oids = [p64(int.from_bytes(oid, 'big') + 10 ** 6) for oid in oids]
    first, second = root.new_instance(), root.new_instance()
    try:
        txns = []
        for storage, value in ((first, 1), (second, 2)):
            t = TransactionMetaData()
            storage.tpc_begin(t)
            for oid in oids:
                storage.store(oid, z64, zodb_pickle(MinPO(value)), '', t)
            storage.tpc_vote(t)
            txns.append(t)
        first.tpc_finish(txns[0])
        with pytest.raises(ConflictError):
            second.tpc_finish(txns[1])
        second.tpc_abort(txns[1])
        assert zodb_unpickle(root.load(oids[-1])[0]) == MinPO(1)
    finally:
        first.release()
        second.release()


def _commit(storage, oid, serial, value):
    t = TransactionMetaData()
    storage.tpc_begin(t)
    storage.store(oid, serial, zodb_pickle(MinPO(value)), '', t)
    storage.tpc_vote(t)
    return storage.tpc_finish(t)


def test_begin_and_poll_agrees_with_last_tid_and_changes(open_storage):
    """The snapshot's start and the poll in one round trip (PostgreSQL and
    MySQL read both with one statement) give what the two separate
    queries give, from any starting point."""
    storage = open_storage()
    oids = [storage.new_oid() for _ in range(3)]
    tids = [_commit(storage, oid, z64, i) for i, oid in enumerate(oids)]
    tids.append(_commit(storage, oids[0], tids[0], 9))
    tids = [int.from_bytes(tid, 'big') for tid in tids]
    last = tids[-1]
    adapter = storage._adapter
    cm, poller = adapter.connmanager, adapter.poller
    conn, cursor = cm.open_load()
    try:
        for after in (None, 0, tids[0], tids[1], last, last + 1):
            got_last, changes = poller.begin_and_poll(cm, conn, cursor, after)
            assert got_last == poller.last_tid(cursor) == last
            expected = ([] if after is None or after >= last
                        else poller.changes(cursor, after, last))
            assert sorted(changes) == sorted(expected)
            cm.rollback(conn, cursor)
        # oids[1] and oids[2], then oids[0] again (its newer tid only).
        changes = poller.begin_and_poll(cm, conn, cursor, tids[0])[1]
        assert sorted(changes) == sorted([
            (int.from_bytes(oids[1], 'big'), tids[1]),
            (int.from_bytes(oids[2], 'big'), tids[2]),
            (int.from_bytes(oids[0], 'big'), tids[3])])
        # Still in that snapshot: ending it in the same call, the new one
        # sees a commit made since.
        newer = int.from_bytes(_commit(storage, oids[1], p64(tids[1]), 7),
                               'big')
        assert poller.begin_and_poll(cm, conn, cursor, last,
                                     end_previous=True) == (
            newer, [(int.from_bytes(oids[1], 'big'), newer)])
        cm.rollback(conn, cursor)
    finally:
        cm.close(conn, cursor)


def test_the_snapshot_sync_ends_is_rolled_back_by_the_next_poll(
        open_storage, backend, monkeypatch):
    """ZODB's newTransaction calls sync() then poll_invalidations(): the
    old snapshot's ROLLBACK travels with the new one's BEGIN (where the
    poller can send both), the new snapshot sees what was committed
    meanwhile, and afterCompletion() after a sync still leaves the
    connection outside any transaction."""
    from relstorage.adapters.poll import Poller
    root = open_storage()
    reader = root.new_instance()
    try:
        oid = root.new_oid()
        tid1 = _commit(root, oid, z64, 1)
        reader.poll_invalidations()
        assert reader.load(oid)[1] == tid1
        tid2 = _commit(root, oid, tid1, 2)
        cm = root._adapter.connmanager
        rollbacks = []
        rollback = cm.rollback
        # (The reader's: the idle thread may end what root's commits left.)
        monkeypatch.setattr(cm, 'rollback', lambda conn, cursor: (
            conn is reader._load_conn and rollbacks.append(conn),
            rollback(conn, cursor)))
        reader.sync()
        assert reader.poll_invalidations() == [oid]
        assert reader.load(oid) == (zodb_pickle(MinPO(2)), tid2)
        shared = type(root._adapter.poller).begin_and_poll is (
            Poller.begin_and_poll)
        assert len(rollbacks) == (1 if shared else 0)
        reader.sync()
        reader.afterCompletion()
        # The ROLLBACK does not hold up afterCompletion: the next poll
        # carries it, or, with none coming, the idle thread sends it.
        deadline = time.monotonic() + 5
        while len(rollbacks) < (2 if shared else 1):
            assert time.monotonic() < deadline, 'the snapshot stayed open'
            time.sleep(0.02)
        with reader._lock:
            if not backend.name.startswith('mysql'):
                # (MySQL's drivers do not say; ROLLBACK is sent regardless.)
                assert not cm._in_transaction(reader._load_conn)
    finally:
        reader.release()


def test_poll_reports_others_changes_not_our_own(open_storage):
    root = open_storage()
    mine = root.new_instance()
    other = root.new_instance()
    try:
        assert mine.poll_invalidations() == []
        oid1, oid2 = root.new_oid(), root.new_oid()
        for storage, oid in ((mine, oid1), (other, oid2)):
            _commit(storage, oid, z64, 1)
        assert mine.poll_invalidations() == [oid2]
        assert mine.poll_invalidations() == []
    finally:
        mine.release()
        other.release()


def test_deleted_object_raises_poskeyerror(open_storage):
    storage = open_storage()
    oid = storage.new_oid()
    tid = _commit(storage, oid, z64, 1)
    t = TransactionMetaData()
    storage.tpc_begin(t)
    storage.deleteObject(oid, tid, t)
    storage.tpc_vote(t)
    storage.tpc_finish(t)
    with pytest.raises(POSKeyError):
        storage.load(oid)


def test_restored_tids_and_oids_keep_allocators_ahead(open_storage):
    storage = open_storage()
    high = p64(5000)
    t = TransactionMetaData()
    # A tid a minute ahead of every clock, as a copied database may hold.
    wanted_tid = p64(tid_for_time(time.time() + 60))
    storage.tpc_begin(t, wanted_tid)
    storage.restore(high, wanted_tid, zodb_pickle(MinPO(1)), '', None, t)
    storage.tpc_vote(t)
    assert storage.tpc_finish(t) == wanted_tid
    assert storage.new_oid() > high
    # A later commit chooses a later tid.
    assert _commit(storage, high, wanted_tid, 2) > wanted_tid


def test_zap_all_empties_the_database(open_storage):
    storage = open_storage()
    oid = storage.new_oid()
    _commit(storage, oid, z64, 1)
    storage._adapter.schema.zap_all()
    storage.sync()
    assert len(storage) == 0
    with pytest.raises(POSKeyError):
        storage.load(oid)


def test_state_larger_than_the_server_allows_fails_at_store(open_storage):
    storage = open_storage()
    limit = getattr(storage._adapter.connmanager, 'max_allowed_packet', None)
    if not limit:
        pytest.skip('this database has no per-statement size limit')
    oid = storage.new_oid()
    t = TransactionMetaData()
    storage.tpc_begin(t)
    try:
        with pytest.raises(StorageError) as e:
            storage.store(oid, z64, b'x' * limit, '', t)
        assert 'max_allowed_packet' in str(e.value)
        assert repr(oid) in str(e.value)
    finally:
        storage.tpc_abort(t)


def test_tids_follow_the_clock(db):
    """Whichever clock chooses it (the server's, maybe inside a function),
    a new tid encodes the time of the commit."""
    from relstorage.tids import tid_time
    conn = db.open()
    conn.root()['when'] = PersistentMapping()
    before = time.time()
    transaction.commit()
    after = time.time()
    committed = tid_time(conn.root()['when']._p_serial)
    conn.close()
    # Server and client share this machine's clock; allow for rounding.
    assert before - 1 <= committed <= after + 1


def test_small_large_and_deleted_states_in_one_commit(open_storage):
    """States of every size (and deletions) staged together come back
    byte for byte, whatever way the adapter sends each."""
    storage = open_storage()
    sizes = [0, 1, 250, 70000, 300000]
    oids = [storage.new_oid() for _ in sizes]
    states = [zodb_pickle(MinPO(bytes(range(256)) * (n // 256) + b'\0' * (n % 256)))
              for n in sizes]
    t = TransactionMetaData()
    storage.tpc_begin(t)
    for oid, state in zip(oids, states):
        storage.store(oid, z64, state, '', t)
    storage.tpc_vote(t)
    tid = storage.tpc_finish(t)
    for oid, state in zip(oids, states):
        assert storage.load(oid) == (state, tid)
    t = TransactionMetaData()
    storage.tpc_begin(t)
    storage.deleteObject(oids[2], tid, t)
    storage.tpc_vote(t)
    storage.tpc_finish(t)
    with pytest.raises(POSKeyError):
        storage.load(oids[2])
    assert storage.load(oids[3])[0] == states[3]


def test_oid_blocks_reserved_in_one_call_are_unique(open_storage):
    storage = open_storage()
    adapter = storage._adapter
    cm = adapter.connmanager
    conn, cursor = cm.open_store()
    try:
        first = adapter.oids.new_oids(cursor, 3)
        second = adapter.oids.new_oids(cursor, 1)
    finally:
        cm.close(conn, cursor)
    block = adapter.oids.BLOCK
    assert len(set(first)) == len(first) == 3 * block
    assert first == sorted(first)
    assert len(second) == block and min(second) > max(first)


def test_oid_lists_written_into_statements_are_ints_only():
    # PostgreSQL gets lists of oids as one array literal, MySQL as the text
    # of IN (...): both are made by our code, from ints only.
    from relstorage.adapters.mysql.objects import in_list
    from relstorage.adapters.postgresql.drivers import oid_array
    assert oid_array([3, 1, 2 ** 63 - 1]) == '{3,1,9223372036854775807}'
    assert oid_array([]) == '{}'
    assert in_list([5, 7]) == '5,7'
    with pytest.raises(TypeError, match="oid '1' is not an int"):
        in_list([5, '1'])


def _decode_binary_copy(data):
    """Rows of PostgreSQL's binary COPY format, read field by field: each
    field's bytes, or None for NULL."""
    import struct
    assert data.startswith(b'PGCOPY\n\xff\r\n\x00' + bytes(8))
    pos, rows = 19, []
    while True:
        (count,) = struct.unpack_from('!h', data, pos)
        pos += 2
        if count == -1:
            assert pos == len(data)
            return rows
        row = []
        for _ in range(count):
            (size,) = struct.unpack_from('!i', data, pos)
            pos += 4
            row.append(None if size == -1 else data[pos:pos + size])
            pos += max(size, 0)
        rows.append(tuple(row))


def test_binary_copy_encodes_every_shape_of_row():
    # References (three ints) and staged rows (int, int, bytes, int, int,
    # int) have packing of their own; every other row goes field by field.
    # An int is a BIGINT: 8 bytes, big-endian, signed.
    from relstorage.adapters.postgresql.drivers import binary_copy_data
    rows = [
        (1, 2, 3),
        (2 ** 63 - 1, -5, 0),
        (7, 8, b'state bytes', 11, 0, 2),
        (7, 9, b'', 0, 3, 1),
        (4, None, b'x'),
        (5, 6, b'abc'),
        (),
    ]

    def field(value):
        if isinstance(value, int):
            return value.to_bytes(8, 'big', signed=True)
        return value
    assert _decode_binary_copy(binary_copy_data(rows)) == [
        tuple(field(value) for value in row) for row in rows]


def _restore(storage, tid, oid, value):
    t = TransactionMetaData()
    storage.tpc_begin(t, tid)
    storage.restore(oid, tid, zodb_pickle(MinPO(value)), '', None, t)
    storage.tpc_vote(t)
    storage.tpc_finish(t)


def test_restore_batch_commits_its_transactions_together(open_storage):
    storage = open_storage()
    reader = open_storage()
    base = tid_for_time(time.time())
    tids = [p64(base + i) for i in range(1, 7)]
    storage.begin_restore_batch()
    for index in range(3):
        _restore(storage, tids[index], p64(index + 1), index)
    assert storage.lastTransaction() == tids[2]
    reader.sync()
    assert reader.lastTransaction() == z64     # not committed yet
    assert storage.commit_restore_batch() == tids[2]
    reader.sync()
    assert reader.lastTransaction() == tids[2]
    # A failed commit rolls back the open batch, not the committed one.
    _restore(storage, tids[3], p64(4), 3)
    t = TransactionMetaData()
    storage.tpc_begin(t, tids[4])
    storage.restore(p64(5), tids[4], zodb_pickle(MinPO(4)), '', None, t)
    storage.tpc_abort(t)
    assert storage.lastTransaction() == tids[2]
    _restore(storage, tids[5], p64(6), 5)
    assert storage.end_restore_batch() == tids[5]
    reader.sync()
    assert reader.lastTransaction() == tids[5]
    for oid, tid in ((1, tids[0]), (3, tids[2]), (6, tids[5])):
        assert reader.load(p64(oid))[1] == tid
    for oid in (4, 5):
        with pytest.raises(POSKeyError):
            reader.load(p64(oid))
    # Batching ended: a commit is committed at once again.
    _restore(storage, p64(base + 10), p64(7), 7)
    reader.sync()
    assert reader.load(p64(7))[1] == p64(base + 10)


def test_history_free_restores_keep_their_own_tids(open_storage,
                                                  keep_history):
    """History-free, one commit restores the records of several source
    transactions (zodbconvert's groups): each row keeps the tid it had,
    the commit's tid is the last one, and another client's poll sees them
    all.  A record's tid after the commit's, or not after the last
    committed one, is refused where it is given."""
    storage = open_storage()
    assert storage.restores_own_tids is (not keep_history)
    if keep_history:
        return      # a row's tid is its transaction's: nothing to group
    reader = open_storage()
    reader.poll_invalidations()
    base = tid_for_time(time.time())
    tids = [p64(base + i) for i in range(1, 5)]
    _restore(storage, tids[0], p64(9), 'before')
    reader.poll_invalidations()
    t = TransactionMetaData()
    storage.tpc_begin(t, tids[3])
    for oid, tid in ((1, tids[1]), (2, tids[2]), (3, tids[3])):
        storage.restore(p64(oid), tid, zodb_pickle(MinPO(oid)), '', None, t)
    storage.tpc_vote(t)
    storage.tpc_finish(t)
    assert storage.lastTransaction() == tids[3]
    changed = reader.poll_invalidations()
    assert sorted(changed) == [p64(1), p64(2), p64(3)]
    for oid, tid in ((1, tids[1]), (2, tids[2]), (3, tids[3]),
                     (9, tids[0])):
        assert reader.load(p64(oid))[1] == tid
        assert reader.loadSerial(p64(oid), tid) == zodb_pickle(
            MinPO(oid if oid != 9 else 'before'))
    later = p64(base + 10)
    t = TransactionMetaData()
    storage.tpc_begin(t, later)
    with pytest.raises(StorageTransactionError, match='is later than'):
        storage.restore(p64(4), p64(base + 11), b'x', '', None, t)
    # Not after the last committed tid: a poll that passed it would miss
    # the row.
    storage.restore(p64(4), tids[2], zodb_pickle(MinPO(4)), '', None, t)
    with pytest.raises(StorageTransactionError, match='not later than'):
        storage.tpc_vote(t)
    storage.tpc_abort(t)
    with pytest.raises(POSKeyError):
        reader.load(p64(4))


def test_ids_for_blobs_outlive_restored_oids(open_storage):
    """The id pool's ids for other things than objects (blob ids) are
    unique with the object ids, and a restore moving past them does not
    discard them (a bulk copy would reserve a block per blob, and on
    SQLite commit its batch each time)."""
    storage = open_storage()
    pool = storage._oids
    assert not pool.has_other()
    other = pool.take_other()
    assert pool.has_other()
    oid = pool.take()
    pool.discard_through(max(oid, other) + 1000)
    assert pool.has_other()
    others = {other, pool.take_other()}
    oids = {oid, pool.take()}
    assert len(others) == 2 and not others & oids


def test_restore_batch_with_blobs_after_new_oids(open_storage, tmp_path):
    """A blob restored in a batch takes its blob id from the id
    allocator's own connection; a batch that moved the allocator past a
    restored oid holds locks that connection waits for (MySQL's allocator
    rows, SQLite's write lock) unless the batch commits first."""
    storage = open_storage(blob_dir=str(tmp_path / 'blobs'),
                           shared_blob_dir=False, commit_lock_timeout=5)
    base = tid_for_time(time.time())
    storage.begin_restore_batch()
    # A high oid: the finish moves the allocator past it (MySQL: to block
    # 99, so that the next reservation, block 100, also deletes the old
    # blocks, the row the batch wrote among them).
    _restore(storage, p64(base + 1), p64(9850), 1)
    storage._oids.forget()      # the next id needs a reservation
    blob = tmp_path / 'blob'
    blob.write_bytes(b'blob data')
    t = TransactionMetaData()
    storage.tpc_begin(t, p64(base + 2))
    from ZODB.blob import Blob
    storage.restore(p64(9852), p64(base + 2), zodb_pickle(MinPO(2)), '',
                    None, t)
    storage.restoreBlob(p64(9851), p64(base + 2), zodb_pickle(Blob()),
                        str(blob), None, t)
    storage.tpc_vote(t)
    storage.tpc_finish(t)
    assert storage.end_restore_batch() == p64(base + 2)
    # Every record of both transactions is there (the blob's transaction
    # went on after the batch committed under it).
    reader = open_storage(blob_dir=str(tmp_path / 'blobs2'),
                          shared_blob_dir=False)
    assert reader.load(p64(9850))[1] == p64(base + 1)
    assert reader.load(p64(9852))[1] == p64(base + 2)
    assert reader.load(p64(9851))[1] == p64(base + 2)
    with open(reader.loadBlob(p64(9851), p64(base + 2)), 'rb') as f:
        assert f.read() == b'blob data'


def test_changing_another_process_s_object_takes_the_short_finish(
        open_storage, monkeypatch):
    """A commit that only changes existing objects never moves the oid
    allocator, whatever oids they have: a storage that allocated nothing
    itself (another process created the objects) still finishes in one
    call where the database has one, not step by step."""
    from ZODB.Connection import TransactionMetaData
    from ZODB.tests.MinPO import MinPO
    from ZODB.tests.StorageTestBase import zodb_pickle
    from ZODB.utils import z64
    creator = open_storage()
    oid = creator.new_oid()
    t = TransactionMetaData()
    creator.tpc_begin(t)
    creator.store(oid, z64, zodb_pickle(MinPO(1)), '', t)
    creator.tpc_vote(t)
    tid = creator.tpc_finish(t)
    other = open_storage()             # its allocator handed out nothing
    adapter = other._adapter
    if adapter.txncontrol.finish_and_commit is None:
        pytest.skip('the database has no one-call finish')
    steps = []
    monkeypatch.setattr(adapter.locker, 'hold_commit_lock',
                        lambda cursor: steps.append('step by step'))
    monkeypatch.setattr(adapter.oids, 'ensure_above',
                        lambda cursor, oid: steps.append('ensure_above'))
    t = TransactionMetaData()
    other.tpc_begin(t)
    other.store(oid, tid, zodb_pickle(MinPO(2)), '', t)
    other.tpc_vote(t)
    assert other.tpc_finish(t) > tid
    assert steps == []


@pytest.mark.parametrize('kind', ['postgresql', 'mysql'])
def test_an_iterator_whose_server_refused_leaves_nothing_to_clean_up(
        kind, monkeypatch):
    """The constructor's error is the caller's; the half-built iterator's
    __del__ then has nothing to close, and says nothing (it raised
    AttributeError into sys.unraisablehook)."""
    import gc
    import sys
    from pgcluster import _free_port
    from relstorage.storage.iteration import TransactionIterator
    from relstorage.config.options import Options
    port = _free_port()         # nothing listens there
    if kind == 'postgresql':
        pytest.importorskip('psycopg2')
        from relstorage.adapters.postgresql import PostgreSQLAdapter
        adapter = PostgreSQLAdapter(
            dsn=f'host=127.0.0.1 port={port} user=root dbname=x '
                f'connect_timeout=5')
    else:
        pytest.importorskip('MySQLdb')
        from relstorage.adapters.mysql import MySQLAdapter
        adapter = MySQLAdapter(host='127.0.0.1', port=port, user='root',
                               connect_timeout=5)
    adapter.configure(Options())
    unraisable = []
    monkeypatch.setattr(sys, 'unraisablehook', unraisable.append)
    with pytest.raises(Exception) as raised:
        TransactionIterator(adapter)
    assert not isinstance(raised.value, AttributeError), raised.value
    del raised
    gc.collect()
    assert unraisable == []
