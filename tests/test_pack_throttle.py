"""The pack's throttle pauses only when a client was held up by a batch
(relstorage.pack.throttle): measured by the database where it can tell
(PostgreSQL, MariaDB: sessions waiting for the batch's locks at its end,
and other clients' statements that ran long during it, which the pack's
watch sees: relstorage.pack.watch), by commits during the batch where it
cannot (SQLite)."""
import threading
import time
import types

import pytest
import transaction
import ZODB
from persistent.mapping import PersistentMapping
from ZODB.serialize import referencesf
from ZODB.utils import u64

from relstorage.pack import throttle as pack_throttle
from relstorage.progress import Progress

from backends import query


class _Options:
    pack_batch_timeout = 1.0
    pack_duty_cycle = 0.5
    pack_max_delay = 3.0


class _Notes(Progress):
    def __init__(self):
        super().__init__()
        self.notes = []

    def note(self, message, *args):
        self.notes.append(message % args)


def _fake_time(monkeypatch):
    clock = [100.0]
    slept = []
    monkeypatch.setattr(pack_throttle, 'time', types.SimpleNamespace(
        monotonic=lambda: clock[0], sleep=slept.append))
    return clock, slept


def _report(pacer):
    """What the pacer says at the end of its phase."""
    notes = _Notes()
    pacer.report(notes)
    return notes.notes


def _batch(pacer, clock, seconds, waiters=None):
    """A batch of ``seconds`` on the fake clock, then the pacer's turn."""
    started = clock[0]
    clock[0] += seconds
    pacer.pause(started, waiters)


def test_where_waits_are_known_only_a_batch_someone_waited_for_pauses(
        monkeypatch):
    clock, slept = _fake_time(monkeypatch)
    asked = []
    pacer = pack_throttle.Pacer(_Options(), lambda: asked.append(1) or 7,
                                waits_known=True)
    _batch(pacer, clock, 0.5, 0)    # others may have committed: none waited
    _batch(pacer, clock, 0.4, 2)    # two sessions waited: as long as it
    _batch(pacer, clock, 10.0, 1)   # at most pack-max-delay
    _batch(pacer, clock, 0.3, 0)
    assert slept == [pytest.approx(0.4), 3.0]
    assert asked == []      # no round trip for the last tid
    assert _report(pacer) == ['2 of 4 batches followed by a pause while other '
                           'clients waited for them, 3.4s in all '
                           '(pack-duty-cycle 0.5)']


def test_a_duty_cycle_of_one_never_pauses(monkeypatch):
    clock, slept = _fake_time(monkeypatch)
    options = _Options()
    options.pack_duty_cycle = 1.0
    pacer = pack_throttle.Pacer(options, pytest.fail, waits_known=True)
    pacer.pause(clock[0] - 1, 5)
    assert slept == []


def test_the_pacer_pauses_only_while_others_commit_and_says_so(monkeypatch):
    clock, slept = _fake_time(monkeypatch)
    last = [7]
    pacer = pack_throttle.Pacer(_Options(), lambda: last[0])
    _batch(pacer, clock, 0.5)       # nobody committed: no pause
    assert slept == []
    assert pacer.size == 2 * pack_throttle.FIRST_BATCH
    last[0] += 1                    # a commit during the next batch
    _batch(pacer, clock, 0.8)       # duty cycle 0.5: as long as the batch
    last[0] += 1
    _batch(pacer, clock, 10.0)      # at most pack-max-delay
    assert slept == [pytest.approx(0.8), 3.0]
    assert _report(pacer) == ['2 of 3 batches followed by a pause while other '
                           'clients committed, 3.8s in all '
                           '(pack-duty-cycle 0.5)']


class _Watch:
    """Stands in for relstorage.pack.watch.Watch: ``take`` answers from
    ``answers`` (the longest statement seen during a batch; with a pause,
    then what the pacer discards before it and what it sees during it)."""

    def __init__(self, *answers):
        self.answers = list(answers)

    def take(self):
        return self.answers.pop(0)


def test_a_batch_that_slowed_others_statements_pauses_and_shrinks(
        monkeypatch):
    clock, slept = _fake_time(monkeypatch)
    watch = _Watch(0.005,               # under SLOW_FLOOR: not looked at
                   0.05, 0.03, 0.004,   # slowed: the probe's second half
                   0.04, 0.003,         # (a pause: its two halves)
                   0.02, 0.03, 0.003,   # six times the pause's longest
                   0.005,               # not slowed again
                   0.05, 0.0, 0.04,     # slowed: the pause's end 0.04
                   0.05,                # under twice that: not slowed
                   None)                # the watch stopped telling
    pacer = pack_throttle.Pacer(_Options(), pytest.fail, waits_known=True,
                                watch=watch)
    sizes = []
    for _ in range(7):
        _batch(pacer, clock, 0.5, 0)
        sizes.append(pacer.size)
    assert slept == [pack_throttle.PROBE / 2] * 2 + [pytest.approx(0.25)] * 6
    assert watch.answers == []
    # Batches sized to a second, then to half, a quarter of it..., and
    # back up a quarter at a time.
    assert sizes[0] == 2 * pack_throttle.FIRST_BATCH
    assert sizes[1] == sizes[0] and sizes[2] == sizes[1] // 2
    assert sizes[3] < sizes[2] and sizes[4] < sizes[3]
    assert pacer.scale == pytest.approx(1.0 / 8 * 1.25 * 1.25)
    assert _report(pacer) == ['3 of 7 batches followed by a pause while other '
                           'clients ran slower, 1.5s in all '
                           '(pack-duty-cycle 0.5)']


def test_each_batch_is_told_in_the_debug_log(monkeypatch, caplog):
    """At DEBUG, a line per batch says what the pacer went by: how long
    the batch took, what the watch saw of others, its quiet baseline, and
    whether it paused (how an administrator checks what it decided)."""
    clock, _ = _fake_time(monkeypatch)
    watch = _Watch(0.05, 0.02, 0.004,   # slowed; the probe's second half
                   0.02, 0.003,         # (the pause: its two halves)
                   0.005)               # not slowed
    pacer = pack_throttle.Pacer(_Options(), pytest.fail, waits_known=True,
                                watch=watch)
    with caplog.at_level('DEBUG', logger='relstorage.pack.throttle'):
        _batch(pacer, clock, 0.5, 0)
        _batch(pacer, clock, 0.25, 0)
    lines = [r.getMessage() for r in caplog.records
             if r.name == 'relstorage.pack.throttle']
    assert lines == [
        "pack: batch 1 took 0.500s; others' longest statement 0.050s, "
        'quiet 0.004s: pause; next batch 500 objects',
        "pack: batch 2 took 0.250s; others' longest statement 0.005s, "
        'quiet 0.003s: no pause; next batch 1000 objects']


def test_a_lock_waiter_pauses_whatever_the_watch_says(monkeypatch):
    clock, slept = _fake_time(monkeypatch)
    pacer = pack_throttle.Pacer(_Options(), pytest.fail, waits_known=True,
                                watch=_Watch(0.0, 0.0, 0.0))
    _batch(pacer, clock, 0.5, 1)
    assert slept == [pytest.approx(0.25)] * 2


def test_the_pacer_says_nothing_without_pauses(monkeypatch):
    monkeypatch.setattr(pack_throttle, 'time', types.SimpleNamespace(
        monotonic=time.monotonic, sleep=pytest.fail))
    options = _Options()
    options.pack_duty_cycle = 1.0
    last = [1]
    pacer = pack_throttle.Pacer(options, lambda: last[0])
    last[0] += 1
    pacer.pause(time.monotonic())
    assert _report(pacer) == []


# -- on a database ---------------------------------------------------------

def _waiting_for_locks(storage, backend):
    """How many sessions of the database wait for a lock now.  (MariaDB:
    its UPDATE is under way.  Polled often, its lock tables kept that
    UPDATE from ever entering its lock wait: the pack asks once a
    batch.)"""
    if backend.marker == 'postgresql':
        sql = ("SELECT COUNT(*) FROM pg_stat_activity WHERE datname = "
               "current_database() AND wait_event_type = 'Lock'")
    else:
        sql = ("SELECT COUNT(*) FROM information_schema.processlist "
               "WHERE db = DATABASE() AND info LIKE 'UPDATE object_state%'")
    return query(storage, sql)[0][0]


def _garbage(db, count):
    """``count`` mappings linked from the root, then unlinked; their
    oids."""
    conn = db.open()
    root = conn.root()
    for index in range(count):
        root[index] = PersistentMapping(n=index)
    transaction.commit()
    oids = [u64(root[index]._p_oid) for index in range(count)]
    for index in range(count):
        del root[index]
    root['other'] = PersistentMapping(n=0)
    transaction.commit()
    conn.close()
    return oids


@pytest.fixture
def waits_told(open_storage, backend):
    storage = open_storage(pack_duty_cycle=0.5)
    if not storage._adapter.packer.counts_waiters:
        pytest.skip(f'{backend.name} cannot tell lock waits: its throttle '
                    f'goes by commits (the unit tests above)')
    return storage


def test_a_batch_a_writer_waited_for_is_followed_by_a_pause(
        waits_told, backend, monkeypatch):
    storage = waits_told
    db = ZODB.DB(storage)
    oids = _garbage(db, 50)
    packer = storage._adapter.packer
    cm = storage._adapter.connmanager
    original = packer.delete_doomed
    writer = {}

    def held_up():
        # A client writing a row the batch removes: it waits for the
        # batch's transaction.
        conn = cm.connect()
        cursor = conn.cursor()
        try:
            cm.begin_write(cursor, 'test')
            cursor.execute(f'UPDATE object_state SET tid = tid '
                           f'WHERE zoid = {oids[0]}')
            cm.commit(conn, cursor)
            writer['done'] = time.monotonic()
        except Exception as e:      # reported by the test
            writer['error'] = e
        finally:
            cm.close(conn, cursor)

    def delete_doomed(cursor, rows, pack_tid):
        removed = original(cursor, rows, pack_tid)
        if 'thread' not in writer:
            writer['thread'] = thread = threading.Thread(target=held_up)
            thread.start()
            deadline = time.monotonic() + 10
            while _waiting_for_locks(storage, backend) < 1:
                assert 'error' not in writer, writer
                assert time.monotonic() < deadline, 'the writer never waited'
                time.sleep(0.2)
            time.sleep(0.3)     # (MariaDB: well inside its lock wait)
        return removed
    monkeypatch.setattr(packer, 'delete_doomed', delete_doomed)
    notes = _Notes()
    storage.pack(time.time() + 1, referencesf, progress=notes)
    writer['thread'].join(10)
    assert 'done' in writer
    paused = [n for n in notes.notes if 'followed by a pause' in n]
    assert paused and 'waited for them' in paused[0], notes.notes
    db.close()


def test_a_batch_during_which_another_statement_ran_long_pauses(
        open_storage, backend, monkeypatch):
    """The watch sees another client's statement that runs long while a
    batch runs (here one that sleeps), and the pacer pauses after that
    batch; the pack's own long statements do not count."""
    storage = open_storage(pack_duty_cycle=0.5)
    packer = storage._adapter.packer
    if not packer.times_statements:
        pytest.skip(f'{backend.name} does not time statements')
    db = ZODB.DB(storage)
    _garbage(db, 50)
    cm = storage._adapter.connmanager
    sleep = ('SELECT pg_sleep(0.3)' if backend.marker == 'postgresql'
             else 'SELECT SLEEP(0.3)')
    original = packer.delete_doomed
    calls = []

    def slow_other():
        conn = cm.connect()
        cursor = conn.cursor()
        try:
            cursor.execute(sleep)
            cursor.fetchall()
        finally:
            cm.close(conn, cursor)

    def delete_doomed(cursor, rows, pack_tid):
        removed = original(cursor, rows, pack_tid)
        if not calls:
            thread = threading.Thread(target=slow_other)
            thread.start()
            thread.join(10)
        calls.append(len(rows))
        return removed
    monkeypatch.setattr(packer, 'delete_doomed', delete_doomed)
    notes = _Notes()
    storage.pack(time.time() + 1, referencesf, progress=notes)
    paused = [n for n in notes.notes if 'followed by a pause' in n]
    assert paused and 'ran slower' in paused[0], notes.notes
    db.close()


def test_the_watch_leaves_out_the_pack_and_itself(open_storage, backend):
    storage = open_storage()
    packer = storage._adapter.packer
    if not packer.times_statements:
        pytest.skip(f'{backend.name} does not time statements')
    cm = storage._adapter.connmanager
    sleep = ('SELECT pg_sleep(0.5)' if backend.marker == 'postgresql'
             else 'SELECT SLEEP(0.5)')
    conn = cm.connect()
    cursor = conn.cursor()
    own = cm.session_id(conn)
    seen = {}

    def look(exclude, key):
        other = cm.connect()
        other_cursor = other.cursor()
        try:
            time.sleep(0.25)
            seen[key] = packer.slowest_statement(other_cursor, exclude)
        finally:
            cm.close(other, other_cursor)
    try:
        for exclude, key in (([], 'counted'), ([own], 'left out')):
            thread = threading.Thread(target=look, args=(exclude, key))
            thread.start()
            cursor.execute(sleep)
            cursor.fetchall()
            thread.join(10)
    finally:
        cm.close(conn, cursor)
    assert 0.15 < seen['counted'] < 5, seen
    assert seen['left out'] < 0.15, seen


def test_the_watch_counts_a_writing_transaction_from_its_start(
        open_storage, backend):
    """A commit under way is timed whole, between its statements too (a
    commit slowed a little at every step shows only there); a reader idle
    in its snapshot, as a ZODB connection is between requests, is not
    timed at all."""
    storage = open_storage()
    packer = storage._adapter.packer
    if not packer.times_write_transactions:
        pytest.skip(f'{backend.name} does not time transactions')
    cm = storage._adapter.connmanager
    writer, reader, asker = (cm.connect() for _ in range(3))
    cursors = [conn.cursor() for conn in (writer, reader, asker)]
    try:
        # The writer has written (a row of a table of its own), the reader
        # has read; neither runs a statement now.  (The connections are in
        # autocommit mode: the storage begins its transactions itself.)
        cursors[0].execute('BEGIN')
        cursors[0].execute('CREATE TEMPORARY TABLE watch_probe (x INT)')
        cursors[0].execute('INSERT INTO watch_probe VALUES (1)')
        cursors[1].execute('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY')
        cursors[1].execute('SELECT 1')
        cursors[1].fetchall()
        time.sleep(0.4)
        counted = packer.slowest_statement(cursors[2], [])
        cm.rollback(asker, cursors[2])
        without_writer = packer.slowest_statement(
            cursors[2], [cm.session_id(writer)])
    finally:
        for conn, cursor in zip((writer, reader, asker), cursors):
            cm.close(conn, cursor)
    assert 0.35 < counted < 5, counted
    assert without_writer < 0.2, without_writer


def test_commits_that_wait_for_nothing_do_not_slow_the_pack(
        waits_told, monkeypatch):
    storage = waits_told
    db = ZODB.DB(storage)
    _garbage(db, 400)
    # Lock waits only: the writer's commits may run slower during the
    # batches on a busy machine, which the watch would see (the test
    # above).
    monkeypatch.setattr(pack_throttle, 'SLOW_FLOOR', 60.0)
    # Many small batches, each with commits of others during it.
    monkeypatch.setattr(pack_throttle, 'FIRST_BATCH', 20)
    monkeypatch.setattr(pack_throttle, 'MAX_BATCH', 40)
    packer = storage._adapter.packer
    original = packer.delete_doomed
    batches = []

    def delete_doomed(cursor, rows, pack_tid):
        before = _last_tid(storage)
        removed = original(cursor, rows, pack_tid)
        deadline = time.monotonic() + 10
        while _last_tid(storage) == before:     # another client commits
            assert time.monotonic() < deadline, 'the writer stopped'
            time.sleep(0.01)
        batches.append(1)
        return removed
    monkeypatch.setattr(packer, 'delete_doomed', delete_doomed)
    stop = threading.Event()

    def write():
        # New objects only: rows no batch of this pack holds.  (A writer
        # of objects whose old revisions a batch removes may wait for it
        # on MariaDB: then the pause is due.)
        tm = transaction.TransactionManager()
        conn = db.open(tm)
        while not stop.is_set():
            conn.add(PersistentMapping(n=1))
            tm.commit()
            time.sleep(0.005)
        conn.close()
    thread = threading.Thread(target=write)
    thread.start()
    notes = _Notes()
    try:
        storage.pack(time.time() + 1, referencesf, progress=notes)
    finally:
        stop.set()
        thread.join(10)
    assert len(batches) >= 5
    assert not [n for n in notes.notes if 'followed by a pause' in n], \
        notes.notes
    db.close()


def _last_tid(storage):
    return query(storage, 'SELECT tid FROM commit_row WHERE id = 0')[0][0]
