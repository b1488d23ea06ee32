"""The Oracle adapter, without an Oracle server.

No Oracle server can run where relstorage is developed and tested (the
test suite against one is the ordinary suite, run where
RELSTORAGE_ORACLE_DSN names a server: tests/backends.py).  What is checked
here instead:

* every statement the adapter can send (the roles' SQL in both history
  modes, the schema files and migration steps, the PL/SQL block of the
  last step of a commit) parses as Oracle SQL (sqlglot's Oracle dialect)
  and binds values with named binds, none repeated (parameters travel by
  position), with nothing of another database's dialect;
* every role method, run against a recording cursor, sends as many
  parameters as its statement has binds;
* the ``<oracle>`` section, driver selection (a missing driver names the
  package) and the translation of the drivers' own exception classes
  into relstorage's errors; the password shows nowhere.
"""
import re
import sys

import pytest

import tally

oracledb = pytest.importorskip('oracledb')
sqlglot = pytest.importorskip('sqlglot')

from relstorage import migrations                          # noqa: E402
from relstorage.adapters.oracle import OracleAdapter      # noqa: E402
from relstorage.adapters.oracle import drivers            # noqa: E402
from relstorage.config.options import Options                    # noqa: E402

GROUP = 'Oracle without a server'

#: Statements sqlglot keeps as an unparsed Command: Oracle DDL it does not
#: model.  Checked by eye, and for binds like the others.
UNPARSED = ('ALTER SEQUENCE zoid_seq INCREMENT BY',
            'ALTER TABLE ')

_BIND = re.compile(r"'[^']*'|:(\w+)")
_VERBS = ('SELECT', 'INSERT', 'UPDATE', 'DELETE', 'MERGE', 'CREATE', 'DROP',
          'ALTER', 'SET', 'WITH', 'DECLARE', 'BEGIN')
#: Words of other dialects that must not reach Oracle.
_FOREIGN = re.compile(
    r'\bLIMIT\b|\bTRUE\b|\bFALSE\b|\bBOOLEAN\b|IF NOT EXISTS|ON DUPLICATE|'
    r'::|%s|\?|\bREPLACE INTO\b|\bSTRAIGHT_JOIN\b|\bBYTEA\b|\bLONGBLOB\b|'
    r'\bAUTO_INCREMENT\b|\bRETURNING\b', re.IGNORECASE)


def binds(statement):
    """The bind names of ``statement``, in order (string literals
    skipped)."""
    return [m.group(1) for m in _BIND.finditer(statement) if m.group(1)]


def adapter(keep_history):
    a = OracleAdapter(user='zodb', password='s3cret-Pw', dsn='db:1521/ZODB')
    a.configure(Options(keep_history=keep_history))
    return a


def _formatted(text, role):
    """A statement constant with its format fields filled as the code
    fills them."""
    if '{' not in text:
        return text
    return text.format(in_list=':v0, :v1, :v2', wait=5, step=100,
                       table='object_state')


def role_statements(keep_history):
    """``(where, statement)`` of every SQL constant of the roles."""
    a = adapter(keep_history)
    roles = dict(mover=a.mover, locker=a.locker, poller=a.poller,
                 history=a.history, packer=a.packer, blobs=a.blobs,
                 oids=a.oids, txncontrol=a.txncontrol, schema=a.schema)
    for name, role in roles.items():
        for attr in sorted(dir(type(role))):
            if not attr.isupper():
                continue
            value = getattr(role, attr)
            texts = value if isinstance(value, tuple) else (value,)
            for text in texts:
                if not isinstance(text, str) or not text.strip().upper(
                        ).startswith(_VERBS):
                    continue
                statement = _formatted(text, role)
                if name == 'packer':
                    statement = role._sql(statement)
                yield f'{name}.{attr}', statement


def schema_statements(keep_history):
    a = adapter(keep_history)
    for statement in a.schema.creation_statements():
        yield 'schema', statement
    for step in migrations.steps(1, migrations.LATEST):
        for statement in a.schema.step_statements(step):
            yield f'migration {step.name}', statement


def block_statements(keep_history):
    """The statements inside the PL/SQL block of the last step."""
    block = adapter(keep_history).txncontrol.finish_block.format(wait=5)
    body = block.split('BEGIN', 1)[1].rsplit('END;', 1)[0]
    for statement in body.split(';'):
        statement = statement.strip()
        if statement and statement != 'COMMIT':
            yield 'finish block', statement


def all_statements():
    for hp in (True, False):
        mode = 'hp' if hp else 'hf'
        for source in (role_statements, schema_statements, block_statements):
            for where, statement in source(hp):
                yield f'{mode} {where}', statement


STATEMENTS = list(all_statements())


def test_statements_were_found():
    wheres = {where.split(' ', 1)[1].split('.')[0] for where, _ in STATEMENTS}
    for role in ('mover', 'locker', 'poller', 'history', 'packer', 'blobs',
                 'oids', 'txncontrol', 'schema', 'finish block'):
        assert role in wheres, role
    assert len(STATEMENTS) > 150


@pytest.mark.parametrize('where, statement', STATEMENTS,
                         ids=[w for w, _ in STATEMENTS])
def test_statement_is_oracle_sql(where, statement):
    foreign = _FOREIGN.search(re.sub(r"'[^']*'", "''", statement))
    assert foreign is None, f'{where}: {foreign.group(0)!r} in {statement}'
    names = binds(statement)
    assert len(names) == len(set(names)), (
        f'{where}: a bind name repeats (parameters are bound by position): '
        f'{names}')
    if statement.startswith(UNPARSED):
        tally.add(GROUP, 'statements checked (Oracle DDL sqlglot does not '
                  'model)')
        return
    if where.endswith('finish block') and ':=' in statement:
        statement = 'SELECT ' + statement.split(':=', 1)[1]
    parsed = sqlglot.parse_one(statement, read='oracle')
    assert type(parsed).__name__ != 'Command', (
        f'{where}: sqlglot could not parse it: {statement}')
    tally.add(GROUP, 'statements parsed')


def test_the_finish_block_is_whole():
    for hp in (True, False):
        block = adapter(hp).txncontrol.finish_block.format(wait=7)
        assert block.strip().startswith('DECLARE')
        assert block.strip().endswith('END;')
        assert 'FOR UPDATE WAIT 7' in block
        assert ':tid' not in block          # the variable took its place
        assert block.count('COMMIT;') == 1
        assert binds(block) == (
            ['packed', 'username', 'description', 'extension',
             'commit_seconds', 'new_tid']
            if hp else ['commit_seconds', 'new_tid'])


# -- the roles against a recording cursor --------------------------------

#: The types relstorage sets for binary binds.
BINARY = (oracledb.DB_TYPE_LONG_RAW, oracledb.DB_TYPE_RAW,
          oracledb.DB_TYPE_BLOB)


class Recorder:
    """A DB-API cursor that records what it is sent and answers with
    ``rows`` (a list, or a callable of the statement)."""

    arraysize = 100

    def __init__(self, rows=()):
        self.sent = []
        self.rows = rows
        self.sizes = None
        self.rowcount = 0

    def _check(self, statement, params):
        names = binds(statement)
        if isinstance(params, dict):
            assert set(params) == set(names), (statement, params)
        else:
            params = list(params or ())
            assert len(params) == len(names), (
                f'{len(params)} parameters for binds {names}: {statement}')

    def _check_sizes(self, params):
        """A type set for a position (setinputsizes) is a binary one, and
        the value there is bytes (or NULL)."""
        if self.sizes is None:
            return
        positional, named = self.sizes
        for index, kind in enumerate(positional):
            if kind is not None:
                assert kind in BINARY, kind
                assert params[index] is None or isinstance(
                    params[index], bytes), (index, params)
        for name, kind in named.items():
            assert kind in BINARY, kind
            assert params[name] is None or isinstance(params[name], bytes)

    def execute(self, statement, params=None):
        self._check(statement, params)
        self._check_sizes(params)
        self.sizes = None
        self.sent.append((statement, params))

    def executemany(self, statement, rows):
        rows = list(rows)
        for row in rows:
            self._check(statement, row)
            self._check_sizes(row)
        self.sizes = None
        self.sent.append((statement, rows))

    def setinputsizes(self, *args, **kwargs):
        self.sizes = (args, kwargs)

    def var(self, kind, **kwargs):
        class Var:
            def getvalue(self):
                return 123456
        return Var()

    def _answer(self):
        rows = self.rows(self.sent[-1][0]) if callable(self.rows) else (
            self.rows)
        return list(rows)

    def fetchall(self):
        return self._answer()

    def fetchone(self):
        rows = self._answer()
        return rows[0] if rows else None


@pytest.mark.parametrize('keep_history', [True, False], ids=['hp', 'hf'])
def test_role_methods_send_a_parameter_per_bind(keep_history):
    a = adapter(keep_history)
    c = Recorder()
    mover = a.mover
    mover.load_current(c, 1)
    mover.load_currents(c, list(range(1200)))
    mover.load_revision(c, 1, 2)
    mover.load_before(c, 1, 2)
    mover.next_revision_tid(c, 1, 2)
    mover.exists(c, 1)
    mover.current_tids(c, [1, 2, 3])
    mover.upload_temp(c, [(1, 0, b'state', 0, 0), (2, None, None, 5, 1)],
                      replace=[2])
    mover.detect_conflicts(c)
    mover.replace_temp(c, 1, 5, b'resolved')
    mover.load_temp(c, 1)
    mover.store_superseded(c, 9, [(1, b'x', 0, 0)])
    mover.move_from_temp(c, 9)
    mover.object_count(Recorder([(3,)]))
    mover.iter_current(c, 0, 10)
    a.locker.lock_for_vote(c, [1, 2], [3, 4])
    a.locker.lock_for_vote(c, list(range(700)), [], staged=False)
    assert a.locker.hold_commit_lock(Recorder([(5, 1.5e9)])) == (5, 1.5e9)
    poller = a.poller
    poller.last_tid(Recorder([(7,)]))
    poller.changes(c, 1, 2)
    conn = FakeConnection()
    assert poller.begin_and_poll(
        a.connmanager, conn, Recorder([(-1, 9), (1, 8)]), 3,
        end_previous=True) == (9, [(1, 8)])
    history = a.history
    history.undo_log(c, 0, 10)
    history.object_history(c, 1, 10)
    if keep_history:
        history.undoable_records(c, 1)
    history.transactions(c, 1, 2, 10)
    history.records(c, 1)
    a.oids.new_oids(Recorder([(101,), (1,)]), 2)
    a.oids.ensure_above(Recorder([(50,)]), 10)   # already above: nothing
    a.oids.ensure_above(Recorder([(1,)]), 500)
    a.oids.ensure_above(Recorder([(1,)]), 10 ** 9)
    blobs = a.blobs
    blobs.blob_of(c, 1, 2)
    blobs.copy(Recorder([(5, 10)]), 1, 2, 6)
    blobs.publish(c, 9, [(1, 5, 10)])
    blobs.drop(Recorder([(5,)]), [1, 2])
    blobs.orphans(c, 0, 10)
    blobs.revisions(c, [1, 2])
    txn = a.txncontrol
    txn.record_transaction(c, 9, b'user', b'', b'x' * 40000, ' ')
    txn.record_transaction(c, 10, b'user', b'', b'', ' ', seconds=0.25)
    assert txn.finish_and_commit(c, b'u', b'd', b'', ' ') == 123456
    assert txn.finish_and_commit(c, b'u', b'd', b'', ' ', before=(),
                                 seconds=0.25) == 123456
    packer = a.packer
    packer.refs_state(c)
    packer.set_refs_state(c, __import__(
        'relstorage.adapters.pack', fromlist=['RefsState']).RefsState())
    packer.scan_page(c, 0, 0, 5, 0, 10)
    packer.count_current(c)
    packer.kept_unanalysed(c, 5, 0, 10)
    packer.tail_page(c, 5, 0, 9, 10)
    packer.drop_refs(c, [1, 2])
    packer.add_refs(c, [(1, 2, 3)])
    packer.start_run(c, 5, True, 5)
    packer.update_run(c, 1, 10)
    packer.analysed(c, 10)
    packer.fill(c, 5)
    if keep_history:
        packer.fill(c, 5, since=3)
    packer.seed(c, 5)
    packer.walk_step(c, 0)
    packer.rescue(c, [1, 2], 3)
    packer.doomed(c, True, 0, 10)
    packer.doomed(c, False, 0, 10)
    packer.count_doomed(c, True, 0)
    packer.count_garbage(c, False)
    packer.count_old(c, True)
    packer.delete_doomed(Recorder([(1,)]), [(1, 5, True), (2, 5, False)], 6)
    packer.mark_packed(c, 5)
    packer.finish(c, 5)
    packer.broken_refs(c, 10)
    assert len(c.sent) > 50
    tally.add(GROUP, 'role calls checked', len(c.sent))


def test_ensure_above_moves_the_sequence_past_the_oid():
    a = adapter(True)
    c = Recorder(lambda s: [(201,)] if 'last_number' in s else [])
    a.oids.ensure_above(c, 500)
    # It takes 201, 301 and 401 (blocks up to 500): the next is 501.
    assert c.sent[-1][1] == (3,)
    c = Recorder(lambda s: [(1,)] if 'last_number' in s else [])
    a.oids.ensure_above(c, 10 ** 9)
    sent = [s for s, _ in c.sent]
    assert sent[1].startswith('ALTER SEQUENCE zoid_seq INCREMENT BY ')
    assert sent[-1] == 'ALTER SEQUENCE zoid_seq INCREMENT BY 100'


def test_the_schema_is_created_at_the_newest_version_last():
    for hp in (True, False):
        statements = adapter(hp).schema.creation_statements()
        setting = [s for s in statements if 'schema_version' in s
                   and not s.startswith('CREATE')]
        assert setting == [statements[-1]]
        assert f'VALUES (0, {migrations.LATEST}, {int(hp)})' in setting[0]
        assert any('GLOBAL TEMPORARY TABLE temp_store' in s
                   for s in statements)


# -- connections, configuration, errors -----------------------------------

class FakeConnection:
    transaction_in_progress = True

    def __init__(self):
        self.calls = []

    def rollback(self):
        self.calls.append('rollback')

    def commit(self):
        self.calls.append('commit')

    def cursor(self):
        return Recorder()

    def close(self):
        self.calls.append('close')


def oracle_error(cls, message, code=0):
    return cls(oracledb._Error(message=message, code=code))


@pytest.mark.parametrize('message, code, expected', [
    ('ORA-00054: resource busy and acquire with NOWAIT specified', 0,
     'CommitLockTimeoutError'),
    ('ORA-30006: resource busy; acquire with WAIT timeout expired', 30006,
     'CommitLockTimeoutError'),
    ('ORA-00060: deadlock detected while waiting for resource', 60,
     'LockConflictError'),
    ('ORA-00001: unique constraint (ZODB.SYS_C0011) violated', 1,
     'LockConflictError'),
    ('ORA-01555: snapshot too old', 1555, 'ReadConflictError'),
    ('ORA-01653: unable to extend table ZODB.OBJECT_STATE by 128', 1653,
     'DatabaseFullError'),
    ('ORA-01536: space quota exceeded for tablespace USERS', 1536,
     'DatabaseFullError'),
    ('ORA-03113: end-of-file on communication channel', 3113,
     'DisconnectedError'),
    ('DPY-4011: the database or network closed the connection', 0,
     'DisconnectedError'),
    ('ORA-00942: table or view does not exist', 942, 'DatabaseError'),
])
def test_driver_errors_are_translated(message, code, expected):
    a = adapter(True)
    cls = oracledb.DatabaseError
    if message.startswith('DPY'):
        cls = oracledb.OperationalError
    with pytest.raises(Exception) as caught:
        with a.connmanager.translate('committing'):
            raise oracle_error(cls, message, code)
    assert type(caught.value).__name__ == expected, caught.value
    if expected != 'DatabaseError':
        assert 'committing' in str(caught.value)
    if expected == 'CommitLockTimeoutError':
        assert 'commit-lock-timeout' in str(caught.value)
    tally.add(GROUP, 'driver errors translated')


def test_error_codes_from_each_form():
    assert drivers.error_code(oracle_error(
        oracledb.DatabaseError, 'ORA-00054: busy')) == 'ORA-00054'
    e = oracledb.DatabaseError(oracledb._Error(message='x', code=60))
    assert drivers.error_code(e) == 'ORA-00060'
    assert drivers.error_code(Exception('TNS-12541: no listener')) == (
        'TNS-12541')
    assert drivers.error_code(Exception('nothing')) is None


def test_a_full_server_is_waited_for():
    a = adapter(True)
    full = oracle_error(oracledb.DatabaseError,
                        'ORA-00020: maximum number of processes exceeded')
    assert a.connmanager._is_full(full)
    assert not a.connmanager._is_full(oracle_error(
        oracledb.DatabaseError, 'ORA-01017: invalid username/password'))


def test_rollback_and_commit_use_the_connection():
    a = adapter(True)
    conn = FakeConnection()
    a.connmanager.rollback(conn, None)
    a.connmanager.commit(conn, None)
    # Even where the driver says no transaction is open: a READ ONLY one
    # must end before the next SET TRANSACTION.
    conn.transaction_in_progress = False
    a.connmanager.rollback(conn, None)
    assert conn.calls == ['rollback', 'commit', 'rollback']


def test_blob_columns_are_fetched_as_bytes():
    driver = drivers.OracledbDriver()
    made = []

    class Cursor:
        arraysize = 50

        def var(self, kind, arraysize):
            made.append((kind, arraysize))
            return 'a var'

    class Metadata:
        def __init__(self, type_code):
            self.type_code = type_code

    assert driver.blobs_as_bytes(Cursor(), Metadata(oracledb.DB_TYPE_BLOB)
                                 ) == 'a var'
    assert made == [(oracledb.DB_TYPE_LONG_RAW, 50)]
    assert driver.blobs_as_bytes(
        Cursor(), Metadata(oracledb.DB_TYPE_NUMBER)) is None


CONFIG = """
%import relstorage
<relstorage>
    keep-history {keep}
    <oracle>
        user zodb
        password s3cret-Pw
        dsn db.example:1521/ZODBPDB
        {driver}
    </oracle>
</relstorage>
"""


def _factory(text):
    import ZConfig
    import ZODB.config
    schema = ZODB.config.getStorageSchema()
    config, _ = ZConfig.loadConfigFile(schema, __import__('io').StringIO(
        text))
    return config.storage


def test_the_oracle_section():
    factory = _factory(CONFIG.format(keep='false', driver='driver oracledb'))
    adapter_ = factory.config.adapter.create()
    assert isinstance(adapter_, OracleAdapter)
    assert adapter_.driver.name == 'oracledb'
    assert repr(adapter_) == '<OracleAdapter oracle:zodb@db.example:1521/' \
        'ZODBPDB (oracledb)>'
    assert 's3cret' not in repr(adapter_) + adapter_.describe()
    assert 's3cret' not in repr(adapter_.connmanager) if hasattr(
        adapter_, 'connmanager') else True


@pytest.mark.parametrize('missing', ['user', 'password', 'dsn'])
def test_a_missing_key_fails_naming_it(missing):
    import ZConfig
    text = '\n'.join(line for line in CONFIG.format(
        keep='true', driver='').splitlines()
        if not line.strip().startswith(missing + ' '))
    with pytest.raises(ZConfig.ConfigurationError) as caught:
        _factory(text)
    assert missing in str(caught.value)


def test_an_unknown_driver_fails_naming_the_choices():
    import ZConfig
    with pytest.raises(ZConfig.ConfigurationError) as caught:
        _factory(CONFIG.format(keep='true', driver='driver odbc'))
    assert 'oracledb' in str(caught.value)


def test_a_missing_driver_names_the_package(monkeypatch):
    from relstorage.errors import ConfigurationError
    monkeypatch.setitem(sys.modules, 'cx_Oracle', None)
    with pytest.raises(ConfigurationError) as caught:
        OracleAdapter(user='u', password='p', dsn='d', driver='cx_Oracle')
    assert 'pip install cx_Oracle' in str(caught.value)
    monkeypatch.setitem(sys.modules, 'oracledb', None)
    with pytest.raises(ConfigurationError) as caught:
        OracleAdapter(user='u', password='p', dsn='d')
    assert 'pip install oracledb' in str(caught.value)
    assert 'relstorage[oracle]' in str(caught.value)


def test_replica_files_are_refused(tmp_path):
    from relstorage.errors import ConfigurationError
    servers = tmp_path / 'replicas.conf'
    servers.write_text('db1\n')
    a = OracleAdapter(user='u', password='p', dsn='d')
    with pytest.raises(ConfigurationError) as caught:
        a.configure(Options(replica_conf=str(servers)))
    assert str(caught.value).startswith('replica-conf: ')
    assert 'FAILOVER' in str(caught.value)


def test_json_state_is_refused_at_start_up():
    # The JSON mirror is not offered without a server to test it on.
    from relstorage.errors import ConfigurationError
    a = OracleAdapter(user='u', password='p', dsn='d')
    with pytest.raises(ConfigurationError) as caught:
        a.configure(Options(json_state=True))
    assert str(caught.value).startswith('json-state: ')


def test_the_password_shows_nowhere():
    a = adapter(True)
    with pytest.raises(Exception) as caught:
        with a.connmanager.translate('committing'):
            raise oracle_error(oracledb.OperationalError,
                               'DPY-6005: cannot connect to database')
    texts = [repr(a), a.describe(), repr(a.connmanager),
             a.connmanager.describe(), str(caught.value)]
    assert not [t for t in texts if 's3cret' in t]
