"""Faults with several real processes: a committing client killed with
SIGKILL while it votes, while it finishes, and at random moments of a
stream of commits.

After every kill the others go on, the database has released the killed
client's locks, and its transaction is wholly there or wholly absent;
nothing a client was told was committed (``commit()`` returned) is
missing, checked against the log of acknowledgements each child writes as
it goes.  The children are separate interpreters (tests/workers.py).

One driver per database: the faults are the database's and the storage's,
not the driver's (tests/test_processes.py runs every driver).
"""
import random
import time

import pytest
import transaction
import ZODB
from ZODB.Connection import TransactionMetaData
from ZODB.POSException import POSKeyError
from ZODB.utils import p64
from ZODB.utils import u64

import tally
import workers
from backends import BACKENDS
from test_processes import START_TIMEOUT
from test_processes import _make_objects
from test_processes import connect
from test_processes import raw_value

#: Seconds a victim waits for a lock before giving up: far longer than the
#: tests take to kill it.
VICTIM_LOCK_WAIT = 30

#: Rounds of the random kill, per database and history mode.
KILL_ROUNDS = 6

#: Counters each ``loop`` child sets in every transaction.
LOOP_OBJECTS = 4


@pytest.fixture(params=[
    pytest.param(name, marks=getattr(pytest.mark, name))
    for name in ('sqlite', 'postgresql', 'mysql')])
def backend(request):
    instance = BACKENDS[request.param]()
    yield instance
    instance.cleanup()


@pytest.fixture
def config_file(backend, database, keep_history, tmp_path):
    """The ZConfig text of the test's database, with a long lock wait."""
    path = tmp_path / 'storage.conf'
    path.write_text(backend.zconfig(
        database, keep_history=keep_history,
        commit_lock_timeout=VICTIM_LOCK_WAIT), encoding='utf-8')
    return str(path)


def _commits_promptly(db, name, value, limit=5):
    """Commit ``root[name].value = value``; fail if it takes ``limit``
    seconds (the killed client's locks would be the cause)."""
    tm, conn = connect(db)
    started = time.monotonic()
    with tm:
        conn.root()[name].value = value
    elapsed = time.monotonic() - started
    oid = conn.root()[name]._p_oid
    conn.close()
    assert elapsed < limit, f'a commit after the kill took {elapsed:.1f}s'
    return oid


def _held_outcome(storage, oids, held, new_oid, values):
    """Whether the ``hold`` child's transaction (new states of ``held``
    plus ``new_oid``) is wholly there (True) or wholly absent (False);
    fails on anything in between."""
    try:
        storage.load(new_oid)
        created = True
    except POSKeyError:
        created = False
    changed = [raw_value(storage, oid) == workers.held_state(u64(oid))
               for oid in held]
    untouched = [oid for oid in oids.values()
                 if oid not in held and raw_value(storage, oid) != values[oid]]
    assert not untouched, 'objects outside the killed transaction changed'
    assert all(x == created for x in changed), (
        f'torn: new object {"there" if created else "absent"}, held '
        f'objects changed {changed}')
    if not created:
        for oid in held:
            assert raw_value(storage, oid) == values[oid]
    # The loads above read the storage's snapshot; the iterator reads the
    # latest, so bound it by the snapshot, or a commit the server finishes
    # between the two would look torn.
    descriptions = [t.description
                    for t in storage.iterator(None, storage.lastTransaction())]
    if storage.supportsUndo():
        assert (workers.HOLD_DESCRIPTION.encode() in descriptions) == created
    return created


# -- killed while voting ------------------------------------------------

def test_killed_while_voting(open_db, open_storage, config_file, spawn,
                             keep_history):
    """A child waiting in tpc_vote for a lock another child holds is
    killed: the holder finishes, nothing of the victim is visible, and the
    database takes commits at once."""
    db = open_db(commit_lock_timeout=5)
    oids, values = _make_objects(db)
    # The victim allocates its new oid first: where one lock covers all
    # writes, allocating would wait for the holder too.
    victim = spawn('victim', 'hold', config_file, 'wait',
                   f'{u64(oids["b"]):x}', f'{u64(oids["c"]):x}')
    victim.expect('ready', START_TIMEOUT)
    holder = spawn('holder', 'hold', config_file, f'{u64(oids["b"]):x}')
    holder.expect('voted', START_TIMEOUT)
    victim.send('go')
    voting = victim.expect('voting', START_TIMEOUT)
    # It asks for the locks held by the holder (or for the database's
    # write lock) and waits; give the request time to reach the server.
    time.sleep(0.5)
    assert victim.proc.poll() is None, 'the victim did not wait'
    victim.kill()
    assert not [e for e in victim.rest() if e['event'] == 'voted'], (
        'the victim voted: it was not waiting')
    holder.send('finish')
    finished = holder.expect('finished')
    holder.wait()

    check = open_storage()
    values[oids['b']] = workers.held_state(u64(oids['b']))
    for oid, value in values.items():
        assert raw_value(check, oid) == value
    with pytest.raises(POSKeyError):
        check.load(p64(voting['new_oid']))
    assert check.lastTransaction() == p64(finished['tid'])
    _commits_promptly(db, 'c', 'c-after')
    tally.add('faults', 'scenarios')
    tally.add('faults', 'committed transactions checked', 4)


# -- killed while finishing ---------------------------------------------

def test_killed_while_finishing(open_db, open_storage, config_file, spawn,
                                keep_history):
    """A voted child is told to finish and is killed in the middle.  Where
    the last step is one round trip with its COMMIT (row locks), the
    parent holds the commit lock so that the step waits on the server, and
    the kill lands there: its transaction is wholly committed or wholly
    absent (the database's choice: the step is already on the server).
    Where one lock covers all writes (SQLite), the child stops just before
    its COMMIT statement: nothing of it is visible.  Either way the others
    commit at once."""
    capabilities = open_storage()._adapter.capabilities
    single_lock = capabilities.database_wide_write_lock
    db = open_db(commit_lock_timeout=5)
    oids, values = _make_objects(db)
    held = [oids['b'], oids['c']]
    flags = ['pause-commit'] if single_lock else []
    child = spawn('victim', 'hold', config_file, *flags,
                  *[f'{u64(oid):x}' for oid in held])
    voted = child.expect('voted', START_TIMEOUT)
    locker = t = None
    if not single_lock:
        locker = open_storage(commit_lock_timeout=VICTIM_LOCK_WAIT)
        t = TransactionMetaData()
        locker.tpc_begin(t)
        locker._adapter.locker.hold_commit_lock(locker._txn.cursor)
    child.send('finish')
    child.expect('committing' if single_lock else 'finishing')
    time.sleep(0.5)
    assert child.proc.poll() is None, 'the child did not wait'
    child.kill()
    if locker is not None:
        locker.tpc_abort(t)

    # The server may still be running the killed client's last step.
    deadline = time.monotonic() + 10
    check = open_storage()
    while True:
        created = _held_outcome(check, oids, held, p64(voted['new_oid']),
                                values)
        if created or single_lock or time.monotonic() > deadline:
            break
        time.sleep(0.2)
        check.poll_invalidations()
    if single_lock:
        assert not created, 'committed without its COMMIT'
    _commits_promptly(db, 'a', 'a-after')
    _commits_promptly(db, 'b', 'b-after')
    tally.add('faults', 'scenarios')
    tally.add('faults', 'kills while finishing that the server committed'
              if created else 'kills while finishing that left nothing')
    tally.add('faults', 'committed transactions checked', 5)


# -- killed at random moments of a stream of commits --------------------

def _loop_state(storage, name):
    """The values of the ``loop`` child ``name``'s counters as committed,
    and ``{tid: value}`` of the first counter's history (empty without
    history)."""
    db_tm = transaction.TransactionManager()
    db = ZODB.DB(storage)
    try:
        conn = db.open(db_tm)
        counters = conn.root()['loops'][name]
        values = [c.value for c in counters]
        oid = counters[0]._p_oid
        history = {}
        if storage.supportsUndo():
            for entry in storage.history(oid, size=10 ** 6):
                history[u64(entry['tid'])] = entry
        conn.close()
        db_tm.abort()
    finally:
        db.close()
    return values, history


def test_killed_at_random_moments(open_db, open_storage, config_file,
                                  spawn, keep_history):
    """KILL_ROUNDS times, a child committing as fast as it can is killed
    at a random moment: every commit it was told of is there, the one it
    was in is wholly there or wholly absent, and the next child commits
    at once."""
    db = open_db()
    tm, conn = connect(db)
    with tm:
        workers.prepare_loops(conn.root(), ['loop'], LOOP_OBJECTS)
    conn.close()
    rng = random.Random(7)
    acked_total = 0
    in_flight = {True: 0, False: 0}
    for round_ in range(KILL_ROUNDS):
        child = spawn(f'loop{round_}', 'loop', config_file, 'loop', 60)
        ready = child.expect('ready', START_TIMEOUT)
        started = time.monotonic()
        child.send('go')
        acked = []
        wanted = rng.randint(2, 12)
        while len(acked) < wanted:
            event = child.next_event()
            assert event is not None, child.stderr()
            if event['event'] != 'acked':
                pytest.fail(f'unexpected {event!r}')
            if not acked:
                # The previous round's kill left no lock behind.
                waited = time.monotonic() - started
                assert waited < 5, f'the first commit took {waited:.1f}s'
            acked.append(event)
        time.sleep(rng.uniform(0, 0.015))
        child.kill()
        acked += [e for e in child.rest() if e['event'] == 'acked']
        first = acked[0]['value']
        assert first == ready['value'] + 1
        assert [e['value'] for e in acked] == list(
            range(first, first + len(acked))), 'acknowledgements out of order'

        storage = open_storage()
        values, history = _loop_state(storage, 'loop')
        last = acked[-1]['value']
        assert len(set(values)) == 1, f'torn transaction: {values}'
        assert values[0] in (last, last + 1), (values, last)
        in_flight[values[0] == last + 1] += 1
        if storage.supportsUndo():
            for event in acked:
                assert event['tid'] in history, (
                    f'acknowledged commit {event} is not in the history')
        acked_total += len(acked)
    tally.add('faults', 'scenarios', KILL_ROUNDS)
    tally.add('faults', 'random kills after the commit went through',
              in_flight[True])
    tally.add('faults', 'committed transactions checked', acked_total)
