"""The commit chain on MySQL (relstorage/adapters/mysql/chain.py, schema
step 0009): every way a commit ends adds its link, and a read snapshot
that lacks a commit up to its last tid is begun again.

InnoDB shows a snapshot a commit without the one before it only in a
moment too short to aim at (benchmarks/poll_check.py finds it under load);
here a link is taken out of the table, which a snapshot cannot tell from a
commit it does not see yet, and put back.
"""
import logging
import threading
import time

import pytest
from ZODB.Connection import TransactionMetaData
from ZODB.tests.MinPO import MinPO
from ZODB.tests.StorageTestBase import zodb_pickle
from ZODB.utils import p64
from ZODB.utils import u64
from ZODB.utils import z64

import relstorage.adapters.mysql.chain as chain
from backends import BACKENDS


@pytest.fixture(params=[
    pytest.param(name, marks=pytest.mark.mysql)
    for name in ('mysql', 'mysql-pymysql')])
def backend(request):
    instance = BACKENDS[request.param]()
    yield instance
    instance.cleanup()


def _sql(storage, statement, params=None):
    """Run ``statement`` on a connection of its own (autocommit)."""
    cm = storage._adapter.connmanager
    conn = cm.connect()
    try:
        cursor = conn.cursor()
        cursor.execute(statement, params)
        return cursor.fetchall() if cursor.description else None
    finally:
        cm.close(conn, None)


def _links(storage):
    return [tuple(row) for row in _sql(
        storage, 'SELECT seq, tid FROM commit_chain ORDER BY seq')]


def _store(storage, oid, serial, data, blob=None, tid=None):
    txn = TransactionMetaData()
    storage.tpc_begin(txn, tid)
    if tid is not None:
        storage.restore(oid, tid, data, '', None, txn)
    elif blob is None:
        storage.store(oid, serial, data, '', txn)
    else:
        storage.storeBlob(oid, serial, data, blob, '', txn)
    storage.tpc_vote(txn)
    return storage.tpc_finish(txn)


def test_every_way_a_commit_ends_adds_its_link(open_storage, tmp_path):
    storage = open_storage(blob_dir=str(tmp_path / 'blobs'),
                           shared_blob_dir=False)
    oid = storage.new_oid()
    tids = [_store(storage, oid, z64, zodb_pickle(MinPO(1)))]  # one batch
    # A commit too large for its rows to go in the batch (staged).
    txn = TransactionMetaData()
    storage.tpc_begin(txn)
    for index in range(300):
        storage.store(storage.new_oid(), z64, zodb_pickle(MinPO(index)),
                      '', txn)
    storage.tpc_vote(txn)
    tids.append(storage.tpc_finish(txn))
    # With a blob: the step-by-step path.
    blob = tmp_path / 'blob'
    blob.write_bytes(b'blob data')
    tids.append(_store(storage, storage.new_oid(), z64,
                       zodb_pickle(MinPO(2)), blob=str(blob)))
    # A restore, alone and in a batch of restores committed together.
    wanted = u64(tids[-1]) + 1000
    tids.append(_store(storage, storage.new_oid(), None,
                       zodb_pickle(MinPO(3)), tid=p64(wanted)))
    storage.begin_restore_batch()
    for step in (1, 2):
        tids.append(_store(storage, storage.new_oid(), None,
                           zodb_pickle(MinPO(4)), tid=p64(wanted + step)))
    storage.end_restore_batch()
    links = _links(storage)
    assert [tid for _, tid in links][-len(tids):] == [u64(t) for t in tids]
    seqs = [seq for seq, _ in links]
    assert seqs == list(range(1, len(seqs) + 1))
    assert _sql(storage, 'SELECT commit_seq, tid FROM commit_row')[0] == (
        seqs[-1], u64(tids[-1]))


def test_only_the_last_links_are_kept(open_storage):
    storage = open_storage()
    kept = chain.CHAIN_KEPT
    _sql(storage, 'UPDATE commit_row SET commit_seq = %s', (kept + 5,))
    # Links of commits made before, the last three of them kept.
    _sql(storage, 'INSERT INTO commit_chain VALUES (6, 1), (7, 2), (8, 3)')
    oid = storage.new_oid()
    serial = _store(storage, oid, z64, zodb_pickle(MinPO(0)))
    assert [seq for seq, _ in _links(storage)] == [7, 8, kept + 6]
    for value in (1, 2):
        serial = _store(storage, oid, serial, zodb_pickle(MinPO(value)))
    assert [seq for seq, _ in _links(storage)] == [
        kept + 6, kept + 7, kept + 8]


def _two_storages(open_storage):
    """A writer and a reader whose last poll saw the writer's first
    commit; returns them and the object's serial."""
    writer, reader = open_storage(), open_storage()
    oid = writer.new_oid()
    serial = _store(writer, oid, z64, zodb_pickle(MinPO(1)))
    reader.poll_invalidations()
    reader.poll_invalidations()
    assert reader.load(oid)[1] == serial
    return writer, reader, oid, serial


def _put_back_later(storage, link, seconds):
    def put_back():
        time.sleep(seconds)
        _sql(storage, 'INSERT INTO commit_chain VALUES (%s, %s)', link)
    thread = threading.Thread(target=put_back)
    thread.start()
    return thread


def test_a_poll_that_lacks_a_commit_begins_again(open_storage, caplog):
    writer, reader, oid, serial = _two_storages(open_storage)
    new = _store(writer, oid, serial, zodb_pickle(MinPO(2)))
    link = _links(writer)[-1]
    assert link[1] == u64(new)
    _sql(writer, 'DELETE FROM commit_chain WHERE seq = %s', (link[0],))
    cm = reader._adapter.connmanager
    torn = cm.torn_snapshots
    thread = _put_back_later(writer, link, 0.3)
    started = time.monotonic()
    with caplog.at_level(logging.ERROR):
        changed = reader.poll_invalidations()
    thread.join()
    # Until the link was back the snapshot was begun again, then the poll
    # reported the change.
    assert time.monotonic() - started >= 0.3
    assert cm.torn_snapshots > torn
    assert changed == [oid]
    assert reader.load(oid)[1] == new
    assert not caplog.records


def test_a_snapshot_that_stays_torn_is_kept_and_logged(
        open_storage, caplog, monkeypatch):
    writer, reader, oid, serial = _two_storages(open_storage)
    new = _store(writer, oid, serial, zodb_pickle(MinPO(2)))
    _sql(writer, 'DELETE FROM commit_chain WHERE tid = %s', (u64(new),))
    monkeypatch.setattr(chain, 'TORN_WAIT', 0.2)
    with caplog.at_level(logging.ERROR):
        changed = reader.poll_invalidations()
    # The poll goes on, as it did before the chain, and says why it waited.
    assert changed == [oid]
    assert [r.getMessage() for r in caplog.records if 'commit_chain' in
            r.getMessage() and r.levelno == logging.ERROR]


def test_a_first_read_that_lacks_a_commit_begins_again(open_storage):
    writer, _, oid, serial = _two_storages(open_storage)
    link = _links(writer)[-1]
    _sql(writer, 'DELETE FROM commit_chain WHERE seq = %s', (link[0],))
    cm = writer._adapter.connmanager
    conn, cursor = cm.open_load()
    try:
        torn = cm.torn_snapshots
        thread = _put_back_later(writer, link, 0.2)
        cm.begin_snapshot(conn, cursor)
        thread.join()
        assert cm.torn_snapshots > torn
        assert writer._adapter.poller.last_tid(cursor) == u64(serial)
    finally:
        cm.close(conn, cursor)


@pytest.mark.parametrize('lacking', [False, True],
                         ids=['whole', 'lacking'])
def test_a_commit_does_not_keep_a_torn_snapshot_for_the_next_poll(
        open_storage, lacking):
    writer, reader, oid, serial = _two_storages(open_storage)
    new = _store(writer, oid, serial, zodb_pickle(MinPO(2)))
    link = _links(writer)[-1]
    if lacking:
        # The writer's commit, as if not visible yet when the reader's
        # own commit ends.
        _sql(writer, 'DELETE FROM commit_chain WHERE seq = %s', (link[0],))
    _store(reader, reader.new_oid(), z64, zodb_pickle(MinPO(3)))
    # The snapshot begun in the commit's round trip is kept for the next
    # poll only if it lacks nothing.
    assert (reader._adopted is None) == lacking
    if lacking:
        _sql(writer, 'INSERT INTO commit_chain VALUES (%s, %s)', link)
    assert reader.poll_invalidations() == [oid]
    assert reader.load(oid)[1] == new
