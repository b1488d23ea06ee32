"""A PostgreSQL primary with a synchronous standby (tests/pgcluster.py,
``Cluster(synchronous=True)``: ``synchronous_standby_names`` naming the
standby, ``synchronous_commit = remote_apply``), against the asynchronous
pair for contrast.

Reads on the standby: a storage that commits to the primary and reads from
the standby (ro-replica-conf) sees each of its commits in the next
transaction, through the same connection, another connection of the same
database object and another storage.  On the asynchronous pair such reads
are sometimes behind (counted, not asserted).

Fail-over: WRITERS writer processes (tests/standby_worker.py) commit
increments to shared counters (each commit also rewrites PAD bytes of the
writer's own) through replica-conf (the primary, then the standby), each
saying which of its attempts were acknowledged.  The
primary's postmaster gets SIGKILL in the middle of the stream, the standby
is promoted, the writers go on for a moment and stop; the promoted
standby's data is then checked against the logs.  With the synchronous
standby no acknowledged commit may be missing; with the asynchronous one
the missing ones are counted.  Either way every error the writers saw must
be relstorage's or ZODB's own, a commit
reported as not committed must be absent, and every counter must match the
log entries naming it.

The primary is killed the way ``Server.kill`` does it: SIGKILL to the
postmaster alone.  Its backends notice within 20-70 ms and exit, but a
backend that had already received its COMMIT finishes it first; on the
asynchronous pair that commit can be acknowledged after the WAL sender is
gone, and is then lost.  On the synchronous pair such a commit waits for
the standby, and its backend exits without answering: the writer hears of
a lost connection, and the storage checks on the promoted standby what
became of the commit (CommitOutcomeUnknownError; it was committed every
time).

Measured on the development machine (2 cores, loopback, PostgreSQL
15.20), three runs of this module and test_replicas.py (55-63 s each)
plus runs of the fail-over tests alone:

- Reads: on the synchronous pair none of 2,700 reads (150 commits read
  three ways, both history modes, three runs) was behind; the 150 commits
  and their reads took 0.5-0.9 s.  On the asynchronous pair 59 to 96 of
  900 per run were: 24-41 of 150 through the committing connection (it
  loads at once), 1-10 of 150 through the others, which first open or
  poll.
- Fail-over, four writers, each commit with 20 KB of the writer's own:
  1,200-1,900 acknowledged commits per test, 360-820 of them before the
  kill; every writer commits on the promoted standby within about 0.5 s
  of the promotion (pg_ctl promote takes 0.1-0.3 s).  Synchronous: 0
  lost in 14 runs.  Asynchronous: one acknowledged commit lost in 8 runs
  of 27 (never more than one, always acknowledged after the kill);
  without the 20 KB (three to six writers), 0 in 16.  After a loss the
  writers that had seen the lost commit got 22-25 ReadConflictErrors in
  all ("behind ... that this connection already saw") until a commit on
  the promoted standby passed its tid.
- Errors the writers saw: ConflictError (each other's), DisconnectedError
  ("no server of replica-conf answered", "committing: lost the
  connection ...; nothing of this transaction was committed"),
  CommitOutcomeUnknownError.  Until RelStorage.load translated driver
  errors, in about one test in three also a raw
  psycopg2.OperationalError from it: a load in a snapshot whose
  connection the dying primary closed (now DisconnectedError,
  tests/test_reconnect.py::test_lost_session_inside_a_read_snapshot).
  Any driver error fails the test.
"""
import json
import random
import time
import uuid

import pytest
import transaction
import ZODB
from BTrees.OOBTree import OOBTree
from persistent.list import PersistentList
from persistent.mapping import PersistentMapping
from ZODB.POSException import ReadConflictError

import tally
import workers
from backends import _zconfig
from children import Worker
from pgcluster import in_recovery as _in_recovery
from test_replicas import _PostgreSQLPair
from test_replicas import _open_pair
from test_replicas import write

GROUP = 'postgresql standby'

#: Commits (and reads after each) of the read test.
READS = 150

#: Writer processes of the fail-over tests.
WRITERS = 4

#: Bytes of the writer's own object that each commit rewrites.
PAD = 20000

#: Shared counters the writers increment.
COUNTERS = 4

#: Seconds the writers commit before the primary is killed (at random in
#: this range), between the kill and the promotion, and after it.
BEFORE_KILL = (1.0, 2.0)
BEFORE_PROMOTION = 0.5
AFTER_PROMOTION = 2.0

#: Seconds a writer may take to start, and to stop once told.
START_TIMEOUT = 60
STOP_TIMEOUT = 60


def _mode(synchronous):
    return 'synchronous' if synchronous else 'asynchronous'


# -- reads on the standby after one's own commits ------------------------

@pytest.fixture(scope='module', params=[True, False],
                ids=['synchronous', 'asynchronous'])
def read_pair(request):
    from pgcluster import Cluster
    cluster = Cluster(synchronous=request.param)
    yield cluster
    cluster.close()


@pytest.mark.postgresql
@pytest.mark.parametrize('keep_history', [True, False], ids=['hp', 'hf'])
def test_own_commits_are_on_the_standby_at_once(read_pair, tmp_path,
                                                keep_history):
    """Commit through the primary, then read at once from the standby,
    READS times, three ways: the committing connection (its cache
    emptied, so that the object is loaded again), another connection of
    the same database object, and another storage.  With the synchronous
    standby every read shows the value just committed; with the
    asynchronous one, the reads behind are counted."""
    pair = read_pair
    name = 'sync_reads_' + uuid.uuid4().hex[:8]
    pair.create_database(name)
    mode = _mode(pair.synchronous)
    assert pair.replication() == {'standby': (
        'streaming', 'sync' if pair.synchronous else 'async')}
    storage = _open_pair(_PostgreSQLPair(pair), name, tmp_path, keep_history,
                         rw=[pair.primary.line], ro=[pair.standby.line])
    reader_storage = _open_pair(_PostgreSQLPair(pair), name, tmp_path,
                                keep_history,
                                rw=[pair.primary.line],
                                ro=[pair.standby.line])
    db = ZODB.DB(storage)
    reader = ZODB.DB(reader_storage)
    behind = {'same connection': 0, 'other connection': 0,
              'other storage': 0}
    try:
        # Not explicit managers: DB.close() aborts the transaction of a
        # connection that a failed assertion left open.
        tm = transaction.TransactionManager()
        conn = db.open(tm)
        with tm:
            conn.root()['doc'] = PersistentMapping(n=0)
        other_tm = transaction.TransactionManager()
        reader_tm = transaction.TransactionManager()
        reader_conn = reader.open(reader_tm)
        started = time.monotonic()
        for n in range(1, READS + 1):
            tm.begin()
            conn.root()['doc']['n'] = n
            tm.commit()
            seen = {}
            # The same connection: its cached objects dropped, the
            # document is loaded from the standby, whose snapshot must
            # not be older than the commit (ReadConflictError if it is).
            tm.begin()
            conn.cacheMinimize()
            try:
                seen['same connection'] = conn.root()['doc']['n']
            except ReadConflictError:
                seen['same connection'] = None
            tm.abort()
            other = db.open(other_tm)
            other_tm.begin()
            seen['other connection'] = other.root()['doc']['n']
            if n in (1, READS):
                assert _in_recovery(other._storage._load_cursor)
            other_tm.abort()
            other.close()
            reader_tm.begin()
            seen['other storage'] = reader_conn.root()['doc']['n']
            if n in (1, READS):
                assert _in_recovery(reader_conn._storage._load_cursor)
            reader_tm.abort()
            for how, value in seen.items():
                if value != n:
                    assert value is None or value < n, (how, value, n)
                    behind[how] += 1
            if pair.synchronous:
                assert seen == dict.fromkeys(behind, n), (n, seen)
            else:
                # Each round starts from a standby that caught up: the
                # writing connection reloads what it dropped, which a
                # standby behind refuses (ReadConflictError).
                pair.wait_replayed()
        seconds = time.monotonic() - started
        # The writing connection's commits went to the primary.
        tm.begin()
        conn.root()['doc']['n'] = READS + 1
        tm.commit()
        assert not _in_recovery(conn._storage._store_cursor)
        conn.close()
        reader_conn.close()
    finally:
        db.close()
        reader.close()
        pair.primary.query(f'DROP DATABASE IF EXISTS {name} WITH (FORCE)')
    print(f'\n{mode} standby, {READS} commits each read three ways in '
          f'{seconds:.2f}s: reads behind the commit {behind}')
    tally.add(GROUP, 'scenarios')
    tally.add(GROUP, 'committed transactions checked', READS)
    tally.add(GROUP, f'reads behind one\'s own commit ({mode})',
              sum(behind.values()))


# -- fail-over while writers commit ----------------------------------------

def _prepare(cluster, keep_history):
    """The schema, the counters and the writers' logs, on the primary,
    replayed by the standby."""
    from relstorage.adapters.postgresql import PostgreSQLAdapter
    from relstorage.storage import RelStorage
    storage = RelStorage(PostgreSQLAdapter(dsn=cluster.primary.dsn('zodb')),
                         keep_history=keep_history)
    db = ZODB.DB(storage)
    try:
        with db.transaction() as conn:
            conn.root()['counters'] = PersistentList(
                workers.Counter() for _ in range(COUNTERS))
            conn.root()['logs'] = PersistentMapping(
                (f'w{i}', OOBTree()) for i in range(WRITERS))
            conn.root()['pads'] = PersistentMapping(
                (f'w{i}', workers.Counter()) for i in range(WRITERS))
    finally:
        db.close()
    cluster.wait_replayed()


def _read_back(server, keep_history):
    """``(counters, {writer: {attempt: counter}})`` as ``server`` holds
    them."""
    from relstorage.adapters.postgresql import PostgreSQLAdapter
    from relstorage.storage import RelStorage
    storage = RelStorage(PostgreSQLAdapter(dsn=server.dsn('zodb')),
                         keep_history=keep_history)
    db = ZODB.DB(storage)
    try:
        tm = transaction.TransactionManager()
        conn = db.open(tm)
        with tm:
            root = conn.root()
            counters = [c.value for c in root['counters']]
            logs = {name: dict(log.items())
                    for name, log in root['logs'].items()}
        conn.close()
    finally:
        db.close()
    return counters, logs


def _fail_over(cluster, keep_history, tmp_path, seed):
    """Run the writers, kill the primary, promote the standby; return what
    the writers said and what the promoted standby holds."""
    cluster.create_database('zodb')
    _prepare(cluster, keep_history)
    replicas = write(tmp_path / 'replicas.conf', cluster.primary.line,
                     cluster.standby.line)
    config = tmp_path / 'writer.conf'
    config.write_text(_zconfig(
        'postgresql', {'dsn': cluster.primary.dsn('zodb')}, keep_history,
        {'replica_conf': replicas}), encoding='utf-8')
    rng = random.Random(seed)
    children = []
    try:
        for i in range(WRITERS):
            children.append(Worker(f'w{i}', [config, f'w{i}', seed, PAD],
                                   str(tmp_path), script='standby_worker.py'))
        for child in children:
            child.expect('ready', START_TIMEOUT)
        for child in children:
            child.send('go')
        time.sleep(rng.uniform(*BEFORE_KILL))
        killed_at = time.time()
        _, _, gone = cluster.primary.kill()
        time.sleep(BEFORE_PROMOTION)
        promoting = time.time()
        cluster.promote()
        promoted_at = time.time()
        time.sleep(AFTER_PROMOTION)
        for child in children:
            child.send('stop')
        said = {}
        for child in children:
            said[child.label] = child.rest(STOP_TIMEOUT)
            child.wait(STOP_TIMEOUT)
    finally:
        for child in children:
            child.close()
    counters, logs = _read_back(cluster.standby, keep_history)
    return dict(said=said, counters=counters, logs=logs,
                killed_at=killed_at, promoting=promoting,
                promoted_at=promoted_at, backends_gone=gone)


def _examine(run):
    """What the writers' words and the promoted standby's data say:
    counts, and the problems found (a list of sentences)."""
    problems = []
    acked, unknown, failed = {}, {}, {}
    raw = []
    kinds = {}
    examples = {}
    for name, events in run['said'].items():
        for e in events:
            key = (name, e.get('attempt'))
            if e['event'] == 'acked':
                acked[key] = e
            elif e['event'] == 'unknown':
                unknown[key] = e
                examples.setdefault('unknown', e['error'])
            elif e['event'] == 'failed':
                failed[key] = e
                kinds[e['kind']] = kinds.get(e['kind'], 0) + 1
                examples.setdefault(e['kind'], e['error'])
                if not e['clean']:
                    raw.append(e)
    present = {(name, attempt): k for name, log in run['logs'].items()
               for attempt, k in log.items()}
    lost = sorted(key for key in acked if key not in present)
    committed_yet_failed = sorted(key for key in failed if key in present)
    never_tried = sorted(key for key in present
                         if key not in acked and key not in unknown
                         and key not in failed)
    short = 0
    for k, value in enumerate(run['counters']):
        entries = sum(1 for c in present.values() if c == k)
        if value != entries:
            problems.append(f'counter {k} is {value}, but {entries} log '
                            f'entries name it (a torn transaction)')
        told = sum(1 for e in acked.values() if e['counter'] == k)
        maybe = sum(1 for e in unknown.values() if e['counter'] == k)
        if value > told + maybe:
            problems.append(f'counter {k} is {value}: more than its {told} '
                            f'acknowledged and {maybe} unknown increments')
        short += max(0, told - value)
    if committed_yet_failed:
        problems.append(f'{len(committed_yet_failed)} attempts reported as '
                        f'failed are committed: '
                        f'{[failed[k] for k in committed_yet_failed[:3]]}')
    if never_tried:
        problems.append(f'log entries of attempts no writer reported: '
                        f'{never_tried[:5]}')
    if raw:
        problems.append(
            f'{len(raw)} errors were not relstorage\'s or ZODB\'s; the '
            f'first:\n{raw[0]["traceback"]}')
    before = [k for k, e in acked.items() if e['at'] < run['killed_at']]
    after = [k for k, e in acked.items() if e['at'] > run['promoted_at']]
    # Per writer: seconds from the kill to its first failure, and from
    # the promotion to its first commit after it.
    noticed, resumed = [], []
    for events in run['said'].values():
        failures = [e['at'] for e in events if e['event'] != 'acked'
                    and e.get('at', 0) > run['killed_at']]
        if failures:
            noticed.append(min(failures) - run['killed_at'])
        commits = [e['at'] for e in events if e['event'] == 'acked'
                   and e['at'] > run['promoted_at']]
        if commits:
            resumed.append(min(commits) - run['promoted_at'])
    return dict(
        acked=len(acked), acked_before_kill=len(before),
        acked_after_promotion=len(after),
        writers_resumed=len({name for name, _ in after}),
        unknown=len(unknown),
        unknown_committed=sum(1 for k in unknown if k in present),
        failed=len(failed), error_kinds=kinds, examples=examples,
        lost=lost,
        noticed_seconds=round(max(noticed), 2) if noticed else None,
        resumed_seconds=round(max(resumed), 2) if resumed else None,
        counters_short=short,
        lost_acked_before_kill=sum(
            1 for k in lost if acked[k]['at'] < run['killed_at']),
        promote_seconds=round(run['promoted_at'] - run['promoting'], 2),
        backends_gone_seconds=round(run['backends_gone'], 3),
        problems=problems)


def _run(synchronous, keep_history, tmp_path):
    from pgcluster import Cluster
    cluster = Cluster(synchronous=synchronous)
    try:
        assert cluster.replication() == {'standby': (
            'streaming', 'sync' if synchronous else 'async')}
        run = _fail_over(cluster, keep_history, tmp_path,
                         seed=random.randrange(10 ** 6))
    finally:
        cluster.close()
    found = _examine(run)
    mode = _mode(synchronous)
    print(f'\nfail-over, {mode} standby, '
          f'{"hp" if keep_history else "hf"}: ' + json.dumps(
        {k: v for k, v in found.items() if k != 'problems'},
        sort_keys=True, default=str))
    tally.add(GROUP, 'scenarios')
    tally.add(GROUP, 'committed transactions checked', found['acked'])
    tally.add(GROUP, f'acknowledged commits lost ({mode})',
              len(found['lost']))
    assert found['acked_before_kill'] >= WRITERS, (
        'too few commits before the kill', found)
    assert not found['problems'], '\n'.join(found['problems'])
    return found


@pytest.mark.postgresql
@pytest.mark.parametrize('keep_history', [True, False], ids=['hp', 'hf'])
def test_fail_over_to_a_synchronous_standby_loses_nothing(tmp_path,
                                                          keep_history):
    found = _run(True, keep_history, tmp_path)
    assert not found['lost'], (
        f'{len(found["lost"])} acknowledged commits are not on the '
        f'promoted synchronous standby: {found["lost"][:10]}')
    # The writers went on on the promoted standby.
    assert found['writers_resumed'] == WRITERS, found


@pytest.mark.postgresql
@pytest.mark.parametrize('keep_history', [True, False], ids=['hp', 'hf'])
def test_fail_over_to_an_asynchronous_standby(tmp_path, keep_history):
    """The contrast: acknowledged commits may be lost (counted, not
    asserted)."""
    _run(False, keep_history, tmp_path)
