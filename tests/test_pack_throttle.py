"""The pack's throttle pauses only when a client was held up by a batch
(relstorage.pack.throttle): measured by the database where it can tell
(PostgreSQL, MariaDB: sessions waiting for the batch's locks at its end),
by the seconds other clients' commits took during it, which they record
and the pack's watch reads (relstorage.pack.watch), and by commits during
the batch where neither tells (SQLite)."""
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
from relstorage.storage import commit as commit_module
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


def _batch(pacer, clock, seconds, waiters=None, logged=None):
    """A batch of ``seconds`` on the fake clock, then the pacer's turn."""
    started = clock[0]
    clock[0] += seconds
    pacer.pause(started, waiters, logged)


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
    ``answers`` (the seconds of the commits seen during a batch; with a
    pause, then those the pacer discards before its middle and those it
    keeps after)."""

    def __init__(self, *answers):
        self.answers = list(answers)

    def take(self):
        return self.answers.pop(0)


def test_the_pacer_tells_whether_others_committed_during_the_last_step(
        monkeypatch):
    clock, slept = _fake_time(monkeypatch)
    watch = _Watch([0.004], [], [0.003, 0.005], None)
    pacer = pack_throttle.Pacer(_Options(), pytest.fail, waits_known=True,
                                watch=watch)
    assert not pacer.others_committing()      # before the first step
    seen = []
    for _ in range(4):
        _batch(pacer, clock, 0.05, 0)
        seen.append(pacer.others_committing())
    # (The last: the watch stopped telling, so nothing was seen.)
    assert seen == [True, False, True, False]
    assert slept == []
    unwatched = pack_throttle.Pacer(_Options(), lambda: None,
                                    waits_known=True)
    _batch(unwatched, clock, 0.05, 0)
    assert not unwatched.others_committing()


def test_a_batch_during_which_a_commit_was_slowed_pauses_and_shrinks(
        monkeypatch):
    clock, slept = _fake_time(monkeypatch)
    monkeypatch.setattr(pack_throttle, 'PROBES', 1)   # one probe
    monkeypatch.setattr(pack_throttle, 'REST_STEP', 0.125)
    options = _Options()
    options.pack_max_delay = 0.7    # banked: a pause and one step more
    watch = _Watch([0.005],             # under SLOW_FLOOR: not looked at
                   [0.05, 0.004],       # one slowed: the probe learns
                   [0.03], [0.004, 0.006],  # the usual (its second half)
                   [0.002], [0.005],    # (a pause: its two halves; quick
                                        # again: it ends)
                   [0.03],              # six times the usual 0.005
                   [0.02], [],          # (a pause without commits)
                   [],                  # no commit: nobody slowed
                   [0.05],              # slowed again
                   [0.0], [0.04] * 3,   # still slowed: the pause goes on
                   *[[0.04] * 3] * 4,   # four steps; the bank spent, so
                                        # the usual is now 0.04...
                   [0.05, 0.03],        # ... under twice that: not slowed
                   None)                # the watch stopped telling
    pacer = pack_throttle.Pacer(options, pytest.fail, waits_known=True,
                                watch=watch)
    sizes = []
    for _ in range(7):
        _batch(pacer, clock, 0.5, 0)
        sizes.append(pacer.size)
    # A pause is a step (two halves), not as long as the batch, unless
    # the commits are still slowed.
    assert slept == ([pack_throttle.PROBE / 2] * 2 + [0.0625] * 6
                     + [0.125] * 4)
    assert watch.answers == []
    # Batches sized to a second, then to half, a quarter of it..., and
    # back up a quarter at a time.
    assert sizes[0] == 2 * pack_throttle.FIRST_BATCH
    assert sizes[1] == sizes[0] and sizes[2] == sizes[1] // 2
    assert sizes[3] < sizes[2] and sizes[4] < sizes[3]
    assert pacer.scale == pytest.approx(1.0 / 2 / 2 * 1.25 / 2 * 1.25)
    assert pacer.quiet == [0.004, 0.006, 0.005, 0.04, 0.04, 0.04]
    assert _report(pacer) == ['3 of 7 batches followed by a pause while other '
                           'clients committed slower, 0.9s in all '
                           '(pack-duty-cycle 0.5)']


def test_a_pause_goes_on_while_commits_are_still_slowed(monkeypatch):
    """Whatever the batches set going on the server (a page cleaner, a
    checkpoint) can outlast a pause of one step: the pause goes on, a
    step at a time, while the commits the watch sees are still slowed,
    spending the pauses banked by the batches that had none; it stops at
    the first step whose commits are not."""
    clock, slept = _fake_time(monkeypatch)
    monkeypatch.setattr(pack_throttle, 'PROBES', 1)   # one probe
    monkeypatch.setattr(pack_throttle, 'REST_STEP', 0.125)
    watch = _Watch([0.005],                     # banks 0.5s
                   [0.004],                     # banks 1.0s
                   [0.02], [], [0.003, 0.004],  # slowed; the probe learns
                   [], [0.03],                  # the pause: still slowed
                   [0.025], [0.02],             # two steps: still
                   [0.004],                     # a third: no longer
                   [0.003])
    pacer = pack_throttle.Pacer(_Options(), pytest.fail, waits_known=True,
                                watch=watch)
    for _ in range(4):
        _batch(pacer, clock, 0.5, 0)
    assert slept == ([pack_throttle.PROBE / 2] * 2 + [0.0625] * 2
                     + [0.125] * 3)
    assert watch.answers == []
    assert pacer.paused == pytest.approx(0.5)
    # The bank: 1.5s earned by three batches, 0.5s spent; the fourth
    # batch's share is banked too.
    assert pacer.bank == pytest.approx(1.5 - 0.5 + 0.5)
    # The commits of the step that ended it become the usual.
    assert pacer.quiet == [0.003, 0.004, 0.004]


def test_a_pause_after_a_long_step_ends_when_commits_are_quick_again(
        monkeypatch):
    """The duty cycle bounds the pauses; it does not set them: after a
    step of 20 s that slowed one commit (one statement, such as the
    filling of pack_object), the pause lasts a step when the commits
    seen during it take their usual time, not 20 s."""
    clock, slept = _fake_time(monkeypatch)
    options = _Options()
    options.pack_max_delay = 20.0
    watch = _Watch([0.004] * 900 + [0.017],     # one commit of 17 ms
                   [0.004], [0.005, 0.004],     # the pause: usual again
                   [0.004])
    pacer = pack_throttle.Pacer(options, pytest.fail, waits_known=True,
                                watch=watch)
    pacer.probed = True
    pacer.quiet = [0.004]
    _batch(pacer, clock, 20.0, 0)
    assert slept == [pack_throttle.REST_STEP / 2] * 2
    assert pacer.pauses == 1
    assert pacer.paused == pytest.approx(pack_throttle.REST_STEP)
    assert pacer.bank == pytest.approx(20.0 - pack_throttle.REST_STEP)
    _batch(pacer, clock, 0.1, 0)
    assert pacer.pauses == 1 and watch.answers == []


def test_a_pause_goes_on_no_longer_than_the_bank(monkeypatch):
    """The pauses in all stay within pack-duty-cycle: a pause goes on only
    as far as the batches before it banked, and never beyond
    pack-max-delay.  A slowness a whole such pause did not relieve is not
    the batches': it becomes the usual."""
    clock, slept = _fake_time(monkeypatch)
    monkeypatch.setattr(pack_throttle, 'REST_STEP', 0.125)
    watch = _Watch([0.004], [0.004], [0.004],   # 0.75s banked
                   [0.05],                      # slowed: 1.0s earned
                   [], [0.05],                  # the pause, then steps
                   *[[0.05]] * 5,               # up to pack-max-delay
                   [0.05])                      # the usual now: no pause
    options = _Options()
    options.pack_max_delay = 0.75
    pacer = pack_throttle.Pacer(options, pytest.fail, waits_known=True,
                                watch=watch)
    pacer.probed = True
    pacer.quiet = [0.004]
    for _ in range(5):
        _batch(pacer, clock, 0.25, 0)
    assert slept == [0.0625] * 2 + [0.125] * 5
    assert watch.answers == []
    assert pacer.pauses == 1 and pacer.paused == 0.75
    assert pacer.quiet == [0.004, 0.05]


def test_without_a_watch_a_pause_is_as_long_as_the_duty_cycle_says(
        monkeypatch):
    """Where nothing measures the commits during a pause (lock waits known,
    or SQLite's commits), it is never drawn out."""
    clock, slept = _fake_time(monkeypatch)
    pacer = pack_throttle.Pacer(_Options(), pytest.fail, waits_known=True)
    for _ in range(3):
        _batch(pacer, clock, 0.5, 0)
    _batch(pacer, clock, 0.5, 1)
    assert slept == [pytest.approx(0.5)]


def test_the_probe_goes_on_until_it_saw_a_few_commits(monkeypatch):
    """One commit is no usual: the probe is repeated until it saw
    PROBE_SEEN commits (at most PROBES times)."""
    clock, slept = _fake_time(monkeypatch)
    watch = _Watch([0.05],              # slowed: the probe
                   [], [0.039],         # one commit: not enough
                   [0.002], [],         # none
                   [0.01], [0.004, 0.005],  # three: the usual
                   [], [0.004],         # (the pause)
                   [0.015],             # over twice 0.005: slowed
                   [], [0.003])         # (the pause)
    pacer = pack_throttle.Pacer(_Options(), pytest.fail, waits_known=True,
                                watch=watch)
    _batch(pacer, clock, 0.5, 0)
    assert pacer.quiet[:3] == [0.039, 0.004, 0.005]
    assert pacer._usual() == 0.005
    _batch(pacer, clock, 0.5, 0)
    assert pacer.pauses == 2 and watch.answers == []


def test_without_a_usual_the_floor_alone_judges(monkeypatch):
    """No commit seen while no batch ran (a writer committing now and
    then): a commit over SLOW_FLOOR during a batch is enough."""
    clock, slept = _fake_time(monkeypatch)
    monkeypatch.setattr(pack_throttle, 'PROBES', 1)   # one probe
    watch = _Watch([0.02], [], [],      # slowed; the probe saw none
                   [], [],              # (the pause: none either)
                   [0.009],             # under the floor
                   [0.011],             # over it: no second probe
                   [], [])              # (the pause)
    pacer = pack_throttle.Pacer(_Options(), pytest.fail, waits_known=True,
                                watch=watch)
    for _ in range(3):
        _batch(pacer, clock, 0.5, 0)
    assert slept == ([pack_throttle.PROBE / 2] * 2
                     + [pack_throttle.REST_STEP / 2] * 4)
    assert watch.answers == [] and pacer.quiet == []


def test_each_batch_is_told_in_the_debug_log(monkeypatch, caplog):
    """At DEBUG, a line per batch says what the pacer went by: how long
    the batch took, the commits of others the watch saw, the usual
    commit, and whether it paused (how an administrator checks what it
    decided)."""
    clock, _ = _fake_time(monkeypatch)
    monkeypatch.setattr(pack_throttle, 'PROBES', 1)   # one probe
    watch = _Watch([0.05], [0.02], [0.004],     # slowed; the probe
                   [0.02], [0.003],             # (the pause's halves)
                   [0.005, 0.001])              # not slowed
    pacer = pack_throttle.Pacer(_Options(), pytest.fail, waits_known=True,
                                watch=watch)
    with caplog.at_level('DEBUG', logger='relstorage.pack.throttle'):
        _batch(pacer, clock, 0.5, 0)
        _batch(pacer, clock, 0.25, 0)
    lines = [r.getMessage() for r in caplog.records
             if r.name == 'relstorage.pack.throttle']
    assert lines == [
        "pack: batch 1 took 0.500s; others' commits seen: 1, the longest "
        '0.050s, the usual 0.004s: pause; next batch 500 objects',
        "pack: batch 2 took 0.250s; others' commits seen: 2, the longest "
        '0.005s, the usual 0.004s: no pause; next batch 1000 objects']


def test_a_lock_waiter_pauses_whatever_the_watch_says(monkeypatch):
    clock, slept = _fake_time(monkeypatch)
    pacer = pack_throttle.Pacer(_Options(), pytest.fail, waits_known=True,
                                watch=_Watch([], [], []))
    _batch(pacer, clock, 0.5, 1)
    # A step (its two halves): the watch saw no commit slowed in it.
    assert slept == [pack_throttle.REST_STEP / 2] * 2


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


def test_a_batch_that_wrote_much_log_makes_the_next_smaller(monkeypatch):
    """Where the database tells its log's position, a batch is sized to
    write at most LOG_TARGET bytes of it, however quick it was: another
    client's commit waits for the log written before it to reach the
    disk."""
    clock, slept = _fake_time(monkeypatch)
    monkeypatch.setattr(pack_throttle, 'LOG_TARGET', 1000)
    pacer = pack_throttle.Pacer(_Options(), pytest.fail, waits_known=True)
    first = pack_throttle.FIRST_BATCH
    _batch(pacer, clock, 0.1, 0, logged=50_000)  # where it stood: no size
    assert pacer.size == 2 * first                # (by time alone)
    _batch(pacer, clock, 0.1, 0, logged=52_000)  # twice the target
    assert pacer.size == first
    _batch(pacer, clock, 0.1, 0, logged=52_100)  # a tenth: by time
    assert pacer.size == 2 * first
    _batch(pacer, clock, 0.1, 0, logged=92_100)  # 40 times: by a quarter
    assert pacer.size == first // 2
    _batch(pacer, clock, 0.8, 0, logged=92_600)  # half: slower than time
    assert pacer.size == int(first // 2 * 1.25)
    assert slept == []


def test_the_log_written_is_in_the_debug_log(monkeypatch, caplog):
    clock, _ = _fake_time(monkeypatch)
    pacer = pack_throttle.Pacer(_Options(), pytest.fail, waits_known=True)
    with caplog.at_level('DEBUG', logger='relstorage.pack.throttle'):
        _batch(pacer, clock, 0.5, 0, logged=10_000_000)
        _batch(pacer, clock, 0.5, 0, logged=12_500_000)
    lines = [r.getMessage() for r in caplog.records
             if r.name == 'relstorage.pack.throttle']
    assert lines[0].startswith('pack: batch 1 took 0.500s; ')
    assert lines[1].startswith('pack: batch 2 took 0.500s (2.5 MB of log); ')


# -- on a database ---------------------------------------------------------

def _asked(open_storage, ask):
    """``ask(cm, packer, cursor)`` on a connection of a new storage's
    adapter, its transaction rolled back after."""
    adapter = open_storage()._adapter
    cm, packer = adapter.connmanager, adapter.packer
    conn = cm.connect()
    cursor = conn.cursor()
    try:
        return ask(cm, packer, cursor)
    finally:
        cm.rollback(conn, cursor)
        cm.close(conn, cursor)


def test_a_batch_end_tells_waiters_and_where_the_log_stands(open_storage,
                                                          backend):
    """``batch_end``: PostgreSQL tells its WAL's position and MariaDB its
    redo log's, which grow with what a transaction writes; the others say
    None."""
    def ask(cm, packer, cursor):
        cm.begin_write(cursor, 'test')
        waiters, before = packer.batch_end(cursor)
        cursor.execute('UPDATE commit_row SET tid = tid + 1 WHERE id = 0')
        return (waiters, before) + packer.batch_end(cursor)
    waiters, before, waiters_after, after = _asked(open_storage, ask)
    if backend.marker in ('postgresql', 'mysql'):
        assert (waiters, waiters_after) == (0, 0)
        assert isinstance(before, int) and after > before > 0
    else:
        assert before is None and after is None
        assert waiters_after == waiters


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


class _SlowVote:
    """A resource of a transaction that takes ``seconds`` to vote: after
    the storage's tpc_begin, before its last step (it sorts last)."""

    def __init__(self, seconds):
        self.seconds = seconds

    def sortKey(self):
        return '~slow'

    def tpc_vote(self, txn):
        time.sleep(self.seconds)

    def abort(self, txn):
        pass
    commit = tpc_begin = tpc_finish = tpc_abort = abort


def _slow_commit(db):
    """Another client's commit that waits 0.3 s in its vote, made by a
    thread and waited for, then time for the watch to see it (it looks
    every 20 ms); whether it was committed."""
    done = []

    def commit():
        tm = transaction.TransactionManager()
        conn = db.open(tm)
        conn.root()['slow'] = PersistentMapping(n=1)
        tm.get().join(_SlowVote(0.3))
        tm.commit()
        conn.close()
        done.append(True)
    thread = threading.Thread(target=commit)
    thread.start()
    thread.join(10)
    time.sleep(0.1)
    return bool(done)


def test_each_ordinary_commit_records_its_seconds(open_storage, tmp_path,
                                                  monkeypatch):
    """With the tid it moves, a commit records how slow this client's
    commits are (what the pack's watch reads): its own time from
    tpc_begin, or the previous commit's whole time where that is longer
    and recent; in one call of the last step and in the step-by-step path
    alike (a commit with a blob takes the latter)."""
    storage = open_storage(blob_dir=str(tmp_path / 'blobs'),
                           shared_blob_dir=False)
    packer = storage._adapter.packer

    def last_commit():
        found = query(storage, packer.LAST_COMMIT)[0]
        return int(found[0]), found[1]
    monkeypatch.setattr(commit_module, 'FRESH', 0.5)
    db = ZODB.DB(storage)
    conn = db.open()
    time.sleep(0.6)     # (the root's commit, on the same instance: old)
    started = time.monotonic()
    conn.root()['a'] = PersistentMapping(n=1)
    transaction.commit()
    took = time.monotonic() - started
    tid, seconds = last_commit()
    assert tid == u64(conn.root()['a']._p_serial)
    assert 0.0 < seconds < took

    with open(__file__, 'rb') as f:
        blob_data = f.read(100)
    from ZODB.blob import Blob
    conn.root()['b'] = blob = Blob()
    with blob.open('w') as f:
        f.write(blob_data)
    transaction.get().join(_SlowVote(0.2))
    transaction.commit()
    tid, seconds = last_commit()
    assert tid == u64(conn.root()._p_serial)      # (it changed too)
    assert 0.2 <= seconds < 5
    # The next commit, a quick one, records the last one's whole time
    # (its last round trip included, which only a later commit can)...
    conn.root()['c'] = 1
    transaction.commit()
    assert 0.2 <= last_commit()[1] < 5
    # ... while that is news (FRESH seconds); then its own, no longer than
    # the commit() call around it (on a loaded machine that call may take
    # 0.3 s too, but where it is quicker a stale 0.3 s would show).
    conn.root()['c'] = 2
    transaction.get().join(_SlowVote(0.3))
    transaction.commit()
    assert 0.3 <= last_commit()[1] < 5
    time.sleep(0.6)
    conn.root()['c'] = 3
    started = time.monotonic()
    transaction.commit()
    took = time.monotonic() - started
    seconds = last_commit()[1]
    assert 0.0 < seconds <= took
    conn.close()
    db.close()


def test_the_watch_sees_the_commits_of_others(open_storage):
    from relstorage.pack.watch import Watch
    storage = open_storage()
    adapter = storage._adapter
    db = ZODB.DB(storage)       # (its root's commit, before the watch)
    watch = Watch.started(adapter.connmanager, adapter.packer)
    assert watch is not None
    try:
        time.sleep(0.1)
        assert watch.take() == []
        conn = db.open()
        conn.root()['a'] = PersistentMapping(n=1)
        transaction.commit()
        deadline = time.monotonic() + 5
        seen = []
        while not seen and time.monotonic() < deadline:
            time.sleep(0.05)
            seen = watch.take()
        assert len(seen) == 1 and 0.0 < seen[0] < 5, seen
        time.sleep(0.1)
        assert watch.take() == []
        conn.close()
        db.close()
    finally:
        watch.stop()


def test_a_batch_during_which_a_commit_was_slowed_pauses(
        open_storage, backend, monkeypatch):
    """Another client's commit that takes long while a batch runs (here
    one that waits in its vote) is seen by the pack's watch, and the
    pacer pauses after that batch."""
    storage = open_storage(pack_duty_cycle=0.5)
    packer = storage._adapter.packer
    if not packer.watches_commits:
        pytest.skip(f'{backend.name}: the throttle counts commits (the '
                    f'unit tests above)')
    db = ZODB.DB(storage)
    _garbage(db, 50)
    original = packer.delete_doomed
    calls = []

    def delete_doomed(cursor, rows, pack_tid):
        if not calls:
            # Before the batch's deletions: on MariaDB a commit during
            # them may wait for their locks (another measure's pause).
            _slow_commit(db)
        calls.append(len(rows))
        return original(cursor, rows, pack_tid)
    monkeypatch.setattr(packer, 'delete_doomed', delete_doomed)
    notes = _Notes()
    storage.pack(time.time() + 1, referencesf, progress=notes)
    paused = [n for n in notes.notes if 'followed by a pause' in n]
    assert paused and 'committed slower' in paused[0], notes.notes
    db.close()


def test_an_analysis_step_during_which_a_commit_was_slowed_pauses(
        open_storage, backend, monkeypatch):
    """The analysis is paced like the deletions: a commit of another
    client that takes long (here one that waits in its vote) while a step
    of the analysis runs is followed by a pause (where the database tells
    neither lock waits nor commit times, SQLite: any commit is)."""
    storage = open_storage(pack_duty_cycle=0.5)
    packer = storage._adapter.packer
    db = ZODB.DB(storage)
    _garbage(db, 50)
    original = packer.base
    committed = []

    def base(*args):
        # Read just before the step that fills pack_object.
        committed.append(_slow_commit(db))
        return original(*args)
    monkeypatch.setattr(packer, 'base', base)
    notes = _Notes()
    storage.pack(time.time() + 1, referencesf, progress=notes)
    assert committed == [True]
    paused = [n for n in notes.notes if 'followed by a pause' in n]
    assert paused and 'steps of the analysis' in paused[0], notes.notes
    assert ('committed slower' if packer.watches_commits else
            'committed,') in paused[0], notes.notes
    db.close()


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
