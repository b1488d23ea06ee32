"""Configuration: ZConfig and the Python API accept the same options, and a
bad value fails at start-up naming the key and the value."""
import os
import sys

import pytest
import transaction
import ZConfig
import ZODB.config

from backends import query
from relstorage.config.options import IGNORED
from relstorage.config.options import Options
from relstorage.config.options import section_keys
from relstorage.errors import ConfigurationError
from relstorage.errors import SchemaError


def _open(text):
    return ZODB.config.storageFromString(text)


def _zconfig(database, relstorage_lines='', sqlite_lines=''):
    return (
        '%import relstorage\n'
        f'<relstorage>\n{relstorage_lines}\n'
        f'  <sqlite3>\n    data-dir {database}\n{sqlite_lines}\n'
        '  </sqlite3>\n'
        '</relstorage>\n')


def test_defaults_come_from_component_xml():
    keys = section_keys('relstorage')
    options = Options()
    assert options.keep_history is True
    assert options.commit_lock_timeout == float(
        keys['commit-lock-timeout'][1])
    assert options.read_only is False
    assert options.create_schema is True


def test_python_api_rejects_unknown_and_bad_options():
    with pytest.raises(ConfigurationError, match='unknown relstorage option'):
        Options(keep_histroy=False)
    with pytest.raises(ConfigurationError,
                       match="commit-lock-timeout: 'soon'"):
        Options(commit_lock_timeout='soon')
    with pytest.raises(ConfigurationError, match="keep-history: 'maybe'"):
        Options(keep_history='maybe')


@pytest.mark.sqlite
def test_zconfig_opens_with_options(tmp_path):
    storage = _open(_zconfig(
        tmp_path, 'keep-history false\n  name my-db\n'
        '  commit-lock-timeout 7.5',
        '    <pragmas>\n      cache_size -2000\n    </pragmas>'))
    try:
        assert storage.getName() == 'my-db'
        assert not storage.supportsUndo()
        assert storage._options.commit_lock_timeout == 7.5
        assert storage._adapter.pragmas == {'cache_size': '-2000'}
    finally:
        storage.close()


@pytest.mark.sqlite
@pytest.mark.parametrize('relstorage_lines, sqlite_lines, words', [
    ('commit-lock-timeout soon', '', ['commit-lock-timeout', "'soon'"]),
    ('keep-history perhaps', '', ['keep-history', "'perhaps'"]),
    ('', '    driver oracle', ['driver', "'oracle'"]),
    ('', '    <pragmas>\n      no_such_pragma 1\n    </pragmas>',
     ['no_such_pragma']),
    ('', '    <pragmas>\n      cache_size 1;drop\n    </pragmas>',
     ['cache_size', '1;drop']),
    ('colour blue', '', ['colour']),
])
def test_bad_zconfig_values_name_key_and_value(
        tmp_path, relstorage_lines, sqlite_lines, words):
    with pytest.raises((ZConfig.ConfigurationError, ConfigurationError)) as e:
        _open(_zconfig(tmp_path, relstorage_lines, sqlite_lines))
    for word in words:
        assert word in str(e.value)


@pytest.mark.sqlite
def test_data_dir_that_is_a_file(tmp_path):
    path = tmp_path / 'file'
    path.write_text('x')
    with pytest.raises(ZConfig.ConfigurationError) as e:
        _open(_zconfig(path))
    assert 'data-dir' in str(e.value) and 'not a directory' in str(e.value)


def test_other_history_mode_is_refused(backend, database):
    backend.open(database, keep_history=True).close()
    with pytest.raises(SchemaError, match='keep-history is false'):
        backend.open(database, keep_history=False)


def test_missing_schema_without_create_schema(backend, database):
    with pytest.raises(SchemaError, match='create-schema'):
        backend.open(database, create_schema=False)


@pytest.mark.sqlite
def test_database_file_location(tmp_path):
    storage = _open(_zconfig(tmp_path / 'new' / 'dir'))
    try:
        assert os.path.exists(tmp_path / 'new' / 'dir' / 'relstorage.sqlite3')
    finally:
        storage.close()


@pytest.mark.postgresql
@pytest.mark.parametrize('driver, module, package', [
    ('psycopg2', 'psycopg2', 'psycopg2-binary'),
    ('psycopg', 'psycopg', 'psycopg[binary]'),
])
def test_missing_postgresql_driver_names_the_package(
        monkeypatch, driver, module, package):
    from relstorage.adapters.postgresql import PostgreSQLAdapter
    monkeypatch.setitem(sys.modules, module, None)   # import fails
    with pytest.raises(ConfigurationError) as e:
        PostgreSQLAdapter(dsn='dbname=x', driver=driver)
    assert 'driver' in str(e.value) and package in str(e.value)


@pytest.mark.postgresql
def test_postgresql_password_never_shown(caplog):
    from relstorage.adapters.postgresql import PostgreSQLAdapter
    from relstorage.storage import RelStorage
    secret = 'pa55-s3cret'
    adapter = PostgreSQLAdapter(
        dsn=f'host=127.0.0.1 port=1 user=zope password={secret} dbname=z',
        driver='psycopg2')
    assert secret not in repr(adapter) + adapter.describe()
    with pytest.raises(Exception) as e:
        RelStorage(adapter)          # nothing listens on port 1
    text = str(e.value) + repr(e.value) + caplog.text
    assert 'port=1' in text and secret not in text
    cause = e.value.__cause__ or e.value.__context__
    assert cause is None or secret not in str(cause)


# -- RelStorage 4 configurations ----------------------------------------------

#: Every key RelStorage 4.3 accepts, spelled as its component.xml spells
#: them (the file says where the list came from).
RS43_KEYS = os.path.join(os.path.dirname(__file__), 'data',
                         'relstorage-4.3-keys.conf')
#: Keys that only a database with servers (PostgreSQL, MySQL) can use.
REPLICA_KEYS = ('replica-conf', 'ro-replica-conf', 'replica-timeout')


def _rs43_keys():
    """``{section: [(key, value), ...]}`` of RS43_KEYS, in its order."""
    sections = {}
    current = None
    with open(RS43_KEYS, encoding='utf-8') as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith('#'):
                continue
            if line.startswith('['):
                current = sections.setdefault(line.strip('[]'), [])
                continue
            key, _, value = line.partition(' ')
            current.append((key, value.strip()))
    return sections


def _rs43_config(section, fill, replicas=True):
    """A configuration with every RelStorage 4.3 key of <relstorage> and of
    the adapter ``section`` (and its <pragmas>, for sqlite3), spelled as
    RelStorage 4.3 spells them; ``fill`` gives the values in braces."""
    keys = _rs43_keys()

    def lines(name, indent):
        return [f'{indent}{key} {value.format(**fill)}'.rstrip()
                for key, value in keys[name]
                if replicas or key not in REPLICA_KEYS]
    text = ['%import relstorage', '<relstorage>']
    text += lines('relstorage', '    ')
    text.append(f'    <{section}>')
    text += lines(section, '        ')
    if section == 'sqlite3':
        text += ['        <pragmas>', *lines('pragmas', '            '),
                 '        </pragmas>']
    text += [f'    </{section}>', '</relstorage>']
    return '\n'.join(text) + '\n'


def _rs43_fill(tmp_path, connection=None):
    """The values in braces: temporary directories, a replica file naming
    ``server`` and an option file, then ``connection``'s keys."""
    for directory in ('blobs', 'cache'):
        (tmp_path / directory).mkdir(exist_ok=True)
    my_cnf = tmp_path / 'my.cnf'
    my_cnf.write_text('[client]\n')
    fill = {'blob_dir': tmp_path / 'blobs', 'cache_dir': tmp_path / 'cache',
            'replica_conf': '', 'driver': 'auto', 'port': 3306,
            'passwd': '', 'unix_socket': '', 'read_default_file': my_cnf,
            'host': '127.0.0.1', 'user': 'zope', 'password': 'secret',
            'db': 'zodb', 'dsn': 'dbname=zodb', 'data_dir': tmp_path / 'db'}
    fill.update((k.replace('-', '_'), v)
                for k, v in (connection or {}).items())
    return fill


def test_a_relstorage_4_configuration_opens_unchanged(backend, database,
                                                       tmp_path, caplog):
    section, connection = backend.section(database)
    fill = _rs43_fill(tmp_path, connection)
    replicas = hasattr(backend, 'server')
    if replicas:
        host, port = backend.server()
        listing = tmp_path / 'replicas.conf'
        listing.write_text(f'# the primary\n{host}:{port}\n')
        fill['replica_conf'] = listing
    text = _rs43_config(section, fill, replicas)
    assert 'revert_when_stale true' in text
    caplog.set_level('WARNING')
    storage = _open(text)
    try:
        db = ZODB.DB(storage)
        conn = db.open()
        conn.root()['x'] = 1
        transaction.commit()
        conn.close()
        db.close()
        # RelStorage 4.3's spelling reached the option (default false).
        assert storage._options.revert_when_stale is True
        warned = [r.getMessage() for r in caplog.records]
        for key in IGNORED:
            said = [w for w in warned if f'option {key} (RelStorage 4)' in w]
            assert len(said) == 1, (key, warned)
        assert any('bz2' in w for w in warned), warned
        if section == 'sqlite3':
            assert any('gevent_yield_interval' in w for w in warned)
            assert query(storage, 'PRAGMA cache_size') == [(-10240,)]
            assert query(storage, 'PRAGMA mmap_size') == [(1 << 30,)]
            assert query(storage, 'PRAGMA journal_size_limit') == [
                (1000000,)]
        if section == 'mysql' and 'PyMySQL' in text:
            assert any('compress is ignored' in w for w in warned)
    finally:
        storage.close()


@pytest.mark.parametrize('section', ['sqlite3', 'postgresql', 'mysql',
                                     'oracle'])
def test_every_relstorage_4_3_key_is_read(tmp_path, section):
    """Without opening anything (Oracle has no server here): every key of
    RS43_KEYS is a key of ours, and its value lands where ours does."""
    import io
    text = _rs43_config(section, _rs43_fill(tmp_path))
    config, _ = ZConfig.loadConfigFile(
        ZODB.config.getStorageSchema(), io.StringIO(text))
    factory = config.storage
    options = Options.from_section(factory.config)
    assert options.revert_when_stale is True
    assert options.name == 'rs43-site'
    assert options.blob_cache_size == 100 << 20
    adapter = factory.config.adapter.config
    keys = _rs43_keys()
    for key, _ in keys[section]:
        assert getattr(adapter, key.replace('-', '_')) is not None, key
    if section == 'mysql':
        assert adapter.connect_timeout == 10
        assert adapter.read_default_group == 'client'
        assert adapter.named_pipe is False
    if section == 'sqlite3':
        assert adapter.gevent_yield_interval == 100
        assert set(adapter.pragmas.pragmas) == {
            key for key, _ in keys['pragmas']}


@pytest.mark.parametrize('ours, theirs, fails', [
    ('true', 'true', False), ('false', 'true', False),
    ('true', 'false', True), (None, 'false', False), ('true', None, False),
])
def test_both_spellings_of_revert_when_stale(tmp_path, ours, theirs, fails):
    import io
    lines = ''.join(f'  {key} {value}\n' for key, value in (
        ('revert-when-stale', ours), ('revert_when_stale', theirs))
        if value is not None)
    text = _zconfig(tmp_path, lines)
    config, _ = ZConfig.loadConfigFile(
        ZODB.config.getStorageSchema(), io.StringIO(text))
    section = config.storage.config
    if fails:
        with pytest.raises(ConfigurationError) as e:
            Options.from_section(section)
        assert 'revert-when-stale' in str(e.value)
        assert 'revert_when_stale' in str(e.value)
    else:
        expected = (theirs or ours) == 'true'
        assert Options.from_section(section).revert_when_stale is expected


def test_the_driver_choice_shared_by_every_adapter():
    from relstorage.adapters.drivers import select_driver

    def missing(package):
        def factory():
            raise ImportError(f'No module named {package!r}')
        factory.package = package
        return factory

    def present(name):
        factory = lambda: name  # noqa: E731
        factory.package = name
        return factory

    drivers = {'first': missing('first-pkg'), 'second': present('second')}
    assert select_driver('auto', drivers, 'Some', 'install one') == 'second'
    assert select_driver('second', drivers, 'Some', 'install one') == 'second'
    with pytest.raises(ConfigurationError) as e:
        select_driver('first', drivers, 'Some', 'install one')
    assert "driver: 'first' is not installed; install first-pkg" in str(
        e.value)
    with pytest.raises(ConfigurationError) as e:
        select_driver('third', drivers, 'Some', 'install one')
    assert str(e.value) == (
        "driver: 'third' is not one of auto, first, second")
    with pytest.raises(ConfigurationError) as e:
        select_driver('auto', {'first': missing('first-pkg')}, 'Some',
                      'install one')
    assert str(e.value).startswith(
        'driver: auto found no Some driver; install one (first: No module')


@pytest.mark.mysql
def test_pymysql_makes_its_default_tls_context_once(monkeypatch):
    """PyMySQL builds a default TLS context (loading the system's CA
    certificates, ~25 ms) for every connection unless told otherwise;
    relstorage makes it once per process, however many storages open."""
    pymysql = pytest.importorskip('pymysql')
    from backends import MySQLBackend
    made = []
    original = pymysql.connections.Connection._create_ssl_ctx

    def counting(self, sslp):
        made.append(sslp)
        return original(self, sslp)

    monkeypatch.setattr(pymysql.connections.Connection, '_create_ssl_ctx',
                        counting)
    backend = MySQLBackend('PyMySQL')
    try:
        database = backend.new_database()
        for _ in range(3):
            backend.open(database).close()
    finally:
        backend.cleanup()
    # At most the first connection of the process made one (an earlier
    # test may have made it already).
    assert len(made) <= 1


def test_json_state_is_a_boolean():
    with pytest.raises(ConfigurationError, match='^json-state: '):
        Options(json_state='maybe')
    assert Options(json_state='yes').json_state is True
