"""Schema migrations: relstorage-migrate run as a DBA runs it (a subprocess
on a config file), on databases made at every older schema version with
data in them, on every backend and history mode.

A database at version N is made by this relstorage with SCHEMA_VERSION
set to N: version 1's schema file, then the steps up to N, exactly as an
older relstorage made it (those files are never edited), and its objects
written by the usual code path, which needs only version 1's tables,
but for what later steps gave them that the code uses (step 0008's
column of commit_row, and PostgreSQL's functions of steps 0005 and 0008):
added for the writing and removed after, leaving the database as the
older version had it.
"""
import os
import re
import subprocess
import sys
import threading
import time

import pytest
import transaction
import ZODB
from persistent.mapping import PersistentMapping
from ZODB.serialize import referencesf
from ZODB.utils import p64
from ZODB.utils import u64

import relstorage.adapters.schema
from relstorage import migrations
from relstorage.config.options import Options
from relstorage.errors import SchemaError

MIGRATE = os.path.join(os.path.dirname(sys.executable), 'relstorage-migrate')
LATEST = migrations.LATEST
TIMEOUT = 120


def run(*args):
    return subprocess.run([MIGRATE, *map(str, args)], capture_output=True,
                          text=True, timeout=TIMEOUT)


@pytest.fixture
def config(tmp_path, backend, database, keep_history):
    path = tmp_path / 'zodb.conf'
    path.write_text(backend.zconfig(database, keep_history))
    return path


def _make_old(backend, database, keep_history, version, monkeypatch):
    """A database at schema ``version`` holding 31 objects, some with two
    revisions; returns ``{oid: pickle}`` of their current states."""
    monkeypatch.setattr(relstorage.adapters.schema, 'SCHEMA_VERSION',
                        version)
    storage = backend.open(database, keep_history=keep_history)
    functions = _write_functions(storage, version)
    _lend(storage, version)
    db = ZODB.DB(storage)
    conn = db.open()
    items = conn.root()['items'] = PersistentMapping()
    for index in range(30):
        items[index] = PersistentMapping({'n': index})
    transaction.commit()
    for index in range(0, 30, 3):
        items[index]['n'] = -index
    transaction.commit()
    conn.close()
    expected = _states(storage)
    db.close()
    _lend(storage, version, give_back=True)
    if functions:
        cm = storage._adapter.connmanager
        conn = cm.connect()
        try:
            for name in functions:
                conn.cursor().execute(f'DROP FUNCTION {name}')
        finally:
            cm.close(conn, None)
    monkeypatch.undo()
    return expected


#: The type of ``commit_row.commit_seconds`` (step 0008-commit-time).
_SECONDS_TYPE = {'postgresql': 'DOUBLE PRECISION', 'mysql': 'DOUBLE NULL',
                 'sqlite': 'REAL'}


def _lent(storage, version):
    """``[(add, drop)]``: what an older schema lacks that this code writes
    at every commit, added to write the old database's data and dropped
    after (as ``_write_functions``): ``commit_row.commit_seconds`` (step
    0008-commit-time), and on MySQL the commit chain (step
    0009-commit-chain)."""
    database = storage._adapter.schema.DATABASE
    lent = []
    if version < 8:
        lent.append((f'ALTER TABLE commit_row ADD COLUMN commit_seconds '
                     f'{_SECONDS_TYPE[database]}',
                     'ALTER TABLE commit_row DROP COLUMN commit_seconds'))
    if version < 9 and database == 'mysql':
        lent.append(('ALTER TABLE commit_row ADD COLUMN commit_seq '
                     'BIGINT NOT NULL DEFAULT 0',
                     'ALTER TABLE commit_row DROP COLUMN commit_seq'))
        lent.append(('CREATE TABLE commit_chain (seq BIGINT NOT NULL '
                     'PRIMARY KEY, tid BIGINT NOT NULL UNIQUE)',
                     'DROP TABLE commit_chain'))
    return lent


def _lend(storage, version, give_back=False):
    lent = _lent(storage, version)
    if not lent:
        return
    cm = storage._adapter.connmanager
    conn = cm.connect()
    try:
        # (The connections are in autocommit mode.)
        for add, drop in (reversed(lent) if give_back else lent):
            conn.cursor().execute(drop if give_back else add)
    finally:
        cm.close(conn, None)


#: The functions that this code calls and step 0008 changed, as the
#: argument types name them for DROP FUNCTION (an older database may hold
#: older versions of the same name).
_CODE_FUNCTIONS = (
    'relstorage_finish(BYTEA, BYTEA, BYTEA, BOOLEAN, DOUBLE PRECISION)',
    'relstorage_finish_rows(BYTEA, BYTEA, BYTEA, BOOLEAN, DOUBLE PRECISION, '
    'BIGINT[], BIGINT[], BYTEA[], BIGINT[])')


def _write_functions(storage, version):
    """Before version 5 a PostgreSQL session created the functions of a
    commit's last step for itself (as temporary functions); this code
    calls those of the schema (0005-finish), with the arguments step
    0008-commit-time gave two of them.  Created here to write the old
    database's data the way the old code did, and dropped after: their
    names (with arguments where the old database has others of the same
    name), or [] where none were needed."""
    adapter = storage._adapter
    if adapter.schema.DATABASE != 'postgresql' or version >= 8:
        return []
    from relstorage.adapters.postgresql.transactions import FUNCTIONS
    cm = adapter.connmanager
    conn = cm.connect()
    try:
        for statement in adapter.txncontrol.functions():
            conn.cursor().execute(statement)
    finally:
        cm.close(conn, None)
    if version < 5:
        return list(_CODE_FUNCTIONS) + list(FUNCTIONS[2:])
    return list(_CODE_FUNCTIONS)


def _states(storage):
    """The current pickle of every object reachable from the root."""
    found, todo = {}, [0]
    while todo:
        oid = todo.pop()
        if oid not in found:
            data, _ = storage.load(p64(oid))
            found[oid] = data
            todo.extend(u64(ref) for ref in referencesf(data))
    return found


def _version(backend, database, keep_history):
    adapter = backend.adapter(database)
    adapter.configure(Options(keep_history=keep_history))
    return adapter.schema.status()


@pytest.mark.parametrize('version', range(1, LATEST))
def test_an_older_database_is_upgraded_with_its_data(
        backend, database, keep_history, config, version, monkeypatch):
    expected = _make_old(backend, database, keep_history, version,
                         monkeypatch)
    assert _version(backend, database, keep_history) == (version,
                                                         keep_history)
    # The storage refuses it, and says what to run.
    with pytest.raises(SchemaError, match=f'version {version}; .* needs '
                                          f'version {LATEST}: run '
                                          f'relstorage-migrate'):
        backend.open(database, keep_history=keep_history)

    shown = run(config)
    assert shown.returncode == 1, shown.stderr
    assert f'holds schema version {version}' in shown.stderr
    assert f'needs version {LATEST}' in shown.stderr
    for step in migrations.steps(version, LATEST):
        assert f'migrations/{step.name}/' in shown.stderr
    assert '--apply' in shown.stderr

    sql = run('--sql', config)
    assert sql.returncode == 0, sql.stderr
    assert f'schema version {version} to {LATEST}' in sql.stdout
    assert f'SET version = {LATEST}' in sql.stdout
    # Printing changes nothing.
    assert _version(backend, database, keep_history)[0] == version

    applied = run('--apply', config)
    assert applied.returncode == 0, applied.stderr
    assert f'upgraded from schema version {version} to {LATEST}' in \
        applied.stderr
    assert _version(backend, database, keep_history) == (LATEST,
                                                         keep_history)
    again = run('--apply', config)
    assert again.returncode == 0 and 'nothing to do' in again.stderr

    # The data is all there, and the new tables work: a commit and a pack.
    storage = backend.open(database, keep_history=keep_history)
    try:
        assert _states(storage) == expected
        db = ZODB.DB(storage)
        conn = db.open()
        conn.root()['items'][100] = PersistentMapping({'n': 100})
        del conn.root()['items'][1]
        transaction.commit()
        conn.close()
        storage.pack(time.time() + 1, referencesf)
        assert len(_states(storage)) == len(expected)
        db.close()
    finally:
        storage.close()


def test_two_runs_at_once_upgrade_once(backend, database, keep_history,
                                       config, monkeypatch):
    _make_old(backend, database, keep_history, 1, monkeypatch)
    results = []

    def apply():
        results.append(run('--apply', config))
    threads = [threading.Thread(target=apply) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [r.returncode for r in results] == [0, 0], \
        [r.stderr for r in results]
    upgraded = [r for r in results if 'upgraded from' in r.stderr]
    assert len(upgraded) == 1, [r.stderr for r in results]
    assert _version(backend, database, keep_history) == (LATEST,
                                                         keep_history)


def test_an_up_to_date_or_empty_database(backend, database, keep_history,
                                         config):
    empty = run(config)
    assert empty.returncode == 0, empty.stderr
    assert 'holds no relstorage schema' in empty.stderr
    nothing = run('--apply', config)
    assert nothing.returncode == 0, nothing.stderr
    assert _version(backend, database, keep_history) == (None, None)
    backend.open(database, keep_history=keep_history).close()
    current = run(config)
    assert current.returncode == 0
    assert f'holds schema version {LATEST}' in current.stderr
    assert 'nothing to do' in current.stderr


def test_what_cannot_be_migrated(backend, database, keep_history, config,
                                 tmp_path, monkeypatch):
    _make_old(backend, database, keep_history, 1, monkeypatch)
    # The section says the other history mode.
    other = tmp_path / 'other.conf'
    other.write_text(backend.zconfig(database, not keep_history))
    wrong = run('--apply', other)
    assert wrong.returncode == 1
    assert 'keep-history' in wrong.stderr
    assert _version(backend, database, keep_history)[0] == 1
    # A newer schema than this relstorage knows.
    adapter = backend.adapter(database)
    adapter.configure(Options(keep_history=keep_history))
    cm = adapter.connmanager
    conn = cm.connect()
    cursor = conn.cursor()
    try:
        cm.begin_write(cursor, 'test')
        cursor.execute(f'UPDATE schema_version SET version = {LATEST + 1}')
        cm.commit(conn, cursor)
    finally:
        cm.close(conn, cursor)
    newer = run('--apply', config)
    assert newer.returncode == 1
    assert f'holds schema version {LATEST + 1}, newer' in newer.stderr


def test_bad_input(tmp_path):
    missing = run(tmp_path / 'missing.conf')
    assert missing.returncode == 2
    assert 'cannot read' in missing.stderr
    bad = tmp_path / 'bad.conf'
    bad.write_text('%import relstorage\n<relstorage>\n  no-such-option 1\n'
                   '</relstorage>\n')
    refused = run(bad)
    assert refused.returncode == 2
    assert 'no-such-option' in refused.stderr
    both = run('--sql', '--apply', tmp_path / 'missing.conf')
    assert both.returncode == 2
    # A storage that is not relstorage is passed over.
    fs = tmp_path / 'fs.conf'
    fs.write_text(f'<filestorage>\n  path {tmp_path / "Data.fs"}\n'
                  f'</filestorage>\n')
    other = run('--apply', fs)
    assert other.returncode == 0, other.stderr
    assert 'not a relstorage' in other.stderr


def test_the_postgresql_functions_of_the_steps_are_the_codes(keep_history):
    """The migration steps create the functions the code calls, as the
    code makes them from its statements (each as the newest step that
    creates it has it: 0005-finish, 0008-commit-time): a change to those
    statements needs a new step (this fails until there is one)."""
    from relstorage.adapters.postgresql import objects
    from relstorage.adapters.postgresql import transactions
    from relstorage.adapters.schema import sql_statements
    if keep_history:
        control = transactions.HistoryPreservingTransactionControl(
            None, objects.HistoryPreservingMover.MOVE_STAGED)
    else:
        control = transactions.HistoryFreeTransactionControl(
            None, objects.HistoryFreeMover.MOVE_STAGED)
    created = {}
    for step in migrations.STEPS:
        for statement in sql_statements(step.path('postgresql',
                                                  keep_history)):
            match = re.match(r'CREATE OR REPLACE FUNCTION (\w+)\(',
                             statement)
            if match:
                created[match.group(1)] = (step.version, statement)
    code = {re.match(r'\s*CREATE OR REPLACE FUNCTION (\w+)\(', s).group(1):
            s.strip() for s in control.functions()}
    assert set(created) == set(code) == set(transactions.FUNCTIONS)
    for name, (version, statement) in created.items():
        assert statement == code[name], (name, version)
    assert created['relstorage_finish'][0] == 8
    assert created['relstorage_restore'][0] == 5
