"""Writers on the nodes of a MariaDB Galera cluster of the module's own
(tests/galera.py: three nodes on loopback ports, started once for the
module).

What the server does with a multi-statement batch whose transaction
Galera aborts in the middle (MariaDB 10.11.19, galera-4 26.4.23, seen with
``test_a_batch_outlives_its_aborted_transaction`` and by hand, PyMySQL
with CLIENT.MULTI_STATEMENTS): session A on node 1 runs ``START
TRANSACTION; UPDATE t ... WHERE id = 1`` and then sends, as one query,
``UPDATE a ...; DO SLEEP(2); INSERT INTO l ...; INSERT INTO l ...;
COMMIT``.  While A sleeps, session B on node 2 updates the same row of
``t`` (autocommit).  B's write set reaches node 1, where A holds the row's
lock: node 1 aborts A (a brute-force abort) and rolls it back.  Then:

- autocommit=1 (relstorage's connections), the default
  ``wsrep_retry_autocommit = 1``: the SLEEP ends at once, and the rest of
  the batch runs and commits, each statement in a transaction of its own;
  the first statement after the abort runs and commits twice (the first
  INSERT's row is there twice); no statement returns an error, COMMIT
  says OK.  The UPDATE before the abort is lost.  The client cannot tell.
- autocommit=1 with ``wsrep_retry_autocommit = 0``: the first statement
  after the abort returns error 1213 (``Deadlock found when trying to get
  lock; try restarting transaction``), yet its row is committed; the
  statements after it do not run.
- autocommit=0: every statement after the abort runs, in a new implicit
  transaction; COMMIT returns 1213, yet the statements after the abort are
  committed (``@@in_transaction`` is 0 afterwards).
- When B's write set arrives before the batch starts, the batch's first
  statement returns 1213 and nothing of it runs, in both modes.  When A's
  COMMIT itself fails (A and B committing the same row on two nodes at
  the same moment; A lost 3 races of 12), COMMIT returns 1213 and the
  statements after it in the batch do not run.

So an abort between the statements of a batch, before its COMMIT, is the
dangerous case: the statements before it are rolled back, the ones after
it are committed in autocommit, and in relstorage's mode no error reaches
the client.  relstorage's finish batch (CHOOSE_TID's UPDATE of
``commit_row``, the transaction_log INSERT, the moves from temp_store,
COMMIT, in src/relstorage/adapters/mysql/transactions.py) is such a batch,
and ``commit_row`` is the row every commit on every node updates.

``test_writers_on_every_node`` runs a writer process per node (three
writers, 60 increments each over 4 shared counters, each commit also
rewriting a 20 KB object of the writer's own).  On the code of its first
commit it failed in every run, 6 of 6 in each history mode.
History-free: every node ended with the same counters, 3 to 14 of the 180
acknowledged increments missing (0 to 5 per counter).  History-preserving:
every node raised POSKeyError for one object (oid 0x06, 0x08 or 0x09)
while loading the counters, and so did the writers' later transactions
(3,000 to 6,000 failed attempts, 79 to 151 increments given up).  The
writers saw ConflictError, LockConflictError ("InnoDB chose this
transaction as a deadlock victim", error 1213: Galera's certification
failures and brute-force aborts), once "a concurrent transaction stored an
object with the same oid" (1062), and POSKeyError; in a run without the
20 KB objects, once an IntegrityError "Column 'tid' cannot be null".
Without the 20 KB objects it failed in 3 runs of 18 (all
history-preserving: twice a POSKeyError on every node, once 1 increment
lost), with 150 increments per writer in 5 of 6.
``test_writers_on_one_node`` runs the same writers through node 1 only:
it passed in every run (22 of 22).

Since the guarded commit (src/relstorage/adapters/mysql/connection.py:
autocommit off during a commit, a marker row that the abort takes away,
and a guard statement before COMMIT that stops the batch), the writers on
every node pass: 3 runs of 3 in each history mode, every node with every
acknowledged increment, no increment given up, no raw driver error (the
writers see ConflictError and LockConflictError, and retry).
``test_a_guarded_batch_commits_nothing_after_an_abort`` shows the guard
in plain SQL on the same abort.
"""
import json
import os
import threading
import time
import uuid

import pytest
import transaction
import ZODB

import tally
import workers
from backends import _zconfig
from children import Worker

pytestmark = pytest.mark.mysql

GROUP = 'galera (three MariaDB nodes)'

#: Writer processes, one per node (or all on node 1).
WRITERS = 3

#: Increments each writer tries.
INCREMENTS = 60

#: Counters the increments are spread over: few, so that writers collide.
COUNTERS = 4

#: Bytes each writer's transactions also write (an object of its own):
#: bigger commits, whose finish batches take longer, so that the loss
#: shows in every run rather than in one of four (see the docstring).
PAD = 20000

#: Seconds a writer may take to start.
START_TIMEOUT = 60

#: Seconds a writer may take for its increments.
RUN_TIMEOUT = 110


@pytest.fixture(scope='module')
def cluster():
    from galera import GaleraCluster
    cluster = GaleraCluster()
    print(f'\ngalera cluster up in {cluster.start_seconds:.1f}s: '
          f'{cluster.nodes}')
    yield cluster
    cluster.close()


@pytest.fixture
def galera_db(cluster):
    name = 'galera_' + uuid.uuid4().hex[:10]
    cluster.create_database(name)
    yield name
    cluster.drop_database(name)


def test_a_node_outside_the_primary_component_is_a_lost_connection():
    """Error 1180 of a Galera node that left the primary component (seen
    once in test_a_killed_node, as a raw OperationalError) is a lost
    connection: nothing was committed, the transaction may be retried on
    another node."""
    import MySQLdb
    from relstorage.adapters.mysql import MySQLAdapter
    from relstorage.config.options import Options
    from relstorage.errors import DisconnectedError
    adapter = MySQLAdapter(host='127.0.0.1', db='nowhere', driver='mysqlclient')
    adapter.configure(Options())
    raw = MySQLdb.OperationalError(
        1180, 'Error while appending streaming replication fragment'
              '(provider status: Not connected to Primary Component)')
    with pytest.raises(DisconnectedError, match='primary component'):
        with adapter.connmanager.translate('committing'):
            raise raw
    other = MySQLdb.OperationalError(1180, 'Got error 5 during COMMIT')
    with pytest.raises(MySQLdb.OperationalError):
        with adapter.connmanager.translate('committing'):
            raise other


def test_writes_reach_every_node_and_a_restarted_node_catches_up(
        cluster, galera_db):
    cluster.sql(1, f'CREATE TABLE {galera_db}.t '
                   f'(id INT PRIMARY KEY, v INT) ENGINE=InnoDB')
    cluster.sql(1, f'INSERT INTO {galera_db}.t VALUES (1, 10)')
    for n in (2, 3):
        assert cluster.sql(n, f'SELECT v FROM {galera_db}.t WHERE id = 1',
                           sync=True) == ((10,),)
    cluster.kill(3)
    # Written while node 3 is down, on both of the others.
    cluster.sql(1, f'INSERT INTO {galera_db}.t VALUES (2, 20)')
    cluster.sql(2, f'UPDATE {galera_db}.t SET v = 11 WHERE id = 1')
    cluster.start(3)
    assert cluster.transfer(3) == 'IST', cluster.why_transfer(3)
    assert cluster.sql(3, f'SELECT id, v FROM {galera_db}.t ORDER BY id',
                       sync=True) == ((1, 11), (2, 20))
    assert cluster.status(3, 'cluster_size') == {'cluster_size': '3'}
    tally.add(GROUP, 'scenarios')


# -- the plain-SQL experiment -------------------------------------------------

def _multi(cluster, n, database, autocommit):
    from pymysql.constants import CLIENT
    return cluster.connect(n, database, autocommit=autocommit,
                           client_flag=CLIENT.MULTI_STATEMENTS)


def _run_batch(cursor, batch):
    """Each statement's outcome, ``'ok'`` or ``'error NUMBER'``, until the
    first error (where the server stops a batch)."""
    outcomes = []
    try:
        cursor.execute(batch)
        outcomes.append('ok')
        while cursor.nextset():
            outcomes.append('ok')
    except Exception as e:
        outcomes.append(f'error {e.args[0]}')
    return outcomes


def _wait_for_sleep(cluster, session, timeout=30):
    """Wait until the session ``session`` of node 1 sleeps (DO SLEEP)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = cluster.sql(1, 'SELECT state FROM information_schema.'
                              'processlist WHERE id = %s', (session,))
        if rows and rows[0][0] == 'User sleep':
            return
        time.sleep(0.02)
    pytest.fail('the batch did not reach its SLEEP')


def _abort_in_a_batch(cluster, galera_db, autocommit, setup, begin, batch,
                      after):
    """Make tables ``t`` (row 1), ``a`` (row 1) and the log ``l`` through
    node 1; on a node-1 session run ``setup`` (statements, one by one),
    ``begin`` (a batch that starts the transaction), an UPDATE of ``t``'s
    row 1, then ``batch`` in one query, in a thread.  While the batch sleeps (its ``DO SLEEP``), node 2 updates
    the same row, and Galera aborts node 1's transaction.  Returns the
    batch's outcomes, its seconds and what ``after(cursor)`` returns, run
    on the victim's session once the batch is over."""
    for statement in (
            'CREATE TABLE t (id INT PRIMARY KEY, v INT) ENGINE=InnoDB',
            'CREATE TABLE a (id INT PRIMARY KEY, v INT) ENGINE=InnoDB',
            'CREATE TABLE l (id INT AUTO_INCREMENT PRIMARY KEY, '
            'note VARCHAR(40)) ENGINE=InnoDB',
            'INSERT INTO t VALUES (1, 0)', 'INSERT INTO a VALUES (1, 0)'):
        cluster.sql(1, statement, database=galera_db)
    cluster.wait_applied()
    victim = _multi(cluster, 1, galera_db, autocommit)
    other = cluster.connect(2, galera_db)
    try:
        with victim.cursor() as cursor, other.cursor() as other_cursor:
            cursor.execute('SELECT CONNECTION_ID()')
            session = cursor.fetchone()[0]
            for statement in setup:
                _run_batch(cursor, statement)
            assert _run_batch(cursor, begin)[-1] == 'ok'
            cursor.execute('UPDATE t SET v = v + 1 WHERE id = 1')
            outcomes = []
            runner = threading.Thread(
                target=lambda: outcomes.extend(_run_batch(cursor, batch)))
            started = time.monotonic()
            runner.start()
            try:
                _wait_for_sleep(cluster, session)
                # Node 2 commits the row node 1's transaction holds.
                other_cursor.execute('UPDATE t SET v = v + 100 WHERE id = 1')
            finally:
                runner.join(60)
            seconds = time.monotonic() - started
            return outcomes, seconds, after(cursor)
    finally:
        victim.close()
        other.close()


@pytest.mark.parametrize('autocommit', [True, False],
                         ids=['autocommit', 'no-autocommit'])
def test_a_batch_outlives_its_aborted_transaction(cluster, galera_db,
                                                  autocommit):
    """The server's behaviour that the finish batch must survive (see the
    module's docstring): a transaction aborted by Galera in the middle of a
    multi-statement batch; the statements after the abort still run and
    commit.  This test describes the server, not relstorage: if it fails,
    a newer server stops the batch at the abort."""
    def in_transaction(cursor):
        cursor.execute('SELECT @@in_transaction')
        found = cursor.fetchone()[0]
        cursor.execute('ROLLBACK')
        return found
    outcomes, seconds, in_transaction = _abort_in_a_batch(
        cluster, galera_db, autocommit, (), 'START TRANSACTION',
        "UPDATE a SET v = v + 1 WHERE id = 1; DO SLEEP(5); "
        "INSERT INTO l (note) VALUES ('first after'); "
        "INSERT INTO l (note) VALUES ('second after'); COMMIT",
        in_transaction)
    rows = {n: (cluster.sql(n, 'SELECT v FROM t', database=galera_db,
                            sync=True),
                cluster.sql(n, 'SELECT v FROM a', database=galera_db),
                cluster.sql(n, 'SELECT note FROM l ORDER BY id',
                            database=galera_db))
            for n in (1, 2, 3)}
    print(f'\nautocommit={int(autocommit)}: outcomes {outcomes} in '
          f'{seconds:.1f}s, in_transaction afterwards {in_transaction}, '
          f'node 1 has t={rows[1][0]} a={rows[1][1]} l={rows[1][2]}')
    assert rows[2] == rows[1] and rows[3] == rows[1]
    t, a, log = rows[1]
    assert t == ((100,),), 'node 2 won'
    # The statement before the abort was rolled back ...
    assert a == ((0,),)
    # ... yet the one after it ran (the SLEEP was cut short) and was
    # committed, while the transaction it was sent for was gone.
    assert seconds < 5
    assert ('first after',) in log
    assert not in_transaction
    tally.add(GROUP, 'scenarios')


def test_a_guarded_batch_commits_nothing_after_an_abort(cluster, galera_db):
    """The remedy (src/relstorage/adapters/mysql/connection.py), in plain
    SQL on the same abort: autocommit off, a marker row in a temporary
    table written at the transaction's start, and the guard before COMMIT,
    which fails when the marker is gone.  The batch stops at the guard,
    and the ROLLBACK after it discards what ran after the abort (on
    MariaDB 10.11.19 the guard's statement itself reports the abort, 1213,
    and so does the first ROLLBACK; the two INSERTs before it said OK).
    Without the guard, the same batch's COMMIT commits them."""
    from relstorage.adapters.mysql.connection import MARKER_GUARD
    from relstorage.adapters.mysql.connection import TEMP_COMMIT

    def rolled_back(cursor):
        # The first statement after the abort hears of it (1213).
        outcomes = _run_batch(cursor, 'ROLLBACK')
        if outcomes != ['ok']:
            outcomes += _run_batch(cursor, 'ROLLBACK')
        return outcomes
    outcomes, _, rollback = _abort_in_a_batch(
        cluster, galera_db, False, (TEMP_COMMIT,),
        'START TRANSACTION; INSERT INTO temp_commit VALUES (1)',
        f"DO SLEEP(5); "
        f"INSERT INTO l (note) VALUES ('first after'); "
        f"INSERT INTO l (note) VALUES ('second after'); "
        f"{MARKER_GUARD}; COMMIT", rolled_back)
    t = cluster.sql(1, 'SELECT v FROM t', database=galera_db, sync=True)
    log = {n: cluster.sql(n, 'SELECT note FROM l', database=galera_db,
                          sync=True) for n in (1, 2, 3)}
    print(f'\nguarded: outcomes {outcomes}, rollback {rollback}, t={t}, '
          f'l={log}')
    assert t == ((100,),), 'node 2 won'
    # The batch stopped at the guard (its fourth statement), before the
    # COMMIT: MariaDB 10.11 reports the abort there (1213) rather than
    # running the guard to its own error (1690).
    assert len(outcomes) == 4 and outcomes[-1] in (
        'error 1213', 'error 1690'), outcomes
    assert log == {1: (), 2: (), 3: ()}
    tally.add(GROUP, 'scenarios')


# -- the writers --------------------------------------------------------------

def _prepare(cluster, database, keep_history):
    """Make the schema and ``root['counters']`` through node 1; wait until
    every node has them."""
    from persistent.list import PersistentList
    from persistent.mapping import PersistentMapping
    storage = _open(cluster, 1, database, keep_history)
    db = ZODB.DB(storage)
    try:
        with db.transaction() as conn:
            conn.root()['counters'] = PersistentList(
                workers.Counter() for _ in range(COUNTERS))
            conn.root()['pads'] = PersistentMapping(
                (f'w{i}', workers.Counter()) for i in range(WRITERS))
    finally:
        db.close()
    cluster.wait_applied()


def _keys(cluster, n, database):
    host, port = cluster.nodes[n - 1]
    return {'host': host, 'port': port, 'user': 'root', 'db': database,
            'driver': 'mysqlclient'}


def _open(cluster, n, database, keep_history):
    from relstorage.adapters.mysql import MySQLAdapter
    from relstorage.storage import RelStorage
    return RelStorage(MySQLAdapter(**_keys(cluster, n, database)),
                      keep_history=keep_history)


def _read_counters(cluster, n, database, keep_history):
    """The counters' values as node ``n`` has them, or the error that
    loading them raised (``'Class: message'``)."""
    try:
        db = ZODB.DB(_open(cluster, n, database, keep_history))
    except Exception as e:
        return f'{type(e).__name__}: {e}'
    try:
        tm = transaction.TransactionManager(explicit=True)
        conn = db.open(tm)
        try:
            with tm:
                return [c.value for c in conn.root()['counters']]
        except Exception as e:
            return f'{type(e).__name__}: {e}'
        finally:
            conn.close()
    finally:
        db.close()


def _run_writers(cluster, database, keep_history, nodes, tmp_path,
                 extra=None, increments=INCREMENTS, pause=0, during=None,
                 restart=None):
    """Run a writer per entry of ``nodes`` (the node its configuration
    names), with ``extra`` options (replica-conf, say) in each
    configuration; ``during()`` runs once they have started.  Node
    ``restart``, killed meanwhile, is started again once they are done.
    Returns the report, with every node's counters."""
    _prepare(cluster, database, keep_history)
    children = []
    try:
        for i, n in enumerate(nodes):
            config = tmp_path / f'node{n}-{i}.conf'
            keys = _keys(cluster, n, database)
            config.write_text(_zconfig('mysql', keys, keep_history,
                                       extra or {}), encoding='utf-8')
            children.append(Worker(
                f'writer{i}-node{n}',
                [config, f'w{i}', increments, 7, PAD, pause],
                str(tmp_path), script='galera_worker.py'))
        for child in children:
            child.expect('ready', START_TIMEOUT)
        for child in children:
            child.send('go')
        if during is not None:
            during()
        results = [child.expect('result', RUN_TIMEOUT) for child in children]
        for child in children:
            child.wait()
    finally:
        for child in children:
            child.close()
    cluster.wait_applied()
    transfer = None
    if restart is not None:
        cluster.start(restart)
        transfer = cluster.transfer(restart)
    acked = [sum(r['acked'][k] for r in results) for k in range(COUNTERS)]
    unknown = [sum(r['unknown'][k] for r in results)
               for k in range(COUNTERS)]
    errors = {}
    for r in results:
        for kind, count in r['errors'].items():
            errors[kind] = errors.get(kind, 0) + count
    seen = {n: _read_counters(cluster, n, database, keep_history)
            for n in (1, 2, 3)}
    report = dict(
        nodes=nodes, keep_history=keep_history, acked=acked,
        unknown=unknown, seen=seen, transfer=transfer,
        given_up=sum(r['given_up'] for r in results),
        attempts=sum(r['attempts'] for r in results),
        seconds=max(r['seconds'] for r in results), errors=errors,
        examples={k: v for r in results for k, v in r['examples'].items()})
    print('\ngalera writers: ' + json.dumps(report, sort_keys=True))
    tally.add(GROUP, 'acknowledged commits checked', sum(acked))
    return report


def _check(report):
    """Every node has every acknowledged increment, once: a counter may be
    above its acknowledged increments only by those of unknown outcome."""
    acked, unknown = report['acked'], report['unknown']
    problems = []
    lost = 0
    for n, values in sorted(report['seen'].items()):
        if not isinstance(values, list):
            problems.append(f'node {n}: {values}')
            continue
        lost = max(lost, sum(max(0, a - v) for a, v in zip(acked, values)))
        for k, value in enumerate(values):
            if value < acked[k]:
                problems.append(f'node {n}: counter {k} lost '
                                f'{acked[k] - value} of its {acked[k]} '
                                f'acknowledged increments')
            elif value > acked[k] + unknown[k]:
                problems.append(f'node {n}: counter {k} has '
                                f'{value - acked[k]} increments more than '
                                f'the {acked[k]} acknowledged')
    tally.add(GROUP, 'acknowledged commits lost', lost)
    assert not problems, '; '.join(problems) + (
        f' (errors the writers saw: {report["errors"]})')


@pytest.mark.parametrize('keep_history', [True, False], ids=['hp', 'hf'])
def test_writers_on_every_node(cluster, galera_db, keep_history, tmp_path):
    """A writer process on each node, incrementing shared counters: every
    node ends with every acknowledged increment, once."""
    _check(_run_writers(cluster, galera_db, keep_history, [1, 2, 3],
                        tmp_path))


@pytest.mark.parametrize('keep_history', [True, False], ids=['hp', 'hf'])
def test_writers_on_one_node(cluster, galera_db, keep_history, tmp_path):
    """The same writers, all through node 1: Galera then never aborts a
    transaction of theirs; every node ends with every acknowledged
    increment, once."""
    _check(_run_writers(cluster, galera_db, keep_history, [1, 1, 1],
                        tmp_path))


# -- reads from every node ------------------------------------------------

#: Commits read back at once through another node.
READ_BACKS = 200


def _stale_reads(writer_db, reader_db, start):
    """Commit ``n`` through the writer, then read it through the reader
    in a new transaction, READ_BACKS times; how often the reader saw less
    than the writer had committed."""
    writer_tm = transaction.TransactionManager(explicit=True)
    reader_tm = transaction.TransactionManager(explicit=True)
    writer = writer_db.open(writer_tm)
    reader = reader_db.open(reader_tm)
    stale = 0
    try:
        for n in range(start, start + READ_BACKS):
            with writer_tm:
                writer.root()['counter'].value = n
            with reader_tm:
                seen = reader.root()['counter'].value
            assert seen <= n
            stale += seen < n
    finally:
        writer.close()
        reader.close()
    return stale


def test_a_reader_on_another_node_sees_every_acknowledged_commit(
        cluster, galera_db, tmp_path):
    """Writes through node 1 (replica-conf), reads through node 2
    (ro-replica-conf, another storage): every transaction the reader
    begins sees every commit acknowledged before it began, because its
    snapshot waits until node 2 has applied them (wsrep_sync_wait).
    Without the wait (shown for contrast, not asserted: it depends on
    timing) node 2 is often behind."""
    from relstorage.adapters.mysql import MySQLAdapter
    from relstorage.storage import RelStorage
    writes = tmp_path / 'writes.conf'
    writes.write_text('%s:%s\n' % cluster.nodes[0])
    reads = tmp_path / 'reads.conf'
    reads.write_text('%s:%s\n%s:%s\n' % (cluster.nodes[1] + cluster.nodes[2]))
    keys = _keys(cluster, 1, galera_db)

    def storage():
        return RelStorage(MySQLAdapter(**keys), keep_history=False,
                          replica_conf=str(writes),
                          ro_replica_conf=str(reads))
    writer_db, reader_db = ZODB.DB(storage()), ZODB.DB(storage())
    try:
        with writer_db.transaction() as conn:
            conn.root()['counter'] = workers.Counter()
        cluster.wait_applied()
        reader_cm = reader_db.storage._adapter.connmanager
        assert reader_cm.galera
        reader_cm.galera = False
        try:
            unsynced = _stale_reads(writer_db, reader_db, 1)
        finally:
            reader_cm.galera = True
        stale = _stale_reads(writer_db, reader_db, READ_BACKS + 1)
        instance = reader_db.storage.new_instance()
        try:
            instance.poll_invalidations()
            assert reader_cm.server_of(instance._load_conn) == \
                '%s:%s' % cluster.nodes[1]
        finally:
            instance.release()
    finally:
        writer_db.close()
        reader_db.close()
    print(f'\nreads through node 2 right after a commit through node 1: '
          f'{unsynced} of {READ_BACKS} stale without the wait, {stale} '
          f'with it')
    assert stale == 0
    tally.add(GROUP, 'acknowledged commits checked', READ_BACKS)
    tally.add(GROUP, 'scenarios')


# -- a node killed ------------------------------------------------------------

#: Increments per writer, and the pause after each, in the fail-over test:
#: a run of a few seconds, in whose middle node 1 is killed.
FAILOVER_INCREMENTS = 300
FAILOVER_PAUSE = 0.01

#: Seconds after the start of the writers when node 1 is killed.
KILL_AFTER = 1.0


@pytest.mark.parametrize('keep_history', [True, False], ids=['hp', 'hf'])
def test_a_killed_node(cluster, galera_db, keep_history, tmp_path):
    """Writers on node 1, the first server of their replica-conf, which
    names all three; node 1 is killed (SIGKILL) while they commit.  They
    fail over to node 2 and go on committing; node 1 is started again,
    rejoins by incremental state transfer, and every node, node 1
    included, has every acknowledged increment."""
    replicas = tmp_path / 'replicas.conf'
    replicas.write_text(''.join(f'{host}:{port}\n'
                                for host, port in cluster.nodes))
    kills = []

    def kill_node_1():
        time.sleep(KILL_AFTER)
        cluster.kill(1)
        kills.append(time.monotonic())

    try:
        report = _run_writers(
            cluster, galera_db, keep_history, [1, 1, 1], tmp_path,
            extra={'replica_conf': replicas}, pause=FAILOVER_PAUSE,
            increments=FAILOVER_INCREMENTS, during=kill_node_1,
            restart=1)
    finally:
        if cluster.node(1).proc is None:
            cluster.start(1)
    assert report['transfer'] == 'IST', cluster.why_transfer(1)
    _check(report)
    acked = sum(report['acked'])
    # They went on after the kill: most increments were acknowledged.
    assert acked >= 0.9 * WRITERS * FAILOVER_INCREMENTS, report
    errors = ' '.join(report['errors'])
    assert 'OperationalError' not in errors and 'InterfaceError' not in \
        errors, report['errors']
    tally.add(GROUP, 'node kills')


# -- pack and convert --------------------------------------------------------

def _config(cluster, n, database, keep_history, tmp_path, name, **extra):
    path = tmp_path / name
    path.write_text(_zconfig('mysql', _keys(cluster, n, database),
                             keep_history, extra), encoding='utf-8')
    return path


def _zodbpack(config):
    import subprocess
    import sys
    zodbpack = os.path.join(os.path.dirname(sys.executable), 'zodbpack')
    return subprocess.run([zodbpack, "--days", "0", str(config)],
                          capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize('keep_history', [True, False], ids=['hp', 'hf'])
def test_a_pack_while_writers_write(
        cluster, galera_db, keep_history, tmp_path):
    """zodbpack while writers commit, all through node 1 (the first of
    the replica-conf the site would use; through node 2 the writers'
    write sets abort the pack's batches while they hold rows of the
    objects being written: with these three writers on four counters,
    history-preserving packs gave up after five attempts of a batch).  The
    garbage made just before is gone on every node, and every
    acknowledged increment is there."""
    from persistent.mapping import PersistentMapping
    from ZODB.POSException import POSKeyError
    config = _config(cluster, 1, galera_db, keep_history, tmp_path,
                     'pack.conf')
    garbage, packed = [], []

    def make_garbage_and_pack():
        db = ZODB.DB(_open(cluster, 1, galera_db, keep_history))
        try:
            with db.transaction() as conn:
                junk = conn.root()['junk'] = PersistentMapping(
                    (str(i), PersistentMapping(n=i)) for i in range(20))
            garbage.extend([junk._p_oid] + [child._p_oid
                                            for child in junk.values()])
            with db.transaction() as conn:
                del conn.root()['junk']
        finally:
            db.close()
        packed.append(_zodbpack(config))

    report = _run_writers(
        cluster, galera_db, keep_history, [1, 1, 1], tmp_path,
        pause=FAILOVER_PAUSE, increments=FAILOVER_INCREMENTS,
        during=make_garbage_and_pack)
    (result,) = packed
    assert result.returncode == 0, result.stderr
    _check(report)
    for n in (1, 2, 3):
        storage = _open(cluster, n, galera_db, keep_history)
        try:
            for oid in garbage:
                with pytest.raises(POSKeyError):
                    storage.load(oid)
        finally:
            storage.close()
    tally.add(GROUP, 'scenarios')


def test_one_pack_at_a_time_across_nodes(cluster, galera_db, tmp_path):
    """The pack lock is a lease row, which the cluster replicates: a pack
    through node 2 holds it, and zodbpack through node 3 gives up."""
    from relstorage.adapters.mysql.pack import PackLease
    config = _config(cluster, 3, galera_db, False, tmp_path, 'pack.conf')
    storage = _open(cluster, 2, galera_db, False)
    try:
        lease = PackLease(storage._adapter.connmanager).take()
        try:
            cluster.wait_applied()
            result = _zodbpack(config)
        finally:
            lease()
    finally:
        storage.close()
    assert result.returncode == 1, result.stderr
    assert 'another pack' in result.stderr
    cluster.wait_applied()
    result = _zodbpack(config)
    assert result.returncode == 0, result.stderr
    tally.add(GROUP, 'scenarios')


def test_zodbconvert_into_the_cluster(cluster, galera_db, tmp_path):
    """A FileStorage with history and blobs converted through node 1
    (blobs in the database), verified by zodbconvert, and the same current
    state read through node 3."""
    import subprocess
    import sys
    from ZODB.FileStorage import FileStorage
    from test_zodbconvert import current_states
    from test_zodbconvert import filestorage_section
    from test_zodbconvert import make_source
    from test_zodbconvert import write_config
    source = make_source(tmp_path / 'source', 150)
    dest = _zconfig('mysql', _keys(cluster, 1, galera_db), True,
                    {'blob_dir': tmp_path / 'blobs',
                     'shared_blob_dir': 'false'}).replace(
        '<relstorage>', '<relstorage destination>', 1)
    config = write_config(tmp_path / 'convert.conf',
                          filestorage_section(source, 'source'), dest)
    zodbconvert = os.path.join(os.path.dirname(sys.executable),
                               'zodbconvert')
    result = subprocess.run([zodbconvert, '--verify', str(config)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert 'the destination matches the source' in result.stderr
    cluster.wait_applied()
    from relstorage.adapters.mysql import MySQLAdapter
    from relstorage.storage import RelStorage
    copy = RelStorage(MySQLAdapter(**_keys(cluster, 3, galera_db)),
                      keep_history=True, blob_dir=str(tmp_path / 'blobs3'),
                      shared_blob_dir=False)
    original = FileStorage(str(source / 'Data.fs'),
                           blob_dir=str(source / 'blobs'), read_only=True)
    try:
        assert current_states(copy) == current_states(original)
    finally:
        copy.close()
        original.close()
    tally.add(GROUP, 'scenarios')


# -- the write-set limit ------------------------------------------------------

#: The write-set limit set on node 1 for the test, and the size of what is
#: committed over it.
SMALL_LIMIT = 1024 * 1024
OVER = 2 * SMALL_LIMIT


@pytest.mark.parametrize('what', ['object', 'blob'])
def test_a_transaction_over_the_write_set_limit(cluster, galera_db, tmp_path,
                                                what):
    """A commit larger than wsrep_max_ws_size fails with an error that
    names the setting and the way out, nothing of it is committed on any
    node, and the storage goes on committing."""
    import os
    from persistent.mapping import PersistentMapping
    from relstorage.adapters.mysql import MySQLAdapter
    from relstorage.storage import RelStorage
    from ZODB.blob import Blob
    from ZODB.POSException import StorageError
    storage = RelStorage(MySQLAdapter(**_keys(cluster, 1, galera_db)),
                         keep_history=False, blob_dir=str(tmp_path / 'blobs'),
                         shared_blob_dir=False)
    db = ZODB.DB(storage)
    cluster.sql(1, f'SET GLOBAL wsrep_max_ws_size = {SMALL_LIMIT}')
    try:
        with db.transaction() as conn:
            conn.root()['kept'] = PersistentMapping(n=1)
        tm = transaction.TransactionManager(explicit=True)
        conn = db.open(tm)
        tm.begin()
        conn.root()['kept']['n'] = 2
        if what == 'blob':
            blob = Blob()
            with blob.open('w') as f:
                f.write(os.urandom(OVER))
            conn.root()['big'] = blob
        else:
            conn.root()['big'] = PersistentMapping(data=os.urandom(OVER))
        with pytest.raises(StorageError, match='wsrep_max_ws_size') as raised:
            tm.commit()
        tm.abort()
        assert 'shared-blob-dir true' in str(raised.value)
        # Still committing, through the same storage.
        tm.begin()
        conn.root()['kept']['n'] = 3
        tm.commit()
        conn.close()
    finally:
        cluster.sql(1, 'SET GLOBAL wsrep_max_ws_size = 2147483647')
        db.close()
    cluster.wait_applied()
    for n in (1, 2, 3):
        db = ZODB.DB(_open(cluster, n, galera_db, False))
        try:
            with db.transaction() as conn:
                root = conn.root()
                assert 'big' not in root and root['kept']['n'] == 3, n
        finally:
            db.close()
    tally.add(GROUP, 'scenarios')
