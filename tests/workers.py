"""Child-process programs for tests/test_processes.py and
tests/test_invariants.py (not a test module).

Run as ``python tests/workers.py COMMAND CONFIG_FILE [ARGS...]``, where
CONFIG_FILE holds the ZConfig text of a ``<relstorage>`` section (the text
of ``backend.zconfig()``), so that a child opens whichever database the
parent's backend fixture made, through the same configuration path a real
deployment uses.

A child talks to its parent in lines: everything it writes on stdout is one
JSON object per line with an ``event`` key; the parent answers on stdin with
plain words (``go``, ``abort``, ``finish``).  Tracebacks go to stderr.

Commands:

``counter CONFIG NAME N [PAUSE]``
    Says ``ready`` once the database is open, waits for ``go``, then runs N
    transactions, each incrementing the shared ``Counter`` at
    ``root['counter']`` and recording the new value under its own index in
    ``root['logs'][NAME]`` (an OOBTree), retrying on conflicts.  PAUSE
    (seconds, default 0) is slept between changing the objects and
    committing, to widen the race window.  Checks in every transaction
    that its view is consistent (the counter equals the number of entries
    in all logs; ``inconsistent_views`` counts the failures) and counts
    the fresh transactions whose view showed the counter above what this
    process last knew (``foreign_views``: other processes' commits became
    visible); if none did by its last commit (it won every race before
    the others got going), it polls until one does.  Ends with a
    ``result`` event.

``hold CONFIG [wait] [pause-commit] OID_HEX...``
    With ``wait``, first says ``ready`` (the database open, the serials
    read, the new oid allocated) and waits for ``go``.  With
    ``pause-commit``, the finish says ``committing`` and stops just
    before its COMMIT statement, where the database has one (SQLite),
    to be killed there.  Then stores a new state (``MinPO(('held', oid))``) for each given oid plus
    one new object, through the storage API directly, says ``voting``,
    votes, says ``voted``
    and then keeps the transaction open, holding whatever locks vote took,
    until stdin says ``abort`` or ``finish`` (or closes: abort); says
    ``finishing`` before it finishes.  Made to be killed while it holds
    the locks, waits for them, or finishes.

``transfers CONFIG NAME N TOTAL SEED [PAUSE [BEGIN]]``
    Says ``ready`` once the database is open, waits for ``go``, then runs N
    transactions, each moving money between two of the ``Account`` objects
    in ``root['accounts']`` (an OOBTree keyed 0, 1, ...) and appending
    ``(source, target, amount, witness, seen_source, seen_target,
    seen_witness)`` under its index in ``root['transfers'][NAME]`` (an
    OOBTree), retrying on conflicts.  A transfer never overdraws its source
    (the amount is capped by the source's balance, possibly to 0).  About
    one transaction in four is a witnessed transfer: it reads a third
    account (the witness, -1 in other entries), ``readCurrent()``s it and
    moves an amount derived from the witness's balance, or 0 when that is
    not positive.  Before writing, every transaction reads all the
    balances and checks that they add up to TOTAL; a view that does not is
    a torn state, counted in ``torn`` (the run goes on).  The same check
    runs in a read-only transaction before every AUDIT_EVERY-th transfer.
    Views also count in ``went_backwards`` when every account is older
    than in an earlier view, and in ``lost_own`` when the process's own
    log misses one of its committed transfers.  SEED seeds the
    choices; PAUSE (seconds, default 0) is slept between changing the
    objects and committing.  BEGIN is ``explicit`` (the default: an
    explicit transaction manager, ``begin()`` before every transaction) or
    ``implicit`` (a classic manager and no ``begin()``: each transaction
    starts when the previous one ends, the way many applications run).
    Ends with a ``result`` event that holds,
    among the counts, the tid of each committed transfer (``tids``).

``loop CONFIG NAME SECONDS [PAUSE [PATIENCE]]``
    Says ``ready`` (with the current ``value``), then runs a period of
    commits at every ``go`` until stdin closes or says anything else.  A
    period lasts SECONDS, or until stdin says ``stop``: each transaction
    reads the counters of ``root['loops'][NAME]`` (see ``prepare_loops``),
    counts a view where they differ (``torn``) and sets all of them to the
    first one's value plus one.  Says ``acked`` (``value``, ``tid``) as
    soon as each ``commit()`` returns, so that a parent that kills it
    knows what it was told was committed.  A retryable error is retried
    after 0.1 s (``first_error`` reports the first of each kind in a
    period) for up to PATIENCE seconds (default 60) of failures in a row;
    a CommitOutcomeUnknownError says ``unknown`` and goes on from what the
    database holds.  A period ends with a ``result`` event.

``oids CONFIG COUNT``
    Says ``ready``, waits for ``go``, calls ``new_oid()`` COUNT times and
    reports the ids (as integers) in a ``result`` event.

Every child exits by itself after ``MAX_LIFETIME`` seconds, whatever
happens, so that a lost parent or a bug cannot leave it running.
"""
import json
import os
import sys
import threading
import time

from BTrees.OOBTree import OOBTree
from persistent import Persistent
from persistent.mapping import PersistentMapping

#: Seconds after which a child exits, whatever it is doing.
MAX_LIFETIME = 120

#: Attempts of one counter transaction before the child gives up.
MAX_ATTEMPTS = 500

#: Seconds a counter worker that saw no other process's commit while it
#: ran waits for one after its last commit.
FOREIGN_WAIT = 30

#: What the ``hold`` command writes in the transaction's description.
HOLD_DESCRIPTION = 'held open by tests/workers.py'


class Counter(Persistent):
    """A counter that every process increments.

    It deliberately has no ``_p_resolveConflict``: two concurrent
    increments are a real ConflictError that the loser must retry.
    """

    value = 0


class Account(Persistent):
    """A bank account that every ``transfers`` process debits and credits.

    It deliberately has no ``_p_resolveConflict``: concurrent changes of
    one account are a real ConflictError that the loser must retry.
    """

    balance = 0


def prepare_accounts(root, balances, names):
    """Create what the ``transfers`` command expects under ``root``: the
    accounts with the given opening ``balances`` and one empty transfer
    log per worker name."""
    accounts = root['accounts'] = OOBTree()
    for number, balance in enumerate(balances):
        accounts[number] = Account()
        accounts[number].balance = balance
    root['transfers'] = PersistentMapping(
        {name: OOBTree() for name in names})


def prepare_counter(root, names):
    """Create what the ``counter`` command expects under ``root``: the
    shared counter and one empty log per worker name."""
    root['counter'] = Counter()
    root['logs'] = PersistentMapping({name: OOBTree() for name in names})


def held_state(oid_int):
    """The value the ``hold`` command gives the object ``oid_int``."""
    return ('held', oid_int)


# -- plumbing -----------------------------------------------------------

def emit(event, **fields):
    fields['event'] = event
    sys.stdout.write(json.dumps(fields) + '\n')
    sys.stdout.flush()


def read_command():
    """The next word from the parent; '' when stdin is closed."""
    return sys.stdin.readline().strip()


def wait_for_go():
    word = read_command()
    if word != 'go':
        raise SystemExit(f'expected "go" from the parent, got {word!r}')


def start_watchdog(seconds=MAX_LIFETIME):
    def expire():
        time.sleep(seconds)
        sys.stderr.write(f'workers.py: still running after {seconds}s; '
                         'exiting\n')
        sys.stderr.flush()
        os._exit(3)
    threading.Thread(target=expire, name='watchdog', daemon=True).start()


def open_storage(config_path):
    import ZODB.config
    with open(config_path, encoding='utf-8') as f:
        text = f.read()
    return ZODB.config.storageFromString(text)


# -- commands -----------------------------------------------------------

def run_counter(config_path, name, count, pause='0'):
    import transaction
    import ZODB
    from ZODB.POSException import ConflictError
    from transaction.interfaces import TransientError

    count = int(count)
    pause = float(pause)
    db = ZODB.DB(open_storage(config_path))
    try:
        tm = transaction.TransactionManager(explicit=True)
        conn = db.open(tm)
        try:
            # Touch the objects once so that the timed part is the commits.
            with tm:
                root = conn.root()
                start_value = root['counter'].value
                assert len(root['logs'][name]) == 0, 'log is not empty'
            emit('ready', name=name, pid=os.getpid())
            wait_for_go()
            stats = dict(conflicts=0, lock_timeouts=0, foreign_views=0,
                         went_backwards=0, inconsistent_views=0, attempts=0,
                         waited_for_others=0)
            values = []
            # The counter value this process last knew of: what it read
            # before "go", then the value of its own last commit.  A fresh
            # transaction that finds more saw other processes' commits.
            last_known = start_value
            started = time.monotonic()
            for i in range(count):
                for _ in range(MAX_ATTEMPTS):
                    stats['attempts'] += 1
                    tm.begin()
                    try:
                        root = conn.root()
                        counter = root['counter']
                        seen = counter.value
                        if seen > last_known:
                            stats['foreign_views'] += 1
                        elif seen < last_known:
                            stats['went_backwards'] += 1
                        # Every committed state has one log entry per
                        # increment; a view mixing fresh and stale objects
                        # (a missed invalidation) breaks that.
                        entries = sum(len(log)
                                      for log in root['logs'].values())
                        if entries != seen:
                            stats['inconsistent_views'] += 1
                        last_known = max(last_known, seen)
                        counter.value = seen + 1
                        root['logs'][name][i] = seen + 1
                        if pause:
                            time.sleep(pause)
                        tm.commit()
                    except ConflictError:
                        tm.abort()
                        stats['conflicts'] += 1
                        continue
                    except TransientError:
                        # e.g. CommitLockTimeoutError: nothing was written.
                        tm.abort()
                        stats['lock_timeouts'] += 1
                        continue
                    last_known = seen + 1
                    values.append(last_known)
                    break
                else:
                    raise RuntimeError(
                        f'{name}: transaction {i} failed {MAX_ATTEMPTS} '
                        f'times')
            if not stats['foreign_views']:
                # Every commit of this process came before any commit of
                # the others (the lock is not fair: this happens).  Those
                # are still to come: wait for a view that shows one.
                waited = time.monotonic()
                deadline = waited + FOREIGN_WAIT
                while time.monotonic() < deadline:
                    tm.begin()
                    seen = conn.root()['counter'].value
                    tm.abort()
                    if seen > last_known:
                        stats['foreign_views'] += 1
                        break
                    time.sleep(0.005)
                stats['waited_for_others'] = round(
                    time.monotonic() - waited, 3)
            emit('result', name=name, committed=len(values), values=values,
                 start_value=start_value,
                 seconds=round(time.monotonic() - started, 3), **stats)
        finally:
            conn.close()
    finally:
        db.close()


#: Share of the ``transfers`` transactions that are witnessed transfers.
WITNESSED = 0.25

#: Largest amount one transfer moves.
MAX_AMOUNT = 10

#: A ``transfers`` worker runs a read-only transaction that checks its
#: view before every AUDIT_EVERY-th transfer.
AUDIT_EVERY = 5

#: Torn views a ``transfers`` worker describes in its result.
TORN_EXAMPLES = 3


def witnessed_amount(seen_source, seen_witness):
    """What a witnessed transfer moves out of a source holding
    ``seen_source`` when its witness holds ``seen_witness``: nothing unless
    the witness's balance is positive, else one more than that balance
    modulo MAX_AMOUNT, but never more than the source holds."""
    if seen_witness <= 0:
        return 0
    return min(seen_source, 1 + seen_witness % MAX_AMOUNT)


def _snapshot_tids(storage, objects):
    """``{position: tid}`` of ``objects`` as the storage's open read
    snapshot holds them (relstorage's internals, for a torn view's
    report), or the error that prevented reading them."""
    try:
        if storage._snapshot_tid is None:
            return 'no snapshot open'
        oids = [int.from_bytes(o._p_oid, 'big') for o in objects]
        current = storage._adapter.mover.current_tids(
            storage._load_cursor, oids)
        return {n: current.get(oid) for n, oid in enumerate(oids)}
    except Exception as e:   # a report must not hide the torn view
        return repr(e)


def run_transfers(config_path, name, count, total, seed, pause='0',
                  begin='explicit'):
    import random

    import transaction
    import ZODB
    from ZODB.POSException import ConflictError
    from ZODB.POSException import ReadConflictError
    from transaction.interfaces import TransientError

    from relstorage.errors import CommitLockTimeoutError
    from relstorage.errors import LockConflictError

    count = int(count)
    total = int(total)
    pause = float(pause)
    if begin not in ('explicit', 'implicit'):
        raise SystemExit(f'BEGIN must be explicit or implicit: {begin!r}')
    explicit = begin == 'explicit'
    rng = random.Random(f'{seed}/{name}')
    db = ZODB.DB(open_storage(config_path))
    try:
        tm = transaction.TransactionManager(explicit=explicit)
        conn = db.open(tm)

        def start():
            # Without explicit transactions the Connection already moved
            # to a new view when the previous transaction ended.
            if explicit:
                tm.begin()

        try:
            with tm:
                root = conn.root()
                numbers = list(root['accounts'].keys())
                opening = sum(a.balance for a in root['accounts'].values())
                assert len(root['transfers'][name]) == 0, 'log not empty'
            emit('ready', name=name, pid=os.getpid(), accounts=len(numbers),
                 opening_total=opening)
            wait_for_go()
            stats = dict(attempts=0, conflicts=0, read_conflicts=0,
                         lock_conflicts=0, lock_timeouts=0,
                         other_transient=0, witnessed=0, zero_amounts=0,
                         views=0, audits=0, torn=0, went_backwards=0,
                         lost_own=0)
            torn_examples = []
            tids = []
            # The newest account serial this process has seen: a later
            # view showing only older ones went back in time.
            newest = [0]

            def look(i):
                """Read every balance in the current transaction (which
                loads every account: none stays a ghost) and check the
                view; return ``{number: balance}``."""
                root = conn.root()
                accounts = root['accounts']
                view = {n: accounts[n].balance for n in numbers}
                stats['views'] += 1
                if sum(view.values()) != total:
                    stats['torn'] += 1
                    if len(torn_examples) < TORN_EXAMPLES:
                        # With what tells a stale object (a serial
                        # before the view's changes) from one loaded
                        # ahead of it (a serial after the poll), and
                        # what the snapshot itself holds.
                        storage = conn._storage
                        torn_examples.append(dict(
                            transaction=i, sum=sum(view.values()),
                            balances=view,
                            serials={n: int.from_bytes(
                                accounts[n]._p_serial, 'big')
                                for n in numbers},
                            polled=getattr(storage, '_polled_tid', None),
                            snapshot=getattr(storage, '_snapshot_tid',
                                             None),
                            in_snapshot=_snapshot_tids(
                                storage, [accounts[n] for n in numbers])))
                serial = max(int.from_bytes(accounts[n]._p_serial, 'big')
                             for n in numbers)
                if serial < newest[0]:
                    stats['went_backwards'] += 1
                newest[0] = max(newest[0], serial)
                # Its own earlier transfers are visible to it.
                if len(root['transfers'][name]) != i:
                    stats['lost_own'] += 1
                return view

            started = time.monotonic()
            for i in range(count):
                if i % AUDIT_EVERY == 0:
                    # A read-only transaction now and then.
                    start()
                    look(i)
                    tm.commit()
                    stats['audits'] += 1
                for _ in range(MAX_ATTEMPTS):
                    stats['attempts'] += 1
                    start()
                    try:
                        root = conn.root()
                        accounts = root['accounts']
                        view = look(i)
                        source, target = rng.sample(numbers, 2)
                        if rng.random() < WITNESSED:
                            witness = rng.choice(
                                [n for n in numbers
                                 if n not in (source, target)])
                            witness_acct = accounts[witness]
                            seen_witness = witness_acct.balance
                            assert witness_acct._p_changed is False
                            conn.readCurrent(witness_acct)
                            amount = witnessed_amount(
                                view[source], seen_witness)
                        else:
                            witness = seen_witness = -1
                            amount = min(view[source],
                                         rng.randint(1, MAX_AMOUNT))
                        src, dst = accounts[source], accounts[target]
                        entry = (source, target, amount, witness,
                                 src.balance, dst.balance, seen_witness)
                        src.balance -= amount
                        dst.balance += amount
                        root['transfers'][name][i] = entry
                        if pause:
                            time.sleep(pause)
                        tm.commit()
                    except ReadConflictError:
                        tm.abort()
                        stats['read_conflicts'] += 1
                        stats['conflicts'] += 1
                        continue
                    except LockConflictError:
                        tm.abort()
                        stats['lock_conflicts'] += 1
                        stats['conflicts'] += 1
                        continue
                    except ConflictError:
                        tm.abort()
                        stats['conflicts'] += 1
                        continue
                    except CommitLockTimeoutError:
                        tm.abort()
                        stats['lock_timeouts'] += 1
                        continue
                    except TransientError:
                        tm.abort()
                        stats['other_transient'] += 1
                        continue
                    # The new serial of a changed object is the commit's tid.
                    tids.append(int.from_bytes(src._p_serial, 'big'))
                    if witness >= 0:
                        stats['witnessed'] += 1
                    if not amount:
                        stats['zero_amounts'] += 1
                    break
                else:
                    raise RuntimeError(
                        f'{name}: transaction {i} failed {MAX_ATTEMPTS} '
                        f'times')
            emit('result', name=name, committed=len(tids), tids=tids,
                 torn_examples=torn_examples,
                 seconds=round(time.monotonic() - started, 3), **stats)
        finally:
            conn.close()
    finally:
        db.close()


def run_hold(config_path, *oid_hexes):
    from ZODB.Connection import TransactionMetaData
    from ZODB.tests.MinPO import MinPO
    from ZODB.tests.StorageTestBase import zodb_pickle
    from ZODB.utils import p64
    from ZODB.utils import u64
    from ZODB.utils import z64

    flags = set()
    while oid_hexes and oid_hexes[0] in ('wait', 'pause-commit'):
        flags.add(oid_hexes[0])
        oid_hexes = oid_hexes[1:]
    handshake = 'wait' in flags
    storage = open_storage(config_path)
    if 'pause-commit' in flags:
        # Where the last step ends in a COMMIT statement of its own (not
        # one round trip with the rows), stop just before it.
        connmanager = storage._adapter.connmanager
        commit = connmanager.commit

        def paused(conn, cursor):
            emit('committing')
            time.sleep(MAX_LIFETIME)
            commit(conn, cursor)
        connmanager.commit = paused
    try:
        oids = [p64(int(h, 16)) for h in oid_hexes]
        # Read the serials before the commit starts, as a Connection would.
        serials = {oid: storage.load(oid)[1] for oid in oids}
        new_oid = storage.new_oid()
        if handshake:
            emit('ready', pid=os.getpid())
            wait_for_go()
        txn = TransactionMetaData(description=HOLD_DESCRIPTION)
        storage.tpc_begin(txn)
        for oid in oids:
            storage.store(oid, serials[oid],
                          zodb_pickle(MinPO(held_state(u64(oid)))), '', txn)
        storage.store(new_oid, z64, zodb_pickle(MinPO('new')), '', txn)
        emit('voting', pid=os.getpid(), new_oid=u64(new_oid))
        storage.tpc_vote(txn)
        emit('voted', pid=os.getpid(), new_oid=u64(new_oid),
             serials={f'{u64(o):x}': u64(s) for o, s in serials.items()})
        word = read_command()
        if word == 'finish':
            emit('finishing')
            tid = storage.tpc_finish(txn)
            emit('finished', tid=u64(tid))
        else:
            storage.tpc_abort(txn)
            emit('aborted', command=word)
    finally:
        storage.close()


def prepare_loops(root, names, objects):
    """Create what the ``loop`` command expects under ``root``: for each
    worker name a list of ``objects`` counters of its own."""
    from persistent.list import PersistentList
    root['loops'] = PersistentMapping({
        name: PersistentList(Counter() for _ in range(objects))
        for name in names})


def run_loop(config_path, name, seconds, pause='0', patience='60'):
    import queue
    import transaction
    import ZODB
    from transaction.interfaces import TransientError
    from ZODB.utils import u64
    from relstorage.errors import CommitOutcomeUnknownError

    seconds, pause, patience = float(seconds), float(pause), float(patience)
    db = ZODB.DB(open_storage(config_path))
    tm = transaction.TransactionManager(explicit=True)
    conn = db.open(tm)
    with tm:
        start = conn.root()['loops'][name][0].value
    words = queue.Queue()

    def listen():
        while True:
            word = read_command()
            words.put(word)
            if not word:
                return
    threading.Thread(target=listen, daemon=True).start()
    emit('ready', name=name, pid=os.getpid(), value=start)
    while words.get() == 'go':
        period(name, seconds, pause, patience, tm, conn, words, u64,
               TransientError, CommitOutcomeUnknownError)
    conn.close()
    db.close()


def period(name, seconds, pause, patience, tm, conn, words, u64,
           TransientError, CommitOutcomeUnknownError):
    """One run of the ``loop`` command, until the time is up or "stop"."""
    deadline = time.monotonic() + seconds
    errors = {}
    failing_since = None
    torn = committed = 0
    while time.monotonic() < deadline and words.empty():
        try:
            tm.begin()
            counters = conn.root()['loops'][name]
            values = [c.value for c in counters]
            if len(set(values)) != 1:
                torn += 1
            for c in counters:
                c.value = values[0] + 1
            if pause:
                time.sleep(pause)
            tm.commit()
        except CommitOutcomeUnknownError as e:
            tm.abort()
            emit('unknown', value=values[0] + 1, error=str(e))
            # The next transaction reads what became of it.
            continue
        except TransientError as e:
            tm.abort()
            kind = type(e).__name__
            if kind not in errors:
                emit('first_error', kind=kind, error=str(e))
            errors[kind] = errors.get(kind, 0) + 1
            failing_since = failing_since or time.monotonic()
            if time.monotonic() - failing_since > patience:
                raise
            time.sleep(0.1)
            continue
        failing_since = None
        committed += 1
        emit('acked', value=values[0] + 1, tid=u64(counters[0]._p_serial))
    if not words.empty() and words.queue[0] == 'stop':
        words.get()
    emit('result', committed=committed, torn=torn, errors=errors)


def run_oids(config_path, count):
    from ZODB.utils import u64

    count = int(count)
    storage = open_storage(config_path)
    try:
        emit('ready', pid=os.getpid())
        wait_for_go()
        oids = [u64(storage.new_oid()) for _ in range(count)]
        emit('result', oids=oids)
    finally:
        storage.close()


COMMANDS = {
    'counter': run_counter,
    'hold': run_hold,
    'loop': run_loop,
    'oids': run_oids,
    'transfers': run_transfers,
}


def main(argv):
    if len(argv) < 2 or argv[0] not in COMMANDS:
        sys.stderr.write(__doc__)
        return 2
    start_watchdog()
    COMMANDS[argv[0]](*argv[1:])
    return 0


if __name__ == '__main__':
    # Run the functions of the importable module ``workers`` rather than of
    # ``__main__``, so that Counter pickles as ``workers.Counter``, the name
    # the parent (which imports this file as ``workers``) unpickles it by.
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import workers
    sys.exit(workers.main(sys.argv[1:]))
