"""Round trips per operation, counted by the benchmarks' relay
(benchmarks/harness/relay.py) between the storage and the server, on every
server backend and driver.  On a network each round trip costs the
network's latency, so a change that adds one fails here, not in a
benchmark.  docs/architecture.rst ("Round trips") has the table these
numbers come from, with RelStorage 4.3's and the floor.
"""
import importlib.util
import os
import threading
import time

import pytest
import transaction
import ZODB
from persistent.mapping import PersistentMapping
from ZODB.tests.StorageTestBase import zodb_unpickle
from ZODB.utils import z64

from relstorage.storage import RelStorage
from relstorage.storage import idle

_RELAY = os.path.join(os.path.dirname(__file__), '..', 'benchmarks',
                      'harness', 'relay.py')

#: Round trips of each operation, as counted (and the floor the protocol
#: allows, where ours is above it: see docs/architecture.rst).
EXPECTED = {
    'load of an object no cache holds': 1,
    'prefetch of 100 objects': 1,
    'transaction begun and aborted, nothing changed': 2,
    'the same, explicit transactions': 1,
    'one-object commit, its polls included': 3,
    'the same with a read-current object (BTrees)': 3,
}


def _relay_module():
    spec = importlib.util.spec_from_file_location('bench_relay', _RELAY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def relayed(backend, database, keep_history):
    """``(relay, open())``: ``open()`` opens a storage on the test's
    database whose every connection goes through the relay."""
    if not hasattr(backend, 'server'):
        pytest.skip(f'{backend.name} is embedded: no round trips')
    relay = _relay_module().Relay(backend.server()).start()
    opened = []

    def open_(**options):
        if backend.marker == 'postgresql':
            adapter = backend.adapter(
                f'{database} host=127.0.0.1 port={relay.port}')
        else:
            adapter = backend.adapter(database, port=relay.port)
        storage = RelStorage(adapter, keep_history=keep_history, **options)
        opened.append(storage)
        return storage

    yield relay, open_
    for storage in opened:
        storage.close()
    relay.stop()


def _count(relay, operation, times=5):
    """Round trips of one ``operation()``, the mean of ``times`` after a
    first one that warms up."""
    operation()
    before = relay.snapshot()
    for _ in range(times):
        operation()
    done = relay.snapshot() - before
    assert done.connections == 0, 'a connection was opened on the way'
    return done.round_trips / times


@pytest.mark.parametrize('bound', [0, 5], ids=['unbounded', 'bounded'])
def test_round_trips(relayed, bound):
    """The same with max-connections: connections given back and taken
    again between transactions carry their put-off ROLLBACK along."""
    relay, open_ = relayed
    db = ZODB.DB(open_(max_connections=bound))
    try:
        tm = transaction.TransactionManager()
        conn = db.open(tm)
        root = conn.root()
        for i in range(120):
            root[f'k{i}'] = PersistentMapping(v=i)
        tm.commit()
        oids = [root[f'k{i}']._p_oid for i in range(120)]
        counted = {}

        def empty():
            tm.begin()
            root._p_activate()
            tm.abort()
        counted['transaction begun and aborted, nothing changed'] = _count(
            relay, empty)

        def one_object():
            tm.begin()
            root['k0']['v'] += 1
            tm.commit()
        counted['one-object commit, its polls included'] = _count(
            relay, one_object)

        def read_current():
            tm.begin()
            checked = root['k1']
            checked['v']    # (readCurrent needs a loaded object)
            conn.readCurrent(checked)
            root['k0']['v'] += 1
            tm.commit()
        counted['the same with a read-current object (BTrees)'] = _count(
            relay, read_current)

        explicit_tm = transaction.TransactionManager(explicit=True)
        explicit = db.open(explicit_tm)

        def explicit_cycle():
            explicit_tm.begin()
            explicit.root()._p_activate()
            explicit_tm.abort()
        counted['the same, explicit transactions'] = _count(
            relay, explicit_cycle)

        # Loads and prefetches on an instance of its own, its caches empty.
        instance = db.storage.new_instance()
        instance.poll_invalidations()
        misses = iter(oids[:6])

        def load():
            instance._cache.clear()
            instance.load(next(misses))
        counted['load of an object no cache holds'] = _count(relay, load)
        batches = iter([oids[:100], oids[1:101], oids[2:102], oids[3:103],
                        oids[4:104], oids[5:105]])

        def prefetch():
            instance._cache.clear()
            instance.prefetch(next(batches))
        counted['prefetch of 100 objects'] = _count(relay, prefetch)
        instance.release()
        explicit.close()
        conn.close()
    finally:
        db.close()
    assert counted == EXPECTED


#: Round trips of the download of a blob of one chunk into an empty blob
#: cache, in a snapshot: the blob's row, then its chunks by COPY
#: (PostgreSQL); the row with its first chunk (MySQL; RS 4.3: 3).
BLOB_DOWNLOAD = {'postgresql': 2, 'mysql': 1}


def test_the_json_mirror_adds_no_round_trip_to_a_commit(relayed, backend):
    """json-state: the mirror's rows ride in the commit's last round
    trip."""
    relay, open_ = relayed
    if not backend.capabilities().json_mirror:
        pytest.skip('json-state is not offered on this database')
    db = ZODB.DB(open_(json_state=True))
    try:
        tm = transaction.TransactionManager()
        conn = db.open(tm)
        root = conn.root()
        root['doc'] = PersistentMapping(v=0)
        tm.commit()

        def one_object():
            tm.begin()
            root['doc']['v'] += 1
            tm.commit()
        assert _count(relay, one_object) == EXPECTED[
            'one-object commit, its polls included']
        conn.close()
    finally:
        db.close()


def test_blob_download_round_trips(relayed, backend, tmp_path):
    import ZODB.blob
    relay, open_ = relayed
    writer = open_(blob_dir=str(tmp_path / 'writer'), shared_blob_dir=False)
    db = ZODB.DB(writer)
    try:
        tm = transaction.TransactionManager()
        conn = db.open(tm)
        blobs = []
        for i in range(4):
            blob = ZODB.blob.Blob()
            with blob.open('w') as f:
                f.write(b'%d' % i * 10000)
            conn.root()[f'b{i}'] = blob
            blobs.append(blob)
        tm.commit()
        # (Blobs are ghosts after their commit: the tid from the storage.)
        tid = writer.lastTransaction()
        refs = [(blob._p_oid, tid) for blob in blobs]
        conn.close()
    finally:
        db.close()
    reader = open_(blob_dir=str(tmp_path / 'reader'), shared_blob_dir=False)
    reader.poll_invalidations()
    downloads = iter(refs)

    def download():
        oid, serial = next(downloads)
        with open(reader.loadBlob(oid, serial), 'rb') as f:
            assert len(f.read()) == 10000
    assert _count(relay, download, times=3) == BLOB_DOWNLOAD[backend.marker]


def test_an_idle_snapshot_ends_without_the_application(relayed, backend):
    """The end of a transaction does not wait for its ROLLBACK; when no
    poll follows to carry it (explicit transactions), the idle thread
    sends it: no session stays inside a transaction while the application
    is idle."""
    relay, open_ = relayed
    storage = open_()
    storage.poll_invalidations()
    cm = storage._adapter.connmanager
    before = relay.snapshot()
    storage.afterCompletion()
    assert (relay.snapshot() - before).round_trips == 0
    assert storage._rollback_due
    deadline = time.monotonic() + 5
    while storage._rollback_due and time.monotonic() < deadline:
        time.sleep(idle.IDLE_END / 4)
    with storage._lock:     # (the thread holds it while it sends)
        assert not storage._rollback_due, 'the snapshot stayed open'
        assert (relay.snapshot() - before).round_trips == 1
        if backend.marker == 'postgresql':
            # PostgreSQL: libpq says whether the session is in a
            # transaction.
            assert not cm._in_transaction(storage._load_conn)
    # The next snapshot starts as usual.
    storage.poll_invalidations()
    assert storage._snapshot_tid is not None


def test_the_poll_after_a_commit_takes_the_snapshot_the_commit_began(
        relayed):
    """A commit's last round trip also begins the snapshot of ZODB's poll
    at the end of the transaction (the load and store connections swap):
    that poll costs no round trip and reports what others committed since
    the last poll, not the instance's own commit."""
    from test_storage import _commit
    relay, open_ = relayed
    storage = open_()
    oids = [storage.new_oid() for _ in range(3)]
    for oid in oids:
        _commit(storage, oid, z64, 0)
    mine, other = storage.new_instance(), storage.new_instance()
    try:
        mine.poll_invalidations()
        other.poll_invalidations()
        serials = {oid: mine.load(oid)[1] for oid in oids}
        for round_ in range(3):
            # Another client commits, then this one.
            _commit(other, oids[0], serials[oids[0]], round_ + 1)
            serials[oids[0]] = other.lastTransaction()
            serials[oids[1]] = _commit(mine, oids[1], serials[oids[1]],
                                       round_ + 1)
            before = relay.snapshot()
            mine.sync(False)
            changed = mine.poll_invalidations()
            assert (relay.snapshot() - before).round_trips == 0
            assert changed == [oids[0]]
            assert mine._snapshot_tid == int.from_bytes(
                serials[oids[1]], 'big')
            assert mine.load(oids[0]) == (
                other.load(oids[0])[0], serials[oids[0]])
            # The store connection's snapshot, from before the swap, ends
            # with the next commit's first statement.
            assert mine._store_rollback_due
            mine.sync(True)
            mine.poll_invalidations()
    finally:
        mine.release()
        other.release()


def test_snapshots_no_poll_takes_end_when_idle(relayed, backend):
    """With explicit transactions no poll takes the snapshot a commit
    began: the idle thread ends it, and the one the store connection still
    held as the load connection; a storage committing again without polls
    (the storage API, zodbconvert) begins none."""
    from test_storage import _commit
    relay, open_ = relayed
    storage = open_()
    storage.poll_invalidations()
    oid = storage.new_oid()
    serial = _commit(storage, oid, z64, 0)
    storage.sync(False)
    storage.poll_invalidations()
    storage.load(oid)
    serial = _commit(storage, oid, serial, 1)
    assert storage._adopted is not None and storage._store_rollback_due
    cm = storage._adapter.connmanager
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        with storage._lock:
            if storage._adopted is None and not storage._store_rollback_due:
                break
        time.sleep(idle.IDLE_END / 4)
    with storage._lock:
        assert storage._adopted is None, 'the snapshot stayed open'
        assert not storage._store_rollback_due
        if backend.marker == 'postgresql':
            assert not cm._in_transaction(storage._load_conn)
            assert not cm._in_transaction(storage._store_conn)
    # No poll between two commits: the next commits begin no snapshot.
    serial = _commit(storage, oid, serial, 2)
    assert storage._adopted is None and not storage._polls_after_commit
    _commit(storage, oid, serial, 3)
    assert storage._adopted is None
    # The storage reads the last commit once it polls.
    storage.poll_invalidations()
    assert zodb_unpickle(storage.load(oid)[0]).value == 3


def test_conflicts_resolved_at_vote_cost_one_round_trip(relayed):
    """A commit whose vote meets another process's changes to several
    objects reads their committed states in one round trip, whatever
    their number: while the vote holds the locks, each round trip keeps
    other committers waiting.  (The states they were based on come from
    the process's cache.)"""
    from BTrees.Length import Length
    relay, open_ = relayed
    db1, db2 = ZODB.DB(open_()), ZODB.DB(open_())
    try:
        tm1, tm2 = (transaction.TransactionManager() for _ in range(2))
        c1, c2 = db1.open(tm1), db2.open(tm2)
        for i in range(3):
            c1.root()[f'n{i}'] = Length()
        tm1.commit()
        for i in range(2):
            # (Both its connections ready to commit: they swap roles.)
            tm2.begin()
            c2.root()['warm'] = i
            tm2.commit()
        lengths = [c2.root()[f'n{i}'] for i in range(3)]
        for length in lengths:
            length()     # loaded before the other commit
        for i in range(3):
            c1.root()[f'n{i}'].change(1)
        tm1.commit()
        for length in lengths:
            length.change(10)
        before = relay.snapshot()
        tm2.commit()
        trips = (relay.snapshot() - before).round_trips
        # The vote, the committed states, the finish (with the next poll).
        assert trips == 3
        tm1.begin()
        assert [c1.root()[f'n{i}']() for i in range(3)] == [11, 11, 11]
        c1.close()
        c2.close()
    finally:
        db1.close()
        db2.close()


def test_the_idle_thread_starts_again_in_a_forked_child():
    """A child process forked after the thread started has no thread: the
    ender starts one of its own there."""
    import os
    idle.ender.due(object.__new__(_Nothing), 0)
    assert idle.ender._thread is not None
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            if idle.ender._thread is None and idle.ender.pending() == 0:
                thing = _Nothing()
                idle.ender.due(thing, 0)
                deadline = time.monotonic() + 5
                while not thing.ended and time.monotonic() < deadline:
                    time.sleep(0.01)
                code = 0 if thing.ended else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0


def test_the_idle_thread_keeps_to_the_soonest_deadline():
    """The thread is woken only for a deadline sooner than the one it
    waits for, and ends each instance's snapshot on time: a short one given
    after a long one is not kept waiting behind it, and a deadline moved
    later by a new call is not ended early, unless the call keeps the
    time set already."""
    slow, quick, moved, kept = _Nothing(), _Nothing(), _Nothing(), (
        _Nothing())
    start = time.monotonic()
    idle.ender.due(moved, 0.05)
    idle.ender.due(kept, 0.05)
    idle.ender.due(slow, 2.0)
    idle.ender.due(quick, 0.1)
    idle.ender.due(moved, 0.6)         # later than at first
    idle.ender.due(kept, 0.6, keep=True)
    deadline = start + 5
    while not quick.ended and time.monotonic() < deadline:
        time.sleep(0.005)
    assert quick.ended and time.monotonic() - start < 1.0
    assert kept.ended
    assert not moved.ended and not slow.ended
    while not moved.ended and time.monotonic() < deadline:
        time.sleep(0.005)
    assert moved.ended and time.monotonic() - start >= 0.6
    assert not slow.ended
    while not slow.ended and time.monotonic() < deadline:
        time.sleep(0.01)
    assert slow.ended and time.monotonic() - start >= 2.0


def test_the_idle_thread_goes_on_past_an_instance_stuck_in_its_call(
        monkeypatch):
    """A call that waits (a ROLLBACK to a server that stopped answering)
    holds up no other instance: once it has taken ``STUCK`` seconds,
    another worker ends what is due, with no further call of ``due`` to
    set it going; the extra worker ends when it has had nothing to do for
    ``WORKER_IDLE`` seconds, and a quick call starts none."""
    monkeypatch.setattr(idle, 'STUCK', 0.3)
    monkeypatch.setattr(idle, 'WORKER_IDLE', 0.3)
    ender = idle._Ender()
    first = _Nothing()
    ender.due(first, 0)
    _wait_for(lambda: first.ended)
    assert ender.workers() == 1
    stuck, after, later = _Stuck(), _Nothing(), _Nothing()
    start = time.monotonic()
    ender.due(stuck, 0)
    ender.due(after, 0.05)
    assert stuck.inside.wait(5)
    _wait_for(lambda: after.ended)
    assert time.monotonic() - start >= 0.3
    assert ender.workers() == 2
    # Another call inside the stuck one's time: the free worker takes it.
    ender.due(later, 0)
    _wait_for(lambda: later.ended)
    assert ender.workers() == 2
    stuck.go_on.set()
    _wait_for(lambda: stuck.ended)
    # Both free now: one of them ends, the last stays.
    _wait_for(lambda: ender.workers() == 1)
    time.sleep(0.5)
    assert ender.workers() == 1 and ender.pending() == 0


def test_the_idle_threads_workers_are_bounded(monkeypatch):
    """Past ``MOST_WORKERS`` stuck calls the rest wait for one of them."""
    monkeypatch.setattr(idle, 'STUCK', 0.05)
    monkeypatch.setattr(idle, 'MOST_WORKERS', 3)
    ender = idle._Ender()
    stuck = [_Stuck() for _ in range(4)]
    for each in stuck:
        ender.due(each, 0)
    for each in stuck[:3]:
        assert each.inside.wait(5)
    time.sleep(0.3)
    assert ender.workers() == 3
    assert not stuck[3].inside.is_set() and ender.pending() == 1
    stuck[0].go_on.set()
    assert stuck[3].inside.wait(5)
    for each in stuck:
        each.go_on.set()
    _wait_for(lambda: all(each.ended for each in stuck))


def _wait_for(condition, seconds=5):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, 'not within %s s' % seconds
        time.sleep(0.005)


class _Stuck:
    """An instance whose call waits until told to go on."""

    ended = False

    def __init__(self):
        self.inside = threading.Event()
        self.go_on = threading.Event()

    def _end_idle_snapshot(self, loads=None):
        self.inside.set()
        self.go_on.wait(10)
        self.ended = True


class _Nothing:
    """Stands for a storage instance: records the thread's call."""

    ended = False

    def _end_idle_snapshot(self, loads=None):
        self.ended = True


#: Behind a transaction pooler (PostgreSQL's transaction-pooler): a
#: commit's last round trip begins no snapshot, so ZODB's poll at the end
#: of the transaction costs one (docs/postgresql.rst, "Behind PgBouncer").
POOLER_EXPECTED = {
    'transaction begun and aborted, nothing changed': 2,
    'one-object commit, its polls included': 4,
}


def test_round_trips_behind_a_transaction_pooler(backend, database,
                                                 keep_history):
    if backend.marker != 'postgresql':
        pytest.skip('transaction-pooler is PostgreSQL\'s')
    relay = _relay_module().Relay(backend.server()).start()
    try:
        adapter = backend.adapter(
            f'{database} host=127.0.0.1 port={relay.port}',
            transaction_pooler=True)
        db = ZODB.DB(RelStorage(adapter, keep_history=keep_history))
        try:
            tm = transaction.TransactionManager()
            conn = db.open(tm)
            root = conn.root()
            root['k0'] = PersistentMapping(v=0)
            tm.commit()

            def empty():
                tm.begin()
                root._p_activate()
                tm.abort()

            def one_object():
                tm.begin()
                root['k0']['v'] += 1
                tm.commit()
            counted = {
                'transaction begun and aborted, nothing changed':
                    _count(relay, empty),
                'one-object commit, its polls included':
                    _count(relay, one_object)}
            conn.close()
        finally:
            db.close()
    finally:
        relay.stop()
    assert counted == POOLER_EXPECTED
