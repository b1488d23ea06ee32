"""Several real processes sharing one database.

The children are separate interpreters (``subprocess`` with
``sys.executable``, running tests/workers.py), not forks: each opens the
database itself from the backend's ZConfig text, exactly as another
application process would.  Every wait has a timeout and every child is
killed at teardown, so a storage bug fails a test instead of hanging the
run.

Tests branch on adapter capabilities, never on the backend's name.
"""
import io
import time

import pytest
import transaction
from ZODB.POSException import POSKeyError
from ZODB.tests.MinPO import MinPO
from ZODB.utils import p64
from ZODB.utils import u64
from zodbpickle.pickle import Unpickler

import workers
from relstorage.errors import CommitLockTimeoutError

#: Seconds a child may take to start and open the database.
START_TIMEOUT = 30



def connect(db):
    """A Connection with its own transaction manager.  Not an explicit
    one: DB.close() aborts the transaction of a connection a failed test
    left open, which an explicit manager refuses without one begun."""
    tm = transaction.TransactionManager()
    return tm, db.open(tm)


def raw_value(storage, oid):
    """The ``value`` of the MinPO stored at ``oid``, unpickled from the raw
    record (a class pickle, then a state pickle), without a Connection."""
    data, _ = storage.load(oid)
    unpickler = Unpickler(io.BytesIO(data))
    unpickler.persistent_load = lambda reference: reference
    unpickler.load()                    # the class
    return unpickler.load()['value']


# -- 1. concurrent commits ------------------------------------------------

WRITERS = 3
TRANSACTIONS = 150


def test_concurrent_counter(open_db, config_file, spawn, keep_history):
    """WRITERS processes each commit TRANSACTIONS increments of one shared
    counter (no conflict resolution: conflicts are retried) and log them
    in their own OOBTree.  No increment is lost or doubled, every view is
    consistent, and every process sees the others' commits."""
    names = [f'w{i}' for i in range(WRITERS)]
    db = open_db()
    tm, conn = connect(db)
    with tm:
        workers.prepare_counter(conn.root(), names)
    counter_oid = conn.root()['counter']._p_oid
    conn.close()

    children = [spawn(name, 'counter', config_file, name, TRANSACTIONS,
                      0.001)
                for name in names]
    for child in children:
        child.expect('ready', START_TIMEOUT)
    started = time.monotonic()
    for child in children:
        child.send('go')
    results = {child.label: child.expect('result') for child in children}
    for child in children:
        child.wait()
    elapsed = time.monotonic() - started

    total = WRITERS * TRANSACTIONS
    summary = {name: {k: v for k, v in r.items() if k != 'values'}
               for name, r in results.items()}
    print(f'\n{WRITERS}x{TRANSACTIONS} commits in {elapsed:.1f}s: {summary}')
    committed = []
    for result in results.values():
        assert result['committed'] == TRANSACTIONS, result
        assert result['start_value'] == 0, result
        assert result['went_backwards'] == 0, result
        assert result['inconsistent_views'] == 0, result
        # Its view moved under it: it saw commits of other processes.
        assert result['foreign_views'] >= 1, result
        # Values it committed only grow.
        assert result['values'] == sorted(result['values']), result
        committed.extend(result['values'])
    # Serializability: every increment read the value the previous
    # committed increment wrote, so the values are exactly 1..total.
    assert sorted(committed) == list(range(1, total + 1))
    conflicts = sum(r['conflicts'] for r in results.values())
    assert conflicts > 0, 'no ConflictError was raised and retried'

    # What the database holds, read through a new storage and Connection.
    check_db = open_db()
    tm, conn = connect(check_db)
    with tm:
        root = conn.root()
        assert root['counter'].value == total
        for name, result in results.items():
            log = root['logs'][name]
            assert list(log.keys()) == list(range(TRANSACTIONS)), name
            assert list(log.values()) == result['values'], name
    conn.close()
    if keep_history:
        # Every committed increment left a revision: creation + total.
        revisions = check_db.storage.history(counter_oid, size=total + 10)
        assert len(revisions) == total + 1


# -- 2. a committer killed between vote and finish ------------------------

def _make_objects(db):
    """Commit a few transactions of MinPOs under the root; return
    ``{name: oid}`` and ``{oid: value}`` as committed."""
    tm, conn = connect(db)
    with tm:
        root = conn.root()
        for name in ('a', 'b', 'c', 'd'):
            root[name] = MinPO(f'{name}-1')
    with tm:
        conn.root()['b'].value = 'b-2'
        conn.root()['c'].value = 'c-2'
    with tm:
        conn.root()['c'].value = 'c-3'
    oids = {name: conn.root()[name]._p_oid for name in 'abcd'}
    values = {oid: conn.root()[name].value for name, oid in oids.items()}
    conn.close()
    return oids, values


def test_killed_after_vote(open_db, open_storage, config_file, spawn,
                           keep_history):
    """A child killed between tpc_vote and tpc_finish, holding its locks,
    leaves everything committed before intact, nothing of its own
    transaction visible, and the database open to commits at once."""
    db = open_db(commit_lock_timeout=5)
    oids, values = _make_objects(db)
    storage = db.storage
    last_before = storage.lastTransaction()
    held = [oids['b'], oids['c']]
    reader = open_storage()
    blocked_db = open_db(commit_lock_timeout=0.3)

    child = spawn('holder', 'hold', config_file,
                  *[f'{u64(oid):x}' for oid in held])
    voted = child.expect('voted', START_TIMEOUT)
    new_oid = p64(voted['new_oid'])

    # While it holds its locks, reading is not blocked...
    started = time.monotonic()
    for oid, value in values.items():
        assert raw_value(reader, oid) == value
    assert time.monotonic() - started < 2
    # ... but committing one of its objects is: it is killed holding them.
    tm, conn = connect(blocked_db)
    tm.begin()
    conn.root()['b'].value = 'b-blocked'
    with pytest.raises(CommitLockTimeoutError):
        tm.commit()
    tm.abort()
    conn.close()

    child.kill()                        # SIGKILL on POSIX
    assert child.proc.returncode != 0

    # Nothing of the killed transaction is visible...
    fresh = open_storage()
    assert fresh.lastTransaction() == last_before
    for oid, value in values.items():
        assert raw_value(fresh, oid) == value
    with pytest.raises(POSKeyError):
        fresh.load(new_oid)

    # ... and the database takes commits at once, with new oids too.
    tm, conn = connect(db)
    started = time.monotonic()
    with tm:
        root = conn.root()
        root['b'].value = 'b-after'
        root['e'] = MinPO('e-after')
    elapsed = time.monotonic() - started
    assert elapsed < 5, f'the commit after the kill took {elapsed:.1f}s'
    e_oid = conn.root()['e']._p_oid
    conn.close()
    values[oids['b']] = 'b-after'
    values[e_oid] = 'e-after'

    check = open_storage()
    for oid, value in values.items():
        assert raw_value(check, oid) == value
    with pytest.raises(POSKeyError):
        check.load(new_oid)
    descriptions = [t.description for t in check.iterator()]
    assert workers.HOLD_DESCRIPTION.encode() not in descriptions
    if keep_history:
        # b: created, changed, changed after the kill; c: created, 2 changes.
        assert len(check.history(oids['b'], size=10)) == 3
        assert len(check.history(oids['c'], size=10)) == 3


def test_open_while_another_process_commits(open_db, open_storage,
                                            config_file, spawn):
    """Opening a storage on an existing database takes no lock, so it does
    not wait for a process that is between vote and finish."""
    db = open_db()
    oids, values = _make_objects(db)
    child = spawn('holder', 'hold', config_file, f'{u64(oids["a"]):x}')
    child.expect('voted', START_TIMEOUT)
    started = time.monotonic()
    # (Waiting for the lock would take the whole timeout; the open takes
    # a fraction of it even on a loaded machine.)
    storage = open_storage(commit_lock_timeout=5)
    assert time.monotonic() - started < 4.5
    assert raw_value(storage, oids['a']) == values[oids['a']]
    child.send('abort')
    child.expect('aborted')
    child.wait()


# -- 3. commit-lock-timeout against a held lock ---------------------------

LOCK_TIMEOUT = 1


@pytest.mark.parametrize('release', ['abort', 'kill', 'finish'])
def test_commit_lock_timeout(open_db, config_file, spawn, release):
    """While a child holds an object between vote and finish, the parent's
    commit of that object fails after commit-lock-timeout with
    CommitLockTimeoutError; once the child aborts, is killed or finishes,
    the parent's retry commits."""
    db = open_db(commit_lock_timeout=LOCK_TIMEOUT)
    oids, _ = _make_objects(db)
    tm, conn = connect(db)

    # The child holds the object the parent is about to change: on a
    # database-wide write lock any commit would wait, on row locks a
    # commit of this very object does.
    child = spawn('holder', 'hold', config_file, f'{u64(oids["a"]):x}')
    child.expect('voted', START_TIMEOUT)

    tm.begin()
    conn.root()['a'].value = 'a-parent'
    started = time.monotonic()
    with pytest.raises(CommitLockTimeoutError) as caught:
        tm.commit()
    elapsed = time.monotonic() - started
    tm.abort()
    assert 'commit-lock-timeout' in str(caught.value)
    assert LOCK_TIMEOUT * 0.8 <= elapsed < LOCK_TIMEOUT + 4, elapsed

    if release == 'kill':
        child.kill()
    else:
        child.send(release)
        child.expect('finished' if release == 'finish' else 'aborted')
        child.wait()

    # The retry succeeds; after a finish it first sees the child's state.
    with tm:
        a = conn.root()['a']
        if release == 'finish':
            assert a.value == workers.held_state(u64(oids['a']))
        else:
            assert a.value == 'a-1'
        a.value = 'a-parent'
    conn.close()
    assert raw_value(db.storage, oids['a']) == 'a-parent'


# -- 4. oids are unique across processes ----------------------------------

OID_WORKERS = 3
OIDS_EACH = 2000


def test_new_oid_unique_across_processes(open_storage, config_file, spawn):
    """OID_WORKERS processes and the parent call new_oid() at the same
    time: no id is handed out twice."""
    storage = open_storage()
    children = [spawn(f'oids{i}', 'oids', config_file, OIDS_EACH)
                for i in range(OID_WORKERS)]
    for child in children:
        child.expect('ready', START_TIMEOUT)
    for child in children:
        child.send('go')
    # The parent takes some too, while they run.
    mine = [u64(storage.new_oid()) for _ in range(OIDS_EACH)]
    taken = {child.label: child.expect('result')['oids']
             for child in children}
    for child in children:
        child.wait()
    taken['parent'] = mine

    everything = [oid for oids in taken.values() for oid in oids]
    assert len(everything) == (OID_WORKERS + 1) * OIDS_EACH
    duplicates = len(everything) - len(set(everything))
    assert duplicates == 0, f'{duplicates} oids were handed out twice'
    for label, oids in taken.items():
        assert len(oids) == OIDS_EACH, label
        assert all(oid > 0 for oid in oids), label   # 0 is the root
    # Nor does a storage opened afterwards hand out any of them again.
    later = open_storage()
    again = [u64(later.new_oid()) for _ in range(10)]
    assert not set(again) & set(everything)
