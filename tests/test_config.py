"""Configuration: ZConfig and the Python API accept the same options, and a
bad value fails at start-up naming the key and the value."""
import os
import sys

import pytest
import transaction
import ZConfig
import ZODB.config

from backends import query
from relstorage.errors import ConfigurationError
from relstorage.errors import SchemaError
from relstorage.options import IGNORED
from relstorage.options import Options
from relstorage.options import section_keys


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

#: Every key of RelStorage 4.3's <relstorage> section but keep-history
#: (given apart) and its replica keys (given where the database has
#: servers), with values its users write.
RS4_RELSTORAGE = {
    'name': 'rs4-site', 'read-only': 'false', 'shared-blob-dir': 'false',
    'blob-cache-size': '100MB', 'blob-cache-size-check': '10',
    'blob-cache-size-check-external': 'false', 'blob-chunk-size': '1MB',
    'poll-interval': '0', 'pack-gc': 'true', 'pack-prepack-only': 'false',
    'pack-skip-prepack': 'false', 'pack-batch-timeout': '1.0',
    'pack-commit-busy-delay': '5.0', 'cache-servers': 'localhost:11211',
    'cache-module-name': 'relstorage.pylibmc_wrapper',
    'cache-prefix': 'zodb', 'cache-local-mb': '10',
    'cache-local-storage': 'relstorage.cache.local_client.LocalClient',
    'cache-local-dir-count': '20', 'cache-local-dir-read-count': '10',
    'cache-local-dir-compress': 'true',
    'cache-local-dir-write-max-size': '10MB',
    'cache-local-object-max': '16KB', 'cache-local-compression': 'bz2',
    'cache-delta-size-limit': '20000', 'commit-lock-timeout': '30',
    'commit-lock-id': '0', 'create-schema': 'true',
}
#: RelStorage 4.3's keys of the adapter sections beyond those every
#: configuration has.
RS4_ADAPTER = {
    'sqlite3': ['gevent_yield_interval 100', '<pragmas>',
                'cache_size 10MB', 'mmap_size 1GB', 'page_size 4096',
                'max_page_count 1073741823', 'threads 0',
                'wal_autocheckpoint 1000', 'soft_heap_limit 0',
                'journal_size_limit 1000000', '</pragmas>'],
    'mysql': ['compress true', 'named_pipe false'],
    'postgresql': [],
}


def test_a_relstorage_4_configuration_opens_unchanged(backend, database,
                                                       tmp_path, caplog):
    for directory in ('blobs', 'cache'):
        (tmp_path / directory).mkdir()
    replica_keys = {}
    if hasattr(backend, 'server'):
        host, port = backend.server()
        listing = tmp_path / 'replicas.conf'
        listing.write_text(f'# the primary\n{host}:{port}\n')
        replica_keys = {'replica-conf': listing, 'ro-replica-conf': listing,
                        'replica-timeout': '600',
                        'revert-when-stale': 'false'}
    text = backend.zconfig(
        database, True, blob_dir=tmp_path / 'blobs',
        cache_local_dir=tmp_path / 'cache', **RS4_RELSTORAGE,
        **replica_keys)
    section = next(name for name in RS4_ADAPTER if f'</{name}>' in text)
    text = text.replace(f'    </{section}>', ''.join(
        f'        {line}\n' for line in RS4_ADAPTER[section]) +
        f'    </{section}>')
    caplog.set_level('WARNING')
    storage = _open(text)
    try:
        db = ZODB.DB(storage)
        conn = db.open()
        conn.root()['x'] = 1
        transaction.commit()
        conn.close()
        db.close()
        warned = [r.getMessage() for r in caplog.records]
        for key in IGNORED:
            said = [w for w in warned if f'option {key} (RelStorage 4)' in w]
            assert len(said) == 1, (key, warned)
        assert any('bz2' in w for w in warned), warned
        if section == 'sqlite3':
            assert any('gevent_yield_interval' in w for w in warned)
            assert query(storage, 'PRAGMA cache_size') == [(-10240,)]
            assert query(storage, 'PRAGMA mmap_size') == [(1 << 30,)]
        if section == 'mysql' and 'PyMySQL' in text:
            assert any('compress is ignored' in w for w in warned)
    finally:
        storage.close()
