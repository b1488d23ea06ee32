"""Hostile and malformed input: a clear error, and nothing changed; or,
where the input is legal however odd (transaction metadata, pickles,
database names), stored and returned byte for byte.

Every input tried is counted (tests/tally.py) and printed at the end of
the run.
"""
import logging
import os
import stat
import subprocess
import sys
import uuid

import pytest
import transaction
import ZODB
from ZODB.Connection import TransactionMetaData
from ZODB.POSException import POSKeyError
from ZODB.POSException import StorageError
from ZODB.POSException import StorageTransactionError
from ZODB.POSException import Unsupported
from ZODB.utils import p64
from ZODB.utils import z64

import tally
from relstorage.config.options import ConfigurationError
from relstorage.config.options import Options

GROUP = 'hostile input'

#: Bytes an application may put in transaction metadata or pickles, with
#: what breaks naive SQL or text handling.
AWKWARD = [
    b"O'Reilly \"quoted\" `back` \\ backslash",
    b'nul\x00inside\x00\x00',
    b"'; DROP TABLE object_state; --",
    b'%s %(x)s ? :1 $1 {0}',
    b'\xff\xfe\x80 not utf-8 \xc3',
    'caf\u00e9 \u2603 \U0001f600'.encode('utf-8'),
    bytes(range(256)),
    b'',
]


def _state(storage):
    """What a failed call must not change."""
    return storage.lastTransaction(), len(storage)


def _commit(storage, records, **meta):
    """Commit ``records`` ({oid: data}) in one transaction; its tid."""
    t = TransactionMetaData(**meta)
    storage.tpc_begin(t)
    for oid, data in records.items():
        storage.store(oid, z64 if oid not in _serials else _serials[oid],
                      data, '', t)
    storage.tpc_vote(t)
    tid = storage.tpc_finish(t)
    _serials.update({oid: tid for oid in records})
    return tid


_serials = {}


@pytest.fixture(autouse=True)
def _fresh_serials():
    _serials.clear()


BAD_IDS = [
    b'', b'short', b'\x00' * 9, b'\xff' * 8, bytearray(8), memoryview(
        b'\x00' * 8), 1, None, 1.5, 'ünicode', ['a'], object(),
]


def test_bad_oids_and_serials_change_nothing(open_storage):
    storage = open_storage()
    good = storage.new_oid()
    _commit(storage, {good: b'first'})
    before = _state(storage)
    t = TransactionMetaData()
    storage.tpc_begin(t)
    tried = 0
    for bad in BAD_IDS:
        with pytest.raises((ValueError, TypeError), match='oid'):
            storage.store(bad, z64, b'data', '', t)
        with pytest.raises((ValueError, TypeError), match='serial'):
            storage.store(good, bad if bad is not None else b'bad', b'data',
                          '', t)
        with pytest.raises((ValueError, TypeError, POSKeyError)):
            storage.load(bad)
        tried += 3
    for bad_data in ('text', 12, 1.5, ['x'], {'a': 1}, object()):
        with pytest.raises(StorageError) as e:
            storage.store(good, _serials[good], bad_data, '', t)
        assert repr(good) in str(e.value)
        tried += 1
    with pytest.raises(Unsupported, match='versions'):
        storage.store(good, _serials[good], b'data', 'a-version', t)
    storage.tpc_abort(t)
    assert _state(storage) == before
    assert storage.load(good)[0] == b'first'
    # Calls out of order.
    other = TransactionMetaData()
    with pytest.raises(StorageTransactionError):
        storage.store(good, _serials[good], b'x', '', other)
    with pytest.raises(StorageTransactionError):
        storage.tpc_vote(other)
    assert _state(storage) == before
    tally.add(GROUP, 'inputs', tried + 3)


@pytest.mark.parametrize('keep_history', [True, False], ids=['hp', 'hf'])
def test_awkward_metadata_is_kept_byte_for_byte(open_storage, keep_history):
    storage = open_storage()
    # One object per transaction: history-free keeps a transaction while
    # it holds a current state.
    oids = [storage.new_oid() for _ in AWKWARD]
    tids = []
    for value, oid in zip(AWKWARD, oids):
        extension = {'note': value, value.decode('latin-1'): 'key',
                     'nested': {'b': [value, None, 1.5]}}
        tids.append(_commit(storage, {oid: b'state ' + value},
                            user=value, description=value[::-1],
                            extension=extension))
    oid = oids[0]
    if keep_history:
        for value in AWKWARD:
            _commit(storage, {oid: b'again ' + value}, user=value,
                    description=value[::-1])
    records = {tx.tid: tx for tx in storage.iterator()}
    for value, tid, oid_of in zip(AWKWARD, tids, oids):
        assert storage.loadSerial(oid_of, tid) == b'state ' + value
        if not keep_history:
            # History-free keeps no transaction metadata (as RelStorage
            # 4): committed all the same.
            continue
        tx = records[tid]
        assert tx.user == value
        assert tx.description == value[::-1]
        assert tx.extension['note'] == value
        assert tx.extension[value.decode('latin-1')] == 'key'
        assert tx.extension['nested'] == {'b': [value, None, 1.5]}
    if keep_history:
        history = storage.history(oid, size=len(AWKWARD))
        assert [h['user_name'] for h in history] == AWKWARD[::-1]
        assert [h['description'] for h in history] == [
            v[::-1] for v in AWKWARD[::-1]]
        log = storage.undoLog(0, len(AWKWARD))
        assert [entry['user_name'] for entry in log] == AWKWARD[::-1]
    tally.add(GROUP, 'inputs', len(AWKWARD) * 3)


def test_awkward_pickles_round_trip(open_storage):
    storage = open_storage()
    oids = [storage.new_oid() for _ in AWKWARD]
    _commit(storage, dict(zip(oids, AWKWARD)))
    for oid, value in zip(oids, AWKWARD):
        assert storage.load(oid)[0] == value
    # A large one (4 MiB, every byte value, incompressible enough).
    big_oid = storage.new_oid()
    big = os.urandom(1 << 21) + bytes(range(256)) * 8192
    _commit(storage, {big_oid: big})
    fresh = storage.new_instance()
    try:
        fresh.poll_invalidations()
        assert fresh.load(big_oid)[0] == big
    finally:
        fresh.release()
    tally.add(GROUP, 'inputs', len(AWKWARD) + 1)


@pytest.mark.parametrize('key, value', [
    ('commit_lock_timeout', '-1'), ('commit_lock_timeout', 'nan'),
    ('commit_lock_timeout', "1; DROP TABLE x"),
    ('cache_local_mb', '-5'), ('cache_local_mb', '1e400'),
    ('cache_local_object_max', '2GB'), ('blob_chunk_size', '1'),
    ('blob_cache_size_check', '0'), ('blob_cache_size_check', '101'),
    ('pack_duty_cycle', '0'), ('pack_duty_cycle', '1.5'),
    ('pack_batch_timeout', 'inf?'), ('replica_timeout', '-0.5'),
    ('keep_history', 'perhaps'), ('read_only', '2'),
    ('cache_local_compression', 'lz4'), ('name', 12),
])
def test_out_of_range_options_fail_naming_the_key(key, value):
    with pytest.raises(ConfigurationError) as e:
        Options(**{key: value})
    assert key.replace('_', '-') in str(e.value)
    tally.add(GROUP, 'inputs')


# -- names with unusual characters ----------------------------------------

#: A database name with spaces, quotes, a hyphen and non-ASCII letters.
ODD_NAME = 'rs test-\u00e9 "q" \'s\' ' + uuid.uuid4().hex[:6]


def _exercise(storage):
    """Commit, read back, pack and iterate: everything that names the
    database (locks, information_schema, messages)."""
    db = ZODB.DB(storage)
    try:
        conn = db.open()
        conn.root()['x'] = ODD_NAME
        transaction.commit()
        conn.root()['x'] = ODD_NAME + '!'
        transaction.commit()
        conn.close()
        db.pack()
        conn = db.open()
        assert conn.root()['x'] == ODD_NAME + '!'
        conn.close()
        assert len(list(storage.iterator())) >= 1
    finally:
        db.close()


def test_odd_database_names(backend, tmp_path):
    from relstorage.storage import RelStorage
    if backend.name == 'sqlite':
        from relstorage.adapters.sqlite import SQLiteAdapter
        path = tmp_path / ODD_NAME
        storage = RelStorage(SQLiteAdapter(data_dir=str(path)))
        _exercise(storage)
        return
    if backend.name.startswith('postgresql'):
        import psycopg2.extensions
        from backends import PG_DSN
        from relstorage.adapters.postgresql import PostgreSQLAdapter
        quoted = '"' + ODD_NAME.replace('"', '""') + '"'
        with backend._admin.cursor() as cursor:
            cursor.execute(f'CREATE DATABASE {quoted}')
        try:
            dsn = psycopg2.extensions.make_dsn(PG_DSN, dbname=ODD_NAME)
            storage = RelStorage(PostgreSQLAdapter(dsn=dsn,
                                                   driver=backend.driver))
            _exercise(storage)
            assert ODD_NAME in storage.getName()
        finally:
            with backend._admin.cursor() as cursor:
                cursor.execute(f'DROP DATABASE IF EXISTS {quoted} '
                               f'WITH (FORCE)')
    else:
        from relstorage.adapters.mysql import MySQLAdapter
        from backends import MYSQL_HOST, MYSQL_USER
        # MySQL names allow no trailing space and no quotes in file names
        # on every platform: a hyphen, a space and non-ASCII letters.
        name = 'rs test-\u00e9 ' + uuid.uuid4().hex[:6]
        with backend._admin.cursor() as cursor:
            cursor.execute(f'CREATE DATABASE `{name}`')
        try:
            storage = RelStorage(MySQLAdapter(
                host=MYSQL_HOST, user=MYSQL_USER, db=name,
                driver=backend.driver))
            _exercise(storage)
        finally:
            backend.drop_database(f'`{name}`')
    tally.add(GROUP, 'inputs')


# -- secrets -----------------------------------------------------------

SECRET = 'Pa55-' + uuid.uuid4().hex


def test_no_password_in_logs_reprs_errors_or_output(backend, database,
                                                    tmp_path, caplog):
    """A run with a known password: it must appear nowhere a user or a log
    collector sees."""
    if backend.name == 'sqlite':
        pytest.skip('SQLite has no password')
    caplog.set_level(logging.DEBUG)
    seen = []
    if backend.name.startswith('postgresql'):
        # Trust authentication ignores the password; it is still in the
        # DSN, where a leak would show.
        good = f'{database} password={SECRET}'
        bad = f'{good} port=1'
        from relstorage.adapters.postgresql import PostgreSQLAdapter

        def adapter(dsn):
            return PostgreSQLAdapter(dsn=dsn, driver=backend.driver)
        section = backend.zconfig(good, True)
        bad_section = backend.zconfig(bad, True)
    else:
        from relstorage.adapters.mysql import MySQLAdapter
        from backends import MYSQL_HOST
        user = 'rs_secret_' + uuid.uuid4().hex[:8]
        with backend._admin.cursor() as cursor:
            cursor.execute(f"CREATE USER '{user}'@'%' IDENTIFIED BY "
                           f"'{SECRET}'")
            cursor.execute(f"GRANT ALL ON `{database}`.* TO '{user}'@'%'")
            # A pack reads other sessions' transactions (docs/mysql.rst).
            cursor.execute(f"GRANT PROCESS ON *.* TO '{user}'@'%'")
        keys = {'host': MYSQL_HOST, 'user': user, 'passwd': SECRET,
                'db': database, 'driver': backend.driver}

        def adapter(flag):
            given = dict(keys)
            if flag == 'bad':
                given['port'] = 1
            return MySQLAdapter(**given)
        good, bad = 'good', 'bad'
        body = ''.join(f'        {k} {v}\n' for k, v in keys.items())
        section = ('%import relstorage\n<relstorage>\n  <mysql>\n' + body +
                   '  </mysql>\n</relstorage>\n')
        bad_section = section.replace('  </mysql>', '        port 1\n'
                                                    '  </mysql>')
    try:
        from relstorage.storage import RelStorage
        storage = RelStorage(adapter(good))
        seen += [repr(storage), storage.getName(), str(storage),
                 repr(storage._adapter), repr(storage._adapter.connmanager),
                 repr(storage._options), str(storage.metrics())]
        _exercise(storage)
        with pytest.raises(Exception) as e:
            RelStorage(adapter(bad))
        seen += [str(e.value), repr(e.value)]
        cause = e.value.__cause__ or e.value.__context__
        while cause is not None:
            seen.append(str(cause))
            cause = cause.__cause__ or cause.__context__
        conf = tmp_path / 'good.conf'
        conf.write_text(section)
        bad_conf = tmp_path / 'bad.conf'
        bad_conf.write_text(bad_section)
        scripts = os.path.dirname(sys.executable)
        for command in ([os.path.join(scripts, 'zodbpack'), str(conf)],
                        [os.path.join(scripts, 'zodbpack'), str(bad_conf)],
                        [os.path.join(scripts, 'relstorage-stats'),
                         str(conf)],
                        [os.path.join(scripts, 'relstorage-stats'),
                         str(bad_conf)],
                        [os.path.join(scripts, 'relstorage-migrate'),
                         str(bad_conf)]):
            done = subprocess.run(command, capture_output=True, text=True,
                                  timeout=300)
            seen += [done.stdout, done.stderr]
            tally.add(GROUP, 'commands checked for secrets')
        seen += [r.getMessage() for r in caplog.records]
        seen += [caplog.text]
        leaks = [text for text in seen if SECRET in text]
        assert not leaks, leaks[0][:2000]
        assert any('port=1' in text or 'port 1' in text or "1)" in text
                   for text in seen)
    finally:
        if not backend.name.startswith('postgresql'):
            with backend._admin.cursor() as cursor:
                cursor.execute(f"DROP USER IF EXISTS '{user}'@'%'")


# -- private directories -----------------------------------------------

def test_blob_and_cache_directories_are_private(open_storage, tmp_path):
    blob_dir = tmp_path / 'new' / 'blobs'
    cache_dir = tmp_path / 'new' / 'cache'
    storage = open_storage(blob_dir=str(blob_dir),
                           cache_local_dir=str(cache_dir))
    db = ZODB.DB(storage)
    conn = db.open()
    conn.root()['x'] = 1
    transaction.commit()
    conn.close()
    db.close()
    for directory in (blob_dir, cache_dir):
        mode = stat.S_IMODE(os.stat(directory).st_mode)
        assert mode == 0o700, (directory, oct(mode))
    for entry in os.listdir(cache_dir):
        mode = stat.S_IMODE(os.stat(cache_dir / entry).st_mode)
        assert mode & 0o077 == 0, (entry, oct(mode))
    tally.add(GROUP, 'inputs')


def test_p64_bounds_are_checked():
    # An id one past what a signed BIGINT holds is refused before SQL.
    from relstorage.tids import id_to_int
    with pytest.raises(ValueError, match='larger than a database'):
        id_to_int(p64(2 ** 63), 'oid')
    assert id_to_int(p64(2 ** 63 - 1), 'oid') == 2 ** 63 - 1
