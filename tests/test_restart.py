"""The database server restarted under its clients, on a PostgreSQL and a
MariaDB server of the test's own (tests/pgcluster.py,
tests/mariadbserver.py), with several client processes (tests/workers.py,
``loop``).

While the clients are idle: their next transactions reconnect and commit
without an error reaching the application.  While they commit: the
commits in flight fail with a retryable DisconnectedError (or, when the
connection went with the COMMIT on its way and the storage cannot tell
what became of it, CommitOutcomeUnknownError), the clients go on once
the server is back, and no commit a client was told of is lost: each
acknowledged tid is in the history with its value, and every client's
objects were written together.
"""
import time

import pytest
import transaction
import ZODB

import tally
import workers
from private import PrivateMariaDB
from private import PrivatePostgreSQL
from test_processes import START_TIMEOUT

#: Client processes.
CLIENTS = 3

#: Counters each client sets in every transaction.
OBJECTS = 3

#: Seconds of the commit period before the idle restart.
IDLE_PERIOD = 0.5

#: Acknowledged commits each client makes before, and again after, the
#: restart under load.
ACKS_AROUND = 5

#: What the application may see while the server restarts under it.
RETRYABLE = {'DisconnectedError'}


@pytest.fixture(params=[
    pytest.param(PrivatePostgreSQL, marks=pytest.mark.postgresql,
                 id='postgresql'),
    pytest.param(PrivateMariaDB, marks=pytest.mark.mysql, id='mysql')])
def private(request):
    server = request.param()
    yield server
    server.close()


def _acks(child, count, timeout=START_TIMEOUT):
    """Read ``child``'s events until ``count`` more acknowledgements;
    ``(acked events, other events)``."""
    acked, other = [], []
    deadline = time.monotonic() + timeout
    while len(acked) < count:
        event = child.next_event(max(0.1, deadline - time.monotonic()))
        assert event is not None, f'{child.label} ended: {child.stderr()}'
        if event['event'] == 'acked':
            acked.append(event)
        elif event['event'] == 'result':
            pytest.fail(f'{child.label}: the period ended early: {event}')
        else:
            other.append(event)
    return acked, other


def _until_result(child):
    acked, other = [], []
    while True:
        event = child.next_event()
        assert event is not None, f'{child.label} ended: {child.stderr()}'
        if event['event'] == 'result':
            return acked, other, event
        (acked if event['event'] == 'acked' else other).append(event)


def test_server_restart(private, tmp_path, spawn):
    database = private.new_database()
    config = tmp_path / 'storage.conf'
    config.write_text(private.zconfig(database, commit_lock_timeout=10),
                      encoding='utf-8')
    names = [f'client{i}' for i in range(CLIENTS)]
    db = ZODB.DB(private.open(database))
    try:
        tm = transaction.TransactionManager()
        conn = db.open(tm)
        with tm:
            workers.prepare_loops(conn.root(), names, OBJECTS)
        children = {name: spawn(name, 'loop', str(config), name, 3600)
                    for name in names}
        for child in children.values():
            child.expect('ready', START_TIMEOUT)
        acked = {name: [] for name in names}
        unknown = {name: [] for name in names}

        def record(name, events, other):
            acked[name] += events
            unknown[name] += [e for e in other if e['event'] == 'unknown']

        # 1. Idle clients: a short period, the restart, another period.
        for child in children.values():
            child.send('go')
        time.sleep(IDLE_PERIOD)
        for name, child in children.items():
            child.send('stop')
            events, other, result = _until_result(child)
            record(name, events, other)
            assert result['errors'] == {} and result['torn'] == 0, result
        private.restart()
        for child in children.values():
            child.send('go')
        time.sleep(IDLE_PERIOD)
        for name, child in children.items():
            child.send('stop')
            events, other, result = _until_result(child)
            record(name, events, other)
            # Reconnected without the application noticing.
            assert result['errors'] == {}, result
            assert result['committed'] > 0 and result['torn'] == 0, result
        # The parent's own connection too.
        with tm:
            conn.root()['after idle restart'] = 1

        # 2. Clients committing: the restart in the middle of their
        # commits.
        for child in children.values():
            child.send('go')
        for name, child in children.items():
            record(name, *_acks(child, ACKS_AROUND))
        private.restart()
        first_errors = []
        failed = 0
        for name, child in children.items():
            events, other = _acks(child, ACKS_AROUND, timeout=90)
            record(name, events, other)
            first_errors += [e for e in other if e['event'] == 'first_error']
        for name, child in children.items():
            child.send('stop')
            events, other, result = _until_result(child)
            record(name, events, other)
            first_errors += [e for e in other if e['event'] == 'first_error']
            assert set(result['errors']) <= RETRYABLE, result
            failed += sum(result['errors'].values())
            assert result['torn'] == 0, result
        for error in first_errors:
            # The session ended under a commit, or the next one could not
            # start while the server was down.
            assert ('lost the connection' in error['error']
                    or 'cannot connect' in error['error']), error
        for child in children.values():
            child.send('quit')
            child.wait()

        # Nothing acknowledged is lost, and each client's objects moved
        # together.
        tm.begin()
        storage = db.storage
        checked = 0
        for name in names:
            counters = conn.root()['loops'][name]
            values = {c.value for c in counters}
            assert len(values) == 1, f'{name}: torn {values}'
            value = values.pop()
            mine = [e['value'] for e in acked[name]]
            # Each acknowledged commit set the value after the last one
            # committed; a value never acknowledged was committed by a
            # commit whose outcome the client was told is unknown.
            told_unknown = {e['value'] for e in unknown[name]}
            skipped = set(range(1, mine[-1] + 1)) - set(mine)
            assert mine == sorted(set(mine)) and skipped <= told_unknown, (
                f'{name}: acknowledgements {mine}, outcomes unknown '
                f'{unknown[name]}')
            assert value == mine[-1] or value in [
                e['value'] for e in unknown[name]], (name, value, mine[-1])
            history = {entry['tid']: entry for entry in storage.history(
                counters[0]._p_oid, size=10 ** 6)}
            tids = {int.from_bytes(t, 'big') for t in history}
            missing = [e for e in acked[name] if e['tid'] not in tids]
            assert not missing, f'{name}: acknowledged but lost: {missing}'
            checked += len(mine)
        tm.abort()
        conn.close()
        tally.add('faults', 'scenarios', 2)
        tally.add('faults', 'committed transactions checked', checked)
        tally.add('faults', 'transactions failed retryably by a restart',
                  failed)
    finally:
        db.close()
