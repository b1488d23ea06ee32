"""max-connections: a bound on the database connections of a process
(relstorage.storage.pool), on every backend: the bound holds under a
busy threaded workload (on the server too), a caller at the cap waits
and then fails naming the option, what is given back serves the next
caller, and ZODB's calls under its database lock do not wait for a
server that stopped answering."""
import threading
import time

import pytest
import transaction
import ZODB
from persistent.mapping import PersistentMapping
from ZODB.utils import z64

from relstorage.config.options import Options
from relstorage.errors import ConfigurationError
from relstorage.errors import MaxConnectionsError
from relstorage.storage import RelStorage
from relstorage.storage import idle
from relstorage.storage.pool import LOAD
from relstorage.storage.pool import STORE

from test_round_trips import _relay_module


def test_max_connections_is_zero_or_at_least_three():
    assert Options().max_connections == 0
    assert Options(max_connections=3).max_connections == 3
    for bad in (1, 2, -1, 'many'):
        with pytest.raises(ConfigurationError, match='max-connections'):
            Options(max_connections=bad)
    with pytest.raises(ConfigurationError, match='max-connections-wait'):
        Options(max_connections_wait=-1)


def _poll(instance):
    """Start a transaction's snapshot, as ZODB's begin does."""
    instance.sync(True)
    instance.poll_invalidations()


def _end(instance):
    """End the transaction, as ZODB does after a commit or an abort."""
    instance.afterCompletion()


def test_a_caller_at_the_cap_waits_then_fails_naming_the_option(
        open_storage):
    root = open_storage(max_connections=3, max_connections_wait=0.3)
    first, second = root.new_instance(), root.new_instance()
    try:
        _poll(first)
        started = time.monotonic()
        with pytest.raises(MaxConnectionsError) as raised:
            # Two short of the cap: the last two are kept for a commit of
            # a transaction already holding one, and for object ids.
            _poll(second)
        waited = time.monotonic() - started
        assert 0.3 <= waited < 5
        assert 'max-connections' in str(raised.value)
        assert 'max-connections-wait' in str(raised.value)
        figures = root.metrics()
        assert figures['connection_timeouts'] == 1
        assert figures['connection_waits'] == 1
        assert figures['connection_wait_seconds'] >= 0.3
        assert figures['max_connections'] == 3
        # The end of the first transaction gives its connection back.
        _end(first)
        _poll(second)
        assert second._snapshot_tid is not None
        _end(second)
    finally:
        first.release()
        second.release()


def test_a_waiting_caller_gets_what_is_given_back(open_storage):
    root = open_storage(max_connections=3, max_connections_wait=10)
    first, second = root.new_instance(), root.new_instance()
    polled = threading.Event()
    thread = threading.Thread(target=lambda: (_poll(second), polled.set()))
    try:
        _poll(first)
        thread.start()
        assert not polled.wait(0.3), 'it did not wait at the cap'
        _end(first)
        assert polled.wait(10), 'the connection given back did not serve'
        assert root.metrics()['connection_waits'] == 1
        assert root.metrics()['connection_timeouts'] == 0
    finally:
        thread.join(10)
        first.release()
        second.release()


def test_a_commit_and_its_object_ids_get_connections_at_the_cap(
        open_storage):
    """With the least bound a transaction that holds its snapshot still
    gets a connection to commit and one to reserve object ids: those are
    what the levels keep free."""
    root = open_storage(max_connections=3, max_connections_wait=0.5)
    instance = root.new_instance()
    try:
        _poll(instance)
        txn = transaction.Transaction()
        instance.tpc_begin(txn)
        root._oids.forget()     # the next new_oid reserves a block
        oid = instance.new_oid()
        instance.store(oid, z64, b'state', '', txn)
        instance.tpc_vote(txn)
        tid = instance.tpc_finish(txn)
        _end(instance)
        _poll(instance)
        assert instance.load(oid) == (b'state', tid)
        _end(instance)
        assert root.metrics()['connection_waits'] == 0
    finally:
        instance.release()


def _waits_until(pool, waits, seconds=5):
    deadline = time.monotonic() + seconds
    while pool.waits < waits and time.monotonic() < deadline:
        time.sleep(0.01)
    return pool.waits


def test_a_connection_given_back_wakes_a_waiter_that_can_go_on(
        open_storage):
    """Waiters at different levels: a first connection waits (first,
    so that a single wake-up would go to it), then a commit's second.  The
    connection given back lets the commit go on at once, though the first
    taker woken with it still cannot."""
    root = open_storage(max_connections=4, max_connections_wait=10)
    pool = root._pool
    held = [pool.take(LOAD), pool.take(LOAD)]   # first connections' level
    store = pool.take(STORE, held=1)            # second connections' level
    got = {}

    def take(name, kind, level):
        got[name] = pool.take(kind, level)
    first = threading.Thread(target=take, args=('first', LOAD, 0))
    second = threading.Thread(target=take, args=('second', STORE, 1))
    try:
        first.start()
        assert _waits_until(pool, 1) == 1
        second.start()
        assert _waits_until(pool, 2) == 2
        started = time.monotonic()
        pool.give(store)
        second.join(5)
        assert 'second' in got, 'the commit slept through the wake-up'
        assert time.monotonic() - started < pool.wait / 2
        assert 'first' not in got       # still at its level's cap
        held.append(got['second'])
        pool.give(held.pop(0))
        pool.give(held.pop(0))          # one busy: below its level
        first.join(5)
        assert 'first' in got
        held.append(got['first'])
        assert pool.timeouts == 0
    finally:
        for entry in held:
            pool.give(entry)
        first.join(10)
        second.join(10)
        pool.close_idle()


def _busy_until(pool, busy, seconds=5):
    deadline = time.monotonic() + seconds
    while pool.stats()['busy'] != busy and time.monotonic() < deadline:
        time.sleep(idle.IDLE_END / 4)
    return pool.stats()['busy']


def test_between_transactions_an_instance_holds_no_connection(open_db):
    """A ZODB Connection holds a database connection for its transaction;
    after it only for the snapshot of ZODB's poll at the end of the
    transaction, until the Connection is closed or (unread) the idle
    thread ends it: between requests a server's threads hold none."""
    db = open_db(max_connections=4)
    pool = db.storage._pool
    tm = transaction.TransactionManager()
    conn = db.open(tm)
    try:
        tm.begin()
        conn.root()['x'] = PersistentMapping(v=1)
        assert pool.stats()['busy'] == 1
        tm.commit()
        # The commit's connection holds the end poll's snapshot, which
        # the idle thread ends when nothing reads from it.
        assert pool.stats()['busy'] == 1
        assert _busy_until(pool, 0, idle.IDLE_BETWEEN + 5) == 0
        tm.begin()
        assert conn.root()['x']['v'] == 1
        tm.abort()
        conn.close()
        # Closed: given back at once.
        assert pool.stats()['busy'] == 0
        conn = db.open(tm)
        tm.begin()
        assert conn.root()['x']['v'] == 1
        assert pool.stats()['busy'] == 1
        tm.commit()
        conn.close()
        assert pool.stats()['busy'] == 0
        assert pool.stats()['open'] <= 4
    finally:
        conn.close()


def _busy(db, threads=8, requests=10):
    """Threads serving requests on ``db``, each on an object of its own;
    returns the errors."""
    with db.transaction() as conn:
        for t in range(threads):
            conn.root()[t] = PersistentMapping(n=0)
    errors = []

    def work(t):
        try:
            for _ in range(requests):
                tm = transaction.TransactionManager()
                conn = db.open(tm)
                try:
                    tm.begin()
                    conn.root()[t]['n'] += 1
                    sum(conn.root()[o]['n'] for o in range(threads))
                    tm.commit()
                finally:
                    conn.close()
        except Exception as e:  # reported below
            errors.append(e)

    workers = [threading.Thread(target=work, args=(t,))
               for t in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
    with db.transaction() as conn:
        counts = [conn.root()[t]['n'] for t in range(threads)]
    assert counts == [requests] * threads, errors
    return errors


def _watch(count):
    """``stop``: ``count()`` sampled every 5 ms in a thread
    until ``stop()``, which returns the most it saw."""
    most = [0]
    done = threading.Event()

    def watch():
        while not done.is_set():
            most[0] = max(most[0], count())
            done.wait(0.005)
    thread = threading.Thread(target=watch)
    thread.start()

    def stop():
        done.set()
        thread.join(10)
        return most[0]
    return stop


def _server_sessions(backend, database):
    sessions = getattr(backend, 'sessions', None)
    return None if sessions is None else sessions(database)


@pytest.mark.parametrize('bound', [4, 6])
def test_a_busy_process_stays_within_the_bound(open_db, backend, database,
                                               bound):
    """Eight threads, each opening a ZODB connection per request, reading,
    and committing on objects of its own: every commit lands, and neither
    the pool nor the server ever sees more than ``bound`` connections."""
    db = open_db(max_connections=bound, max_connections_wait=20)
    pool = db.storage._pool
    stop_open = _watch(lambda: pool.stats()['open'])
    stop_server = _watch(
        lambda: _server_sessions(backend, database) or 0)
    try:
        assert _busy(db, threads=8, requests=12) == []
    finally:
        most_open, most_server = stop_open(), stop_server()
    stats = pool.stats()
    assert stats['most_open'] <= bound
    assert most_open <= bound
    assert most_server <= bound
    assert stats['timeouts'] == 0


@pytest.fixture
def frozen_relay(backend, database, keep_history):
    """``(relay, open(**options))`` like test_round_trips' ``relayed``,
    with a connect timeout: a new connection to a frozen relay fails
    after 2 seconds rather than never."""
    if not hasattr(backend, 'server'):
        pytest.skip(f'{backend.name} is embedded: no server to lose')
    relay = _relay_module().Relay(backend.server()).start()
    opened = []

    def open_(**options):
        if backend.marker == 'postgresql':
            adapter = backend.adapter(
                f'{database} host=127.0.0.1 port={relay.port} '
                f'connect_timeout=2')
        else:
            adapter = backend.adapter(database, port=relay.port,
                                      connect_timeout=2)
        storage = RelStorage(adapter, keep_history=keep_history, **options)
        opened.append(storage)
        return storage

    yield relay, open_
    relay.thaw()
    for storage in opened:
        storage.close()
    relay.stop()


def _start(call):
    """Run ``call()`` in a thread of its own: ``(thread, outcome)``,
    ``outcome`` getting its result or the exception it raised."""
    outcome = {}

    def run():
        try:
            outcome['result'] = call()
        except BaseException as e:
            outcome['error'] = e
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def _within(seconds, call):
    """``call()``'s outcome, failing the test if it takes longer than
    ``seconds`` (a hang fails the test rather than the run)."""
    thread, outcome = _start(call)
    thread.join(seconds)
    assert not thread.is_alive(), f'still waiting after {seconds}s: {call}'
    return outcome


@pytest.mark.parametrize('bound', [0, 3])
def test_zodb_does_not_hang_on_a_server_that_stopped_answering(
        frozen_relay, bound):
    """A thread stuck on a server that stopped answering holds its
    connection; ZODB's calls under its database's lock (opening a
    Connection, releasing the storage instances of closed ones) must not
    wait for it, and a transaction that needs a connection fails within
    max-connections-wait (or the connect timeout) instead of hanging."""
    relay, open_ = frozen_relay
    db = ZODB.DB(open_(max_connections=bound, max_connections_wait=1),
                 pool_size=1)
    blocked = threading.Thread()
    try:
        with db.transaction() as conn:
            conn.root()['x'] = PersistentMapping(v=1)
        # Two more ZODB Connections, to close later: ZODB keeps one.
        idle_conns = [db.open(transaction.TransactionManager())
                      for _ in range(2)]
        tm_stuck = transaction.TransactionManager()
        stuck = db.open(tm_stuck)
        tm_stuck.begin()
        stuck.root()
        stuck.cacheMinimize()
        db.storage._cache.clear()
        relay.freeze()
        # This thread now waits for the server, inside its snapshot.
        blocked = threading.Thread(
            target=lambda: stuck.root()['x']['v'], daemon=True)
        blocked.start()
        # Long enough for the idle thread (relstorage.storage.idle) to end
        # the snapshots the idle Connections' polls opened: its ROLLBACKs
        # wait for the frozen server too, holding those instances.
        time.sleep(idle.IDLE_BETWEEN + 0.3)
        assert blocked.is_alive()
        instances = [c._storage for c in db.pool.all]

        def released():
            return sum(i._closed for i in instances)
        before = released()
        # Under ZODB's lock: closing a Connection (its afterCompletion),
        # and the shrinking of ZODB's pool to its size, which releases
        # the storage instance of the Connection it lets go.
        for conn in idle_conns:
            _within(5, conn.close)
        assert released() == before + 1
        # A ZODB Connection opened now needs a database connection for its
        # poll.  With max-connections the one the stuck thread holds is
        # the only one a transaction may have (3 keep two for commits and
        # object ids): it fails after max-connections-wait.  Without, it
        # reuses the connection of the Connection ZODB kept, and waits for
        # the server like the stuck thread.
        opening, outcome = _start(
            lambda: db.open(transaction.TransactionManager()))
        opening.join(3)
        if bound:
            assert not opening.is_alive()
            assert isinstance(outcome.get('error'), MaxConnectionsError)
            # (ZODB leaves the Connection whose open failed half open,
            # unknown to its transaction manager: closed as it expects.)
            for conn in db.pool.all:
                if conn.opened and conn is not stuck:
                    conn.transaction_manager.registerSynch(conn)
                    conn.close()
        # Either way ZODB's lock is free: calls that take it answer.
        _within(2, db.connectionDebugInfo)
        _within(2, lambda: db.setPoolSize(2))
        relay.thaw()
        opening.join(10)
        assert not opening.is_alive()
        if not bound:
            outcome['result'].close()
        relay.thaw()
        blocked.join(10)
        assert not blocked.is_alive()
        tm_stuck.abort()
        stuck.close()
    finally:
        relay.thaw()
        blocked.join(10)
        db.close()


@pytest.mark.parametrize('bound', [0, 3])
def test_close_and_release_leave_the_idle_threads_rollback_to_it(
        frozen_relay, bound):
    """The idle thread's ROLLBACK waits for a server that stopped answering,
    holding the instance: ending the transaction and releasing the instance
    return at once, and happen when the server answers again."""
    relay, open_ = frozen_relay
    root = open_(max_connections=bound, max_connections_wait=1)
    instance = root.new_instance()
    # ZODB's poll at the end of a transaction: a snapshot between
    # transactions, which the idle thread ends once unused.
    instance.sync(False)
    instance.poll_invalidations()
    assert root._pool.stats()['busy'] == 1
    relay.freeze()
    time.sleep(idle.IDLE_BETWEEN + 0.3)
    # The idle thread is inside, waiting for the server.
    assert instance._ender_inside
    _within(2, instance.afterCompletion)
    assert not _within(2, instance.release).get('error')
    assert instance._closed
    assert root._pool.stats()['busy'] == 1
    relay.thaw()
    deadline = time.monotonic() + 10
    while root._pool.stats()['busy'] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert root._pool.stats()['busy'] == 0
    assert instance._released and instance._load_conn is None
    assert instance._left == []


def test_a_server_that_stopped_answering_holds_up_no_other_storage(
        frozen_relay, backend, database, keep_history):
    """The idle thread's ROLLBACK to a server that stopped answering waits
    (until TCP gives up); the snapshot another storage of the process left
    on a server that answers is ended all the same, not left idle inside
    its transaction meanwhile (what VACUUM and InnoDB's purge wait for)."""
    relay, open_ = frozen_relay
    frozen = open_().new_instance()
    other_root = backend.open(database, keep_history=keep_history)
    other = other_root.new_instance()
    try:
        # ZODB's polls at the end of a transaction, in both: snapshots
        # between transactions that the idle thread ends once unused, the
        # frozen server's first.
        frozen.sync(False)
        frozen.poll_invalidations()
        relay.freeze()
        other.sync(False)
        other.poll_invalidations()
        assert other._snapshot_tid is not None
        deadline = time.monotonic() + idle.IDLE_BETWEEN + idle.STUCK + 5
        while (other._snapshot_tid is not None
               and time.monotonic() < deadline):
            time.sleep(0.02)
        # Ended, and the frozen storage's ROLLBACK still waiting.
        assert other._snapshot_tid is None and not other._rollback_due
        assert frozen._ender_inside
    finally:
        relay.thaw()
        deadline = time.monotonic() + 10
        while frozen._ender_inside and time.monotonic() < deadline:
            time.sleep(0.05)
        frozen.release()
        other.release()
        other_root.close()
