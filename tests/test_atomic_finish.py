"""The finish of a commit on MySQL is atomic, whatever the server does to
the transaction in its middle.

A Galera node aborts a transaction that lost certification to another
node's write set, possibly in the middle of a multi-statement batch, and
the statements after that point go on running outside the transaction
(tests/test_galera.py shows it on a real cluster).  Here the same happens
without a cluster: a ROLLBACK is slipped into the finish at every position
in turn, which ends the transaction exactly there and lets the rest of
the batch run.  Each time the commit must fail with a ConflictError (a
transient error: the application retries), leave the database as it was,
and leave the storage able to commit.

Both guards run (src/relstorage/adapters/mysql/connection.py): the marker
row of a Galera node, forced here, at every position; the savepoint of a
single server at every position before its guard.  Between the savepoint's
release and the COMMIT only the marker can tell; on a single server
nothing ends a transaction there without an error that stops the batch.
"""
import pytest
from ZODB.Connection import TransactionMetaData
from ZODB.POSException import ConflictError
from ZODB.utils import p64

import relstorage.adapters.mysql.transactions as mysql_transactions
from backends import BACKENDS

#: Objects each commit writes.
COUNT = 3


@pytest.fixture(params=[
    pytest.param(name, marks=pytest.mark.mysql)
    for name in ('mysql', 'mysql-pymysql')])
def backend(request):
    instance = BACKENDS[request.param]()
    yield instance
    instance.cleanup()


def _commit(storage, states, serials):
    """Commit ``states`` of the objects of ``serials`` (new ones, from the
    storage's allocator, when it is empty); returns their new serials."""
    oids = list(serials) or [storage.new_oid() for _ in states]
    txn = TransactionMetaData(description='atomic finish')
    storage.tpc_begin(txn)
    try:
        for oid, state in zip(oids, states):
            storage.store(oid, serials.get(oid, p64(0)), state, '', txn)
        storage.tpc_vote(txn)
        tid = storage.tpc_finish(txn)
    except BaseException:
        storage.tpc_abort(txn)
        raise
    return {oid: tid for oid in oids}


def _states(tag, size):
    return [f'{tag}:{i}:'.encode().ljust(size, b'x') for i in range(COUNT)]


def _unchanged(open_storage, keep_history, states, serials):
    """A new storage instance sees exactly the last good commit."""
    fresh = open_storage()
    try:
        for oid, state in zip(serials, states):
            assert fresh.load(oid) == (state, serials[oid])
        (tid,) = set(serials.values())
        assert fresh.lastTransaction() == tid
        if keep_history:
            assert list(fresh.iterator())[-1].tid == tid
    finally:
        fresh.close()


def _rolled_back_at(position):
    """run_batch that ends the transaction before statement ``position`` of
    the finish batch and runs the rest."""
    def run_batch(cursor, statements, params=None):
        parts = statements.split(';\n')
        assert 'COMMIT' in parts
        parts.insert(position, 'ROLLBACK')
        return original(cursor, ';\n'.join(parts), params)
    original = mysql_transactions.run_batch
    return run_batch


def _first_commit(storage, size):
    """Commit new objects; returns the statements of its finish batch, and
    the objects' serials."""
    seen = []
    original = mysql_transactions.run_batch

    def spy(cursor, statements, params=None):
        seen.append(statements.split(';\n'))
        return original(cursor, statements, params)
    mysql_transactions.run_batch = spy
    try:
        serials = _commit(storage, _states('probe', size), {})
    finally:
        mysql_transactions.run_batch = original
    (batch,) = seen
    return batch, serials


# 3 small objects finish inline (rows in the batch); 3 of 30 KB are
# staged first (over the inline limit of 64 KB).
@pytest.fixture(params=['savepoint', 'marker'])
def guard(request):
    return request.param


def _guarded(storage, guard):
    storage._adapter.connmanager.marker_guard = guard == 'marker'
    return storage


@pytest.mark.parametrize('size', [100, 30_000], ids=['inline', 'staged'])
def test_a_finish_ended_midway_commits_nothing(
        open_storage, keep_history, monkeypatch, size, guard):
    storage = _guarded(open_storage(), guard)
    batch, serials = _first_commit(storage, size)
    states = _states('probe', size)
    assert batch[0].lstrip().startswith('UPDATE commit_row')
    staged = any("temp_store" in part for part in batch)
    assert staged == (size > 1000), batch
    commit_at = batch.index('COMMIT')
    last = commit_at if guard == 'marker' else commit_at - 1
    for position in range(1, last + 1):
        monkeypatch.setattr(mysql_transactions, 'run_batch',
                            _rolled_back_at(position))
        # The guard's error (the guard is the statement before COMMIT), or
        # before it one of the rest of the batch: a transaction row at the
        # last tid breaks a key.
        guarded = position >= commit_at - 1
        with pytest.raises(ConflictError,
                           match='nothing of it' if guarded else None):
            _commit(storage, _states(f'lost{position}', size), serials)
        monkeypatch.undo()
        _unchanged(open_storage, keep_history, states, serials)
    # Still able to commit, and what it commits is there.
    states = _states('after', size)
    serials = _commit(storage, states, serials)
    _unchanged(open_storage, keep_history, states, serials)


def test_a_step_by_step_finish_ended_midway_commits_nothing(
        open_storage, keep_history, monkeypatch, guard):
    """The finish that runs one statement at a time (blobs, restores)."""
    storage = _guarded(open_storage(), guard)
    states = _states('first', 100)
    serials = _commit(storage, states, {})
    adapter = storage._adapter
    # Where the database does the finish in one call, tpc.py runs the
    # steps only for commits that need them; make this one need them.
    monkeypatch.setattr(adapter.txncontrol, 'finish_and_commit', None)
    for step in ('record_transaction', 'move_from_temp'):
        role = (adapter.txncontrol if step == 'record_transaction'
                else adapter.mover)
        original = getattr(role, step)

        def rolled_back_after(cursor, *args, original=original, **kw):
            original(cursor, *args, **kw)
            cursor.execute('ROLLBACK')
        monkeypatch.setattr(role, step, rolled_back_after)
        with pytest.raises(ConflictError, match='nothing of it'):
            _commit(storage, _states(step, 100), serials)
        monkeypatch.setattr(role, step, original)
        _unchanged(open_storage, keep_history, states, serials)
    states = _states('after', 100)
    serials = _commit(storage, states, serials)
    _unchanged(open_storage, keep_history, states, serials)
