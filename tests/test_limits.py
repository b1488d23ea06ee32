"""The database out of disk space or out of connection slots: a clear
error, committed data intact, and the storage usable again once the
resource is back.

The disk is a small tmpfs mounted for the test (root is needed: where the
mount is refused the disk tests are skipped) holding the SQLite file, a
PostgreSQL tablespace of a server of the test's own, or the data
directory of a MariaDB server of its own (tests/private.py); it is filled
with a ballast file, which is deleted to give the space back.  The
connection slots are those of a server of the test's own with a small
max_connections, taken by plain driver connections.
"""
import contextlib
import os
import shutil
import subprocess
import tempfile
import threading
import time

import pytest
from ZODB.Connection import TransactionMetaData
from ZODB.POSException import StorageError
from ZODB.tests.MinPO import MinPO
from ZODB.tests.StorageTestBase import zodb_pickle
from ZODB.utils import z64

import tally
from private import PrivateMariaDB
from private import PrivatePostgreSQL
from relstorage.errors import CommitOutcomeUnknownError
from relstorage.errors import DatabaseFullError
from relstorage.errors import DisconnectedError

#: Size of the small disk, in MiB.
DISK_MB = 64

#: Bytes left free by the ballast: less than a big commit needs.
LEFT_FREE = 512 * 1024

#: Bytes of the pickle that does not fit (random: not compressible).
BIG = 3 * 1024 * 1024


@contextlib.contextmanager
def small_disk(owner=None):
    path = tempfile.mkdtemp(prefix='relstorage-disk-')
    done = subprocess.run(
        ['mount', '-t', 'tmpfs', '-o', f'size={DISK_MB}m,mode=0700', 'tmpfs',
         path], capture_output=True, text=True)
    if done.returncode:
        os.rmdir(path)
        pytest.skip(f'cannot mount a small file system to fill: '
                    f'{done.stderr.strip() or done.returncode}')
    try:
        if owner:
            shutil.chown(path, owner)
        yield path
    finally:
        subprocess.run(['umount', '-l', path], capture_output=True)
        os.rmdir(path)


def fill(path, left=LEFT_FREE):
    """Write a ballast file that leaves about ``left`` bytes free on the
    file system of ``path``; returns its name."""
    ballast = os.path.join(path, 'ballast')
    stat = os.statvfs(path)
    free = stat.f_bavail * stat.f_frsize
    with open(ballast, 'wb') as f:
        chunk = b'\0' * (1 << 20)
        remaining = max(0, free - left)
        while remaining > 0:
            remaining -= f.write(chunk[:min(len(chunk), remaining)])
    return ballast


def commit(storage, oid, serial, data):
    t = TransactionMetaData()
    storage.tpc_begin(t)
    try:
        storage.store(oid, serial, data, '', t)
        storage.tpc_vote(t)
        return storage.tpc_finish(t)
    except BaseException:
        storage.tpc_abort(t)
        raise


def _disk_full_on(open_on_disk, revive=None):
    """The scenario on a storage that ``open_on_disk()`` opens on a
    database whose data lives on the small disk (filled here).
    ``revive()``, where given, starts the server again if the full disk
    stopped it, and says whether it had to."""
    storage, disk = open_on_disk()
    oid = storage.new_oid()
    small = zodb_pickle(MinPO('before'))
    tid = commit(storage, oid, z64, small)
    big_oid = storage.new_oid()
    ballast = fill(disk)

    started = time.monotonic()
    with pytest.raises(StorageError) as caught:
        commit(storage, big_oid, z64, zodb_pickle(MinPO(os.urandom(BIG))))
    assert time.monotonic() - started < 30
    error = caught.value
    died = False
    if not isinstance(error, DatabaseFullError):
        # The server gave up (MariaDB aborts when InnoDB runs out of space
        # in a rollback): the commit's connection went with it.
        assert isinstance(error, (DisconnectedError,
                                  CommitOutcomeUnknownError)), error
        os.unlink(ballast)
        ballast = None
        died = revive is not None and revive()
        assert died, f'{error!r}, and the server did not stop'
    else:
        message = str(error)
        assert 'space' in message or 'full' in message, message
        # Readable while the disk is full.
        assert storage.load(oid) == (small, tid)
    # Committed data is intact; nothing of the failed commit is there.
    assert storage.load(oid) == (small, tid)
    with pytest.raises(KeyError):
        storage.load(big_oid)

    if ballast:
        os.unlink(ballast)
    big = zodb_pickle(MinPO(os.urandom(BIG)))
    big_tid = commit(storage, big_oid, z64, big)
    assert storage.load(big_oid) == (big, big_tid)
    assert commit(storage, oid, tid, zodb_pickle(MinPO('after'))) > big_tid
    tally.add('faults', 'scenarios')
    tally.add('faults', 'committed transactions checked', 3)
    if died:
        tally.add('faults', 'servers stopped by a full disk')


@pytest.mark.sqlite
def test_disk_full_sqlite(keep_history):
    from relstorage.adapters.sqlite import SQLiteAdapter
    from relstorage.storage import RelStorage
    with contextlib.ExitStack() as stack:
        def open_on_disk():
            disk = stack.enter_context(small_disk())
            storage = RelStorage(
                SQLiteAdapter(os.path.join(disk, 'data')),
                keep_history=keep_history)
            stack.callback(storage.close)
            return storage, disk
        _disk_full_on(open_on_disk)


@pytest.mark.postgresql
def test_disk_full_postgresql(keep_history):
    with contextlib.ExitStack() as stack:
        server = PrivatePostgreSQL(max_connections=20)
        stack.callback(server.close)

        def open_on_disk():
            disk = stack.enter_context(small_disk(owner=server.cluster.user))
            server.server.query(f"CREATE TABLESPACE small LOCATION '{disk}'")
            stack.callback(server.server.query, 'DROP TABLESPACE small')
            storage = server.open(server.new_database('small'),
                                  keep_history=keep_history)
            stack.callback(server.server.query,
                           'DROP DATABASE faults WITH (FORCE)')
            stack.callback(storage.close)
            return storage, disk
        _disk_full_on(open_on_disk)


@pytest.mark.mysql
def test_disk_full_mariadb(keep_history, monkeypatch):
    """MariaDB (10.11) may abort when InnoDB runs out of space while it
    rolls back the failed statement ("[FATAL] InnoDB: Error (Out of disk
    space) in rollback"): the commit then fails as a lost connection, and
    once there is space and the server is started again, its recovery has
    kept every committed transaction and none of the failed one."""
    from relstorage.storage import outcome
    # Not the default 20s: the test knows the server is down.
    monkeypatch.setattr(outcome, 'REACH_WAIT', 1.0)
    with contextlib.ExitStack() as stack:
        def open_on_disk():
            disk = stack.enter_context(small_disk())
            server = PrivateMariaDB(max_connections=20, data_root=disk)
            stack.callback(server.close)
            servers.append(server)
            storage = server.open(server.new_database(),
                                  keep_history=keep_history)
            stack.callback(storage.close)
            return storage, disk

        def revive():
            server = servers[0].server
            if server.proc is not None and server.proc.poll() is None:
                return False
            server.start()
            return True
        servers = []
        _disk_full_on(open_on_disk, revive)


# -- connection slots -----------------------------------------------------

@pytest.fixture(params=[
    pytest.param(PrivatePostgreSQL, marks=pytest.mark.postgresql,
                 id='postgresql'),
    pytest.param(PrivateMariaDB, marks=pytest.mark.mysql, id='mysql')])
def crowded(request):
    server = request.param(max_connections=12)
    yield server
    server.close()


def test_connection_slots_exhausted(crowded):
    """Every connection slot taken: a storage opened now waits up to
    commit-lock-timeout for one and fails with an error that says so; one
    already open goes on working; a slot given back in time is used; once
    slots are free, storages open again."""
    database = crowded.new_database()
    working = crowded.open(database, commit_lock_timeout=1)
    oid = working.new_oid()
    tid = commit(working, oid, z64, zodb_pickle(MinPO(1)))
    assert working.load(oid)[1] == tid     # its read connection is open

    hogs = []
    try:
        while True:
            try:
                hogs.append(crowded.raw_connect())
            except Exception:
                break
            assert len(hogs) < 100, 'the server never ran out of slots'
        started = time.monotonic()
        with pytest.raises(DisconnectedError) as caught:
            crowded.open(database, commit_lock_timeout=1)
        elapsed = time.monotonic() - started
        assert 0.8 <= elapsed < 5, elapsed
        message = str(caught.value)
        assert 'no connection slot free' in message, message
        assert 'commit-lock-timeout' in message, message

        # The storage that has its connections goes on.
        assert working.load(oid)[1] == tid
        tid = commit(working, oid, tid, zodb_pickle(MinPO(2)))

        # A slot given back while a storage waits is taken.
        opened = []

        def open_waiting():
            opened.append(crowded.open(database, commit_lock_timeout=20))
        waiter = threading.Thread(target=open_waiting)
        waiter.start()
        time.sleep(0.5)
        for hog in hogs[:3]:
            hog.close()
        del hogs[:3]
        waiter.join(30)
        assert opened, 'the waiting storage did not open'
        assert opened[0].load(oid)[1] == tid
        opened[0].close()
    finally:
        for hog in hogs:
            hog.close()
    again = crowded.open(database)
    commit(again, oid, tid, zodb_pickle(MinPO(3)))
    again.close()
    working.close()
    tally.add('faults', 'scenarios', 4)
    tally.add('faults', 'committed transactions checked', 3)
